/**
 * The `JobQueue` contract (test/support/jobQueueContract.ts, the cases MemoryQueue and BullMQ pass) on the
 * `PersistedQueue` adapter, over Effect's three stores: memory, Redis (the test's private redis-server, through
 * Effect's `Redis` service on ioredis) and SQL (PostgreSQL, a database made for this file and dropped after it). What
 * `PersistedQueue` cannot do by design, remove a waiting job and reschedule the job being taken, is asserted as the
 * refusal it is. Then the adapter's own promises: options checked at make, every call bounded, an offer that timed out
 * carries its landing, the dead set.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as PersistedQueue from "effect/persistence/PersistedQueue"
import * as EffectRedis from "effect/persistence/Redis"
import * as Ref from "effect/Ref"
import * as UniquePersistedQueue from "../src/adapters/PersistedQueue.js"
import * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import { until } from "./support/bullmq.js"
import { contract, type Harness } from "./support/jobQueueContract.js"
import * as PQ from "./support/persistedQueue.js"
import * as RedisTest from "./support/redis.js"

const refusals = { reschedulesPerforming: false, removesWaiting: false }

const harnessOn = <R>(store: PQ.Store<R>) =>
  Effect.gen(function*() {
    const queueName = RedisTest.uniquePrefix(`conf-${store.name}`)
    const { adapter } = yield* PQ.adapterOn(store, { name: queueName })
    // The dead set is read by taking from it, as a user does: a taker of this test collects what arrives.
    const dead = yield* Ref.make<ReadonlyArray<{ readonly jid: string; readonly reason: string }>>([])
    yield* Effect.forkScoped(Effect.forever(adapter.deadLetter.take((letter) =>
      Ref.update(dead, (ds) => [...ds, { jid: letter.job.jid, reason: letter.reason }])
    )))
    // Kills made through the port: `dead` waits (up to a minute) until that many letters arrived, not a fixed time.
    let kills = 0
    const port: typeof adapter = {
      ...adapter,
      kill: (job, reason) => Effect.tap(adapter.kill(job, reason), () => Effect.sync(() => kills++))
    }
    return {
      queueName,
      port,
      work: (handler) => Effect.orDie(adapter.work((job) => Effect.provideService(handler(job), JobQueue, port), { concurrency: 2 })),
      dead: Effect.andThen(until(Effect.map(Ref.get(dead), (ds) => ds.length >= kills)), Ref.get(dead))
    } satisfies Harness
  })

contract({ name: "PersistedQueue, memory store", make: harnessOn(PQ.memory), capabilities: refusals }, Layer.empty)
contract(
  { name: "PersistedQueue, Redis store", make: harnessOn(PQ.redis), capabilities: refusals },
  PQ.layerEffectRedis.pipe(Layer.provide(RedisTest.layerServer))
)
contract(
  { name: "PersistedQueue, SQL store (PostgreSQL)", make: harnessOn(PQ.sql), capabilities: refusals },
  PQ.layerPg("conformance")
)

describe("PersistedQueue adapter: options and bounds", () => {
  it.effect("options are checked at make: each bad field named", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        UniquePersistedQueue.make({
          name: "",
          queues: [],
          presence: { _tag: "Nope" } as unknown as typeof UniquePersistedQueue.presenceMemory,
          maxAttempts: 0,
          timeout: -1
        }).pipe(Effect.provide(PersistedQueue.layer.pipe(Layer.provide(PersistedQueue.layerStoreMemory))))
      )
      assert.strictEqual(error._tag, "InvalidLockOptions")
      assert.deepStrictEqual(error.issues.map((issue) => issue.field), ["name", "queues", "presence", "maxAttempts", "timeout"])
    }))

  it.effect("options from JavaScript: none at all, a null presence, a presence without its key, a string maxAttempts", () =>
    Effect.gen(function*() {
      const made = (options: unknown) =>
        Effect.flip(
          UniquePersistedQueue.make(options as UniquePersistedQueue.Options<typeof UniquePersistedQueue.presenceMemory>).pipe(
            Effect.provide(PersistedQueue.layer.pipe(Layer.provide(PersistedQueue.layerStoreMemory)))
          )
        )
      const none = yield* made(undefined)
      assert.deepStrictEqual(none.issues.map((issue) => issue.field), ["options"])
      const nullPresence = yield* made({ name: "q", presence: null })
      assert.deepStrictEqual(nullPresence.issues.map((issue) => issue.field), ["presence"])
      assert.include(nullPresence.reason, "got null")
      const noPrefix = yield* made({ name: "q", presence: { _tag: "Redis" } })
      assert.include(noPrefix.reason, "presenceRedis needs the store's prefix")
      const noTable = yield* made({ name: "q", presence: { _tag: "Sql" } })
      assert.include(noTable.reason, "presenceSql needs the store's table name")
      const text = yield* made({ name: "q", presence: UniquePersistedQueue.presenceMemory, maxAttempts: "3" })
      assert.include(text.reason, `got the string "3"`)
      const emptyName = yield* made({ name: "", presence: UniquePersistedQueue.presenceMemory })
      assert.deepStrictEqual(emptyName.issues.map((issue) => issue.field), ["name"], "the queues it was not given are not blamed")
    }))

  it.effect("work: a concurrency that is not a whole number from 1 to 10,000 is refused, naming it", () =>
    Effect.gen(function*() {
      const { adapter } = yield* PQ.adapterOn(PQ.memory)
      for (const concurrency of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 10_001]) {
        const error = yield* Effect.flip(Effect.scoped(adapter.work(() => Effect.void, { concurrency })))
        assert.strictEqual(error.field, "concurrency", String(concurrency))
      }
    }))

  it.effect("a jid still to run is refused at push and schedule: nothing is offered, and the enqueue's lock is let go", () =>
    Effect.gen(function*() {
      const { adapter } = yield* PQ.adapterOn(PQ.memory)
      const first = Job.make({ worker: "W", queue: adapter.name, args: ["a"], jid: "same-jid" })
      const second = Job.make({ worker: "W", queue: adapter.name, args: ["b"], jid: "same-jid" })
      yield* adapter.push(first)
      const pushed = yield* Effect.flip(adapter.push(second))
      assert.include(pushed.reason, "already has job same-jid still to run")
      const scheduled = yield* Effect.flip(adapter.schedule(second, Date.now() + 1000))
      assert.strictEqual(scheduled.operation, "schedule")
      // Through the middleware: the refused enqueue holds no lock.
      const uj = UniqueJob.unsafeMake({ worker: "W", queue: adapter.name, lock: "until_executed" })
      yield* Effect.gen(function*() {
        const error = yield* Effect.flip(uj.enqueue(["b"], { jid: "same-jid" }))
        assert.strictEqual(error._tag, "QueueError")
        const again = yield* uj.enqueue(["b"])
        assert.strictEqual(again._tag, "Enqueued", "the refused enqueue's lock was let go")
      }).pipe(Effect.provideService(JobQueue, adapter), Effect.provide(Redis.layerMemory))
    }))

  it.effect("a job of another queue is refused at push and schedule; its jid is unknown to exists", () =>
    Effect.gen(function*() {
      const { adapter } = yield* PQ.adapterOn(PQ.memory, { name: "emails", queues: ["emails", "reports"] })
      const other = Job.make({ worker: "W", queue: "payments", args: [] })
      const pushed = yield* Effect.flip(adapter.push(other))
      assert.include(pushed.reason, `the job is for queue "payments"; this adapter serves "emails", "reports"`)
      const scheduled = yield* Effect.flip(adapter.schedule(other, Date.now() + 1000))
      assert.strictEqual(scheduled.operation, "schedule")
      const report = Job.make({ worker: "W", queue: "reports", args: [] })
      yield* adapter.push(report)
      assert.deepStrictEqual(yield* adapter.exists([report, other]), ["exists", "unknown"])
    }))

  it.effect("args that are not JSON are refused at push with a QueueError naming why; nothing is stored", () =>
    Effect.gen(function*() {
      const { adapter } = yield* PQ.adapterOn(PQ.memory)
      const job = Job.make({ worker: "W", queue: adapter.name, args: [new Date(0)] })
      const error = yield* Effect.flip(adapter.push(job))
      assert.include(error.reason, "does not encode as JSON")
      assert.deepStrictEqual(yield* adapter.exists([job]), ["gone"])
    }))

  it.live("every call is bounded: a store that does not answer fails with a QueueError; an offer carries its landing", () =>
    Effect.gen(function*() {
      // A store whose offers answer after 400 ms, and whose presence answers once (the push's check that its jid is
      // new) and then never: a stalled Redis, in process.
      const store = yield* Effect.provide(
        Effect.gen(function*() {
          return yield* PersistedQueue.PersistedQueueStore
        }),
        PersistedQueue.layerStoreMemory
      )
      const slow = Layer.succeed(PersistedQueue.PersistedQueueStore, {
        ...store,
        offer: (options) => Effect.andThen(Effect.sleep(400), store.offer(options))
      })
      let answered = 0
      const adapter = yield* UniquePersistedQueue.make({
        name: "slow",
        presence: UniquePersistedQueue.presenceRedis(),
        timeout: 100
      }).pipe(
        Effect.provide(PersistedQueue.layer.pipe(Layer.provide(slow))),
        Effect.provideService(EffectRedis.Redis, {
          send: () => (answered++ === 0 ? Effect.succeed([null]) : Effect.never)
        } as unknown as EffectRedis.Redis["Service"])
      )
      const job = Job.make({ worker: "W", queue: "slow", args: [1] })
      const pushed = yield* Effect.flip(adapter.push(job))
      assert.include(pushed.reason, "did not answer within 100 ms; the offer was sent and may still be stored")
      assert.isDefined(pushed.landing)
      assert.isTrue(yield* pushed.landing!, "the offer landed after the timeout")
      const asked = yield* Effect.flip(adapter.exists([job]))
      assert.strictEqual(asked.operation, "exists")
      assert.include(asked.reason, "did not answer within 100 ms")
      assert.isUndefined(asked.landing)
    }))

  it.live("a taker interrupted mid-job gives the job back: no attempt spent, it runs again under its jid", () =>
    Effect.gen(function*() {
      const { adapter } = yield* PQ.adapterOn(PQ.memory)
      const started = yield* Ref.make<ReadonlyArray<number>>([])
      const job = Job.make({ worker: "W", queue: adapter.name, args: [1] })
      yield* adapter.push(job)
      const exit = yield* Effect.exit(Effect.scoped(Effect.gen(function*() {
        yield* adapter.work((j) => Effect.andThen(Ref.update(started, (s) => [...s, j.retryCount ?? -1]), Effect.never))
        yield* until(Effect.map(Ref.get(started), (s) => s.length === 1))
      })))
      assert.isTrue(Exit.isSuccess(exit))
      assert.deepStrictEqual(yield* adapter.exists([job]), ["exists"])
      yield* adapter.work((j) => Ref.update(started, (s) => [...s, j.retryCount ?? -1]))
      assert.isTrue(yield* until(Effect.map(adapter.exists([job]), ([p]) => p === "gone")))
      assert.deepStrictEqual(yield* Ref.get(started), [0, 0], "the second run is not a retry")
    }))
})

// Death on each store: the presence reads a job failed for good as gone (Redis: its id's score 2e15 + failedAt; SQL:
// its row's state `failed`; memory: the ledger).
const deathOn = <R>(store: PQ.Store<R>, services: Layer.Layer<R, unknown>) =>
  describe(`PersistedQueue adapter: death on the ${store.name} store`, () => {
    layer(services, { excludeTestServices: true })((it) => {
      it.effect("a job that fails every attempt: onDeath once with the reason, a dead letter, gone", () =>
        Effect.gen(function*() {
          const { adapter } = yield* PQ.adapterOn(store, { maxAttempts: 2 })
          const deaths = yield* Ref.make<ReadonlyArray<string>>([])
          const attempts = yield* Ref.make(0)
          yield* adapter.work(() => Effect.andThen(Ref.update(attempts, (n) => n + 1), Effect.fail(new Error("boom"))), {
            onDeath: (job, reason) => Ref.update(deaths, (ds) => [...ds, `${job.jid} ${reason}`])
          })
          const job = Job.make({ worker: "W", queue: adapter.name, args: [1] })
          yield* adapter.push(job)
          assert.isTrue(yield* until(Effect.map(adapter.exists([job]), ([p]) => p === "gone")))
          assert.strictEqual(yield* Ref.get(attempts), 2)
          assert.deepStrictEqual(yield* Ref.get(deaths), [`${job.jid} attempts exhausted (2): Error: boom`])
          const letter = yield* adapter.deadLetter.take((letter) => Effect.succeed(letter))
          assert.strictEqual(letter.job.jid, job.jid)
          assert.strictEqual(letter.job.retryCount, 1)
          assert.strictEqual((yield* adapter.stats).dead, 1)
        }))
    })
  })

deathOn(PQ.memory, Layer.empty)
deathOn(PQ.redis, PQ.layerEffectRedis.pipe(Layer.provide(RedisTest.layerServer)))
deathOn(PQ.sql, PQ.layerPg("death"))
