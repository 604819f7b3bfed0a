-- rwlock: take or re-enter the write side of a read-write lock.
-- ARGV[1] owner '<client id>:<owner id>'
-- ARGV[2] write field '<owner>:write'
-- ARGV[3] ttl in ms for a new hold (a re-entry leaves the TTL as it is)
-- ARGV[4] the write hold count the caller believes it has
-- ARGV[5] ms to stay registered as a waiting writer ('0': do not register)
-- ARGV[6] fencing counter ttl in ms
-- Returns {1, count, token} when held (token 0 on re-entry), {0, ms to wait}
-- when not, {-1} when the caller's hold is gone, {-2} when the caller holds
-- the read side only (an upgrade: refused, it could wait forever).
--
-- rw_purge may have emptied KEYS[3] and KEYS[4] and deleted KEYS[1], which
-- are touched after it through here (rwlib.lua); a write that would
-- make one of them anew is not done, and the call is sent again
-- (try_again) with nothing but rw_purge's removals written.
local now = now_ms()
rw_purge(now)
local expected = tonumber(ARGV[4])
local cnt = here('hget', KEYS[1], ARGV[2])
if cnt then
  cnt = tonumber(cnt)
  if cnt == expected and expected > 0 then
    -- A re-entry counts and never moves the hold's end (acquire.lua).
    return {1, redis.call('hincrby', KEYS[1], ARGV[2], 1), 0}
  end
  if expected == 0 then
    -- Our own earlier call, resent.
    here('zrem', KEYS[4], ARGV[1])
    return {1, cnt, tonumber(redis.call('get', KEYS[2]) or '0')}
  end
  return {1, cnt, 0}
end
if expected > 0 then return {-1} end
local exists, deleted = here('exists', KEYS[1])
if deleted then return try_again('a key this script emptied') end
if exists == 0 then
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[3])
  here('zrem', KEYS[4], ARGV[1])
  return {1, 1, next_token(ARGV[6])}
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then return {-2} end
if ARGV[5] ~= '0' then
  -- While registered, no new reader gets in: the writer is not starved.
  local _, gone = here('zadd', KEYS[4], now + tonumber(ARGV[5]), ARGV[1])
  if gone then return try_again('a key this script emptied') end
  redis.call('pexpire', KEYS[4], ARGV[5])
end
return {0, rw_wait(now)}
