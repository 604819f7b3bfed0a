-- force: release the lock whoever holds it, and pass it to the next waiter.
-- ARGV[1] claim window ms, ARGV[2] fencing counter ttl ms.
-- Returns 1 when the lock was held, else 0.
if redis.call('exists', KEYS[1]) == 0 then return 0 end
local rw = redis.call('hexists', KEYS[1], 'mode') == 1
release_to_next(ARGV[1], ARGV[2])
if rw then
  -- A read-write lock's waiters listen on Redisson's RReadWriteLock channel;
  -- "1" wakes all of them.
  redis.call('publish', redisson_name('redisson_rwlock', KEYS[1]), '1')
end
return 1
