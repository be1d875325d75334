/**
 * The middleware end to end on the `PersistedQueue` adapter, on Effect's memory store (locks on the library's memory
 * store), on its Redis store (locks on the same private redis-server) and on its SQL store (a PostgreSQL database of
 * this file's own; locks on the memory store): duplicates refused at enqueue for every type
 * that locks there, with `log`, `raise` and `reject`; a run lock held while performing (two takers never run one
 * digest at once, and no more than `lockLimit`); locks released after; a job that fails every attempt lets its
 * `until_executed` lock go through `onDeath`; a taker interrupted mid-job releases nothing wrongly and the job runs
 * later; the reaper frees the lock of a job the queue says is gone and keeps one whose job it still has. And what the adapter refuses at build
 * (`UnsupportedStrategy`): the server's `reschedule`, the client's `replace`, `debounce`. Real time.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as UniquePersistedQueue from "../src/adapters/PersistedQueue.js"
import * as Defaults from "../src/Defaults.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import type * as LockType from "../src/LockType.js"
import * as Reaper from "../src/Reaper.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import { until } from "./support/bullmq.js"
import * as PQ from "./support/persistedQueue.js"
import * as RedisTest from "./support/redis.js"

interface Variant<R> {
  readonly name: string
  readonly store: PQ.Store<R>
  readonly services: Layer.Layer<R | Redis.RedisService, unknown>
}

const variants = [
  { name: "memory store", store: PQ.memory, services: Redis.layerMemory } satisfies Variant<never>,
  {
    name: "Redis store",
    store: PQ.redis,
    services: Layer.merge(RedisTest.layer(), PQ.layerEffectRedis.pipe(Layer.provide(RedisTest.layerServer)))
  },
  // PostgreSQL keeps the jobs (a database of this file's own), the library's memory store the locks.
  { name: "SQL store", store: PQ.sql, services: Layer.merge(Redis.layerMemory, PQ.layerPg("lifecycle")) }
] as const

type Interval = { readonly jid: string; readonly start: number; readonly end: number }

const overlapping = (intervals: ReadonlyArray<Interval>) => {
  const sorted = [...intervals].sort((a, b) => a.start - b.start)
  return sorted.filter((x, i) => i > 0 && x.start < sorted[i - 1]!.end).length
}

const holdersOf = (uj: UniqueJob.UniqueJob, digest: string, phase: LockType.Phase) =>
  Effect.flatMap(Redis.RedisService, (redis) =>
    Effect.map(redis.holders(Lock.keyOf(uj.definition, digest, phase)), (hs) => hs.map((h) => h.jid)))

for (const variant of variants) {
  describe(`PersistedQueue lifecycle: ${variant.name}`, () => {
    layer(variant.services as Layer.Layer<Redis.RedisService, unknown>, { excludeTestServices: true })((it) => {
      // The adapter as the JobQueue, and a worker of its own per test.
      const setup = (options: Partial<UniquePersistedQueue.Options> = {}) =>
        Effect.gen(function*() {
          const { adapter } = yield* PQ.adapterOn(variant.store as PQ.Store<never>, options)
          const define = (fields: Omit<UniqueJob.Options, "worker" | "queue">) =>
            UniqueJob.unsafeMake({ worker: "PQJob", queue: adapter.name, lockPrefix: RedisTest.uniquePrefix("pqlc"), ...fields } as UniqueJob.Options)
          const intervals = yield* Ref.make<ReadonlyArray<Interval>>([])
          const timed = (jid: string, body: Effect.Effect<void>) =>
            Effect.gen(function*() {
              const start = yield* Clock.currentTimeMillis
              yield* body
              const end = yield* Clock.currentTimeMillis
              yield* Ref.update(intervals, (xs) => [...xs, { jid, start, end }])
            })
          const provided = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
            effect.pipe(Effect.provideService(JobQueue, adapter), Effect.provideService(UniquePersistedQueue.UniquePersistedQueue, adapter))
          const gone = (jid: string) => until(Effect.map(adapter.exists([{ jid, queue: adapter.name }]), ([p]) => p === "gone"))
          return { adapter, define, intervals, timed, provided, gone }
        })

      const enqueueLocks: ReadonlyArray<readonly [LockType.LockType, Partial<UniqueJob.Options>]> = [
        ["until_executed", {}],
        ["until_executing", {}],
        ["until_and_while_executing", {}],
        ["until_expired", { lockTtl: "1 minute" }]
      ]
      for (const [lock, extra] of enqueueLocks) {
        it.effect(`${lock}, log: a duplicate enqueue is Skipped; the job runs once; what it holds is released after`, () =>
          Effect.gen(function*() {
            const h = yield* setup()
            const job = h.define({ lock, onConflict: "log", ...extra })
            const first = yield* h.provided(job.enqueue([1]))
            const second = yield* h.provided(job.enqueue([1]))
            assert.strictEqual(first._tag, "Enqueued")
            assert.strictEqual(second._tag, "Skipped")
            assert.deepStrictEqual(second._tag === "Skipped" && second.holders, [first.job.jid])
            const runs = yield* Ref.make(0)
            yield* h.provided(UniquePersistedQueue.worker(job, () => Ref.update(runs, (n) => n + 1), { concurrency: 2 }))
            assert.isTrue(yield* h.gone(first.job.jid))
            assert.strictEqual(yield* Ref.get(runs), 1)
            assert.deepStrictEqual(yield* holdersOf(job, first.digest, "run"), [])
            // until_expired keeps its lock until its TTL: only time ends it.
            assert.deepStrictEqual(
              yield* holdersOf(job, first.digest, "queue"),
              lock === "until_expired" ? [first.job.jid] : []
            )
            if (lock !== "until_expired") {
              assert.strictEqual((yield* h.provided(job.enqueue([1])))._tag, "Enqueued", "free again once it ran")
            }
          }))
      }

      for (const [lock, extra] of enqueueLocks) {
        it.effect(`${lock}, raise: a duplicate enqueue fails with DuplicateJob; reject: Rejected, in the dead set`, () =>
          Effect.gen(function*() {
            const h = yield* setup()
            const raising = h.define({ lock, onConflict: "raise", ...extra })
            const first = yield* h.provided(raising.enqueue([1]))
            const raised = yield* Effect.flip(h.provided(raising.enqueue([1])))
            assert.strictEqual(raised._tag, "DuplicateJob")
            const rejecting = h.define({ lock, onConflict: "reject", ...extra })
            const held = yield* h.provided(rejecting.enqueue([2]))
            const rejected = yield* h.provided(rejecting.enqueue([2]))
            assert.strictEqual(rejected._tag, "Rejected")
            const letter = yield* h.adapter.deadLetter.take((letter) => Effect.succeed(letter))
            assert.strictEqual(letter.job.jid, rejected.job.jid)
            assert.include(letter.reason, "duplicate enqueue")
            assert.deepStrictEqual(
              yield* h.adapter.exists([first.job, held.job, rejected.job]),
              ["exists", "exists", "gone"]
            )
          }))
      }

      it.effect("while_executing, raise: six jobs of one digest on two takers all run, never two at once; no lock left", () =>
        Effect.gen(function*() {
          const h = yield* setup({ maxAttempts: 20 })
          const job = h.define({ lock: "while_executing", onConflict: "raise" })
          const enqueued = yield* Effect.forEach([1, 2, 3, 4, 5, 6], () => h.provided(job.enqueue([7])))
          assert.isTrue(enqueued.every((o) => o._tag === "Enqueued"), "while_executing does not lock at enqueue")
          yield* h.provided(
            UniquePersistedQueue.worker(job, (_, running) => h.timed(running.jid, Effect.sleep(100)), { concurrency: 2 })
          )
          for (const o of enqueued) assert.isTrue(yield* h.gone(o.job.jid))
          const intervals = yield* Ref.get(h.intervals)
          assert.strictEqual(intervals.length, 6, "every job ran once")
          assert.strictEqual(overlapping(intervals), 0)
          assert.isAtLeast((yield* h.adapter.stats).failed, 1, "a conflict is a failure the queue retries")
          assert.deepStrictEqual(yield* holdersOf(job, enqueued[0]!.digest, "run"), [])
        }))

      it.effect("while_executing, log and reject: the duplicate met while one runs is Skipped, or Rejected to the dead set", () =>
        Effect.gen(function*() {
          for (const strategy of ["log", "reject"] as const) {
            const h = yield* setup()
            const job = h.define({ lock: "while_executing", onConflict: strategy })
            const a = yield* h.provided(job.enqueue([8]))
            const b = yield* h.provided(job.enqueue([8]))
            yield* h.provided(UniquePersistedQueue.worker(job, () => Effect.sleep(300), { concurrency: 2 }))
            assert.isTrue(yield* h.gone(a.job.jid))
            assert.isTrue(yield* h.gone(b.job.jid))
            const stats = yield* h.adapter.stats
            // Both taken at once (two takers): one runs, the other meets its run lock; on a slow machine the second
            // may be taken only after the first ended, and run too.
            assert.strictEqual(stats.succeeded + (strategy === "log" ? stats.skipped : stats.rejected), 2, strategy)
            if (strategy === "reject" && stats.rejected === 1) {
              const letter = yield* h.adapter.deadLetter.take((letter) => Effect.succeed(letter))
              assert.include(letter.reason, "duplicate execution")
            }
            assert.deepStrictEqual(yield* holdersOf(job, a.digest, "run"), [])
          }
        }))

      it.effect("lockLimit 2: a third enqueue of until_executed is Skipped; while_executing runs at most two at once on three takers", () =>
        Effect.gen(function*() {
          const q = yield* setup()
          const queued = q.define({ lock: "until_executed", onConflict: "log", lockLimit: 2 })
          const answers = yield* Effect.forEach([1, 2, 3], () => q.provided(queued.enqueue([9])))
          assert.deepStrictEqual(answers.map((o) => o._tag), ["Enqueued", "Enqueued", "Skipped"])
          // The run lock's limit on a queue of its own (a worker takes every job of its queue).
          const h = yield* setup({ maxAttempts: 20 })
          const running = h.define({ lock: "while_executing", onConflict: "raise", lockLimit: 2 })
          const jobs = yield* Effect.forEach([1, 2, 3, 4, 5, 6], () => h.provided(running.enqueue([10])))
          yield* h.provided(
            UniquePersistedQueue.worker(running, (_, lock) => h.timed(lock.jid, Effect.sleep(150)), { concurrency: 3 })
          )
          for (const o of jobs) assert.isTrue(yield* h.gone(o.job.jid))
          const intervals = yield* Ref.get(h.intervals)
          assert.strictEqual(intervals.length, 6, "every job ran once")
          const events = intervals.flatMap((x) => [{ at: x.start, d: 1 }, { at: x.end, d: -1 }])
            .sort((a, b) => a.at - b.at || a.d - b.d)
          let now = 0
          let most = 0
          for (const e of events) most = Math.max(most, now += e.d)
          assert.isAtMost(most, 2, "never more than the limit at once")
          assert.deepStrictEqual(yield* holdersOf(running, jobs[0]!.digest, "run"), [])
        }))

      it.effect("until_executed: a job that fails every attempt keeps its lock until its last, then lets it go (onDeath)", () =>
        Effect.gen(function*() {
          const h = yield* setup({ maxAttempts: 2 })
          const job = h.define({ lock: "until_executed" })
          const attempts = yield* Ref.make<ReadonlyArray<number>>([])
          const last = yield* Deferred.make<void>()
          const first = yield* h.provided(job.enqueue([9]))
          // The last attempt waits for the test before it fails: the lock is looked at between the two.
          yield* h.provided(UniquePersistedQueue.worker(job, (_, __, j) =>
            Effect.andThen(
              Effect.andThen(
                Ref.update(attempts, (xs) => [...xs, j.retryCount ?? -1]),
                (j.retryCount ?? 0) > 0 ? Deferred.await(last) : Effect.void
              ),
              Effect.fail(new Error("always fails"))
            )))
          assert.isTrue(yield* until(Effect.map(Ref.get(attempts), (xs) => xs.length === 2)))
          assert.deepStrictEqual(yield* holdersOf(job, first.digest, "queue"), [first.job.jid], "kept for the retry")
          yield* Deferred.succeed(last, undefined)
          assert.isTrue(yield* h.gone(first.job.jid))
          assert.deepStrictEqual(yield* Ref.get(attempts), [0, 1])
          assert.deepStrictEqual(yield* holdersOf(job, first.digest, "queue"), [], "released through onDeath")
          assert.strictEqual((yield* h.adapter.stats).dead, 1)
        }))

      for (const lock of ["until_executed", "while_executing", "until_and_while_executing"] as const) {
        it.effect(`${lock}: a taker interrupted mid-job releases nothing wrongly; the job runs later, once`, () =>
          Effect.gen(function*() {
            const h = yield* setup()
            const job = h.define({ lock })
            const first = yield* h.provided(job.enqueue([10]))
            const started = yield* Ref.make(0)
            yield* Effect.scoped(Effect.gen(function*() {
              yield* h.provided(UniquePersistedQueue.worker(job, () => Effect.andThen(Ref.update(started, (n) => n + 1), Effect.never)))
              yield* until(Effect.map(Ref.get(started), (n) => n === 1))
              if (lock !== "until_executed") {
                assert.deepStrictEqual(yield* holdersOf(job, first.digest, "run"), [first.job.jid], "running")
              }
            }))
            assert.deepStrictEqual(yield* h.adapter.exists([first.job]), ["exists"], "given back to the queue")
            assert.deepStrictEqual(yield* holdersOf(job, first.digest, "run"), [], "the run lock went with the run")
            // until_executed keeps its queue lock for the job, which is still to run; the handoff type gave it up
            // at the start (the job's run lock is what it holds while running).
            assert.deepStrictEqual(
              yield* holdersOf(job, first.digest, "queue"),
              lock === "until_executed" ? [first.job.jid] : []
            )
            const runs = yield* Ref.make<ReadonlyArray<number>>([])
            yield* h.provided(UniquePersistedQueue.worker(job, (_, __, j) => Ref.update(runs, (xs) => [...xs, j.retryCount ?? -1])))
            assert.isTrue(yield* h.gone(first.job.jid))
            assert.deepStrictEqual(yield* Ref.get(runs), [0], "runs once, and the interruption spent no attempt")
            assert.deepStrictEqual(yield* holdersOf(job, first.digest, "queue"), [])
            assert.deepStrictEqual(yield* holdersOf(job, first.digest, "run"), [])
          }))
      }

      it.effect("the reaper frees the lock of a job the queue says is gone, and keeps one whose job it still has", () =>
        Effect.gen(function*() {
          const h = yield* setup()
          const job = h.define({ lock: "until_executed" })
          const waiting = yield* h.provided(job.enqueue([11]))
          // A lock whose job never reached the queue (a process that died between the lock and the offer).
          const orphan = yield* h.provided(job.client(job.job([12]), () => Effect.void))
          assert.strictEqual(orphan._tag, "Enqueued")
          yield* Effect.sleep(20)
          const pass = yield* h.provided(Reaper.runOnce({ prefix: job.definition.lockPrefix, grace: 1 }))
          assert.strictEqual(pass.orphans, 1)
          assert.deepStrictEqual(yield* holdersOf(job, waiting.digest, "queue"), [waiting.job.jid], "its job waits")
          assert.deepStrictEqual(yield* holdersOf(job, orphan.digest, "queue"), [], "its job is gone")
        }))

      it.effect("refused at build, with UnsupportedStrategy naming why: server reschedule, client replace, debounce", () =>
        Effect.gen(function*() {
          const h = yield* setup()
          const cases: ReadonlyArray<readonly [Omit<UniqueJob.Options, "worker" | "queue">, string]> = [
            [{ lock: "while_executing", onConflict: { server: "reschedule" } }, "server: reschedule"],
            [{ lock: "until_executed", onConflict: { client: "replace" } }, "client: replace"],
            [{ lock: "until_executing", debounce: { delay: "1 second" } }, "debounce"]
          ]
          for (const [options, strategy] of cases) {
            const error = yield* Effect.flip(h.provided(UniquePersistedQueue.worker(h.define(options), () => Effect.void)))
            assert.strictEqual(error._tag, "UnsupportedStrategy")
            assert.strictEqual(error._tag === "UnsupportedStrategy" && error.strategy, strategy)
            assert.strictEqual(error._tag === "UnsupportedStrategy" && error.adapter, "PersistedQueue")
            assert.include(error.message, "PersistedQueue cannot")
          }
          // A strategy the worker left out comes from the Defaults where the worker is built.
          const plain = h.define({ lock: "while_executing" })
          const error = yield* Effect.flip(
            h.provided(UniquePersistedQueue.processor(plain, () => Effect.void)).pipe(
              Effect.provide(Defaults.layer({ onConflict: { server: "reschedule" } }))
            )
          )
          assert.strictEqual(error._tag, "UnsupportedStrategy")
          assert.isUndefined(UniquePersistedQueue.unsupported(plain.definition))
        }))
    })
  })
}

