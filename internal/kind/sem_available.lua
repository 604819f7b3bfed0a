-- sem_available: the size and the permits held, read only.
-- ARGV[1] the size the caller's handle gives a semaphore that does not
-- exist yet. Returns {size, held}.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = 0
for _, id in ipairs(redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf')) do held = held + weight(id) end
local size = tonumber(redis.call('get', KEYS[2]) or '0')
if size < 1 then size = tonumber(ARGV[1]) end
return {size, held}
