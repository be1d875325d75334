-- The execution handoff of until_and_while_executing, in one step: take <digest>:RUN, then let go of the
-- queue lock, so there is no moment when the job holds neither.
-- KEYS[1] <digest>:LOCKED  KEYS[2] <digest>:RUN:LOCKED  KEYS[3] <prefix>:digests  KEYS[4] <prefix>:fence
-- ARGV jid, queue member, run member, limit, ttl ms, lease ms, info JSON or '', keep queue lock on conflict ('1'/'0')
-- Returns {queue lock was held (1/0), acquire result...}.
local ms, micros = now()
local jid = ARGV[1]
-- The queue lock's and the index's types are checked before acquire writes anything.
local queued = redis.call('HGET', KEYS[1], jid)
redis.call('ZSCORE', KEYS[3], ARGV[2])
local result = acquire(KEYS[2], KEYS[3], ARGV[3], jid, ARGV[4], ARGV[5], ARGV[6], ARGV[7], KEYS[4], ms, micros)
local held
if result[1] == 1 or ARGV[8] ~= '1' then
  held = release(KEYS[1], KEYS[3], ARGV[2], jid, '0', ms, queued)
elseif queued and live(queued, ms) then
  held = 1
else
  held = 0
end
table.insert(result, 1, held)
return result
