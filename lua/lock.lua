-- KEYS[1] <lock>:LOCKED  KEYS[2] <prefix>:digests
-- ARGV jid, member (index member), limit, ttl ms, lease ms, info JSON or ''
return acquire(KEYS[1], KEYS[2], ARGV[2], ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], now_ms())
