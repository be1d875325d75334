-- Retires a layout's epoch on one of its shards, for a layout reset (Redis.resetLayout), or undoes that.
-- KEYS[1] the shard's index <prefix>:digests  KEYS[2] the shard's <prefix>:resets
-- ARGV the epoch, mode ('+' retire it, only while the index is empty; '-' undo a retirement this reset made)
-- Returns 1 when done, 0 when the index holds a member (a lock taken since the reset's scan): nothing written.
-- Both keys are in the shard's slot, as a lock's are: a lock under the epoch either came first (the index holds it,
-- and the reset is refused) or meets the epoch retired (acquire's layout_current refuses it). No TTL: a process
-- that read the layout before the reset may run on for any time.
if ARGV[2] == '-' then
  redis.call('SREM', KEYS[2], ARGV[1])
  return 1
end
if redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
redis.call('SADD', KEYS[2], ARGV[1])
return 1
