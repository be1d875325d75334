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

-- What a script costs Redis (bench/scripts.ts counts it): each function a script holds is a closure made again on
-- every run, and each upvalue it captures costs more; a coercion of a string to a number runs strtod (about 1.5k
-- instructions), a string.format about 2k, a table or a string made is garbage Lua collects later. The steps below
-- keep their common path (a free lock taken, a lock released) to the calls it needs and read nothing twice.

-- Redis time: milliseconds and microseconds of one instant, and the milliseconds as text. TIME's seconds and the
-- microseconds padded to six digits make the microseconds' digits: one conversion (strtod), and no format.
local function now()
  local t = redis.call('TIME')
  local digits = t[1] .. string.sub('00000' .. t[2], -6)
  local micros = tonumber(digits)
  return (micros - micros % 1000) / 1000, micros, string.sub(digits, 1, -4)
end

-- A whole number of milliseconds (or a count) in [min, max], max 2^50 unless given: far beyond any lock, and Redis
-- time plus it stays exact in Lua's doubles. Fails the script before any write. known: a batch's table of the values
-- it has converted already (batch.lua: each distinct value converted once per call), nil for a lone call.
local function whole(value, name, min, max, known)
  local n
  if value == '0' then
    n = 0
  elseif value == '1' then
    n = 1
  else
    if known then n = known[value] end
    if n == nil then
      n = tonumber(value)
      if known and n then known[value] = n end
    end
  end
  if n == nil or n % 1 ~= 0 or n < min or n > (max or 1125899906842624) then
    local upto = '2^50'
    if max then upto = string.format('%d', max) end
    error({err = 'ERR ' .. name .. ' must be a whole number from ' .. min .. ' to ' .. upto .. ', got ' .. tostring(value)})
  end
  return n
end

-- The parts of an entry: t and x as text (copied unchanged on renewal), l, f, the rest after l; nil when foreign.
local function parse(meta)
  local t, x, l, rest = string.match(meta, '^{"t":(%d+),"x":(%d+),"l":(%d+)(.*)$')
  if t == nil then return nil end
  local f = 0
  -- Only a run lock's entry has f, right after l (byte 3 of rest: the f of ,"f":).
  if string.byte(rest, 3) == 102 then f = tonumber(string.match(rest, '^,"f":(%d+)') or '0') end
  return t, x, tonumber(l), f, rest
end

-- When the entry (rest: what follows l, as parse returns it) was revoked, or nil when it was not.
local function revoked(rest)
  return string.match(rest, '^,"f":%d+,"r":(%d+)') or string.match(rest, '^,"r":(%d+)')
end

-- Whether the entry counts at Redis time `at` (ms; nil: only an entry without a horizon counts), and its horizon, the
-- time it stops counting: 0 when only an unlock ends it, -1 when it is foreign (gone already). Reads x and l alone,
-- and converts only those that are not 0.
local function live(meta, at)
  local x, l = string.match(meta, '^{"t":%d+,"x":(%d+),"l":(%d+)')
  if x == nil then return false, -1 end
  local h = 0
  if x ~= '0' then h = tonumber(x) end
  if l ~= '0' then
    l = tonumber(l)
    if h == 0 or (l > 0 and l < h) then h = l end
  end
  return h == 0 or (at ~= nil and h > at), h
end

-- Writes jid's entry leased until l (as text, '0': no lease): t and x as text (a renewal copies them unchanged), rest
-- what follows l, closing brace included. The one place an entry is written; returns it.
-- With h (the entry's horizon, 0: none), keeps the key alive as long as its longest-lived holder: no TTL while any
-- holder has no horizon. The key's expiry is set to a horizon (h - now from now: the same instant unless the clock
-- ticked meanwhile), so that a release can read an entry's liveness from it (unlock_step). created: the key holds no
-- other holder.
local function write_entry(key, jid, t, x, l, rest, h, now, created)
  local entry = '{"t":' .. t .. ',"x":' .. x .. ',"l":' .. l .. rest
  redis.call('HSET', key, jid, entry)
  if not h then return entry end
  if h == 0 then
    if not created then redis.call('PERSIST', key) end
    return entry
  end
  local want = h - now
  if not created then
    local pttl = redis.call('PTTL', key)
    if pttl < 0 or pttl >= want then return entry end
  end
  if want < 1 then want = 1 end
  -- As text, as the other arguments: Redis formats a Lua number argument itself, at a higher cost.
  redis.call('PEXPIRE', key, string.format('%d', want))
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
  local l = now + lease
  local h = tonumber(x)
  if h == 0 or l < h then h = l end
  write_entry(key, jid, t, x, string.format('%d', l), rest, h, now, false)
  return 1
end

-- Takes a place in the lock for jid, or reports the holders. Returns true, reentrant (1/0) and the fence (0 for a
-- queue lock) when taken, false and the refusal {0, holder, ...} when not.
-- fence: '' for a queue lock (re-entrant by jid: a retry of the same jid re-enters its own lock), else the key of the
-- fencing counter: the hold belongs to this acquisition, a second live copy of the jid (a redelivery) is a conflict,
-- and the acquisition gets a token above every token handed out before under this prefix.
-- The common case, a free lock, costs HLEN, ZADD, HSET and PEXPIRE (with a TTL or lease), plus GET and SET of the
-- counter for a lone run lock (a batch reads each counter once and writes it once, at its end: batch.lua); a full
-- one (a duplicate) HLEN and HGETALL.
-- gone (a swap, lock_step): the entries this acquisition takes the place of, a list and a set by jid, counted as gone
-- and deleted with its write (kept when it is refused); floor: the least t its entry may have (above every t it
-- replaces, so that an entry written again never reads as the one it replaced); refused: a swap whose entries are
-- not there as given, answered with the live holders (maybe none) and nothing written. seen: the batch's caches
-- (batch.lua), nil for a lone call.
-- resets and epoch: the layout check below (layout_current).
local function acquire(key, index, member, jid, limit, ttl, lease, info, fence, now, micros, stamp, queue, gone, floor, seen, resets, epoch, refused)
  -- layout_current: a lock under a layout that `unique-jobs layout reset` forgot after this process read it is
  -- refused before any write. The reset adds the layout's epoch (the record's "epoch") to the `resets` set of each of
  -- its shards, in the lock's slot, and a process still running on that layout sends the epoch with every lock: one
  -- SISMEMBER, no round trip (a batch asks once per resets key and epoch: nothing in it adds to the set). Here, not
  -- in a function of its own: a function is a closure made on every run.
  if not (seen and seen.layouts[resets] == epoch) then
    if redis.call('SISMEMBER', resets, epoch) == 1 then
      error({err = 'LAYOUTRESET epoch=' .. epoch .. ' key=' .. resets})
    end
    if seen then seen.layouts[resets] = epoch end
  end
  if refused then
    local all = redis.call('HGETALL', key)
    local out = {0}
    for i = 1, #all, 2 do
      if live(all[i + 1], now) then out[#out + 1] = all[i] end
    end
    return false, out
  end
  local known = seen and seen.numbers
  limit = whole(limit, 'limit', 1, nil, known)
  ttl = whole(ttl, 'ttl', 0, nil, known)
  lease = whole(lease, 'lease', 0, nil, known)
  local replaced = 0
  if gone then replaced = #gone end
  -- Reads first: each fails on a wrong-typed key before anything is written.
  local count = redis.call('HLEN', key) - replaced
  local last = 0
  if fence ~= '' then
    last = seen and seen.fences[fence]
    if not last then
      last = redis.call('GET', fence)
      last = last and tonumber(last) or 0
      if seen then seen.fences[fence] = last end
    end
  end
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
  if current and gone and gone[jid] then current = false end
  if current and fence == '' and live(current, now) then return true, 1, 0 end
  -- A run lock is held per acquisition: a live entry of jid's is another copy of this job, still running.
  local copy = current and fence ~= '' and live(current, now)
  local evict
  if count >= limit or copy then
    -- Full: first drop holders whose expiry or lease has passed (a crashed worker's lease frees its place).
    all = all or redis.call('HGETALL', key)
    local holders = {}
    evict = {}
    for i = 1, #all, 2 do
      if gone and gone[all[i]] then
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
      return false, out
    end
    count = #holders
  elseif current then
    -- jid's own entry is past its horizon (or foreign): its place is free.
    evict = {jid}
    count = count - 1
  end

  -- The times as text once, for the index, the entry and the key's TTL alike: t (now as its caller has it as text, or
  -- the floor), x and l ('0': none), h (the entry's horizon) one of them.
  local t_text = stamp
  if floor and floor > now then t_text = string.format('%d', floor) end
  local x_text, l_text = '0', '0'
  local h = 0
  if ttl > 0 then
    h = now + ttl
    x_text = string.format('%d', h)
  end
  if lease > 0 then
    l_text = string.format('%d', now + lease)
    if h == 0 or lease < ttl then h = now + lease end
  end
  local f = 0
  if fence ~= '' then
    f = last + 1
    if micros > f then f = micros end
  end
  -- The index first: the only write left that can fail (a wrong-typed index), and nothing is written yet. In a batch
  -- whose call has written the index already (so it is a sorted set), it goes with the batch's other index writes, at
  -- its end (batch.lua): nothing in a batch reads the index.
  if seen and seen.indexed[index] then
    local kind, score = 'ADD', t_text
    if ttl > 0 then kind, score = 'GT', x_text end
    local run = seen.run
    -- At most about 500 members a run: unpack's limit is far above it.
    if not run or run.index ~= index or run.kind ~= kind or run.n > 1000 then
      run = {'ZADD', index, index = index, kind = kind, n = 2}
      if ttl > 0 then run[3], run.n = 'GT', 3 end
      seen.index[#seen.index + 1] = run
      seen.run = run
    end
    run[run.n + 1], run[run.n + 2] = score, member
    run.n = run.n + 2
  else
    if ttl > 0 then
      redis.call('ZADD', index, 'GT', x_text, member)
    else
      redis.call('ZADD', index, t_text, member)
    end
    if seen then seen.indexed[index] = true end
  end
  if evict and #evict > 0 then redis.call('HDEL', key, unpack(evict)) end
  if replaced > 0 then redis.call('HDEL', key, unpack(gone)) end
  -- A queue lock's entry leaves the token out: it is the common case, and every byte is held per lock.
  local rest = '}'
  if info ~= '' then rest = ',"i":' .. info .. rest end
  if queue ~= nil and queue ~= '' then rest = ',"q":' .. queue .. rest end
  if f > 0 then rest = string.format(',"f":%d', f) .. rest end
  write_entry(key, jid, t_text, x_text, l_text, rest, h, now, count == 0 and replaced == 0)
  if f > 0 then
    if seen then
      seen.fences[fence] = f
      seen.fenced[fence] = true
    else
      redis.call('SET', fence, string.format('%d', f))
    end
  end
  return true, 0, f
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
    local head = redis.pcall('LINDEX', key, '0')
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
    redis.call('LSET', key, '0', entry .. '}')
  else
    local pushed = redis.pcall('LPUSH', key, entry .. '}')
    if type(pushed) == 'table' and pushed.err then return end
    if pushed > 100 then redis.call('LTRIM', key, '0', '99') end
  end
  -- As text: Redis formats a number argument itself, at a cost (2k instructions).
  local ttl = '86400000'
  if event ~= 'taken' and event ~= 'reentered' and event ~= 'refused' then
    local base = string.sub(key, 1, -8)
    if redis.call('EXISTS', base .. ':LOCKED', base .. ':RUN:LOCKED') == 0 then ttl = '3600000' end
  end
  redis.call('PEXPIRE', key, ttl)
end

-- The bodies of lock.lua, unlock.lua and handoff.lua, as functions of their keys and arguments: each script calls its
-- own, and batch.lua calls them for many steps in one call (their arguments and replies are described in each file).
-- Each takes Redis time as its caller read it (ms, micros for a fencing token, stamp: ms as text; a batch reads it
-- once for all its steps; unlock.lua gives none, and unlock_step reads it only if needed) and seen, the batch's
-- caches (nil for a lone call): numbers (whole), layouts (the epoch each resets key was found without), fences (each
-- counter's last token), fenced (the counters to write at the batch's end), indexed (the indexes written once, so
-- known to be sorted sets) and index (the index writes left for the batch's end: runs of one index and one kind,
-- each the arguments of one ZADD, ZADD GT or ZREM; run, the last).
local function lock_step(keys, argv, ms, micros, stamp, seen)
  local fence = ''
  if argv[7] == '1' then fence = keys[3] end
  -- A swap (ARGV[10] on: pairs of a jid and the t its entry must have, '' for any): this jid takes the place of those
  -- entries, each of which must be there as given (live, not written again since it was read); else nothing is
  -- written and the answer is a refusal naming the live holders, maybe none. Inline: a closure costs every call.
  -- A swap's KEYS[5] is <digest>:REPLACED, the jids swaps took the place of (a set kept an hour after the last: a job
  -- superseded on its way to its queue that starts late is skipped, Store.replaced), and its log KEYS[6].
  local events = keys[5]
  local gone, floor, refused
  if argv[10] then
    events = keys[6]
    -- Its type is checked before anything is written (SADD below).
    redis.call('SCARD', keys[5])
    gone, floor = {}, 0
    for i = 10, #argv, 2 do
      local current = redis.call('HGET', keys[1], argv[i])
      local t = current and string.match(current, '^{"t":(%d+),"x":%d+,"l":%d+')
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
  local taken, second, f = acquire(keys[1], keys[2], argv[2], argv[1], argv[3], argv[4], argv[5], argv[6], fence, ms,
    micros, stamp, argv[8], gone, floor, seen, keys[4], argv[9], refused)
  if taken and gone and #gone > 0 then
    redis.call('SADD', keys[5], unpack(gone))
    redis.call('PEXPIRE', keys[5], '3600000')
  end
  if events then
    local phase = 'queue'
    if fence ~= '' then phase = 'run' end
    if not taken then
      log_event(events, ms, 'refused', argv[1], phase, second)
    elseif second == 1 then
      log_event(events, ms, 'reentered', argv[1], phase)
    else
      log_event(events, ms, 'taken', argv[1], phase)
    end
  end
  if not taken then return second end
  if f > 0 then return f end
  return -1 - second
end
-- Removes jid's entry (only the acquisition ARGV[3] when it is not '0'); drops the index member with the last entry.
-- Returns 1 when jid held the lock, 0 when its entry was gone, another acquisition's, or past its horizon. ms: Redis
-- time, nil to read it only if it must be (below); current: jid's entry as the caller read it (false: none; handoff),
-- nil to read it here: alone, HGET, then HLEN (or EXISTS when there is none); in a batch HRANDFIELD of two, which
-- gives a hash of up to two entries whole, so one call tells jid's entry and whether it is the last (HGET only when
-- two others came out of a larger hash): a call less, for a little more work in Redis.
-- A run lock's release with ARGV[4] '1' (its worker has a lockTimeout) tells the waiters of the lock (in any process)
-- that a place is free: PUBLISH on the channel named as its holders key (KEYS[1], a channel and not a key), the
-- message the number of places freed. One channel per lock: Redis sends it only to the processes that wait for it.
-- Without ARGV[4] nothing is published: a worker with no lockTimeout pays nothing for it.
local function unlock_step(keys, argv, ms, micros, stamp, seen, current)
  local key, index, jid, member = keys[1], keys[2], argv[1], argv[2]
  if keys[3] and not ms then ms = now() end
  -- unindex: the index member goes (the key is gone, or jid's entry is its last).
  local released, last, unindex = 0, nil, false
  if current == nil and not seen then current = redis.call('HGET', key, jid) end
  if current == nil then
    local some = redis.call('HRANDFIELD', key, '2', 'WITHVALUES')
    current = false
    if some[1] == jid then current = some[2] elseif some[3] == jid then current = some[4] end
    if #some == 0 then
      unindex = true
    elseif not current and #some == 4 then
      current = redis.call('HGET', key, jid)
    end
    if current then last = #some == 2 end
  elseif not current then
    unindex = redis.call('EXISTS', key) == 0
  end
  if current and argv[3] ~= '0' then
    -- The entry's f as text: the token as sent is the same text (both %d), else compared as numbers.
    local f = string.match(current, '^{"t":%d+,"x":%d+,"l":%d+,"f":(%d+)')
    if f == nil or (f ~= argv[3] and tonumber(f) ~= tonumber(argv[3])) then current = false end
  end
  if current then
    if last == nil then last = redis.call('HLEN', key) == 1 end
    local alive, h = live(current, ms)
    if not ms and h > 0 then
      -- The key is there, so Redis has not passed its expiry (PEXPIRETIME, before HDEL may delete the key): when that
      -- is the entry's horizon or before (write_entry sets it to a horizon), the entry counts, and Redis'
      -- clock need not be read. Else (a holder with a later horizon, a key of an older version, a Redis before 7.0
      -- that knows no PEXPIRETIME) it is.
      local expiry = redis.pcall('PEXPIRETIME', key)
      alive = (type(expiry) == 'number' and expiry > 0 and h >= expiry) or h > now()
    end
    if last then unindex = true end
    if alive then released = 1 end
  end
  -- ZREM before HDEL: it is the call that can fail on a wrong-typed index. In a batch whose call has written the
  -- index already (so it is a sorted set), it goes with the batch's other index writes, at its end (batch.lua).
  if unindex then
    if seen and seen.indexed[index] then
      local run = seen.run
      if not run or run.index ~= index or run.kind ~= 'REM' or run.n > 1000 then
        run = {'ZREM', index, index = index, kind = 'REM', n = 2}
        seen.index[#seen.index + 1] = run
        seen.run = run
      end
      run.n = run.n + 1
      run[run.n] = member
    else
      redis.call('ZREM', index, member)
      if seen then seen.indexed[index] = true end
    end
  end
  if current then redis.call('HDEL', key, jid) end
  if keys[3] then
    local phase = 'queue'
    if string.sub(member, -4) == ':RUN' then phase = 'run' end
    local event = 'missed'
    if released == 1 then event = 'released' end
    log_event(keys[3], ms, event, jid, phase)
  end
  if released == 1 and argv[4] == '1' then redis.call('PUBLISH', key, '1') end
  return released
end
local function handoff_step(keys, argv, ms, micros, stamp, seen)
  local jid = argv[1]
  -- The queue lock's and the index's types are checked before acquire writes anything.
  local queued = redis.call('HGET', keys[1], jid)
  redis.call('ZSCORE', keys[3], argv[2])
  local taken, second, f = acquire(keys[2], keys[3], argv[3], jid, argv[4], argv[5], argv[6], argv[7], keys[4], ms,
    micros, stamp, nil, nil, nil, seen, keys[5], argv[9])
  local held
  if taken or argv[8] ~= '1' then
    held = unlock_step({keys[1], keys[3]}, {jid, argv[2], '0'}, ms, micros, stamp, seen, queued)
  elseif queued and live(queued, ms) then
    held = 1
  else
    held = 0
  end
  if keys[6] then
    if not taken then
      log_event(keys[6], ms, 'refused', jid, 'run', second)
    else
      log_event(keys[6], ms, 'taken', jid, 'run')
    end
    -- A queue lock's entry of jid's (a foreign one is no hold of this library's: nothing to log).
    if queued and parse(queued) ~= nil and (taken or argv[8] ~= '1') then
      if held == 1 then log_event(keys[6], ms, 'released', jid, 'queue') else log_event(keys[6], ms, 'missed', jid, 'queue') end
    end
  end
  if not taken then
    table.insert(second, 1, held)
    return second
  end
  return {held, 1, second, f}
end
