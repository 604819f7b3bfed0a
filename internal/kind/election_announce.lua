-- election_announce: a new leader states its value. KEYS[1] the election's
-- lock hash; ARGV[1] the leader's owner field, ARGV[2] its fencing token
-- (its term), ARGV[3] its value, ARGV[4] the election's changes channel.
-- The value is kept in the lock hash itself (field "leader", keys.LeaderField),
-- so it lives exactly as long as the hold: a release, a hand-off (which
-- rewrites the hash) or expiry removes it. Returns 1, or 0 when the caller
-- no longer holds the lock.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end
local v = ARGV[2] .. ' ' .. ARGV[3]
redis.call('hset', KEYS[1], 'leader', v)
redis.pcall('publish', ARGV[4], 'L ' .. v)
return 1
