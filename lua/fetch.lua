-- One lock read whole, at one instant. KEYS[1] <lock>:LOCKED  KEYS[2] <prefix>:digests   ARGV member
-- Returns {HGETALL of the holders (flat), PTTL of the key, the member's index score (nil when none), Redis time ms}.
local entries = redis.call('HGETALL', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
local ms = now()
return {entries, pttl, score, ms}
