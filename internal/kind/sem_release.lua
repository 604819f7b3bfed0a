-- sem_release: give a permit (of one or more permits) back; the freed
-- permits go straight to the queued waiters that fit, first first (or, with
-- nobody queued, "0" is published on ARGV[3], the semaphore's free channel).
-- ARGV[1] permit id, ARGV[2] claim window ms, ARGV[3] free channel.
-- Returns {1} when the permit was held, {0} when it was not (it expired, or
-- this is a resent release: permit ids are never reused, so a resend frees
-- nothing more).
local now = now_ms()
local removed = redis.call('zrem', KEYS[1], ARGV[1])
reap(now)
local size = tonumber(redis.call('get', KEYS[2]) or '0')
if size > 0 then grant_queued(now, size, held_weight(), ARGV[2], nil) end
-- The size stays until its TTL ends: only SetPermits changes it.
if removed == 1 and redis.call('exists', KEYS[3]) == 0 then redis.pcall('publish', ARGV[3], '0') end
return {removed}
