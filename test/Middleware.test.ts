/**
 * The middleware around a real (in-process) queue, on both stores: each lock type's lifecycle, each strategy on
 * each side, lapsed uniqueness, interruption and lost leases. Time is real (short delays): Redis TTLs need it.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Fiber from "effect/Fiber"
import type * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Metric from "effect/Metric"
import * as Ref from "effect/Ref"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Defaults from "../src/Defaults.js"
import * as Keeper from "../src/store/LeaseKeeper.js"
import type * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as LockType from "../src/LockType.js"
import * as Metrics from "../src/Metrics.js"
import * as Middleware from "../src/Middleware.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as Strategy from "../src/Strategy.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as RedisTest from "./support/redis.js"
import { losingUnlocks } from "./support/stores.js"

const stores: ReadonlyArray<readonly [string, Layer.Layer<Redis.RedisService, unknown>]> = [
  ["memory", Redis.layerMemory],
  ["redis", RedisTest.layer()]
]

type Interval = { readonly jid: string; readonly start: number; readonly end: number }

/**
 * A recorder of perform intervals, with two performs that signal when they have started: `perform` sleeps `ms`;
 * `held` runs until the test opens `until` (for a test that acts while a perform runs: a fixed sleep could end first
 * on a busy machine).
 */
const recorder = Effect.gen(function*() {
  const intervals = yield* Ref.make<Array<Interval>>([])
  const started = yield* Ref.make<Array<string>>([])
  const run = (job: Job.Job, body: Effect.Effect<void>) =>
    Effect.gen(function*() {
      const start = yield* Clock.currentTimeMillis
      yield* Ref.update(started, (s) => [...s, job.jid])
      yield* body
      const end = yield* Clock.currentTimeMillis
      yield* Ref.update(intervals, (xs) => [...xs, { jid: job.jid, start, end }])
      return job.jid
    })
  const perform = (job: Job.Job, ms: number) => run(job, Effect.sleep(ms))
  const held = (job: Job.Job, until: Deferred.Deferred<void>) => run(job, Deferred.await(until))
  return { intervals, started, perform, held }
})

/** A gate for `recorder.held`, and its opening. */
const gate = Deferred.make<void>()
const open = (g: Deferred.Deferred<void>) => Deferred.succeed(g, undefined)

/** Probes every 5 ms until `done`; gives up (a defect) only after 30 s, which no machine is slow enough to need. */
const poll = <A>(probe: Effect.Effect<A>, done: (a: A) => boolean): Effect.Effect<A> => {
  const loop: Effect.Effect<A> = Effect.flatMap(
    probe,
    (a) => (done(a) ? Effect.succeed(a) : Effect.andThen(Effect.sleep(5), loop))
  )
  return loop.pipe(
    Effect.timeoutOrElse({
      duration: "30 seconds",
      orElse: () => Effect.fail(new Error("the awaited condition never came"))
    }),
    Effect.orDie
  )
}

const assertNoOverlap = (intervals: ReadonlyArray<Interval>) => {
  const sorted = [...intervals].sort((a, b) => a.start - b.start)
  for (let i = 1; i < sorted.length; i++) {
    assert.isAtLeast(sorted[i]!.start, sorted[i - 1]!.end, `runs of ${sorted[i - 1]!.jid} and ${sorted[i]!.jid} overlap`)
  }
}

const maxConcurrent = (intervals: ReadonlyArray<Interval>) => {
  const points = intervals.flatMap((i) => [[i.start, 1], [i.end, -1]] as const).sort((a, b) => a[0] - b[0] || a[1] - b[1])
  let current = 0
  let max = 0
  for (const [, delta] of points) {
    current += delta
    max = Math.max(max, current)
  }
  return max
}

const define = (options: UniqueJob.Options) =>
  UniqueJob.make({ ...options, lockPrefix: RedisTest.uniquePrefix("mw") })

const holdersOf = (uj: UniqueJob.UniqueJob, digest: string, phase: LockType.Phase) =>
  Effect.flatMap(Redis.RedisService, (redis) =>
    Effect.map(redis.holders(Lock.keyOf(uj.definition, digest, phase)), (hs) => hs.map((h) => h.jid)))

/** Runs `body` with a fresh MemoryQueue provided as the JobQueue. */
const withQueue = <A, E, R>(
  body: (queue: MemoryQueue.MemoryQueue) => Effect.Effect<A, E, R>,
  options?: MemoryQueue.Options
) =>
  Effect.scoped(
    Effect.flatMap(MemoryQueue.make({ backoff: () => 30, ...options }), (queue) =>
      Effect.provideService(body(queue), JobQueue, queue))
  )

for (const [name, store] of stores) {
  describe(`middleware: ${name}`, () => {
    layer(store, { excludeTestServices: true })((it) => {
      it.effect("RebuildReportJob 42: skipped while queued, accepted while running, runs never overlap, 43 independent", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const report = yield* define({
              worker: "RebuildReportJob",
              lock: "until_and_while_executing",
              onConflict: { client: "log", server: "reschedule" },
              rescheduleDelay: 100
            })
            const rec = yield* recorder
            const outcomes = yield* Ref.make<Array<string>>([])
            const first = yield* report.enqueue([42])
            assert.strictEqual(first._tag, "Enqueued")
            const second = yield* report.enqueue([42])
            assert.strictEqual(second._tag, "Skipped")
            assert.deepStrictEqual(second._tag === "Skipped" && second.holders, [first.job.jid])

            // The first 42 runs until the test lets it finish; the others take 20 ms.
            const firstDone = yield* gate
            yield* queue.work(
              (job) =>
                Effect.tap(
                  report.server(job, job.jid === first.job.jid ? rec.held(job, firstDone) : rec.perform(job, 20)),
                  (o) => Ref.update(outcomes, (os) => [...os, `${job.args[0]}:${o._tag}`])
                ),
              { concurrency: 3 }
            )
            yield* poll(Ref.get(rec.started), (s) => s.includes(first.job.jid))
            const whileRunning = yield* report.enqueue([42])
            assert.strictEqual(whileRunning._tag, "Enqueued")
            const other = yield* report.enqueue([43])
            assert.strictEqual(other._tag, "Enqueued")
            // The second 42 finds the first still running and is put off (again every 100 ms until the first ends).
            yield* poll(Ref.get(outcomes), (os) => os.includes("42:Rescheduled"))
            yield* open(firstDone)
            yield* queue.awaitIdle

            const intervals = yield* Ref.get(rec.intervals)
            const runs42 = intervals.filter((i) => i.jid === first.job.jid || i.jid === whileRunning.job.jid)
            assert.strictEqual(runs42.length, 2)
            assertNoOverlap(runs42)
            assert.strictEqual(intervals.filter((i) => i.jid === other.job.jid).length, 1)
            const os = yield* Ref.get(outcomes)
            assert.include(os, "42:Rescheduled")
            assert.strictEqual(os.filter((o) => o === "42:Performed").length, 2)
            assert.deepStrictEqual(os.filter((o) => o.startsWith("43")), ["43:Performed"])
            assert.deepStrictEqual(yield* holdersOf(report, first.digest, "queue"), [])
            assert.deepStrictEqual(yield* holdersOf(report, first.digest, "run"), [])
          })
        ))

      it.effect("while_executing: ten duplicates all enter the queue and all run, never two at once", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const job = yield* define({
              worker: "RebuildIndexJob",
              lock: "while_executing",
              onConflict: "reschedule",
              rescheduleDelay: 20
            })
            const rec = yield* recorder
            const enqueued = yield* Effect.forEach(Array.from({ length: 10 }), () => job.enqueue(["products"]))
            assert.deepStrictEqual(enqueued.map((o) => o._tag), Array(10).fill("Enqueued"))
            assert.strictEqual((yield* queue.snapshot).ready.length, 10)
            yield* queue.work((j) => job.server(j, rec.perform(j, 25)), { concurrency: 4 })
            yield* queue.awaitIdle
            const intervals = yield* Ref.get(rec.intervals)
            assert.strictEqual(intervals.length, 10)
            assert.strictEqual(new Set(intervals.map((i) => i.jid)).size, 10)
            assertNoOverlap(intervals)
          })
        ))

      it.effect("while_executing with lockLimit 3: at most three at once, and three at some point", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const job = yield* define({
              worker: "SyncContactsJob",
              lock: "while_executing",
              lockLimit: 3,
              onConflict: "reschedule",
              rescheduleDelay: 20
            })
            const rec = yield* recorder
            // The first three performs run until the third has started, so three run at once however the machine
            // schedules them; the rest take 20 ms. How many run at once is counted inside the perform.
            const thirdStarted = yield* gate
            const starts = yield* Ref.make(0)
            const running = yield* Ref.make(0)
            const most = yield* Ref.make(0)
            const perform = (j: Job.Job) =>
              Effect.acquireUseRelease(
                Effect.tap(Ref.updateAndGet(running, (n) => n + 1), (n) => Ref.update(most, (m) => Math.max(m, n))),
                () =>
                  Effect.flatMap(Ref.updateAndGet(starts, (n) => n + 1), (nth) =>
                    nth > 3
                      ? rec.perform(j, 20)
                      : Effect.andThen(nth === 3 ? open(thirdStarted) : Effect.void, rec.held(j, thirdStarted))),
                () => Ref.update(running, (n) => n - 1)
              )
            yield* Effect.forEach(Array.from({ length: 10 }), () => job.enqueue([7]))
            yield* queue.work((j) => job.server(j, perform(j)), { concurrency: 10 })
            yield* queue.awaitIdle
            const intervals = yield* Ref.get(rec.intervals)
            assert.strictEqual(intervals.length, 10)
            assert.strictEqual(yield* Ref.get(most), 3)
            assert.isAtMost(maxConcurrent(intervals), 3)
          })
        ))

      it.effect("until_executing: a push while queued is refused, a push during perform is accepted", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const job = yield* define({ worker: "SyncContactJob", lock: "until_executing" })
            const rec = yield* recorder
            const first = yield* job.enqueue([1])
            assert.strictEqual((yield* job.enqueue([1]))._tag, "Skipped")
            const firstDone = yield* gate
            yield* queue.work(
              (j) => job.server(j, j.jid === first.job.jid ? rec.held(j, firstDone) : rec.perform(j, 10)),
              { concurrency: 1 }
            )
            yield* poll(Ref.get(rec.started), (s) => s.includes(first.job.jid))
            const during = yield* job.enqueue([1])
            assert.strictEqual(during._tag, "Enqueued")
            yield* open(firstDone)
            yield* queue.awaitIdle
            assert.strictEqual((yield* Ref.get(rec.intervals)).length, 2)
          })
        ))

      it.effect("until_executed: refused during perform; a failure keeps the lock for the retry; success releases", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const job = yield* define({ worker: "ChargeCustomerJob", lock: "until_executed" })
            const rec = yield* recorder
            const attempts = yield* Ref.make(0)
            const first = yield* job.enqueue([1])
            // Each attempt runs until the test lets it end: the first then fails, the retry succeeds.
            const attemptDone = [yield* gate, yield* gate] as const
            const perform = (j: Job.Job) =>
              Effect.flatMap(Ref.getAndUpdate(attempts, (n) => n + 1), (n) =>
                n === 0
                  ? Effect.andThen(rec.held(j, attemptDone[0]), Effect.fail("card declined" as const))
                  : rec.held(j, attemptDone[1]))
            yield* queue.work((j) => job.server(j, perform(j)), { concurrency: 1 })
            yield* poll(Ref.get(rec.started), (s) => s.includes(first.job.jid))
            assert.strictEqual((yield* job.enqueue([1]))._tag, "Skipped")
            yield* open(attemptDone[0])
            // After the failure the retry (same jid) is scheduled; the lock is still the first job's.
            yield* poll(queue.events, (es) => es.some((e) => e.type === "retried"))
            assert.deepStrictEqual(yield* holdersOf(job, first.digest, "queue"), [first.job.jid])
            assert.strictEqual((yield* job.enqueue([1]))._tag, "Skipped")
            yield* open(attemptDone[1])
            yield* queue.awaitIdle
            const intervals = yield* Ref.get(rec.intervals)
            assert.deepStrictEqual(intervals.map((i) => i.jid), [first.job.jid, first.job.jid])
            assert.deepStrictEqual(yield* holdersOf(job, first.digest, "queue"), [])
            assert.strictEqual((yield* job.enqueue([1]))._tag, "Enqueued")
          })
        ))

      it.effect("until_executed: a job reported dead releases its lock", () =>
        Effect.gen(function*() {
          const job = yield* define({ worker: "ChargeCustomerJob", lock: "until_executed" })
          yield* withQueue(
            (queue) =>
              Effect.gen(function*() {
                const first = yield* job.enqueue([2])
                yield* queue.work((j) => job.server(j, Effect.fail("always" as const)), {
                  onDeath: (j) => job.died(j)
                })
                yield* queue.awaitIdle
                const snapshot = yield* queue.snapshot
                assert.strictEqual(snapshot.dead.length, 1)
                assert.include(snapshot.dead[0]!.reason, "retries exhausted")
                assert.deepStrictEqual(yield* holdersOf(job, first.digest, "queue"), [])
                assert.strictEqual((yield* job.enqueue([2]))._tag, "Enqueued")
              }),
            { maxRetries: 1 }
          )
        }))

      it.effect("until_expired: refused within the TTL even after the job finished, accepted after; no afterUnlock", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const unlocked = yield* Ref.make(0)
            const job = yield* define({
              worker: "SendDailyDigestJob",
              lock: "until_expired",
              // Two seconds: the duplicate below comes a few ms after the lock, however busy the machine.
              lockTtl: "2 seconds",
              afterUnlock: () => Ref.update(unlocked, (n) => n + 1)
            })
            const rec = yield* recorder
            yield* queue.work((j) => job.server(j, rec.perform(j, 10)))
            assert.strictEqual((yield* job.enqueue([5]))._tag, "Enqueued")
            yield* queue.awaitIdle
            assert.strictEqual((yield* Ref.get(rec.intervals)).length, 1)
            assert.strictEqual((yield* job.enqueue([5]))._tag, "Skipped")
            yield* Effect.sleep(2100)
            assert.strictEqual((yield* job.enqueue([5]))._tag, "Enqueued")
            yield* queue.awaitIdle
            assert.strictEqual(yield* Ref.get(unlocked), 0)
          })
        ))

      it.effect("raise: DuplicateJob on the client, ExecutionConflict on the server (and the queue retries)", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const client = yield* define({ worker: "ChargeCustomerJob", lock: "until_executed", onConflict: "raise" })
            const first = yield* client.enqueue([9])
            const duplicate = yield* Effect.flip(client.enqueue([9]))
            assert.strictEqual(duplicate._tag, "DuplicateJob")
            if (duplicate._tag === "DuplicateJob") {
              assert.strictEqual(duplicate.digest, first.digest)
              assert.deepStrictEqual(duplicate.holders, [first.job.jid])
            }

            const server = yield* define({ worker: "RebuildIndexJob", lock: "while_executing", onConflict: "raise" })
            const rec = yield* recorder
            const holder = server.job(["x"])
            const holderDone = yield* gate
            const blocker = yield* Effect.forkChild(server.server(holder, rec.held(holder, holderDone)))
            yield* poll(Ref.get(rec.started), (s) => s.includes(holder.jid))
            const dup = server.job(["x"])
            const conflict = yield* Effect.flip(server.server(dup, rec.perform(dup, 10)))
            assert.strictEqual(conflict._tag, "ExecutionConflict")
            if (conflict._tag === "ExecutionConflict") {
              assert.deepStrictEqual(conflict.holders, [holder.jid])
              assert.strictEqual(conflict.digest, yield* server.digest(["x"]))
            }
            // Through the queue: the raised conflict fails the job, the retry runs once the holder is done.
            yield* queue.work((j) => server.server(j, rec.perform(j, 10)))
            yield* queue.push(dup)
            yield* poll(queue.events, (es) => es.some((e) => e.type === "retried" && e.job.jid === dup.jid))
            yield* open(holderDone)
            yield* Fiber.join(blocker)
            yield* queue.awaitIdle
            assert.isTrue((yield* Ref.get(rec.intervals)).some((i) => i.jid === dup.jid))
          }), { maxRetries: 50 }))

      it.effect("reject: the duplicate goes to the dead set with a reason, on either side", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const client = yield* define({ worker: "ChargeCustomerJob", lock: "until_executed", onConflict: "reject" })
            const first = yield* client.enqueue([3])
            const rejected = yield* client.enqueue([3])
            assert.strictEqual(rejected._tag, "Rejected")
            const server = yield* define({ worker: "ImportJob", lock: "while_executing_reject" })
            const rec = yield* recorder
            const holder = server.job([1])
            const holderDone = yield* gate
            const blocker = yield* Effect.forkChild(server.server(holder, rec.held(holder, holderDone)))
            yield* poll(Ref.get(rec.started), (s) => s.includes(holder.jid))
            const dup = server.job([1])
            const outcome = yield* server.server(dup, rec.perform(dup, 10))
            assert.strictEqual(outcome._tag, "Rejected")
            yield* open(holderDone)
            yield* Fiber.join(blocker)
            const dead = (yield* queue.snapshot).dead
            assert.deepStrictEqual(dead.map((d) => d.job.jid), [rejected.job.jid, dup.jid])
            assert.include(dead[0]!.reason, first.job.jid)
            assert.include(dead[1]!.reason, holder.jid)
            assert.isFalse((yield* Ref.get(rec.intervals)).some((i) => i.jid === dup.jid))
          })
        ))

      it.effect("replace: removes the queued holder and its lock and enqueues the new job; skips a running holder", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const job = yield* define({ worker: "ExportJob", lock: "until_executed", onConflict: "replace" })
            const old = yield* job.enqueue([1])
            const replacing = yield* job.enqueue([1])
            assert.strictEqual(replacing._tag, "Replaced")
            assert.deepStrictEqual(replacing._tag === "Replaced" && replacing.replaced, [old.job.jid])
            assert.deepStrictEqual((yield* queue.snapshot).ready.map((j) => j.jid), [replacing.job.jid])
            assert.deepStrictEqual(yield* holdersOf(job, old.digest, "queue"), [replacing.job.jid])

            const rec = yield* recorder
            const runningDone = yield* gate
            yield* queue.work((j) => job.server(j, rec.held(j, runningDone)))
            yield* poll(Ref.get(rec.started), (s) => s.includes(replacing.job.jid))
            const late = yield* job.enqueue([1])
            assert.strictEqual(late._tag, "Skipped")
            yield* open(runningDone)
            yield* queue.awaitIdle
            assert.deepStrictEqual((yield* Ref.get(rec.intervals)).map((i) => i.jid), [replacing.job.jid])
          })
        ))

      it.effect("replace: an orphaned lock (holder unknown to the queue) is replaced", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const job = yield* define({ worker: "ExportJob", lock: "until_executed", onConflict: "replace" })
            const digest = yield* job.digest([2])
            yield* Lock.lock(job.definition, { digest, jid: "lost-job" })
            const outcome = yield* job.enqueue([2])
            assert.strictEqual(outcome._tag, "Replaced")
            assert.deepStrictEqual(yield* holdersOf(job, digest, "queue"), [outcome.job.jid])
          })
        ))

      it.effect("reschedule: the conflicting execution is put off by rescheduleDelay and runs later", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const job = yield* define({
              worker: "RebuildIndexJob",
              lock: "while_executing",
              onConflict: "reschedule",
              rescheduleDelay: 150
            })
            const rec = yield* recorder
            const holder = job.job(["y"])
            const holderDone = yield* gate
            const blocker = yield* Effect.forkChild(job.server(holder, rec.held(holder, holderDone)))
            yield* poll(Ref.get(rec.started), (s) => s.includes(holder.jid))
            const dup = job.job(["y"])
            const now = yield* Clock.currentTimeMillis
            const outcome = yield* job.server(dup, rec.perform(dup, 10))
            assert.strictEqual(outcome._tag, "Rescheduled")
            if (outcome._tag === "Rescheduled") {
              assert.isAtLeast(outcome.at, now + 150)
              // Put on the queue's schedule for that time (read from the events: by now it may have become ready).
              const scheduled = (yield* queue.events).filter((e) => e.type === "scheduled")
              assert.deepStrictEqual(
                scheduled.map((e) => [e.job.jid, e.detail]),
                [[dup.jid, new Date(outcome.at).toISOString()]]
              )
            }
            yield* open(holderDone)
            yield* Fiber.join(blocker)
            yield* queue.work((j) => job.server(j, rec.perform(j, 10)))
            yield* queue.awaitIdle
            const run = (yield* Ref.get(rec.intervals)).find((i) => i.jid === dup.jid)
            assert.isDefined(run)
            assert.isAtLeast(run!.start, now + 150)
          })
        ))

      it.effect("a scheduled job's lockTtl counts from its run time", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const job = yield* define({ worker: "ReminderJob", lock: "until_executed", lockTtl: 200 })
            const now = yield* Clock.currentTimeMillis
            // Run in 10 s (its lock ends 200 ms later): the check below, past the bare TTL, falls long before.
            const scheduled = yield* job.enqueue([1], { at: now + 10_000 })
            assert.strictEqual(scheduled._tag, "Enqueued")
            assert.strictEqual((yield* queue.snapshot).scheduled.length, 1)
            yield* Effect.sleep(300)
            // Past the bare TTL but before the run time: still a duplicate.
            assert.strictEqual((yield* job.enqueue([1]))._tag, "Skipped")
          })
        ))

      it.effect("until_and_while_executing whose queue lock was deleted still runs and counts uniqueness_lapsed", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const job = yield* define({ worker: "RebuildReportJob", lock: "until_and_while_executing" })
            const lapsed = Metrics.uniquenessLapsed.of("until_and_while_executing", "queue")
            const before = (yield* Metric.value(lapsed)).count
            const enqueued = yield* job.enqueue([77])
            // Someone deletes the lock (an admin, a TTL): the job must still run.
            yield* Effect.flatMap(
              Redis.RedisService,
              (redis) => redis.unlock(Lock.keyOf(job.definition, enqueued.digest, "queue"), enqueued.job.jid)
            )
            const outcome = yield* job.server(enqueued.job, Effect.succeed("ran"))
            assert.strictEqual(outcome._tag, "Performed")
            assert.strictEqual(outcome._tag === "Performed" && outcome.value, "ran")
            assert.strictEqual((yield* Metric.value(lapsed)).count, before + 1)
            // A retry of the same jid is expected to find no queue lock: not counted.
            yield* job.server({ ...enqueued.job, retryCount: 1 }, Effect.void)
            assert.strictEqual((yield* Metric.value(lapsed)).count, before + 1)
          })
        ))

      it.effect("interrupting perform releases the execution lock", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const job = yield* define({ worker: "RebuildIndexJob", lock: "while_executing" })
            const started = yield* Deferred.make<void>()
            const j = job.job(["z"])
            const fiber = yield* Effect.forkChild(job.server(j, Effect.andThen(Deferred.succeed(started, undefined), Effect.never)))
            yield* Deferred.await(started)
            const digest = yield* job.digest(["z"])
            assert.deepStrictEqual(yield* holdersOf(job, digest, "run"), [j.jid])
            yield* Fiber.interrupt(fiber)
            assert.deepStrictEqual(yield* holdersOf(job, digest, "run"), [])
          })
        ))

      it.effect("a lease renewal that finds the lock gone fails perform with LockLost", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const job = yield* define({ worker: "RebuildIndexJob", lock: "while_executing", lockLease: 150 })
            const started = yield* Deferred.make<void>()
            const finished = yield* Ref.make(false)
            const j = job.job(["w"])
            const fiber = yield* Effect.forkChild(
              job.server(
                j,
                Deferred.succeed(started, undefined).pipe(
                  // Far longer than losing the lock takes, however busy the machine.
                  Effect.andThen(Effect.sleep(30_000)),
                  Effect.andThen(Ref.set(finished, true))
                )
              )
            )
            yield* Deferred.await(started)
            const digest = yield* job.digest(["w"])
            yield* Effect.flatMap(Redis.RedisService, (redis) => redis.unlock(Lock.keyOf(job.definition, digest, "run"), j.jid))
            const error = yield* Effect.flip(Fiber.join(fiber))
            assert.strictEqual(error._tag, "LockLost")
            assert.isFalse(yield* Ref.get(finished))
          })
        ))

      it.effect("a custom strategy function decides the outcome", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const seen = yield* Ref.make<Array<string>>([])
            const custom: Strategy.ClientStrategy = (c) =>
              Effect.as(Ref.update(seen, (s) => [...s, ...c.conflict.holders]), Strategy.skipped(c))
            const job = yield* define({ worker: "CustomJob", lock: "until_executed", onConflict: { client: custom } })
            const first = yield* job.enqueue([1])
            assert.strictEqual((yield* job.enqueue([1]))._tag, "Skipped")
            assert.deepStrictEqual(yield* Ref.get(seen), [first.job.jid])
          })
        ))

      it.effect("a failing enqueue releases the lock it took", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const job = yield* define({ worker: "ChargeCustomerJob", lock: "until_executed" })
            const j = job.job([11])
            const error = yield* Effect.flip(job.client(j, () => Effect.fail("broker down" as const)))
            assert.strictEqual(error, "broker down")
            assert.deepStrictEqual(yield* holdersOf(job, yield* job.digest([11]), "queue"), [])
          })
        ))
    })
  })
}


// Issue 18, item 6: a worker whose options differ from the producer's would leave the producer's lock for good,
// silently. Its release finds nothing: a warning naming the likely cause, and a counter.
for (const [name, store] of stores) {
  describe(`middleware: ${name}: a release that finds nothing to release`, () => {
    layer(store, { excludeTestServices: true })((it) => {
      it.effect("producer under lockPrefix billing, worker without: the worker warns and counts release_missed", () =>
        Effect.gen(function*() {
          // Prefixes from the defaults: the producer's and the worker's differ.
          const definition = LockOptions.unsafeMake({ lock: "until_executed" })
          const prefix = RedisTest.uniquePrefix("miss")
          const job: Job.Job = { worker: "MissJob", queue: "q", args: [1], jid: `miss-${name}` }
          const enqueued = yield* Middleware.client(definition, job, Effect.succeed).pipe(
            Effect.provide(Defaults.layer({ lockPrefix: `${prefix}-billing` })),
            Effect.provide(MemoryQueue.layer())
          )
          assert.strictEqual(enqueued._tag, "Enqueued")
          const missed = Metrics.releaseMissed.of("until_executed", "queue")
          const before = (yield* Metric.value(missed)).count
          const warnings: Array<string> = []
          const capture = Logger.make(({ logLevel, message }) => {
            if (logLevel === "Warn") warnings.push(String(message))
          })
          // The job as a worker might receive it: without the digest the producer stamped, so it computes its own.
          const performed = yield* Middleware.server(definition, { ...job, lockDigest: undefined }, Effect.void).pipe(
            Effect.provide(Defaults.layer({ lockPrefix: prefix })),
            Effect.provide(MemoryQueue.layer()),
            Effect.provide(Logger.layer([capture]))
          )
          assert.strictEqual(performed._tag, "Performed")
          assert.strictEqual((yield* Metric.value(missed)).count, before + 1)
          assert.strictEqual(warnings.length, 1, JSON.stringify(warnings))
          assert.include(warnings[0], "found nothing to release")
          assert.include(warnings[0], "lockPrefix")
          assert.include(warnings[0], job.jid!)
        }))

      // until_executing releases before it performs: a retry's release finds what its first attempt released.
      it.effect("until_executing: a retry (retryCount 1) finds its lock released by its first attempt: no warning, nothing counted", () =>
        Effect.gen(function*() {
          const definition = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: RedisTest.uniquePrefix("retry") })
          const job: Job.Job = { worker: "RetryJob", queue: "q", args: [1], jid: `retry-${name}` }
          const enqueued = yield* Middleware.client(definition, job, Effect.succeed).pipe(Effect.provide(MemoryQueue.layer()))
          const missed = Metrics.releaseMissed.of("until_executing", "queue")
          const before = (yield* Metric.value(missed)).count
          const warnings: Array<string> = []
          const capture = Logger.make(({ logLevel, message }) => {
            if (logLevel === "Warn") warnings.push(String(message))
          })
          const attempt = (received: Job.Job, perform: Effect.Effect<void, string>) =>
            Effect.result(Middleware.server(definition, received, perform)).pipe(
              Effect.provide(MemoryQueue.layer()),
              Effect.provide(Logger.layer([capture]))
            )
          const first = yield* attempt(enqueued.job, Effect.fail("first attempt fails"))
          assert.deepStrictEqual(first, Result.fail("first attempt fails"))
          const retry = yield* attempt({ ...enqueued.job, retryCount: 1 }, Effect.void)
          assert.strictEqual(Result.isSuccess(retry) ? retry.success._tag : retry.failure, "Performed")
          assert.deepStrictEqual(warnings, [], "the retry's release found nothing, as expected")
          assert.strictEqual((yield* Metric.value(missed)).count, before)
          // A first attempt whose lock is gone (deleted, say) is still said and counted.
          const copy = yield* attempt({ ...enqueued.job, jid: `${job.jid}-copy` }, Effect.void)
          assert.isTrue(Result.isSuccess(copy))
          assert.strictEqual(warnings.length, 1, JSON.stringify(warnings))
          assert.include(warnings[0], "found nothing to release")
          assert.strictEqual((yield* Metric.value(missed)).count, before + 1)
        }))

      it.effect("a release whose answer was lost (it ran, then timed out) and whose retry finds nothing says so; no afterUnlock", () =>
        Effect.gen(function*() {
          const redis = yield* Redis.RedisService
          const unlocked: Array<string> = []
          const definition = LockOptions.unsafeMake({
            lock: "until_executed",
            lockPrefix: RedisTest.uniquePrefix("lostans"),
            afterUnlock: (released) => Effect.sync(() => unlocked.push(released.jid))
          })
          const job: Job.Job = { worker: "LostAnswerJob", queue: "q", args: [1], jid: `lost-${name}` }
          const enqueued = yield* Middleware.client(definition, job, Effect.succeed).pipe(Effect.provide(MemoryQueue.layer()))
          // The first release runs, and its answer is lost on the way back.
          const lossy = losingUnlocks(redis, ["ran"])
          const warnings: Array<string> = []
          const capture = Logger.make(({ logLevel, message }) => {
            if (logLevel === "Warn") warnings.push(String(message))
          })
          const performed = yield* Middleware.server(definition, enqueued.job, Effect.void).pipe(
            Effect.provideService(Redis.RedisService, lossy),
            Effect.provide(MemoryQueue.layer()),
            Effect.provide(Logger.layer([capture]))
          )
          assert.strictEqual(performed._tag, "Performed")
          assert.deepStrictEqual(unlocked, [], "afterUnlock ran for a release nothing confirmed")
          assert.strictEqual(warnings.length, 1, JSON.stringify(warnings))
          assert.include(warnings[0], "could not be confirmed")
          assert.include(warnings[0], "afterUnlock did not run")
          assert.deepStrictEqual(yield* redis.holders(Lock.keyOf(definition, enqueued.digest, "queue")), [])
        }))
    })
  })
}

// Issue 18, item 11: the acquisition's reply came back after the point where the holder already counts the lock as
// lost (a store slow to answer): the perform never starts, the outcome is LockLost, and the hold is released.
describe("middleware: memory: a run lock answered past its lease deadline", () => {
  layer(Redis.layerMemory, { excludeTestServices: true })((it) => {
    for (const lock of ["while_executing", "until_and_while_executing"] as const) {
      it.effect(`${lock}: the perform never starts; LockLost naming the late answer; nothing is left held`, () =>
        Effect.gen(function*() {
          const redis = yield* Redis.RedisService
          // Answers each run-lock acquisition 400 ms after it ran: past the 300 ms lease's deadline (270 ms).
          const slow: Redis.RedisService["Service"] = {
            ...redis,
            lock: (key, request) =>
              Effect.tap(redis.lock(key, request), () => Effect.sleep(request.leaseMs > 0 ? 400 : 0)),
            handoff: (from, to, request, options) =>
              Effect.tap(redis.handoff(from, to, request, options), () => Effect.sleep(400))
          }
          const definition = LockOptions.unsafeMake({
            lock,
            lockLease: 300,
            lockPrefix: RedisTest.uniquePrefix("late")
          })
          const job: Job.Job = { worker: "LateJob", queue: "q", args: [1], jid: `late-${lock}` }
          const stamped = yield* Middleware.client(definition, job, Effect.succeed).pipe(
            Effect.provide(MemoryQueue.layer())
          )
          let ran = false
          const result = yield* Effect.result(
            Middleware.server(definition, stamped.job, Effect.sync(() => (ran = true))).pipe(
              Effect.provideService(Redis.RedisService, slow),
              Effect.provide(MemoryQueue.layer())
            )
          )
          assert.isFalse(ran, "the perform started past its lease deadline")
          assert.isTrue(result._tag === "Failure" && result.failure._tag === "LockLost", JSON.stringify(result))
          if (result._tag === "Failure" && result.failure._tag === "LockLost") assert.include(result.failure.reason, "answered")
          assert.deepStrictEqual(yield* redis.holders(Lock.keyOf(definition, stamped.digest, "run")), [])
        }))
    }
  })
})

// Issue 18, item 12: once a run lock's job has ended, nothing keeps the store's lease keeper (and so the process)
// alive: its loop ends at the last release, while the layer stays open, not at its next planned round.
for (const [name, store] of stores) {
  describe(`middleware: ${name}: the lease keeper after the last run lock`, () => {
    layer(store, { excludeTestServices: true })((it) => {
      it.effect("no loop is left once the job has ended", () =>
        Effect.gen(function*() {
          const redis = yield* Redis.RedisService
          const definition = LockOptions.unsafeMake({
            lock: "while_executing",
            lockLease: "60 seconds",
            lockPrefix: RedisTest.uniquePrefix("idle")
          })
          const job: Job.Job = { worker: "IdleJob", queue: "q", args: [1], jid: `idle-${name}` }
          // Held long enough for the keeper's loop to plan its next round (10 s away) before the release.
          const performed = yield* Middleware.server(
            definition,
            job,
            Effect.andThen(Effect.sleep(200), Effect.sync(() => Keeper.running(redis)))
          ).pipe(Effect.provide(MemoryQueue.layer()))
          assert.isTrue(performed._tag === "Performed" && performed.value, "a loop ran while the lock was held")
          for (let i = 0; i < 60 && Keeper.running(redis); i++) yield* Effect.sleep(50)
          assert.isFalse(Keeper.running(redis), "the keeper's loop outlived the last held lease")
        }))
    })
  })
}
