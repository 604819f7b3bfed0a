-- rwleave: a waiting writer gives up. It stops blocking new readers, and
-- when no other writer waits, readers it held back are woken.
-- ARGV[1] owner. Returns 1 when readers were woken.
rw_purge(now_ms())
if redis.call('zrem', KEYS[4], ARGV[1]) == 1 and redis.call('zcard', KEYS[4]) == 0
   and redis.call('hget', KEYS[1], 'mode') ~= 'write' then
  publish(rw_channel(), '1')
  return 1
end
return 0
