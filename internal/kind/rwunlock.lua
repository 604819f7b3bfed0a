-- rwunlock: undo one hold of either side of a read-write lock, or all of them.
-- ARGV[1] the field: the owner for the read side, '<owner>:write' for the write side
-- ARGV[2] the hold count the caller believes it has
-- ARGV[3] '1' to drop every hold of this side at once
-- ARGV[4] 'r' or 'w': the side
-- ARGV[5] the hold's fencing token
-- ARGV[6] fencing counter ttl in ms
-- Returns {1, remaining count}, or {0, why} when the caller holds nothing
-- (why_gone's code; a resent final release finds GONE, see release.lua).
--
-- The last reader out publishes '0' (Redisson's unlock message: one waiter,
-- a writer first, may go on); a writer's final release publishes '1'
-- (Redisson's read-unlock message: every waiter may go on).
--
-- rw_purge may have deleted KEYS[1] (every hold in it ended: the caller's
-- is gone too) and emptied KEYS[3], and the ZREM of the caller's deadline
-- may empty KEYS[3]: they are touched after that through here
-- (rwlib.lua), so that a MIGRATING node's refusal of a key the script
-- emptied never aborts a release half-done, its message unsent.
local now = now_ms()
rw_purge(now)
local cnt = here('hget', KEYS[1], ARGV[1])
local expected = tonumber(ARGV[2])
if not cnt then
  return {0, why_gone(KEYS[2], KEYS[5], ARGV[1], ARGV[5], ARGV[6])}
end
cnt = tonumber(cnt)
if ARGV[3] ~= '1' then
  -- A resent 2 -> 1 finds count 1, which must not read as a final release.
  if expected > 1 and cnt == expected - 1 then return {1, cnt} end
  if cnt > 1 then return {1, redis.call('hincrby', KEYS[1], ARGV[1], -1)} end
end
redis.call('hdel', KEYS[1], ARGV[1])
-- Either side's deadline (a downgraded writer has one too).
here('zrem', KEYS[3], ARGV[1])
if ARGV[4] == 'r' then
  if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
    publish(rw_channel(), '0')
  else
    rw_shrink(now)
  end
  return {1, 0}
end
if redis.call('hlen', KEYS[1]) <= 1 then
  redis.call('del', KEYS[1])
else
  -- The writer still has read holds (it downgraded): readers may join.
  redis.call('hset', KEYS[1], 'mode', 'read')
  rw_shrink(now)
end
publish(rw_channel(), '1')
return {1, 0}
