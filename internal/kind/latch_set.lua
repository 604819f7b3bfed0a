-- A count-down latch's TrySetCount, in Redisson's RCountDownLatch layout:
-- the count is a string named by the latch. dlock adds a marker beside it,
-- with the same TTL, by which discovery finds the latch (a plain string
-- cannot be told from others): it holds "<count first set> <call id>".
--
-- The call's id makes the call safe to resend: go-redis and dlock's wire
-- resend a call whose reply was lost, and the resend, finding the marker its
-- own call wrote, answers 1 as that call did. Any other call finds the latch
-- existing and answers 0. A resend that comes after the latch was counted
-- down to zero finds the marker among the latch's count-downs, where
-- latch_down.lua put it at zero, and answers 1 without arming the latch
-- again: its caller would wait for a count nobody counts down.
--
-- KEYS[1] the count, KEYS[2] the latch's marker, KEYS[3] the ids of its
-- count-downs (latch_down.lua).
-- ARGV[1] the count to set, ARGV[2] its TTL in ms, ARGV[3] the latch's
-- channel (not a key: it may hash to another Cluster slot), ARGV[4] this
-- call's id (unique per call, without spaces).
--
-- Returns 1 when this call set the count (now or when first sent), 0 when
-- the latch exists otherwise (unchanged).
local mark = ARGV[1] .. ' ' .. ARGV[4]
if redis.call('exists', KEYS[1]) == 1 then
  -- pcall: a key of another type at the marker's name is no mark of ours.
  if redis.pcall('get', KEYS[2]) == mark then
    return 1
  end
  return 0
end
-- pcall: a key of another type there holds no id of ours.
if redis.pcall('sismember', KEYS[3], mark) == 1 then
  return 1 -- set by this call, and counted down to zero since
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
redis.call('set', KEYS[2], mark, 'px', ARGV[2])
-- Redisson's "new count" message: waiters read the count again.
redis.pcall('publish', ARGV[3], '1')
return 1
