-- Shared prelude of the scripts (prepended when they are loaded). Every function defined here is a closure made
-- again on each run of each script, so the prelude keeps to four; the time is read by each script itself:
--   local clock = redis.call('TIME')
--   local now = clock[1] * 1000 + (clock[2] - clock[2] % 1000) / 1000  -- Redis milliseconds (Lua coerces the strings)
-- A holder entry in <lock>:LOCKED maps jid -> {"t":<locked at>,"x":<expires at>,"l":<lease until>[,"i":<info>]}
-- with every time in Redis milliseconds and 0 for "none". t, x and l always lead, so a pattern reads them
-- without decoding JSON, whatever the info holds.

-- The time an entry stops counting, or 0 when only an unlock ends it.
local function horizon(meta)
  local _, x, l = string.match(meta, '^{"t":(%d+),"x":(%d+),"l":(%d+)')
  x = tonumber(x) or 0
  l = tonumber(l) or 0
  if x > 0 and l > 0 then return math.min(x, l) end
  if x > 0 then return x end
  return l
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
-- The common case, a free lock, costs HLEN, HSET, PEXPIRE (with a TTL or lease) and ZADD: an empty hash holds
-- no entry of jid's and nobody to evict, so those reads are skipped.
local function acquire(key, index, member, jid, limit, ttl, lease, info, now)
  local count = redis.call('HLEN', key)
  if count > 0 then
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
      count = count - 1
    end
  end

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
  if info == '' then
    redis.call('HSET', key, jid, string.format('{"t":%d,"x":%d,"l":%d}', now, x, l))
  else
    redis.call('HSET', key, jid, string.format('{"t":%d,"x":%d,"l":%d,"i":%s}', now, x, l, info))
  end
  local h = l
  if x > 0 and (l == 0 or x < l) then h = x end
  extend(key, h, now, count == 0)
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
