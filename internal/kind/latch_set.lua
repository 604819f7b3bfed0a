-- A count-down latch's TrySetCount, in Redisson's RCountDownLatch layout:
-- the count is a string named by the latch. dlock adds a marker beside it,
-- with the same TTL, by which discovery finds the latch (a plain string
-- cannot be told from others): it holds the count first set.
--
-- KEYS[1] the count, KEYS[2] the latch's marker.
-- ARGV[1] the count to set, ARGV[2] its TTL in ms, ARGV[3] the latch's
-- channel (not a key: it may hash to another Cluster slot).
--
-- Returns 1 when it set the count, 0 when the latch exists (unchanged).
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
redis.call('set', KEYS[2], ARGV[1], 'px', ARGV[2])
-- Redisson's "new count" message: waiters read the count again.
redis.pcall('publish', ARGV[3], '1')
return 1
