-- One page of a tenant's live sessions, newest first: members of the creation order (KEYS[1])
-- that the counted set (KEYS[2]) still holds unexpired. Members found deleted or expired are
-- dropped from both sets on the way, so the list and the quota always agree and a later page
-- does not meet them again. Bounded: at most ARGV[3] reads of ARGV[2] + 1 members.
-- KEYS[1]  zset member -> creation order (unique scores)
-- KEYS[2]  zset member -> expiry (ms)
-- ARGV[1]  resume before this order (exclusive), or '+inf' for the first page
-- ARGV[2]  page size   ARGV[3]  most reads
-- Returns {more (0/1), resume order ('' when done), member, order, expiry, member, ...}:
-- `resume` is where the next page starts, after the last member examined.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit, reads = tonumber(ARGV[2]), tonumber(ARGV[3])
local before = ARGV[1]
if before ~= '+inf' then before = '(' .. before end
local out, found, resume = {}, 0, ''
for _ = 1, reads do
  local batch = redis.call('ZREVRANGEBYSCORE', KEYS[1], before, '-inf', 'WITHSCORES', 'LIMIT', 0, limit + 1)
  if #batch == 0 then return {0, '', unpack(out)} end
  local members = {}
  for i = 1, #batch, 2 do members[#members + 1] = batch[i] end
  local expiries = redis.call('ZMSCORE', KEYS[2], unpack(members))
  local dead = {}
  for j, member in ipairs(members) do
    local order, expiry = batch[2 * j], expiries[j]
    if expiry and tonumber(expiry) >= now then
      if found == limit then
        -- One more live member than the page holds: there is a next page.
        if #dead > 0 then
          redis.call('ZREM', KEYS[1], unpack(dead))
          redis.call('ZREM', KEYS[2], unpack(dead))
        end
        return {1, resume, unpack(out)}
      end
      found = found + 1
      out[#out + 1] = member
      out[#out + 1] = order
      out[#out + 1] = expiry
    else
      dead[#dead + 1] = member
    end
    resume = order
  end
  if #dead > 0 then
    redis.call('ZREM', KEYS[1], unpack(dead))
    redis.call('ZREM', KEYS[2], unpack(dead))
  end
  if #batch < 2 * (limit + 1) then return {0, '', unpack(out)} end
  before = '(' .. resume
end
-- Out of reads among deleted and expired members: the caller resumes after the last one seen.
return {1, resume, unpack(out)}
