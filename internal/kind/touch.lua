-- touch: prove that one hold is on this node, with a write that enters the
-- replication stream after it (WAIT, on the same connection, then counts
-- the replicas that have the hold). KEYS[1] the lock hash or a semaphore's
-- permit set; ARGV[1] the owner's field or permit id. Owners are never
-- reused, so finding the field proves this node has the grant itself, not
-- an older hold of the same key (after a failover, the new primary may
-- have the key held by someone else while our grant, made on the old
-- primary, never reached it). The write sets the key's TTL to its current
-- value, which changes nothing. Returns 1 when the hold is here, else 0.
local k, f = KEYS[1], ARGV[1]
local t = redis.call('type', k).ok
local here = false
if t == 'hash' then
  here = redis.call('hexists', k, f) == 1
elseif t == 'zset' then
  here = redis.call('zscore', k, f) ~= false
end
local ttl = redis.call('pttl', k)
if not here or ttl <= 0 then return 0 end
redis.call('pexpire', k, ttl)
return 1
