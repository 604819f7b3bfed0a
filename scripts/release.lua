-- release: undo one hold of a reentrant lock, or all of them.
-- KEYS[4] the unlock latch dlock:latch:{name}
-- ARGV[1] owner field
-- ARGV[2] the hold count the caller believes it has
-- ARGV[3] request number of this call; the request id is ARGV[1]:ARGV[3]
-- ARGV[4] latch ttl in ms
-- ARGV[5] hand-off claim window in ms
-- ARGV[6] fencing counter ttl in ms
-- ARGV[7] '1' to drop every hold of this owner at once
-- Returns {1, remaining count} or {0} when the caller holds nothing.
--
-- A resent call must not decrement twice: a non-final decrement is recognised
-- by the count being one less than expected; a final release leaves its request
-- id in the latch for a short while, so a resent final release still answers
-- "released" rather than "not held".
local cnt = redis.call('hget', KEYS[1], ARGV[1])
local expected = tonumber(ARGV[2])
if not cnt then
  if redis.call('get', KEYS[4]) == ARGV[1] .. ':' .. ARGV[3] then return {1, 0} end
  return {0}
end
cnt = tonumber(cnt)
if ARGV[7] ~= '1' then
  -- Checked before anything else: a resent 2 -> 1 finds count 1, which must
  -- not read as a final release.
  if expected > 1 and cnt == expected - 1 then return {1, cnt} end
  if cnt > 1 then return {1, redis.call('hincrby', KEYS[1], ARGV[1], -1)} end
end
redis.call('set', KEYS[4], ARGV[1] .. ':' .. ARGV[3], 'PX', ARGV[4])
release_to_next(ARGV[5], ARGV[6])
return {1, 0}
