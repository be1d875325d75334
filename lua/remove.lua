-- Deletes locks whole. KEYS[1] <prefix>:digests  KEYS[2..] each lock's <lock>:LOCKED   ARGV each lock's member
-- Returns how many of the holders keys existed.
-- ZREM first: the one call that can fail (a wrong-typed index), before anything is written. In chunks, under unpack's
-- limit on how many values it spreads.
for i = 1, #ARGV, 1000 do redis.call('ZREM', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV))) end
local existed = 0
for i = 2, #KEYS do existed = existed + redis.call('DEL', KEYS[i]) end
return existed
