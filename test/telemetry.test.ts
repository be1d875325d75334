/**
 * Telemetry on a real Redis: the counters move as locks are taken, refused, released, reaped and lost (read with
 * `Metric.value`), and a recording tracer sees a client span per lock step and admin call, with the database
 * attributes, the digest and lock type, and a link from a refused duplicate to the span of the hold that refused it.
 * Without a tracer that records, no span is made at all.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Lock from "../src/Lock.js"
import * as Locks from "../src/Locks.js"
import * as Metrics from "../src/Metrics.js"
import * as LockOptions from "../src/Options.js"
import * as Reaper from "../src/Reaper.js"
import * as RedisTest from "./support/redis.js"
import { recording } from "./support/tracing.js"


const count = (metric: Metric.Counter<number>) => Effect.map(Metric.value(metric), (state) => state.count)

describe("telemetry", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("the counters move as locks are taken, refused, released, reaped and lost", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("metrics")
        const queued = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
        const acquired = Metrics.acquired.of("until_executed", "queue")
        const conflicts = Metrics.conflicts.of("until_executed", "queue")
        const released = Metrics.released.of("until_executed", "queue")
        const before = [yield* count(acquired), yield* count(conflicts), yield* count(released)]
        yield* Lock.lock(queued, { digest: `${prefix}:a`, jid: "a" })
        yield* Lock.lock(queued, { digest: `${prefix}:b`, jid: "b" })
        yield* Effect.flip(Lock.lock(queued, { digest: `${prefix}:a`, jid: "other" }))
        yield* Lock.unlock(queued, { digest: `${prefix}:a`, jid: "a" })
        assert.deepStrictEqual(
          [(yield* count(acquired)) - before[0]!, (yield* count(conflicts)) - before[1]!, (yield* count(released)) - before[2]!],
          [2, 1, 1]
        )

        const expiring = LockOptions.unsafeMake({ lock: "until_expired", lockPrefix: prefix, lockTtl: 30 })
        for (let i = 0; i < 3; i++) yield* Lock.lock(expiring, { digest: `${prefix}:e${i}`, jid: `e${i}` })
        yield* Effect.sleep(80)
        const reaped = yield* count(Metrics.reaped.member)
        assert.strictEqual((yield* Reaper.runOnce({ prefix })).members, 3)
        assert.strictEqual((yield* count(Metrics.reaped.member)) - reaped, 3)

        // A run lock whose entry an operator deleted raw: the lease keeper's next renewal finds it gone.
        const running = LockOptions.unsafeMake({ lock: "while_executing", lockPrefix: prefix, lockLease: 300 })
        const lost = Metrics.lost.of("while_executing", "run")
        const lostBefore = yield* count(lost)
        yield* Effect.scoped(Effect.gen(function*() {
          yield* Lock.acquire(running, { digest: `${prefix}:r`, jid: "r", phase: "run" })
          const { raw } = yield* RedisTest.TestRedis
          yield* Effect.promise(() => raw.del(`${prefix}:r:RUN:LOCKED`))
          for (let i = 0; i < 200 && (yield* count(lost)) === lostBefore; i++) yield* Effect.sleep(25)
        }))
        assert.strictEqual((yield* count(lost)) - lostBefore, 1)
      }))

    it.effect("a recording tracer sees each lock step's client span with its attributes, and a duplicate's link", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("spans")
        const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockInfo: true })
        const { spans, tracer } = recording()
        const traced = <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.withTracer(self, tracer)
        const digest = `${prefix}:d`
        yield* traced(Lock.lock(definition, { digest, jid: "holder", info: { worker: "W", queue: "q", args: [] } }))
        const conflict = yield* Effect.flip(traced(Lock.lock(definition, { digest, jid: "duplicate" })))
        assert.strictEqual(conflict._tag, "LockConflict")
        yield* traced(Lock.unlock(definition, { digest, jid: "holder" }))
        const [held, refused, unlocked] = spans
        assert.deepStrictEqual(spans.map((s) => s.name), ["UniqueJobs.lock", "UniqueJobs.lock", "UniqueJobs.unlock"])
        for (const span of spans) {
          assert.strictEqual(span.kind, "client")
          assert.strictEqual(span.attributes.get("db.system.name"), "redis")
          assert.strictEqual(span.attributes.get("db.operation.name"), "EVALSHA")
          assert.strictEqual(span.attributes.get("unique_jobs.digest"), digest)
          assert.strictEqual(span.attributes.get("unique_jobs.lock_type"), "until_executed")
          assert.strictEqual(span.attributes.get("unique_jobs.phase"), "queue")
        }
        assert.strictEqual(held!.attributes.get("db.stored_procedure.name"), "lock")
        assert.strictEqual(unlocked!.attributes.get("db.stored_procedure.name"), "unlock")
        assert.strictEqual(refused!.attributes.get("unique_jobs.jid"), "duplicate")
        assert.strictEqual(refused!.attributes.get("unique_jobs.holders"), "holder")
        assert.strictEqual(refused!.links.length, 1)
        const link = refused!.links[0]!
        assert.strictEqual(link.span.spanId, held!.spanId)
        assert.strictEqual(link.span.traceId, held!.traceId)
        assert.strictEqual(link.attributes["unique_jobs.holder.jid"], "holder")
        assert.deepStrictEqual(held!.links, [])

        // Admin calls and a reaper pass each get theirs.
        const locks = yield* Locks.make({ prefix })
        yield* traced(locks.show(digest))
        yield* traced(locks.delete(digest))
        yield* traced(Reaper.runOnce({ prefix }))
        assert.deepStrictEqual(spans.slice(3).map((s) => s.name), ["UniqueJobs.admin.show", "UniqueJobs.admin.delete", "UniqueJobs.reaper.pass"])
        assert.strictEqual(spans[4]!.attributes.get("unique_jobs.digest"), digest)
        assert.strictEqual(spans[4]!.attributes.get("db.stored_procedure.name"), "remove")

        // Without a tracer that records, nothing is made: the recording tracer is not asked again.
        const made = spans.length
        yield* Lock.lock(definition, { digest: `${prefix}:quiet`, jid: "q" })
        yield* locks.show(`${prefix}:quiet`)
        assert.strictEqual(spans.length, made)
      }))
  })
})
