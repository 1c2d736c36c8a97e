-- Idempotency records (the rules of `store::requests::rules`, run here in one atomic step):
-- one hash per (tenant, key digest), and the tenant's index of live
-- records (a zset digest -> expiry ms) that bounds how many it keeps. Time is Redis's own.
-- KEYS[1]  the record (hash: fp, nonce, owner, lock, and once answered status, headers, body)
-- KEYS[2]  the tenant's index
-- ARGV[1]  begin | renew | finish     ARGV[2]  owner (the attempt)     ARGV[3]  the digest
-- begin:   ARGV[4] fingerprint  ARGV[5] proposed nonce  ARGV[6] lock ms  ARGV[7] keep ms
--          ARGV[8] most records per tenant
--          -> {'run', nonce, again 0|1} | {'replay', status, headers, body} | {'mismatch'}
--             | {'busy', ms until the lock expires} | {'full', ms until the oldest expires}
-- renew:   ARGV[4] lock ms  -> 1 if still held by owner, else 0
-- finish:  ARGV[4] status ('' releases the lock)  ARGV[5] headers  ARGV[6] body  -> 1 | 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, owner = ARGV[1], ARGV[2]
if op == 'begin' then
  local r = redis.call('HMGET', KEYS[1], 'fp', 'nonce', 'lock', 'status')
  local lock_ms = tonumber(ARGV[6])
  if not r[1] then
    local keep = tonumber(ARGV[7])
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
    if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[8]) then
      local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
      return {'full', math.max(tonumber(oldest[2]) - now, 1)}
    end
    redis.call('HSET', KEYS[1], 'fp', ARGV[4], 'nonce', ARGV[5], 'owner', owner,
      'lock', now + lock_ms)
    redis.call('PEXPIRE', KEYS[1], keep)
    redis.call('ZADD', KEYS[2], now + keep, ARGV[3])
    redis.call('PEXPIRE', KEYS[2], keep)
    return {'run', ARGV[5], 0}
  end
  if r[1] ~= ARGV[4] then
    return {'mismatch'}
  end
  if r[4] then
    local stored = redis.call('HMGET', KEYS[1], 'status', 'headers', 'body')
    return {'replay', stored[1], stored[2], stored[3]}
  end
  local lock = tonumber(r[3])
  if lock > now then
    return {'busy', lock - now}
  end
  redis.call('HSET', KEYS[1], 'owner', owner, 'lock', now + lock_ms)
  return {'run', r[2], 1}
end
local r = redis.call('HMGET', KEYS[1], 'owner', 'status')
-- Gone (expired) or answered already: the first answer stands.
if r[2] or not r[1] then
  return 0
end
if op == 'renew' then
  if r[1] ~= owner then return 0 end
  redis.call('HSET', KEYS[1], 'lock', now + tonumber(ARGV[4]))
  return 1
end
if ARGV[4] == '' then
  if r[1] ~= owner then return 0 end
  redis.call('HSET', KEYS[1], 'lock', 0)
  return 1
end
redis.call('HSET', KEYS[1], 'status', ARGV[4], 'headers', ARGV[5], 'body', ARGV[6], 'lock', 0)
return 1
