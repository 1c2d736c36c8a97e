-- A tenant's webhook endpoints and their delivery records. Every key is the tenant's
-- (`{t:<tenant>}`).
-- KEYS[1]  hash: endpoint id -> endpoint JSON
-- KEYS[2]  (remove, record) hash: delivery id -> record JSON, `<id>:a` -> its attempts (JSON lines)
-- KEYS[3]  (remove, record) zset of the endpoint's deliveries, score 0, member
--          `<created ms, 13 digits>:<delivery id>`: lexicographic order is age order
-- ARGV[1]  create | remove | record
--   create  ARGV[2] endpoint id   ARGV[3] endpoint JSON   ARGV[4] most endpoints per tenant
--   remove  ARGV[2] endpoint id
--   record  ARGV[2] endpoint id   ARGV[3] delivery id   ARGV[4] order member   ARGV[5] record JSON
--           ARGV[6] attempt JSON or ''   ARGV[7] '1': create only   ARGV[8] records kept
--           ARGV[9] attempts kept
local op = ARGV[1]
if op == 'create' then
  -- 2: a keyed retry of a creation that was made; 0: the tenant has the most it may.
  if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then return 2 end
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  return 1
elseif op == 'remove' then
  local n = redis.call('HDEL', KEYS[1], ARGV[2])
  if n == 1 then redis.call('DEL', KEYS[2], KEYS[3]) end
  return n
elseif op == 'record' then
  -- A job finishing after its endpoint was deleted leaves no record behind.
  if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then return 0 end
  local id = ARGV[3]
  if ARGV[7] == '1' then
    if redis.call('HSETNX', KEYS[2], id, ARGV[5]) == 0 then return 0 end
  else
    redis.call('HSET', KEYS[2], id, ARGV[5])
  end
  if ARGV[6] ~= '' then
    local lines = {}
    local old = redis.call('HGET', KEYS[2], id .. ':a')
    if old then
      for l in string.gmatch(old, '[^\n]+') do table.insert(lines, l) end
    end
    table.insert(lines, ARGV[6])
    local kept = {}
    for i = math.max(1, #lines - tonumber(ARGV[9]) + 1), #lines do
      table.insert(kept, lines[i])
    end
    redis.call('HSET', KEYS[2], id .. ':a', table.concat(kept, '\n'))
  end
  redis.call('ZADD', KEYS[3], 0, ARGV[4])
  local over = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[8])
  if over > 0 then
    for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, over - 1)) do
      local gone = string.sub(m, 15)
      redis.call('HDEL', KEYS[2], gone, gone .. ':a')
    end
    redis.call('ZREMRANGEBYRANK', KEYS[3], 0, over - 1)
  end
  return 1
end
return redis.error_reply('unknown webhook op ' .. op)
