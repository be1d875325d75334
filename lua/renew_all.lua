-- renew.lua for a batch, in one call at one instant (the lease keeper renews every held lease at once).
-- KEYS[i] the i-th renewal's <lock>:LOCKED   ARGV per renewal, in threes: jid, lease ms, fencing token of the
-- acquisition ('0': whichever holds jid's entry). Returns {1 or 0 per renewal, in order}: renew.lua's answer for each.
-- All or nothing for the batch: every lease is checked, then every entry read (HGET fails on a wrong-typed key),
-- before the first write.
local leases = {}
for i = 1, #KEYS do leases[i] = whole(ARGV[i * 3 - 1], 'lease', 1) end
local current = {}
for i = 1, #KEYS do current[i] = redis.call('HGET', KEYS[i], ARGV[i * 3 - 2]) end
local ms = now()
local renewed = {}
for i = 1, #KEYS do
  renewed[i] = renew_entry(KEYS[i], ARGV[i * 3 - 2], current[i], ARGV[i * 3], leases[i], ms)
end
return renewed
