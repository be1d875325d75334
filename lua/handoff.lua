-- The execution handoff of until_and_while_executing, in one step: take <digest>:RUN, then let go of the
-- queue lock, so there is no moment when the job holds neither.
-- KEYS[1] <digest>:LOCKED  KEYS[2] <digest>:RUN:LOCKED  KEYS[3] <prefix>:digests  KEYS[4] <prefix>:fence
-- KEYS[5] <prefix>:resets (acquire's layout_current)  KEYS[6] <digest>:EVENTS (optional: lockEvents on; logs the run
-- lock taken or refused, and the queue lock released)
-- ARGV jid, queue member, run member, limit, ttl ms, lease ms, info JSON or '', keep queue lock on conflict ('1'/'0'),
-- the epoch of the prefix's layout as this process read it
-- Returns {queue lock was held (1/0), acquire result...}.
return handoff_step(KEYS, ARGV, now())
