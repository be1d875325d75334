-- KEYS[1] <lock>:LOCKED   ARGV jid, lease ms, fencing token of the acquisition ('0': whichever holds jid's entry)
-- Moves the lease to now + lease (renew_entry). Returns 1, or 0 when the hold is gone: no entry, another
-- acquisition's, or its lease or expiry already passed; or revoked by an operator (remove.lua).
local lease = whole(ARGV[2], 'lease', 1)
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
local ms = now()
return renew_entry(KEYS[1], ARGV[1], current, ARGV[3], lease, ms)
