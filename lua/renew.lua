-- KEYS[1] <lock>:LOCKED  KEYS[2] <digest>:EVENTS (optional: lockEvents on; a refused renewal logs lost)
-- ARGV jid, lease ms, fencing token of the acquisition ('0': whichever holds jid's entry)
-- Moves the lease to now + lease (renew_entry). Returns 1, or 0 when the hold is gone: no entry, another
-- acquisition's, or its lease or expiry already passed; or revoked by an operator (remove.lua).
local lease = whole(ARGV[2], 'lease', 1)
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current and not KEYS[2] then return 0 end
local ms = now()
local renewed = renew_entry(KEYS[1], ARGV[1], current, ARGV[3], lease, ms, false)
if renewed == 0 and KEYS[2] then log_event(KEYS[2], ms, 'lost', ARGV[1], 'run') end
return renewed
