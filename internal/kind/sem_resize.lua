-- sem_resize: set the number of permits (SetPermits). Growing grants the
-- queued waiters that now fit, first first, and wakes them; shrinking takes
-- nothing from the holders: new permits wait until those held fall below
-- the new size, and a queued waiter for more than it is woken to fail.
-- ARGV[1] the new size, ARGV[2] queue ttl ms, ARGV[3] claim window ms.
-- The size lives as long as the permits and the queue, and at least the
-- queue TTL. Returns {the old size (0: none), the permits held}.
local size, qttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
reap(now)
local old = tonumber(redis.call('get', KEYS[2]) or '0')
local ttl = math.max(qttl, redis.call('pttl', KEYS[1]), redis.call('pttl', KEYS[3]))
redis.call('set', KEYS[2], size, 'PX', ttl)
local _, held = grant_queued(now, size, held_weight(now), ARGV[3], nil, true)
return {old, held}
