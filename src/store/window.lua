-- Provider calls a tenant made in its current window. A window starts with its first call and
-- lasts ARGV[1] ms (the counter's expiry), so every replica counts into the same one.
-- KEYS[1]  the call counter
-- ARGV[1]  window length in ms   ARGV[2]  most calls per window
-- Returns {1, calls} when this call was counted, else {0, calls, ms until the window ends}.
local window, max = tonumber(ARGV[1]), tonumber(ARGV[2])
local calls = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then
  -- A counter without an expiry would close the window forever.
  redis.call('PEXPIRE', KEYS[1], window)
  ttl = window
end
if calls >= max then
  if ttl < 0 then ttl = window end
  return {0, calls, ttl}
end
calls = redis.call('INCR', KEYS[1])
if calls == 1 then redis.call('PEXPIRE', KEYS[1], window) end
return {1, calls}
