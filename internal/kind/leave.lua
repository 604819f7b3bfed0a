-- leave: a waiter gives up. It leaves the queue; if it is no longer there
-- because the lock was just handed to it, it passes the lock on.
-- ARGV[1] queue entry, ARGV[2] owner field, ARGV[3] claim window ms,
-- ARGV[4] fencing counter ttl ms.
-- Returns 1 when a hand-off had to be passed on, else 0.
if redis.call('lrem', KEYS[3], 1, ARGV[1]) == 1 then return 0 end
if redis.call('hget', KEYS[1], ARGV[2]) then
  release_to_next(ARGV[3], ARGV[4])
  return 1
end
return 0
