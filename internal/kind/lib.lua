-- Shared by every lock script; dlock splices it into each script's source
-- where the script has the line "--[[lib.lua]]", else prepends it. A script
-- whose common case needs none of these helpers runs that case before the
-- splice: defining the helpers (a closure each) costs Redis more than a
-- whole uncontended take or release.
--
-- Key order, the same in every script that uses these helpers:
--   KEYS[1] the lock hash (the lock name itself, Redisson's layout)
--   KEYS[2] the fencing counter   dlock:fence:{name}
--   KEYS[3] the waiter queue      dlock:queue:{name}
-- A queue entry is "<ticket> <ttl_ms> <owner field>"; the owner field is
-- "<client id>:<owner id>", and the client listens on dlock:client:<client id>
-- (keys.QueueEntry, keys.ClientChannelPrefix and keys.HandoffTicket on the Go
-- side; a test checks that the literals here agree with them).

-- Why an owner's field is missing from the lock hash, as renew and release
-- report it (the Go side's goneCode constants):
local GONE, FORCED, DATA_LOST = 0, 2, 3

-- fence_start names the key that holds the first token of fence's current
-- sequence (keys.FenceStart): the counter's name and a control character
-- (US), which no lock name has, so it is no other lock's key, in the
-- counter's Cluster slot. Scripts do not declare it: only a script that
-- starts a sequence writes it, and only why_gone reads it, both with pcall,
-- so a Redis that refuses it (an ACL, a MIGRATING slot) costs the exact
-- reading and nothing else.
local function fence_start(fence) return fence .. '\31s' end

-- why_gone tells why field is not in the lock: FORCED when ForceUnlock took
-- the lock from it (its name is in the forced set); DATA_LOST when Redis lost
-- the lock's data (a restart without persistence, FLUSHALL, a failover that
-- lost the writes): the fencing counter is gone, or, when the holder's token
-- is given, the counter is below it or its sequence began after that token
-- was issued; else GONE (it expired, another owner has it, or the holder's
-- own release already ran).
--
-- A sequence also ends by its TTL, fence_ttl after its first token, whether
-- a hold of it lives or not (a leader of more than a day, a hold that
-- spanned the counter's expiry), and the next grant begins another: no
-- data was lost. A token is its sequence's first plus one per grant, so it
-- tells its sequence's age to within the grants' count in µs. When aged is
-- given (a renewal: its hold may have expired and been taken over), a
-- token older than fence_ttl less a sixteenth (90 minutes of 24 hours: a
-- sequence would need a million grants a minute to drift that far) may be
-- of a sequence that ended so, and its holder is told GONE where the gone
-- counter or a later sequence would say DATA_LOST. A release's hold was
-- not taken over when its holder still counted on it (lease.Lease's
-- certainAtRelease), so there the counter and the sequence decide alone.
--
-- A sequence's start is read two ways. Exactly, from the value issue_token
-- keeps beside the counter (fence_start), when it is there: one whose TTL
-- is the counter's (they are written together; a reshard moves each by a
-- few ms) is the current sequence's start, and decides alone; any other is
-- an earlier sequence's, below the current start, so a token below it is
-- still from an earlier sequence. And to the millisecond, from the
-- counter's TTL (fence_ttl less what is left of it; a sequence's tokens
-- never run ahead of the clock), when the start is missing (a sequence
-- begun by an older dlock, a start Redis refused or evicted): that reading
-- needs slack, as a reshard moves an expiry a millisecond or more, so a data
-- loss and a new grant within a few milliseconds of the token pass for GONE
-- there.
local function why_gone(fence, forced, field, token, fence_ttl, aged)
  if redis.call('sismember', forced, field) == 1 then return FORCED end
  local left = redis.call('pttl', fence)
  local lost, now_ms = DATA_LOST, nil
  if token and fence_ttl then
    local t = redis.call('time')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local ttl = tonumber(fence_ttl)
    if aged and now_ms * 1000 - tonumber(token) > (ttl - ttl / 16) * 1000 then lost = GONE end
  end
  if left < 0 then return lost end
  if not token then return GONE end
  -- The counter only grows, and it held the token when it was issued: a
  -- counter below the token went back, and the holder's writes with it
  -- (a failover to a replica that had not seen them); a sequence that
  -- ended by its TTL starts the next one above it. Our own release,
  -- resent, finds it at the token or beyond.
  local cur = tonumber(redis.call('get', fence) or '0')
  if cur < tonumber(token) then return DATA_LOST end
  local start = redis.pcall('get', fence_start(fence))
  if type(start) == 'string' then
    if tonumber(token) < tonumber(start) then return lost end
    local start_left = redis.pcall('pttl', fence_start(fence))
    if type(start_left) == 'number' and math.abs(start_left - left) <= 1000 then return GONE end
  end
  if now_ms then
    local start_us = (now_ms - (tonumber(fence_ttl) - left)) * 1000
    -- 2ms of slack for the TTL's and the clock's millisecond rounding.
    if tonumber(token) < start_us - 2000 then return lost end
  end
  return GONE
end

-- issue_token starts a new fencing sequence in KEYS[2] from the server clock
-- in microseconds, above any value left there. Starting from the clock keeps
-- a new sequence ahead of every token of an earlier one, even after KEYS[2]
-- expired or the data set was lost, as long as the server clock has moved
-- forward since (a sequence advances one per grant, far slower than the clock).
-- The sequence's first token is kept beside the counter, with its TTL, for
-- why_gone (fence_start).
local function issue_token(fence_ttl)
  local t = redis.call('time')
  local tok = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('set', KEYS[2], tok, 'PX', fence_ttl, 'GET') or '0')
  if last ~= nil and last >= tok then
    tok = last + 1
    redis.call('set', KEYS[2], tok, 'PX', fence_ttl)
  end
  redis.pcall('set', fence_start(KEYS[2]), string.format('%d', tok), 'PX', fence_ttl)
  return tok
end

-- next_token returns the next fencing token: one INCR while the sequence
-- lives (it keeps the TTL it was started with), a new sequence otherwise.
local function next_token(fence_ttl)
  local tok = redis.call('incr', KEYS[2])
  if tok == 1 then
    -- The counter had expired: INCR created it from zero, without a TTL.
    tok = issue_token(fence_ttl)
  end
  return tok
end

-- reserve_tokens takes n fencing tokens at once (one INCRBY) and returns the
-- highest: the caller's process hands out the n - 1 below it itself, in
-- order, while its hold lasts (a Mutex's passes in memory, lease.Passer).
-- Like next_token, it starts a new sequence when the counter had expired.
local function reserve_tokens(fence_ttl, n)
  local top = redis.call('incrby', KEYS[2], n)
  if top == n then
    top = issue_token(fence_ttl) + n - 1
    redis.call('set', KEYS[2], string.format('%d', top), 'PX', fence_ttl)
  end
  return top
end

-- publish tells waiters on channel. A user whose ACL denies PUBLISH still
-- locks and unlocks (its waiters then rely on re-checks), so a refusal is
-- ignored rather than failing the script.
local function publish(channel, msg)
  redis.pcall('publish', channel, msg)
end

-- redisson_name is Redisson's prefixName: a name that already contains '{'
-- is appended as it is, any other is wrapped in braces.
local function redisson_name(prefix, name)
  if string.find(name, '{', 1, true) then return prefix .. ':' .. name end
  return prefix .. ':{' .. name .. '}'
end

-- deliver tells the new holder of a hand-off its token and claim window.
-- A waiter whose entry's TTL has two leading zeros (keys.PopEntry) pops
-- them from its box (keys.GrantBox) with a blocking pop on a connection of
-- its own: only a client that may write the lock's keys can put anything
-- there, so the reply is the grant itself, with no claim round trip. Any
-- other waiter is woken on its client channel, and its attempt claims.
-- %d, not tostring: Lua would print a large token as 1.7e+15. The claim
-- window goes along: the waiter's client may use another.
--
-- The box is the one key a script writes that it does not declare (the
-- field is the queue's head, known only here), and Redis may refuse it
-- after the script has already made the waiter the holder: a Cluster node
-- whose slot is MIGRATING refuses any key it does not have ("non local
-- key"), and the box never exists before this RPUSH. An error there would
-- abort the script half-done: the entry popped, the hash naming a waiter
-- that is never told, the releaser told its release failed. So the box is
-- written with pcall, and when Redis refuses it the popping waiter is woken
-- as any other is: it listens on its client channel too, and its next
-- attempt finds the lock its own (acquire.lua's hand-off check).
local function deliver(ticket, ttl, field, cid, tok, claim)
  local msg = string.format('%d', tok) .. ' ' .. string.format('%d', claim)
  if string.sub(ttl, 1, 2) == '00' then
    local box = KEYS[3] .. '\31g:' .. field
    if type(redis.pcall('rpush', box, msg)) == 'number' then
      redis.call('pexpire', box, claim)
      return
    end
  end
  publish('dlock:client:' .. cid, ticket .. ' ' .. msg)
end

-- On a migrating slot (migrating.lua) the hand-off paths below never write
-- a key after deleting it (the lock is made the waiter's by HSET first,
-- then HDEL of the rest), and a queue that an LPOP may have emptied is read
-- with pcall (pop_entry).

-- pop_entry pops the queue's head, or false when it is empty (a queue
-- this script emptied, refused: migrating.lua's here).
local function pop_entry()
  return (here('lpop', KEYS[3]))
end

-- hold_alone makes the lock hash hold field alone (count 1), dropping
-- every other field: the former owners, an election's leader record.
-- others, when given, names every field the hash may hold but field (a
-- releasing owner's: itself and 'leader'), dropped with one HDEL: the
-- hand-off then costs the two commands DEL and HSET did. Without it the
-- fields are read first (HKEYS).
local function hold_alone(field, others)
  redis.call('hset', KEYS[1], field, 1)
  local drop = {}
  for _, f in ipairs(others or redis.call('hkeys', KEYS[1])) do
    if f ~= field then drop[#drop + 1] = f end
  end
  if #drop > 0 then redis.call('hdel', KEYS[1], unpack(drop)) end
end

-- hand_off passes the lock straight to the first valid waiter in the queue:
-- the hash is rewritten to its field with the claim window as TTL, a new
-- token is issued and the waiter's process is woken on its client channel
-- (the waiter's next attempt confirms the grant: a message proves nothing).
-- The token is issued even to a waiter that takes its own when it claims
-- (keys.MutexEntry; release.lua's common case skips it): that one skips a
-- number, which costs nothing on these rarer paths. e, when given, is an entry the caller already popped from the queue's head.
-- When the first entry is self (the caller's own entry), it is popped and
-- left to the caller. Returns 1 when handed to another waiter, 2 when self was
-- at the head, 0 when the queue held nobody.
local function hand_off(claim_ms, fence_ttl, self, e, others)
  while true do
    e = e or pop_entry()
    if not e then return 0 end
    if e == self then return 2 end
    local ticket, ttl, field = string.match(e, '^(%d+) (%d+) (.+)$')
    local cid = field and string.match(field, '^(.*):')
    if cid then
      hold_alone(field, others)
      -- A waiter that died before its turn must not hold the lock for a whole
      -- lease: the hand-off is valid for the claim window only, and the new
      -- holder extends it as soon as it runs.
      local claim = math.min(tonumber(ttl), tonumber(claim_ms))
      redis.call('pexpire', KEYS[1], claim)
      deliver(ticket, ttl, field, cid, next_token(fence_ttl), claim)
      return 1
    end
    e = false
  end
end

-- release_to_next frees the lock: it hands it straight to the first waiter in
-- the queue when there is one (the lock never becomes free, so nobody else
-- retries), or deletes it and publishes Redisson's unlock message '0'. first,
-- when given, is the queue's head, already popped by the caller; others, as
-- hold_alone's.
local function release_to_next(claim_ms, fence_ttl, first, others)
  if hand_off(claim_ms, fence_ttl, nil, first, others) == 0 then
    redis.call('del', KEYS[1])
    publish(redisson_name('redisson_lock__channel', KEYS[1]), '0')
  end
end
