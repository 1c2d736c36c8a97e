-- Moves a counted member's expiry to ttl ms from now, on Redis's own clock.
-- KEYS[1]  zset member -> expiry (ms)
-- ARGV[1]  member   ARGV[2]  ttl in ms   ARGV[3]  `add` (bring an expired member back) or
--          `xx` (only a member still in the set: a deleted session stays deleted)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = now + tonumber(ARGV[2])
if ARGV[3] == 'xx' then
  return redis.call('ZADD', KEYS[1], 'XX', 'CH', expiry, ARGV[1])
end
return redis.call('ZADD', KEYS[1], expiry, ARGV[1])
