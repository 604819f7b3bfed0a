-- release: undo one hold of a reentrant lock, or all of them.
-- KEYS[1] the lock hash, KEYS[2] the fencing counter, KEYS[3] the queue,
-- KEYS[4] the forced set dlock:forced:{name}
-- ARGV[1] owner field
-- ARGV[2] the hold count the caller believes it has
-- ARGV[3] hand-off claim window in ms
-- ARGV[4] fencing counter ttl in ms
-- ARGV[5] the hold's fencing token
-- ARGV[6] '1' to drop every hold of this owner at once ('0' or absent
--         otherwise)
-- A pass (sent only by a final release, ARGV[2] = 1, ARGV[6] = '0'): the
-- hold goes straight to a goroutine of the releaser's process that waits
-- for the same lock, instead of being freed or handed to the queue:
-- ARGV[7] the next holder's owner field
-- ARGV[8] the next holder's TTL in ms
-- ARGV[9] '1' to pass only when nobody waits in the queue (a FairMutex:
--         another process's waiter came first); '0' to pass regardless
-- ARGV[10] how many fencing tokens to take for the next holder: its own,
--         and those its process will hand out by passing the hold on in
--         memory (reserve_tokens); the reply names the highest
-- Returns one integer: r >= 0 released, r is the count that remains;
-- -4 <= r < 0 the caller holds nothing, and -1 - r is why (why_gone's code);
-- r <= PASSED - 1 passed: the highest token taken is PASSED - r.
-- A pass that cannot be made (the count is not 1, or ARGV[9] and a waiter
-- in the queue) is an ordinary release.
--
-- A resent call must not decrement twice: a non-final decrement is recognised
-- by the count being one less than expected. A resent final release finds the
-- field gone with the code GONE; owner fields are never reused, so the caller,
-- whose hold could not have expired yet, knows it was its own.
--
-- The common cases come first, before lib.lua's helpers are defined: a
-- final release with nobody queued (release_to_next's work, inline), and one
-- that hands the lock to a well-formed first entry (hand_off's, inline).
local PASSED = -16
local cnt = redis.call('hget', KEYS[1], ARGV[1])
local first, handed = false, false
if cnt == '1' and ARGV[2] == '1' and not ARGV[7] then
  first = redis.call('lpop', KEYS[3])
  if not first then
    redis.call('del', KEYS[1])
    -- Redisson's unlock message, on its channel for the name (redisson_name).
    local channel = 'redisson_lock__channel:{' .. KEYS[1] .. '}'
    if string.find(KEYS[1], '{', 1, true) then channel = 'redisson_lock__channel:' .. KEYS[1] end
    redis.pcall('publish', channel, '0')
    return 0
  end
  local ticket, ttl, field = string.match(first, '^(%d+) (%d+) (.+)$')
  local cid = field and string.match(field, '^(.*):')
  if cid then
    -- The hash holds the waiter alone: HSET first, then HDEL of the
    -- releaser and of an election's leader record, the only other fields
    -- a Mutex's hash can have. Not DEL and HSET: a Cluster node whose slot
    -- is MIGRATING refuses to write a key the script deleted (lib.lua).
    redis.call('hset', KEYS[1], field, 1)
    redis.call('hdel', KEYS[1], ARGV[1], 'leader')
    local claim = math.min(tonumber(ttl), tonumber(ARGV[3]))
    redis.call('pexpire', KEYS[1], claim)
    local pop = string.sub(ttl, 1, 2) == '00'
    if string.byte(ttl) == 48 and not pop then
      -- A TTL with a leading zero marks a waiter whose claiming attempt
      -- takes its token itself (keys.MutexEntry): none is taken here, and
      -- the message carries token 0, as the semaphore's do.
      redis.pcall('publish', 'dlock:client:' .. cid, ticket .. ' 0 ' .. string.format('%d', claim))
      return 0
    end
    local tok = redis.call('incr', KEYS[2])
    handed = {ticket, ttl, field, cid, claim}
    if tok ~= 1 then
      local msg = string.format('%d', tok) .. ' ' .. string.format('%d', claim)
      -- Two leading zeros (keys.PopEntry): the grant goes to the waiter's
      -- box, which it pops, unless Redis refuses the box (lib.lua's
      -- deliver says when, and why the message then does).
      local box = pop and KEYS[3] .. '\31g:' .. field
      if box and type(redis.pcall('rpush', box, msg)) == 'number' then
        redis.call('pexpire', box, claim)
      else
        redis.pcall('publish', 'dlock:client:' .. cid, ticket .. ' ' .. msg)
      end
      return 0
    end
    -- The counter had expired: a new sequence, below.
  end
end
--[[lib.lua]]
if handed then
  deliver(handed[1], handed[2], handed[3], handed[4], issue_token(ARGV[4]), handed[5])
  return 0
end
if first then
  -- The first entry was not a waiter's: hand_off goes on down the queue.
  release_to_next(ARGV[3], ARGV[4], first, {ARGV[1], 'leader'})
  return 0
end
if not cnt then
  return -1 - why_gone(KEYS[2], KEYS[4], ARGV[1], ARGV[5], ARGV[4])
end
cnt = tonumber(cnt)
local expected = tonumber(ARGV[2])
if ARGV[6] ~= '1' then
  -- Checked before anything else: a resent 2 -> 1 finds count 1, which must
  -- not read as a final release.
  if expected > 1 and cnt == expected - 1 then return cnt end
  if cnt > 1 then return redis.call('hincrby', KEYS[1], ARGV[1], -1) end
end
if ARGV[7] and cnt == 1 and expected == 1 and (ARGV[9] ~= '1' or redis.call('llen', KEYS[3]) == 0) then
  -- The pass: the hash holds the next owner alone, with its TTL (not the
  -- claim window: its process is alive, it is the one sending this), and a
  -- token of its own.
  redis.call('hset', KEYS[1], ARGV[7], 1)
  redis.call('hdel', KEYS[1], ARGV[1], 'leader') -- as in the hand-off above
  redis.call('pexpire', KEYS[1], ARGV[8])
  return PASSED - reserve_tokens(ARGV[4], tonumber(ARGV[10]))
end
-- The hash holds the releaser's field and an election's leader record at
-- most (a Mutex's): hand_off drops them without reading the fields.
release_to_next(ARGV[3], ARGV[4], nil, {ARGV[1], 'leader'})
return 0
