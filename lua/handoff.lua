-- The execution handoff of until_and_while_executing, in one step: take <digest>:RUN, then let go of the
-- queue lock, so there is no moment when the job holds neither.
-- KEYS[1] <digest>:LOCKED  KEYS[2] <digest>:RUN:LOCKED  KEYS[3] <prefix>:digests
-- ARGV jid, queue member, run member, limit, ttl ms, lease ms, info JSON or '', keep queue lock on conflict ('1'/'0')
-- Returns {queue lock was held (1/0), acquire result...}.
local clock = redis.call('TIME')
local now = clock[1] * 1000 + (clock[2] - clock[2] % 1000) / 1000
local jid = ARGV[1]
local result = acquire(KEYS[2], KEYS[3], ARGV[3], jid, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], now)
local held
if result[1] == 1 or ARGV[8] ~= '1' then
  held = release(KEYS[1], KEYS[3], ARGV[2], jid)
else
  held = redis.call('HEXISTS', KEYS[1], jid)
end
table.insert(result, 1, held)
return result
