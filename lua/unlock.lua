-- KEYS[1] <lock>:LOCKED  KEYS[2] <prefix>:digests
-- ARGV jid, member, fencing token of the acquisition ('0': whichever holds jid's entry).
-- Returns 1 when jid held the lock, 0 when it did not (gone, another acquisition's, or past its horizon).
local ms = now()
return release(KEYS[1], KEYS[2], ARGV[2], ARGV[1], ARGV[3], ms)
