-- renew.lua for a batch, in one call at one instant (the lease keeper renews every held lease at once).
-- KEYS[i] the i-th renewal's <lock>:LOCKED, then the activity logs (<digest>:EVENTS) of those whose lockEvents is on.
-- ARGV per renewal, in fives: jid, lease ms, fencing token of the acquisition ('0': whichever holds jid's entry), the
-- KEYS position of its log ('0': none; a refused renewal logs lost there), and '1' to keep the place of a hold its
-- holder was told it lost while its perform runs on (renew_entry's keep: a revoked entry is renewed too; a refusal
-- then logs nothing more), else '0'. Returns {1 or 0 per renewal, in order}: renew.lua's answer for each.
-- All or nothing for the batch: every lease is checked, then every entry read (HGET fails on a wrong-typed key),
-- before the first write.
local n = #ARGV / 5
local leases = {}
for i = 1, n do leases[i] = whole(ARGV[i * 5 - 3], 'lease', 1) end
local current = {}
for i = 1, n do current[i] = redis.call('HGET', KEYS[i], ARGV[i * 5 - 4]) end
local ms = now()
local renewed = {}
for i = 1, n do
  local keep = ARGV[i * 5] == '1'
  renewed[i] = renew_entry(KEYS[i], ARGV[i * 5 - 4], current[i], ARGV[i * 5 - 2], leases[i], ms, keep)
  local log = tonumber(ARGV[i * 5 - 1])
  if renewed[i] == 0 and not keep and log and log > 0 and KEYS[log] then
    log_event(KEYS[log], ms, 'lost', ARGV[i * 5 - 4], 'run')
  end
end
return renewed
