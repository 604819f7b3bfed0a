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
-- and an entry is queued once.
-- Two common cases come first, before anything else is read:
--
-- A claim ('h'): a hand-off message named the caller (or so it says: anyone
-- may publish it). When the permit is the caller's and live, its deadline
-- moves from the end of the claim window to that plus the caller's TTL:
-- at least the TTL from now, and never more than the claim window beyond
-- it (a resent claim moves it once more; renewals set it from their own
-- clock). The hand-off popped the entry and its seen deadline (an entry is
-- never queued twice, so none is left), and kept the permits and the size
-- for at least the entry's TTL and the claim window, which covers the new
-- deadline when this TTL is the entry's. Anything
-- else (a forged or stale message, a permit that expired) is decided below.
--
-- A new waiter ('0') that finds others queued before it: arrival order
-- says it waits behind them whatever is free, so it queues without looking
-- at the permits. A dead waiter or a free permit ahead of it is seen to by
-- the next attempt of a waiter already queued (every waiter re-checks). A
-- resent call finds its seen deadline set (an entry and its deadline are
-- added and removed together) and is decided below. The queue and the
-- deadlines live at least half the queue TTL more.
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
      redis.call('pexpire', KEYS[3], qttl)
      redis.call('pexpire', KEYS[4], qttl)
    end
    local first = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
    if first[2] then return {0, math.max(tonumber(first[2]) - now, 0)} end
    return {0, -1}
  end
end
local now = now_ms()
reap(now)
if redis.call('zscore', KEYS[1], id) then
  add_permit(now, id, ttl)
  if entry ~= '' then leave_queue(entry, false) end
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
  return {-3, size}
end
local self = nil
if entry ~= '' then self = entry end
local mine, held, blocked = grant_queued(now, size, held_weight(now), ARGV[6], self)
if mine or (not blocked and held + k <= size) then
  add_permit(now, id, ttl)
  return {1, ttl}
end
if entry ~= '' then
  -- A resent call finds its entry already queued; the queue lives while
  -- its waiters keep trying (they re-check at least every re-check
  -- interval, a quarter of the queue's TTL), and so does each entry's seen
  -- deadline.
  if not redis.call('lpos', KEYS[3], entry) then redis.call('rpush', KEYS[3], entry) end
  redis.call('pexpire', KEYS[3], qttl)
  redis.call('zadd', KEYS[4], now + qttl, entry)
  redis.call('pexpire', KEYS[4], qttl)
  keep(KEYS[2], qttl)
end
local first = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then return {0, math.max(tonumber(first[2]) - now, 0)} end
return {0, -1}
