/**
 * Issue 8's defects, each reproduced: scripts that do all of their writes or none, arguments refused the same way by
 * both stores, foreign holder entries, run locks held per acquisition (a redelivered jid is a conflict and no copy's
 * release frees another's), a release that finds its run lock gone is `LockLost`, fencing tokens, a lost unlock
 * retried, and lock info that cannot crash an enqueue. Store-level cases run on both stores.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/testing/TestClock"
import { Redis as IORedis } from "ioredis"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as LockType from "../src/LockType.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as RedisTest from "./support/redis.js"
import { cutOff as cutOffStore, stores } from "./support/stores.js"

const setup = (options: LockOptions.Options) =>
  Effect.map(LockOptions.make({ ...options, lockPrefix: RedisTest.uniquePrefix("rel") }), (definition) => ({
    definition,
    digest: `${definition.lockPrefix}:0123456789abcdef`
  }))

const request = (jid: string, overrides: Partial<Redis.HolderRequest> = {}): Redis.HolderRequest => ({
  jid,
  limit: 1,
  ttlMs: 0,
  leaseMs: 0,
  info: "",
  fenced: false,
  ...overrides
})

const jidsOf = (definition: LockOptions.Definition, digest: string, phase: LockType.Phase) =>
  Effect.flatMap(Redis.RedisService, (redis) =>
    Effect.map(redis.holders(Lock.keyOf(definition, digest, phase)), (hs) => hs.map((h) => h.jid).sort()))

for (const store of stores) {
  describe(`reliability: ${store.name}`, () => {
    layer(store.layer, { excludeTestServices: store.live })((it) => {
      it.effect("a duration Redis cannot take is refused before anything is written, by both stores alike", () =>
        Effect.gen(function*() {
          const redis = yield* Redis.RedisService
          const key: Redis.LockKey = { prefix: RedisTest.uniquePrefix("rel"), name: "p:abc" }
          const bad: ReadonlyArray<Partial<Redis.HolderRequest>> = [
            { ttlMs: 1000.5 },
            { ttlMs: 1e17 },
            { ttlMs: -1 },
            { leaseMs: 1000.5, fenced: true },
            { leaseMs: Number.NaN },
            { limit: 0 },
            { limit: 1.5 }
          ]
          for (const overrides of bad) {
            const error = yield* Effect.flip(redis.lock(key, request("a", overrides)))
            assert.strictEqual(error._tag, "RedisError")
            assert.match(error.reason, /must be a whole number from \d to 2\^50/, JSON.stringify(overrides))
            assert.deepStrictEqual(yield* redis.holders(key), [], JSON.stringify(overrides))
          }
          const renewError = yield* Effect.flip(redis.renew(key, "a", 0.5))
          assert.match(renewError.reason, /lease must be a whole number/)
          // The same lock with whole values works.
          assert.strictEqual((yield* redis.lock(key, request("a", { ttlMs: 1000 })))._tag, "Acquired")
        }))

      it.effect("a redelivered jid is a conflict while its first copy's run lock is live", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "while_executing", lockLimit: 2 })
          const first = yield* Lock.lock(definition, { digest, jid: "a" })
          const copy = yield* Effect.flip(Lock.lock(definition, { digest, jid: "a" }))
          assert.strictEqual(copy._tag, "LockConflict")
          // Even with a free place (lockLimit 2): the same job must not run twice at once.
          assert.deepStrictEqual(copy._tag === "LockConflict" ? copy.holders : [], ["a"])
          assert.isAbove(first.fence, 0)
          // The queue phase stays re-entrant: a retry of the same jid re-enters its own lock.
          const queued = yield* setup({ lock: "until_executed" })
          yield* Lock.lock(queued.definition, { digest: queued.digest, jid: "q" })
          assert.isTrue((yield* Lock.lock(queued.definition, { digest: queued.digest, jid: "q" })).reentrant)
        }))

      it.effect("no copy's release frees another copy's hold; a stale copy's release and renewal say it lost", () =>
        Effect.gen(function*() {
          // Leases of a second, so a busy machine's stall between the steps below cannot end the fresh copy's too.
          const { definition, digest } = yield* setup({ lock: "while_executing", lockLease: 1_000 })
          const stale = yield* Lock.lock(definition, { digest, jid: "a" })
          yield* store.advance(1_100) // the first copy stalled past its lease
          const fresh = yield* Lock.lock(definition, { digest, jid: "a" })
          assert.isAbove(fresh.fence, stale.fence)
          // The stale copy's release and renewal find another acquisition's hold: not released, not renewed.
          assert.isFalse(yield* Lock.unlock(definition, { digest, jid: "a", phase: "run", fence: stale.fence }))
          const lost = yield* Effect.flip(Lock.renew(definition, { digest, jid: "a", fence: stale.fence }))
          assert.strictEqual(lost._tag, "LockLost")
          assert.deepStrictEqual(yield* jidsOf(definition, digest, "run"), ["a"])
          yield* Lock.renew(definition, { digest, jid: "a", fence: fresh.fence })
          assert.isTrue(yield* Lock.unlock(definition, { digest, jid: "a", phase: "run", fence: fresh.fence }))
          assert.deepStrictEqual(yield* jidsOf(definition, digest, "run"), [])
        }))

      it.effect("a lapsed lease is not renewed back to life, and its release is not a live release", () =>
        Effect.gen(function*() {
          // lockLimit 2 with a longer-lived holder keeps the key (and the lapsed entry) in place.
          const { definition, digest } = yield* setup({ lock: "while_executing", lockLease: 1_000, lockLimit: 2 })
          const a = yield* Lock.lock(definition, { digest, jid: "a" })
          yield* store.advance(500)
          const b = yield* Lock.lock(definition, { digest, jid: "b" })
          yield* store.advance(600) // a's lease passed, b's has not (for 400 ms more at least)
          const lost = yield* Effect.flip(Lock.renew(definition, { digest, jid: "a", fence: a.fence }))
          assert.strictEqual(lost._tag, "LockLost")
          assert.isFalse(yield* Lock.unlock(definition, { digest, jid: "a", phase: "run", fence: a.fence }))
          assert.isTrue(yield* Lock.unlock(definition, { digest, jid: "b", phase: "run", fence: b.fence }))
        }))

      it.effect("fencing tokens strictly increase per digest across acquisitions and lock lifetimes", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "while_executing", lockLease: 200 })
          const other = `${definition.lockPrefix}:fedcba9876543210`
          const tokens: Array<number> = []
          for (let i = 0; i < 20; i++) {
            const held = yield* Lock.lock(definition, { digest, jid: `j${i}` })
            tokens.push(held.fence)
            // Other digests share the counter; it never costs memory per digest.
            yield* Lock.lock(definition, { digest: other, jid: `o${i}` })
            if (i % 3 === 0) yield* store.advance(250) // the lock expires
            else yield* Lock.unlock(definition, { digest, jid: `j${i}`, phase: "run", fence: held.fence })
            yield* Lock.unlock(definition, { digest: other, jid: `o${i}`, phase: "run" })
          }
          for (let i = 1; i < tokens.length; i++) assert.isAbove(tokens[i]!, tokens[i - 1]!)
          // The handoff hands out tokens from the same counter.
          const uwe = { ...definition, lock: "until_and_while_executing" as const }
          yield* Lock.lock(uwe, { digest, jid: "h" })
          const handed = yield* Lock.handoff(uwe, { digest, jid: "h" }, { keepQueueLock: true })
          assert.isAbove(handed.fence, tokens[tokens.length - 1]!)
        }))

      it.effect("withLock: a run lock found gone at release fails LockLost, never a success", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "while_executing", lockLease: 2_000 })
          const inside = yield* Deferred.make<number | undefined>()
          const proceed = yield* Deferred.make<void>()
          const fiber = yield* Effect.forkChild(
            Lock.withLock(definition, { digest, jid: "a" })((running) =>
              Effect.andThen(Deferred.succeed(inside, running.fence), Effect.as(Deferred.await(proceed), "done"))
            )
          )
          const fence = yield* Deferred.await(inside)
          assert.isAbove(fence ?? 0, 0)
          // Taken away and taken by a copy between two renewals: the holder's own release is the first to see it.
          yield* Effect.flatMap(Redis.RedisService, (redis) => redis.unlock(Lock.keyOf(definition, digest, "run"), "a"))
          yield* Lock.lock(definition, { digest, jid: "a" })
          yield* Deferred.succeed(proceed, undefined)
          const error = yield* Effect.flip(Fiber.join(fiber))
          assert.strictEqual(error._tag, "LockLost")
          // The other copy's hold is untouched.
          assert.deepStrictEqual(yield* jidsOf(definition, digest, "run"), ["a"])
        }))
    })
  })
}

describe("reliability: redis only", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("a wrong-typed key fails the script before any write, and the digest locks once the key is fixed", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { definition, digest } = yield* setup({ lock: "until_and_while_executing" })
        const prefix = definition.lockPrefix
        const snapshot = () =>
          Effect.promise(async () => {
            const keys = (await raw.keys(`${prefix}:*`)).filter((k) => k !== `${prefix}:layout`).sort()
            return Promise.all(keys.map(async (k) => [k, await raw.type(k), await raw.pttl(k)] as const))
          })
        for (const [wrong, step] of [
          [`${prefix}:digests`, Lock.lock(definition, { digest, jid: "a" })],
          [`${prefix}:fence`, Lock.lock(definition, { digest, jid: "a", phase: "run" })],
          [`${digest}:LOCKED`, Lock.handoff(definition, { digest, jid: "a" }, { keepQueueLock: true })],
          [`${prefix}:digests`, Lock.handoff(definition, { digest, jid: "a" }, { keepQueueLock: false })],
          [`${digest}:RUN:LOCKED`, Lock.handoff(definition, { digest, jid: "a" }, { keepQueueLock: true })]
        ] as const) {
          // A list is the wrong type for every key the scripts use (a string would be a valid fencing counter).
          yield* Effect.promise(() => raw.rpush(wrong, "x"))
          const before = yield* snapshot()
          const error = yield* Effect.flip(step)
          assert.strictEqual(error._tag, "RedisError", wrong)
          assert.match(error.message, /WRONGTYPE/, wrong)
          assert.deepStrictEqual(yield* snapshot(), before, `${wrong}: nothing written`)
          yield* Effect.promise(() => raw.del(wrong))
        }
        // Fixed: the digest locks, and nothing is left without a TTL but the documented keys.
        yield* Lock.lock(definition, { digest, jid: "a" })
        const handed = yield* Lock.handoff(definition, { digest, jid: "a" }, { keepQueueLock: true })
        assert.isTrue(handed.queueLockHeld)
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
      }))

    it.effect("foreign holder entries (the gem's float timestamps) count as gone: evicted, and replaced for their jid", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { definition, digest } = yield* setup({ lock: "while_executing" })
        const locked = `${digest}:RUN:LOCKED`
        yield* Effect.promise(() => raw.hset(locked, "gem-jid", "1732970000.123456"))
        const [holder] = yield* Effect.flatMap(Redis.RedisService, (redis) =>
          redis.holders(Lock.keyOf(definition, digest, "run")))
        assert.strictEqual(holder!.foreign, "1732970000.123456")
        // Another jid takes the place the foreign entry held.
        const taken = yield* Lock.lock(definition, { digest, jid: "ours" })
        assert.deepStrictEqual(yield* jidsOf(definition, digest, "run"), ["ours"])
        yield* Lock.unlock(definition, { digest, jid: "ours", phase: "run", fence: taken.fence })
        // The same jid over a foreign entry: no Lua error, the entry is replaced, and renewal and release work.
        yield* Effect.promise(() => raw.hset(locked, "same", "not json at all"))
        const same = yield* Lock.lock(definition, { digest, jid: "same" })
        yield* Lock.renew(definition, { digest, jid: "same", fence: same.fence })
        assert.isTrue(yield* Lock.unlock(definition, { digest, jid: "same", phase: "run", fence: same.fence }))
        // A foreign entry for a queue lock's jid: replaced, not re-entered.
        const queued = yield* setup({ lock: "until_executed" })
        yield* Effect.promise(() => raw.hset(`${queued.digest}:LOCKED`, "q", "1732970000.5"))
        assert.isFalse((yield* Lock.lock(queued.definition, { digest: queued.digest, jid: "q" })).reentrant)
        // Renewing a foreign entry is a loss, not a Lua error.
        yield* Effect.promise(() => raw.hset(locked, "f", "{}"))
        assert.strictEqual((yield* Effect.flip(Lock.renew(definition, { digest, jid: "f" })))._tag, "LockLost")
      }))

    it.effect("lockInfo with a BigInt or a cycle outside lockArgs: enqueued, the info written as text", () =>
      Effect.gen(function*() {
        const cyclic: Record<string, unknown> = { name: "c" }
        cyclic.self = cyclic
        const job = yield* UniqueJob.make({
          worker: "InfoJob",
          lock: "until_executed",
          lockInfo: true,
          lockArgs: (args) => [args[0]],
          lockPrefix: RedisTest.uniquePrefix("rel")
        })
        const outcome = yield* Effect.scoped(
          Effect.provide(job.enqueue([1, 2n ** 70n, cyclic]), MemoryQueue.layer())
        )
        assert.strictEqual(outcome._tag, "Enqueued")
        const [holder] = yield* Effect.flatMap(Redis.RedisService, (redis) =>
          redis.holders(Lock.keyOf(job.definition, outcome.digest, "queue")))
        assert.deepStrictEqual((holder!.info as { args: unknown }).args, [
          1,
          `${2n ** 70n}n`,
          { name: "c", self: "[Circular]" }
        ])
      }))

    it.effect("a holder whose event loop stalls past its lease ends LockLost, never Performed", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("rel")
        const stall = (ms: number) =>
          Effect.sync(() => {
            const until = Date.now() + ms
            while (Date.now() < until) {
              // a blocked event loop: no renewal can run
            }
            return "done"
          })
        for (const lock of ["while_executing", "until_and_while_executing"] as const) {
          const job = yield* UniqueJob.make({ worker: "StallJob", lock, lockLease: 200, lockPrefix: prefix })
          const enqueued = yield* job.client(job.job([lock]), () => Effect.void)
          const outcome = yield* Effect.result(job.server(enqueued.job, stall(700)))
          assert.strictEqual(outcome._tag, "Failure", lock)
          assert.strictEqual(outcome._tag === "Failure" ? outcome.failure._tag : "", "LockLost", lock)
        }
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
      }).pipe(Effect.provide(MemoryQueue.layer())))

    it.effect("an until_executed unlock lost to a dropped connection is retried: the digest is free afterwards", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const job = yield* UniqueJob.make({
          worker: "LostUnlockJob",
          lock: "until_executed",
          lockPrefix: RedisTest.uniquePrefix("rel")
        })
        const killer = new IORedis((yield* RedisTest.TestRedis).source.url, { lazyConnect: true })
        killer.on("error", () => {})
        yield* Effect.acquireRelease(Effect.promise(() => killer.connect()), () => Effect.sync(() => killer.disconnect()))
        const outcome = yield* Effect.scoped(
          Effect.gen(function*() {
            const queue = yield* MemoryQueue.make()
            const enqueued = yield* Effect.provideService(job.enqueue([7]), JobQueue, queue)
            assert.strictEqual(enqueued._tag, "Enqueued")
            // The perform drops every other connection (the service's too), so the unlock after it meets a
            // reconnecting client.
            return yield* job.server(
              enqueued.job,
              Effect.promise(() => killer.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"))
            ).pipe(Effect.provideService(JobQueue, queue))
          })
        )
        assert.strictEqual(outcome._tag, "Performed")
        const keys = yield* Effect.promise(() => raw.keys(`${job.definition.lockPrefix}:*:LOCKED`))
        assert.deepStrictEqual(keys, [], "the lock was released once the connection came back")
        const again = yield* Effect.scoped(Effect.provide(job.enqueue([7]), MemoryQueue.layer()))
        assert.strictEqual(again._tag, "Enqueued")
        // Its lock (no lockTtl) is the documented exception: a queue lock whose job exists.
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(job.definition.lockPrefix, [again.digest]), [])
      }).pipe(Effect.scoped), { timeout: 60_000 })
  })
})

describe("reliability: memory store on TestClock", () => {
  layer(Redis.layerMemory)((it) => {
    it.effect("a holder cut off from Redis ends LockLost leaseGuardMs before its lease ends there, not earlier", () =>
      Effect.gen(function*() {
        const redis = yield* Redis.RedisService
        let cut = false
        const cutOff = cutOffStore(redis, () => cut)
        const job = UniqueJob.unsafeMake({
          worker: "CutOffJob",
          lock: "while_executing",
          lockLease: 300,
          lockPrefix: RedisTest.uniquePrefix("rel")
        })
        const started = yield* Deferred.make<void>()
        const fiber = yield* Effect.forkChild(
          job.server(job.job([1]), Effect.andThen(Deferred.succeed(started, undefined), Effect.never)).pipe(
            Effect.provideService(Redis.RedisService, cutOff),
            Effect.provide(MemoryQueue.layer())
          )
        )
        yield* Deferred.await(started)
        assert.strictEqual(Lock.leaseGuardMs(300), 30)
        assert.strictEqual(Lock.leaseGuardMs(60_000), 2000)
        // Acquired at 0 with a 300 ms lease, renewed at 100 (lease / 3); cut off from 150: the store keeps the lease
        // until 100 + 300, the holder gives it up 30 ms before, at 370.
        yield* TestClock.adjust(150)
        cut = true
        yield* TestClock.adjust(219)
        yield* Effect.repeat(Effect.yieldNow, { times: 20 })
        assert.isUndefined(fiber.pollUnsafe(), "gave up before its deadline")
        yield* TestClock.adjust(1)
        yield* Effect.repeat(Effect.yieldNow, { times: 20 })
        assert.isDefined(fiber.pollUnsafe(), "still performing at its deadline, 30 ms before the store lets go")
        const [entry] = yield* redis.holders(Lock.keyOf(job.definition, (yield* job.digest([1])), "run"))
        assert.isTrue(entry === undefined || entry.leaseUntil === 400, JSON.stringify(entry))
        const error = yield* Effect.flip(Fiber.join(fiber))
        assert.strictEqual(error._tag, "LockLost")
      }))
  })
})
