/**
 * Faults under the `PersistedQueue` adapter on Effect's Redis store, the locks and the store on one ioredis connection
 * (`Redis.layerWithEffectRedis`, as a user wires them), one adapter per lock type, takers running:
 *
 * - the redis-server killed and restarted (empty) mid-run: every enqueue ends, with an outcome or a typed error
 *   (`RedisError` from the lock, `QueueError` from the offer), within a bound; none hangs; the takers' failed takes are
 *   retried; after the restart new jobs are enqueued and run, and no lock is left without a TTL or a lease once they
 *   have run;
 * - PostgreSQL's backends of the SQL store's database terminated (`pg_terminate_backend`) mid-run: the same, with
 *   `QueueError`, on the SQL store.
 *
 * Real time; counted work, generous bounds.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as PersistedQueue from "effect/persistence/PersistedQueue"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import * as UniquePersistedQueue from "../src/adapters/PersistedQueue.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import type * as LockType from "../src/LockType.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import { until } from "./support/bullmq.js"
import * as PQ from "./support/persistedQueue.js"
import * as RedisTest from "./support/redis.js"

/** Every call to Redis or the queue is bounded by this; a call not ended within HANG is a hang. */
const TIMEOUT = "1 second"
const HANG = 15_000
const DIGESTS = 4
const LOOPS = 4

const locks: ReadonlyArray<readonly [LockType.LockType, Partial<UniqueJob.Options>]> = [
  ["until_executed", {}],
  ["while_executing", { onConflict: { client: "log", server: "raise" }, lockLease: "2 seconds" }],
  ["until_and_while_executing", { onConflict: { client: "log", server: "raise" }, lockLease: "2 seconds" }],
  ["until_expired", { lockTtl: "30 seconds" }]
]

interface Worker {
  readonly unique: UniqueJob.UniqueJob
  readonly adapter: UniquePersistedQueue.UniquePersistedQueue
  readonly context: Context.Context<Redis.RedisService | JobQueue>
}

interface Tally {
  ok: number
  hangs: number
  readonly failures: Map<string, number>
  /** Jobs enqueued (Enqueued) at this time, by jid. */
  readonly enqueuedAt: Map<string, number>
  /** Jobs performed at this time, by jid. */
  readonly performedAt: Map<string, number>
  stopped: boolean
}

const failuresOf = (tally: Tally) => JSON.stringify(Object.fromEntries(tally.failures))

/**
 * One adapter per lock type over `factory`, two takers each, and `LOOPS` fibers enqueueing until `tally.stopped`.
 * Returns the workers (for their locks) and the loops' fiber.
 */
const workload = (
  factory: Context.Context<PersistedQueue.PersistedQueueFactory>,
  presence: UniquePersistedQueue.Presence,
  tally: Tally
) =>
  Effect.gen(function*() {
    const lockPrefix = RedisTest.uniquePrefix("pqfault")
    const services = yield* Effect.context<Redis.RedisService>()
    const workers: Array<Worker> = []
    for (const [lock, extra] of locks) {
      // The presence's services (Effect's Redis, or SqlClient) come with the factory's context.
      const adapter = yield* (UniquePersistedQueue.make({
        name: RedisTest.uniquePrefix(`fq-${lock}`),
        presence,
        maxAttempts: 50,
        retrySchedule: Schedule.spaced("100 millis"),
        timeout: TIMEOUT
      }) as Effect.Effect<UniquePersistedQueue.UniquePersistedQueue, unknown, PersistedQueue.PersistedQueueFactory | Scope.Scope>)
        .pipe(Effect.provideContext(Context.merge(factory, services)))
      const unique = UniqueJob.unsafeMake({
        worker: `PQFault_${lock}`,
        queue: adapter.name,
        lock,
        lockPrefix,
        onConflict: "log",
        ...extra
      } as UniqueJob.Options)
      const context = Context.add(Context.add(services, JobQueue, adapter), UniquePersistedQueue.UniquePersistedQueue, adapter)
      yield* UniquePersistedQueue.worker(unique, (_, __, job) =>
        Effect.andThen(Effect.sleep(5), Effect.sync(() => tally.performedAt.set(job.jid, Date.now()))), {
        concurrency: 2
      }).pipe(Effect.provideContext(context))
      workers.push({ unique, context, adapter })
    }
    let n = 0
    const loop = Effect.gen(function*() {
      while (!tally.stopped) {
        const k = n++
        const { context, unique } = workers[k % workers.length]!
        const outcome = yield* Effect.provideContext(unique.enqueue([Math.floor(k / workers.length) % DIGESTS]), context)
          .pipe(
            Effect.map((outcome) => {
              tally.ok++
              if (outcome._tag === "Enqueued") tally.enqueuedAt.set(outcome.job.jid, Date.now())
              return outcome
            }),
            Effect.catch((error) =>
              Effect.sync(() => {
                tally.failures.set(error._tag, (tally.failures.get(error._tag) ?? 0) + 1)
              })
            ),
            Effect.timeoutOption(HANG)
          )
        if (outcome._tag === "None") tally.hangs++
        yield* Effect.sleep(10)
      }
    })
    const loops = yield* Effect.forkChild(Effect.forEach(Array.from({ length: LOOPS }), () => loop, { concurrency: "unbounded" }))
    return { workers, loops }
  })

/** Every holder of every lock of the workers' digests: those without a TTL or a lease are leaks. */
const heldWithoutEnd = (workers: ReadonlyArray<Worker>) =>
  Effect.gen(function*() {
    const redis = yield* Redis.RedisService
    const left: Array<string> = []
    let held = 0
    for (const { unique } of workers) {
      for (let d = 0; d < DIGESTS; d++) {
        const digest = yield* unique.digest([d])
        for (const phase of ["queue", "run"] as const) {
          for (const h of yield* redis.holders(Lock.keyOf(unique.definition, digest, phase))) {
            held++
            if (h.expiresAt === undefined && h.leaseUntil === undefined) {
              left.push(`${unique.worker} ${phase} ${d}: ${h.jid}`)
            }
          }
        }
      }
    }
    return { held, left }
  })

const newTally = (): Tally => ({
  ok: 0,
  hangs: 0,
  failures: new Map(),
  enqueuedAt: new Map(),
  performedAt: new Map(),
  stopped: false
})

/** Jobs enqueued after `since`, all performed or gone from the queue within HANG. */
const ranAfter = (tally: Tally, since: number, workers: ReadonlyArray<Worker>) =>
  until(
    Effect.gen(function*() {
      const jids = [...tally.enqueuedAt].filter(([jid, at]) => at > since && !tally.performedAt.has(jid))
      if (jids.length === 0) return true
      for (const { adapter } of workers) {
        const presence = yield* Effect.orElseSucceed(
          adapter.exists(jids.map(([jid]) => ({ jid, queue: adapter.name }))),
          () => jids.map(() => "exists" as const)
        )
        if (presence.some((p) => p === "exists")) return false
      }
      return true
    }),
    HANG * 2
  )

describe("PersistedQueue adapter faults: Redis store", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("redis-server killed and restarted mid-run: typed errors, no hang, new jobs run after, no lock without an end", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const server = source.server
        if (server === undefined) return // REDIS_URL fallback: the server is not ours to kill
        const base = yield* Layer.build(Redis.layerWithEffectRedis({ url: source.url, timeout: TIMEOUT }))
        yield* Effect.gen(function*() {
          const prefix = `${RedisTest.uniquePrefix("pqf")}:`
          const factory = yield* Layer.build(
            PersistedQueue.layer.pipe(
              Layer.provide(PersistedQueue.layerStoreRedis({
                prefix,
                pollInterval: "50 millis",
                lockRefreshInterval: "1 second",
                lockExpiration: "5 seconds"
              }))
            )
          )
          const tally = newTally()
          const { loops, workers } = yield* workload(factory, UniquePersistedQueue.presenceRedis({ prefix }), tally)
          assert.isTrue(yield* until(Effect.sync(() => tally.performedAt.size >= 20), HANG), "jobs run before the fault")

          yield* server.kill
          const failedBefore = [...tally.failures.values()].reduce((a, b) => a + b, 0)
          yield* Effect.sleep(1_000)
          assert.isTrue(
            yield* until(Effect.sync(() => [...tally.failures.values()].reduce((a, b) => a + b, 0) > failedBefore), HANG),
            "calls fail while the server is down"
          )
          yield* server.restart
          const restartedAt = Date.now()
          const performedBefore = tally.performedAt.size
          // A job enqueued after the restart runs: the locks, the offer and the takers all work again.
          assert.isTrue(
            yield* until(
              Effect.sync(() => [...tally.performedAt].some(([jid]) => (tally.enqueuedAt.get(jid) ?? 0) > restartedAt)),
              HANG * 2
            ),
            `a job enqueued after the restart runs (failures ${failuresOf(tally)})`
          )
          tally.stopped = true
          const stopped = yield* Fiber.await(loops).pipe(Effect.timeoutOption(HANG * 2))
          assert.strictEqual(stopped._tag, "Some", "the enqueue loops end")
          assert.strictEqual(tally.hangs, 0, "calls that hung")
          const kinds = [...tally.failures.keys()]
          assert.isAbove(kinds.length, 0)
          assert.deepStrictEqual(kinds.filter((k) => k !== "RedisError" && k !== "QueueError"), [], failuresOf(tally))
          assert.isTrue(yield* ranAfter(tally, restartedAt, workers), "every job enqueued after the restart runs")
          // The releases that follow the last runs: wait for them, then nothing may be held without an end.
          yield* until(Effect.map(heldWithoutEnd(workers), ({ left }) => left.length === 0), 10_000)
          const { held, left } = yield* heldWithoutEnd(workers)
          assert.deepStrictEqual(left, [], "locks without a TTL or a lease")
          console.info(
            `PersistedQueue fault kill+restart: ${tally.ok} enqueues ok, failures ${failuresOf(tally)}, ` +
              `${tally.performedAt.size - performedBefore} runs after the kill, 0 hangs, ${held} held with an end`
          )
        }).pipe(Effect.provideContext(base))
      }), 180_000)
  })
})

describe("PersistedQueue adapter faults: SQL store", () => {
  layer(Layer.merge(PQ.layerPg("faults"), Redis.layerMemory), { excludeTestServices: true })((it) => {
    it.effect("PostgreSQL backends terminated mid-run: typed errors, no hang, new jobs run after, no lock without an end", () =>
      Effect.gen(function*() {
        const { context: factory, presence } = yield* PQ.sql.make
        const sql = yield* SqlClient.SqlClient
        const tally = newTally()
        const { loops, workers } = yield* workload(factory, presence, tally)
        assert.isTrue(yield* until(Effect.sync(() => tally.performedAt.size >= 20), HANG), "jobs run before the fault")
        // Every other backend of this database: the store's pooled connections (the one asking survives).
        const terminate = sql.unsafe<{ readonly n: number }>(
          "SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity " +
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        let terminated = 0
        for (let i = 0; i < 3; i++) {
          terminated += (yield* terminate)[0]?.n ?? 0
          yield* Effect.sleep(300)
        }
        const cutAt = Date.now()
        assert.isTrue(
          yield* until(
            Effect.sync(() => [...tally.performedAt].some(([jid]) => (tally.enqueuedAt.get(jid) ?? 0) > cutAt)),
            HANG * 2
          ),
          `a job enqueued after the connections were cut runs (failures ${failuresOf(tally)})`
        )
        tally.stopped = true
        const stopped = yield* Fiber.await(loops).pipe(Effect.timeoutOption(HANG * 2))
        assert.strictEqual(stopped._tag, "Some", "the enqueue loops end")
        assert.strictEqual(tally.hangs, 0, "calls that hung")
        assert.deepStrictEqual([...tally.failures.keys()].filter((k) => k !== "QueueError"), [], failuresOf(tally))
        assert.isTrue(yield* ranAfter(tally, 0, workers), "every job enqueued runs (PostgreSQL keeps them)")
        yield* until(Effect.map(heldWithoutEnd(workers), ({ left }) => left.length === 0), 10_000)
        const { left } = yield* heldWithoutEnd(workers)
        assert.deepStrictEqual(left, [], "locks without a TTL or a lease")
        console.info(
          `PersistedQueue fault pg_terminate_backend: ${terminated} backends ended, ${tally.ok} enqueues ok, ` +
            `failures ${failuresOf(tally)}, 0 hangs`
        )
      }), 180_000)
  })
})
