-- The webhook delivery queue of one slot group: a stream read by one consumer group, and the
-- retries waiting for their time. Every key is the group's (`{wh:<n>}`).
-- KEYS[1]  stream of jobs (field `job`: the job's JSON)
-- KEYS[2]  zset of retries (member: the job's JSON, score: when it is due, ms)
-- KEYS[3]  (enqueue only) the marker of the job's delivery id
-- ARGV[1]  enqueue | take | finish | retry
--   enqueue  ARGV[2] job JSON   ARGV[3] marker ttl (ms)   ARGV[4] stream cap
--   take     ARGV[2] consumer   ARGV[3] most jobs   ARGV[4] claim idle (ms)   ARGV[5] stream cap
--   finish   ARGV[2] entry id
--   retry    ARGV[2] entry id   ARGV[3] job JSON (attempts counted)   ARGV[4] due (ms)
local GROUP = 'senders'
local op = ARGV[1]
local function ensure()
  -- A stream keeps its group while it exists (acked entries are deleted, the stream stays).
  if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('XGROUP', 'CREATE', KEYS[1], GROUP, '0', 'MKSTREAM')
  end
end
if op == 'enqueue' then
  if not redis.call('SET', KEYS[3], '1', 'NX', 'PX', tonumber(ARGV[3])) then return 0 end
  ensure()
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[4], '*', 'job', ARGV[2])
  return 1
elseif op == 'take' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local max = tonumber(ARGV[3])
  local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, max)
  -- An idle poll of a group no job ever reached creates nothing (and costs two reads).
  if #due == 0 and redis.call('EXISTS', KEYS[1]) == 0 then return {} end
  ensure()
  for _, job in ipairs(due) do
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[5], '*', 'job', job)
    redis.call('ZREM', KEYS[2], job)
  end
  local out = {}
  -- Jobs whose replica went quiet for longer than the visibility timeout (it died).
  local claimed = redis.call('XAUTOCLAIM', KEYS[1], GROUP, ARGV[2], ARGV[4], '0-0', 'COUNT', max)
  for _, e in ipairs(claimed[2]) do
    if type(e) == 'table' then table.insert(out, e) end
  end
  if #out < max then
    local read = redis.call('XREADGROUP', 'GROUP', GROUP, ARGV[2], 'COUNT', max - #out,
      'STREAMS', KEYS[1], '>')
    if read then
      for _, e in ipairs(read[1][2]) do table.insert(out, e) end
    end
  end
  return out
elseif op == 'finish' then
  redis.call('XACK', KEYS[1], GROUP, ARGV[2])
  redis.call('XDEL', KEYS[1], ARGV[2])
  return 1
elseif op == 'retry' then
  redis.call('XACK', KEYS[1], GROUP, ARGV[2])
  redis.call('XDEL', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[2], tonumber(ARGV[4]), ARGV[3])
  return 1
end
return redis.error_reply('unknown queue op ' .. op)
