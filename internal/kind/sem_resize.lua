-- sem_resize: set the number of permits (SetPermits). Growing grants the
-- queued waiters that now fit, first first, and wakes them; shrinking takes
-- nothing from the holders: new permits wait until those held fall below
-- the new size, and a queued waiter for more than it is woken to fail.
-- ARGV[1] the new size, ARGV[2] queue ttl ms, ARGV[3] claim window ms.
-- The size lives as long as the permits and the queue, and at least the
-- queue TTL. Returns {the old size (0: none), the permits held}.
local size, qttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
-- Expired permits are reaped last (sem_lib.lua's here). The set's TTL
-- counts only while a live permit is in it: without one, the reap deletes
-- the set, which then has no TTL to count.
local held = held_weight(now)
local old = tonumber(redis.call('get', KEYS[2]) or '0')
local pt = -2
if held > 0 then pt = redis.call('pttl', KEYS[1]) end
local ttl = math.max(qttl, pt, redis.call('pttl', KEYS[3]))
redis.call('set', KEYS[2], size, 'PX', ttl)
local _, after = grant_queued(now, size, held, ARGV[3], nil, true)
reap(now)
return {old, after}
