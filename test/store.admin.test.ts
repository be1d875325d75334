/**
 * The store's admin calls, on both stores: `fetch` (one lock read whole), `reap` (one bounded step of the reaper over
 * the index), `scan` (a page of the index), `remove` (locks deleted whole) and `claim` (one runner's lease). Time moves
 * with TestClock on the memory store and with real sleeps on Redis (short TTLs, generous margins). Redis only: what
 * the memory store cannot hold (a deleted key, a foreign entry, a key of another type) and the cost of a reap step,
 * counted by Redis itself (INFO commandstats), never by the wall clock.
 */
import { assert, describe, layer } from "@effect/vitest"
import type { Cluster } from "ioredis"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as TestClock from "effect/testing/TestClock"
import * as Redis from "../src/Redis.js"
import * as Layout from "../src/store/Layout.js"
import * as Memory from "../src/store/Memory.js"
import * as RedisTest from "./support/redis.js"
import { stores } from "./support/stores.js"

const queueLock = (jid: string, ttlMs = 0, limit = 1): Redis.HolderRequest => ({
  jid,
  limit,
  ttlMs,
  leaseMs: 0,
  info: "",
  fenced: false
})
const runLock = (jid: string, leaseMs: number, limit = 1): Redis.HolderRequest => ({
  jid,
  limit,
  ttlMs: 0,
  leaseMs,
  info: "",
  fenced: true
})

const store = Redis.RedisService
const keyOf = (prefix: string, name: string): Redis.LockKey => ({ prefix, name: `${prefix}:${name}` })
/** A lock's Redis keys, in the layout under test. */
const keysOf = (lock: Redis.LockKey) => RedisTest.keysOf(lock.prefix, lock.name)

/**
 * Where a step whose batch is just filled by every one of `locks` (the whole index) stops: past the `kept` ones. In
 * cluster mode the step walks shard after shard and stops in the last shard holding any of them, past its kept ones.
 */
const fullStepNext = (locks: ReadonlyArray<Redis.LockKey>, kept: ReadonlyArray<Redis.LockKey>): number => {
  const last = Math.max(...locks.map((lock) => RedisTest.layout.shardOf(lock)))
  return Layout.reapStart.encode(last, kept.filter((lock) => RedisTest.layout.shardOf(lock) === last).length)
}
const reapAll = (prefix: string, options: Partial<Redis.ReapRequest> = {}) =>
  Effect.flatMap(store, (s) => s.reap({ prefix, start: 0, batch: 1000, orphansBefore: 0, dryRun: false, ...options }))

/** Every member of the prefix's index, by a full scan. */
const indexOf = (prefix: string, pattern = "*") =>
  Effect.gen(function*() {
    const s = yield* store
    const members: Array<string> = []
    let cursor = "0"
    do {
      const page = yield* s.scan(prefix, cursor, pattern, 100)
      members.push(...page.members.map((m) => m.name))
      cursor = page.cursor
    } while (cursor !== "0")
    return members.sort()
  })

const redisOf = Effect.serviceOption(RedisTest.TestRedis)

/**
 * What the store holds under `prefix`: on Redis every key dumped (DUMP leaves TTLs out), on the memory store each
 * given lock as `fetch` reads it (less its TTL and time) and the index.
 */
const snapshot = (prefix: string, locks: ReadonlyArray<Redis.LockKey>) =>
  Effect.flatMap(redisOf, (redis) =>
    Option.match(redis, {
      onSome: ({ keys: keysOf, raw }) =>
        Effect.promise(async () => {
          const keys = (await keysOf(`${prefix}:*`)).sort()
          const dumps = await Promise.all(keys.map((k) => raw.dumpBuffer(k)))
          return keys.map((k, i) => `${k}=${dumps[i]?.toString("hex")}`).join("\n")
        }),
      onNone: () =>
        Effect.gen(function*() {
          const s = yield* store
          const fetched = yield* Effect.forEach(locks, (lock) => s.fetch(lock))
          const index = yield* indexOf(prefix)
          return JSON.stringify([fetched.map((f) => ({ holders: f.holders, indexScore: f.indexScore })), index])
        })
    }))

for (const target of stores) {
  // The store in its cluster layout: a reap step and a scan page go shard by shard.
  const sharded = target.name === "cluster"
  describe(`store admin calls: ${target.name}`, () => {
    layer(target.layer, { excludeTestServices: target.live })((it) => {
      it.effect("fetch: a live lock's holders, TTL and index score at the store's time; a gone lock's nothing", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("fetch")
          const lock = keyOf(prefix, "a")
          yield* s.lock(lock, { ...queueLock("j1", 60_000, 2), info: `{"worker":"W"}` })
          yield* s.lock(lock, queueLock("j2", 0, 2))
          const fetched = yield* s.fetch(lock)
          assert.deepStrictEqual(fetched.holders.map((h) => h.jid).sort(), ["j1", "j2"])
          const j1 = fetched.holders.find((h) => h.jid === "j1")!
          assert.deepStrictEqual(j1.info, { worker: "W" })
          assert.strictEqual(j1.expiresAt, j1.lockedAt + 60_000)
          assert.isAtLeast(fetched.now, j1.lockedAt)
          // j2 has no expiry: the key has no TTL; the index holds the lock's latest lock time.
          assert.isUndefined(fetched.ttlMs)
          assert.strictEqual(fetched.indexScore, fetched.holders.find((h) => h.jid === "j2")!.lockedAt)

          const ttl = keyOf(prefix, "b")
          yield* s.lock(ttl, queueLock("j1", 60_000))
          const withTtl = yield* s.fetch(ttl)
          assert.isAbove(withTtl.ttlMs!, 50_000)
          assert.isAtMost(withTtl.ttlMs!, 60_000)
          assert.strictEqual(withTtl.indexScore, withTtl.holders[0]!.expiresAt)

          const gone = yield* s.fetch(keyOf(prefix, "never"))
          assert.deepStrictEqual(
            { holders: gone.holders, ttlMs: gone.ttlMs, indexScore: gone.indexScore },
            { holders: [], ttlMs: undefined, indexScore: undefined }
          )
          assert.isAtLeast(gone.now, fetched.now)
        }))

      it.effect("fetch a page: 300 holders walked by cursor, a bounded page per call, size counting them all", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("fetch-page")
          const lock = keyOf(prefix, "wide")
          // Entries over 64 bytes: Redis keeps the hash as a table (a small hash of short entries is a listpack, which
          // HSCAN answers whole, up to hash-max-listpack-entries of them).
          const info = JSON.stringify({ worker: "PageWorker", queue: "default", args: ["an argument"] })
          yield* Effect.forEach(
            Array.from({ length: 300 }, (_, i) => `j${i}`),
            (jid) => s.lock(lock, { ...queueLock(jid, 60_000, 300), info }),
            { discard: true }
          )
          const seen = new Set<string>()
          let cursor = "0"
          let pages = 0
          do {
            const page = yield* s.fetch(lock, { cursor, count: 50, bytes: 0 })
            assert.strictEqual(page.size, 300)
            // HSCAN's COUNT is a hint on Redis (a few more may come); never the whole hash at once.
            assert.isAtMost(page.holders.length, target.name === "memory" ? 50 : 100)
            for (const holder of page.holders) seen.add(holder.jid)
            cursor = page.cursor
            pages++
          } while (cursor !== "0" && pages < 100)
          assert.strictEqual(cursor, "0")
          assert.isAtLeast(pages, 3)
          assert.strictEqual(seen.size, 300)
          // A lock that is gone: no holder, size 0, the walk ends at once.
          const gone = yield* s.fetch(keyOf(prefix, "never"), { cursor: "0", count: 10, bytes: 0 })
          assert.deepStrictEqual([gone.holders, gone.size, gone.cursor], [[], 0, "0"])
        }))

      it.effect("fetch a page cuts a long entry at bytes: the leading fields kept, its whole length told", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("fetch-cut")
          const lock = keyOf(prefix, "long")
          const info = JSON.stringify({ type: "until_executed", worker: "W", queue: "q", args: ["x".repeat(5000)] })
          yield* s.lock(lock, { ...queueLock("long", 60_000, 2), info, queue: "q" })
          yield* s.lock(lock, { ...queueLock("short", 60_000, 2), queue: "q" })
          const whole = yield* s.fetch(lock)
          const page = yield* s.fetch(lock, { cursor: "0", count: 10, bytes: 256 })
          const long = whole.holders.find((h) => h.jid === "long")!
          const cut = page.holders.find((h) => h.jid === "long")!
          const entry = `{"t":${long.lockedAt},"x":${long.expiresAt},"l":0,"q":"q","i":${info}}`
          assert.deepStrictEqual(cut, {
            ...long,
            info: { type: "until_executed", worker: "W", queue: "q" },
            truncated: Buffer.byteLength(entry)
          })
          // An entry within bytes is read whole.
          assert.deepStrictEqual(page.holders.find((h) => h.jid === "short"), whole.holders.find((h) => h.jid === "short"))
        }))

      it.effect("fetch a page: count, bytes and cursor out of range fail before anything, in the same words on both stores", () =>
        Effect.gen(function*() {
          const s = yield* store
          const lock = keyOf(RedisTest.uniquePrefix("fetch-args"), "a")
          const reason = (page: Redis.HolderPage) =>
            Effect.map(Effect.flip(s.fetch(lock, page)), (error) => error.reason)
          assert.strictEqual(
            yield* reason({ cursor: "0", count: 1001, bytes: 0 }),
            "ERR count must be a whole number from 0 to 1000, got 1001"
          )
          assert.strictEqual(
            yield* reason({ cursor: "0", count: 10, bytes: -1 }),
            "ERR bytes must be a whole number from 0 to 2^50, got -1"
          )
          assert.strictEqual(
            yield* reason({ cursor: "x", count: 10, bytes: 0 }),
            "ERR cursor must be the number a page answered, such as 0, got x"
          )
        }))

      it.effect("reap: a member whose key went is removed; a live lock stays", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("reap-gone")
          const lapsed = keyOf(prefix, "lapsed")
          const held = keyOf(prefix, "held")
          yield* s.lock(lapsed, queueLock("j1", 200))
          yield* s.lock(held, queueLock("j2"))
          yield* target.advance(400)
          assert.deepStrictEqual(yield* indexOf(prefix), [held.name, lapsed.name].sort())
          const result = yield* reapAll(prefix)
          assert.deepStrictEqual(result, {
            scanned: 2,
            next: -1,
            removedMembers: [lapsed.name],
            removedHolders: [],
            candidates: []
          })
          assert.deepStrictEqual(yield* indexOf(prefix), [held.name])
          assert.deepStrictEqual((yield* s.holders(held)).map((h) => h.jid), ["j2"])
        }))

      it.effect("reap: lapsed holders go, live ones stay; an emptied lock goes with its member; orphans reported", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("reap-holders")
          // mixed: j1's expiry passes, j2 has none (the key has no TTL then).
          const mixed = keyOf(prefix, "mixed")
          yield* s.lock(mixed, queueLock("j1", 200, 2))
          yield* s.lock(mixed, queueLock("j2", 0, 2))
          // emptied: j3's lease passes while the key lives on (j4 made it long, then let go).
          const emptied = keyOf(prefix, "emptied")
          yield* s.lock(emptied, runLock("j3", 200, 2))
          yield* s.lock(emptied, runLock("j4", 60_000, 2))
          assert.isTrue(yield* s.unlock(emptied, "j4"))
          // live: a lease far off.
          const live = keyOf(prefix, "live")
          yield* s.lock(live, runLock("j5", 60_000))
          yield* target.advance(400)
          const { now } = yield* s.fetch(mixed)
          const lockedAt = (yield* s.holders(mixed)).find((h) => h.jid === "j2")!.lockedAt

          const result = yield* reapAll(prefix, { orphansBefore: now + 1 })
          assert.strictEqual(result.scanned, 3)
          assert.strictEqual(result.next, -1)
          assert.deepStrictEqual(result.removedMembers, [emptied.name])
          assert.deepStrictEqual(
            [...result.removedHolders].sort((a, b) => a.jid.localeCompare(b.jid)),
            [{ lock: mixed.name, jid: "j1" }, { lock: emptied.name, jid: "j3" }]
          )
          // j2 has no expiry and no lease, and was taken before orphansBefore: a candidate, left in place.
          assert.deepStrictEqual(result.candidates, [{ lock: mixed.name, jid: "j2", lockedAt }])
          assert.deepStrictEqual((yield* s.holders(mixed)).map((h) => h.jid), ["j2"])
          assert.deepStrictEqual((yield* s.holders(live)).map((h) => h.jid), ["j5"])
          assert.deepStrictEqual(yield* s.holders(emptied), [])
          assert.deepStrictEqual(yield* indexOf(prefix), [live.name, mixed.name].sort())
          // An orphansBefore at or before the lock time reports nothing; 0 never does.
          assert.deepStrictEqual((yield* reapAll(prefix, { orphansBefore: lockedAt })).candidates, [])
          assert.deepStrictEqual((yield* reapAll(prefix, { orphansBefore: 0 })).candidates, [])
        }))

      it.effect("reap: a dry run answers the same and writes nothing", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("reap-dry")
          const locks = ["a", "b", "c"].map((n) => keyOf(prefix, n))
          yield* s.lock(locks[0]!, queueLock("j1", 200, 2))
          yield* s.lock(locks[0]!, queueLock("j2", 0, 2))
          yield* s.lock(locks[1]!, queueLock("j3", 200))
          yield* s.lock(locks[2]!, queueLock("j4"))
          yield* target.advance(400)
          const before = yield* snapshot(prefix, locks)
          const dry = yield* reapAll(prefix, { dryRun: true, batch: 3 })
          assert.strictEqual(yield* snapshot(prefix, locks), before)
          // A full batch: next counts every scanned member as kept.
          assert.strictEqual(dry.next, sharded ? fullStepNext(locks, locks) : 3)
          const wet = yield* reapAll(prefix, { batch: 3 })
          assert.deepStrictEqual({ ...dry, next: 0 }, { ...wet, next: 0 })
          // b's only holder lapsed: its member goes, so the next step starts one rank earlier.
          assert.strictEqual(wet.next, sharded ? fullStepNext(locks, [locks[0]!, locks[2]!]) : 2)
          assert.notStrictEqual(yield* snapshot(prefix, locks), before)
        }))

      it.effect("reap: 2,500 members in bounded steps of 1,000, next advancing to -1; every member seen once", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("reap-walk")
          // Every fifth one lapses.
          yield* Effect.forEach(
            Array.from({ length: 2500 }, (_, i) => i),
            (i) => s.lock(keyOf(prefix, `m${i}`), queueLock("j", i % 5 === 0 ? 200 : 0)),
            { concurrency: 32, discard: true }
          )
          yield* target.advance(400)
          const steps: Array<Redis.ReapResult> = []
          let next = 0
          while (next !== -1) {
            const step = yield* reapAll(prefix, { start: next })
            assert.isAtMost(step.scanned, 1000)
            if (sharded && step.scanned === 1000) {
              // Shard after shard: the position (shard, rank) moves on; the rank is the stop shard's own.
              assert.isAbove(step.next, next)
            } else {
              assert.strictEqual(step.next, step.scanned < 1000 ? -1 : next + step.scanned - step.removedMembers.length)
            }
            steps.push(step)
            next = step.next
          }
          assert.deepStrictEqual(steps.map((step) => step.scanned), [1000, 1000, 500])
          const removed = steps.flatMap((step) => step.removedMembers)
          assert.strictEqual(removed.length, 500)
          assert.strictEqual(new Set(removed).size, 500)
          assert.isTrue(removed.every((name) => Number(name.split(":m")[1]) % 5 === 0))
          assert.strictEqual((yield* indexOf(prefix)).length, 2000)
        }), 120_000)

      it.effect("reap: arguments out of range fail before anything is written, in the same words on both stores", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("reap-args")
          const lock = keyOf(prefix, "a")
          yield* s.lock(lock, queueLock("j1", 200))
          yield* target.advance(400)
          const before = yield* snapshot(prefix, [lock])
          const cases: ReadonlyArray<readonly [Partial<Redis.ReapRequest>, string]> = [
            [{ batch: 0 }, "ERR batch must be a whole number from 1 to 1000, got 0"],
            [{ batch: 1001 }, "ERR batch must be a whole number from 1 to 1000, got 1001"],
            [{ batch: 2.5 }, "ERR batch must be a whole number from 1 to 1000, got 2.5"],
            [{ start: -1 }, "ERR start must be a whole number from 0 to 2^50, got -1"],
            [{ orphansBefore: 0.5 }, "ERR orphansBefore must be a whole number from 0 to 2^50, got 0.5"]
          ]
          for (const [options, reason] of cases) {
            const error = yield* Effect.flip(reapAll(prefix, options))
            assert.strictEqual(error.reason, reason)
            assert.strictEqual(error.operation, "reap")
          }
          assert.strictEqual(yield* snapshot(prefix, [lock]), before)
        }))

      it.effect("scan: pages through 1,000 members, each matching one found exactly once", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("scan")
          yield* Effect.forEach(
            Array.from({ length: 1000 }, (_, i) => i),
            (i) => s.lock(keyOf(prefix, `${i % 2 === 0 ? "even" : "odd"}${i}`), queueLock("j")),
            { concurrency: 32, discard: true }
          )
          const seen: Array<string> = []
          let cursor = "0"
          let pages = 0
          do {
            const page = yield* s.scan(prefix, cursor, `${prefix}:even*`, 50)
            for (const member of page.members) assert.isAbove(member.score, 0)
            seen.push(...page.members.map((m) => m.name))
            cursor = page.cursor
            pages++
          } while (cursor !== "0")
          assert.isAbove(pages, 1)
          assert.strictEqual(seen.length, 500)
          assert.strictEqual(new Set(seen).size, 500)
          assert.isTrue(seen.every((name) => name.startsWith(`${prefix}:even`)))
          assert.deepStrictEqual(
            yield* indexOf(prefix, `${prefix}:odd?`),
            [1, 3, 5, 7, 9].map((i) => `${prefix}:odd${i}`)
          )
          assert.deepStrictEqual(yield* indexOf(prefix, `${prefix}:even1[0-2]`), [
            `${prefix}:even10`,
            `${prefix}:even12`
          ])
          assert.deepStrictEqual(
            yield* indexOf(prefix, `${prefix}:[^e]dd1?`),
            [11, 13, 15, 17, 19].map((i) => `${prefix}:odd${i}`)
          )
          const none = RedisTest.uniquePrefix("scan-none")
          const empty = yield* s.scan(none, "0", "*", 10)
          if (sharded) {
            // A page covers one shard: an empty index is a page of nothing per shard.
            assert.deepStrictEqual(empty.members, [])
            assert.deepStrictEqual(yield* indexOf(none), [])
          } else {
            assert.deepStrictEqual(empty, { cursor: "0", members: [] })
          }
        }), 120_000)

      it.effect("scan: a page's members removed before the next page is asked for: every member is still seen", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("scan-delete")
          const names = Array.from({ length: 300 }, (_, i) => keyOf(prefix, `m${i}`))
          yield* Effect.forEach(names, (lock) => s.lock(lock, queueLock("j")), { concurrency: 32, discard: true })
          const seen: Array<string> = []
          let cursor = "0"
          do {
            const page = yield* s.scan(prefix, cursor, "*", 7)
            seen.push(...page.members.map((m) => m.name))
            yield* s.remove(page.members.map((m) => ({ prefix, name: m.name })))
            cursor = page.cursor
          } while (cursor !== "0")
          assert.strictEqual(new Set(seen).size, 300)
          assert.deepStrictEqual(yield* indexOf(prefix), [])
        }), 120_000)

      it.effect("remove: queue locks and ended holders go whole; members go with their key; counted per lock", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("remove")
          const [a, b, c, kept] = ["a", "b", "c", "kept"].map((n) => keyOf(prefix, n))
          yield* s.lock(a!, queueLock("j1"))
          yield* s.lock(b!, runLock("j2", 200))
          yield* s.lock(kept!, queueLock("j3"))
          yield* target.advance(400)
          const removal = yield* s.remove([a!, b!, c!])
          assert.deepStrictEqual({ ...removal, now: 0 }, {
            now: 0,
            deleted: [a!.name],
            removed: [{ lock: a!.name, jid: "j1", live: true }],
            revoked: [],
            refused: []
          })
          assert.deepStrictEqual(yield* s.holders(a!), [])
          assert.deepStrictEqual(yield* s.holders(b!), [])
          assert.deepStrictEqual(yield* indexOf(prefix), [kept!.name])
          assert.deepStrictEqual((yield* s.remove([])).deleted, [])
          assert.deepStrictEqual((yield* s.remove([a!])).removed, [])
          const mixed = yield* Effect.flip(s.remove([kept!, keyOf(RedisTest.uniquePrefix("other"), "x")]))
          assert.strictEqual(mixed.operation, "remove")
          assert.match(mixed.reason, /share one prefix/)
          assert.deepStrictEqual((yield* s.holders(kept!)).map((h) => h.jid), ["j3"])
        }))

      it.effect("remove: a live run lease is revoked, not removed: it still blocks, is never renewed, its release frees it", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("revoke")
          const lock = keyOf(prefix, "r:RUN")
          const taken = yield* s.lock(lock, runLock("a", 60_000))
          assert.strictEqual(taken._tag, "Acquired")
          const fence = taken._tag === "Acquired" ? taken.fence : 0
          const before = (yield* s.holders(lock))[0]!
          const removal = yield* s.remove([lock], { jid: "a" })
          assert.deepStrictEqual(removal.revoked, [{ lock: lock.name, jid: "a", leaseUntil: before.leaseUntil! }])
          assert.deepStrictEqual([removal.deleted, removal.removed, removal.refused], [[], [], []])
          const after = (yield* s.holders(lock))[0]!
          assert.deepStrictEqual(after, { ...before, revokedAt: removal.now })
          // Still a holder: the same job's second copy and another job both conflict.
          assert.deepStrictEqual(yield* s.lock(lock, runLock("a", 60_000)), { _tag: "Conflict", holders: ["a"] })
          assert.deepStrictEqual(yield* s.lock(lock, runLock("b", 60_000)), { _tag: "Conflict", holders: ["a"] })
          // Its renewals fail (the holder learns it lost the lock), alone or in a batch, and move nothing.
          assert.isFalse(yield* s.renew(lock, "a", 60_000, fence))
          assert.isFalse(yield* s.renew(lock, "a", 60_000))
          assert.deepStrictEqual(yield* s.renewAll([{ lock, jid: "a", leaseMs: 60_000, fence }]), [false])
          assert.deepStrictEqual((yield* s.holders(lock))[0], after)
          // Asked again: reported again, marked once.
          const again = yield* s.remove([lock])
          assert.deepStrictEqual(again.revoked, removal.revoked)
          assert.deepStrictEqual((yield* s.holders(lock))[0], after)
          // The holder lets go: held to the end (no one else could take it), and the place is free.
          assert.isTrue(yield* s.unlock(lock, "a", fence))
          assert.deepStrictEqual(yield* indexOf(prefix), [])
          assert.strictEqual((yield* s.lock(lock, runLock("b", 60_000)))._tag, "Acquired")
        }))

      it.effect("renewAll with several leases out of range is refused naming the first, whatever the shards", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("renew-refused")
          // On a cluster the locks fall in many shards: the refusal must not be whichever shard answered first.
          for (let round = 0; round < 20; round++) {
            const renewals = Array.from({ length: 8 }, (_, i) => ({
              lock: keyOf(prefix, `r${round}-${i}:RUN`),
              jid: "a",
              leaseMs: i === 3 ? 0 : i === 6 ? -16 : 60_000,
              fence: 0
            }))
            const error = yield* Effect.flip(s.renewAll(renewals))
            assert.include(error.message, "got 0", `round ${round}`)
          }
        }))

      it.effect("remove: a revoked holder that died frees its place when its lease passes", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("revoke-dead")
          const lock = keyOf(prefix, "r:RUN")
          yield* s.lock(lock, runLock("a", 300))
          assert.strictEqual((yield* s.remove([lock])).revoked.length, 1)
          assert.strictEqual((yield* s.lock(lock, runLock("b", 300)))._tag, "Conflict")
          yield* target.advance(600)
          assert.strictEqual((yield* s.lock(lock, runLock("b", 60_000)))._tag, "Acquired")
          // And a lease already passed is removed at once, not revoked (d's long lease keeps the key alive).
          const lapsed = keyOf(prefix, "s:RUN")
          yield* s.lock(lapsed, runLock("c", 200, 2))
          yield* s.lock(lapsed, runLock("d", 60_000, 2))
          yield* target.advance(400)
          const removal = yield* s.remove([lapsed])
          assert.deepStrictEqual(removal.removed, [{ lock: lapsed.name, jid: "c", live: false }])
          assert.deepStrictEqual(removal.revoked.map((r) => r.jid), ["d"])
        }))

      it.effect("remove with a jid: only that holder; the lock goes with its last holder", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("remove-jid")
          const lock = keyOf(prefix, "q")
          yield* s.lock(lock, queueLock("a", 0, 3))
          yield* s.lock(lock, queueLock("b", 0, 3))
          const run = keyOf(prefix, "q:RUN")
          yield* s.lock(run, runLock("b", 60_000, 3))
          const one = yield* s.remove([lock, run], { jid: "a" })
          assert.deepStrictEqual([one.deleted, one.removed, one.revoked], [[], [{ lock: lock.name, jid: "a", live: true }], []])
          assert.deepStrictEqual((yield* s.holders(lock)).map((h) => h.jid), ["b"])
          const none = yield* s.remove([lock, run], { jid: "nobody" })
          assert.deepStrictEqual([none.deleted, none.removed, none.revoked], [[], [], []])
          const last = yield* s.remove([lock, run], { jid: "b" })
          assert.deepStrictEqual(last.deleted, [lock.name])
          assert.deepStrictEqual(last.removed, [{ lock: lock.name, jid: "b", live: true }])
          assert.deepStrictEqual(last.revoked.map((r) => r.jid), ["b"])
          assert.deepStrictEqual(yield* indexOf(prefix), [run.name])
        }))

      it.effect("claim: taken when free, renewed by its owner, refused to another, given up, and ends by itself", () =>
        Effect.gen(function*() {
          const s = yield* store
          const key = `${RedisTest.uniquePrefix("claim")}:reaper`
          assert.isTrue(yield* s.claim(key, "a", 60_000))
          assert.isTrue(yield* s.claim(key, "a", 60_000))
          assert.isFalse(yield* s.claim(key, "b", 60_000))
          // b cannot give up a's lease.
          assert.isFalse(yield* s.claim(key, "b", 0))
          assert.isFalse(yield* s.claim(key, "b", 60_000))
          assert.isFalse(yield* s.claim(key, "a", 0))
          assert.isTrue(yield* s.claim(key, "b", 200))
          yield* target.advance(400)
          assert.isTrue(yield* s.claim(key, "a", 60_000))
          const error = yield* Effect.flip(s.claim(key, "a", -1))
          assert.strictEqual(error.reason, "ERR lease must be a whole number from 0 to 2^50, got -1")
        }))

      it.effect("tally: amounts add up per field, the bucket ends by its TTL, and a bad amount writes nothing", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("tally")
          const [a, b, gone] = [`${prefix}:metrics:1`, `${prefix}:metrics:2`, `${prefix}:metrics:3`]
          yield* s.tally(a, [["until_executed:acquired", 3], ["until_executed:conflicts", 1]], 60_000)
          yield* s.tally(a, [["until_executed:acquired", 2], ["while_executing:lost", 0]], 60_000)
          yield* s.tally(b, [["until_executed:acquired", 1]], 300)
          // Nothing above 0: no key is made, so no bucket without an end.
          yield* s.tally(gone, [["until_executed:acquired", 0]], 60_000)
          assert.deepStrictEqual(yield* s.tallies([a, b, gone]), [
            { "until_executed:acquired": 5, "until_executed:conflicts": 1 },
            { "until_executed:acquired": 1 },
            {}
          ])
          for (const [amounts, ttl, reason] of [
            [[["x", 1], ["y", -1]], 60_000, "ERR amount must be a whole number from 0 to 2^50, got -1"],
            [[["x", 1.5]], 60_000, "ERR amount must be a whole number from 0 to 2^50, got 1.5"],
            [[["x", 1]], 0, "ERR ttl must be a whole number from 1 to 2^50, got 0"]
          ] as const) {
            const error = yield* Effect.flip(s.tally(a, amounts, ttl))
            assert.include(error.reason, reason)
          }
          assert.deepStrictEqual((yield* s.tallies([a]))[0], { "until_executed:acquired": 5, "until_executed:conflicts": 1 })
          yield* target.advance(600)
          assert.deepStrictEqual(yield* s.tallies([b]), [{}])
        }))

      it.effect("journal: newest first, the newest `keep` kept, ends by its TTL; a tally key is not a journal", () =>
        Effect.gen(function*() {
          const s = yield* store
          const prefix = RedisTest.uniquePrefix("journal")
          const key = `${prefix}:reaper:passes`
          for (const entry of ["1", "2", "3", "4"]) yield* s.journal(key, entry, 3, 60_000)
          assert.deepStrictEqual(yield* s.journaled(key, 10), ["4", "3", "2"])
          assert.deepStrictEqual(yield* s.journaled(key, 1), ["4"])
          assert.include((yield* Effect.flip(s.journal(key, "5", 0, 60_000))).reason, "keep must be a whole number from 1 to 1000")
          assert.include((yield* Effect.flip(s.journaled(key, 0))).reason, "count must be a whole number from 1")
          assert.deepStrictEqual(yield* s.journaled(key, 10), ["4", "3", "2"])
          const tallied = `${prefix}:metrics:1`
          yield* s.tally(tallied, [["x", 1]], 60_000)
          assert.include((yield* Effect.flip(s.journal(tallied, "1", 3, 60_000))).reason, "WRONGTYPE")
          assert.include((yield* Effect.flip(s.tally(key, [["x", 1]], 60_000))).reason, "WRONGTYPE")
          // Read, a key of the other kind holds none of ours: empty, not a failure of the whole read.
          assert.deepStrictEqual(yield* s.tallies([key, tallied]), [{}, { x: 1 }])
          assert.deepStrictEqual(yield* s.journaled(tallied, 10), [])
          const short = `${prefix}:short`
          yield* s.journal(short, "1", 3, 300)
          yield* target.advance(600)
          assert.deepStrictEqual(yield* s.journaled(short, 10), [])
        }))
    })
  })
}

describe("store admin calls: the memory store's leases", () => {
  layer(Redis.layerMemory)((it) => {
    it.effect("a lease ends when its time on the store's Clock has passed, not before", () =>
      Effect.gen(function*() {
        const memory = Memory.makeInspectable()
        assert.isTrue(yield* memory.store.claim("lease", "a", 1000))
        yield* TestClock.adjust(999)
        assert.deepStrictEqual(yield* memory.lease("lease"), { owner: "a", pttl: 1 })
        assert.isFalse(yield* memory.store.claim("lease", "b", 1000))
        assert.isTrue(yield* memory.store.claim("lease", "a", 1000))
        assert.deepStrictEqual(yield* memory.lease("lease"), { owner: "a", pttl: 1000 })
        yield* TestClock.adjust(1000)
        assert.deepStrictEqual(yield* memory.lease("lease"), { owner: undefined, pttl: -2 })
        assert.isTrue(yield* memory.store.claim("lease", "b", 1000))
      }))
  })
})

layer(RedisTest.layer(), { excludeTestServices: true })("store admin calls: Redis only", (it) => {
  const dumpAll = (prefix: string) => snapshot(prefix, [])

  it.effect("reap: a deleted key's member goes, a foreign entry goes, a key of another type is left alone", () =>
    Effect.gen(function*() {
      const s = yield* store
      const { raw } = yield* RedisTest.TestRedis
      const prefix = RedisTest.uniquePrefix("reap-redis")
      const deleted = keyOf(prefix, "deleted")
      const foreign = keyOf(prefix, "foreign")
      const other = keyOf(prefix, "other")
      yield* s.lock(deleted, queueLock("j1"))
      yield* s.lock(foreign, queueLock("j2"))
      yield* Effect.promise(async () => {
        await raw.del(keysOf(deleted).locked)
        // The gem's entry: a float timestamp.
        await raw.hset(keysOf(foreign).locked, "gem", "1750000000.123456")
        await raw.zadd(keysOf(other).index, 1, other.name)
        await raw.set(keysOf(other).locked, "not ours")
      })
      const result = yield* reapAll(prefix)
      assert.deepStrictEqual([...result.removedMembers].sort(), [deleted.name])
      assert.deepStrictEqual(result.removedHolders, [{ lock: foreign.name, jid: "gem" }])
      assert.strictEqual(result.scanned, 3)
      assert.deepStrictEqual(yield* indexOf(prefix), [foreign.name, other.name].sort())
      assert.strictEqual(yield* Effect.promise(() => raw.get(keysOf(other).locked)), "not ours")
      assert.deepStrictEqual(yield* Effect.promise(() => raw.hkeys(keysOf(foreign).locked)), ["j2"])
    }))

  it.effect("reap: a wrong-typed index fails the step, and nothing is written", () =>
    Effect.gen(function*() {
      const s = yield* store
      const { raw } = yield* RedisTest.TestRedis
      const prefix = RedisTest.uniquePrefix("reap-wrong")
      yield* s.lock(keyOf(prefix, "a"), queueLock("j1"))
      // Aside in the index's own slot (`<prefix>:aside` on one Redis): a cluster renames within one slot only.
      const index = keysOf(keyOf(prefix, "a")).index
      yield* Effect.promise(async () => {
        await raw.rename(index, index.replace(/digests$/, "aside"))
        await raw.set(index, "not an index")
      })
      const before = yield* dumpAll(prefix)
      const error = yield* Effect.flip(reapAll(prefix))
      assert.match(error.reason, /^WRONGTYPE /)
      // A cluster's step reads each shard's members with its own ZRANGE before the script: no script line then.
      assert.strictEqual(
        error.script,
        RedisTest.clusterMode ? undefined : "lua/reap.lua:" + String(lineOf("reap.lua", "redis.call('ZRANGE'"))
      )
      assert.strictEqual(yield* dumpAll(prefix), before)
      const removeError = yield* Effect.flip(s.remove([keyOf(prefix, "a")]))
      assert.match(removeError.reason, /^WRONGTYPE /)
      assert.strictEqual(yield* dumpAll(prefix), before)
    }))

  it.effect("remove: only this library's locks: a key not in the index or not a hash is refused and left alone", () =>
    Effect.gen(function*() {
      const s = yield* store
      const { raw } = yield* RedisTest.TestRedis
      const prefix = RedisTest.uniquePrefix("remove-ours")
      const ours = keyOf(prefix, "ours")
      const user = keyOf(prefix, "user")
      const text = keyOf(prefix, "text")
      yield* s.lock(ours, queueLock("j1", 0, 2))
      yield* Effect.promise(async () => {
        // The gem's entry in one of ours: it counts as gone, so it goes with the lock.
        await raw.hset(keysOf(ours).locked, "gem", "1750000000.123456")
        await raw.hset(keysOf(user).locked, "name", "bob")
        await raw.zadd(keysOf(text).index, 1, text.name)
        await raw.set(keysOf(text).locked, "not ours")
      })
      const before = yield* dumpAll(prefix)
      const strict = yield* s.remove([ours, user, text], { strict: true })
      assert.deepStrictEqual([strict.deleted, strict.removed, strict.revoked], [[], [], []])
      // One call per shard in cluster mode, the refusals in shard order: compared by lock there.
      const byLock = <A extends { readonly lock: string }>(items: ReadonlyArray<A>) =>
        RedisTest.clusterMode ? [...items].sort((a, b) => a.lock.localeCompare(b.lock)) : items
      assert.deepStrictEqual(byLock(strict.refused), byLock([
        { lock: user.name, reason: `not in ${keysOf(user).index}: not a lock of this library` },
        { lock: text.name, reason: `${keysOf(text).locked} is a string, not a lock of this library` }
      ]))
      assert.strictEqual(yield* dumpAll(prefix), before, "strict: nothing written")
      const byJid = yield* s.remove([user], { jid: "name" })
      assert.deepStrictEqual(byJid.refused.map((r) => r.lock), [user.name])
      const loose = yield* s.remove([ours, user, text])
      assert.deepStrictEqual(loose.deleted, [ours.name])
      assert.deepStrictEqual(
        [...loose.removed].sort((a, b) => a.jid.localeCompare(b.jid)),
        [{ lock: ours.name, jid: "gem", live: false }, { lock: ours.name, jid: "j1", live: true }]
      )
      assert.strictEqual(loose.refused.length, 2)
      assert.deepStrictEqual(yield* Effect.promise(() => raw.hgetall(keysOf(user).locked)), { name: "bob" })
      assert.strictEqual(yield* Effect.promise(() => raw.get(keysOf(text).locked)), "not ours")
      assert.deepStrictEqual(yield* indexOf(prefix), [text.name])
    }))

  it.effect("a revoked entry keeps t, x, l and f where they were; parseHolder reads r", () =>
    Effect.gen(function*() {
      const s = yield* store
      const { raw } = yield* RedisTest.TestRedis
      const prefix = RedisTest.uniquePrefix("revoke-raw")
      const lock = keyOf(prefix, "r:RUN")
      yield* s.lock(lock, { ...runLock("a", 60_000), info: `{"worker":"W"}` })
      const before = yield* Effect.promise(() => raw.hget(keysOf(lock).locked, "a"))
      const removal = yield* s.remove([lock])
      const after = yield* Effect.promise(() => raw.hget(keysOf(lock).locked, "a"))
      const head = /^(\{"t":\d+,"x":\d+,"l":\d+,"f":\d+)(.*)$/.exec(before!)!
      assert.strictEqual(after, `${head[1]},"r":${removal.now}${head[2]}`)
      const parsed = Redis.parseHolder("a", after!)
      assert.deepStrictEqual(parsed, { ...Redis.parseHolder("a", before!), revokedAt: removal.now })
      assert.deepStrictEqual(parsed.info, { worker: "W" })
    }))

  it.effect("claim: a renewal moves the key's TTL; a wrong-typed key fails, written nothing", () =>
    Effect.gen(function*() {
      const s = yield* store
      const { raw } = yield* RedisTest.TestRedis
      const key = `${RedisTest.uniquePrefix("claim-redis")}:reaper`
      assert.isTrue(yield* s.claim(key, "a", 1000))
      assert.isAtMost(yield* Effect.promise(() => raw.pttl(key)), 1000)
      assert.isTrue(yield* s.claim(key, "a", 60_000))
      assert.isAbove(yield* Effect.promise(() => raw.pttl(key)), 50_000)
      assert.strictEqual(yield* Effect.promise(() => raw.get(key)), "a")
      assert.isFalse(yield* s.claim(key, "a", 0))
      assert.strictEqual(yield* Effect.promise(() => raw.exists(key)), 0)
      yield* Effect.promise(() => raw.rpush(key, "x"))
      const error = yield* Effect.flip(s.claim(key, "a", 1000))
      assert.match(error.reason, /^WRONGTYPE /)
      assert.deepStrictEqual(yield* Effect.promise(() => raw.lrange(key, 0, -1)), ["x"])
      assert.strictEqual(yield* Effect.promise(() => raw.pttl(key)), -1)
    }))

  it.effect("scan's MATCH: the memory store's glob agrees with Redis' on every pattern", () =>
    Effect.gen(function*() {
      const s = yield* store
      const prefix = RedisTest.uniquePrefix("glob")
      const names = ["a", "b", "ab", "abc", "a*c", "a?c", "a[c", "a]c", "a\\c", "ba", "-", "a-c", "aXc", "^a", ""]
      yield* Effect.forEach(names, (n) => s.lock({ prefix, name: `${prefix}:${n}` }, queueLock("j")), { discard: true })
      const patterns = [
        "*", "a*", "*c", "a?c", "a\\*c", "a\\?c", "a[bc]*", "a[^b]*", "a[a-c]c", "a[c-a]*", "*[\\]]*", "a\\\\c",
        "[", "a[", "*[-]*", "[!a]*", "a[*", "**a**", "?", "??", "*\\", "a[b", "[^]a"
      ]
      for (const pattern of patterns) {
        const full = `${prefix}:${pattern}`
        const fromRedis = yield* indexOf(prefix, full)
        const fromGlob = names.map((n) => `${prefix}:${n}`).filter((n) => Memory.globMatch(full, n)).sort()
        assert.deepStrictEqual(fromGlob, fromRedis, `pattern ${JSON.stringify(pattern)}`)
      }
    }))
})

// Its Redis time is measured in bench/ (`npm run bench -- --reaper`: SLOWLOG at 5 ms), not asserted here: a busy
// machine stretches any call.
layer(RedisTest.layerServer, { excludeTestServices: true })("store admin calls: the cost of a reap step", (it) => {
  const title = RedisTest.clusterMode
    ? "one reap step over 1,000 members is at most a ZRANGE and a script call per shard (commandstats of every master)"
    : "one reap step over 1,000 members is one script call (commandstats)"
  it.effect(title, () =>
    Effect.gen(function*() {
      const { raw } = yield* RedisTest.TestRedis
      const s = yield* Redis.makeFromClient(raw)
      const prefix = RedisTest.uniquePrefix("reap-cost")
      const masters = RedisTest.clusterMode ? (raw as unknown as Cluster).nodes("master") : [raw]
      const names = Array.from({ length: 1000 }, (_, i) => `${prefix}:m${i}`)
      // The prefix's layout recorded (as its first lock would), so the step is counted alone.
      yield* Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, s))
      // A step of a busy index: every lock held by a live lease; one in ten has a lapsed holder besides (removed),
      // one in ten is held with no expiry and no lease since long ago (a candidate).
      const now = yield* Effect.promise(async () => {
        const [sec, us] = await raw.time()
        const now = Number(sec) * 1000 + Math.floor(Number(us) / 1000)
        // One pipeline per shard: a cluster's pipeline keeps to one slot's node.
        const pipelines = new Map<number, ReturnType<typeof raw.pipeline>>()
        names.forEach((name, i) => {
          const shard = RedisTest.layout.shardOf({ prefix, name })
          const pipeline = pipelines.get(shard) ?? raw.pipeline()
          pipelines.set(shard, pipeline)
          const keys = RedisTest.keysOf(prefix, name)
          pipeline.zadd(keys.index, now - 10_000 + i, name)
          const lease = i % 10 === 5 ? 0 : now + 60_000
          pipeline.hset(keys.locked, "live", `{"t":${now - 10_000},"x":0,"l":${lease}}`)
          if (i % 10 === 0) {
            pipeline.hset(keys.locked, "lapsed", `{"t":${now - 10_000},"x":${now - 5000},"l":0}`)
          }
        })
        await Promise.all(Array.from(pipelines.values(), (pipeline) => pipeline.exec()))
        await Promise.all(masters.map((master) => master.config("RESETSTAT")))
        return now
      })
      const step = yield* s.reap({ prefix, start: 0, batch: 1000, orphansBefore: now, dryRun: false })
      const stats = yield* Effect.promise(() => Promise.all(masters.map((master) => master.info("commandstats"))))
      const calls = (command: string) =>
        stats.reduce((sum, text) => sum + Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(text)?.[1] ?? 0), 0)
      assert.strictEqual(step.scanned, 1000)
      assert.strictEqual(step.removedHolders.length, 100)
      assert.strictEqual(step.candidates.length, 100)
      if (RedisTest.clusterMode) {
        // Every member looked at: the step stops in the last shard holding any, past its members (all kept).
        const locks = names.map((name) => ({ prefix, name }))
        assert.strictEqual(step.next, fullStepNext(locks, locks))
        // Per shard one ZRANGE and one script call, and the runner's claim (none here): nothing else ran a script,
        // no EVAL after a NOSCRIPT either.
        assert.isAtMost(calls("evalsha") + calls("zrange"), 2 * RedisTest.layout.shards + 1, stats.join("\n"))
        assert.isAtMost(calls("evalsha"), RedisTest.layout.shards + 1, stats.join("\n"))
        assert.strictEqual(calls("eval"), 0, stats.join("\n"))
      } else {
        const evalsha = /cmdstat_evalsha:calls=(\d+)/.exec(stats[0]!)
        assert.strictEqual(step.next, 1000)
        // One step, one script call: nothing else ran a script (no EVAL after a NOSCRIPT either).
        assert.strictEqual(Number(evalsha?.[1]), 1, stats[0])
        assert.notMatch(stats[0]!, /cmdstat_eval:/)
      }
    }), 120_000)
})

/** The 1-based line of `file` (under lua/) holding `text`. */
const lineOf = (file: string, text: string): number => {
  const lines = readFileSync(fileURLToPath(new URL(`../lua/${file}`, import.meta.url)), "utf8").split("\n")
  return lines.findIndex((line) => line.includes(text)) + 1
}
