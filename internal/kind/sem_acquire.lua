-- sem_acquire: take a permit, or queue for one.
-- ARGV[1] permit id, ARGV[2] the number of permits the caller configured,
-- ARGV[3] ttl ms (the lease, or the watchdog timeout), ARGV[4] queue entry
-- ('' = do not queue), ARGV[5] queue ttl ms, ARGV[6] claim window ms.
-- Returns {1, ttl ms} when the permit is held, {0, ms until the first permit
-- expires (-1: none)} when all are taken, {-3, size} when the semaphore is
-- live with another number of permits.
--
-- Safe to resend: a permit id already granted (an earlier call whose reply
-- was lost, or a grant handed to the caller) is reported, not taken twice,
-- and an entry is queued once.
local id, n, ttl, entry = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local now = now_ms()
reap(now)
if redis.call('zscore', KEYS[1], id) then
  add_permit(now, id, ttl)
  if entry ~= '' then redis.call('lrem', KEYS[3], 0, entry) end
  return {1, ttl}
end
local size = tonumber(redis.call('get', KEYS[2]) or '0')
local held = redis.call('zcard', KEYS[1])
if size ~= n then
  if size > 0 and (held > 0 or redis.call('exists', KEYS[3]) == 1) then
    return {-3, size}
  end
  redis.call('set', KEYS[2], n, 'PX', math.max(ttl, tonumber(ARGV[5])))
  size = n
end
local self = nil
if entry ~= '' then self = entry end
local mine = false
if held < size then mine, held = grant_queued(now, size, held, ARGV[6], self) end
if mine or held < size then
  add_permit(now, id, ttl)
  return {1, ttl}
end
if entry ~= '' then
  -- A resent call finds its entry already queued; the queue lives while
  -- its waiters keep trying (they re-check at least every re-check
  -- interval, a quarter of the queue's TTL).
  if not redis.call('lpos', KEYS[3], entry) then redis.call('rpush', KEYS[3], entry) end
  redis.call('pexpire', KEYS[3], ARGV[5])
end
local first = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then return {0, math.max(tonumber(first[2]) - now, 0)} end
return {0, -1}
