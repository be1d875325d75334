/**
 * The `JobQueue` contract cases, one suite per adapter: which calls may receive the job being performed (`schedule`,
 * `kill`) and which a job the queue never saw (`push`, `schedule`, `kill`), what `exists` answers for waiting,
 * delayed, active, retrying and finished jobs (and `"unknown"` for a job of a queue the adapter does not serve, in a
 * batch answered in order), and what `remove` may take. An adapter whose queue cannot do a thing by design (Effect's
 * `PersistedQueue`: no removal of a waiting job, no reschedule of the job being taken) declares it in `Capabilities`,
 * and the case asserts the refusal instead. Real time. Run on `MemoryQueue` and BullMQ
 * (test/jobqueue.conformance.test.ts) and on `PersistedQueue` (test/persistedqueue.conformance.test.ts).
 */
import { assert, describe, layer } from "@effect/vitest"
import type * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import * as Job from "../../src/Job.js"
import { JobQueue } from "../../src/JobQueue.js"
import { until } from "./bullmq.js"

type Port = Context.Service.Shape<typeof JobQueue>

export interface Harness {
  readonly queueName: string
  readonly port: Port
  /** Two workers running `handler` for each job; `schedule` and `kill` inside it act on the job being performed. */
  readonly work: (handler: (job: Job.Job) => Effect.Effect<unknown, unknown, JobQueue>) => Effect.Effect<void, never, Scope.Scope>
  readonly dead: Effect.Effect<ReadonlyArray<{ readonly jid: string; readonly reason: string }>>
}

/** What the adapter's queue can do; a `false` case asserts the refusal. */
export interface Capabilities {
  /** `schedule` of the job being performed brings it back under its jid. */
  readonly reschedulesPerforming: boolean
  /** `remove` of a waiting or delayed job removes it. */
  readonly removesWaiting: boolean
}

export interface Driver<R> {
  readonly name: string
  /** Retries: 2 after the first failure, 500 ms apart. */
  readonly make: Effect.Effect<Harness, unknown, Scope.Scope | R>
  readonly capabilities?: Capabilities | undefined
}

interface Run {
  readonly jid: string
  readonly at: number
  readonly retryCount: number
}

const all: Capabilities = { reschedulesPerforming: true, removesWaiting: true }

/** The contract suite for `driver`, its services from `services` (built once for the suite). */
export const contract = <R>(driver: Driver<R>, services: Layer.Layer<R, unknown>) =>
  describe(`JobQueue contract: ${driver.name}`, () => {
    const can = driver.capabilities ?? all
    layer(services, { excludeTestServices: true })((it) => {
      const setup = Effect.gen(function*() {
        const harness = yield* driver.make
        const runs = yield* Ref.make<ReadonlyArray<Run>>([])
        const record = (job: Job.Job) =>
          Ref.update(runs, (rs) => [...rs, { jid: job.jid, at: Date.now(), retryCount: job.retryCount ?? 0 }])
        const job = (n: number) => Job.make({ worker: "Contract", queue: harness.queueName, args: [n] })
        const runsOf = (jid: string) => Effect.map(Ref.get(runs), (rs) => rs.filter((r) => r.jid === jid))
        const presence = (job: Job.Job) => Effect.map(harness.port.exists([job]), ([answer]) => answer)
        return { ...harness, runs, record, job, runsOf, presence }
      })

      it.effect("push: a job the queue never saw runs once under its jid; it exists until it has run", () =>
        Effect.gen(function*() {
          const h = yield* setup
          const pushed = h.job(1)
          assert.strictEqual(yield* h.presence(pushed), "gone")
          yield* h.port.push(pushed)
          assert.strictEqual(yield* h.presence(pushed), "exists", "waiting")
          const release = yield* Deferred.make<void>()
          const started = yield* Deferred.make<void>()
          yield* h.work((job) =>
            Effect.andThen(Effect.andThen(h.record(job), Deferred.succeed(started, undefined)), Deferred.await(release))
          )
          yield* Deferred.await(started)
          assert.strictEqual(yield* h.presence(pushed), "exists", "active")
          yield* Deferred.succeed(release, undefined)
          assert.isTrue(yield* until(Effect.map(h.presence(pushed), (p) => p === "gone")), "finished: gone")
          assert.deepStrictEqual((yield* h.runsOf(pushed.jid)).map((r) => r.retryCount), [0])
        }))

      it.effect("schedule of a new job: it exists while delayed and runs once, no earlier than its time", () =>
        Effect.gen(function*() {
          const h = yield* setup
          yield* h.work(h.record)
          const later = h.job(2)
          const at = Date.now() + 400
          yield* h.port.schedule(later, at)
          assert.strictEqual(yield* h.presence(later), "exists", "delayed")
          assert.isTrue(yield* until(Effect.map(h.runsOf(later.jid), (rs) => rs.length === 1)))
          const [run] = yield* h.runsOf(later.jid)
          // Delays are timed by the producer's clock and the store's: allow a few ms between the two.
          assert.isAtLeast(run!.at, at - 5)
          assert.isTrue(yield* until(Effect.map(h.presence(later), (p) => p === "gone")))
          assert.strictEqual((yield* h.runsOf(later.jid)).length, 1)
        }))

      if (can.reschedulesPerforming) {
        it.effect("schedule of the job being performed: it comes back under its jid at its time, once", () =>
          Effect.gen(function*() {
            const h = yield* setup
            const back = yield* Ref.make(0)
            yield* h.work((job) =>
              Effect.gen(function*() {
                yield* h.record(job)
                if ((yield* Ref.getAndUpdate(back, (n) => n + 1)) === 0) {
                  const port = yield* JobQueue
                  yield* port.schedule(job, Date.now() + 300)
                }
              })
            )
            const again = h.job(3)
            yield* h.port.push(again)
            assert.isTrue(yield* until(Effect.map(Ref.get(back), (n) => n === 1)))
            assert.strictEqual(yield* h.presence(again), "exists", "delayed again under its jid")
            assert.isTrue(yield* until(Effect.map(h.runsOf(again.jid), (rs) => rs.length === 2)))
            assert.isTrue(yield* until(Effect.map(h.presence(again), (p) => p === "gone")))
            const runs = yield* h.runsOf(again.jid)
            assert.strictEqual(runs.length, 2)
            assert.isAtLeast(runs[1]!.at - runs[0]!.at, 300 - 5)
            assert.deepStrictEqual(runs.map((r) => r.retryCount), [0, 0], "a reschedule is not a retry")
            assert.deepStrictEqual(yield* h.dead, [])
          }))
      } else {
        it.effect("schedule of the job being performed: refused with a QueueError; the job stays its queue's", () =>
          Effect.gen(function*() {
            const h = yield* setup
            const refusals = yield* Ref.make<ReadonlyArray<string>>([])
            yield* h.work((job) =>
              Effect.gen(function*() {
                yield* h.record(job)
                const port = yield* JobQueue
                const refused = yield* Effect.flip(port.schedule(job, Date.now() + 300))
                yield* Ref.update(refusals, (rs) => [...rs, `${refused._tag}: ${refused.reason}`])
              })
            )
            const again = h.job(3)
            yield* h.port.push(again)
            assert.isTrue(yield* until(Effect.map(h.presence(again), (p) => p === "gone")))
            const [refusal, ...more] = yield* Ref.get(refusals)
            assert.deepStrictEqual(more, [])
            assert.match(refusal!, /^QueueError: PersistedQueue cannot put the job it is taking back/)
            assert.deepStrictEqual((yield* h.runsOf(again.jid)).map((r) => r.retryCount), [0], "ran once, not again")
            assert.deepStrictEqual(yield* h.dead, [])
          }))
      }

      it.effect(
        can.removesWaiting
          ? "remove: a waiting or delayed job goes; a running, finished or unknown one answers false"
          : "remove: answers false for every job (no removal), and a waiting or delayed job stays and runs",
        () =>
          Effect.gen(function*() {
            const h = yield* setup
            const waiting = h.job(4)
            const delayed = h.job(5)
            yield* h.port.push(waiting)
            yield* h.port.schedule(delayed, Date.now() + (can.removesWaiting ? 60_000 : 300))
            assert.strictEqual(yield* h.port.remove(waiting.jid), can.removesWaiting)
            assert.strictEqual(yield* h.port.remove(delayed.jid), can.removesWaiting)
            const still = can.removesWaiting ? "gone" : "exists"
            assert.strictEqual(yield* h.presence(waiting), still)
            assert.strictEqual(yield* h.presence(delayed), still)
            assert.isFalse(yield* h.port.remove("never-seen"))
            const release = yield* Deferred.make<void>()
            const started = yield* Deferred.make<void>()
            yield* h.work((job) =>
              Effect.andThen(
                Effect.andThen(h.record(job), Deferred.succeed(started, undefined)),
                job.args[0] === 6 ? Deferred.await(release) : Effect.void
              )
            )
            const running = h.job(6)
            yield* h.port.push(running)
            yield* Deferred.await(started)
            assert.isTrue(yield* until(Effect.map(h.runsOf(running.jid), (rs) => rs.length === 1)))
            assert.isFalse(yield* h.port.remove(running.jid), "running")
            yield* Deferred.succeed(release, undefined)
            assert.isTrue(yield* until(Effect.map(h.presence(running), (p) => p === "gone")))
            assert.isFalse(yield* h.port.remove(running.jid), "finished")
            if (can.removesWaiting) {
              assert.deepStrictEqual((yield* Ref.get(h.runs)).map((r) => r.jid), [running.jid], "removed jobs never ran")
            } else {
              assert.isTrue(yield* until(Effect.map(h.presence(delayed), (p) => p === "gone")))
              assert.sameMembers((yield* Ref.get(h.runs)).map((r) => r.jid), [waiting.jid, delayed.jid, running.jid])
            }
          })
      )

      it.effect("kill of a job the queue never saw (a client reject): dead with its reason, and it does not exist", () =>
        Effect.gen(function*() {
          const h = yield* setup
          const refused = h.job(7)
          yield* h.port.kill(refused, "duplicate of abc")
          assert.deepStrictEqual(yield* h.dead, [{ jid: refused.jid, reason: "duplicate of abc" }])
          assert.strictEqual(yield* h.presence(refused), "gone")
        }))

      it.effect("kill of the job being performed (a server reject): dead with its reason, not retried", () =>
        Effect.gen(function*() {
          const h = yield* setup
          yield* h.work((job) =>
            Effect.andThen(h.record(job), Effect.flatMap(JobQueue, (port) => port.kill(job, "rejected")))
          )
          const doomed = h.job(8)
          yield* h.port.push(doomed)
          assert.isTrue(yield* until(Effect.map(h.presence(doomed), (p) => p === "gone")))
          assert.deepStrictEqual(yield* h.dead, [{ jid: doomed.jid, reason: "rejected" }])
          assert.strictEqual((yield* h.runsOf(doomed.jid)).length, 1)
        }))

      it.effect("a failed job exists while it waits for its retry; the retry keeps the jid and counts retries", () =>
        Effect.gen(function*() {
          const h = yield* setup
          const release = yield* Deferred.make<void>()
          yield* h.work((job) =>
            Effect.gen(function*() {
              yield* h.record(job)
              if ((job.retryCount ?? 0) === 0) return yield* Effect.fail(new Error("first attempt fails"))
              yield* Deferred.await(release)
            })
          )
          const flaky = h.job(9)
          yield* h.port.push(flaky)
          assert.isTrue(yield* until(Effect.map(h.runsOf(flaky.jid), (rs) => rs.length === 1)))
          // Between the failure and the retry (500 ms later) it waits; were the machine slow enough for the retry
          // to have started, it is active (held on `release`): either way the queue still knows it.
          yield* Effect.sleep(100)
          assert.strictEqual(yield* h.presence(flaky), "exists", "failed, waiting for its retry")
          assert.isTrue(yield* until(Effect.map(h.runsOf(flaky.jid), (rs) => rs.length === 2)))
          assert.strictEqual(yield* h.presence(flaky), "exists", "the retry runs")
          yield* Deferred.succeed(release, undefined)
          assert.isTrue(yield* until(Effect.map(h.presence(flaky), (p) => p === "gone")))
          assert.deepStrictEqual((yield* h.runsOf(flaky.jid)).map((r) => r.retryCount), [0, 1])
        }))

      it.effect("exists: one answer per job, in the order asked; a job of a queue it does not serve is unknown, never gone", () =>
        Effect.gen(function*() {
          const h = yield* setup
          const waiting = h.job(10)
          const delayed = h.job(11)
          const never = h.job(12)
          yield* h.port.push(waiting)
          yield* h.port.schedule(delayed, Date.now() + 60_000)
          // Another queue's job, under the jid of one this queue holds and under one it never saw.
          const elsewhere = { jid: waiting.jid, queue: `${h.queueName}-other` }
          const unseen = { jid: never.jid, queue: `${h.queueName}-other` }
          assert.deepStrictEqual(
            yield* h.port.exists([never, waiting, unseen, delayed, elsewhere]),
            ["gone", "exists", "unknown", "exists", "unknown"]
          )
          assert.deepStrictEqual(yield* h.port.exists([]), [])
          if (can.removesWaiting) {
            assert.isTrue(yield* h.port.remove(waiting.jid))
            assert.deepStrictEqual(yield* h.port.exists([waiting, unseen]), ["gone", "unknown"])
          }
        }))
    })
  })
