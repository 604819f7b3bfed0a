-- renew: extend many held locks in one call (the watchdog's batch).
-- Per lock i, five keys: KEYS[5i-4] lock hash, KEYS[5i-3] its read-deadline
-- set (or the hash again), KEYS[5i-2] its fencing counter, KEYS[5i-1] its
-- forced set, KEYS[5i] its record of long holds; ARGV[i] owner field,
-- ARGV[n+i] new ttl in ms, ARGV[2n+i] kind, ARGV[3n+i] the hold's record of
-- long holds, or '' when it need not be written this time, ARGV[4n+i] the
-- hold's fencing token, or '' (a permit's: it has none); the last ARGV is
-- the fencing counters' TTL in ms (why_gone). Kinds:
--   'm' a Mutex or FairMutex renewed by the watchdog: the TTL is set
--       (Redisson's renewal; every call of such a hold carries the same TTL);
--   'f' a Mutex or FairMutex with a fixed lease: the TTL is extended to
--       ttl, never shortened (its calls carry different TTLs: Extend's, a
--       recheck's time left);
--   'w' a write hold: the TTL is extended, never shortened; KEYS[5i-3] is
--       the read-deadline set, where a writer that downgraded keeps its own
--       deadline (moved to now+ttl, server clock); a writer whose deadline
--       there has passed is over, as a reader's share is;
--   'r' a read hold: its own deadline moves to now+ttl (server clock) and the
--       hash lives at least that long; other readers' deadlines are untouched.
--       A share whose deadline has passed is over (rw_purge ends it at its
--       deadline, whoever keeps the hash alive) even while its field is
--       still in the hash: it is not renewed and answers why_gone's code;
--   's' a semaphore permit: KEYS[4i-3] is the permits' sorted set and
--       KEYS[4i-2] the size key (sem_lib.lua's layout), ARGV[i] the permit
--       id (which carries its number of permits); the permit's expiry
--       moves to now+ttl (server clock) unless it is later already, and both
--       keys live at least that long. A permit that is gone or has expired
--       answers GONE.
-- Only 'm' may shorten, and only a lease of another TTL, which a watchdog
-- hold has none of: a call that lands late (its caller stopped waiting, or
-- the wire resent it) must not cut short the lease a later call gave. An
-- Extend to less than what is left moves only its holder's deadline.
-- A lock hold renewed is a long hold: its record (field = owner, value =
-- "<granted ms> <renewal period ms>", keys.HeldRecord) is what Inspect
-- shows as held for and renewals. The holder sends it at its first renewal
-- and every few after, not at each (that would double a renewal's cost), so
-- the record lives longer than the renewals between two writes; fields of
-- owners that no longer hold are pruned once they outnumber the holders.
-- Returns a list with 1 where the owner still held the lock, and why_gone's
-- code where it did not. Every key is in the same Cluster slot.
-- The record lives HELD_TTLS TTLs from each write: longer than the
-- keys.HeldEvery renewals (3 TTLs) between two writes.
local HELD_TTLS = 5
local function record(k, h, f, ttl, rec)
  if rec == '' then return end
  if redis.call('hsetnx', h, f, rec) == 1 and redis.call('hlen', h) > redis.call('hlen', k) + 4 then
    for _, o in ipairs(redis.call('hkeys', h)) do
      if redis.call('hexists', k, o) == 0 then redis.call('hdel', h, o) end
    end
  end
  -- Only ever raised: readers of one RWMutex may renew with different TTLs.
  if redis.call('pttl', h) < ttl * HELD_TTLS then redis.call('pexpire', h, ttl * HELD_TTLS) end
end
local n = (#ARGV - 1) / 5
local fence_ttl = ARGV[#ARGV]
local out = {}
local now
-- clock reads the server's clock (ms) once per call, when a kind needs it.
local function clock()
  if not now then
    local t = redis.call('time')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
-- live tells whether reader f's deadline in z is still ahead. A share past
-- it is over though its field may still be in the hash (no script purged it
-- yet: rw_purge ends shares whose deadline is at or before now), and
-- renewing it would revive it.
local function live(z, f)
  local d = redis.call('zscore', z, f)
  return d and tonumber(d) > clock()
end
-- writer_live tells whether writer f's hold is still on: once it
-- downgraded, its deadline is in z beside the readers', and rw_purge ends
-- the write hold when that passes, whoever keeps the hash alive.
local function writer_live(z, f)
  local d = redis.call('zscore', z, f)
  return not d or tonumber(d) > clock()
end
-- renew_one renews lock i and returns its code.
local function renew_one(i)
  local k, z, f, ttl, kind = KEYS[5 * i - 4], KEYS[5 * i - 3], ARGV[i], tonumber(ARGV[n + i]), ARGV[2 * n + i]
  if kind == 's' then
    local exp = redis.call('zscore', k, f)
    if not exp or tonumber(exp) <= clock() then return GONE end
    redis.call('zadd', k, 'GT', now + ttl, f)
    if redis.call('pttl', k) < ttl then redis.call('pexpire', k, ttl) end
    if redis.call('pttl', z) < ttl then redis.call('pexpire', z, ttl) end
    return 1
  end
  if redis.call('hexists', k, f) == 1 and (kind ~= 'r' or live(z, f)) and (kind ~= 'w' or z == k or writer_live(z, f)) then
    if kind == 'm' then
      redis.call('pexpire', k, ttl)
    elseif kind == 'f' then
      if redis.call('pttl', k) < ttl then redis.call('pexpire', k, ttl) end
    else
      if kind == 'r' or (kind == 'w' and z ~= k and redis.call('zscore', z, f)) then
        -- A reader's deadline, or a downgraded writer's (rlock.lua).
        redis.call('zadd', z, 'GT', clock() + ttl, f)
        if redis.call('pttl', z) < ttl then redis.call('pexpire', z, ttl) end
      end
      if redis.call('pttl', k) < ttl then redis.call('pexpire', k, ttl) end
    end
    record(k, KEYS[5 * i], f, ttl, ARGV[3 * n + i])
    return 1
  end
  -- The token tells a data loss from a take-over even after another
  -- owner's grant began a new sequence, and its age one whose sequence
  -- ended by its TTL.
  local tok = ARGV[4 * n + i]
  if tok == '' then tok = nil end
  return why_gone(KEYS[5 * i - 2], KEYS[5 * i - 1], f, tok, fence_ttl, true)
end
-- A key of lock i that holds another type (a neighbour overwrote it) is
-- that lock's loss, not the batch's: a WRONGTYPE would fail the whole call,
-- and every other hold in it would be declared lost at its deadline. Any
-- other error (OOM, ...) still fails the call, with its own code.
for i = 1, n do
  local ok, res = pcall(renew_one, i)
  if ok then
    out[i] = res
  else
    local msg = type(res) == 'table' and res.err or tostring(res)
    if not string.find(msg, 'WRONGTYPE', 1, true) then return redis.error_reply(msg) end
    out[i] = GONE
  end
end
return out
