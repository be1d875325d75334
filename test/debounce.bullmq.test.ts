/**
 * Issue 40 on real BullMQ: debounce with a maximum wait through `UniqueQueue.add` (the promise face) and through the
 * `JobQueue` port (`UniqueJob.enqueue` over `BullMQ.layer`), and "latest after the active one"
 * (until_and_while_executing, replace on the client, reschedule on the server) with two workers that pick the
 * follow-up up while the first job still runs.
 */
import { assert, describe, layer } from "@effect/vitest"
import type { Job as BullJob } from "bullmq"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as Bull from "./support/bullmq.js"
import { stream, uniqueProducers, violations } from "./support/debounce.js"
import * as RedisTest from "./support/redis.js"
import { type Data, lockKeys, rejection, sleep, uniqueQueue } from "./support/uniquequeue.js"

// When BullMQ will run a delayed job: its timestamp plus its delay.
const runsAt = (job: BullJob) => job.timestamp + (job.opts.delay ?? 0)

describe("debounce on BullMQ", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("UniqueQueue.add: a burst leaves one delayed job with the newest data, due no later than maxWait after the first add", () =>
      Effect.gen(function*() {
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
          lock: "until_executing",
          lockArgs: () => ["account-1"],
          debounce: { delay: "5 seconds", maxWait: "6 seconds" }
        })
        const firstBefore = Date.now()
        const outcomes: Array<string> = []
        let lastBefore = 0
        let lastAfter = 0
        let firstAfter = 0
        for (let n = 0; n < 5; n++) {
          if (n > 0) yield* Effect.promise(() => sleep(400))
          lastBefore = Date.now()
          outcomes.push((yield* Effect.promise(() => unique.add("Sync", { n })))._tag)
          lastAfter = Date.now()
          if (n === 0) firstAfter = lastAfter
        }
        assert.deepStrictEqual(outcomes, ["Enqueued", "Replaced", "Replaced", "Replaced", "Replaced"])
        const delayed = yield* Effect.promise(() => queue.getDelayed())
        assert.deepStrictEqual(delayed.map((job) => job.data), [{ n: 4 }], "one job waits: the newest")
        assert.strictEqual(yield* Effect.promise(() => queue.getWaitingCount()), 0)
        // The last add came more than 1 s after the first (4 × 400 ms): delay after it would pass maxWait, so the run
        // is held to maxWait after the first add (BullMQ's own timestamp comes a little after ours: its add's time).
        const due = runsAt(delayed[0]!)
        assert.isAtMost(due, firstAfter + 6_000 + (lastAfter - lastBefore))
        assert.isAtLeast(due, firstBefore + 6_000)
        assert.isBelow(due, lastBefore + 5_000, "maxWait, not delay, decided the run")
        // Run it now: once, with the newest data; the lock is gone with it.
        const performed: Array<number> = []
        yield* Effect.promise(() => delayed[0]!.promote())
        yield* Bull.worker(name, unique.processor(async (job) => void performed.push(job.data.n)))
        assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getCompletedCount()) === 1)))
        assert.deepStrictEqual(performed, [4])
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [])
      }), 30_000)

    // Issue 47, observation 1: two UniqueQueue instances in one process adding one digest every 10 ms. Each opened
    // windows of its own: 45 adds of 3 s answered Enqueued and the job ran once, at the end, where one instance runs it
    // every second. Now the window is the lock's, whichever instance adds: one Enqueued per window, each run due within
    // maxWait of its window's first add (+ 1 s for an add's own time to its lock on a busy machine), the newest data.
    it.effect("two UniqueQueue instances adding one digest every 10 ms: one window at a time, each run within maxWait of its first add", () =>
      Effect.gen(function*() {
        const { adds, drained, lockPrefix, runs } = yield* uniqueProducers(2, "until_executing", 200, 1_000)
        // Two add loops per instance: adds overlap more often on a busy machine.
        const triggers = yield* Effect.promise(() => stream([...adds, ...adds], 3_000))
        assert.isTrue(yield* Bull.until(drained))
        const enqueued = triggers.filter((t) => t.tag === "Enqueued").length
        const summary = JSON.stringify({ adds: triggers.length, enqueued, runs: runs.map((r) => r.n) })
        assert.isAbove(runs.length, 0, summary)
        assert.isAtMost(enqueued, runs.length, `each Enqueued opens a window, which ends in a run: ${summary}`)
        assert.deepStrictEqual(violations(triggers, runs, 1_000, 1_000), [], summary)
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [])
      }), 60_000)

    // Found by an outsider probe: an add that met the window's job starting (taken by a worker, its queue lock not
    // yet handed to its run lock) was timed from that job's window, long over, so it ran at once (and met the run
    // lock). It waits for the holder to let go and opens a window of its own, delay after itself.
    it.effect("an add that meets the window's job starting waits for it and opens a new window, delay after itself", () =>
      Effect.gen(function*() {
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
          lock: "until_and_while_executing",
          lockArgs: () => ["account-1"],
          debounce: { delay: 1_000, maxWait: 1_000 }
        })
        const manual = yield* Bull.manualWorker(name)
        const processor = unique.processor(async () => {})
        const first = yield* Effect.promise(() => unique.add("Sync", { n: 0 }))
        assert.strictEqual(first._tag, "Enqueued")
        yield* Effect.promise(() => (first as { value: BullJob }).value.promote())
        const starting = (yield* Effect.promise(() => manual.getNextJob("t0", { block: false })))!
        // The first window's maxWait passes while its job is active, its handoff not yet made.
        yield* Effect.promise(() => sleep(1_100))
        const trigger = unique.add("Sync", { n: 1 })
        yield* Effect.promise(() => sleep(20))
        yield* Effect.promise(() => processor(starting as never, "t0").then((value) => starting.moveToCompleted(value, "t0", false)))
        const next = yield* Effect.promise(() => trigger)
        assert.strictEqual(next._tag, "Enqueued", "the starting job let go: a new window")
        const delayed = yield* Effect.promise(() => queue.getDelayed())
        assert.deepStrictEqual(delayed.map((job) => job.data), [{ n: 1 }])
        assert.isAbove(delayed[0]!.opts.delay ?? 0, 500, "delay after itself, not at once")
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [`${next.digest}:LOCKED`], "its lock, and no other")
      }), 30_000)

    it.effect("UniqueQueue.add refuses a delay or timestamp of its own for a debounced job, naming the option", () =>
      Effect.gen(function*() {
        const { queue, unique } = yield* uniqueQueue({ lock: "until_executed", debounce: { delay: 1_000 } })
        for (const [field, opts] of [["opts.delay", { delay: 5 }], ["opts.timestamp", { timestamp: Date.now() }]] as const) {
          const error = yield* rejection(() => unique.add("Sync", { n: 1 }, opts))
          assert.instanceOf(error, LockOptions.InvalidLockOptions)
          assert.strictEqual((error as LockOptions.InvalidLockOptions).field, field)
          assert.match((error as LockOptions.InvalidLockOptions).reason, /debounce sets when each job runs/)
        }
        assert.strictEqual(yield* Effect.promise(() => queue.count()), 0)
      }))

    it.effect("through the JobQueue port (UniqueJob.enqueue over BullMQ.layer): the same one delayed job, newest data", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const name = Bull.uniqueName("debounce-port")
        const queue = yield* Bull.queue(name)
        const job = UniqueJob.unsafeMake({
          worker: "Sync",
          queue: name,
          lock: "until_and_while_executing",
          lockPrefix: RedisTest.uniquePrefix("debounce-port"),
          lockArgs: () => ["account-1"],
          debounce: { delay: "10 seconds", maxWait: "1 minute" }
        })
        const outcomes = yield* Effect.forEach([0, 1, 2], (n) => Effect.map(job.enqueue([n]), (o) => o._tag)).pipe(
          Effect.provide(Layer.merge(BullMQ.layer(queue), Redis.layer({ url: source.url })))
        )
        assert.deepStrictEqual(outcomes, ["Enqueued", "Replaced", "Replaced"])
        const delayed = yield* Effect.promise(() => queue.getDelayed())
        assert.deepStrictEqual(delayed.map((j) => j.data), [2], "a BullMQ job carries its one argument as its data")
        assert.isAbove(runsAt(delayed[0]!), Date.now() + 8_000, "10 s after the newest add")
      }))

    // BullMQ's keepLastIfActive: triggers while a job runs leave exactly one follow-up, with the newest data; none is
    // lost and two never run at once. Two workers: the follow-up is picked up while the first runs, meets its run lock
    // and is rescheduled, so the triggers also meet it starting (a holder caught between active and delayed).
    it.effect("latest after the active one: triggers during a run leave one follow-up with the newest data; never two at once", () =>
      Effect.gen(function*() {
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
          lock: "until_and_while_executing",
          onConflict: { client: "replace", server: "reschedule" },
          rescheduleDelay: 50,
          lockArgs: () => ["account-1"]
        })
        let running = 0
        let most = 0
        const performed: Array<number> = []
        let release: () => void = () => {}
        const firstHeld = new Promise<void>((resolve) => (release = resolve))
        let started: () => void = () => {}
        const firstStarted = new Promise<void>((resolve) => (started = resolve))
        yield* Bull.worker(name, unique.processor(async (job: BullJob<Data>) => {
          running++
          most = Math.max(most, running)
          performed.push(job.data.n)
          if (job.data.n === 0) {
            started()
            await firstHeld
          }
          running--
        }), { concurrency: 2 })
        assert.strictEqual((yield* Effect.promise(() => unique.add("Sync", { n: 0 })))._tag, "Enqueued")
        yield* Effect.promise(() => firstStarted)
        const outcomes: Array<string> = []
        for (let n = 1; n <= 20; n++) {
          outcomes.push((yield* Effect.promise(() => unique.add("Sync", { n })))._tag)
          yield* Effect.promise(() => sleep(15))
        }
        assert.deepStrictEqual(outcomes.filter((tag) => tag !== "Enqueued" && tag !== "Replaced"), [], outcomes.join())
        assert.strictEqual(outcomes[0], "Enqueued", "the first trigger during the run is the follow-up")
        release()
        assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getCompletedCount()) === 2)))
        yield* Effect.promise(() => sleep(200))
        assert.deepStrictEqual(performed, [0, 20], "the first, then one follow-up with the newest data")
        assert.strictEqual(most, 1, "never two at once")
        assert.strictEqual(yield* Effect.promise(() => queue.count()), 0)
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [])
      }), 30_000)

    // The race of issue 40: a trigger that meets the follow-up just made active (its handoff not yet refused and
    // rescheduled) cannot remove it, but must not be lost: it waits for the holder to let go or come back delayed.
    // Made deterministic with BullMQ's manual fetch: the follow-up is active, holding only its queue lock, while the
    // trigger's replace runs; then its handoff meets the first job's run lock and it is rescheduled.
    it.effect("latest after the active one: a trigger that meets the follow-up starting waits for its reschedule and replaces it", () =>
      Effect.gen(function*() {
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
          lock: "until_and_while_executing",
          onConflict: { client: "replace", server: "reschedule" },
          rescheduleDelay: "1 minute",
          lockArgs: () => ["account-1"]
        })
        const manual = yield* Bull.manualWorker(name)
        const performed: Array<number> = []
        let release: () => void = () => {}
        const firstHeld = new Promise<void>((resolve) => (release = resolve))
        const processor = unique.processor(async (job: BullJob<Data>) => {
          performed.push(job.data.n)
          if (job.data.n === 0) await firstHeld
        })
        // A failed assertion must not leave the first job holding the scope's close.
        yield* Effect.addFinalizer(() => Effect.sync(() => release()))
        const add = (n: number) => Effect.promise(() => unique.add("Sync", { n }).then((outcome) => outcome._tag))
        assert.strictEqual(yield* add(0), "Enqueued")
        const first = (yield* Effect.promise(() => manual.getNextJob("t0", { block: false })))!
        const firstDone = processor(first as never, "t0").then((value) => first.moveToCompleted(value, "t0", false))
        assert.isTrue(yield* Bull.until(Effect.sync(() => performed.length === 1)), "the first runs, under its run lock")
        assert.strictEqual(yield* add(1), "Enqueued", "the follow-up: the first's queue lock went to its run lock")
        const second = (yield* Effect.promise(() => manual.getNextJob("t1", { block: false })))!
        assert.strictEqual(second.data.n, 1)
        const trigger = unique.add("Sync", { n: 2 }).then((outcome) => outcome._tag)
        yield* Effect.promise(() => sleep(30))
        // The follow-up's handoff meets the first's run lock: rescheduled (BullMQ's DelayedError ends the processor).
        const secondEnd = yield* Effect.promise(() => processor(second as never, "t1").then(() => "completed", (e: Error) => e.name))
        assert.strictEqual(secondEnd, "DelayedError")
        assert.strictEqual(yield* Effect.promise(() => trigger), "Replaced", "the trigger waited and took its place")
        const waiting = [...yield* Effect.promise(() => queue.getDelayed()), ...yield* Effect.promise(() => queue.getWaiting())]
        assert.deepStrictEqual(waiting.map((job) => job.data), [{ n: 2 }], "one follow-up, with the newest data")
        release()
        yield* Effect.promise(() => firstDone)
        const third = (yield* Effect.promise(() => manual.getNextJob("t2", { block: false })))!
        assert.strictEqual(third.id, waiting[0]!.id)
        yield* Effect.promise(() => processor(third as never, "t2").then((value) => third.moveToCompleted(value, "t2", false)))
        assert.deepStrictEqual(performed, [0, 2], "1 was put back before its fn ran, then replaced; 2 ran after 0")
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [])
      }), 30_000)
  })
})
