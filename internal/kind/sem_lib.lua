-- Shared by the semaphore scripts; dlock prepends it to each one's source.
--
-- Key order, the same in every semaphore script:
--   KEYS[1] permits  dlock:semaphore:{name}: permit id -> expiry, server clock in ms
--   KEYS[2] size     dlock:semaphore-size:{name}: the number of permits
--   KEYS[3] queue    dlock:semaphore-queue:{name}: waiters, first first
-- A permit id is "<client id>:<n>"; a queue entry is "<ticket> <ttl ms> <permit id>"
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

-- add_permit grants permit id for ttl ms; the permits and the size live at
-- least as long as it.
local function add_permit(now, id, ttl)
  redis.call('zadd', KEYS[1], now + ttl, id)
  keep(KEYS[1], ttl)
  keep(KEYS[2], ttl)
end

-- grant_queued gives free permits to queued waiters, first first: each gets
-- its permit for the claim window (a waiter that died before its turn must
-- not keep it for a whole lease; a live one extends it as soon as it runs)
-- and its client is woken on its client channel (its next attempt confirms). Only as many waiters as
-- there are free permits are told: a release wakes one waiter. held is the
-- number of permits held. Returns whether it reached self (the caller's own
-- entry, which it leaves to the caller), the number held afterwards, and
-- whether it emptied the queue.
local function grant_queued(now, size, held, claim_ms, self)
  while held < size do
    local e = redis.call('lpop', KEYS[3])
    if not e then return false, held, true end
    if e == self then return true, held, false end
    local ticket, ttl, id = string.match(e, '^(%d+) (%d+) (.+)$')
    local cid = id and string.match(id, '^(.*):')
    if cid and not redis.call('zscore', KEYS[1], id) then
      local claim = math.min(tonumber(ttl), tonumber(claim_ms))
      add_permit(now, id, claim)
      held = held + 1
      redis.pcall('publish', 'dlock:client:' .. cid, ticket .. ' 0 ' .. string.format('%d', claim))
    end
  end
  return false, held, false
end

-- reap drops expired permits (their holders crashed or were cut off).
local function reap(now)
  redis.call('zremrangebyscore', KEYS[1], '-inf', now)
end
