-- Many lock steps of one process in one call (issue 39): the acquisitions, releases and handoffs its jobs asked for
-- in one event-loop turn, on one shard. Each step runs as its own script (lock.lua, unlock.lua, handoff.lua) would,
-- under pcall: a step that fails (a refused argument, a wrong-typed key) fails alone, and as every step checks
-- before its first write, it has written nothing; its neighbours go on.
-- The call does once what every step would do again (issue 50): it reads Redis time once for all its steps, converts
-- each argument value, checks each layout epoch and reads each fencing counter once (`seen` keeps them for the steps
-- after), writes each fencing counter once, with the last token handed out, and the index writes of its steps after
-- the first in as few calls as their order allows: all after the last step. Nothing runs between the steps (no one
-- else can read the counter or the index meanwhile), no step reads what the index holds (a handoff's ZSCORE only
-- checks its type), and neither write can fail by then: a SET overwrites any type, and an index a step of this call
-- has written is a sorted set.
-- KEYS every step's keys, one step after another.
-- ARGV per step: its kind ('l' lock, 'u' unlock, 'h' handoff), its key count, its argument count, its arguments.
-- Returns per step {1, the step's reply} or {0, the error's message}.
local run = {l = lock_step, u = unlock_step, h = handoff_step}
local ms, micros, stamp = now()
local seen = {numbers = {}, layouts = {}, fences = {}, fenced = {}, indexed = {}, index = {}, run = false}
local out = {}
local k, a = 1, 1
while a <= #ARGV do
  local nk, na = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local keys, argv = {}, {}
  for i = 1, nk do keys[i] = KEYS[k + i - 1] end
  for i = 1, na do argv[i] = ARGV[a + 2 + i] end
  local ok, reply = pcall(run[ARGV[a]], keys, argv, ms, micros, stamp, seen)
  if ok then
    out[#out + 1] = {1, reply}
  elseif type(reply) == 'table' and reply.err then
    out[#out + 1] = {0, reply.err}
  else
    out[#out + 1] = {0, tostring(reply)}
  end
  k = k + nk
  a = a + 3 + na
end
for fence in pairs(seen.fenced) do redis.call('SET', fence, string.format('%d', seen.fences[fence])) end
-- The index writes, in order: each run of one index and one kind in one call.
for _, write in ipairs(seen.index) do redis.call(unpack(write, 1, write.n)) end
return out
