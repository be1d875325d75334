/**
 * History on a real Redis: what the process counted goes to the current minute's bucket at a flush (deltas only, a
 * failed flush's counts kept for the next), the layer flushes on its interval and when it closes, every key it writes
 * has a TTL, and the reaper's passes are kept newest first.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as History from "../src/History.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Reaper from "../src/Reaper.js"
import * as RedisTest from "./support/redis.js"

const sum = (buckets: ReadonlyArray<History.Bucket>, type: string, event: History.Event) =>
  buckets.reduce((n, bucket) => n + (bucket.counts[type]?.[event] ?? 0), 0)

describe("History", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("a flush adds what was counted since the last one; a second flush adds nothing", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("history")
        const definition = LockOptions.unsafeMake({ lock: "until_expired", lockPrefix: prefix, lockTtl: 60_000 })
        // Counts of other tests in this process go to the first flush: start from here.
        yield* History.flush(prefix)
        const before = yield* History.buckets(prefix)
        for (let i = 0; i < 7; i++) yield* Lock.lock(definition, { digest: `${prefix}:d${i}`, jid: `j${i}` })
        for (let i = 0; i < 3; i++) yield* Effect.result(Lock.lock(definition, { digest: `${prefix}:d${i}`, jid: `k${i}` }))
        yield* History.flush(prefix)
        const after = yield* History.buckets(prefix)
        assert.strictEqual(after.length, 60)
        assert.strictEqual(sum(after, "until_expired", "acquired") - sum(before, "until_expired", "acquired"), 7)
        assert.strictEqual(sum(after, "until_expired", "conflicts") - sum(before, "until_expired", "conflicts"), 3)
        yield* History.flush(prefix)
        assert.deepStrictEqual(yield* History.buckets(prefix), after)
        const { raw } = yield* RedisTest.TestRedis
        const keys = yield* Effect.promise(() => raw.keys(`${prefix}:metrics:*`))
        assert.isAbove(keys.length, 0)
        for (const key of keys) {
          const ttl = yield* Effect.promise(() => raw.pttl(key))
          assert.isAbove(ttl, 60 * 60_000, key)
          assert.isAtMost(ttl, 62 * 60_000, key)
        }
        assert.deepStrictEqual((yield* History.buckets(prefix, 5)).map((b) => b.start), after.slice(-5).map((b) => b.start))
      }))

    it.effect("the layer flushes on its interval and once more when it closes; a bad interval is named", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("history-layer")
        const definition = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix })
        yield* History.flush(prefix)
        const base = sum(yield* History.buckets(prefix), "until_executing", "acquired")
        yield* Effect.scoped(Effect.gen(function*() {
          yield* Layer.buildWithScope(History.layer({ prefix, interval: 100 }), yield* Effect.scope)
          yield* Lock.lock(definition, { digest: `${prefix}:a`, jid: "a" })
          // A fixed amount of work, then waits for the flush it made: no timing asserted.
          for (;;) {
            if (sum(yield* History.buckets(prefix), "until_executing", "acquired") === base + 1) break
            yield* Effect.sleep(50)
          }
          yield* Lock.lock(definition, { digest: `${prefix}:b`, jid: "b" })
        }))
        // Closing flushed the second one, whatever the interval's timing.
        assert.strictEqual(sum(yield* History.buckets(prefix), "until_executing", "acquired"), base + 2)
        for (const interval of [0, -1, Number.NaN, 1.5, "2 hours", 99] as const) {
          const error = yield* Effect.flip(Layer.build(History.layer({ prefix, interval })).pipe(Effect.scoped))
          assert.strictEqual(error._tag, "InvalidLockOptions", String(interval))
          assert.include(error.message, "interval", String(interval))
        }
        const unknownOption = yield* Effect.flip(
          Layer.build(History.layer({ prefix, every: 10 } as History.Options)).pipe(Effect.scoped)
        )
        assert.include(unknownOption.message, "every")
      }))

    it.effect("a flush adds the hold times released since the last one to the bucket's histogram; a bucket without them reads empty", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("history-hold")
        const definition = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix })
        yield* History.flush(prefix)
        const held = (buckets: ReadonlyArray<History.Bucket>) =>
          buckets.reduce((n, b) => n + Object.values(b.hold).reduce((m, k) => m + k, 0), 0)
        const before = held(yield* History.buckets(prefix))
        yield* Effect.scoped(Effect.gen(function*() {
          for (let i = 0; i < 5; i++) yield* Lock.acquire(definition, { digest: `${prefix}:h${i}`, jid: `h${i}` })
        }))
        yield* History.flush(prefix)
        const after = yield* History.buckets(prefix)
        assert.strictEqual(held(after) - before, 5)
        for (const bucket of after) {
          for (const bound of Object.keys(bucket.hold)) assert.include(History.holdBounds, bound)
        }
        // A second flush adds nothing; the counts keep their meaning beside the histogram.
        yield* History.flush(prefix)
        assert.strictEqual(held(yield* History.buckets(prefix)), held(after))
        // A bucket written before hold times were kept (or with a bound this version does not know) reads as before.
        const { raw } = yield* RedisTest.TestRedis
        const old = Math.floor(Date.now() / 60_000) * 60_000 - 5 * 60_000
        yield* Effect.promise(() =>
          raw.hset(`${prefix}:metrics:${old}`, "until_executed|acquired", "4", "~hold|3", "9", "~hold|nope", "1")
        )
        const read = (yield* History.buckets(prefix)).find((b) => b.start === old)!
        assert.deepStrictEqual(read.counts, { until_executed: { acquired: 4 } })
        assert.deepStrictEqual(read.hold, {})
      }))

    it.effect("the reaper keeps each pass, a dry run too, newest first, with a TTL", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("history-reaper")
        const definition = LockOptions.unsafeMake({ lock: "until_expired", lockPrefix: prefix, lockTtl: 50 })
        for (let i = 0; i < 4; i++) yield* Lock.lock(definition, { digest: `${prefix}:d${i}`, jid: `j${i}` })
        yield* Effect.sleep(100)
        assert.deepStrictEqual(yield* History.passes(prefix), [])
        const dry = yield* Reaper.runOnce({ prefix, dryRun: true })
        const real = yield* Reaper.runOnce({ prefix })
        const passes = yield* History.passes(prefix)
        assert.deepStrictEqual(
          passes.map((p) => [p.dryRun, p.steps, p.scanned, p.members]),
          [[false, real.steps, real.scanned, real.members], [true, dry.steps, dry.scanned, dry.members]]
        )
        assert.strictEqual(real.members, 4)
        assert.isUndefined(passes[0]?.error)
        const { raw } = yield* RedisTest.TestRedis
        assert.isAbove(yield* Effect.promise(() => raw.pttl(`${prefix}:reaper:passes`)), 6 * 86_400_000)
        // An entry in another shape (someone's own LPUSH) is left out, not a failure.
        yield* Effect.promise(() => raw.lpush(`${prefix}:reaper:passes`, "not json", "{\"at\":1}"))
        assert.strictEqual((yield* History.passes(prefix)).length, 2)
        assert.strictEqual((yield* History.passes(prefix, 1)).length, 0)
      }))
  })
})
