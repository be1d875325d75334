-- A lease on a key for one owner (one runner at a time). KEYS[1] the lease's key   ARGV owner, lease ms (0: give up)
-- Returns 1 when owner holds the lease after the call: taken when free, renewed when owner's; 0 when another owner's
-- or given up (only owner's own lease is deleted). GET fails on a wrong-typed key before any write.
local lease = whole(ARGV[2], 'lease', 0)
local current = redis.call('GET', KEYS[1])
if lease == 0 then
  if current == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return 0
end
if current and current ~= ARGV[1] then return 0 end
keep_lease(KEYS[1], ARGV[1], lease, current)
return 1
