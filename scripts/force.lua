-- force: release the lock whoever holds it, and pass it to the next waiter.
-- ARGV[1] claim window ms, ARGV[2] fencing counter ttl ms.
-- Returns 1 when the lock was held, else 0.
if redis.call('exists', KEYS[1]) == 0 then return 0 end
release_to_next(ARGV[1], ARGV[2])
return 1
