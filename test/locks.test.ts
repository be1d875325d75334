/**
 * The admin API on a real Redis: list by pattern with paging, show, delete, unlock one jid, delete by pattern (dry run,
 * bounded and resumable), stats.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Lock from "../src/Lock.js"
import * as Locks from "../src/Locks.js"
import * as LockOptions from "../src/Options.js"
import * as RedisTest from "./support/redis.js"

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

        const shown = yield* locks.show(`${prefix}:q7`)
        assert.strictEqual(shown.queue.holders[0]?.jid, "j7")
        assert.deepInclude(shown.queue.holders[0]?.info as object, { type: "until_executed" })
        assert.isTrue(shown.queue.ttlMs !== undefined && shown.queue.ttlMs > 0)
        assert.deepStrictEqual(shown.run.holders, [])

        assert.isTrue(yield* locks.unlock(`${prefix}:r1`, "r1"))
        assert.isFalse(yield* locks.unlock(`${prefix}:r1`, "r1"))
        assert.strictEqual(yield* locks.delete(`${prefix}:q7`), 1)
        assert.deepStrictEqual((yield* locks.show(`${prefix}:q7`)).queue.holders, [])

        const stats = yield* locks.stats
        assert.strictEqual(stats.indexSize, 253)
        assert.deepStrictEqual(stats.byPhase, { queue: 249, run: 4 })
        assert.deepStrictEqual(stats.byType, { until_executed: 249, unknown: 4 })
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
        assert.strictEqual((yield* locks.stats).indexSize, 253 - 111)
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
      }), { timeout: 60_000 })
  })
})
