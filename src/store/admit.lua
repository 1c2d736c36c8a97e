-- Admission into a tenant's counted set (live sessions, running turns, open streams): each
-- member scored by its expiry in ms, on Redis's own clock. A member past its expiry no longer
-- counts, whether or not it was removed yet (a crashed replica's turns and streams stop
-- counting by themselves).
-- KEYS[1]  zset member -> expiry (ms)
-- KEYS[2]  sessions only: zset member -> creation order (µs on Redis's clock, unique per
--          tenant, so a list page can resume after any member); it holds the members of
--          KEYS[1] and loses them with it
-- ARGV[1]  member   ARGV[2]  ttl in ms (0: never expires)   ARGV[3]  most live members
-- Returns {1} when admitted (or already a live member: its expiry moves), else
-- {0, live members, ms until the soonest of them expires (-1: none ever does)}.
local never = 1e15
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local member, ttl, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
-- Bounded cleanup per call; the count below ignores whatever expired members remain.
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, 32)
if #stale > 0 then
  redis.call('ZREM', KEYS[1], unpack(stale))
  if KEYS[2] then redis.call('ZREM', KEYS[2], unpack(stale)) end
end
local expiry = never
if ttl > 0 then expiry = now + ttl end
local held = redis.call('ZSCORE', KEYS[1], member)
if held and tonumber(held) >= now then
  redis.call('ZADD', KEYS[1], expiry, member)
  return {1}
end
local live = redis.call('ZCOUNT', KEYS[1], now, '+inf')
if live >= max then
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local wait = -1
  if first[2] and tonumber(first[2]) < never then wait = tonumber(first[2]) - now end
  return {0, live, wait}
end
redis.call('ZADD', KEYS[1], expiry, member)
if KEYS[2] then
  -- Later than every member so far, even within one µs or after a clock step back.
  local order = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.call('ZREVRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= order then order = tonumber(last[2]) + 1 end
  redis.call('ZADD', KEYS[2], string.format('%.0f', order), member)
end
return {1}
