-- The admin's removal (Locks.delete, unlock, deleteByPattern): every holder of each lock, or only jid's.
-- KEYS[1] <prefix>:digests  KEYS[2..n+1] each lock's <lock>:LOCKED, then (optional) KEYS[n+2..2n+1] each lock's
-- <digest>:EVENTS
-- ARGV jid ('' for every holder), strict ('1': when any lock is refused, write nothing; '2': only check, never write),
-- n (the number of locks), each lock's member, then each lock's expectation: a count (-1: none) and that many jids,
-- the holders (of this library's shape; only jid's when jid is given) the caller read; a lock whose holders are others
-- by now is refused as changed. Then with the logs: who asked ('' when unknown).
-- With the logs, a lock whose digest has one (lockEvents was on: the key exists) logs each holder revoked or removed
-- there, naming who; a digest without one gets none (an admin's bulk delete creates no lists).
-- Only this library's locks: a lock whose key exists but whose member is not in the index, or whose key is not a
-- hash, is refused (left alone). In one of ours, a holder with a live lease (a run lock whose job may still run) is
-- revoked, not removed: it keeps its place, so no second copy can start while the first runs, and its next renewal
-- fails, which interrupts it; its release (or its lease's end, if it died) frees the place. Every other holder goes at
-- once: one with no lease (a queue lock), one whose expiry or lease has passed, one in a foreign shape.
-- Returns {Redis time, {locks deleted whole}, {lock, jid, live (1/0), ...} removed, {lock, jid, lease until, ...}
-- revoked, {lock, reason, ...} refused}.
-- All or nothing: every read (ZSCORE fails on a wrong-typed index) before the first write.
local n = whole(ARGV[3], 'n', 1, #KEYS - 1)
-- The count is given, not inferred: with one lock, KEYS and ARGV alone cannot tell a logged call from an unlogged one.
local logged = #KEYS == 2 * n + 1
local jid = ARGV[1]
local strict = ARGV[2] == '1' or ARGV[2] == '2'
local ms = now()
local expected = {}
local at = n + 4
for i = 1, n do
  local count = whole(ARGV[at], 'expectation', -1, #ARGV - at)
  at = at + 1
  if count >= 0 then
    local jids = {}
    for k = 0, count - 1 do jids[ARGV[at + k]] = true end
    expected[i] = {jids = jids, count = count}
    at = at + count
  end
end
local who = nil
if logged and ARGV[at] ~= nil and ARGV[at] ~= '' then who = ARGV[at] end
local locks = {}
local refused = {}
for i = 2, n + 1 do
  local member = ARGV[i + 2]
  local key = KEYS[i]
  local indexed = redis.call('ZSCORE', KEYS[1], member)
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'none' and not indexed then
    refused[#refused + 1] = member
    refused[#refused + 1] = 'not in ' .. KEYS[1] .. ': not a lock of this library'
  elseif kind ~= 'none' and kind ~= 'hash' then
    refused[#refused + 1] = member
    refused[#refused + 1] = key .. ' is a ' .. kind .. ', not a lock of this library'
  else
    local entries = {}
    local size = 0
    if kind == 'hash' then
      size = redis.call('HLEN', key)
      if jid == '' then
        entries = redis.call('HGETALL', key)
      else
        local meta = redis.call('HGET', key, jid)
        if meta then entries = {jid, meta} end
      end
    end
    local changed = false
    local expect = expected[i - 1]
    if expect then
      local seen = 0
      for j = 1, #entries, 2 do
        if parse(entries[j + 1]) ~= nil then
          seen = seen + 1
          if not expect.jids[entries[j]] then changed = true end
        end
      end
      if seen ~= expect.count then changed = true end
    end
    if changed then
      refused[#refused + 1] = member
      refused[#refused + 1] = 'its holders changed since they were read: read it again'
    else
      local events = false
      if logged then events = KEYS[n + i] end
      locks[#locks + 1] = {key = key, member = member, indexed = indexed, size = size, entries = entries, events = events}
    end
  end
end
if (strict and #refused > 0) or ARGV[2] == '2' then return {ms, {}, {}, {}, refused} end

local deleted, removed, revokes = {}, {}, {}
local gone = {}
for _, lock in ipairs(locks) do
  local drop = {}
  local log = {}
  for j = 1, #lock.entries, 2 do
    local holder, meta = lock.entries[j], lock.entries[j + 1]
    local t, x, l, _, rest = parse(meta)
    if t ~= nil and l > 0 and live(meta, ms) then
      revokes[#revokes + 1] = lock.member
      revokes[#revokes + 1] = holder
      revokes[#revokes + 1] = string.format('%d', l)
      log[#log + 1] = {'revoked', holder}
      if not revoked(rest) then
        -- r goes right after f (a run lock's entry always has f): t, x, l and f stay where every script reads them.
        local f = string.match(rest, '^,"f":%d+') or ''
        local marked = f .. string.format(',"r":%d', ms) .. string.sub(rest, #f + 1)
        write_entry(lock.key, holder, t, x, string.format('%d', l), marked)
      end
    else
      drop[#drop + 1] = holder
      log[#log + 1] = {'removed', holder}
      removed[#removed + 1] = lock.member
      removed[#removed + 1] = holder
      if t ~= nil and live(meta, ms) then removed[#removed + 1] = 1 else removed[#removed + 1] = 0 end
    end
  end
  -- In chunks, under unpack's limit on how many values it spreads. HDEL of a key's last field deletes the key.
  for k = 1, #drop, 1000 do redis.call('HDEL', lock.key, unpack(drop, k, math.min(k + 999, #drop))) end
  -- A run lock's places freed: its lockTimeout waiters are told (unlock_step).
  if #drop > 0 and string.sub(lock.member, -4) == ':RUN' then redis.call('PUBLISH', lock.key, string.format('%d', #drop)) end
  if lock.events and #log > 0 and redis.call('EXISTS', lock.events) == 1 then
    local phase = 'queue'
    if string.sub(lock.member, -4) == ':RUN' then phase = 'run' end
    for k = 1, #log do log_event(lock.events, ms, log[k][1], log[k][2], phase, nil, who) end
  end
  if #drop == lock.size and lock.indexed then
    gone[#gone + 1] = lock.member
    if lock.size > 0 then deleted[#deleted + 1] = lock.member end
  end
end
for k = 1, #gone, 1000 do redis.call('ZREM', KEYS[1], unpack(gone, k, math.min(k + 999, #gone))) end
return {ms, deleted, removed, revokes, refused}
