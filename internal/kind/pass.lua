-- pass: a final release that hands the lock straight to a waiter of the
-- same Client (lock cohorting: lease/cohort.go), who is told in process
-- memory, where nobody else can write, and so needs no claim.
-- KEYS[1] the lock hash, KEYS[2] the fencing counter, KEYS[3] the queue
-- ARGV[1] the holder's owner field (its hold count must be 1)
-- ARGV[2] fencing counter ttl in ms
-- ARGV[3] the waiter's queue entry, ARGV[4] its owner field,
-- ARGV[5] its TTL in ms (its lease, or the watchdog timeout)
-- Returns the waiter's fencing token (>= 1) when passed; 0 when nothing was
-- done, and the caller releases as usual: the holder's count is not 1 (or
-- its hold is gone), or the waiter's entry is no longer queued (it left,
-- or it was handed the lock otherwise). The waiter must still be queued so
-- that a waiter that gave up (leave.lua, which takes its entry out first)
-- is never made a holder nobody knows of.
--
-- The waiter gets its own TTL at once, counted from before this call was
-- sent (its Client times the grant from there), and a new token.
if redis.call('hget', KEYS[1], ARGV[1]) ~= '1' or redis.call('lrem', KEYS[3], 1, ARGV[3]) ~= 1 then
  return 0
end
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], ARGV[4], 1)
redis.call('pexpire', KEYS[1], ARGV[5])
local tok = redis.call('incr', KEYS[2])
if tok ~= 1 then return tok end
--[[lib.lua]]
-- The sequence ended (the counter expired): a new one, above every token.
return issue_token(ARGV[2])
