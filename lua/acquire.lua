-- Shared prelude of lock.lua and handoff.lua (prepended when the scripts are loaded).
-- A holder entry in <lock>:LOCKED maps jid -> {"t":<locked at>,"x":<expires at>,"l":<lease until>[,"i":<info>]}
-- with every time in Redis milliseconds and 0 for "none". t, x and l always lead, so a pattern reads them
-- without decoding JSON, whatever the info holds.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The time an entry stops counting, or 0 when only an unlock ends it.
local function horizon(meta)
  local _, x, l = string.match(meta, '^{"t":(%d+),"x":(%d+),"l":(%d+)')
  x = tonumber(x) or 0
  l = tonumber(l) or 0
  if x > 0 and l > 0 then return math.min(x, l) end
  if x > 0 then return x end
  return l
end

local function entry(t, x, l, info)
  local head = '{"t":' .. string.format('%d', t) .. ',"x":' .. string.format('%d', x) .. ',"l":' .. string.format('%d', l)
  if info ~= '' then return head .. ',"i":' .. info .. '}' end
  return head .. '}'
end

-- Keeps the key alive as long as its longest-lived holder: no TTL while any holder has no horizon.
local function extend(key, h, now, created)
  if h == 0 then
    if not created then redis.call('PERSIST', key) end
    return
  end
  local want = h - now
  if want < 1 then want = 1 end
  if created then
    redis.call('PEXPIRE', key, want)
  else
    local pttl = redis.call('PTTL', key)
    if pttl >= 0 and pttl < want then redis.call('PEXPIRE', key, want) end
  end
end

-- Takes a place in the lock for jid, or reports the holders. Returns {1, reentrant} or {0, holder, ...}.
local function acquire(key, index, member, jid, limit, ttl, lease, info, now)
  local current = redis.call('HGET', key, jid)
  if current then
    local h = horizon(current)
    if h == 0 or h > now then
      if lease > 0 then
        local t, x = string.match(current, '^{"t":(%d+),"x":(%d+)')
        local rest = string.match(current, '^{"t":%d+,"x":%d+,"l":%d+(.*)$')
        local renewed = '{"t":' .. t .. ',"x":' .. x .. ',"l":' .. string.format('%d', now + lease) .. rest
        redis.call('HSET', key, jid, renewed)
        extend(key, horizon(renewed), now, false)
      end
      return {1, 1}
    end
    redis.call('HDEL', key, jid)
  end

  local count = redis.call('HLEN', key)
  if count >= limit then
    -- Full: first drop holders whose expiry or lease has passed (a crashed worker's lease frees its place).
    local all = redis.call('HGETALL', key)
    for i = 1, #all, 2 do
      local h = horizon(all[i + 1])
      if h > 0 and h <= now then redis.call('HDEL', key, all[i]) end
    end
    count = redis.call('HLEN', key)
    if count >= limit then
      local holders = redis.call('HKEYS', key)
      local out = {0}
      for i = 1, #holders do out[i + 1] = holders[i] end
      return out
    end
  end

  local x = 0
  if ttl > 0 then x = now + ttl end
  local l = 0
  if lease > 0 then l = now + lease end
  local meta = entry(now, x, l, info)
  redis.call('HSET', key, jid, meta)
  extend(key, horizon(meta), now, count == 0)
  if x > 0 then
    redis.call('ZADD', index, 'GT', x, member)
  else
    redis.call('ZADD', index, now, member)
  end
  return {1, 0}
end

-- Removes jid's entry; drops the index member with the last one. Returns 1 when jid held the lock.
local function release(key, index, member, jid)
  local removed = redis.call('HDEL', key, jid)
  if redis.call('EXISTS', key) == 0 then redis.call('ZREM', index, member) end
  return removed
end
