-- The live members of a tenant's counted set (e.g. the sessions a tenant-wide event stream
-- follows), on Redis's own clock: a member past its expiry is not live, removed yet or not.
-- KEYS[1]  zset member -> expiry (ms)
-- ARGV[1]  most members to return
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf', 'LIMIT', 0, tonumber(ARGV[1]))
