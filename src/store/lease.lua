-- Turn leases: which replica runs a turn, until when. Time is Redis's own, so replicas'
-- clocks do not matter.
-- KEYS[1]  zset member -> lease expiry (ms)      KEYS[2]  hash member -> owner
--          (one slot group's: a member is always in the group of its session, and a claim
--          sweeps one group)
-- ARGV[1]  acquire | renew | release | handoff | claim     ARGV[2]  owner     ARGV[3]  ttl (ms)
-- ARGV[4]  the member (a turn), or for claim the most leases to take
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, owner, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if op == 'claim' then
  local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
  for _, m in ipairs(expired) do
    redis.call('ZADD', KEYS[1], now + ttl, m)
    redis.call('HSET', KEYS[2], m, owner)
  end
  return expired
end
local member = ARGV[4]
local holder = redis.call('HGET', KEYS[2], member)
local expiry = redis.call('ZSCORE', KEYS[1], member)
if op == 'acquire' then
  if holder and holder ~= owner and expiry and tonumber(expiry) >= now then return 0 end
  redis.call('ZADD', KEYS[1], now + ttl, member)
  redis.call('HSET', KEYS[2], member, owner)
  return 1
elseif op == 'renew' then
  if holder ~= owner then return 0 end
  redis.call('ZADD', KEYS[1], now + ttl, member)
  return 1
elseif op == 'handoff' then
  -- Expired now: the next sweep of any replica claims it. Held by no one, so a renew the
  -- runner had under way when it let go cannot extend it again.
  if holder ~= owner then return 0 end
  redis.call('ZADD', KEYS[1], 0, member)
  redis.call('HDEL', KEYS[2], member)
  return 1
elseif op == 'release' then
  if holder ~= owner then return 0 end
  redis.call('ZREM', KEYS[1], member)
  redis.call('HDEL', KEYS[2], member)
  return 1
end
return redis.error_reply('unknown lease op ' .. op)
