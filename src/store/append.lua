-- Compare-and-append to session logs (Redis Streams with ids `<seq>-0`), for one session or
-- several at once (group commit across sessions: one call carries the appends a replica has
-- ready; each is checked and applied on its own, in order, as if it were called alone).
-- ARGV[1]  schema version
-- ARGV[2]  how many appends the call carries
-- Then per append, its header and its events; its keys are the next `nkeys` of KEYS:
--   nkeys     how many keys the session has: its stream, its markers (a hash: marker name ->
--             'first last'), their expiry (a zset: marker name -> expiry ms), then any other
--             key of the session. All of them are the session's: their ttl is kept with the
--             stream's, and a delete removes them.
--   expected  the seq the caller's decision was based on (0: the session must not exist yet)
--   channel   the session's live channel to publish committed events on ('' for none)
--   sid       the session id (named in the published message)
--   ts        the commit time (ms) of the entry at the expected seq, as the caller folded it
--             ('0': not checked)
--   ttl       the session's retention (ms): a commit sets every key of the session to expire
--             that long after it ('0': never)
--   keep      for one commit of a keyed request (`Idempotency-Key`): how long its marker is
--             kept (ms); '0': no marker. If the marker exists, that request committed already:
--             nothing is appended or checked, and the result is {2, last_seq, 'first last'}
--             (the seqs it committed then). Otherwise a commit of events sets it to
--             'first last'.
--   marker    the marker's name ('' when keep is '0')
--   count     how many events follow, each as type, agent, data
-- Returns one result per append, in order: {1, last_seq, commit_ms} when committed (or, for no
-- events, when still current), or {0, last_seq, entries} when the log has moved on or no
-- longer holds the caller's last entry as it was folded (Redis lost data and the log grew
-- back): `entries` starts with the entry at the expected seq (if any), so the caller can tell
-- the two apart. A stream that is gone (deleted, expired) while the caller expects seq N > 0
-- is such a conflict: an append never brings a session back.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ms = string.format('%d', now)
local version = ARGV[1]

local function ts_of(entry)
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'ts' then return fields[i + 1] end
  end
end

-- One append: its keys start at KEYS[k], its header at ARGV[a].
local function append(k, a)
  local nkeys = tonumber(ARGV[a])
  local log, marks, expiry = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local expected = tonumber(ARGV[a + 1])
  local channel, sid, ts, ttl, keep, marker = ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
  local first_event = a + 9
  local last_arg = first_event + 3 * tonumber(ARGV[a + 8]) - 1

  local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)
  local seq = 0
  if #last > 0 then
    seq = tonumber(string.match(last[1][1], '^(%d+)'))
  end
  if keep ~= '0' then
    local expires = redis.call('ZSCORE', expiry, marker)
    if expires and tonumber(expires) > now then
      local done = redis.call('HGET', marks, marker)
      if done then
        return {2, seq, done}
      end
    end
  end
  local replaced = seq == expected and expected > 0 and ts ~= '0' and ts_of(last[1]) ~= ts
  if seq ~= expected or replaced then
    local entries = {}
    if seq >= expected and expected > 0 then
      entries = redis.call('XRANGE', log, string.format('%d', expected) .. '-0', '+', 'COUNT', 513)
    elseif seq > expected then
      entries = redis.call('XRANGE', log, '-', '+', 'COUNT', 512)
    end
    return {0, seq, entries}
  end
  local published = {}
  for i = first_event, last_arg, 3 do
    seq = seq + 1
    redis.call('XADD', log, string.format('%d', seq) .. '-0',
      'type', ARGV[i], 'agent', ARGV[i + 1], 'data', ARGV[i + 2], 'ts', ms, 'v', version)
    published[#published + 1] = {ARGV[i], ARGV[i + 1], ARGV[i + 2]}
  end
  -- Reads never extend a session's life; every write does, for all of its keys.
  if #published > 0 then
    if keep ~= '0' then
      -- A few expired markers go with each new one, so the hash holds about the live ones.
      local old = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, 8)
      if #old > 0 then
        redis.call('HDEL', marks, unpack(old))
        redis.call('ZREM', expiry, unpack(old))
      end
      redis.call('HSET', marks, marker, string.format('%d %d', expected + 1, seq))
      redis.call('ZADD', expiry, now + tonumber(keep), marker)
    end
    for i = k, k + nkeys - 1 do
      if ttl == '0' then
        redis.call('PERSIST', KEYS[i])
      else
        redis.call('PEXPIRE', KEYS[i], ttl)
      end
    end
  end
  -- Every replica subscribed to the session learns of the commit in the same round trip, in
  -- commit order; a subscriber that sees a gap reads it from the stream.
  if channel ~= '' and #published > 0 then
    redis.call('PUBLISH', channel, cjson.encode({sid = sid, first = expected + 1, ms = ms, events = published}))
  end
  return {1, seq, ms}
end

local results = {}
local k, a = 1, 3
for n = 1, tonumber(ARGV[2]) do
  results[n] = append(k, a)
  k = k + tonumber(ARGV[a])
  a = a + 9 + 3 * tonumber(ARGV[a + 8])
end
return results
