-- renew: extend many held locks in one call (the watchdog's batch).
-- KEYS[i] lock hash, ARGV[i] owner field, ARGV[#KEYS+i] new ttl in ms.
-- Returns a list with 1 where the owner still held the lock (and its ttl was
-- set), 0 where it did not. Every key is in the same Cluster slot.
local n = #KEYS
local out = {}
for i = 1, n do
  if redis.call('hexists', KEYS[i], ARGV[i]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[n + i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
