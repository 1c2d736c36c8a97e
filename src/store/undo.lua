-- Takes back an entry that a direct append (`append.rs`) wrote on a log that no longer held the
-- caller's last entry (Redis lost entries, and the log was shorter or grew back): the `XADD`
-- went through, the read in the same round trip showed the entry before it was not the one the
-- caller folded. Only while that entry is the log's last and still the caller's (its commit
-- time): then it is deleted and the stream's last id set back to the entry before it, so the
-- next append takes its seq. Returns 1 when taken back, 0 when the entry is gone or not the
-- caller's, -1 when something was appended after it (it stays: it is part of the log now).
-- KEYS[1]  the session's stream
-- ARGV[1]  the entry's id (`<seq>-0`)
-- ARGV[2]  its commit time
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then
  return 0
end
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then
  return 0
end
local fields = found[1][2]
local ts = nil
for i = 1, #fields, 2 do
  if fields[i] == 'ts' then
    ts = fields[i + 1]
    break
  end
end
if ts ~= ARGV[2] then
  return 0
end
if last[1][1] ~= ARGV[1] then
  return -1
end
redis.call('XDEL', KEYS[1], ARGV[1])
-- Redis 7.2 and later refuse to set a stream's last id below its largest deleted id, which the
-- XDEL just raised to this entry's: that is lowered first (nothing else deletes from these
-- streams; '0-1', as '0-0' reads as "not given").
redis.call('XSETID', KEYS[1], ARGV[1], 'MAXDELETEDID', '0-1')
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
-- (A stream left empty takes any id: the next append after nothing is seq 1.)
redis.call('XSETID', KEYS[1], #top > 0 and top[1][1] or '0-1')
return 1
