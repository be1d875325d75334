-- Adds to counters in one hash and sets its TTL: a bucket of the per-minute counts the admin UI charts (History).
-- KEYS[1] the bucket   ARGV ttl ms, then field, amount pairs   Returns the number of pairs. Every amount is checked,
-- and HLEN fails on a key of another type (WRONGTYPE), before the first write.
local ttl = whole(ARGV[1], 'ttl', 1)
if #ARGV % 2 ~= 1 then error({err = 'ERR tally takes a ttl, then field, amount pairs'}) end
for i = 3, #ARGV, 2 do whole(ARGV[i], 'amount', 0) end
redis.call('HLEN', KEYS[1])
local added = false
for i = 2, #ARGV, 2 do
  if tonumber(ARGV[i + 1]) > 0 then
    redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
    added = true
  end
end
if added then redis.call('PEXPIRE', KEYS[1], ttl) end
return (#ARGV - 1) / 2
