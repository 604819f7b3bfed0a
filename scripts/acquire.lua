-- acquire: take, re-enter or wait for a reentrant lock.
-- ARGV[1] owner field
-- ARGV[2] ttl in ms for a new hold (the lease, or the watchdog timeout)
-- ARGV[3] the hold count the caller believes it has (0: it holds nothing)
-- ARGV[4] queue entry to register when the lock is held by another ('' = none)
-- ARGV[5] '1' when this entry was registered by an earlier call
-- ARGV[6] queue ttl in ms
-- ARGV[7] fencing counter ttl in ms
-- ARGV[8] '1' for a fair lock: a free lock goes to the head of the queue
-- ARGV[9] hand-off claim window in ms (fair only)
-- Returns {1, count, token} when held (token 0 on re-entry: the caller has it),
-- {0, pttl} when another owner holds it, {-1} when the caller's hold is gone.
--
-- The expected count makes a repeated call harmless: when go-redis resends a
-- call whose reply was lost, the count is already one more than expected, and
-- the script reports the hold instead of counting it twice.
local expected = tonumber(ARGV[3])
-- PTTL first: on a free lock (the common case) it is the only read needed.
local ttl = redis.call('pttl', KEYS[1])
local cnt = false
if ttl ~= -2 then cnt = redis.call('hget', KEYS[1], ARGV[1]) end
if cnt then
  cnt = tonumber(cnt)
  if cnt == expected and expected > 0 then
    cnt = redis.call('hincrby', KEYS[1], ARGV[1], 1)
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
      redis.call('pexpire', KEYS[1], ARGV[2])
    end
    return {1, cnt, 0}
  end
  if expected == 0 then
    -- Our own earlier call, resent, or a hand-off whose message we missed.
    -- A hand-off's TTL is only the claim window: give the hold the TTL the
    -- caller will count on. Drop any entry of ours a resent call queued.
    redis.call('pexpire', KEYS[1], ARGV[2])
    if ARGV[4] ~= '' then redis.call('lrem', KEYS[3], 0, ARGV[4]) end
    return {1, cnt, tonumber(redis.call('get', KEYS[2]) or '0')}
  end
  return {1, cnt, 0}
end
if expected > 0 then
  return {-1}
end
local function enqueue()
  if ARGV[4] == '' then return end
  if ARGV[5] == '1' then
    if not redis.call('lpos', KEYS[3], ARGV[4]) then redis.call('rpush', KEYS[3], ARGV[4]) end
    redis.call('pexpire', KEYS[3], ARGV[6])
  else
    -- A call resent by go-redis (its reply lost) finds its own entry last in
    -- the queue: one look at the tail keeps it from queueing twice.
    if redis.call('lpos', KEYS[3], ARGV[4], 'RANK', -1, 'MAXLEN', 1) then return end
    if redis.call('rpush', KEYS[3], ARGV[4]) == 1 then
      redis.call('pexpire', KEYS[3], ARGV[6])
    end
  end
end
if ttl == -2 and ARGV[8] == '1' then
  -- Fair: a free lock with waiters queued goes to the head of the queue (it
  -- is free only because its holder expired or a hand-off was not claimed).
  -- If that is not the caller, the caller queues behind.
  if hand_off(ARGV[9], ARGV[7], ARGV[4]) == 1 then
    enqueue()
    return {0, redis.call('pttl', KEYS[1])}
  end
end
if ttl == -2 then
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  if ARGV[4] ~= '' and ARGV[5] == '1' then redis.call('lrem', KEYS[3], 1, ARGV[4]) end
  return {1, 1, next_token(ARGV[7])}
end
enqueue()
return {0, ttl}
