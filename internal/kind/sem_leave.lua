-- sem_leave: a waiter gives up. It leaves the queue; if it is no longer
-- there because a permit was just handed to it (or its attempt was granted
-- and the reply lost), it gives the permit back to the waiters that fit.
-- ARGV[1] queue entry ('' = none), ARGV[2] permit id, ARGV[3] claim window ms.
-- Returns 1 when a permit had to be given back, else 0.
--
-- Expired permits are reaped last, and the permit given back leaves the set
-- after the grants it makes room for, as in sem_release.lua: a set emptied
-- before a grant could not be written while the slot migrates (sem_lib.lua's
-- here). The leaving entry's LREM and ZREM may empty the queue and the seen
-- set; grant_queued reads them through here.
if ARGV[1] ~= '' then
  redis.call('zrem', KEYS[4], ARGV[1])
  if redis.call('lrem', KEYS[3], 1, ARGV[1]) == 1 then
    -- Leaving the head may let the waiters behind it in.
    local now = now_ms()
    local size = tonumber(redis.call('get', KEYS[2]) or '0')
    if size > 0 then grant_queued(now, size, held_weight(now), ARGV[3], nil, true) end
    reap(now)
    return 0
  end
end
if not redis.call('zscore', KEYS[1], ARGV[2]) then return 0 end
local now = now_ms()
local size = tonumber(redis.call('get', KEYS[2]) or '0')
if size > 0 then grant_queued(now, size, held_weight(now, ARGV[2]), ARGV[3], nil, true) end
-- The reap may have taken the permit already (it had expired), emptying
-- the set: here.
reap(now)
here('zrem', KEYS[1], ARGV[2])
return 1
