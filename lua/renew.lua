-- KEYS[1] <lock>:LOCKED   ARGV jid, lease ms
-- Moves jid's lease to now + lease. Returns 0 when the entry is gone (the lock was lost).
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
local clock = redis.call('TIME')
local now = clock[1] * 1000 + (clock[2] - clock[2] % 1000) / 1000
local t, x, rest = string.match(current, '^{"t":(%d+),"x":(%d+),"l":%d+(.*)$')
local renewed = '{"t":' .. t .. ',"x":' .. x .. ',"l":' .. string.format('%d', now + tonumber(ARGV[2])) .. rest
redis.call('HSET', KEYS[1], ARGV[1], renewed)
extend(KEYS[1], horizon(renewed), now, false)
return 1
