-- release: undo one hold of a reentrant lock, or all of them.
-- KEYS[4] the forced set dlock:forced:{name}
-- ARGV[1] owner field
-- ARGV[2] the hold count the caller believes it has
-- ARGV[3] hand-off claim window in ms
-- ARGV[4] fencing counter ttl in ms
-- ARGV[5] '1' to drop every hold of this owner at once
-- ARGV[6] the hold's fencing token
-- Returns {1, remaining count}, or {0, why} when the caller holds nothing
-- (why_gone's code).
--
-- A resent call must not decrement twice: a non-final decrement is recognised
-- by the count being one less than expected. A resent final release finds the
-- field gone with the code GONE; owner fields are never reused, so the caller,
-- whose hold could not have expired yet, knows it was its own release.
local cnt = redis.call('hget', KEYS[1], ARGV[1])
if not cnt then
  return {0, why_gone(KEYS[2], KEYS[4], ARGV[1], ARGV[6], ARGV[4])}
end
cnt = tonumber(cnt)
local expected = tonumber(ARGV[2])
if ARGV[5] ~= '1' then
  -- Checked before anything else: a resent 2 -> 1 finds count 1, which must
  -- not read as a final release.
  if expected > 1 and cnt == expected - 1 then return {1, cnt} end
  if cnt > 1 then return {1, redis.call('hincrby', KEYS[1], ARGV[1], -1)} end
end
release_to_next(ARGV[3], ARGV[4])
return {1, 0}
