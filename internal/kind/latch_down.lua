-- A count-down latch's CountDown: Redisson's countDown (DECR; at zero or
-- below, DEL; at zero, publish "0"), applied once per call: go-redis resends
-- a script whose reply was lost, and a resent count-down must not count
-- twice. Each call's id is recorded in a set that lives as long as the
-- count (ARGV[3] when the count has no TTL: a latch Redisson set).
--
-- At zero or below the latch's marker (latch_set.lua) goes with the count,
-- and its value (the count set and the id of the call that set it; no
-- count-down id has a space) joins the count-downs' ids: a resend of that
-- TrySetCount finds it there and does not arm the latch again.
--
-- KEYS[1] the count, KEYS[2] the ids of the latch's count-downs, KEYS[3]
-- the latch's marker.
-- ARGV[1] the latch's channel, ARGV[2] this call's id, ARGV[3] the set's
-- TTL in ms when the count has none.
--
-- Returns the count left; 0 when there was no latch, and the count as it
-- is when this call had already counted.
local c = redis.call('get', KEYS[1]) -- fails, changing nothing, on a key of another type
if not c then
  return 0
end
if not string.match(c, '^-?%d+$') then
  return redis.error_reply('ERR the latch ' .. KEYS[1] .. ' holds no count: ' .. c)
end
if redis.call('sadd', KEYS[2], ARGV[2]) == 0 then
  return tonumber(c)
end
local ttl = redis.call('pttl', KEYS[1])
if ttl <= 0 then
  ttl = ARGV[3]
end
redis.call('pexpire', KEYS[2], ttl)
local v = redis.call('decr', KEYS[1])
if v <= 0 then
  local m = redis.pcall('get', KEYS[3])
  if type(m) == 'string' then redis.call('sadd', KEYS[2], m) end
  redis.call('del', KEYS[1], KEYS[3])
  if v == 0 then
    redis.pcall('publish', ARGV[1], '0')
  end
end
return v
