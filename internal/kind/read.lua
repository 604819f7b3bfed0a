-- read: one read that a lock decision rests on, run as a script so that it
-- is answered by the primary. A Cluster client that sends reads to replicas
-- (go-redis's ReadOnly, RouteByLatency, RouteRandomly) would have a replica
-- answer the bare command, from a copy that may lag; go-redis sends every
-- EVALSHA to the primary. KEYS[1] the key; ARGV[1] the command, 'hexists'
-- (ARGV[2] the field) or 'get'. Returns the command's reply.
local cmd = ARGV[1]
if cmd == 'hexists' then return redis.call('hexists', KEYS[1], ARGV[2]) end
if cmd == 'get' then return redis.call('get', KEYS[1]) end
return redis.error_reply('ERR dlock read.lua: not a read dlock makes: ' .. tostring(cmd))
