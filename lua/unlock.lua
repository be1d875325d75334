-- KEYS[1] <lock>:LOCKED  KEYS[2] <prefix>:digests  KEYS[3] <digest>:EVENTS (optional: lockEvents on)
-- ARGV jid, member, fencing token of the acquisition ('0': whichever holds jid's entry), and optionally '1' to
-- PUBLISH the release for lockTimeout's waiters (ARGV[4]).
-- Returns 1 when jid held the lock, 0 when it did not (gone, another acquisition's, or past its horizon).
-- Redis time is read only for an entry with a TTL or a lease whose key outlives it (PEXPIRETIME, unlock_step): one
-- without is live for as long as it is there, and a key that expires with the entry says it is live while it is
-- there (and for the log's entry, when it is on). With KEYS[3]: logs released (1) or missed (0: nothing of jid's was
-- live).
-- With ARGV[4] '1', a release (1) PUBLISHes '1' on the channel named KEYS[1], for the waiters of its lockTimeout.
return unlock_step(KEYS, ARGV)
