-- sem_release: give a permit (of one or more permits) back; the freed
-- permits go straight to the queued waiters that fit, first first (or, with
-- nobody queued, "0" is published on ARGV[3], the semaphore's free channel).
-- ARGV[1] permit id, ARGV[2] claim window ms, ARGV[3] free channel.
-- Returns {1} when the permit was held, {0} when it was not (it expired, or
-- this is a resent release: permit ids are never reused, so a resend frees
-- nothing more).
--
-- The caller's permit is taken out of the count first and out of the set
-- last, so that a permit handed on meanwhile finds the set alive and long
-- enough kept (a set emptied by ZREM would be deleted, and made again
-- without a TTL; and, while the slot migrates, refused: sem_lib.lua's
-- here). Expired permits are not reaped here: held_weight counts only live
-- ones, and the next attempt that waits in the queue reaps them.
-- A hand-off's common case is then TIME, GET, ZRANGEBYSCORE, LPOP, ZADD
-- (the grant mark), ZADD, PTTL, RPUSH and PEXPIRE of the waiter's box (or a
-- PUBLISH, to a waiter that does not pop), LPOP (nil, or an emptied queue
-- refused while the slot migrates) and ZREM.
local now = now_ms()
local size = tonumber(redis.call('get', KEYS[2]) or '0')
local empty
if size > 0 then
  local _, _, _, none = grant_queued(now, size, held_weight(now, ARGV[1]), ARGV[2], nil)
  empty = none
else
  empty = redis.call('exists', KEYS[3]) == 0
end
local removed = redis.call('zrem', KEYS[1], ARGV[1])
-- The size stays until its TTL ends: only SetPermits changes it.
if removed == 1 and empty then redis.pcall('publish', ARGV[3], '0') end
return {removed}
