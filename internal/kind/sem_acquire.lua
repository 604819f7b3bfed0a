-- sem_acquire: take a permit of k permits, or queue for one.
-- ARGV[1] permit id (its weight k: keys.PermitID), ARGV[2] the size the
-- caller's handle gives a semaphore that does not exist yet, ARGV[3] ttl ms
-- (the lease, or the watchdog timeout), ARGV[4] queue entry ('' = do not
-- queue), ARGV[5] queue ttl ms, ARGV[6] claim window ms, ARGV[7] the
-- entry's standing: '0' new, '1' queued by an earlier call, 'h' queued and
-- named by a hand-off message since (absent: as '1').
-- Returns {1, ttl ms} when the permit is held, {0, ms until the first permit
-- expires (-1: none)} when it must wait, {-3, size} when k is more than the
-- size (the caller leaves the queue).
--
-- Arrival order: a new caller is granted only when nobody queued before it
-- is left waiting; a queued one when it is first and fits.
--
-- Safe to resend: a permit id already granted (an earlier call whose reply
-- was lost, or a grant handed to the caller) is reported, not taken twice,
-- and an entry is queued once. A resent first call ('0') relies on the grant
-- mark (sem_lib.lua's grant_queued) that its entry, once granted from the
-- queue (handed over, or taken by that first call itself), leaves in the
-- seen set: it finds the mark and is decided below, where the
-- permit is found and the mark removed. A mark lasts at least until the
-- deadline the permit had when granted (the end of the claim window for a
-- hand-off, the TTL for a permit this call took), which its holder cannot
-- have moved before the resend's reply; a resend later than that comes
-- when the permit has expired, and is taken as a first call.
-- Two common cases come first, before anything else is read:
--
-- A claim ('h'): a hand-off message named the caller (or so it says: anyone
-- may publish it). When the permit is the caller's and live, its deadline
-- moves from the end of the claim window to that plus the caller's TTL:
-- at least the TTL from now, and never more than the claim window beyond
-- it (a resent claim moves it once more; renewals set it from their own
-- clock). The hand-off popped the entry (an entry is never queued twice, so
-- none is left) and left its grant mark, and kept the permits and the size
-- for at least the entry's TTL and the claim window, which covers the new
-- deadline when this TTL is the entry's. Anything
-- else (a forged or stale message, a permit that expired) is decided below.
--
-- A new waiter ('0') that finds others queued before it: arrival order
-- says it waits behind them whatever is free, so it queues without looking
-- at the permits. A dead waiter or a free permit ahead of it is seen to by
-- the next attempt of a waiter already queued (every waiter re-checks). A
-- resent call finds its seen deadline set (an entry and its deadline are
-- added and removed together) or, once the entry was granted, its grant
-- mark, and is decided below. The queue and the deadlines live at least
-- half the queue TTL more; where their TTL is extended, the grant marks
-- whose deadline passed are dropped first.
local id, ttl, entry, qttl = ARGV[1], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
if ARGV[7] == 'h' then
  local now = now_ms()
  -- One command reads and extends the permit: XX leaves a missing one
  -- missing, and the score it had tells whether it was live.
  local s = redis.call('zadd', KEYS[1], 'XX', 'INCR', ttl, id)
  if s then
    local exp = tonumber(s) - ttl
    if exp > now then
      if ttl > tonumber(string.match(entry, '^%d+ (%d+) ') or '0') then
        keep(KEYS[1], exp + ttl - now)
        keep(KEYS[2], exp + ttl - now)
      end
      return {1, ttl}
    end
    redis.call('zadd', KEYS[1], exp, id) -- expired: left as it was
  end
elseif ARGV[7] == '0' and entry ~= '' then
  local now = now_ms()
  if redis.call('zadd', KEYS[4], 'NX', now + qttl, entry) == 1 and redis.call('rpush', KEYS[3], entry) > 1 then
    if redis.call('pttl', KEYS[3]) < qttl / 2 then
      drop_marks(now)
      redis.call('pexpire', KEYS[3], qttl)
      redis.call('pexpire', KEYS[4], qttl)
    end
    local first = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
    if first[2] then return {0, math.max(tonumber(first[2]) - now, 0)} end
    return {0, -1}
  end
end
local now = now_ms()
-- Expired permits are reaped last, on every way out: a reap may empty the
-- set, which a MIGRATING node then refuses to this script (sem_lib.lua's
-- here). Until then a permit counts only while live.
local s = redis.call('zscore', KEYS[1], id)
if s and tonumber(s) > now then
  add_permit(now, id, ttl)
  if entry ~= '' then leave_queue(entry, false) end
  reap(now)
  return {1, ttl}
end
local size = tonumber(redis.call('get', KEYS[2]) or '0')
if size < 1 then
  -- A new semaphore: the caller's handle gives its size; from now on only
  -- SetPermits changes it.
  size = tonumber(ARGV[2])
  redis.call('set', KEYS[2], size, 'PX', math.max(ttl, qttl))
end
local k = weight(id)
if k > size then
  if entry ~= '' then leave_queue(entry, false) end
  reap(now)
  return {-3, size}
end
local self, self_ttl = nil, nil
if entry ~= '' then self = entry end
-- A first call granted its own entry leaves a grant mark, which a resend
-- of it finds (see above); a later call's resend comes here anyway.
if ARGV[7] == '0' then self_ttl = ttl end
local mine, held, blocked = grant_queued(now, size, held_weight(now), ARGV[6], self, nil, self_ttl)
if mine or (not blocked and held + k <= size) then
  add_permit(now, id, ttl)
  reap(now)
  return {1, ttl}
end
if entry ~= '' then
  -- A resent call finds its entry already queued; the queue lives while
  -- its waiters keep trying (they re-check at least every re-check
  -- interval, a quarter of the queue's TTL), and so does each entry's seen
  -- deadline (which replaces a grant mark of the entry's, if any: its
  -- permit expired unclaimed). grant_queued may have emptied the queue or
  -- the seen set, which a MIGRATING node then refuses to make anew (here):
  -- both are looked at before either is written, and the call is sent
  -- again once the slot settles.
  local at, gone = here('lpos', KEYS[3], entry)
  if not gone then
    local _, refused = here('zadd', KEYS[4], now + qttl, entry)
    gone = refused
  end
  if gone then
    reap(now)
    return try_again('a key this script emptied')
  end
  if not at then redis.call('rpush', KEYS[3], entry) end
  redis.call('pexpire', KEYS[3], qttl)
  drop_marks(now)
  redis.call('pexpire', KEYS[4], qttl)
  keep(KEYS[2], qttl)
end
local first = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
reap(now)
if first[2] then return {0, math.max(tonumber(first[2]) - now, 0)} end
return {0, -1}
