-- Shared by the semaphore scripts; dlock prepends it to each one's source.
--
-- Key order, the same in every semaphore script:
--   KEYS[1] permits  dlock:semaphore:{name}: permit id -> expiry, server clock in ms
--   KEYS[2] size     dlock:semaphore-size:{name}: the number of permits
--   KEYS[3] queue    dlock:semaphore-queue:{name}: waiters, first first
--   KEYS[4] seen     dlock:semaphore-seen:{name}: queue entry -> until when its
--                    waiter is alive (its last attempt plus the queue TTL), server ms;
--                    or, for an entry granted from the queue, a grant mark: minus
--                    the deadline its permit had when granted (see grant_queued)
-- A permit id is "<client id>:<n>" for one permit and "<client id>:<n>#<k>" for
-- k of them (keys.PermitID); a queue entry is "<ticket> <ttl ms> <permit id>"
-- (keys.QueueEntry), and a waiter's client listens on dlock:client:<client id>
-- for "<ticket> <token> <ttl ms>" (keys.HandoffTicket; permits carry token 0).

-- now_ms is the server clock in milliseconds: permits expire by it, so the
-- clients' clocks do not matter.
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- keep makes key live at least ttl ms more.
local function keep(key, ttl)
  if redis.call('pttl', key) < ttl then redis.call('pexpire', key, ttl) end
end

-- weight is the number of permits a permit id holds (keys.PermitWeight).
local function weight(id)
  local k = tonumber(string.match(id, ':%d+#(%d+)$') or '1')
  if k < 1 then return 1 end
  return k
end

-- held_weight is the number of permits held: the sum of the weights of
-- the permits that have not expired (reaped or not), but for permit except
-- (nil: none), which its caller is giving back.
local function held_weight(now, except)
  local held = 0
  for _, id in ipairs(redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf')) do
    if id ~= except then held = held + weight(id) end
  end
  return held
end

-- On a migrating slot (migrating.lua), a key the script emptied (an LPOP of
-- the last entry, a ZREM of the last member, a reap of the last permits)
-- is refused. So:
-- - the permits are never emptied before a write or read of them: the
--   expired ones are reaped last (reap), and a permit given back is taken
--   out of the set after the grants it makes room for;
-- - the queue and the seen set, which a script may empty (grant_queued's
--   LPOP and ZREM, a leaving waiter's LREM and ZREM) and then touch again,
--   are touched through here, which answers a refusal as the command would
--   answer on a key that is not there: false (no entry, no score, nothing
--   removed). Only a write that would make the key anew cannot be done; its
--   callers say what they do instead.

-- add_permit grants permit id for ttl ms; the permits and the size live at
-- least as long as it.
local function add_permit(now, id, ttl)
  redis.call('zadd', KEYS[1], now + ttl, id)
  keep(KEYS[1], ttl)
  keep(KEYS[2], ttl)
end

-- leave_queue takes entry e (the queue's head when head) out of the queue.
local function leave_queue(e, head)
  if head then redis.call('lpop', KEYS[3]) else redis.call('lrem', KEYS[3], 0, e) end
  redis.call('zrem', KEYS[4], e)
end

-- keep_pair makes the permits and the size live at least need ms more, with
-- one PTTL in the common case: when it extends them, it extends them to twice
-- need, so that the next hand-offs find them long-lived enough. The size
-- lives at least as long as the permits wherever either is extended (here,
-- add_permit, renew.lua, sem_resize.lua), so the size is only looked at when
-- the permits are.
local function keep_pair(need)
  if redis.call('pttl', KEYS[1]) < need then
    redis.call('pexpire', KEYS[1], 2 * need)
    keep(KEYS[2], 2 * need)
  end
end

-- drop_marks drops the grant marks (grant_queued) whose permit's deadline at
-- grant has passed. The scripts call it wherever they extend the seen
-- set's TTL, before extending it, so a mark whose deadline has passed goes
-- at the set's next extension, or with the set.
local function drop_marks(now)
  here('zremrangebyscore', KEYS[4], -now, '(0')
end

-- grant_queued gives free permits to queued waiters, first first, while
-- the first one fits (arrival order, as golang.org/x/sync/semaphore: a
-- waiter for many is not overtaken by later waiters for few). Each gets
-- its permits for the claim window (a waiter that died before its turn must
-- not keep them for a whole lease; a live one extends them as soon as it
-- runs). A waiter that pops (keys.PopEntry) finds the grant in its box: the
-- box's item is the grant, as the Mutex's (lease/pop.go), and its first
-- renewal extends the permit. Any other waiter's client is woken on its
-- client channel (its next attempt confirms). Only the waiters granted
-- are told. The permits and the size are kept for the waiter's whole TTL
-- and the claim window, so that its claim (sem_acquire.lua's hand-off
-- branch) need not extend them. A first
-- waiter that needs more than the size, or whose seen deadline passed (it
-- died, or left with its entry behind), leaves the queue and is woken: its
-- next attempt, if any, decides. held is the number of permits held. With
-- self nil (a release), it stops as soon as every permit is held: no waiter
-- can fit then, and those that died are dropped by the next attempt that
-- passes self (or all: a resize, or a waiter leaving, which look at the
-- whole queue as an attempt does). Returns whether it reached self (the caller's own entry,
-- which it leaves to the caller: a fit, taken out of the queue), the number
-- held afterwards, whether a waiter that does not fit is left first in the
-- queue, and whether it found the queue empty.
--
-- An entry granted leaves a grant mark in the seen set in place of its
-- deadline: its score is minus the deadline its permit gets here (now plus
-- the claim window; for self, now plus self_ttl, the caller's TTL, and only
-- when self_ttl is given: the caller asks for it on a new waiter's first
-- call). A mark is what a resend of that waiter's first call finds, so that
-- it does not queue the waiter again beside its permit (sem_acquire.lua).
-- ZADD XX writes it only over the entry's deadline, so it never makes the
-- set anew. The set has a TTL when an entry in it is granted: the scripts
-- give the queue and the set their TTL together, and a first call that
-- makes the set makes the queue too, so it goes on to give both their TTL,
-- unless it takes its own entry at once (self_ttl): then the set is kept
-- here for at least self_ttl. That TTL bounds the mark, and drop_marks
-- drops it once its deadline has passed.
-- A hand-off's mark costs what the ZREM it replaces did. Marks are negative
-- and deadlines positive, so no reader mistakes one for the other: a mark
-- reads as a deadline passed.
local function grant_queued(now, size, held, claim_ms, self, all, self_ttl)
  while true do
    if held >= size and not self and not all then return false, held, true, false end
    -- here: an LPOP of this loop, or the caller, may have emptied the
    -- queue, and a ZREM the seen set (see here).
    local e = here('lpop', KEYS[3])
    if not e then return false, held, false, true end
    local ticket, ttl, id = string.match(e, '^(%d+) (%d+) (.+)$')
    local cid = id and string.match(id, '^(.*):')
    local w = cid and weight(id) or size + 1
    if w <= size and held + w > size then
      if e == self or tonumber(here('zscore', KEYS[4], e) or '0') > now then
        local n, gone = here('lpush', KEYS[3], e)
        if gone then
          -- The LPOP emptied the queue, and the node refuses to make it
          -- anew (here): the entry stays out, its deadline kept, and its
          -- waiter is woken as a dropped one is. Its next attempt, whose
          -- entry is not queued, queues it again once the slot settles,
          -- first unless a newcomer queued in between. The caller's own
          -- entry (self) is queued again by the caller, or its call sent
          -- again (sem_acquire.lua).
          if e ~= self and cid then redis.pcall('publish', 'dlock:client:' .. cid, ticket .. ' 0 0') end
        elseif n == 1 then
          -- The LPOP emptied the queue and LPUSH made it anew, without a
          -- TTL: it lives as long as its waiters' set (or the entry's TTL).
          local t = here('pttl', KEYS[4]) or -2
          if t < 1 then t = tonumber(ttl) end
          redis.call('pexpire', KEYS[3], t)
        end
        return false, held, true, false
      end
    end
    if w <= size and held + w <= size then
      if e == self then
        if self_ttl then
          here('zadd', KEYS[4], 'XX', -(now + self_ttl), e)
          -- The set may be the caller's own, just made without a TTL.
          if (here('pttl', KEYS[4]) or -2) < self_ttl then
            drop_marks(now)
            here('pexpire', KEYS[4], self_ttl)
          end
        else
          here('zrem', KEYS[4], e)
        end
        return true, held, false, false
      end
      local claim = math.min(tonumber(ttl), tonumber(claim_ms))
      here('zadd', KEYS[4], 'XX', -(now + claim), e)
      -- NX: a permit id already granted (a resent call's) is not counted twice.
      if redis.call('zadd', KEYS[1], 'NX', now + claim, id) == 1 then
        keep_pair(tonumber(ttl) + claim)
        held = held + w
        -- A TTL with two leading zeros (keys.PopEntry): the grant goes to
        -- the waiter's box (keys.GrantBox), which it pops, unless Redis
        -- refuses the box (an undeclared key: an ACL that names the
        -- semaphore's keys, a MIGRATING slot); then the message tells, as
        -- it does every other waiter.
        local msg = '0 ' .. string.format('%d', claim)
        local box = string.sub(ttl, 1, 2) == '00' and KEYS[3] .. '\31g:' .. id
        if box and type(redis.pcall('rpush', box, msg)) == 'number' then
          redis.call('pexpire', box, claim)
        else
          redis.pcall('publish', 'dlock:client:' .. cid, ticket .. ' ' .. msg)
        end
      end
    else
      here('zrem', KEYS[4], e)
      if cid then redis.pcall('publish', 'dlock:client:' .. cid, ticket .. ' 0 0') end
    end
  end
end

-- reap drops expired permits (their holders crashed or were cut off). The
-- scripts reap last, after every other use of the permits: a reap may
-- empty the set (see here).
local function reap(now)
  redis.call('zremrangebyscore', KEYS[1], '-inf', now)
end
