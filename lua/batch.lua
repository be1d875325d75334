-- Many lock steps of one process in one call (issue 39): the acquisitions, releases and handoffs its jobs asked for
-- in one event-loop turn, on one shard. Each step runs as its own script (lock.lua, unlock.lua, handoff.lua) would,
-- under pcall: a step that fails (a refused argument, a wrong-typed key) fails alone, and as every step checks
-- before its first write, it has written nothing; its neighbours go on.
-- KEYS every step's keys, one step after another.
-- ARGV per step: its kind ('l' lock, 'u' unlock, 'h' handoff), its key count, its argument count, its arguments.
-- Returns per step {1, the step's reply} or {0, the error's message}.
local run = {l = lock_step, u = unlock_step, h = handoff_step}
local out = {}
local k, a = 1, 1
while a <= #ARGV do
  local nk, na = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local keys, argv = {}, {}
  for i = 1, nk do keys[i] = KEYS[k + i - 1] end
  for i = 1, na do argv[i] = ARGV[a + 2 + i] end
  local ok, reply = pcall(run[ARGV[a]], keys, argv)
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
return out
