-- renew.lua for a batch, in one call at one instant (the lease keeper renews every held lease at once).
-- KEYS[i] the i-th renewal's <lock>:LOCKED, then the activity logs (<digest>:EVENTS) of those whose lockEvents is on.
-- ARGV per renewal, in fours: jid, lease ms, fencing token of the acquisition ('0': whichever holds jid's entry), and
-- the KEYS position of its log ('0': none; a refused renewal logs lost there). Returns {1 or 0 per renewal, in
-- order}: renew.lua's answer for each.
-- All or nothing for the batch: every lease is checked, then every entry read (HGET fails on a wrong-typed key),
-- before the first write.
local n = #ARGV / 4
local leases = {}
for i = 1, n do leases[i] = whole(ARGV[i * 4 - 2], 'lease', 1) end
local current = {}
for i = 1, n do current[i] = redis.call('HGET', KEYS[i], ARGV[i * 4 - 3]) end
local ms = now()
local renewed = {}
for i = 1, n do
  renewed[i] = renew_entry(KEYS[i], ARGV[i * 4 - 3], current[i], ARGV[i * 4 - 1], leases[i], ms)
  local log = tonumber(ARGV[i * 4])
  if renewed[i] == 0 and log and log > 0 and KEYS[log] then log_event(KEYS[log], ms, 'lost', ARGV[i * 4 - 3], 'run') end
end
return renewed
