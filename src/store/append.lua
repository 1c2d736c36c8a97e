-- Compare-and-append to one session log (a Redis Stream with ids `<seq>-0`).
-- KEYS[1]  the session's stream; KEYS[2] its markers (a hash: marker name -> 'first last');
--          KEYS[3] their expiry (a zset: marker name -> expiry ms); KEYS[4] its head: the seq
--          and commit time of the stream's last entry and the stream's length then
--          ('<seq> <ms> <entries>'), which only this script writes, in the same step as the
--          entry (reading it costs a fraction of reading the entry); KEYS[5..] the session's
--          other keys. All of them are the session's: their
--          ttl is kept with the stream's, and a delete removes them.
-- ARGV[1]  the seq the caller's decision was based on (0: the session must not exist yet)
-- ARGV[2]  schema version
-- ARGV[3]  the session's live channel to publish committed events on ('' for none)
-- ARGV[4]  the published message up to its commit time, as the caller encoded it
--          (`{"sid":…,"first":…,"ms":"`): the script only adds the time and ARGV[9]
-- ARGV[5]  the commit time (ms) of the entry at the expected seq, as the caller folded it
--          ('0': not checked)
-- ARGV[6]  the session's retention (ms): a commit sets every key of the session to expire
--          that long after it ('0': never)
-- ARGV[7]  for one commit of a keyed request (`Idempotency-Key`): how long its marker is kept
--          (ms); '0': no marker. If the marker exists, that request committed already:
--          nothing is appended or checked, and the reply is {2, last_seq, 'first last'} (the
--          seqs it committed then). Otherwise a commit of events sets it to 'first last'.
-- ARGV[8]  the marker's name ('' when ARGV[7] is '0')
-- ARGV[9]  the rest of the published message (`","events":[[type, agent, data], …]}`), or ''
--          for the script to encode the events itself (a large batch: its payloads are then
--          sent once, not twice)
-- ARGV[10..] per event: type, agent, data
-- Returns the session's head, '<last_seq> <commit_ms> <entries>', when committed (or, for no
-- events, when still current), or {0, last_seq, entries} when the log has moved on or no longer
-- holds the caller's last entry as it was folded (Redis lost data and the log grew back):
-- `entries` starts with the entry at the expected seq (if any), so the caller can tell the two
-- apart. A stream that is gone (deleted, expired) while the caller expects seq N > 0 is such a
-- conflict: an append never brings a session back.
--
-- The head (KEYS[4]) also holds how many entries the stream had then, and is trusted only
-- while the stream's length (`XLEN`, 0 for a stream that is gone) is still that: a trim, an
-- entry lost from the stream alone or one added by a writer that keeps no head (a replica of
-- an earlier build) changes it, and then the stream's own last entry decides. The first entry
-- also goes in with the id right after the head's, which Redis refuses if the stream has
-- moved past the head even at an unchanged length; a head that disagrees with the stream is
-- removed and the next commit writes it again. Redis loses keys together (a failover, an
-- AOF or RDB restore roll the head back with its stream); what no check here sees is the
-- stream key alone put back to an earlier state of the same length (restore it with its head,
-- or delete the head: it is rebuilt from the stream).
local function ts_of(entry)
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'ts' then return fields[i + 1] end
  end
end
-- The stream's last entry: its seq (0: none) and commit time.
local function tail()
  local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  if #last == 0 then return 0, nil end
  return tonumber(string.match(last[1][1], '^(%d+)')), ts_of(last[1])
end
local function head_of(seq, ts, len)
  return string.format('%d ', seq) .. ts .. string.format(' %d', len)
end
-- A call without events (rare: the caller checks the head itself first) reads the stream.
local wrote = #ARGV >= 10
local head = wrote and redis.call('GET', KEYS[4])
local len = redis.call('XLEN', KEYS[1])
local seq, prev_ts
if head then
  local s, ts, n = string.match(head, '^(%d+) (%d+) (%d+)$')
  if s and tonumber(n) == len and len > 0 then
    seq, prev_ts = tonumber(s), ts
  end
end
local trusted = seq ~= nil
if not trusted then
  seq, prev_ts = tail()
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local marker = nil
if ARGV[7] ~= '0' then
  marker = ARGV[8]
  local expires = redis.call('ZSCORE', KEYS[3], marker)
  if expires and tonumber(expires) > now then
    local done = redis.call('HGET', KEYS[2], marker)
    if done then
      return {2, seq, done}
    end
  end
end
local expected = tonumber(ARGV[1])
-- What the caller missed, from the stream itself (never from the head).
local function conflict()
  seq, prev_ts = tail()
  if head and (seq == 0 or head ~= head_of(seq, prev_ts, len)) then
    redis.call('DEL', KEYS[4])
  end
  local entries = {}
  if seq >= expected and expected > 0 then
    entries = redis.call('XRANGE', KEYS[1], string.format('%d', expected) .. '-0', '+', 'COUNT', 513)
  elseif seq > expected then
    entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 512)
  end
  return {0, seq, entries}
end
local replaced = seq == expected and expected > 0 and ARGV[5] ~= '0' and prev_ts ~= ARGV[5]
if seq ~= expected or replaced then
  return conflict()
end
if not wrote then
  return head_of(seq, prev_ts or '0', len)
end
local ms = string.format('%d', now)
for i = 10, #ARGV, 3 do
  seq = seq + 1
  local id = string.format('%d', seq) .. '-0'
  if i == 10 and expected > 0 then
    -- Nothing is written yet: a stream that is gone (false) or has moved past the head (the
    -- id is not after its last) is a conflict, decided by the stream; any other refusal (out
    -- of memory) is the caller's error.
    local added = redis.pcall('XADD', KEYS[1], 'NOMKSTREAM', id,
      'type', ARGV[i], 'agent', ARGV[i + 1], 'data', ARGV[i + 2], 'ts', ms, 'v', ARGV[2])
    if type(added) == 'table' and added.err then
      if not string.find(added.err, 'equal or smaller', 1, true) then
        return redis.error_reply(added.err)
      end
      return conflict()
    elseif not added then
      return conflict()
    end
  else
    redis.call('XADD', KEYS[1], id,
      'type', ARGV[i], 'agent', ARGV[i + 1], 'data', ARGV[i + 2], 'ts', ms, 'v', ARGV[2])
  end
  len = len + 1
end
-- Its ttl stays the stream's: a new head gets it with the others' below.
redis.call('SET', KEYS[4], head_of(seq, ms, len), 'KEEPTTL')
-- Reads never extend a session's life; every write does, for all of its keys: each is set to
-- expire the retention after the write, give or take a window of a second (a hundredth of a
-- retention under 100 s). A session written many times a second refreshes its keys with the
-- first write of each window (its last entry was committed in an earlier one), not once per
-- write; a write that sets a marker always does (the marker may have made its keys just now).
-- (Keys whose TTL something else removed get it back with the first write of the next window.)
local keep = tonumber(ARGV[6])
local window = keep == 0 and 1000 or math.max(1, math.min(1000, math.floor(keep / 100)))
local prev = tonumber(prev_ts or '-1')
local fresh = trusted and expected > 0 and prev >= 0 and math.floor(prev / window) == math.floor(now / window)
if marker then
  -- A few expired markers go with each new one, so the hash holds about the live ones.
  local old = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 8)
  if #old > 0 then
    redis.call('HDEL', KEYS[2], unpack(old))
    redis.call('ZREM', KEYS[3], unpack(old))
  end
  redis.call('HSET', KEYS[2], marker, string.format('%d %d', expected + 1, seq))
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[7]), marker)
end
for i = 1, (fresh and not marker) and 0 or #KEYS do
  if keep == 0 then
    redis.call('PERSIST', KEYS[i])
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[6])
  end
end
-- Every replica subscribed to the session learns of the commit in the same round trip, in
-- commit order; a subscriber that sees a gap reads it from the stream.
if ARGV[3] ~= '' then
  local rest = ARGV[9]
  if rest == '' then
    local events = {}
    for i = 10, #ARGV, 3 do
      events[#events + 1] = {ARGV[i], ARGV[i + 1], ARGV[i + 2]}
    end
    rest = '","events":' .. cjson.encode(events) .. '}'
  end
  redis.call('PUBLISH', ARGV[3], ARGV[4] .. ms .. rest)
end
return head_of(seq, ms, len)
