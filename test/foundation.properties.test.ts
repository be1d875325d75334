/**
 * Properties of what the foundation costs, counted in Redis (INFO commandstats): any number of held run locks is
 * renewed in ceil(n / 500) script calls per tick, the chunk boundaries scripted; a duplicate's perform under
 * until_and_while_executing is one script call whatever its server strategy (built-in or custom, keeping or dropping
 * the queue lock), and the queue lock is left as the strategy declared.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=50 npx vitest run test/foundation.properties.test.ts
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as fc from "fast-check"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/testing/TestClock"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as Strategy from "../src/Strategy.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as Model from "./support/model.js"
import * as RedisTest from "./support/redis.js"
import { callsSince, customServer, holdRunLocks, scriptCalls } from "./support/foundation.js"

describe("foundation properties", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("n held run locks are renewed in ceil(n / 500) script calls per tick, for any n", () =>
      Effect.gen(function*() {
        const services = yield* Effect.context<Redis.RedisService | RedisTest.TestRedis>()
        const every = 20_000
        // The documented chunk (not Keeper.chunkSize: a keeper with another chunk would pass against itself).
        const chunk = 500
        const around = [1, chunk - 1, chunk, chunk + 1, 2 * chunk + 1]
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.oneof(fc.constantFrom(...around), fc.integer({ min: 1, max: 1200 })), (holds) =>
              Effect.runPromiseWith(services)(Effect.gen(function*() {
                // TestClock drives the keeper's ticks; the lease (60 s) outlives the case in Redis' own time.
                const definition = LockOptions.unsafeMake({
                  lock: "while_executing",
                  lockLease: 3 * every,
                  lockPrefix: RedisTest.uniquePrefix("chunks")
                })
                const gate = yield* Deferred.make<void>()
                const fibers = yield* holdRunLocks(definition, holds, gate)
                const expected = Math.ceil(holds / chunk)
                for (let tick = 1; tick <= 2; tick++) {
                  const before = yield* scriptCalls
                  yield* TestClock.adjust(every)
                  assert.strictEqual(yield* callsSince(before, expected), expected, `${holds} leases, tick ${tick}`)
                }
                yield* Deferred.succeed(gate, undefined)
                const outcomes = yield* Effect.forEach(fibers, (fiber) => Effect.result(Fiber.join(fiber)))
                assert.strictEqual(outcomes.filter((o) => o._tag === "Success").length, holds)
              }))
            ),
            { numRuns: Model.runs(8), examples: around.map((n) => [n]) }
          )
        )
      }), { timeout: 180_000 })

    it.effect("a duplicate's perform is one script call whatever the strategy; its queue lock goes as declared", () =>
      Effect.gen(function*() {
        const services = yield* Effect.context<Redis.RedisService | RedisTest.TestRedis>()
        const strategies = [
          ...Strategy.serverNames.map((name) => ({ name, keeps: Strategy.keepsQueueLock(name) })),
          { name: "custom keeping", keeps: true },
          { name: "custom dropping", keeps: false }
        ]
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.constantFrom(...strategies), fc.integer({ min: 1, max: 3 }), (strategy, limit) =>
              Effect.runPromiseWith(services)(Effect.gen(function*() {
                const server: Strategy.ServerName | Strategy.ServerStrategy = strategy.name.startsWith("custom")
                  ? customServer(strategy.keeps)
                  : strategy.name as Strategy.ServerName
                const job = UniqueJob.unsafeMake({
                  worker: "StrategyJob",
                  lock: "until_and_while_executing",
                  lockLease: 60_000,
                  lockLimit: limit,
                  lockPrefix: RedisTest.uniquePrefix("handoff"),
                  onConflict: { server }
                })
                // `limit` copies run, so the run lock is full; one more copy, enqueued meanwhile, meets it.
                const finish = yield* Deferred.make<void>()
                const running = yield* Effect.forEach(Array.from({ length: limit }, (_, i) => i), () =>
                  Effect.gen(function*() {
                    const holder = yield* job.enqueue([1])
                    assert.strictEqual(holder._tag, "Enqueued")
                    const started = yield* Deferred.make<void>()
                    const fiber = yield* Effect.forkChild(
                      job.server(holder.job, Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(finish)))
                    )
                    yield* Deferred.await(started)
                    return fiber
                  }))
                const duplicate = yield* job.enqueue([1])
                assert.strictEqual(duplicate._tag, "Enqueued")
                const before = yield* scriptCalls
                const performed = yield* Effect.result(job.server(duplicate.job, Effect.die("must not run")))
                assert.strictEqual((yield* scriptCalls) - before, 1, `${strategy.name}: the handoff script alone`)
                const outcome = performed._tag === "Success" ? performed.success._tag : performed.failure._tag
                assert.notStrictEqual(outcome, "Performed", strategy.name)
                const redis = yield* Redis.RedisService
                const queued = yield* redis.holders(Lock.keyOf(job.definition, duplicate.digest, "queue"))
                assert.deepStrictEqual(queued.map((h) => h.jid), strategy.keeps ? [duplicate.job.jid] : [], strategy.name)
                yield* Deferred.succeed(finish, undefined)
                for (const fiber of running) assert.strictEqual((yield* Fiber.join(fiber))._tag, "Performed")
              }).pipe(Effect.provideServiceEffect(JobQueue, MemoryQueue.make()), Effect.scoped))
            ),
            { numRuns: Model.runs(20), examples: strategies.map((s) => [s, 1]) }
          )
        )
      }), { timeout: 120_000 })
  })
})
