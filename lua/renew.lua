-- KEYS[1] <lock>:LOCKED   ARGV jid, lease ms, fencing token of the acquisition ('0': whichever holds jid's entry)
-- Moves the lease to now + lease. Returns 0 when the hold is gone: no entry, another acquisition's, or its lease or
-- expiry already passed (another process may hold it now; renewing would hide that).
local lease = whole(ARGV[2], 'lease', 1)
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
local now = clock()
local t, x, _, f, rest = parse(current)
if t == nil or (ARGV[3] ~= '0' and f ~= tonumber(ARGV[3])) or not live(current, now) then return 0 end
local renewed = '{"t":' .. t .. ',"x":' .. x .. ',"l":' .. string.format('%d', now + lease) .. rest
redis.call('HSET', KEYS[1], ARGV[1], renewed)
extend(KEYS[1], horizon(renewed), now, false)
return 1
