/**
 * The lock scripts on a real Redis, on a clock the test moves. Redis' own clock cannot be stopped (libfaketime
 * deadlocks against redis-server's jemalloc at start), so the scripts run unchanged behind a shim that shadows
 * `redis.call` for the script's chunk: TIME answers the virtual time, and PEXPIRE, PTTL and PERSIST keep each key's
 * expiry in a side hash on that clock, expiring a key lazily when a call touches it, as Redis does. Every other call
 * goes to Redis as written. A store over it runs the same code as production's (the same sources, the same client
 * code in `Redis.makeFromClient`), so a mutant of `lua/` is seen here exactly as in production.
 */
import type { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Layout from "../../src/store/Layout.js"
import * as Redis from "../../src/Redis.js"
import * as Scripts from "../../src/store/Scripts.js"

// Lua's false comes back as a nil reply (null) in the inspection below.
/**
 * Keys of the shim under `namespace`: the clock (ms) and the expiries of keys. On a cluster each slot the scripts touch
 * keeps its own copy (named with the hash tag of the script's first key), so a script stays in one slot.
 */
const shim = (namespace: string) => `
local real = redis
local TAG = string.match(KEYS[1] or '', '({[^}]+})') or ''
local NOW = tonumber(real.call('GET', '${namespace}' .. TAG .. ':vclock'))
local EXPIRY = '${namespace}' .. TAG .. ':vexpiry'
local function purge(key)
  local at = real.call('HGET', EXPIRY, key)
  if at and tonumber(at) <= NOW then
    real.call('DEL', key)
    real.call('HDEL', EXPIRY, key)
  end
end
local function call(command, ...)
  local c = string.upper(command)
  if c == 'TIME' then
    local seconds = (NOW - NOW % 1000) / 1000
    return {string.format('%d', seconds), string.format('%d', (NOW % 1000) * 1000)}
  end
  local key = ...
  purge(key)
  if c == 'PEXPIRE' then
    if real.call('EXISTS', key) == 0 then return 0 end
    real.call('HSET', EXPIRY, key, string.format('%d', NOW + tonumber((select(2, ...)))))
    return 1
  elseif c == 'PTTL' then
    if real.call('EXISTS', key) == 0 then return -2 end
    local at = real.call('HGET', EXPIRY, key)
    if not at then return -1 end
    return tonumber(at) - NOW
  elseif c == 'PERSIST' then
    return real.call('HDEL', EXPIRY, key)
  elseif c == 'SET' then
    -- SET key value PX ms (claim.lua): the expiry on the virtual clock; a plain SET drops the key's expiry.
    local args = {...}
    local px = nil
    for i = 3, #args - 1 do
      if string.upper(args[i]) == 'PX' then px = tonumber(args[i + 1]) end
    end
    local reply = real.call('SET', key, args[2])
    if px then
      real.call('HSET', EXPIRY, key, string.format('%d', NOW + px))
    else
      real.call('HDEL', EXPIRY, key)
    end
    return reply
  end
  local reply = real.call(command, ...)
  -- A key that went (its last field deleted) takes its expiry with it, as in Redis.
  if real.call('EXISTS', key) == 0 then real.call('HDEL', EXPIRY, key) end
  return reply
end
local function protected(...)
  local ok, reply = pcall(call, ...)
  if ok then return reply end
  if type(reply) == 'table' then return reply end
  return {err = tostring(reply)}
end
local redis = setmetatable({call = call, pcall = protected}, {__index = real})
`

/** What Redis holds for one lock, as `Memory.LockState` shows the memory store's. */
export interface LockState {
  /** Raw entries in hash order. */
  readonly entries: ReadonlyArray<{ readonly jid: string; readonly raw: string }>
  readonly pttl: number
  readonly score: number | undefined
}

const inspectScript = `
local out = {}
for i = 1, #KEYS - 2 do
  local key = KEYS[i]
  redis.call('EXISTS', key)
  local entries = real.call('HGETALL', key)
  out[#out + 1] = {entries, redis.call('PTTL', key), real.call('ZSCORE', KEYS[#KEYS - 1], ARGV[i]) or false}
end
return {out, real.call('GET', KEYS[#KEYS]) or false}
`

export interface VirtualRedis {
  /** A store over the shimmed scripts; it never reads Redis' own clock. */
  readonly store: Effect.Effect<Redis.RedisService["Service"], Redis.RedisError>
  readonly setTime: (ms: number) => Promise<void>
  /** Each lock's state and its fencing counter (in the order given), on the virtual clock. */
  readonly inspect: (
    prefix: string,
    locks: ReadonlyArray<Redis.LockKey>
  ) => Promise<{ readonly locks: ReadonlyArray<LockState>; readonly fences: ReadonlyArray<number | undefined> }>
  /** A claim.lua key on the virtual clock: its owner and PTTL (-2: no key). */
  readonly lease: (key: string) => Promise<{ readonly owner: string | undefined; readonly pttl: number }>
}

/**
 * The virtual-clock store for keys under `namespace` (the shim's own keys live there too), in `layout` (for the
 * cluster layout, `raw` is an ioredis `Cluster`).
 */
export const make = (raw: IORedis, namespace: string, layout: Layout.Layout = Layout.standalone): VirtualRedis => {
  // All on the script's first line (its comment lines left out), so an error's line is the script's own, as in
  // production, and the store maps it back to its lua/ file. A redis.call error's line is the shim's, though: the
  // error is raised inside the shim's `call`.
  const prelude = shim(namespace).split("\n").filter((line) => !/^\s*(--|$)/.test(line)).join(" ")
  const sources = new Map(Object.values(Scripts.loadScripts()).map((s) => [s.sha, s.source]))
  // The layout record reads no clock, and its key has no hash tag: on a cluster the shim's clock key would be in
  // another slot, so it runs unshimmed.
  const unshimmed = Scripts.loadScripts().layout.source
  const evalShimmed = (source: string, numKeys: number, args: ReadonlyArray<string | number>) =>
    raw.eval(source === unshimmed ? source : `${prelude} ${source}`, numKeys, ...args)
  const client: Redis.Client = {
    ...(layout.cluster ? { isCluster: true } : {}),
    zrange: (key, start, stop) => raw.zrange(key, start, stop),
    evalsha: (sha, numKeys, ...args) => {
      const source = sources.get(sha)
      return source === undefined ? Promise.reject(new Error(`NOSCRIPT ${sha}`)) : evalShimmed(source, numKeys, args)
    },
    eval: (source, numKeys, ...args) => evalShimmed(source, numKeys, args),
    script: () => Promise.resolve("OK"),
    // The index has no expiry: ZSCAN goes to Redis as it is.
    zscan: (key, cursor, matchToken, pattern, countToken, count) =>
      raw.zscan(key, cursor, matchToken, pattern, countToken, count),
    // The activity log (lockEvents) on the virtual clock: gone once its expiry there has passed.
    lrange: (key, start, stop) =>
      evalShimmed("redis.call('EXISTS', KEYS[1]) return real.call('LRANGE', KEYS[1], ARGV[1], ARGV[2])", 1, [key, start, stop])
        .then((reply) => reply as Array<string>),
    hgetall: (key) =>
      evalShimmed("redis.call('EXISTS', KEYS[1]) return real.call('HGETALL', KEYS[1])", 1, [key]).then((reply) => {
        const pairs = reply as Array<string>
        const record: Record<string, string> = {}
        for (let i = 0; i < pairs.length; i += 2) record[pairs[i]!] = pairs[i + 1]!
        return record
      })
  }
  return {
    store: Redis.makeFromClient(client, layout.cluster ? { shards: layout.shards } : {}),
    setTime: async (ms) => {
      const tags = layout.cluster ? Layout.tagsOf(layout.shards).map((tag) => `{${tag}}`) : [""]
      await Promise.all(tags.map((tag) => raw.set(`${namespace}${tag}:vclock`, String(ms))))
    },
    // One call per lock: its keys, its index and its fencing counter are in one slot in either layout.
    inspect: async (_prefix, locks) => {
      const states = await Promise.all(locks.map(async (lock) => {
        const { fence, index, locked } = layout.keysOf(lock)
        const [[state], counter] = (await evalShimmed(inspectScript, 3, [locked, index, fence, lock.name])) as [
          [[Array<string>, number, string | null]],
          string | null
        ]
        const [flat, pttl, score] = state
        const entries: Array<{ jid: string; raw: string }> = []
        for (let i = 0; i < flat.length; i += 2) entries.push({ jid: flat[i]!, raw: flat[i + 1]! })
        return {
          state: { entries, pttl, score: score === null ? undefined : Number(score) },
          fence: counter === null ? undefined : Number(counter)
        }
      }))
      return { locks: states.map((s) => s.state), fences: states.map((s) => s.fence) }
    },
    lease: async (key) => {
      const [owner, pttl] = (await evalShimmed(
        "redis.call('EXISTS', KEYS[1]) return {real.call('GET', KEYS[1]) or false, redis.call('PTTL', KEYS[1])}",
        1,
        [key]
      )) as [string | null, number]
      return { owner: owner ?? undefined, pttl }
    }
  }
}
