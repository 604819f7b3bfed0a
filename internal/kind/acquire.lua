-- acquire: take, re-enter or wait for a reentrant lock.
-- KEYS[1] the lock hash, KEYS[2] the fencing counter, KEYS[3] the queue
-- ARGV[1] owner field
-- ARGV[2] ttl in ms for a new hold (the lease, or the watchdog timeout);
--         a re-entry leaves the TTL as it is
-- ARGV[3] the hold count the caller believes it has (0: it holds nothing)
-- ARGV[4] fencing counter ttl in ms
-- Sent only by a caller that queues or takes a fair lock (an uncontended
-- Mutex call sends the four above):
-- ARGV[5] queue entry to register when the lock is held by another ('' = none)
-- ARGV[6] '1' when this entry was registered by an earlier call; 'h' when
--         it was, and a hand-off message named the caller since ('0': new)
-- ARGV[7] queue ttl in ms
-- ARGV[8] '1' for a fair lock: a free lock goes to the head of the queue
-- ARGV[9] hand-off claim window in ms (fair only)
-- Returns one integer:
--   r >= 0   held: the new hold's fencing token (ARGV[3] = 0), or the count
--            of the re-entered hold;
--   r = -1   the hold the caller re-enters is gone;
--   r <= -2  another owner holds the lock, for -3 - r ms more (-1: no TTL).
--
-- The expected count makes a repeated call harmless: when go-redis resends a
-- call whose reply was lost, the count is already one more than expected, and
-- the script reports the hold instead of counting it twice.
--
-- The common cases come first, before lib.lua's helpers are defined: a free
-- lock taken by a caller that does not queue, a lock held by another owner
-- (a waiter's attempt), and a lock handed to the caller (a woken waiter's
-- attempt). PTTL answers both "is it free" and, when it is
-- not, "for how long".
if ARGV[6] == 'h' and ARGV[3] == '0' then
  -- A hand-off message named the caller (or so it says: anyone may publish
  -- it). When the lock is the caller's, the grant needs only the caller's
  -- TTL in place of the claim window and a token: the hand-off popped the
  -- caller's entry, and enqueue never lets an entry into the queue twice,
  -- so there is none left to remove. Anything else (a forged or stale
  -- message) is decided below like any registered waiter's attempt.
  if redis.call('hget', KEYS[1], ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
    local tok = redis.call('incr', KEYS[2])
    if tok ~= 1 then return tok end
    -- The sequence ended (the counter expired) and INCR began one at 1:
    -- undone, so that the path below starts it from the clock.
    redis.call('del', KEYS[2])
  end
end
local ttl = redis.call('pttl', KEYS[1])
local taken = false
if ttl == -2 and ARGV[3] == '0' and not ARGV[5] then
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  local tok = redis.call('incr', KEYS[2])
  if tok ~= 1 then return tok end
  -- The counter had expired: INCR created it from zero, without a TTL.
  taken = true
end
local entry = ARGV[5] or ''
local registered = ARGV[6] == '1' or ARGV[6] == 'h'
local cnt = false
if ttl ~= -2 then cnt = redis.call('hget', KEYS[1], ARGV[1]) end
-- enqueue registers the caller's entry, if it has one, behind the others.
local function enqueue()
  if entry == '' then return end
  if registered then
    if not redis.call('lpos', KEYS[3], entry) then redis.call('rpush', KEYS[3], entry) end
    redis.call('pexpire', KEYS[3], ARGV[7])
  else
    -- A call resent by go-redis (its reply lost) finds its own entry in the
    -- queue. The whole queue is looked at, not only its tail (where others
    -- may have queued since): an entry is never there twice, so a waiter
    -- handed the lock has no entry left to remove (the hand-off check at
    -- the top relies on it).
    if redis.call('lpos', KEYS[3], entry) then return end
    if redis.call('rpush', KEYS[3], entry) == 1 then
      redis.call('pexpire', KEYS[3], ARGV[7])
    end
  end
end
if ttl ~= -2 and not cnt and ARGV[3] == '0' then
  enqueue()
  return -3 - ttl
end
if cnt and ARGV[3] == '0' then
  -- A hand-off (its message only woke the caller: this reply is the grant),
  -- or our own earlier call, resent. A hand-off's TTL is only the claim
  -- window: give the hold the TTL the caller will count on. Drop any entry
  -- of ours a resent call queued. The caller takes its token now: a hand-off
  -- to a marked entry (keys.MutexEntry) took none, and for a resent call or
  -- an older dlock's hand-off, which did, one more only skips a number that
  -- nobody saw. Tokens only grow either way. When the counter expired (its
  -- TTL runs from its sequence's start), a new sequence starts instead,
  -- above every earlier token.
  redis.call('pexpire', KEYS[1], ARGV[2])
  if entry ~= '' then redis.call('lrem', KEYS[3], 0, entry) end
  local tok = redis.call('incr', KEYS[2])
  if tok ~= 1 then return tok end
  taken = true
end
--[[lib.lua]]
if taken then return issue_token(ARGV[4]) end
local expected = tonumber(ARGV[3])
if cnt then
  cnt = tonumber(cnt)
  if cnt == expected then
    -- A re-entry counts and never moves the hold's end: its holder was told
    -- when the hold ends (its lease, or the watchdog's renewals), and Redis
    -- must end it then, whatever lease the re-entry asked for.
    return redis.call('hincrby', KEYS[1], ARGV[1], 1)
  end
  return cnt
end
if expected > 0 then
  return -1
end
if ttl == -2 and ARGV[8] == '1' then
  -- Fair: a free lock with waiters queued goes to the head of the queue (it
  -- is free only because its holder expired or a hand-off was not claimed).
  -- If that is not the caller, the caller queues behind.
  if hand_off(ARGV[9], ARGV[4], entry) == 1 then
    enqueue()
    return -3 - redis.call('pttl', KEYS[1])
  end
end
if ttl == -2 then
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  if entry ~= '' and registered then redis.call('lrem', KEYS[3], 1, entry) end
  return next_token(ARGV[4])
end
enqueue()
return -3 - ttl
