-- The scripts' shared prelude. src/store/Scripts.ts puts in front of each script of lua/ (lock, unlock, renew,
-- renew_all, handoff, fetch, reap, remove, claim, tally, journal) the functions of lua/lib/ it calls, and those they
-- call, so each stays one self-contained EVAL, and maps the line of a script's error back to the file and line it
-- comes from. Each function a script holds is a closure made again on every run (about 700 Redis instructions), so
-- a script holds no other, and the prelude keeps to a few. Only the functions travel: each is a `local function`
-- at the start of a line, ending at the first `end` at the start of a line; comments between them stay here.
-- A holder entry in <lock>:LOCKED maps jid -> {"t":<locked at>,"x":<expires at>,"l":<lease until>[,"f":<fence>]
-- [,"r":<revoked at>][,"q":<queue>][,"i":<info>]} with every time in Redis milliseconds and 0 for "none"; f is the
-- fencing token of a run lock's acquisition; r when an operator revoked it (below); q the job's queue name as a JSON
-- string (queue locks only: the reaper asks that queue; an entry without it, as older versions wrote, is never
-- reaped as an orphan). t, x, l and f lead, so a pattern reads them without decoding JSON, whatever the info holds.
-- An entry in any other shape (another library's, the gem's float timestamp) counts as gone: it never blocks a lock.
-- A run lock's entry an operator revoked (remove.lua) carries ,"r":<revoked at> right after f: it still counts as a
-- holder until its lease passes (its holder may still run), and a renewal refuses it, so its holder learns at its
-- next renewal that it lost the lock; its release frees the place. A holder whose perform runs on after that keeps the
-- place by renewing with keep (renew_entry) until it has returned.
--
-- All or nothing: every call that can fail (argument checks, WRONGTYPE on any key) runs before the first write.

-- Redis time, read once per script: {milliseconds, microseconds} of one instant. Lua coerces TIME's strings.
local function now()
  local t = redis.call('TIME')
  return t[1] * 1000 + (t[2] - t[2] % 1000) / 1000, t[1] * 1000000 + t[2]
end

-- A whole number of milliseconds (or a count) in [min, max], max 2^50 unless given: far beyond any lock, and Redis
-- time plus it stays exact in Lua's doubles. Fails the script before any write.
local function whole(value, name, min, max)
  local n = tonumber(value)
  local upto = '2^50'
  if max then upto = string.format('%d', max) else max = 1125899906842624 end
  if n == nil or n % 1 ~= 0 or n < min or n > max then
    error({err = 'ERR ' .. name .. ' must be a whole number from ' .. min .. ' to ' .. upto .. ', got ' .. tostring(value)})
  end
  return n
end

-- The parts of an entry: t and x as text (copied unchanged on renewal), l, f, the rest after l; nil when foreign.
local function parse(meta)
  local t, x, l, rest = string.match(meta, '^{"t":(%d+),"x":(%d+),"l":(%d+)(.*)$')
  if t == nil then return nil end
  return t, x, tonumber(l), tonumber(string.match(rest, '^,"f":(%d+)') or '0'), rest
end

-- The time an entry stops counting: 0 when only an unlock ends it, -1 when it is foreign (gone already).
local function horizon(meta)
  local _, x, l = parse(meta)
  if x == nil then return -1 end
  x = tonumber(x)
  if x > 0 and l > 0 then return math.min(x, l) end
  if x > 0 then return x end
  return l
end

-- When the entry (rest: what follows l, as parse returns it) was revoked, or nil when it was not.
local function revoked(rest)
  return string.match(rest, '^,"f":%d+,"r":(%d+)') or string.match(rest, '^,"r":(%d+)')
end

-- Whether the entry counts at Redis time `at` (ms); at nil reads the time only for an entry with a horizon.
local function live(meta, at)
  local h = horizon(meta)
  return h == 0 or h > (at or now())
end

-- Keeps the key alive as long as its longest-lived holder: no TTL while any holder has no horizon.
local function extend(key, h, now, created)
  if h == 0 then
    if not created then redis.call('PERSIST', key) end
    return
  end
  local want = h - now
  if want < 1 then want = 1 end
  -- As text, as the other arguments: Redis formats a Lua number argument itself (about 2.4k instructions, bench/).
  if created then
    redis.call('PEXPIRE', key, string.format('%d', want))
  else
    local pttl = redis.call('PTTL', key)
    if pttl >= 0 and pttl < want then redis.call('PEXPIRE', key, string.format('%d', want)) end
  end
end

-- Writes jid's entry leased until l (0: no lease): t and x as text (a renewal copies them unchanged), rest what follows
-- l, closing brace included. The one place an entry is written; returns it.
local function write_entry(key, jid, t, x, l, rest)
  local entry = '{"t":' .. t .. ',"x":' .. x .. ',"l":' .. string.format('%d', l) .. rest
  redis.call('HSET', key, jid, entry)
  return entry
end

-- Moves jid's lease to now + lease, and the key's TTL with it. current is jid's entry as read (false when none);
-- token '0' renews whichever acquisition holds it. Returns 0 when the hold is gone: no entry, a foreign one, another
-- acquisition's, or its lease or expiry already passed (another process may hold it now; renewing would hide that),
-- or when an operator revoked it (its holder must stop; the entry keeps the place until it lets go or the lease ends).
-- keep: the holder was told it lost the hold and its perform still runs (one that cannot be stopped: a Promise that
-- ignores its signal); a revoked entry's lease then moves too, its mark kept, so its place lasts until the holder
-- lets go and no second copy starts meanwhile. A hold gone otherwise is still 0.
-- Nothing here can fail: its HSET goes to the key whose HGET (the caller's read of current) found a hash.
local function renew_entry(key, jid, current, token, lease, now, keep)
  if not current then return 0 end
  local t, x, _, f, rest = parse(current)
  if t == nil or (token ~= '0' and f ~= tonumber(token)) or not live(current, now) or (revoked(rest) and not keep) then
    return 0
  end
  local renewed = write_entry(key, jid, t, x, now + lease, rest)
  extend(key, horizon(renewed), now, false)
  return 1
end

-- Takes a place in the lock for jid, or reports the holders. Returns {1, reentrant, fence} or {0, holder, ...}.
-- fence: '' for a queue lock (re-entrant by jid: a retry of the same jid re-enters its own lock), else the key of the
-- fencing counter: the hold belongs to this acquisition, a second live copy of the jid (a redelivery) is a conflict,
-- and the acquisition gets a token above every token handed out before under this prefix.
-- The common case, a free lock, costs HLEN, HSET, PEXPIRE (with a TTL or lease) and ZADD, plus GET and SET of the
-- counter for a run lock; a full one (a duplicate) HLEN and HGETALL.
-- gone (a swap, lock_step): the entries this acquisition takes the place of, a list and a set by jid, counted as gone
-- and deleted with its write (kept when it is refused); floor: the least t its entry may have (above every t it
-- replaces, so that an entry written again never reads as the one it replaced).
local function acquire(key, index, member, jid, limit, ttl, lease, info, fence, now, micros, queue, gone, floor)
  limit = whole(limit, 'limit', 1)
  ttl = whole(ttl, 'ttl', 0)
  lease = whole(lease, 'lease', 0)
  gone = gone or {}
  -- Reads first: each fails on a wrong-typed key before anything is written.
  local count = redis.call('HLEN', key) - #gone
  local last = 0
  if fence ~= '' then last = tonumber(redis.call('GET', fence) or '0') or 0 end
  local current = false
  local all
  if count >= limit then
    -- Full (a duplicate, most often): every entry is read below anyway, jid's among them.
    all = redis.call('HGETALL', key)
    for i = 1, #all, 2 do
      if all[i] == jid then current = all[i + 1] end
    end
  elseif count > 0 then
    current = redis.call('HGET', key, jid)
  end
  if gone[jid] then current = false end
  if current and fence == '' and live(current, now) then return {1, 1, 0} end
  -- A run lock is held per acquisition: a live entry of jid's is another copy of this job, still running.
  local copy = current and fence ~= '' and live(current, now)
  local evict = {}
  if count >= limit or copy then
    -- Full: first drop holders whose expiry or lease has passed (a crashed worker's lease frees its place).
    all = all or redis.call('HGETALL', key)
    local holders = {}
    for i = 1, #all, 2 do
      if gone[all[i]] then
        -- replaced: deleted with the write below
      elseif live(all[i + 1], now) then
        holders[#holders + 1] = all[i]
      else
        evict[#evict + 1] = all[i]
      end
    end
    if copy or #holders >= limit then
      if #evict > 0 then redis.call('HDEL', key, unpack(evict)) end
      local out = {0}
      for i = 1, #holders do out[i + 1] = holders[i] end
      return out
    end
    count = #holders
  elseif current then
    -- jid's own entry is past its horizon (or foreign): its place is free.
    evict[1] = jid
    count = count - 1
  end

  local x = 0
  if ttl > 0 then x = now + ttl end
  local l = 0
  if lease > 0 then l = now + lease end
  local f = 0
  if fence ~= '' then f = math.max(micros, last + 1) end
  -- The times as text once, for the index and the entry alike.
  local t_text = string.format('%d', math.max(now, floor or 0))
  local x_text = '0'
  -- The index first: the only write left that can fail (a wrong-typed index), and nothing is written yet.
  if x > 0 then
    x_text = string.format('%d', x)
    redis.call('ZADD', index, 'GT', x_text, member)
  else
    redis.call('ZADD', index, t_text, member)
  end
  if #evict > 0 then redis.call('HDEL', key, unpack(evict)) end
  if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  -- A queue lock's entry leaves the token out: it is the common case, and every byte is held per lock.
  local rest = '}'
  if info ~= '' then rest = ',"i":' .. info .. rest end
  if queue ~= nil and queue ~= '' then rest = ',"q":' .. queue .. rest end
  if f > 0 then rest = string.format(',"f":%d', f) .. rest end
  write_entry(key, jid, t_text, x_text, l, rest)
  local h = l
  if x > 0 and (l == 0 or x < l) then h = x end
  extend(key, h, now, count == 0 and #gone == 0)
  if f > 0 then redis.call('SET', fence, string.format('%d', f)) end
  return {1, 0, f}
end

-- Removes jid's entry (only the acquisition `token` when it is not '0'); drops the index member with the last entry.
-- Returns 1 when jid held the lock, 0 when its entry was gone, another acquisition's, or past its horizon. now: Redis
-- time in ms, nil to read it only if the entry has a horizon; current: jid's entry as the caller read it (false:
-- none), nil to read it here.
local function release(key, index, member, jid, token, now, current)
  if current == nil then current = redis.call('HGET', key, jid) end
  if not current then
    if redis.call('EXISTS', key) == 0 then redis.call('ZREM', index, member) end
    return 0
  end
  if token ~= '0' then
    local t, _, _, f = parse(current)
    if t == nil or f ~= tonumber(token) then return 0 end
  end
  -- ZREM before HDEL: it is the call that can fail on a wrong-typed index.
  if redis.call('HLEN', key) == 1 then redis.call('ZREM', index, member) end
  redis.call('HDEL', key, jid)
  if live(current, now) then return 1 end
  return 0
end

-- Takes or renews owner's lease on key for lease ms, given its current value (read before the caller's first write).
local function keep_lease(key, owner, lease, current)
  if current == owner then
    redis.call('PEXPIRE', key, lease)
  else
    redis.call('SET', key, owner, 'PX', lease)
  end
end

-- A digest's activity log (lockEvents): puts an event first in the list at key (`<digest>:EVENTS`), keeps its newest
-- 100 and sets its TTL: 24 hours while either of the digest's locks has a holders key, 1 hour once neither has (a
-- gone digest's log is kept for a look back, not for a day). at: Redis ms; refused (a refusal: acquire's answer,
-- {0, holder, ...}: the holder logged is the first in byte order, as the memory store picks it, the hash's order being
-- Redis' own) and who (an admin's call) may be nil. The entry is compact JSON in a fixed field order, as the memory
-- store writes it: at, event, jid, phase, holder, n and first (refusals folded together), who. A text over 128
-- bytes is cut at a character's start and ends with an ellipsis (U+2026): a 20 kB jid costs the log 131 bytes. A
-- refusal like the newest entry (a refusal of the same phase naming the same holder) replaces it, counted: n the
-- refusals it stands for, first the time of the first, at and jid the last's; so a burst of duplicates is one entry
-- and pushes nothing out. A key of another type (not ours) is left alone: LPUSH by pcall, and nothing else then; the
-- log never fails the call it records, and a call that fails before its first write has logged nothing (this runs
-- after the others). LTRIM only once the list has grown past 100, and a text escaped only when it holds a character
-- to escape: the common event costs LPUSH and PEXPIRE (bench/results/lock-events.md). The locks' holders keys are
-- named from the log's (`<base>:EVENTS` -> `<base>:LOCKED`, `<base>:RUN:LOCKED`), in its slot: the same hash tag.
local function log_event(key, at, event, jid, phase, refused, who)
  local function text(s)
    if #s > 128 then
      local n = 128
      -- Back to a character's first byte (not a UTF-8 continuation byte 0x80-0xBF).
      while n > 0 and string.byte(s, n + 1) >= 128 and string.byte(s, n + 1) < 192 do n = n - 1 end
      s = string.sub(s, 1, n) .. '\226\128\166'
    end
    if not string.find(s, '[%z\1-\31"\\]') then return '"' .. s .. '"' end
    local escapes = {['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t'}
    return '"' .. string.gsub(s, '[%z\1-\31"\\]', function(c) return escapes[c] or string.format('\\u%04x', string.byte(c)) end) .. '"'
  end
  local stamp = string.format('%d', at)
  local entry = '{"at":' .. stamp .. ',"event":"' .. event .. '","jid":' .. text(jid) .. ',"phase":"' .. phase .. '"'
  local folded = false
  -- A refused swap may name no live holder: logged without one, and never folded.
  if refused and refused[2] then
    local holder = refused[2]
    for i = 3, #refused do
      if refused[i] < holder then holder = refused[i] end
    end
    local tail = ',"phase":"' .. phase .. '","holder":' .. text(holder)
    entry = entry .. ',"holder":' .. text(holder)
    local head = redis.pcall('LINDEX', key, 0)
    if type(head) == 'string' and string.match(head, '^{"at":%d+,"event":"refused","jid":"') then
      local first, n = string.match(head, '^{"at":(%d+),'), 1
      local counted, since = string.match(head, ',"n":(%d+),"first":(%d+)}$')
      local body = string.sub(head, 1, -2)
      if counted then
        n, first = tonumber(counted), since
        body = string.sub(head, 1, -(#(',"n":' .. counted .. ',"first":' .. since .. '}') + 1))
      end
      if string.sub(body, -#tail) == tail then
        entry = entry .. ',"n":' .. string.format('%d', n + 1) .. ',"first":' .. first
        folded = true
      end
    end
  end
  if who then entry = entry .. ',"who":' .. text(who) end
  if folded then
    redis.call('LSET', key, 0, entry .. '}')
  else
    local pushed = redis.pcall('LPUSH', key, entry .. '}')
    if type(pushed) == 'table' and pushed.err then return end
    if pushed > 100 then redis.call('LTRIM', key, 0, 99) end
  end
  local ttl = 86400000
  if event ~= 'taken' and event ~= 'reentered' and event ~= 'refused' then
    local base = string.sub(key, 1, -8)
    if redis.call('EXISTS', base .. ':LOCKED', base .. ':RUN:LOCKED') == 0 then ttl = 3600000 end
  end
  redis.call('PEXPIRE', key, ttl)
end

-- The bodies of lock.lua, unlock.lua and handoff.lua, as functions of their keys and arguments: each script calls its
-- own, and batch.lua calls them for many steps in one call (their arguments and replies are described in each file).
-- A lock under a layout that `unique-jobs layout reset` forgot after this process read it: refused before any write.
-- The reset adds the layout's epoch (the record's "epoch") to the `resets` set of each of its shards, in the lock's
-- slot, and a process still running on that layout sends the epoch with every lock: one SISMEMBER, no round trip.
local function layout_current(key, epoch)
  if redis.call('SISMEMBER', key, epoch) == 1 then
    error({err = 'LAYOUTRESET epoch=' .. epoch .. ' key=' .. key})
  end
end
local function lock_step(keys, argv)
  layout_current(keys[4], argv[9])
  local ms, micros = now()
  local fence = ''
  if argv[7] == '1' then fence = keys[3] end
  -- A swap (ARGV[10] on: pairs of a jid and the t its entry must have, '' for any): this jid takes the place of those
  -- entries, each of which must be there as given (live, not written again since it was read); else nothing is
  -- written and the answer is a refusal naming the live holders, maybe none. Inline: a closure costs every call.
  local gone, floor, refused
  if argv[10] then
    gone, floor = {}, 0
    for i = 10, #argv, 2 do
      local current = redis.call('HGET', keys[1], argv[i])
      local t = current and parse(current)
      if not t or not live(current, ms) or ((argv[i + 1] or '') ~= '' and t ~= argv[i + 1]) then
        refused = true
        break
      end
      if not gone[argv[i]] then
        gone[#gone + 1] = argv[i]
        gone[argv[i]] = true
      end
      floor = math.max(floor, tonumber(t) + 1)
    end
  end
  local result
  if not refused then
    result = acquire(keys[1], keys[2], argv[2], argv[1], argv[3], argv[4], argv[5], argv[6], fence, ms, micros, argv[8], gone, floor)
  else
    local all = redis.call('HGETALL', keys[1])
    result = {0}
    for i = 1, #all, 2 do
      if live(all[i + 1], ms) then result[#result + 1] = all[i] end
    end
  end
  if keys[5] then
    local phase = 'queue'
    if fence ~= '' then phase = 'run' end
    if result[1] == 0 then
      log_event(keys[5], ms, 'refused', argv[1], phase, result)
    elseif result[2] == 1 then
      log_event(keys[5], ms, 'reentered', argv[1], phase)
    else
      log_event(keys[5], ms, 'taken', argv[1], phase)
    end
  end
  if result[1] == 0 then return result end
  if result[3] > 0 then return result[3] end
  return -1 - result[2]
end
-- A run lock's release with ARGV[4] '1' (its worker has a lockTimeout) tells the waiters of the lock (in any process)
-- that a place is free: PUBLISH on the channel named as its holders key (KEYS[1], a channel and not a key), the
-- message the number of places freed. One channel per lock: Redis sends it only to the processes that wait for it.
-- Without ARGV[4] nothing is published: a worker with no lockTimeout pays nothing for it.
local function unlock_step(keys, argv)
  local released
  if not keys[3] then
    released = release(keys[1], keys[2], argv[2], argv[1], argv[3])
  else
    local ms = now()
    released = release(keys[1], keys[2], argv[2], argv[1], argv[3], ms)
    local phase = 'queue'
    if string.sub(argv[2], -4) == ':RUN' then phase = 'run' end
    local event = 'missed'
    if released == 1 then event = 'released' end
    log_event(keys[3], ms, event, argv[1], phase)
  end
  if released == 1 and argv[4] == '1' then redis.call('PUBLISH', keys[1], '1') end
  return released
end
local function handoff_step(keys, argv)
  layout_current(keys[5], argv[9])
  local ms, micros = now()
  local jid = argv[1]
  -- The queue lock's and the index's types are checked before acquire writes anything.
  local queued = redis.call('HGET', keys[1], jid)
  redis.call('ZSCORE', keys[3], argv[2])
  local result = acquire(keys[2], keys[3], argv[3], jid, argv[4], argv[5], argv[6], argv[7], keys[4], ms, micros)
  local held
  if result[1] == 1 or argv[8] ~= '1' then
    held = release(keys[1], keys[3], argv[2], jid, '0', ms, queued)
  elseif queued and live(queued, ms) then
    held = 1
  else
    held = 0
  end
  if keys[6] then
    if result[1] == 0 then
      log_event(keys[6], ms, 'refused', jid, 'run', result)
    else
      log_event(keys[6], ms, 'taken', jid, 'run')
    end
    -- A queue lock's entry of jid's (a foreign one is no hold of this library's: nothing to log).
    if queued and parse(queued) ~= nil and (result[1] == 1 or argv[8] ~= '1') then
      if held == 1 then log_event(keys[6], ms, 'released', jid, 'queue') else log_event(keys[6], ms, 'missed', jid, 'queue') end
    end
  end
  table.insert(result, 1, held)
  return result
end
