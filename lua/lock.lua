-- KEYS[1] <lock>:LOCKED  KEYS[2] <prefix>:digests  KEYS[3] <prefix>:fence
-- ARGV jid, member (index member), limit, ttl ms, lease ms, info JSON or '', fenced ('1' run lock / '0' queue lock),
-- the job's queue name as a JSON string or '' (ARGV[8], optional)
-- Returns, when taken, one integer: the fencing token (a run lock, at least 1), else -1 (a queue lock taken) or -2 (a
-- queue lock its jid re-entered); when refused, {0, holder, ...}. An integer: Redis answers a table at a higher cost.
-- A refusal stays a table even for one holder: a client that reads integers as text (ioredis' stringNumbers) could
-- not tell a holder named "-1" from a lock taken.
local ms, micros = now()
local fence = ''
if ARGV[7] == '1' then fence = KEYS[3] end
local result = acquire(KEYS[1], KEYS[2], ARGV[2], ARGV[1], ARGV[3], ARGV[4], ARGV[5], ARGV[6], fence, ms, micros, ARGV[8])
if result[1] == 0 then return result end
if result[3] > 0 then return result[3] end
return -1 - result[2]
