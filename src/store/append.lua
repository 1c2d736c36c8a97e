-- Compare-and-append to one session log (a Redis Stream with ids `<seq>-0`).
-- KEYS[1]  the session's stream; KEYS[2] its markers (a hash: marker name -> 'first last');
--          KEYS[3] their expiry (a zset: marker name -> expiry ms); KEYS[4..] the session's
--          other keys. All of them are the session's: their ttl is kept with the stream's,
--          and a delete removes them.
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
-- Returns '<last_seq> <commit_ms>' when committed (or, for no events, when still current: the
-- time is then the script's), one value for the caller to parse,
-- or {0, last_seq, entries} when the log has moved on or no longer holds the caller's last
-- entry as it was folded (Redis lost data and the log grew back): `entries` starts with the
-- entry at the expected seq (if any), so the caller can tell the two apart. A stream that is
-- gone (deleted, expired) while the caller expects seq N > 0 is such a conflict: an append
-- never brings a session back.
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
-- The log's last seq and commit time as their decimal strings (ids are `<seq>-0`), compared as
-- strings with the caller's (ARGV[1], ARGV[5] and ARGV[6] are plain decimals: no sign, no
-- leading zero). A commit converts one number, its first new seq: Lua's tonumber goes through
-- strtod, which was a tenth of this script's instructions when every number was converted.
local head = '0'
local prev_ts = nil
if #last > 0 then
  head = string.match(last[1][1], '^(%d+)')
  local fields = last[1][2]
  -- Written as type, agent, data, ts, v: the fourth name, unless an earlier one is `ts` too.
  if fields[7] == 'ts' and fields[1] ~= 'ts' and fields[3] ~= 'ts' and fields[5] ~= 'ts' then
    prev_ts = fields[8]
  else
    for i = 1, #fields, 2 do
      if fields[i] == 'ts' then
        prev_ts = fields[i + 1]
        break
      end
    end
  end
end
local t = redis.call('TIME')
-- Milliseconds: the seconds, then the first three of the six digits of the microseconds.
local ms = t[1] .. string.sub('00000' .. t[2], -6, -4)
-- Never before the last entry's (decimals of one length compare as strings): a direct append
-- (`append.rs`) stamps its commit with Redis's clock as a replica carries it, which may run a
-- little ahead of this node's.
if prev_ts and #prev_ts == #ms and prev_ts > ms then
  ms = prev_ts
end
local marker = nil
if ARGV[7] ~= '0' then
  marker = ARGV[8]
  local expires = redis.call('ZSCORE', KEYS[3], marker)
  if expires and tonumber(expires) > tonumber(ms) then
    local done = redis.call('HGET', KEYS[2], marker)
    if done then
      return {2, tonumber(head), done}
    end
  end
end
local expected = ARGV[1]
if head ~= expected or (expected ~= '0' and ARGV[5] ~= '0' and prev_ts ~= ARGV[5]) then
  local seq, want = tonumber(head), tonumber(expected)
  local entries = {}
  if seq >= want and want > 0 then
    entries = redis.call('XRANGE', KEYS[1], expected .. '-0', '+', 'COUNT', 513)
  elseif seq > want then
    entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 512)
  end
  return {0, seq, entries}
end
local seq = tonumber(head)
local wrote = #ARGV >= 10
for i = 10, #ARGV, 3 do
  seq = seq + 1
  redis.call('XADD', KEYS[1], string.format('%d', seq) .. '-0',
    'type', ARGV[i], 'agent', ARGV[i + 1], 'data', ARGV[i + 2], 'ts', ms, 'v', ARGV[2])
end
-- Reads never extend a session's life; every write does, for all of its keys: each is set to
-- expire the retention after the write, give or take a window of a second (a hundredth of a
-- retention under 100 s). A session written many times a second refreshes its keys with the
-- first write of each window (its last entry was committed in an earlier one), not once per
-- write; a write that sets a marker always does (the marker may have made its keys just now).
-- (Keys whose TTL something else removed get it back with the first write of the next window.)
if wrote then
  local keep = ARGV[6]
  local fresh = false
  if expected ~= '0' and prev_ts then
    if keep == '0' or #keep > 5 then
      -- A window of a second: the same second if all but the last three digits agree.
      fresh = string.sub(prev_ts, 1, -4) == t[1]
    else
      local window = math.max(1, math.floor(tonumber(keep) / 100))
      fresh = math.floor(tonumber(prev_ts) / window) == math.floor(tonumber(ms) / window)
    end
  end
  if marker then
    -- A few expired markers go with each new one, so the hash holds about the live ones.
    local now = tonumber(ms)
    local old = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 8)
    if #old > 0 then
      redis.call('HDEL', KEYS[2], unpack(old))
      redis.call('ZREM', KEYS[3], unpack(old))
    end
    redis.call('HSET', KEYS[2], marker, string.format('%d %d', tonumber(expected) + 1, seq))
    redis.call('ZADD', KEYS[3], now + tonumber(ARGV[7]), marker)
  end
  for i = 1, (fresh and not marker) and 0 or #KEYS do
    if keep == '0' then
      redis.call('PERSIST', KEYS[i])
    else
      redis.call('PEXPIRE', KEYS[i], ARGV[6])
    end
  end
end
-- Every replica subscribed to the session learns of the commit in the same round trip, in
-- commit order; a subscriber that sees a gap reads it from the stream.
if ARGV[3] ~= '' and wrote then
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
return string.format('%d ', seq) .. ms
