-- KEYS[1] <lock>:LOCKED  KEYS[2] <prefix>:digests  KEYS[3] <prefix>:fence  KEYS[4] <digest>:EVENTS (optional: given
-- when the worker's lockEvents is on, and the call then logs taken, reentered or refused there, log_event)
-- ARGV jid, member (index member), limit, ttl ms, lease ms, info JSON or '', fenced ('1' run lock / '0' queue lock),
-- the job's queue name as a JSON string or '' (ARGV[8], optional)
-- Returns, when taken, one integer: the fencing token (a run lock, at least 1), else -1 (a queue lock taken) or -2 (a
-- queue lock its jid re-entered); when refused, {0, holder, ...}. An integer: Redis answers a table at a higher cost.
-- A refusal stays a table even for one holder: a client that reads integers as text (ioredis' stringNumbers) could
-- not tell a holder named "-1" from a lock taken.
return lock_step(KEYS, ARGV)
