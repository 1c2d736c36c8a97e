-- Deletes one session: every key it has, and tells the live listeners of every replica
-- subscribed to it, whose streams of the session end.
-- KEYS     the session's keys (KEYS[1] its stream)
-- ARGV[1]  the session's live channel to publish the notice on ('' for none)
-- ARGV[2]  the session id
-- Returns the number of keys removed (0: there was no such session).
local n = redis.call('DEL', unpack(KEYS))
if n > 0 and ARGV[1] ~= '' then
  redis.call('PUBLISH', ARGV[1], 'D ' .. ARGV[2])
end
return n
