/**
 * The lock scripts' semantics over in-process maps, with time from Effect's Clock.
 * Mirrors `lua/*.lua` step for step; the conformance suite holds the two together.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type { Holder, HolderRequest, LockKey, LockResult, RedisError, RedisService } from "../Redis.js"
import { keysOf } from "../Redis.js"

interface Entry {
  readonly t: number
  readonly x: number
  readonly l: number
  readonly info: string
}

interface Hash {
  readonly entries: Map<string, Entry>
  /** Key expiry in ms; undefined for none (PERSIST). */
  expiresAt: number | undefined
}

const horizon = (entry: Entry): number => (entry.x > 0 && entry.l > 0 ? Math.min(entry.x, entry.l) : entry.x || entry.l)

/** @internal */
export const make = (): RedisService["Type"] => {
  const hashes = new Map<string, Hash>()
  const indexes = new Map<string, Map<string, number>>()

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

  const acquire = (lock: LockKey, request: HolderRequest, now: number): LockResult => {
    const { index, locked } = keysOf(lock)
    let hash = getHash(locked, now)
    const current = hash?.entries.get(request.jid)
    if (hash !== undefined && current !== undefined) {
      const h = horizon(current)
      if (h === 0 || h > now) {
        if (request.leaseMs > 0) {
          const renewed = { ...current, l: now + request.leaseMs }
          hash.entries.set(request.jid, renewed)
          extend(hash, horizon(renewed), now, false)
        }
        return { _tag: "Acquired", reentrant: true }
      }
      hdel(locked, hash, request.jid)
      hash = getHash(locked, now)
    }
    let count = hash?.entries.size ?? 0
    if (hash !== undefined && count >= request.limit) {
      for (const [jid, entry] of hash.entries) {
        const h = horizon(entry)
        if (h > 0 && h <= now) hdel(locked, hash, jid)
      }
      count = hash.entries.size
      if (count >= request.limit) return { _tag: "Conflict", holders: Array.from(hash.entries.keys()) }
    }
    const entry: Entry = {
      t: now,
      x: request.ttlMs > 0 ? now + request.ttlMs : 0,
      l: request.leaseMs > 0 ? now + request.leaseMs : 0,
      info: request.info
    }
    const created = count === 0
    if (created || hash === undefined) {
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
    return { _tag: "Acquired", reentrant: false }
  }

  const release = (lock: LockKey, jid: string, now: number): boolean => {
    const { index, locked } = keysOf(lock)
    const hash = getHash(locked, now)
    const removed = hash !== undefined && hdel(locked, hash, jid)
    if (!hashes.has(locked)) indexes.get(index)?.delete(lock.name)
    return removed
  }

  const atNow = <A>(f: (now: number) => A): Effect.Effect<A, RedisError> => Effect.map(Clock.currentTimeMillis, f)

  return {
    lock: (lock, request) => atNow((now) => acquire(lock, request, now)),
    unlock: (lock, jid) => atNow((now) => release(lock, jid, now)),
    renew: (lock, jid, leaseMs) =>
      atNow((now) => {
        const hash = getHash(keysOf(lock).locked, now)
        const current = hash?.entries.get(jid)
        if (hash === undefined || current === undefined) return false
        const renewed = { ...current, l: now + leaseMs }
        hash.entries.set(jid, renewed)
        extend(hash, horizon(renewed), now, false)
        return true
      }),
    handoff: (from, to, request, { keepOnConflict }) =>
      atNow((now) => {
        const result = acquire(to, request, now)
        const queueLockHeld = result._tag === "Acquired" || !keepOnConflict
          ? release(from, request.jid, now)
          : getHash(keysOf(from).locked, now)?.entries.has(request.jid) === true
        return { ...result, queueLockHeld }
      }),
    holders: (lock) =>
      atNow((now) =>
        Array.from(getHash(keysOf(lock).locked, now)?.entries ?? [], ([jid, entry]): Holder => ({
          jid,
          lockedAt: entry.t,
          expiresAt: entry.x > 0 ? entry.x : undefined,
          leaseUntil: entry.l > 0 ? entry.l : undefined,
          info: entry.info === "" ? undefined : JSON.parse(entry.info)
        }))
      )
  }
}
