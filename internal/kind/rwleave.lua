-- rwleave: a waiting writer gives up. It stops blocking new readers, and
-- when no other writer waits, readers it held back are woken.
-- ARGV[1] owner. Returns 1 when readers were woken.
-- rw_purge, and the ZREM, may empty KEYS[4], and rw_purge delete KEYS[1]:
-- read through here (rwlib.lua), a key this script emptied answers as
-- a missing one.
rw_purge(now_ms())
if (here('zrem', KEYS[4], ARGV[1]) or 0) == 1 and (here('zcard', KEYS[4]) or 0) == 0
   and here('hget', KEYS[1], 'mode') ~= 'write' then
  publish(rw_channel(), '1')
  return 1
end
return 0
