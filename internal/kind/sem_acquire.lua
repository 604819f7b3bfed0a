-- sem_acquire: take a permit of k permits, or queue for one.
-- ARGV[1] permit id (its weight k: keys.PermitID), ARGV[2] the size the
-- caller's handle gives a semaphore that does not exist yet, ARGV[3] ttl ms
-- (the lease, or the watchdog timeout), ARGV[4] queue entry ('' = do not
-- queue), ARGV[5] queue ttl ms, ARGV[6] claim window ms.
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
local id, ttl, entry, qttl = ARGV[1], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
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
local mine, held, blocked = grant_queued(now, size, held_weight(), ARGV[6], self)
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
