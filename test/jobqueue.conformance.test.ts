/**
 * The `JobQueue` contract, one suite for every adapter (`MemoryQueue`, BullMQ on a private redis-server): which calls
 * may receive the job being performed (`schedule`, `kill`) and which a job the queue never saw (`push`, `schedule`,
 * `kill`), what `exists` answers for waiting, delayed, active, retrying and finished jobs (and `"unknown"` for a job of
 * a queue the adapter does not serve, in a batch answered in order), and what `remove` may
 * take. Real time: BullMQ's delays run on it, and the memory queue runs on the live clock here too.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import { Queue } from "bullmq"
import { Redis as IORedis } from "ioredis"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Job from "../src/Job.js"
import { JobQueue, type QueueError } from "../src/JobQueue.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as Bull from "./support/bullmq.js"
import * as RedisTest from "./support/redis.js"

type Port = Context.Service.Shape<typeof JobQueue>

interface Harness {
  readonly queueName: string
  readonly port: Port
  /** Two workers running `handler` for each job; `schedule` and `kill` inside it act on the job being performed. */
  readonly work: (handler: (job: Job.Job) => Effect.Effect<unknown, unknown, JobQueue>) => Effect.Effect<void, never, Scope.Scope>
  readonly dead: Effect.Effect<ReadonlyArray<{ readonly jid: string; readonly reason: string }>>
}

interface Driver {
  readonly name: string
  /** Retries: 2 after the first failure, 500 ms apart. */
  readonly make: Effect.Effect<Harness, unknown, Scope.Scope | RedisTest.TestRedis>
}

const memory: Driver = {
  name: "MemoryQueue",
  make: Effect.map(MemoryQueue.make({ maxRetries: 2, backoff: () => 500, queues: ["default"] }), (queue) => ({
    queueName: "default",
    port: queue,
    work: (handler) => queue.work((job) => Effect.provideService(handler(job), JobQueue, queue), { concurrency: 2 }),
    dead: Effect.map(queue.snapshot, (s) => s.dead.map(({ job, reason }) => ({ jid: job.jid, reason })))
  }))
}

const bullmq: Driver = {
  name: "BullMQ",
  make: Effect.gen(function*() {
    const name = Bull.uniqueName("conf")
    const queue = yield* Bull.queue(name)
    const port = yield* BullMQ.make(queue, { jobOptions: { attempts: 3, backoff: { type: "fixed", delay: 500 } } })
    const runPromise = Effect.runPromiseWith(yield* Effect.context<never>())
    const context = yield* Effect.context<RedisTest.TestRedis>()
    return {
      queueName: name,
      port,
      work: (handler) =>
        Effect.asVoid(Bull.worker(
          name,
          (bullJob, token) =>
            runPromise(
              BullMQ.performing(bullJob, token, Effect.provideService(handler(BullMQ.toJob(bullJob)), JobQueue, port))
            ),
          { concurrency: 2 }
        ).pipe(Effect.provide(context))),
      dead: Effect.promise(async () => {
        const entries = await port.deadLetter.getJobs(["waiting", "delayed", "completed", "failed"])
        return entries.map((entry) => {
          const letter = entry.data as BullMQ.DeadLetter
          return { jid: letter.job.jid, reason: letter.reason }
        })
      })
    } satisfies Harness
  })
}

interface Run {
  readonly jid: string
  readonly at: number
  readonly retryCount: number
}

for (const driver of [memory, bullmq]) {
  describe(`JobQueue contract: ${driver.name}`, () => {
    layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
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
          yield* h.work((job) => Effect.andThen(Effect.andThen(h.record(job), Deferred.succeed(started, undefined)), Deferred.await(release)))
          yield* Deferred.await(started)
          assert.strictEqual(yield* h.presence(pushed), "exists", "active")
          yield* Deferred.succeed(release, undefined)
          assert.isTrue(yield* Bull.until(Effect.map(h.presence(pushed), (p) => p === "gone")), "finished: gone")
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
          assert.isTrue(yield* Bull.until(Effect.map(h.runsOf(later.jid), (rs) => rs.length === 1)))
          const [run] = yield* h.runsOf(later.jid)
          // BullMQ times delays by the producer's clock and Redis': allow a few ms between the two.
          assert.isAtLeast(run!.at, at - 5)
          assert.isTrue(yield* Bull.until(Effect.map(h.presence(later), (p) => p === "gone")))
          assert.strictEqual((yield* h.runsOf(later.jid)).length, 1)
        }))

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
          assert.isTrue(yield* Bull.until(Effect.map(Ref.get(back), (n) => n === 1)))
          assert.strictEqual(yield* h.presence(again), "exists", "delayed again under its jid")
          assert.isTrue(yield* Bull.until(Effect.map(h.runsOf(again.jid), (rs) => rs.length === 2)))
          assert.isTrue(yield* Bull.until(Effect.map(h.presence(again), (p) => p === "gone")))
          const runs = yield* h.runsOf(again.jid)
          assert.strictEqual(runs.length, 2)
          assert.isAtLeast(runs[1]!.at - runs[0]!.at, 300 - 5)
          assert.deepStrictEqual(runs.map((r) => r.retryCount), [0, 0], "a reschedule is not a retry")
          assert.deepStrictEqual(yield* h.dead, [])
        }))

      it.effect("remove: a waiting or delayed job goes; a running, finished or unknown one answers false", () =>
        Effect.gen(function*() {
          const h = yield* setup
          const waiting = h.job(4)
          const delayed = h.job(5)
          yield* h.port.push(waiting)
          yield* h.port.schedule(delayed, Date.now() + 60_000)
          assert.isTrue(yield* h.port.remove(waiting.jid))
          assert.isTrue(yield* h.port.remove(delayed.jid))
          assert.strictEqual(yield* h.presence(waiting), "gone")
          assert.strictEqual(yield* h.presence(delayed), "gone")
          assert.isFalse(yield* h.port.remove("never-seen"))
          const release = yield* Deferred.make<void>()
          const started = yield* Deferred.make<void>()
          yield* h.work((job) =>
            Effect.andThen(Effect.andThen(h.record(job), Deferred.succeed(started, undefined)), Deferred.await(release))
          )
          const running = h.job(6)
          yield* h.port.push(running)
          yield* Deferred.await(started)
          assert.isFalse(yield* h.port.remove(running.jid), "running")
          yield* Deferred.succeed(release, undefined)
          assert.isTrue(yield* Bull.until(Effect.map(h.presence(running), (p) => p === "gone")))
          assert.isFalse(yield* h.port.remove(running.jid), "finished")
          assert.deepStrictEqual((yield* Ref.get(h.runs)).map((r) => r.jid), [running.jid], "removed jobs never ran")
        }))

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
          yield* h.work((job) => Effect.andThen(h.record(job), Effect.flatMap(JobQueue, (port) => port.kill(job, "rejected"))))
          const doomed = h.job(8)
          yield* h.port.push(doomed)
          assert.isTrue(yield* Bull.until(Effect.map(h.presence(doomed), (p) => p === "gone")))
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
          assert.isTrue(yield* Bull.until(Effect.map(h.runsOf(flaky.jid), (rs) => rs.length === 1)))
          // Between the failure and the retry (500 ms later) it waits; were the machine slow enough for the retry
          // to have started, it is active (held on `release`): either way the queue still knows it.
          yield* Effect.sleep(100)
          assert.strictEqual(yield* h.presence(flaky), "exists", "failed, waiting for its retry")
          assert.isTrue(yield* Bull.until(Effect.map(h.runsOf(flaky.jid), (rs) => rs.length === 2)))
          assert.strictEqual(yield* h.presence(flaky), "exists", "the retry runs")
          yield* Deferred.succeed(release, undefined)
          assert.isTrue(yield* Bull.until(Effect.map(h.presence(flaky), (p) => p === "gone")))
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
          assert.isTrue(yield* h.port.remove(waiting.jid))
          assert.deepStrictEqual(yield* h.port.exists([waiting, unseen]), ["gone", "unknown"])
        }))
    })
  })
}

// Every call is bounded: BullMQ's Redis stalled (CLIENT PAUSE) answers nothing, and each call fails with a
// QueueError once the adapter's timeout has passed, instead of waiting for it.
describe("JobQueue contract: BullMQ, its Redis stalled", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("push, schedule, remove, kill and exists each fail with a QueueError within the timeout", () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.start
        const url = new URL(server.url)
        const name = Bull.uniqueName("stalled")
        const queue = yield* Effect.acquireRelease(
          Effect.sync(() => new Queue(name, { connection: { host: url.hostname, port: Number(url.port) } })),
          (q) => Effect.promise(() => q.close().catch(() => undefined))
        )
        queue.on("error", () => {})
        const port = yield* BullMQ.make(queue, { timeout: 200 })
        const job = (n: number) => Job.make({ worker: "Stalled", queue: name, args: [n] })
        yield* port.push(job(0)) // connected, scripts loaded
        const control = yield* Effect.acquireRelease(
          Effect.sync(() => new IORedis(server.url)),
          (client) => Effect.sync(() => client.disconnect())
        )
        yield* Effect.promise(() => control.call("CLIENT", "PAUSE", "3000", "ALL"))
        const calls: ReadonlyArray<readonly [string, Effect.Effect<unknown, QueueError>]> = [
          ["push", port.push(job(1))],
          ["schedule", port.schedule(job(2), Date.now() + 60_000)],
          ["remove", port.remove("some-jid")],
          ["kill", port.kill(job(3), "reason")],
          ["exists", port.exists([job(4)])]
        ]
        for (const [operation, call] of calls) {
          const error = yield* Effect.flip(call)
          assert.strictEqual(error._tag, "QueueError", operation)
          assert.include(error.reason, "did not answer within 200 ms", operation)
        }
      }), { timeout: 30_000 })
  })
})

