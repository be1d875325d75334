/**
 * The lock scripts' semantics over in-process maps, with time from Effect's Clock.
 * Mirrors `lua/*.lua` step for step, and refuses what they refuse; the conformance suite holds the two together.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type { Holder, HolderRequest, LockKey, LockResult, Store } from "./models.js"
import { keysOf, RedisError } from "./models.js"

/** @internal */
export interface Entry {
  readonly t: number
  readonly x: number
  readonly l: number
  readonly f: number
  readonly info: string
}

interface Hash {
  readonly entries: Map<string, Entry>
  /** Key expiry in ms; undefined for none (PERSIST). */
  expiresAt: number | undefined
}

const horizon = (entry: Entry): number => (entry.x > 0 && entry.l > 0 ? Math.min(entry.x, entry.l) : entry.x || entry.l)
const live = (entry: Entry, now: number): boolean => {
  const h = horizon(entry)
  return h === 0 || h > now
}

/** The scripts' `whole`: 2^50 keeps Redis time plus the value exact in Lua's doubles. */
const maxWhole = 2 ** 50

class Refused {
  constructor(readonly reason: string) {}
}

const whole = (value: number, name: string, min: number): number => {
  if (!Number.isInteger(value) || value < min || value > maxWhole) {
    throw new Refused(`ERR ${name} must be a whole number from ${min} to 2^50, got ${value}`)
  }
  return value
}

/**
 * What the store holds for one lock, in the terms Redis would show: the entries in insertion order, the key's time to
 * live (PTTL: -2 no key, -1 no expiry) and the lock's score in its prefix's index. For the differential tests.
 *
 * @internal
 */
export interface LockState {
  readonly entries: ReadonlyArray<Entry & { readonly jid: string }>
  readonly pttl: number
  readonly score: number | undefined
}

/** @internal */
export const make = (): Store => makeInspectable().store

/**
 * The store, and a view of its state for the differential tests (`inspect`, and the prefix's fencing counter).
 *
 * @internal
 */
export const makeInspectable = () => {
  const hashes = new Map<string, Hash>()
  const indexes = new Map<string, Map<string, number>>()
  const fences = new Map<string, number>()

  const getHash = (key: string, now: number): Hash | undefined => {
    const hash = hashes.get(key)
    if (hash !== undefined && hash.expiresAt !== undefined && hash.expiresAt <= now) {
      hashes.delete(key)
      return undefined
    }
    return hash
  }

  const hdel = (key: string, hash: Hash, jid: string): boolean => {
    const removed = hash.entries.delete(jid)
    if (hash.entries.size === 0) hashes.delete(key)
    return removed
  }

  const extend = (hash: Hash, h: number, now: number, created: boolean): void => {
    if (h === 0) {
      hash.expiresAt = undefined
      return
    }
    const want = Math.max(h - now, 1)
    if (created) hash.expiresAt = now + want
    else if (hash.expiresAt !== undefined && hash.expiresAt - now < want) hash.expiresAt = now + want
  }

  const acquire = (lock: LockKey, request: HolderRequest, now: number, micros: number): LockResult => {
    const limit = whole(request.limit, "limit", 1)
    const ttl = whole(request.ttlMs, "ttl", 0)
    const lease = whole(request.leaseMs, "lease", 0)
    const { fence, index, locked } = keysOf(lock)
    let hash = getHash(locked, now)
    let count = hash?.entries.size ?? 0
    const current = hash?.entries.get(request.jid)
    if (current !== undefined && !request.fenced && live(current, now)) {
      return { _tag: "Acquired", reentrant: true, fence: 0 }
    }
    // A run lock is held per acquisition: a live entry of jid's is another copy of this job, still running.
    const copy = current !== undefined && request.fenced && live(current, now)
    if (hash !== undefined && (count >= limit || copy)) {
      const holders: Array<string> = []
      for (const [jid, entry] of hash.entries) {
        if (live(entry, now)) holders.push(jid)
        else hdel(locked, hash, jid)
      }
      if (copy || holders.length >= limit) return { _tag: "Conflict", holders }
      count = holders.length
    } else if (hash !== undefined && current !== undefined) {
      hdel(locked, hash, request.jid)
      count--
    }
    hash = getHash(locked, now)
    const f = request.fenced ? Math.max(micros, (fences.get(fence) ?? 0) + 1) : 0
    const entry: Entry = { t: now, x: ttl > 0 ? now + ttl : 0, l: lease > 0 ? now + lease : 0, f, info: request.info }
    const created = count === 0 || hash === undefined
    if (hash === undefined) {
      hash = { entries: new Map(), expiresAt: undefined }
      hashes.set(locked, hash)
    }
    hash.entries.set(request.jid, entry)
    extend(hash, horizon(entry), now, created)
    let members = indexes.get(index)
    if (members === undefined) {
      members = new Map()
      indexes.set(index, members)
    }
    const score = members.get(lock.name)
    if (entry.x === 0) members.set(lock.name, now)
    else if (score === undefined || entry.x > score) members.set(lock.name, entry.x)
    if (f > 0) fences.set(fence, f)
    return { _tag: "Acquired", reentrant: false, fence: f }
  }

  const release = (lock: LockKey, jid: string, token: number, now: number): boolean => {
    const { index, locked } = keysOf(lock)
    const hash = getHash(locked, now)
    const current = hash?.entries.get(jid)
    if (hash === undefined || current === undefined) {
      if (hash === undefined) indexes.get(index)?.delete(lock.name)
      return false
    }
    if (token !== 0 && current.f !== token) return false
    hdel(locked, hash, jid)
    if (!hashes.has(locked)) indexes.get(index)?.delete(lock.name)
    return live(current, now)
  }

  const renew = (lock: LockKey, jid: string, leaseMs: number, token: number, now: number): boolean => {
    const lease = whole(leaseMs, "lease", 1)
    const hash = getHash(keysOf(lock).locked, now)
    const current = hash?.entries.get(jid)
    if (hash === undefined || current === undefined) return false
    if ((token !== 0 && current.f !== token) || !live(current, now)) return false
    const renewed = { ...current, l: now + lease }
    hash.entries.set(jid, renewed)
    extend(hash, horizon(renewed), now, false)
    return true
  }

  // Like a script, a call either runs whole or is refused (RedisError) before it changes anything.
  const run = <A>(operation: string, f: (now: number, micros: number) => A): Effect.Effect<A, RedisError> =>
    Clock.clockWith((clock) => {
      // Milliseconds and microseconds of one instant, as TIME gives them. Nanoseconds alone will not do: TestClock
      // makes them from milliseconds in floating point, which loses the last digits at today's epoch.
      const now = clock.unsafeCurrentTimeMillis()
      const micros = Math.min(Math.max(Number(clock.unsafeCurrentTimeNanos() / 1_000n), now * 1000), now * 1000 + 999)
      try {
        return Effect.succeed(f(now, micros))
      } catch (error) {
        if (error instanceof Refused) return Effect.fail(new RedisError({ operation, reason: error.reason }))
        throw error
      }
    })

  const store: Store = {
    lock: (lock, request) => run("lock", (now, micros) => acquire(lock, request, now, micros)),
    unlock: (lock, jid, fence = 0) => run("unlock", (now) => release(lock, jid, fence, now)),
    renew: (lock, jid, leaseMs, fence = 0) => run("renew", (now) => renew(lock, jid, leaseMs, fence, now)),
    // renew_all.lua: every lease checked before the first renewal, all at one instant.
    renewAll: (renewals) =>
      run("renewAll", (now) => {
        for (const renewal of renewals) whole(renewal.leaseMs, "lease", 1)
        return renewals.map((renewal) => renew(renewal.lock, renewal.jid, renewal.leaseMs, renewal.fence, now))
      }),
    handoff: (from, to, request, { keepOnConflict }) =>
      run("handoff", (now, micros) => {
        const queued = getHash(keysOf(from).locked, now)?.entries.get(request.jid)
        const result = acquire(to, { ...request, fenced: true }, now, micros)
        const queueLockHeld = result._tag === "Acquired" || !keepOnConflict
          ? release(from, request.jid, 0, now)
          : queued !== undefined && live(queued, now)
        return { ...result, queueLockHeld }
      }),
    holders: (lock) =>
      run("holders", (now) =>
        Array.from(getHash(keysOf(lock).locked, now)?.entries ?? [], ([jid, entry]): Holder => ({
          jid,
          lockedAt: entry.t,
          expiresAt: entry.x > 0 ? entry.x : undefined,
          leaseUntil: entry.l > 0 ? entry.l : undefined,
          fence: entry.f,
          info: entry.info === "" ? undefined : JSON.parse(entry.info)
        })))
  }

  const inspect = (lock: LockKey): Effect.Effect<LockState> =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const { index, locked } = keysOf(lock)
      const hash = getHash(locked, now)
      return {
        entries: Array.from(hash?.entries ?? [], ([jid, entry]) => ({ jid, ...entry })),
        pttl: hash === undefined ? -2 : hash.expiresAt === undefined ? -1 : hash.expiresAt - now,
        score: indexes.get(index)?.get(lock.name)
      }
    })

  return { store, inspect, fence: (prefix: string): number | undefined => fences.get(`${prefix}:fence`) }
}
