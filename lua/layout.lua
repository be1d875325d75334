-- Where a prefix's keys live, recorded the first time the prefix is used. KEYS[1] the prefix's layout key
-- ARGV layout (as the caller has it), mode ("1": record it when none is; "0": only read; "-": delete the record when
-- it is ARGV[1], for a prefix drained of its locks)
-- Returns the layout recorded (ARGV[1] when this call recorded it; before the deletion, for "-"), or false when none
-- is and none was recorded. GET fails on a key of another type before any write. No TTL: it is the prefix's
-- configuration, not a lock; were it to lapse while processes of one layout run, a process of another could record
-- its own and split the prefix.
local recorded = redis.call('GET', KEYS[1])
if ARGV[2] == '-' then
  if recorded == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return recorded
end
if recorded then return recorded end
if ARGV[2] ~= '1' then return false end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
