-- force: release the lock whoever holds it, and pass it to the next waiter.
-- KEYS[4] the forced set dlock:forced:{name}
-- ARGV[1] claim window ms, ARGV[2] fencing counter ttl ms.
-- Returns 1 when the lock was held, 0 when the key is absent, and
-- NOT_HASH or NOT_LOCK, changing nothing, when KEYS[1] is not a lock.
-- The owners it took the lock from
-- are remembered in KEYS[4] for a fencing counter's lifetime, so that they
-- learn it was forced.
-- Each evicted owner's client is told at once on its client channel
-- ("forced <lock key>", keys.ForcedMessage), once per client; the message is
-- a hint only: the client asks Redis, which answers from KEYS[4].
local NOT_HASH, NOT_LOCK = -1, -2
local t = redis.call('type', KEYS[1]).ok
if t == 'none' then return 0 end
if t ~= 'hash' then return NOT_HASH end
-- A lock's hash (Redisson's layouts, dlock's the same) holds owner fields
-- "<client id>:<n>" (a writer's "<client id>:<n>:write") with an integer
-- hold count, a read-write lock's 'mode' ('read' or 'write'), and an
-- election's 'leader' ("<token> <value>"). Anything else is someone's data,
-- which a force must not destroy: it is decided here, in the script, so that
-- nothing can change the key between the look and the deletion.
local all = redis.call('hgetall', KEYS[1])
local fields = {}
local rw = false
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  local ok
  if f == 'mode' then
    ok = v == 'read' or v == 'write'
    rw = true
  elseif f == 'leader' then
    ok = string.match(v, '^%d+ ') ~= nil
  else
    ok = (string.match(f, '^.+:%d+$') or string.match(f, '^.+:%d+:write$')) and string.match(v, '^%d+$')
    fields[#fields + 1] = f
  end
  if not ok then return NOT_LOCK end
end
-- A hand-off to an evicted owner that its waiter has not popped yet
-- (lib.lua's deliver) goes with the lock: its box is deleted, before
-- anything else is written. Only a Mutex's waiters pop: a read-write lock
-- (its hash has 'mode') has no boxes. The box is a key the script does not
-- declare, and a Cluster node whose slot is MIGRATING refuses one it does
-- not have ("non local key"): the box may then have moved to the importing
-- node, out of this script's reach, where its waiter could still pop a
-- grant this force takes away (two holders). So the force does nothing and
-- answers TRYAGAIN, as Redis answers a call whose keys a migration split:
-- it is sent again (go-redis, then the wire) until the slot settles. Any
-- other refusal is the script's error, as it was. Either way nothing but
-- evicted owners' boxes has been written: a force sent again finds the
-- lock as it was.
if not rw then
  for _, f in ipairs(fields) do
    local _, refused = here('del', KEYS[3] .. '\31g:' .. f)
    if refused then return try_again('a hand-off box') end
  end
end
local told = {}
for _, f in ipairs(fields) do
  redis.call('sadd', KEYS[4], f)
  local cid = string.match(f, '^([^:]+):') -- client ids have no ':'
  if cid and not told[cid] then
    told[cid] = true
    publish('dlock:client:' .. cid, 'forced ' .. KEYS[1])
  end
end
redis.call('pexpire', KEYS[4], ARGV[2])
release_to_next(ARGV[1], ARGV[2])
if rw then
  -- A read-write lock's waiters listen on Redisson's RReadWriteLock channel;
  -- "1" wakes all of them.
  publish(redisson_name('redisson_rwlock', KEYS[1]), '1')
end
return 1
