-- KEYS[1] <lock>:LOCKED  KEYS[2] <prefix>:digests
-- ARGV jid, member (index member), limit, ttl ms, lease ms, info JSON or ''
local clock = redis.call('TIME')
local now = clock[1] * 1000 + (clock[2] - clock[2] % 1000) / 1000
return acquire(KEYS[1], KEYS[2], ARGV[2], ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], now)
