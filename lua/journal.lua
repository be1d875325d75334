-- Keeps the newest entries of a journal (the reaper's last passes, History) with a TTL.
-- KEYS[1] the list   ARGV entry, keep (1 to 1000), ttl ms   Returns the journal's length. LPUSH, the first write,
-- fails on a key of another type (WRONGTYPE) before it writes.
local keep = whole(ARGV[2], 'keep', 1, 1000)
local ttl = whole(ARGV[3], 'ttl', 1)
local length = redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, keep - 1)
redis.call('PEXPIRE', KEYS[1], ttl)
return math.min(length, keep)
