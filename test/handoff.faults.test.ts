/**
 * Issue 35, observation 2, on one Redis: the lock Redis stops answering past the store's timeout while a UniqueQueue's
 * Worker runs a fixed workload (300 distinct jobs, concurrency 10). The jobs caught at their handoff or their run
 * lock's acquisition must not fail unrun: each goes back to its queue (no attempt spent) and runs once Redis answers.
 * The pause is a TCP proxy in front of the lock store that holds what either side sends (BullMQ reaches Redis
 * directly): what the store sent during the pause still runs in Redis when it resumes, after the caller gave up, so a
 * handoff whose answer was lost is part of the workload. Also: the same through `BullMQ.processor`, an answer Redis
 * would give again (WRONGTYPE) failing the job, and a dead job's release tried again across a dropped connection.
 * Counts only; no timing is asserted.
 */
import { assert, describe, layer } from "@effect/vitest"
import type { Job as BullJob } from "bullmq"
import * as Effect from "effect/Effect"
import * as References from "effect/References"
import * as Layer from "effect/Layer"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as Bull from "./support/bullmq.js"
import * as Proxy from "./support/proxy.js"
import * as RedisTest from "./support/redis.js"
import { type Data, lockKeys, sleep } from "./support/uniquequeue.js"

const workload = 300

interface Tally {
  /** Performs per job, by `n`. */
  readonly performed: Map<number, number>
  /** How often the processor was handed each job, by `n` (a job put back is handed again). */
  readonly handed: Map<number, number>
  overlaps: number
}

const bump = (map: Map<number, number>, n: number) => map.set(n, (map.get(n) ?? 0) + 1)

/** Runs the workload under `options`, the lock Redis paused for `pauseMs` once 30 jobs have performed. */
const pausedRun = (options: LockOptions.Options, pauseMs: number, takesSignal: boolean) =>
  Effect.gen(function*() {
    const { source } = yield* RedisTest.TestRedis
    const proxy = yield* Proxy.start(source.url)
    const name = Bull.uniqueName("pause")
    const queue = yield* Bull.queue(name)
    const lockPrefix = RedisTest.uniquePrefix("pause")
    const unique = yield* Effect.acquireRelease(
      Effect.sync(() =>
        UniqueQueue.make<Data>(queue, {
          ...options,
          lockPrefix,
          redis: { url: proxy.url, timeout: "1 second" },
          defaults: {},
          history: false
        })
      ),
      (u) => Effect.promise(() => u.close({ timeout: 10_000 }).catch(() => undefined))
    )
    yield* Effect.forEach(
      Array.from({ length: workload }, (_, n) => n),
      (n) => Effect.promise(() => unique.add("Work", { n }, { attempts: 1 })),
      { concurrency: 10, discard: true }
    )
    const tally: Tally = { performed: new Map(), handed: new Map(), overlaps: 0 }
    const running = new Set<number>()
    const perform = async (job: BullJob<Data>) => {
      const n = job.data.n
      if (running.has(n)) tally.overlaps++
      running.add(n)
      await sleep(20)
      running.delete(n)
      bump(tally.performed, n)
      return "done"
    }
    const fn = takesSignal
      ? (job: BullJob<Data>, _token: string | undefined, _signal: AbortSignal) => perform(job)
      : (job: BullJob<Data>) => perform(job)
    const processor = unique.processor(fn)
    // The pause begins as the 31st job is handed over, before its lock step: that step meets it. (A job waiting for
    // its release's answer holds its slot until Redis answers, so a pause begun at a random moment may meet no step.)
    let handed = 0
    let paused: Promise<void> | undefined
    yield* Bull.worker(name, (job: BullJob<Data>, token?: string) => {
      bump(tally.handed, job.data.n)
      if (++handed === 31) {
        Effect.runSync(proxy.stall)
        paused = sleep(pauseMs).then(() => Effect.runSync(proxy.resume))
      }
      return processor(job, token)
    }, { concurrency: 10 })
    assert.isTrue(yield* Bull.until(Effect.sync(() => paused !== undefined), 120_000), "the run started")
    yield* Effect.promise(() => paused!)
    const counts = () => Effect.promise(() => queue.getJobCounts("completed", "failed"))
    const settled = yield* Bull.until(
      Effect.map(counts(), (c) => (c.completed ?? 0) + (c.failed ?? 0) === workload),
      240_000
    )
    const ended = yield* counts()
    const failed = yield* Effect.promise(() => queue.getFailed())
    const reasons = failed.slice(0, 5).map((job) => `${job.id}: ${job.failedReason}`).join("\n")
    const putBack = [...tally.handed.values()].filter((times) => times > 1).length
    return { settled, ended, failed: failed.length, reasons, tally, putBack, lockPrefix }
  }).pipe(Effect.provideService(References.MinimumLogLevel, "None"))

describe("Redis failing before a job's perform, on one Redis (issue 35, observation 2)", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    const cases: ReadonlyArray<[string, LockOptions.Options, boolean]> = [
      // The handoff (one script: the queue lock to the run lock), on the processor's fiber.
      ["until_and_while_executing", { lock: "until_and_while_executing", lockLease: "10 seconds" }, false],
      // The run lock's acquisition on the hot path (a fn that takes no signal), and on a fiber (one that does).
      ["while_executing, hot path", { lock: "while_executing", lockLease: "10 seconds" }, false],
      ["while_executing, a fn that takes a signal", { lock: "while_executing", lockLease: "10 seconds" }, true]
    ]
    for (const [label, options, takesSignal] of cases) {
      it.effect(
        `${label}: 0 jobs failed unrun, each performed exactly once, 0 at once, 0 locks left without an end`,
        () =>
          Effect.gen(function*() {
            const run = yield* pausedRun(options, 2_500, takesSignal)
            assert.isTrue(run.settled, `every job ended: ${JSON.stringify(run.ended)}`)
            assert.strictEqual(run.failed, 0, `jobs failed:\n${run.reasons}`)
            assert.isAbove(run.putBack, 0, "the pause caught jobs at their lock step: they were handed again")
            assert.strictEqual(run.tally.overlaps, 0, "no job ran twice at once")
            assert.strictEqual(run.tally.performed.size, workload, "every job performed")
            const twice = [...run.tally.performed].filter(([, times]) => times !== 1)
            assert.deepStrictEqual(twice, [], "each job performed exactly once")
            assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(run.lockPrefix), [], "no lock without an end")
          }),
        300_000
      )
    }

    it.effect("a run lock key of a foreign type (WRONGTYPE): Redis answered, a retry would meet the same, so the job fails; it is not put back", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const name = Bull.uniqueName("wrongtype")
        const queue = yield* Bull.queue(name)
        const lockPrefix = RedisTest.uniquePrefix("wrongtype")
        const unique = yield* Effect.acquireRelease(
          Effect.sync(() =>
            UniqueQueue.make<Data>(queue, { lock: "while_executing", lockPrefix, defaults: {}, history: false })
          ),
          (u) => Effect.promise(() => u.close({ timeout: 10_000 }).catch(() => undefined))
        )
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { attempts: 1 }))
        // Another program's key where the run lock's hash would be.
        yield* Effect.promise(() => raw.set(`${added.digest}:RUN:LOCKED`, "not ours"))
        let handed = 0
        const processor = unique.processor(async () => "done")
        yield* Bull.worker(name, (job: BullJob<Data>, token?: string) => {
          handed++
          return processor(job, token)
        })
        const state = Effect.promise(() => queue.getJobState(added.job.jid))
        assert.isTrue(yield* Bull.until(Effect.map(state, (s) => s === "completed" || s === "failed")))
        const job = yield* Effect.promise(() => queue.getJob(added.job.jid))
        assert.strictEqual(yield* state, "failed")
        assert.include(job?.failedReason ?? "", "WRONGTYPE")
        assert.strictEqual(handed, 1, "handed once: not put back")
      }).pipe(Effect.provideService(References.MinimumLogLevel, "None")), 60_000)

    it.effect("BullMQ.processor (the Effect face): a handoff Redis does not answer in time puts the job back, no attempt spent; it runs once Redis answers", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const proxy = yield* Proxy.start(source.url)
        const name = Bull.uniqueName("effect")
        const queue = yield* Bull.queue(name)
        const definition = LockOptions.unsafeMake({
          lock: "until_and_while_executing",
          lockPrefix: RedisTest.uniquePrefix("effect")
        })
        let ran = 0
        // Built in the test's scope: the processor's store stays open while its jobs run.
        const context = yield* Layer.build(
          Layer.merge(Redis.layer({ url: proxy.url, timeout: "1 second" }), BullMQ.layer(queue))
        )
        const processor = yield* BullMQ.processor({ definition }, () => Effect.sync(() => ++ran)).pipe(
          Effect.provide(context)
        )
        yield* Effect.promise(() => queue.add("Work", { n: 1 }, { jobId: "effect-1", attempts: 1 }))
        const worker = yield* Bull.manualWorker(name)
        const job = yield* Effect.promise(() => worker.getNextJob("t0", { block: false }))
        yield* proxy.stall
        const first = yield* Effect.promise(() => processor(job!, "t0").then(String, (error: Error) => error.name))
        yield* proxy.resume
        assert.strictEqual(first, "DelayedError")
        assert.strictEqual(ran, 0)
        assert.strictEqual(yield* Effect.promise(() => queue.getJobState("effect-1")), "delayed")
        assert.strictEqual((yield* Effect.promise(() => queue.getJob("effect-1")))?.attemptsMade, 0, "no attempt spent")
        // Once Redis answers, the job runs (its late handoff was undone by the store, or it waits out its own lease).
        let answer = ""
        for (let attempt = 1; attempt <= 40 && answer !== "1"; attempt++) {
          yield* Effect.promise(() => queue.promoteJobs())
          const again = yield* Effect.promise(() => worker.getNextJob(`t${attempt}`, { block: false }))
          if (again === undefined) {
            yield* Effect.promise(() => sleep(250))
            continue
          }
          answer = yield* Effect.promise(() =>
            processor(again, `t${attempt}`).then(async (value) => {
              await again.moveToCompleted(value, `t${attempt}`, false)
              return String(value)
            }, (error: Error) => error.name)
          )
        }
        assert.strictEqual(answer, "1")
        assert.strictEqual(ran, 1)
      }).pipe(Effect.provideService(References.MinimumLogLevel, "None")), 120_000)

    it.effect("an until_executed job that fails for good while its lock Redis drops the connection: the release is tried again and the lock goes", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const proxy = yield* Proxy.start(source.url)
        const name = Bull.uniqueName("died")
        const queue = yield* Bull.queue(name)
        const lockPrefix = RedisTest.uniquePrefix("died")
        const unique = yield* Effect.acquireRelease(
          Effect.sync(() =>
            UniqueQueue.make<Data>(queue, {
              lock: "until_executed",
              lockPrefix,
              redis: { url: proxy.url, timeout: "1 second" },
              defaults: {},
              history: false
            })
          ),
          (u) => Effect.promise(() => u.close({ timeout: 10_000 }).catch(() => undefined))
        )
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { attempts: 1 }))
        // The fn fails on its only attempt just as the lock Redis's connection closes: the release finds no connection.
        yield* Bull.worker(name, unique.processor(async () => {
          await Effect.runPromise(proxy.drop)
          throw new Error("boom")
        }))
        const state = Effect.promise(() => queue.getJobState(added.job.jid))
        assert.isTrue(yield* Bull.until(Effect.map(state, (s) => s === "failed" || s === "completed")))
        assert.strictEqual(yield* state, "failed")
        assert.isTrue(
          yield* Bull.until(Effect.map(lockKeys(lockPrefix), (keys) => keys.length === 0), 60_000),
          "the dead job's lock was released once Redis answered"
        )
      }).pipe(Effect.provideService(References.MinimumLogLevel, "None")), 120_000)
  })
})
