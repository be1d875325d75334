-- Where a prefix's keys live, recorded the first time the prefix is used. KEYS[1] the prefix's layout key
-- ARGV layout (as the caller is configured), record ("1": record it when none is; "0": only read)
-- Returns the layout recorded (ARGV[1] when this call recorded it), or false when none is and none was recorded. GET
-- fails on a key of another type before any write. No TTL: it is the prefix's configuration, not a lock; were it to
-- lapse while processes of one layout run, a process of another could record its own and split the prefix.
local recorded = redis.call('GET', KEYS[1])
if recorded then return recorded end
if ARGV[2] ~= '1' then return false end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
