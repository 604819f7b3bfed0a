-- sem_release: give a permit back; the freed permit goes straight to the
-- first queued waiter (or, with nobody queued, "0" is published on
-- ARGV[3], the semaphore's free channel).
-- ARGV[1] permit id, ARGV[2] claim window ms, ARGV[3] free channel.
-- Returns {1} when the permit was held, {0} when it was not (it expired, or
-- this is a resent release: permit ids are never reused, so a resend frees
-- nothing more).
local now = now_ms()
local removed = redis.call('zrem', KEYS[1], ARGV[1])
reap(now)
local size = tonumber(redis.call('get', KEYS[2]) or '0')
local held = redis.call('zcard', KEYS[1])
local queued = redis.call('exists', KEYS[3]) == 1
if size > 0 and queued then
  local _, h, emptied = grant_queued(now, size, held, ARGV[2], nil)
  held = h
  if emptied then queued = false end
end
if held == 0 and not queued then
  -- Idle: the number of permits may change now.
  redis.call('del', KEYS[2])
end
if removed == 1 and not queued then redis.pcall('publish', ARGV[3], '0') end
return {removed}
