/**
 * The lock scripts' semantics over in-process maps, with time from Effect's Clock.
 * Mirrors `lua/*.lua` step for step, and refuses what they refuse; the conformance suite holds the two together.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type {
  Holder,
  HolderRequest,
  LockKey,
  LockResult,
  ReapCandidate,
  ReapResult,
  Removal,
  ScanPage,
  Store
} from "./Store.js"
import { eventLog, holdersChanged, keysOf, RedisError, replacedTtlMs } from "./Store.js"
import type { LockEvent } from "./Store.js"
import { cutHolder, eventOf, eventText, foldRefusal } from "./Entries.js"
import * as Layout from "./Layout.js"

/** @internal */
export interface Entry {
  readonly t: number
  readonly x: number
  readonly l: number
  readonly f: number
  /** The job's queue (a queue lock's `q`); "" when none. */
  readonly q: string
  readonly info: string
  /** When an operator revoked the hold (remove.lua's `r`); absent when not. */
  readonly r?: number
}

interface Hash {
  readonly entries: Map<string, Entry>
  /** Key expiry in ms; undefined for none (PERSIST). */
  expiresAt: number | undefined
}

type RemoveOptions = NonNullable<Parameters<Store["remove"]>[1]>

// An entry as the scripts write it (lua/lib/prelude.lua), to cut where fetch.lua cuts.
const rawOf = (entry: Entry): string =>
  `{"t":${entry.t},"x":${entry.x},"l":${entry.l}${entry.f > 0 ? `,"f":${entry.f}` : ""}${
    entry.r === undefined ? "" : `,"r":${entry.r}`
  }${entry.q === "" ? "" : `,"q":${JSON.stringify(entry.q)}`}${entry.info === "" ? "" : `,"i":${entry.info}`}}`

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

const whole = (value: number, name: string, min: number, max?: number): number => {
  if (!Number.isInteger(value) || value < min || value > (max ?? maxWhole)) {
    throw new Refused(`ERR ${name} must be a whole number from ${min} to ${max ?? "2^50"}, got ${value}`)
  }
  return value
}

/** Redis' order of members (and of equal scores): their bytes, which for UTF-8 is code point order. */
const compareNames = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b))

/**
 * Redis' glob (`stringmatchlen`, case-sensitive), as ZSCAN's MATCH reads it: `*`, `?`, `[abc]`, `[^a-z]`, and `\\`
 * taking the next character as it is.
 *
 * @internal
 */
export const globMatch = (pattern: string, text: string): boolean => {
  const match = (p: number, s: number): boolean => {
    while (p < pattern.length && s < text.length) {
      switch (pattern[p]) {
        case "*": {
          while (pattern[p + 1] === "*") p++
          if (p === pattern.length - 1) return true
          for (; s < text.length; s++) if (match(p + 1, s)) return true
          return false
        }
        case "?":
          s++
          break
        case "[": {
          p++
          const not = pattern[p] === "^"
          if (not) p++
          let found = false
          for (;;) {
            if (pattern[p] === "\\" && pattern.length - p >= 2) {
              p++
              if (pattern[p] === text[s]) found = true
            } else if (pattern[p] === "]") {
              break
            } else if (p >= pattern.length) {
              p--
              break
            } else if (pattern.length - p >= 3 && pattern[p + 1] === "-") {
              let from = pattern[p]!
              let to = pattern[p + 2]!
              if (from > to) [from, to] = [to, from]
              p += 2
              if (text[s]! >= from && text[s]! <= to) found = true
            } else if (pattern[p] === text[s]) {
              found = true
            }
            p++
          }
          if (not) found = !found
          if (!found) return false
          s++
          break
        }
        case "\\":
          if (pattern.length - p >= 2) p++
          if (pattern[p] !== text[s]) return false
          s++
          break
        default:
          if (pattern[p] !== text[s]) return false
          s++
      }
      p++
      if (s === text.length) {
        while (pattern[p] === "*") p++
        break
      }
    }
    return p >= pattern.length && s === text.length
  }
  return match(0, 0)
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
 * The store, and a view of its state for the differential tests (`inspect`, and each lock's fencing counter). The
 * fencing counters are split as `fenceLayout` splits them (one per prefix, as on one Redis; one per shard, as on a cluster),
 * so its tokens are the ones the scripts hand out in that layout.
 *
 * @internal
 */
export const makeInspectable = (fenceLayout: Layout.Layout = Layout.standalone) => {
  const hashes = new Map<string, Hash>()
  const indexes = new Map<string, Map<string, number>>()
  const counters = new Map<string, number>()
  /** lock_step's `<digest>:REPLACED`: the jids a swap took the place of, and when the set expires. */
  const replacedSets = new Map<string, { readonly jids: Set<string>; expiresAt: number }>()
  /** claim.lua's keys: the owner and when the lease ends. */
  const leases = new Map<string, { owner: string; expiresAt: number }>()
  /** The release signals' listeners (`Store.releases`): PUBLISH of the scripts, on a run lock's holders key. */
  const listeners = new Set<(channel: string, freed: number) => void>()
  const publish = (member: string, locked: string, freed: number): void => {
    if (freed === 0 || !member.endsWith(":RUN")) return
    for (const listener of listeners) listener(locked, freed)
  }

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

  // lock_step's swap: each holder named must be there as given (live, its t as read), or nothing is written and the
  // refusal names the live holders, maybe none; else the lock is taken in their place, its t above theirs.
  const swapOf = (locked: string, request: HolderRequest, now: number) => {
    if (request.swap === undefined || request.swap.length === 0) return { gone: new Set<string>(), floor: 0 }
    const hash = getHash(locked, now)
    const gone = new Set<string>()
    let floor = 0
    for (const held of request.swap) {
      const entry = hash?.entries.get(held.jid)
      if (entry === undefined || !live(entry, now) || (held.lockedAt !== undefined && entry.t !== held.lockedAt)) {
        return undefined
      }
      gone.add(held.jid)
      floor = Math.max(floor, entry.t + 1)
    }
    return { gone, floor }
  }

  const acquire = (lock: LockKey, request: HolderRequest, now: number, micros: number): LockResult => {
    const { index, locked } = keysOf(lock)
    const swap = swapOf(locked, request, now)
    if (swap === undefined) {
      const entries = getHash(locked, now)?.entries ?? new Map<string, Entry>()
      return { _tag: "Conflict", holders: Array.from(entries).filter(([, entry]) => live(entry, now)).map(([jid]) => jid) }
    }
    const { gone, floor } = swap
    const limit = whole(request.limit, "limit", 1)
    const ttl = whole(request.ttlMs, "ttl", 0)
    const lease = whole(request.leaseMs, "lease", 0)
    const fence = fenceLayout.keysOf(lock).fence
    let hash = getHash(locked, now)
    let count = (hash?.entries.size ?? 0) - gone.size
    const current = gone.has(request.jid) ? undefined : hash?.entries.get(request.jid)
    if (current !== undefined && !request.fenced && live(current, now)) {
      return { _tag: "Acquired", reentrant: true, fence: 0 }
    }
    // A run lock is held per acquisition: a live entry of jid's is another copy of this job, still running.
    const copy = current !== undefined && request.fenced && live(current, now)
    if (hash !== undefined && (count >= limit || copy)) {
      const holders: Array<string> = []
      for (const [jid, entry] of hash.entries) {
        if (gone.has(jid)) continue
        if (live(entry, now)) holders.push(jid)
        else hdel(locked, hash, jid)
      }
      if (copy || holders.length >= limit) return { _tag: "Conflict", holders }
      count = holders.length
    } else if (hash !== undefined && current !== undefined) {
      hdel(locked, hash, request.jid)
      count--
    }
    for (const jid of gone) hash!.entries.delete(jid)
    if (gone.size > 0) {
      const { replaced } = keysOf(lock)
      const kept = replacedSets.get(replaced)
      const set = kept === undefined || kept.expiresAt <= now ? new Set<string>() : kept.jids
      for (const jid of gone) set.add(jid)
      replacedSets.set(replaced, { jids: set, expiresAt: now + replacedTtlMs })
    }
    hash = getHash(locked, now)
    const f = request.fenced ? Math.max(micros, (counters.get(fence) ?? 0) + 1) : 0
    const entry: Entry = {
      t: Math.max(now, floor),
      x: ttl > 0 ? now + ttl : 0,
      l: lease > 0 ? now + lease : 0,
      f,
      q: request.queue ?? "",
      info: request.info
    }
    const created = (count === 0 && gone.size === 0) || hash === undefined
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
    if (entry.x === 0) members.set(lock.name, entry.t)
    else if (score === undefined || entry.x > score) members.set(lock.name, entry.x)
    if (f > 0) counters.set(fence, f)
    return { _tag: "Acquired", reentrant: false, fence: f }
  }

  const release = (lock: LockKey, jid: string, token: number, now: number, signal = false): boolean => {
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
    const released = live(current, now)
    if (released && signal) publish(lock.name, locked, 1)
    return released
  }

  // renew_entry: `keep` renews a revoked entry too (its holder runs on), keeping its mark.
  const renew = (lock: LockKey, jid: string, leaseMs: number, token: number, now: number, keep = false): boolean => {
    const lease = whole(leaseMs, "lease", 1)
    const hash = getHash(keysOf(lock).locked, now)
    const current = hash?.entries.get(jid)
    if (hash === undefined || current === undefined) return false
    if ((token !== 0 && current.f !== token) || !live(current, now) || (current.r !== undefined && !keep)) return false
    const renewed = { ...current, l: now + lease }
    hash.entries.set(jid, renewed)
    extend(hash, horizon(renewed), now, false)
    return true
  }

  const holdersOf = (hash: Hash | undefined): Array<Holder> =>
    Array.from(hash?.entries ?? [], ([jid, entry]): Holder => ({
      jid,
      lockedAt: entry.t,
      expiresAt: entry.x > 0 ? entry.x : undefined,
      leaseUntil: entry.l > 0 ? entry.l : undefined,
      fence: entry.f,
      info: entry.info === "" ? undefined : JSON.parse(entry.info),
      ...(entry.q === "" ? {} : { queue: entry.q }),
      ...(entry.r === undefined ? {} : { revokedAt: entry.r })
    }))

  // fetch.lua's page: HSCAN's guarantee (a holder there from the walk's start to its end is read once at least) kept
  // by walking jids in byte order from the last one a cursor answered. A cursor stays good for a reload; the oldest go
  // once many are kept (a cursor not known starts over, as a made-up one does on Redis).
  const holderCursors = new Map<string, string>()
  const holderPage = (hash: Hash | undefined, page: NonNullable<Parameters<Store["fetch"]>[1]>) => {
    const count = whole(page.count, "count", 0, 1000)
    const bytes = whole(page.bytes, "bytes", 0)
    if (!/^\d{1,20}$/.test(page.cursor)) {
      throw new Refused(`ERR cursor must be the number a page answered, such as 0, got ${page.cursor}`)
    }
    if (count === 0) return { holders: holdersOf(hash), cursor: "0" }
    const jids = Array.from(hash?.entries.keys() ?? []).sort(compareNames)
    const after = holderCursors.get(page.cursor)
    const from = after === undefined ? 0 : jids.findIndex((jid) => compareNames(jid, after) > 0)
    const taken = from === -1 ? [] : jids.slice(from, from + count)
    let cursor = "0"
    if (from !== -1 && from + count < jids.length) {
      cursor = String(++lastCursor)
      holderCursors.set(cursor, taken[taken.length - 1]!)
      if (holderCursors.size > 10_000) holderCursors.delete(holderCursors.keys().next().value!)
    }
    const holders = taken.map((jid): Holder => {
      const entry = hash!.entries.get(jid)!
      const raw = Buffer.from(rawOf(entry))
      return bytes > 0 && raw.length > bytes
        ? cutHolder(jid, raw.subarray(0, bytes).toString("utf8"), raw.length)
        : holdersOf({ entries: new Map([[jid, entry]]), expiresAt: undefined })[0]!
    })
    return { holders, cursor }
  }

  // reap.lua: ZRANGE of the step's ranks (score, then name), every read before the first write.
  const reap = (request: Parameters<Store["reap"]>[0], now: number): ReapResult => {
    const batch = whole(request.batch, "batch", 1, 1000)
    const start = whole(request.start, "start", 0)
    const before = whole(request.orphansBefore, "orphansBefore", 0)
    const runner = request.runner
    const lease = runner === undefined ? 0 : whole(runner.leaseMs, "lease", 1)
    if (runner !== undefined) {
      const holder = leaseOf(runner.key, now)
      if (holder !== undefined && holder.owner !== runner.owner) {
        return { scanned: 0, next: -1, removedMembers: [], removedHolders: [], candidates: [], refused: true }
      }
    }
    const index = `${request.prefix}:digests`
    const members = indexes.get(index)
    const found = members === undefined
      ? []
      : Array.from(members).sort(([a, x], [b, y]) => x - y || compareNames(a, b)).slice(start, start + batch)
    const removedMembers: Array<string> = []
    const expired: Array<string> = []
    const removedHolders: Array<{ readonly lock: string; readonly jid: string }> = []
    const candidates: Array<ReapCandidate> = []
    const evictions: Array<
      { readonly key: string; readonly hash: Hash; readonly jids: ReadonlyArray<string>; readonly member: string }
    > = []
    let kept = 0
    for (const [member] of found) {
      const key = `${member}:LOCKED`
      const hash = getHash(key, now)
      if (hash === undefined) {
        removedMembers.push(member)
        expired.push(member)
        continue
      }
      const jids: Array<string> = []
      for (const [jid, entry] of hash.entries) {
        const h = horizon(entry)
        if (h > 0 && h <= now) {
          jids.push(jid)
          removedHolders.push({ lock: member, jid })
        } else if (h === 0 && before > 0 && entry.t < before) {
          candidates.push({ lock: member, jid, lockedAt: entry.t, ...(entry.q === "" ? {} : { queue: entry.q }) })
        }
      }
      if (jids.length > 0) evictions.push({ key, hash, jids, member })
      if (jids.length === hash.entries.size) removedMembers.push(member)
      else kept++
    }
    if (!request.dryRun) {
      for (const { hash, jids, key } of evictions) for (const jid of jids) hdel(key, hash, jid)
      for (const { jids, key, member } of evictions) publish(member, key, jids.length)
      for (const member of removedMembers) members?.delete(member)
      for (const { jids, member } of evictions) {
        const lock = { prefix: request.prefix, name: member }
        for (const jid of jids) logEvent(lock, { at: now, event: "reaped", jid, phase: phaseOf(lock) }, now, true)
      }
      for (const member of expired) {
        const lock = { prefix: request.prefix, name: member }
        logEvent(lock, { at: now, event: "reaped", jid: "", phase: phaseOf(lock) }, now, true)
      }
    }
    const next = found.length < batch ? -1 : start + (request.dryRun ? found.length : kept)
    // The runner's lease is its own, not lock data: a dry run keeps it too.
    if (runner !== undefined) leases.set(runner.key, { owner: runner.owner, expiresAt: now + lease })
    return { scanned: found.length, next, removedMembers, removedHolders, candidates }
  }

  // ZSCAN over the members sorted by name. A cursor stands for the last name its page returned, not an offset: as on
  // Redis, a member there from the scan's start to its end is returned even when members before it go meanwhile (a
  // delete by pattern removes each page before asking for the next).
  const scanCursors = new Map<string, string>()
  let lastCursor = 0
  const scan = (prefix: string, cursor: string, pattern: string, count: number): ScanPage => {
    if (!/^\d+$/.test(cursor)) throw new Refused("ERR invalid cursor")
    if (!Number.isInteger(count) || count < 1) throw new Refused("ERR syntax error")
    const names = Array.from(indexes.get(`${prefix}:digests`) ?? []).sort(([a], [b]) => compareNames(a, b))
    const after = scanCursors.get(cursor)
    scanCursors.delete(cursor)
    const from = after === undefined ? 0 : names.findIndex(([name]) => compareNames(name, after) > 0)
    const page = from === -1 ? [] : names.slice(from, from + count)
    let next = "0"
    if (from !== -1 && from + count < names.length) {
      next = String(++lastCursor)
      scanCursors.set(next, page[page.length - 1]![0])
    }
    return {
      cursor: next,
      members: page.filter(([name]) => globMatch(pattern, name)).map(([name, score]) => ({ name, score }))
    }
  }

  // remove.lua's comparison: the holders are exactly the expected jids (a set; a jid listed twice never matches).
  const sameHolders = (holders: ReadonlyArray<string>, expected: ReadonlyArray<string>) => {
    const wanted = new Set(expected)
    return holders.length === expected.length && holders.every((holder) => wanted.has(holder))
  }
  // remove.lua: refused locks first (strict: then nothing is written); live leases revoked, every other holder removed.
  const remove = (locks: ReadonlyArray<LockKey>, options: RemoveOptions, now: number): Removal => {
    const prefix = locks[0]?.prefix
    if (!locks.every((lock) => lock.prefix === prefix)) {
      throw new Refused(
        `the locks of one call must share one prefix (their index), got ${
          Array.from(new Set(locks.map((lock) => JSON.stringify(lock.prefix)))).join(", ")
        }`
      )
    }
    const jid = options.jid ?? ""
    const refused: Array<Removal["refused"][number]> = []
    const ours: Array<{ readonly lock: LockKey; readonly hash: Hash | undefined; readonly indexed: boolean }> = []
    for (const [i, lock] of locks.entries()) {
      const { index, locked } = keysOf(lock)
      const hash = getHash(locked, now)
      const indexed = indexes.get(index)?.has(lock.name) === true
      const expected = options.expect?.[i]
      const holders = hash === undefined ? [] : jid === "" ? Array.from(hash.entries.keys()) : hash.entries.has(jid) ? [jid] : []
      if (hash !== undefined && !indexed) {
        refused.push({ lock: lock.name, reason: `not in ${index}: not a lock of this library` })
      } else if (expected !== undefined && !sameHolders(holders, expected)) {
        refused.push({ lock: lock.name, reason: holdersChanged })
      } else {
        ours.push({ lock, hash, indexed })
      }
    }
    const answer: Removal = { now, deleted: [], removed: [], revoked: [], refused }
    if (options.strict === true && refused.length > 0) return answer
    const deleted = answer.deleted as Array<string>
    const removed = answer.removed as Array<Removal["removed"][number]>
    const revoked = answer.revoked as Array<Removal["revoked"][number]>
    for (const { hash, indexed, lock } of ours) {
      const { index, locked } = keysOf(lock)
      const size = hash?.entries.size ?? 0
      const entries = hash === undefined
        ? []
        : jid === ""
        ? Array.from(hash.entries)
        : hash.entries.has(jid)
        ? [[jid, hash.entries.get(jid)!] as const]
        : []
      let dropped = 0
      const log: Array<LockEvent> = []
      const who = options.who === undefined || options.who === "" ? {} : { who: options.who }
      for (const [holder, entry] of entries) {
        if (entry.l > 0 && live(entry, now)) {
          revoked.push({ lock: lock.name, jid: holder, leaseUntil: entry.l })
          if (entry.r === undefined) hash!.entries.set(holder, { ...entry, r: now })
          log.push({ at: now, event: "revoked", jid: holder, phase: phaseOf(lock), ...who })
        } else {
          removed.push({ lock: lock.name, jid: holder, live: live(entry, now) })
          hdel(locked, hash!, holder)
          dropped++
          log.push({ at: now, event: "removed", jid: holder, phase: phaseOf(lock), ...who })
        }
      }
      for (const event of log) logEvent(lock, event, now, true)
      publish(lock.name, locked, dropped)
      if (dropped === size && indexed) {
        indexes.get(index)?.delete(lock.name)
        if (size > 0) deleted.push(lock.name)
      }
    }
    return answer
  }

  // A lease of the map, or undefined once its time has passed (it is then gone).
  const leaseOf = (key: string, now: number) => {
    const current = leases.get(key)
    if (current !== undefined && current.expiresAt <= now) {
      leases.delete(key)
      return undefined
    }
    return current
  }

  // claim.lua on a map of leases, each gone once its time has passed.
  const claim = (key: string, owner: string, leaseMs: number, now: number): boolean => {
    const lease = whole(leaseMs, "lease", 0)
    const current = leaseOf(key, now)
    if (lease === 0) {
      if (current?.owner === owner) leases.delete(key)
      return false
    }
    if (current === undefined || current.owner === owner) {
      leases.set(key, { owner, expiresAt: now + lease })
      return true
    }
    return false
  }

  // tally.lua and journal.lua on maps of keys, each gone once its TTL has passed; one key is of one kind only.
  const tallied = new Map<string, { readonly fields: Map<string, number>; expiresAt: number }>()
  const journals = new Map<string, { entries: Array<string>; expiresAt: number }>()
  const alive = <V extends { readonly expiresAt: number }>(map: Map<string, V>, key: string, now: number) => {
    const value = map.get(key)
    if (value !== undefined && value.expiresAt <= now) {
      map.delete(key)
      return undefined
    }
    return value
  }
  const wrongType = (key: string, now: number, kind: "hash" | "list") => {
    const other = kind === "hash" ? alive(journals, key, now) : alive(tallied, key, now)
    if (other !== undefined) {
      throw new Refused("WRONGTYPE Operation against a key holding the wrong kind of value")
    }
  }
  const tally = (key: string, amounts: ReadonlyArray<readonly [string, number]>, ttlMs: number, now: number) => {
    const ttl = whole(ttlMs, "ttl", 1)
    for (const [, amount] of amounts) whole(amount, "amount", 0)
    wrongType(key, now, "hash")
    if (!amounts.some(([, amount]) => amount > 0)) return
    const bucket = alive(tallied, key, now) ?? { fields: new Map<string, number>(), expiresAt: 0 }
    for (const [field, amount] of amounts) {
      if (amount > 0) bucket.fields.set(field, (bucket.fields.get(field) ?? 0) + amount)
    }
    bucket.expiresAt = now + ttl
    tallied.set(key, bucket)
  }
  const journal = (key: string, entry: string, keep: number, ttlMs: number, now: number) => {
    const most = whole(keep, "keep", 1, 1000)
    const ttl = whole(ttlMs, "ttl", 1)
    wrongType(key, now, "list")
    const list = alive(journals, key, now) ?? { entries: [], expiresAt: 0 }
    list.entries = [entry, ...list.entries].slice(0, most)
    list.expiresAt = now + ttl
    journals.set(key, list)
  }

  // log_event (lua/lib/prelude.lua): first in the digest's list (a refusal like the newest entry folded into it), its
  // newest 100 kept for 24 hours, or 1 hour once neither of the digest's locks has a hash; a key of another kind (a
  // tally's) is left alone. `only`: log only where the list exists (the reaper's and an admin's calls).
  const phaseOf = (lock: LockKey): "queue" | "run" => (lock.name.endsWith(":RUN") ? "run" : "queue")
  const logEvent = (lock: LockKey, event: LockEvent, now: number, only = false): void => {
    const key = keysOf(lock).events
    if (alive(tallied, key, now) !== undefined) return
    const list = alive(journals, key, now)
    if (only && list === undefined) return
    const entries = list?.entries ?? []
    const folded = foldRefusal(entries[0], event)
    const base = lock.name.endsWith(":RUN") ? lock.name.slice(0, -4) : lock.name
    const held = event.event === "taken" || event.event === "reentered" || event.event === "refused" ||
      [base, `${base}:RUN`].some((name) => getHash(keysOf({ prefix: lock.prefix, name }).locked, now) !== undefined)
    journals.set(key, {
      entries: folded === undefined
        ? [eventText(event), ...entries].slice(0, eventLog.keep)
        : [folded, ...entries.slice(1)],
      expiresAt: now + (held ? eventLog.ttlMs : eventLog.goneTtlMs)
    })
  }
  const logAcquired = (lock: LockKey, jid: string, phase: "queue" | "run", result: LockResult, now: number): void =>
    logEvent(
      lock,
      result._tag === "Conflict"
        ? { at: now, event: "refused", jid, phase, holder: [...result.holders].sort(compareNames)[0]! }
        : { at: now, event: result.reentrant ? "reentered" : "taken", jid, phase },
      now
    )

  // Like a script, a call either runs whole or is refused (RedisError) before it changes anything.
  const run = <A>(operation: string, f: (now: number, micros: number) => A): Effect.Effect<A, RedisError> =>
    Clock.clockWith((clock) => {
      // Milliseconds and microseconds of one instant, as TIME gives them. Nanoseconds alone will not do: TestClock
      // makes them from milliseconds in floating point, which loses the last digits at today's epoch.
      const now = clock.currentTimeMillisUnsafe()
      const micros = Math.min(Math.max(Number(clock.currentTimeNanosUnsafe() / 1_000n), now * 1000), now * 1000 + 999)
      try {
        return Effect.succeed(f(now, micros))
      } catch (error) {
        if (error instanceof Refused) return Effect.fail(new RedisError({ operation, reason: error.reason }))
        throw error
      }
    })

  const store: Store = {
    lock: (lock, request) =>
      run("lock", (now, micros) => {
        const result = acquire(lock, request, now, micros)
        if (request.events === true) logAcquired(lock, request.jid, request.fenced ? "run" : "queue", result, now)
        return result
      }),
    unlock: (lock, jid, fence = 0, events, signal) =>
      run("unlock", (now) => {
        const released = release(lock, jid, fence, now, signal === true)
        if (events === true) {
          logEvent(lock, { at: now, event: released ? "released" : "missed", jid, phase: phaseOf(lock) }, now)
        }
        return released
      }),
    renew: (lock, jid, leaseMs, fence = 0, events) =>
      run("renew", (now) => {
        const renewed = renew(lock, jid, leaseMs, fence, now)
        if (!renewed && events === true) logEvent(lock, { at: now, event: "lost", jid, phase: "run" }, now)
        return renewed
      }),
    // renew_all.lua: every lease checked before the first renewal, all at one instant.
    renewAll: (renewals) =>
      run("renewAll", (now) => {
        for (const renewal of renewals) whole(renewal.leaseMs, "lease", 1)
        return renewals.map((renewal) => {
          const keep = renewal.keep === true
          const renewed = renew(renewal.lock, renewal.jid, renewal.leaseMs, renewal.fence, now, keep)
          if (!renewed && !keep && renewal.events === true) {
            logEvent(renewal.lock, { at: now, event: "lost", jid: renewal.jid, phase: "run" }, now)
          }
          return renewed
        })
      }),
    handoff: (from, to, request, { keepOnConflict }) =>
      run("handoff", (now, micros) => {
        const queued = getHash(keysOf(from).locked, now)?.entries.get(request.jid)
        const result = acquire(to, { ...request, fenced: true }, now, micros)
        const releases = result._tag === "Acquired" || !keepOnConflict
        const queueLockHeld = releases
          ? release(from, request.jid, 0, now)
          : queued !== undefined && live(queued, now)
        if (request.events === true) {
          logAcquired(from, request.jid, "run", result, now)
          if (queued !== undefined && releases) {
            logEvent(from, { at: now, event: queueLockHeld ? "released" : "missed", jid: request.jid, phase: "queue" }, now)
          }
        }
        return { ...result, queueLockHeld }
      }),
    holders: (lock) => run("holders", (now) => holdersOf(getHash(keysOf(lock).locked, now))),
    replaced: (lock, jid) =>
      run("replaced", (now) => {
        const set = replacedSets.get(keysOf(lock).replaced)
        return set !== undefined && set.expiresAt > now && set.jids.has(jid)
      }),
    fetch: (lock, page) =>
      run("fetch", (now) => {
        const { index, locked } = keysOf(lock)
        const hash = getHash(locked, now)
        const read = page === undefined
          ? { holders: holdersOf(hash), cursor: "0" }
          : holderPage(hash, page)
        return {
          holders: read.holders,
          size: hash?.entries.size ?? 0,
          cursor: read.cursor,
          ttlMs: hash?.expiresAt === undefined ? undefined : hash.expiresAt - now,
          indexScore: indexes.get(index)?.get(lock.name),
          now
        }
      }),
    reap: (request) => run("reap", (now) => reap(request, now)),
    scan: (prefix, cursor, pattern, count) => run("scan", () => scan(prefix, cursor, pattern, count)),
    remove: (locks, options = {}) =>
      locks.length === 0
        ? Effect.succeed({ now: 0, deleted: [], removed: [], revoked: [], refused: [] })
        : run("remove", (now) => remove(locks, options, now)),
    claim: (key, owner, leaseMs) => run("claim", (now) => claim(key, owner, leaseMs, now)),
    tally: (key, amounts, ttlMs) => run("tally", (now) => tally(key, amounts, ttlMs, now)),
    tallies: (keys) =>
      run("tallies", (now) =>
        keys.map((key) => Object.fromEntries(alive(tallied, key, now)?.fields ?? []))),
    journal: (key, entry, keep, ttlMs) => run("journal", (now) => journal(key, entry, keep, ttlMs, now)),
    events: (lock, count) =>
      run("events", (now) => {
        if (!Number.isSafeInteger(count) || count < 1) throw new Refused(`count must be a whole number from 1, got ${count}`)
        return (alive(journals, keysOf(lock).events, now)?.entries.slice(0, count) ?? []).flatMap((text) => {
          const event = eventOf(text)
          return event === undefined ? [] : [event]
        })
      }),
    journaled: (key, count) =>
      run("journaled", (now) => {
        if (!Number.isSafeInteger(count) || count < 1) throw new Refused(`count must be a whole number from 1, got ${count}`)
        return alive(journals, key, now)?.entries.slice(0, count) ?? []
      }),
    // One process: every listener hears every signal, and the waiters' registry keeps those of its lines.
    releases: {
      channelOf: (lock) => keysOf(lock).locked,
      open: (deliver) => {
        listeners.add(deliver)
        return {
          subscribe: () => Promise.resolve(),
          unsubscribe: () => Promise.resolve(),
          close: () => Promise.resolve(void listeners.delete(deliver))
        }
      }
    }
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

  /** A claim.lua key as Redis would show it: its owner and PTTL (-2: no key). */
  const lease = (key: string): Effect.Effect<{ readonly owner: string | undefined; readonly pttl: number }> =>
    Effect.map(Clock.currentTimeMillis, (now) => {
      const current = leases.get(key)
      return current === undefined || current.expiresAt <= now
        ? { owner: undefined, pttl: -2 }
        : { owner: current.owner, pttl: current.expiresAt - now }
    })

  return { store, inspect, lease, fence: (lock: LockKey): number | undefined => counters.get(fenceLayout.keysOf(lock).fence) }
}
