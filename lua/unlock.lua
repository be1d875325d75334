-- KEYS[1] <lock>:LOCKED  KEYS[2] <prefix>:digests
-- ARGV jid, member. Returns 1 when jid held the lock.
return release(KEYS[1], KEYS[2], ARGV[2], ARGV[1])
