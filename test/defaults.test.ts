/**
 * Global defaults: what a worker leaves out comes from `Defaults` (layer or UNIQUE_JOBS_* config), only where it
 * applies to the lock type; a worker's own options win; `enabled: false` passes every job straight through.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Defaults from "../src/Defaults.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as RedisTest from "./support/redis.js"

const withQueue = <A, E, R>(self: Effect.Effect<A, E, R | JobQueue>) =>
  Effect.scoped(Effect.flatMap(MemoryQueue.make(), (queue) => Effect.provideService(self, JobQueue, queue)))

// Less the prefix's layout record: not a lock's key.
const keysOf = (prefix: string) =>
  Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
    Effect.promise(async () => (await raw.keys(`${prefix}:*`)).filter((key) => key !== `${prefix}:layout`)))

describe("Defaults", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("a worker's omitted options come from the defaults, where they apply; its own win", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("defaults")
        const { raw } = yield* RedisTest.TestRedis
        const defaults = Defaults.layer({ lockPrefix: prefix, lockTtl: "1 hour", lockLease: 5_000, onConflict: "reject" })
        const plain = UniqueJob.unsafeMake({ worker: "PlainJob", lock: "until_executed" })
        const own = UniqueJob.unsafeMake({
          worker: "OwnJob",
          lock: "until_executed",
          lockTtl: 2_000,
          onConflict: "log",
          lockPrefix: `${prefix}-own`
        })
        const running = UniqueJob.unsafeMake({ worker: "RunJob", lock: "while_executing" })
        yield* withQueue(Effect.gen(function*() {
          const a = yield* plain.enqueue([1])
          assert.strictEqual(a._tag, "Enqueued")
          assert.isTrue(a.digest.startsWith(`${prefix}:`), a.digest)
          const ttl = yield* Effect.promise(() => raw.pttl(`${a.digest}:LOCKED`))
          assert.isTrue(ttl > 3_500_000 && ttl <= 3_600_000, `the default lockTtl applies: ${ttl}`)
          // The default strategy (reject) applies to the worker that set none.
          assert.strictEqual((yield* plain.enqueue([1]))._tag, "Rejected")

          const b = yield* own.enqueue([1])
          assert.isTrue(b.digest.startsWith(`${prefix}-own:`), b.digest)
          const ownTtl = yield* Effect.promise(() => raw.pttl(`${b.digest}:LOCKED`))
          assert.isTrue(ownTtl > 0 && ownTtl <= 2_000, `its own lockTtl wins: ${ownTtl}`)
          assert.strictEqual((yield* own.enqueue([1]))._tag, "Skipped", "its own strategy wins")

          // A type that locks only around perform takes no lockTtl from the defaults; it does take the lease.
          const performed = yield* running.server(
            running.job([1]),
            Effect.flatMap(running.digest([1]), (digest) =>
              Effect.flatMap(Redis.RedisService, (redis) => redis.holders(Lock.keyOf(running.definition, digest, "run"))))
          )
          assert.strictEqual(performed._tag, "Performed")
          const [holder] = performed._tag === "Performed" ? performed.value : []
          assert.isDefined(holder)
          assert.isUndefined(holder!.expiresAt)
          assert.strictEqual(holder!.leaseUntil! - holder!.lockedAt, 5_000)
        })).pipe(Effect.provide(defaults))
        // Without the layer: the built-in defaults.
        const plainDigest = yield* plain.digest([1])
        assert.isTrue(plainDigest.startsWith("uniquejobs:"), plainDigest)
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
      }))

    it.effect("enabled: false passes every job straight through: no lock, no Redis call", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("disabled")
        const job = UniqueJob.unsafeMake({ worker: "OffJob", lock: "until_and_while_executing", lockPrefix: prefix })
        yield* withQueue(Effect.gen(function*() {
          const first = yield* job.enqueue([1])
          const second = yield* job.enqueue([1])
          assert.deepStrictEqual([first._tag, second._tag], ["Enqueued", "Enqueued"])
          const outcome = yield* job.server(second.job, Effect.succeed("ran"))
          assert.strictEqual(outcome._tag === "Performed" && outcome.value, "ran")
          assert.isFalse(yield* job.died(first.job))
        })).pipe(Effect.provide(Defaults.layer({ enabled: false })))
        assert.deepStrictEqual(yield* keysOf(prefix), [])
      }))
  })

  it.effect("invalid defaults fail their layer with InvalidLockOptions naming each field", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Layer.build(Defaults.layer({ lockLease: 50, lockPrefix: "bad prefix", onConflict: "later" as never }))
      )
      assert.strictEqual(error._tag, "InvalidLockOptions")
      assert.deepStrictEqual(error.issues.map((issue) => issue.field).sort(), ["lockLease", "lockPrefix", "onConflict"])
      assert.isTrue(Result.isSuccess(Defaults.make({})))
    }).pipe(Effect.scoped))

  it.effect("layerConfig reads UNIQUE_JOBS_*; a bad value names its variable", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        Effect.flatMap(Defaults.Defaults, (settings) => Effect.succeed(settings)).pipe(
          Effect.provide(Defaults.layerConfig().pipe(Layer.provide(ConfigProvider.layer(
            ConfigProvider.fromEnvRecord(env)
          ))))
        )
      const settings = yield* read({
        UNIQUE_JOBS_LOCK_PREFIX: "billing",
        UNIQUE_JOBS_LOCK_TTL: "1 hour",
        UNIQUE_JOBS_LOCK_LEASE: "10000",
        UNIQUE_JOBS_ON_CONFLICT: "reschedule",
        UNIQUE_JOBS_ENABLED: "false",
        UNIQUE_JOBS_DIGEST_ALGORITHM: "modern"
      })
      assert.strictEqual(settings.lockPrefix, "billing")
      assert.strictEqual(settings.enabled, false)
      assert.strictEqual(settings.digestAlgorithm, "modern")
      assert.deepStrictEqual(settings.onConflict, { client: "log", server: "reschedule" })
      assert.strictEqual(settings.lockTtl._tag === "Some" && Duration.toMillis(settings.lockTtl.value), 3_600_000)
      assert.strictEqual(Duration.toMillis(settings.lockLease), 10_000)
      const unset = yield* read({})
      assert.deepStrictEqual(unset, Defaults.builtIn)
      const error = yield* Effect.flip(read({ UNIQUE_JOBS_LOCK_LEASE: "50" }))
      assert.include(String(error), "UNIQUE_JOBS_LOCK_LEASE")
    }))

  it.effect("one bad UNIQUE_JOBS_* value is one error, named once, saying what was written; two are two", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        Effect.flip(Effect.provide(
          Defaults.Defaults,
          Defaults.layerConfig().pipe(
            Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnvRecord(env)))
          )
        ))
      const one = String(yield* read({ UNIQUE_JOBS_LOCK_LEASE: "50" }))
      assert.notInclude(one, "undefined")
      assert.strictEqual(one.split("UNIQUE_JOBS_LOCK_LEASE").length - 1, 1, one)
      assert.include(one, "got 50 ms")
      // A negative or fractional number of milliseconds is named as written, not as "not a duration".
      assert.include(String(yield* read({ UNIQUE_JOBS_LOCK_TTL: "-5" })), "got -5 ms")
      assert.include(String(yield* read({ UNIQUE_JOBS_LOCK_TTL: "1.5" })), "use 2")
      const two = String(yield* read({ UNIQUE_JOBS_LOCK_LEASE: "50", UNIQUE_JOBS_LOCK_PREFIX: "a b" }))
      assert.include(two, "UNIQUE_JOBS_LOCK_LEASE")
      assert.include(two, "UNIQUE_JOBS_LOCK_PREFIX")
      assert.notInclude(two, "undefined")
    }))

  it("defaults that are not an object are refused, naming `defaults`", () => {
    for (const input of [5, null, [1], "1 hour"]) {
      const result = Defaults.make(input as never)
      assert.isTrue(Result.isFailure(result), String(input))
      if (Result.isFailure(result)) {
        assert.strictEqual(result.failure.field, "defaults")
        assert.include(result.failure.reason, "expected an object of defaults")
      }
    }
  })
})
