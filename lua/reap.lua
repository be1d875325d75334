-- One bounded step of the reaper over the index, oldest first. KEYS[1] <prefix>:digests
-- ARGV start (rank), batch (1 to 1000), orphans before (Redis ms; 0: none), dry run ('1': answer, write nothing)
-- For each member m of ranks start .. start + batch - 1: m:LOCKED gone -> the member goes; not a hash -> left alone
-- (not ours); else holders whose expiry or lease has passed, or in a foreign shape, go (and the member with the last),
-- and live holders with no expiry and no lease locked before `orphans before` are reported as candidates. A live
-- holder is never removed.
-- Returns {scanned, next rank (-1: the end was reached), {removed members}, {lock, jid, ...} removed holders,
-- {lock, jid, locked at, queue, ...} candidates}: queue is the entry's q as its JSON string literal, '' when none.
-- On one Redis the walk reads the members here and builds their keys (m:LOCKED): it cannot name them in KEYS up front.
-- On Redis Cluster every key is declared: ARGV[5] is '' and ARGV[6..] are the members the caller read (ZRANGE of the
-- same ranks), each with its holders key in KEYS[1 + i] and, optionally, its digest's activity log in KEYS[1 + m + i]
-- (m members); that call has no runner (its lease is in another slot). On one Redis the log's name is built as its
-- holders key is (<digest>:EVENTS). A holder removed is logged there as reaped, only when the log exists (lockEvents was
-- on for the digest): the reaper creates no lists. A member whose key had gone is logged reaped with no jid (jid '').
-- All or nothing: every read (ZRANGE fails on a wrong-typed index, then one HGETALL per member) before any write.
-- One call per member, the step's main cost: HGETALL by pcall answers a key of another type with an error (left
-- alone) and a missing key with an empty list (an empty hash cannot exist). No WITHSCORES: the scores are not used.
-- The queue named in an entry's q (its JSON string literal, escapes kept), or '' when it has none.
local function queue_of(meta)
  local t, _, _, _, rest = parse(meta)
  if t == nil then return '' end
  -- Only where q stands: right after l, or after l and f.
  local open = string.match(rest, '^,"q":()"') or string.match(rest, '^,"f":%d+,"q":()"')
  if open == nil then return '' end
  local i = open + 1
  while i <= #rest do
    local c = string.sub(rest, i, i)
    if c == '\\' then
      i = i + 2
    elseif c == '"' then
      return string.sub(rest, open, i)
    else
      i = i + 1
    end
  end
  return ''
end

local batch = whole(ARGV[2], 'batch', 1, 1000)
local start = whole(ARGV[1], 'start', 0)
local before = whole(ARGV[3], 'orphansBefore', 0)
local dry = ARGV[4] == '1'
local given = ARGV[5] == ''
-- With a runner (KEYS[2] its lease, ARGV[5] owner, ARGV[6] lease ms): only while owner holds the lease, renewed here.
local runner = not given and KEYS[2] ~= nil
local lease, holder = 0, false
if runner then
  lease = whole(ARGV[6], 'lease', 1)
  holder = redis.call('GET', KEYS[2])
  if holder and holder ~= ARGV[5] then return {0, -1, {}, {}, {}, 0} end
end
local ms = now()
local found, keys, logs = {}, {}, {}
if given then
  for i = 6, #ARGV do found[i - 5] = ARGV[i] end
  local m = #found
  if (#KEYS ~= m + 1 and #KEYS ~= 2 * m + 1) or m > batch then
    error({err = 'ERR each given member needs its key, at most batch of them'})
  end
  for i = 1, m do
    keys[i] = KEYS[i + 1]
    logs[i] = KEYS[m + i + 1] or false
  end
  -- Fails on a wrong-typed index before any write, as ZRANGE does below.
  redis.call('ZCARD', KEYS[1])
else
  found = redis.call('ZRANGE', KEYS[1], start, start + batch - 1)
  for i = 1, #found do
    keys[i] = found[i] .. ':LOCKED'
    local base = found[i]
    if string.sub(base, -4) == ':RUN' then base = string.sub(base, 1, -5) end
    logs[i] = base .. ':EVENTS'
  end
end
local scanned = #found
local members, holders, candidates = {}, {}, {}
local gone = {}
local evictions = {}
local expired = {}
local kept = 0
for i = 1, scanned do
  local member = found[i]
  local key = keys[i]
  local all = redis.pcall('HGETALL', key)
  if all.err then
    kept = kept + 1
  elseif #all == 0 then
    members[#members + 1] = member
    gone[#gone + 1] = member
    if logs[i] then expired[#expired + 1] = {logs[i], member} end
  else
    local evict = {}
    for j = 1, #all, 2 do
      local _, h = live(all[j + 1])
      if h == -1 or (h > 0 and h <= ms) then
        evict[#evict + 1] = all[j]
        holders[#holders + 1] = member
        holders[#holders + 1] = all[j]
      elseif h == 0 and before > 0 then
        local t = parse(all[j + 1])
        if tonumber(t) < before then
          candidates[#candidates + 1] = member
          candidates[#candidates + 1] = all[j]
          candidates[#candidates + 1] = t
          candidates[#candidates + 1] = queue_of(all[j + 1])
        end
      end
    end
    if #evict > 0 then evictions[#evictions + 1] = {key, evict, logs[i], member} end
    if #evict * 2 == #all then
      members[#members + 1] = member
      gone[#gone + 1] = member
    else
      kept = kept + 1
    end
  end
end
local next = -1
if scanned == batch then
  if dry then next = start + scanned else next = start + kept end
end
if not dry then
  -- HDEL of a key's last field deletes the key.
  for i = 1, #evictions do redis.call('HDEL', evictions[i][1], unpack(evictions[i][2])) end
  -- A run lock's ended holders removed: its lockTimeout waiters are told (unlock_step).
  for i = 1, #evictions do
    if string.sub(evictions[i][4], -4) == ':RUN' then
      redis.call('PUBLISH', evictions[i][1], string.format('%d', #evictions[i][2]))
    end
  end
  for i = 1, #evictions do
    local log = evictions[i][3]
    if log and redis.call('EXISTS', log) == 1 then
      local phase = 'queue'
      if string.sub(evictions[i][4], -4) == ':RUN' then phase = 'run' end
      for j = 1, #evictions[i][2] do log_event(log, ms, 'reaped', evictions[i][2][j], phase) end
    end
  end
  -- A lock whose key had gone (its TTL or lease ended it): reaped with no jid, the holders being gone with the key.
  for i = 1, #expired do
    if redis.call('EXISTS', expired[i][1]) == 1 then
      local phase = 'queue'
      if string.sub(expired[i][2], -4) == ':RUN' then phase = 'run' end
      log_event(expired[i][1], ms, 'reaped', '', phase)
    end
  end
  if #gone > 0 then redis.call('ZREM', KEYS[1], unpack(gone)) end
end
-- The runner's lease is its own, not lock data: a dry run keeps it too.
if runner then
  keep_lease(KEYS[2], ARGV[5], lease, holder)
  return {scanned, next, members, holders, candidates, 1}
end
return {scanned, next, members, holders, candidates}
