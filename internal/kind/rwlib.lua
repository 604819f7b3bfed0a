-- Shared by the read-write lock scripts; prepended after lib.lua.
--
-- Key order in every read-write script:
--   KEYS[1] the lock hash (the name itself). Redisson's RReadWriteLock layout:
--           'mode' = 'read' | 'write', '<owner>' = read holds of that owner,
--           '<owner>:write' = write holds of the writer.
--   KEYS[2] the fencing counter          dlock:fence:{name}
--   KEYS[3] read-hold deadlines          dlock:readers:{name}  (zset: owner -> server ms),
--           and the writer's ('<owner>:write') once it downgraded
--   KEYS[4] writers waiting              dlock:wwait:{name}    (zset: owner -> server ms)
--   KEYS[5] owners ForceUnlock evicted   dlock:forced:{name}
-- Deadlines are by the server's clock (TIME), never a client's.

local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- On a migrating slot (migrating.lua): rw_purge may empty the deadline set
-- and the waiting writers, and delete the lock hash; rwunlock's ZREM of the
-- caller's deadline may empty the deadline set. So every script touches
-- those keys after that point through here, which reads a refusal as the
-- command's answer on a missing key; a write that would make such a key
-- anew cannot be done there, and its script answers try_again, having
-- written nothing but rw_purge's removals (each of which a resend finds
-- done already).

-- rw_purge drops the read holds whose deadline passed (their owner crashed or
-- stopped renewing: each share ends by its own deadline, whoever else renews)
-- and the waiting writers that stopped re-checking. It may empty KEYS[3]
-- and KEYS[4] and delete KEYS[1] (see here). Within it nothing is
-- touched after it is emptied: the hash keeps 'mode' until the DEL.
local function rw_purge(now)
  local dead = redis.call('zrangebyscore', KEYS[3], '-inf', now)
  if #dead > 0 then
    for _, f in ipairs(dead) do
      -- A writer's deadline is here once it downgraded: when it passes, the
      -- write hold ends and its read holds go on alone, as after its release.
      -- (Only a field that was there: a deadline left by a hash that expired
      -- must not touch a later holder's mode.)
      if redis.call('hdel', KEYS[1], f) == 1 and string.sub(f, -6) == ':write' then
        redis.call('hset', KEYS[1], 'mode', 'read')
      end
    end
    redis.call('zremrangebyscore', KEYS[3], '-inf', now)
    if redis.call('hlen', KEYS[1]) == 1 then redis.call('del', KEYS[1]) end
  end
  redis.call('zremrangebyscore', KEYS[4], '-inf', now)
end

-- rw_extend makes the lock hash live at least ttl ms more; it never shortens
-- it, so one hold's TTL never cuts another's.
local function rw_extend(ttl)
  if redis.call('pttl', KEYS[1]) < tonumber(ttl) then redis.call('pexpire', KEYS[1], ttl) end
end

-- rw_track records a read hold's deadline (never moving it earlier), and
-- is the read grant's first write: false, nothing written, when the node
-- refuses the deadline set that rw_purge emptied (here). rw_keep then
-- keeps the set, and the hash, alive at least as long.
local function rw_track(owner, now, ttl)
  local _, gone = here('zadd', KEYS[3], 'GT', now + tonumber(ttl), owner)
  return not gone
end

-- rw_keep makes the deadline set and the hash live at least ttl ms more
-- (a read grant's last writes, after its fields).
local function rw_keep(ttl)
  if redis.call('pttl', KEYS[3]) < tonumber(ttl) then redis.call('pexpire', KEYS[3], ttl) end
  rw_extend(ttl)
end

-- rw_shrink fits the hash's TTL to its latest read deadline once only
-- tracked readers are left in it. Its caller's ZREM may have emptied the
-- deadline set (here): then readers are left that it does not track
-- (Redisson's), and the TTL stays.
local function rw_shrink(now)
  if redis.call('hget', KEYS[1], 'mode') ~= 'read' then return end
  if redis.call('hlen', KEYS[1]) - 1 ~= (here('zcard', KEYS[3]) or 0) then return end
  local last = redis.call('zrange', KEYS[3], -1, -1, 'withscores')
  if last[2] then redis.call('pexpire', KEYS[1], math.max(tonumber(last[2]) - now, 1)) end
end

-- rw_wait is how long a waiter may sleep before trying again: until the
-- hash's TTL ends or the earliest deadline in the set (a reader's share, a
-- downgraded writer's hold) passes, whichever comes first.
local function rw_wait(now)
  local ttl = here('pttl', KEYS[1]) or -2
  local first = here('zrange', KEYS[3], 0, 0, 'withscores') or {}
  if first[2] then ttl = math.min(ttl, math.max(tonumber(first[2]) - now, 1)) end
  return ttl
end

local function rw_channel()
  return redisson_name('redisson_rwlock', KEYS[1])
end
