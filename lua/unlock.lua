-- KEYS[1] <lock>:LOCKED  KEYS[2] <prefix>:digests
-- ARGV jid, member, fencing token of the acquisition ('0': whichever holds jid's entry).
-- Returns 1 when jid held the lock, 0 when it did not (gone, another acquisition's, or past its horizon).
-- Redis time is read only for an entry with a TTL or a lease: one without is live for as long as it is there.
return release(KEYS[1], KEYS[2], ARGV[2], ARGV[1], ARGV[3])
