/**
 * What the foundation promises, counted in Redis: a job that goes through costs one round trip per lock phase, for
 * every lock type, and a conflict one per phase whatever the strategy (built-in or your own, keeping or dropping the
 * queue lock); and one lease keeper per store renews every held run lock of the process in one script call per chunk
 * per tick, telling only the holder whose entry is gone.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Cluster, Redis as IORedis } from "ioredis"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/testing/TestClock"
import * as Tracer from "effect/Tracer"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import type * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as LockType from "../src/LockType.js"
import * as Middleware from "../src/Middleware.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as Strategy from "../src/Strategy.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as RedisTest from "./support/redis.js"
import { callsSince, counted, customServer, holdRunLocks, scriptCalls } from "./support/foundation.js"

describe("foundation: one round trip per phase, whatever the strategy", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("a custom client strategy: the duplicate's enqueue is one script call", () =>
      Effect.gen(function*() {
        const seen = yield* Ref.make(0)
        const job = UniqueJob.unsafeMake({
          worker: "CustomClientJob",
          lock: "until_executed",
          lockPrefix: RedisTest.uniquePrefix("rt"),
          onConflict: {
            client: (c) => Effect.as(Ref.update(seen, (n) => n + 1), Strategy.rejected(c, "mine"))
          }
        })
        // Checked once per prefix by the store, before its first lock: the phases after it are counted.
        yield* Redis.checkLayout(job.definition.lockPrefix)
        const first = yield* counted(job.enqueue([1]))
        assert.strictEqual(first.value._tag, "Enqueued")
        assert.strictEqual(first.calls, 1)
        const duplicate = yield* counted(job.enqueue([1]))
        assert.strictEqual(duplicate.value._tag, "Rejected")
        assert.strictEqual(duplicate.calls, 1, "the conflict and the strategy cost no call beyond the lock")
        assert.strictEqual(yield* Ref.get(seen), 1)
      }).pipe(Effect.provideServiceEffect(JobQueue, MemoryQueue.make()), Effect.scoped))

    it.effect("a custom server strategy that keeps or drops the queue lock: the duplicate's perform is one call", () =>
      Effect.gen(function*() {
        const queue = yield* MemoryQueue.make()
        const run = (keepsQueueLock: boolean) =>
          Effect.gen(function*() {
            const job = UniqueJob.unsafeMake({
              worker: "CustomServerJob",
              lock: "until_and_while_executing",
              lockLease: 60_000,
              lockPrefix: RedisTest.uniquePrefix("rt"),
              onConflict: {
                server: customServer(keepsQueueLock)
              }
            })
            const holder = yield* job.enqueue([1])
            const started = yield* Deferred.make<void>()
            const finish = yield* Deferred.make<void>()
            const running = yield* Effect.forkChild(
              job.server(holder.job, Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(finish)))
            )
            yield* Deferred.await(started)
            // A second copy, enqueued while the first runs (its queue lock was handed over), meets the run lock.
            const duplicate = yield* job.enqueue([1])
            assert.strictEqual(duplicate._tag, "Enqueued")
            const performed = yield* counted(job.server(duplicate.job, Effect.die("must not run")))
            assert.strictEqual(performed.value._tag, keepsQueueLock ? "Rescheduled" : "Skipped")
            assert.strictEqual(performed.calls, 1, "the handoff script alone: the strategy's choice was known before it")
            const redis = yield* Redis.RedisService
            const queued = yield* redis.holders(Lock.keyOf(job.definition, duplicate.digest, "queue"))
            assert.deepStrictEqual(queued.map((h) => h.jid), keepsQueueLock ? [duplicate.job.jid] : [])
            yield* Deferred.succeed(finish, undefined)
            assert.strictEqual((yield* Fiber.join(running))._tag, "Performed")
          })
        yield* Effect.provideService(run(true), JobQueue, queue)
        yield* Effect.provideService(run(false), JobQueue, queue)
      }).pipe(Effect.scoped))
  })
})

// What the lock type's phases are: a queue lock taken at enqueue, and at perform its release, the handoff to the run
// lock, or the run lock alone; then the run lock's release. Each of them one command, on the way of every job.
const performCalls: Record<LockType.LockType, number> = {
  until_executing: 1,
  until_executed: 1,
  until_expired: 0,
  while_executing: 2,
  while_executing_reject: 2,
  until_and_while_executing: 2
}

describe("foundation: one round trip per phase, every lock type, when the job goes through", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("the enqueue is one command where a queue lock is taken (none where not); the perform one per run-lock phase", () =>
      Effect.gen(function*() {
        const { options, source } = yield* RedisTest.TestRedis
        // The store's own client, its commands counted as they are sent: a round trip is one command.
        const client = yield* Effect.acquireRelease(
          Effect.sync(() => "nodes" in options ? new Cluster([...options.nodes]) : new IORedis(source.url)),
          (c) => Effect.promise(() => c.quit().catch(() => undefined))
        )
        let sent = 0
        const send = client.sendCommand.bind(client) as (...args: Array<unknown>) => unknown
        client.sendCommand = ((...args: Array<unknown>) => {
          sent++
          return send(...args)
        }) as typeof client.sendCommand
        const store = yield* Redis.makeFromClient(client)
        const phase = <A, E>(self: Effect.Effect<A, E, Redis.RedisService | JobQueue>) =>
          self.pipe(Effect.provideService(Redis.RedisService, store), Effect.provideServiceEffect(JobQueue, MemoryQueue.make()))
        // lockEvents on: the activity log is written inside the same script calls, so every count stays the same.
        for (const lockEvents of [false, true]) {
        for (const lockType of Object.keys(performCalls) as Array<LockType.LockType>) {
          const { queue, run } = LockType.phases(lockType)
          const definition = LockOptions.unsafeMake({
            lock: lockType,
            lockEvents,
            lockPrefix: RedisTest.uniquePrefix(`rt-${lockType}`),
            ...(queue ? { lockTtl: "30 seconds" } : {}),
            ...(run ? { lockLease: "1 minute" } : {})
          })
          // The first job loads the scripts; the ones after it are counted.
          for (let i = 0; i < 6; i++) {
            const job: Job.Job = { worker: "RoundTrips", queue: "q", args: [i], jid: `rt-${lockType}-${i}` }
            const before = sent
            const enqueued = yield* phase(Middleware.client(definition, job, Effect.succeed))
            const enqueuedAt = sent
            const performed = yield* phase(Middleware.server(definition, enqueued.job, Effect.void))
            assert.strictEqual(enqueued._tag, "Enqueued", lockType)
            assert.strictEqual(performed._tag, "Performed", lockType)
            if (i === 0) continue
            assert.strictEqual(enqueuedAt - before, queue ? 1 : 0, `${lockType}: the enqueue, lockEvents ${lockEvents}`)
            assert.strictEqual(sent - enqueuedAt, performCalls[lockType], `${lockType}: the perform, lockEvents ${lockEvents}`)
          }
          // The log holds the phases the calls made (on), or there is none (off).
          const logged = yield* Effect.promise(() => client.keys(`${definition.lockPrefix}:*:EVENTS`))
          assert.strictEqual(logged.length > 0, lockEvents, `${lockType}: the activity log`)
        }
        }
      }))
  })
})

describe("foundation: spans", () => {
  layer(Redis.layerMemory)((it) => {
    it.effect("under an installed tracer each middleware phase is one span over its lock steps' own; under the built-in one, none is made", () =>
      Effect.gen(function*() {
        const builtIn = yield* Effect.tracer
        const spans: Array<{ name: string; attributes: Record<string, unknown> }> = []
        const recording = Tracer.make({
          // Effect 4 sets a span's attributes after making it (`span.attribute`), not through the tracer's options.
          span: (options) => {
            const attributes: Record<string, unknown> = {}
            spans.push({ name: options.name, attributes })
            const span = builtIn.span(options)
            const attribute = span.attribute.bind(span)
            span.attribute = (key, value) => {
              attributes[key] = value
              attribute(key, value)
            }
            return span
          },
          ...(builtIn.context === undefined ? {} : { context: builtIn.context })
        })
        const job = UniqueJob.unsafeMake({ worker: "TracedJob", lock: "until_and_while_executing", lockLease: 60_000 })
        const lifecycle = Effect.flatMap(job.enqueue([1]), (enqueued) => job.server(enqueued.job, Effect.succeed(1)))
        const untraced = yield* lifecycle
        assert.strictEqual(untraced._tag, "Performed")
        assert.deepStrictEqual(spans, [])
        const traced = yield* Effect.withTracer(lifecycle, recording)
        assert.strictEqual(traced._tag, "Performed")
        assert.deepStrictEqual(spans.map((span) => span.name), [
          "UniqueJobs.client",
          "UniqueJobs.lock",
          "UniqueJobs.server",
          "UniqueJobs.handoff",
          "UniqueJobs.unlock"
        ])
        assert.strictEqual(spans[2]!.attributes["unique_jobs.lock_type"], "until_and_while_executing")
        assert.strictEqual(spans[2]!.attributes["messaging.message.id"], traced._tag === "Performed" ? traced.job.jid : "")
        assert.strictEqual(spans[3]!.attributes["db.stored_procedure.name"], "handoff")
      }).pipe(Effect.provideServiceEffect(JobQueue, MemoryQueue.make()), Effect.scoped))
  })
})

describe("foundation: one lease keeper per store", () => {
  layer(RedisTest.layer())((it) => {
    for (const lockEvents of [false, true]) {
    it.effect(`1,000 held run locks${lockEvents ? ", lockEvents on" : ""}: one script call per chunk per tick; a deleted entry is lost to its holder only`, () =>
      Effect.gen(function*() {
        const holds = 1000
        // TestClock drives the keeper's ticks; the lease (60 s) outlives the test in Redis' own time.
        const definition = LockOptions.unsafeMake({
          lock: "while_executing",
          lockLease: 60_000,
          lockEvents,
          lockPrefix: RedisTest.uniquePrefix("keeper")
        })
        const every = 20_000
        const gate = yield* Deferred.make<void>()
        const fibers = yield* holdRunLocks(definition, holds, gate)
        // Three ticks: each renews all 1000 leases in two calls of 500.
        for (let round = 0; round < 3; round++) {
          const before = yield* scriptCalls
          yield* TestClock.adjust(every)
          // The calls reach Redis on real time: wait (up to 30 s) for them. Nothing calls again before the next tick.
          const calls = yield* callsSince(before, 2)
          assert.strictEqual(calls, 2, `tick ${round + 1}: 1000 leases, chunks of 500`)
        }
        // Delete one holder's entry: at the next tick only that holder learns it lost its lock.
        const { raw } = yield* RedisTest.TestRedis
        yield* Effect.promise(() => raw.hdel(`${definition.lockPrefix}:d7:RUN:LOCKED`, "j7"))
        yield* TestClock.adjust(every)
        const lost = yield* Fiber.await(fibers[7]!)
        assert.isTrue(Exit.isFailure(lost))
        const error = yield* Effect.flip(Fiber.join(fibers[7]!))
        assert.strictEqual(error._tag, "LockLost")
        const stillRunning = fibers.filter((fiber) => fiber.pollUnsafe() === undefined).length
        assert.strictEqual(stillRunning, holds - 1, "every other holder keeps its lock")
        yield* Deferred.succeed(gate, undefined)
        const exits = yield* Effect.forEach(fibers, Fiber.await)
        assert.strictEqual(exits.filter(Exit.isSuccess).length, holds - 1)
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(definition.lockPrefix), [])
        // The refused renewal logged the loss in the same call (on), and nothing else did.
        const redis = yield* Redis.RedisService
        const log = yield* redis.events({ prefix: definition.lockPrefix, name: `${definition.lockPrefix}:d7:RUN` }, 100)
        assert.deepStrictEqual(
          log.filter((e) => e.event === "lost").map((e) => e.jid),
          lockEvents ? ["j7"] : []
        )
      }), { timeout: 120_000 })
    }
  })
})
