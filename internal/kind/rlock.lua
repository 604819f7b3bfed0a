-- rlock: take or re-enter the read side of a read-write lock.
-- ARGV[1] owner '<client id>:<owner id>' (the read field)
-- ARGV[2] the write field a downgrade stands on (the writer's); for any
--         other reader, a field no writer has
-- ARGV[3] ttl in ms for a new hold (a re-entry leaves its deadline as it is)
-- ARGV[4] the read hold count the caller believes it has
-- ARGV[5] fencing counter ttl in ms
-- Returns {1, count, token} when held (token 0 on re-entry), {0, pttl} when
-- not, {-1} when the caller's hold is gone.
--
-- rw_purge may have emptied KEYS[3] and KEYS[4] and deleted KEYS[1], which
-- are touched after it through here (rwlib.lua), and the grant writes
-- the deadline set first: a grant that cannot make the hash or the set anew
-- writes nothing and asks to be sent again (try_again).
local now = now_ms()
rw_purge(now)
local expected = tonumber(ARGV[4])
local cnt = here('hget', KEYS[1], ARGV[1])
if cnt then
  cnt = tonumber(cnt)
  if cnt == expected and expected > 0 then
    -- A re-entry counts and never moves the hold's deadline (acquire.lua).
    return {1, redis.call('hincrby', KEYS[1], ARGV[1], 1), 0}
  end
  if expected == 0 then
    return {1, cnt, tonumber(redis.call('get', KEYS[2]) or '0')}
  end
  return {1, cnt, 0}
end
if expected > 0 then return {-1} end
local exists, deleted = here('exists', KEYS[1])
local free = deleted or exists == 0
local mode = not free and redis.call('hget', KEYS[1], 'mode')
-- A new reader joins readers only while no writer waits; the writer itself
-- may take the read side (downgrade).
if ((free or mode == 'read') and (here('zcard', KEYS[4]) or 0) == 0)
   or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  if deleted or not rw_track(ARGV[1], now, ARGV[3]) then return try_again('a key this script emptied') end
  if free then redis.call('hset', KEYS[1], 'mode', 'read') end
  if mode == 'write' then
    -- A downgrade: the hash's TTL is about to cover the read hold too, so
    -- the writer's own end (the TTL so far) goes into the deadline set,
    -- where rw_purge ends the write hold on time however long the read
    -- holds last. Its renewals and Extend move it (renew.lua).
    local wttl = redis.call('pttl', KEYS[1])
    if wttl > 0 and not redis.call('zscore', KEYS[3], ARGV[2]) then
      redis.call('zadd', KEYS[3], now + wttl, ARGV[2])
      if redis.call('pttl', KEYS[3]) < wttl then redis.call('pexpire', KEYS[3], wttl) end
    end
  end
  redis.call('hset', KEYS[1], ARGV[1], 1)
  rw_keep(ARGV[3])
  return {1, 1, next_token(ARGV[5])}
end
return {0, rw_wait(now)}
