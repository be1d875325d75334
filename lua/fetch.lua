-- One lock read at one instant. KEYS[1] <lock>:LOCKED  KEYS[2] <prefix>:digests
-- ARGV member, cursor, count, bytes.
-- count 0: every holder (HGETALL); cursor and bytes unused. count 1 to 1000: a page of holders, bounded whatever the
-- hash holds: HSCAN from cursor with COUNT, again until count holders are read or the hash ends (at most 8 calls: a
-- sparse table answers a call with none), each value longer than bytes (when not 0) cut to its first bytes.
-- Returns {holders (flat field, value), PTTL of the key, the member's index score (nil when none), Redis time ms,
-- HLEN, the next page's cursor ("0": the end), the cut values (flat: their place among the holders, whole length)}.
local count = whole(ARGV[3], 'count', 0, 1000)
local bytes = whole(ARGV[4], 'bytes', 0)
local cursor = ARGV[2]
if string.match(cursor, '^%d+$') == nil or #cursor > 20 then
  error({err = 'ERR cursor must be the number a page answered, such as 0, got ' .. tostring(cursor)})
end
local entries, size
local cut = {}
if count == 0 then
  entries = redis.call('HGETALL', KEYS[1])
  size = #entries / 2
  cursor = '0'
else
  size = redis.call('HLEN', KEYS[1])
  entries = {}
  local calls = 0
  repeat
    local page = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', count - #entries / 2)
    cursor = page[1]
    for i = 1, #page[2] do entries[#entries + 1] = page[2][i] end
    calls = calls + 1
  until cursor == '0' or #entries / 2 >= count or calls == 8
  if bytes > 0 then
    for i = 2, #entries, 2 do
      local length = #entries[i]
      if length > bytes then
        entries[i] = string.sub(entries[i], 1, bytes)
        cut[#cut + 1] = i / 2
        cut[#cut + 1] = length
      end
    end
  end
end
local pttl = redis.call('PTTL', KEYS[1])
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
local ms = now()
return {entries, pttl, score, ms, size, cursor, cut}
