/**
 * The admin API on a real Redis: list by pattern with paging, show, delete, unlock one jid, delete by pattern (dry run,
 * bounded and resumable), stats.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/testing/TestClock"
import * as Lock from "../src/Lock.js"
import * as Locks from "../src/Locks.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisTest from "./support/redis.js"
import * as Harness from "./support/web.js"

describe("Locks", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("list, show, unlock, delete, delete by pattern and stats", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("admin")
        const queued = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockInfo: true, lockTtl: 60_000 })
        const running = LockOptions.unsafeMake({ lock: "while_executing", lockPrefix: prefix, lockLease: 60_000 })
        for (let i = 0; i < 250; i++) yield* Lock.lock(queued, { digest: `${prefix}:q${i}`, jid: `j${i}` })
        for (let i = 0; i < 5; i++) yield* Lock.lock(running, { digest: `${prefix}:r${i}`, jid: `r${i}`, phase: "run" })
        const locks = yield* Locks.make({ prefix })

        // Paging: every member exactly once.
        const seen: Array<string> = []
        let cursor = "0"
        let pages = 0
        do {
          const page = yield* locks.list({ cursor, count: 50 })
          seen.push(...page.items.map((entry) => entry.name))
          cursor = page.cursor
          pages++
        } while (cursor !== "0")
        assert.strictEqual(new Set(seen).size, 255)
        assert.strictEqual(seen.length, 255)
        assert.isAbove(pages, 1)
        // A page size ZSCAN cannot take is named, not a Redis syntax error; nothing is deleted.
        for (const count of [0, -1, Number.NaN, 1.5, 1e20, "abc" as unknown as number]) {
          const listed = yield* Effect.flip(locks.list({ count }))
          assert.strictEqual(listed._tag, "InvalidLockOptions", String(count))
          assert.include(listed.message, "count: expected a whole number from 1 to 10000")
          const deleted = yield* Effect.flip(locks.deleteByPattern(`${prefix}:*`, { count }))
          assert.strictEqual(deleted._tag, "InvalidLockOptions", String(count))
        }
        assert.isAbove((yield* locks.list({ count: 10_000 })).items.length, 0, "the largest page is taken")

        const shown = yield* locks.show(`${prefix}:q7`)
        assert.strictEqual(shown.queue.holders[0]?.jid, "j7")
        assert.deepInclude(shown.queue.holders[0]?.info as object, { type: "until_executed" })
        assert.isTrue(shown.queue.ttlMs !== undefined && shown.queue.ttlMs > 0)
        assert.deepStrictEqual(shown.run.holders, [])

        // r1's run lock has a live lease and nothing renews it here: revoked, it keeps its place until the lease ends.
        const revoked = yield* locks.unlock(`${prefix}:r1`, "r1")
        assert.deepStrictEqual(revoked.revoked.map((r) => [r.lock, r.jid]), [[`${prefix}:r1:RUN`, "r1"]])
        assert.deepStrictEqual(revoked.removed, [])
        assert.isDefined((yield* locks.show(`${prefix}:r1`)).run.holders[0]?.revokedAt)
        assert.deepStrictEqual((yield* locks.unlock(`${prefix}:r1`, "nobody")).revoked, [])
        const q7 = yield* locks.delete(`${prefix}:q7`)
        assert.deepStrictEqual(q7.deleted, [`${prefix}:q7`])
        assert.deepStrictEqual(q7.removed, [{ lock: `${prefix}:q7`, jid: "j7", live: true }])
        assert.deepStrictEqual((yield* locks.show(`${prefix}:q7`)).queue.holders, [])

        const stats = yield* locks.stats
        assert.strictEqual(stats.indexSize, 254)
        assert.deepStrictEqual(stats.byPhase, { queue: 249, run: 5 })
        assert.deepStrictEqual(stats.byType, { until_executed: 249, unknown: 5 })
        assert.strictEqual(stats.stale, 0)
        assert.isDefined(stats.oldest)

        // Delete by pattern: a dry run lists and keeps; then bounded pages delete until the cursor comes back "0".
        const dry = yield* locks.deleteByPattern(`${prefix}:q1*`, { dryRun: true, count: 1000 })
        assert.strictEqual(dry.deleted, 0)
        assert.isAbove(dry.items.length, 0)
        let deleted = 0
        let next = "0"
        do {
          const page = yield* locks.deleteByPattern(`${prefix}:q1*`, { cursor: next, count: 20 })
          deleted += page.deleted
          next = page.cursor
        } while (next !== "0")
        // q1, q10-q19, q100-q199 = 111 locks.
        assert.strictEqual(deleted, 111)
        assert.strictEqual((yield* locks.stats).indexSize, 254 - 111)
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
      }), { timeout: 60_000 })

    // remove.lua told a logged call from an unlogged one by counting its arguments, and with one lock the counts of the
    // two agree: the call read its actor's name as a second lock (refused, "not in the index") and logged nothing.
    it.effect("a delete by pattern that finds one lock removes it, logs it and refuses nothing", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("one")
        const logged = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockEvents: true })
        yield* Lock.lock(logged, { digest: `${prefix}:a1`, jid: "j1" })
        const locks = yield* Locks.make({ prefix })
        const page = yield* locks.deleteByPattern(`${prefix}:a*`, { count: 1 })
        assert.deepStrictEqual([page.items, page.deleted, page.refused], [[`${prefix}:a1`], 1, []])
        const events = (yield* locks.show(`${prefix}:a1`)).events.map((e) => `${e.event} ${e.jid}`)
        assert.deepStrictEqual(events, ["removed j1", "taken j1"])
      }))

    it.effect("a delete or unlock given the holders it read acts only while they hold it: one that came or went since fails HoldersChanged, changing nothing", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("expect")
        const digest = `${prefix}:d`
        const queued = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockLimit: 3, lockEvents: true })
        const running = LockOptions.unsafeMake({ lock: "while_executing", lockPrefix: prefix, lockLease: 60_000 })
        const locks = yield* Locks.make({ prefix })
        yield* Lock.lock(queued, { digest, jid: "j1" })
        yield* Lock.lock(running, { digest, jid: "r1", phase: "run" })
        const read = yield* locks.show(digest)
        const expect = { queue: read.queue.holders.map((h) => h.jid), run: read.run.holders.map((h) => h.jid) }
        assert.deepStrictEqual(expect, { queue: ["j1"], run: ["r1"] })
        // One came after the read: nothing is removed or revoked, not even what was read.
        yield* Lock.lock(queued, { digest, jid: "j2" })
        const before = yield* locks.show(digest)
        const changed = yield* Effect.flip(locks.delete(digest, { expect, who: "ops" }))
        assert.strictEqual(changed._tag, "HoldersChanged")
        assert.include(changed.message, "nothing was changed")
        const after = yield* locks.show(digest)
        assert.deepStrictEqual(after.queue.holders, before.queue.holders)
        assert.deepStrictEqual(after.run.holders, before.run.holders)
        assert.deepStrictEqual(after.events, before.events)
        // An unlock names only its jid's holds: j1's queue hold as read is still j1's alone, so it goes.
        const unlocked = yield* locks.unlock(digest, "j1", { expect: { queue: ["j1"], run: [] } })
        assert.deepStrictEqual(unlocked.removed.map((r) => r.jid), ["j1"])
        // One that went since the read: an unlock that read j2's queue hold finds none and changes nothing.
        yield* locks.unlock(digest, "j2")
        assert.strictEqual(
          (yield* Effect.flip(locks.unlock(digest, "j2", { expect: { queue: ["j2"], run: [] } })))._tag,
          "HoldersChanged"
        )
        // Read again, the delete acts: exactly the holders read.
        const again = yield* locks.show(digest)
        const done = yield* locks.delete(digest, {
          expect: { queue: again.queue.holders.map((h) => h.jid), run: again.run.holders.map((h) => h.jid) }
        })
        assert.deepStrictEqual(
          [...done.removed.map((r) => r.jid), ...done.revoked.map((r) => r.jid)].sort(),
          [...again.queue.holders, ...again.run.holders].map((h) => h.jid).sort()
        )
      }))

    // Short entries make a small hash a listpack, which Redis' HSCAN answers whole whatever its COUNT: the row keeps
    // its first `holders` all the same.
    it.effect("a list row keeps at most `holders` of its lock's holders and counts them all", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("rows")
        const shared = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockLimit: 30 })
        for (let i = 0; i < 30; i++) yield* Lock.lock(shared, { digest: `${prefix}:shared`, jid: `j${i}` })
        const locks = yield* Locks.make({ prefix })
        const entries = (yield* locks.list()).items
        const [row] = yield* locks.rows(entries)
        assert.strictEqual(row!.lock.size, 30)
        assert.strictEqual(row!.lock.holders.length, 10)
        const [few] = yield* locks.rows(entries, { holders: 4 })
        assert.strictEqual(few!.lock.holders.length, 4)
      }))

    it.effect("showAll walks both locks' holders a page per call: every holder once, the foreign fields named in one list", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("showall")
        const shared = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockLimit: 250, lockInfo: true })
        const running = LockOptions.unsafeMake({ lock: "while_executing", lockPrefix: prefix, lockLimit: 40, lockLease: 60_000 })
        for (let i = 0; i < 250; i++) yield* Lock.lock(shared, { digest: `${prefix}:d`, jid: `q${i}` })
        for (let i = 0; i < 40; i++) yield* Lock.lock(running, { digest: `${prefix}:d`, jid: `r${i}`, phase: "run" })
        const key = RedisTest.keysOf(prefix, `${prefix}:d`).locked
        for (let i = 0; i < 3; i++) yield* Effect.promise(() => raw.hset(key, `gem${i}`, "1750000000.123456"))
        const locks = yield* Locks.make({ prefix })
        const all = yield* Locks.showAll(locks, `${prefix}:d`, { count: 20 })
        assert.strictEqual(all.queue.holders.length, 250)
        assert.strictEqual(all.queue.size, 253)
        assert.strictEqual(all.run.holders.length, 40)
        assert.deepStrictEqual([all.queue.cursor, all.run.cursor], ["0", "0"])
        assert.strictEqual(all.notOurs.length, 1)
        assert.deepStrictEqual(
          [...all.notOurs[0]!.reason.matchAll(/"(gem\d)"/g)].map((m) => m[1]).sort(),
          ["gem0", "gem1", "gem2"]
        )
      }))

    it.effect("delete, unlock and show act only on this library's locks: a user's hash or string is left alone", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("admin-foreign")
        const keyOf = (name: string) => RedisTest.keysOf(prefix, `${prefix}:${name}`)
        const locks = yield* Locks.make({ prefix })
        const queued = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
        yield* Lock.lock(queued, { digest: `${prefix}:ours`, jid: "j1" })
        yield* Effect.promise(async () => {
          await raw.hset(keyOf("user").locked, "name", "bob")
          await raw.set(keyOf("text").locked, "not a lock")
          // In the index, but a string: still not ours.
          await raw.zadd(keyOf("listed").index, 1, `${prefix}:listed`)
          await raw.set(keyOf("listed").locked, "listed")
        })
        for (const name of ["user", "text", "listed"]) {
          const deleting = yield* Effect.flip(locks.delete(`${prefix}:${name}`))
          assert.strictEqual(deleting._tag, "NotALock")
          assert.strictEqual(deleting.name, `${prefix}:${name}`)
          assert.match(deleting.message, /not a lock of this library; nothing was changed$/)
          const unlocking = yield* Effect.flip(locks.unlock(`${prefix}:${name}`, "name"))
          assert.strictEqual(unlocking._tag, "NotALock")
        }
        assert.deepStrictEqual(yield* Effect.promise(() => raw.hgetall(keyOf("user").locked)), { name: "bob" })
        assert.strictEqual(yield* Effect.promise(() => raw.get(keyOf("text").locked)), "not a lock")
        assert.strictEqual(yield* Effect.promise(() => raw.get(keyOf("listed").locked)), "listed")

        // show says what is there instead of listing a foreign field as a holder locked in 1970.
        const user = yield* locks.show(`${prefix}:user`)
        assert.deepStrictEqual(user.notOurs.map((n) => n.lock), [`${prefix}:user`])
        assert.match(user.notOurs[0]!.reason, /not in the index/)
        const text = yield* locks.show(`${prefix}:text`)
        assert.match(text.notOurs[0]!.reason, /is not a hash/)
        const ours = yield* locks.show(`${prefix}:ours`)
        assert.deepStrictEqual(ours.notOurs, [])
        assert.strictEqual(ours.queue.holders[0]?.jid, "j1")
        // A field of another shape in one of ours (the gem's float timestamp) is named, and is no holder.
        yield* Effect.promise(() => raw.hset(keyOf("ours").locked, "gem", "1750000000.123456"))
        const mixed = yield* locks.show(`${prefix}:ours`)
        assert.deepStrictEqual(mixed.queue.holders.map((h) => h.jid), ["j1"])
        assert.deepStrictEqual(mixed.notOurs.map((n) => n.reason), [`field(s) "gem" not in this library's entry shape (not holders)`])

        // stats walks the index: the listed string is counted (the reaper keeps it), not a WRONGTYPE failure.
        const counted = yield* locks.stats
        assert.strictEqual(counted.indexSize, 2)
        assert.strictEqual(counted.stale, 0, "the reaper removes neither ours (held) nor the string (not ours)")

        // A pattern delete walks the index: the listed string is refused and kept, ours goes.
        // One page on one Redis; in cluster mode a page covers one shard: every page, until the cursor is "0" again.
        const pages = []
        let at = "0"
        do {
          const page = yield* locks.deleteByPattern(`${prefix}:*`, { cursor: at, count: 1000 })
          pages.push(page)
          at = page.cursor
        } while (at !== "0")
        if (!RedisTest.clusterMode) assert.strictEqual(pages.length, 1)
        assert.strictEqual(pages.reduce((sum, page) => sum + page.deleted, 0), 1)
        assert.deepStrictEqual(pages.flatMap((page) => page.refused.map((r) => r.lock)), [`${prefix}:listed`])
        assert.strictEqual(yield* Effect.promise(() => raw.get(keyOf("listed").locked)), "listed")
        assert.deepStrictEqual(yield* Effect.promise(() => raw.hgetall(keyOf("user").locked)), { name: "bob" })
      }))
  })

  layer(RedisTest.layer())((it) => {
    it.effect("deleteByPattern beyond one page (issue 47): every call bounded (ZSCAN of at most 200, removals of at most 50 locks), every match gone, the others kept", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("admin-pages")
        const store = yield* Redis.RedisService
        // many0 … many2999: the pattern many1* matches 1,111 of them (many1, many10…, many100…, many1000…1999).
        yield* Harness.seedMany(prefix, 3000)
        // The store as the admin API calls it, each call's size recorded.
        const sizes = { scan: 0, remove: 0 }
        const counted: Redis.Store = {
          ...store,
          scan: (p, cursor, pattern, count) => {
            sizes.scan = Math.max(sizes.scan, count)
            return store.scan(p, cursor, pattern, count)
          },
          remove: (names, options) => {
            sizes.remove = Math.max(sizes.remove, names.length)
            return store.remove(names, options)
          }
        }
        const locks = yield* Effect.provideService(Locks.make({ prefix }), Redis.RedisService, counted)
        let cursor = "0"
        let deleted = 0
        let pages = 0
        do {
          const page = yield* locks.deleteByPattern(`${prefix}:many1*`, { cursor, count: 1000 })
          deleted += page.deleted
          cursor = page.cursor
          pages++
        } while (cursor !== "0")
        assert.strictEqual(deleted, 1111)
        assert.isAbove(pages, 1)
        assert.isAtMost(sizes.scan, 200)
        assert.isAtMost(sizes.remove, 50)
        const left: Array<string> = []
        let at = "0"
        do {
          const page = yield* locks.list({ cursor: at, count: 1000 })
          left.push(...page.items.map((entry) => entry.name))
          at = page.cursor
        } while (at !== "0")
        assert.deepStrictEqual(left.filter((name) => name.startsWith(`${prefix}:many1`)), [])
        assert.strictEqual(new Set(left).size, 3000 - 1111)
      }), { timeout: 120_000 })
  })

  // The memory store reads a page of holders in jid order: the first ten read can all have ended while one after them
  // lives. A lock read in part is never called stale (before, every lock was read whole).
  layer(Redis.layerMemory)((it) => {
    it.effect("rows read each lock's first holders only, count them all, and call a lock read in part never stale", () =>
      Effect.gen(function*() {
        const prefix = "rows"
        const store = yield* Redis.RedisService
        const lock = { prefix, name: `${prefix}:wide` }
        const request = (jid: string, ttlMs: number) =>
          ({ jid, limit: 100, ttlMs, leaseMs: 0, info: `{"type":"until_executed"}`, fenced: false }) as const
        for (let i = 0; i < 40; i++) yield* store.lock(lock, request(`a${String(i).padStart(2, "0")}`, 1000))
        yield* store.lock(lock, request("z-live", 60_000))
        yield* TestClock.adjust(5000)
        const locks = yield* Locks.make({ prefix })
        const [entry] = (yield* locks.list()).items
        const [row] = yield* locks.rows([entry!])
        assert.deepStrictEqual(row!.lock.holders.map((h) => h.jid), Array.from({ length: 10 }, (_, i) => `a0${i}`))
        assert.strictEqual(row!.lock.size, 41)
        assert.strictEqual(row!.type, "until_executed")
        assert.isFalse(row!.stale, "a lock with a live holder past the page read was called stale")
        const [few] = yield* locks.rows([entry!], { holders: 3 })
        assert.strictEqual(few!.lock.holders.length, 3)
        // Once only ended holders are left, a read of them all says stale.
        yield* TestClock.adjust(60_000)
        assert.isTrue((yield* locks.rows([entry!], { holders: 100 }))[0]!.stale)
      }))
  })
})
