-- A request-rate bucket per API key (GCRA), on Redis's own clock so replicas' clocks do not
-- matter. Room for one second's worth: N replicas sharing it never pass rate x seconds + rate.
-- KEYS[1]  the key's theoretical arrival time of its next request (microseconds)
-- ARGV[1]  requests per second      ARGV[2]  requests wanted now (a replica takes a batch)
-- Returns {granted, remaining, ms until one more would be granted, ms until the bucket is full}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate = math.max(tonumber(ARGV[1]), 1)
local wanted = tonumber(ARGV[2])
local interval = 1000000 / rate
local room = 1000000
local base = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local free = math.max(math.floor((now + room - base) / interval + 1e-9), 0)
local granted = math.min(free, wanted)
local tat = base + granted * interval
local remaining = math.max(math.floor((now + room - tat) / interval + 1e-9), 0)
local retry = 0
if remaining < 1 then retry = math.max(tat + interval - room - now, 0) end
local reset = math.max(tat - now, 0)
if granted > 0 then
  -- Gone once full again: an idle key costs nothing.
  redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil(reset / 1000) + 1000)
end
return {granted, remaining, math.ceil(retry / 1000), math.ceil(reset / 1000)}
