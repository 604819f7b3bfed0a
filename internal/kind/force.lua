-- force: release the lock whoever holds it, and pass it to the next waiter.
-- KEYS[4] the forced set dlock:forced:{name}
-- ARGV[1] claim window ms, ARGV[2] fencing counter ttl ms.
-- Returns 1 when the lock was held, else 0. The owners it took the lock from
-- are remembered in KEYS[4] for a fencing counter's lifetime, so that they
-- learn it was forced.
-- Each evicted owner's client is told at once on its client channel
-- ("forced <lock key>", keys.ForcedMessage), once per client; the message is
-- a hint only: the client asks Redis, which answers from KEYS[4].
if redis.call('exists', KEYS[1]) == 0 then return 0 end
local fields = redis.call('hkeys', KEYS[1])
local told = {}
for _, f in ipairs(fields) do
  if f ~= 'mode' then
    redis.call('sadd', KEYS[4], f)
    local cid = string.match(f, '^([^:]+):') -- client ids have no ':'
    if cid and not told[cid] then
      told[cid] = true
      publish('dlock:client:' .. cid, 'forced ' .. KEYS[1])
    end
  end
end
redis.call('pexpire', KEYS[4], ARGV[2])
local rw = redis.call('hexists', KEYS[1], 'mode') == 1
release_to_next(ARGV[1], ARGV[2])
if rw then
  -- A read-write lock's waiters listen on Redisson's RReadWriteLock channel;
  -- "1" wakes all of them.
  publish(redisson_name('redisson_rwlock', KEYS[1]), '1')
end
return 1
