/**
 * The in-process queue on TestClock: delayed jobs, retries with the same jid, the dead set, removal.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Latch from "effect/Latch"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/testing/TestClock"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Job from "../src/Job.js"
import * as Lock from "../src/Lock.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"

const job = (args: ReadonlyArray<unknown>) => Job.make({ worker: "W", args })

describe("MemoryQueue", () => {
  it.effect("a scheduled job runs when TestClock reaches its time", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryQueue.make()
      const ran = yield* Ref.make<Array<string>>([])
      yield* queue.work((j) => Ref.update(ran, (r) => [...r, j.jid]))
      const later = job([1])
      yield* queue.schedule(later, 1000)
      yield* TestClock.adjust(999)
      assert.deepStrictEqual(yield* Ref.get(ran), [])
      assert.deepStrictEqual(yield* queue.exists([later]), ["exists"])
      yield* TestClock.adjust(1)
      yield* queue.awaitIdle
      assert.deepStrictEqual(yield* Ref.get(ran), [later.jid])
      assert.deepStrictEqual(yield* queue.exists([later]), ["gone"])
    }))

  it.effect("a failing job is retried with the same jid and a growing backoff, then dies with a reason", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryQueue.make({ maxRetries: 2, backoff: (n) => n * 100 })
      const attempts = yield* Ref.make<Array<[string, number]>>([])
      const died = yield* Ref.make<Array<string>>([])
      yield* queue.work(
        (j) => Effect.andThen(Ref.update(attempts, (a): Array<[string, number]> => [...a, [j.jid, j.retryCount ?? 0]]), Effect.fail("nope")),
        { onDeath: (j, reason) => Ref.update(died, (d) => [...d, `${j.jid}: ${reason}`]) }
      )
      const failing = job([2])
      yield* queue.push(failing)
      yield* TestClock.adjust(100)
      yield* TestClock.adjust(200)
      yield* queue.awaitIdle
      assert.deepStrictEqual(yield* Ref.get(attempts), [[failing.jid, 0], [failing.jid, 1], [failing.jid, 2]])
      const snapshot = yield* queue.snapshot
      assert.strictEqual(snapshot.dead.length, 1)
      assert.include(snapshot.dead[0]!.reason, "nope")
      assert.deepStrictEqual((yield* Ref.get(died)).length, 1)
    }))

  it.effect("remove takes a waiting or scheduled job out, but not a running one", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryQueue.make()
      const waiting = job([3])
      const scheduled = job([4])
      yield* queue.push(waiting)
      yield* queue.schedule(scheduled, 500)
      assert.isTrue(yield* queue.remove(waiting.jid))
      assert.isTrue(yield* queue.remove(scheduled.jid))
      assert.isFalse(yield* queue.remove("unknown"))
      const snapshot = yield* queue.snapshot
      assert.strictEqual(snapshot.ready.length + snapshot.scheduled.length, 0)
      const ran = yield* Ref.make(0)
      yield* queue.work(() => Ref.update(ran, (n) => n + 1))
      yield* TestClock.adjust(1000)
      yield* queue.awaitIdle
      assert.strictEqual(yield* Ref.get(ran), 0)
    }))

  it.effect("a job scheduled at or before now is ready, not left scheduled: remove and exists tell what is there", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryQueue.make()
      const gate = yield* Latch.make()
      const started = yield* Ref.make<Array<string>>([])
      yield* queue.work((j) => Effect.andThen(Ref.update(started, (r) => [...r, j.jid]), gate.await))
      const now = yield* Clock.currentTimeMillis
      // One due now, one overdue: each starts in turn (one at a time), and is never listed as scheduled meanwhile.
      const due = job([5])
      const past = job([6])
      yield* queue.schedule(due, now)
      yield* Effect.yieldNow
      assert.deepStrictEqual((yield* queue.snapshot).scheduled, [])
      assert.deepStrictEqual(yield* Ref.get(started), [due.jid])
      // Running (held at the gate): not removed, and a remove that took nothing says so.
      assert.isFalse(yield* queue.remove(due.jid))
      assert.deepStrictEqual(yield* queue.exists([due]), ["exists"])
      yield* queue.schedule(past, now - 1_000)
      yield* Effect.yieldNow
      assert.deepStrictEqual((yield* queue.snapshot).scheduled, [])
      yield* gate.open
      yield* queue.awaitIdle
      assert.deepStrictEqual(yield* Ref.get(started), [due.jid, past.jid])
      assert.deepStrictEqual(yield* queue.exists([due, past]), ["gone", "gone"])
      assert.isFalse(yield* queue.remove(past.jid))
    }))

  it.effect("the snapshot counts Skipped, Rescheduled and Rejected apart from the runs that did the work", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryQueue.MemoryQueue
      const skip = UniqueJob.unsafeMake({ worker: "Skip", lock: "while_executing", onConflict: "log" })
      const later = UniqueJob.unsafeMake({
        worker: "Later",
        lock: "while_executing",
        onConflict: "reschedule",
        rescheduleDelay: 1000
      })
      const reject = UniqueJob.unsafeMake({ worker: "Reject", lock: "while_executing", onConflict: "reject" })
      const workers: Record<string, UniqueJob.UniqueJob> = { Skip: skip, Later: later, Reject: reject }
      // Another process runs each worker's "busy" job, so every copy of it here is a duplicate execution.
      const held = yield* Effect.forEach([skip, later, reject], (uj) =>
        Effect.map(uj.digest(["busy"]), (digest) => ({ uj, digest })))
      yield* Effect.forEach(held, ({ digest, uj }) => Lock.lock(uj.definition, { digest, jid: "elsewhere" }))

      const performed = [1, 2, 3, 4, 5].map((n) => skip.job([n]))
      const skipped = [skip.job(["busy"]), skip.job(["busy"])]
      const rescheduled = later.job(["busy"])
      const rejected = reject.job(["busy"])
      yield* Effect.forEach([...performed, ...skipped, rescheduled, rejected], queue.push)
      yield* queue.work((j) => workers[j.worker]!.server(j, Effect.void))
      const ended = (events: ReadonlyArray<MemoryQueue.Event>) =>
        events.filter((e) => ["succeeded", "skipped", "rescheduled", "rejected"].includes(e.type)).length
      yield* Effect.repeat(Effect.andThen(Effect.yieldNow, queue.events), { until: (es) => ended(es) === 9 })

      const snapshot = yield* queue.snapshot
      const counts = (s: MemoryQueue.Snapshot) => [s.succeeded, s.skipped, s.rescheduled, s.rejected]
      assert.deepStrictEqual(counts(snapshot), [5, 2, 1, 1]) // succeeded, skipped, rescheduled, rejected
      assert.deepStrictEqual(snapshot.scheduled.map((s) => s.job.jid), [rescheduled.jid])
      assert.deepStrictEqual(snapshot.dead.map((d) => d.job.jid), [rejected.jid])
      const events = yield* queue.events
      const endOf = (jid: string) => events.filter((e) => e.job.jid === jid && e.type !== "started").map((e) => e.type)
      assert.deepStrictEqual(performed.map((j) => endOf(j.jid)), performed.map(() => ["pushed", "succeeded"]))
      assert.deepStrictEqual(skipped.map((j) => endOf(j.jid)), [["pushed", "skipped"], ["pushed", "skipped"]])
      assert.deepStrictEqual(endOf(rescheduled.jid), ["pushed", "scheduled", "rescheduled"])
      assert.deepStrictEqual(endOf(rejected.jid), ["pushed", "dead", "rejected"])

      // The other process finishes: the rescheduled copy runs at its time and counts as done.
      yield* Lock.unlock(later.definition, { digest: held[1]!.digest, jid: "elsewhere" })
      yield* TestClock.adjust(1000)
      yield* queue.awaitIdle
      const after = yield* queue.snapshot
      assert.deepStrictEqual(counts(after), [6, 2, 1, 1])
    }).pipe(Effect.provide(Layer.merge(MemoryQueue.layer(), Redis.layerMemory))))

  it.effect("a job interrupted by a stopping worker goes back to the queue", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryQueue.make()
      const slow = job([5])
      yield* queue.push(slow)
      yield* Effect.scoped(
        Effect.gen(function*() {
          yield* queue.work(() => Effect.never)
          yield* Effect.yieldNow
          assert.deepStrictEqual((yield* queue.snapshot).running.map((j) => j.jid), [slow.jid])
        })
      )
      assert.deepStrictEqual((yield* queue.snapshot).ready.map((j) => j.jid), [slow.jid])
    }))
})

describe("UniqueJob", () => {
  it.effect("refuses a missing worker name and bad lock options at definition", () =>
    Effect.gen(function*() {
      const noWorker = yield* Effect.flip(UniqueJob.make({ worker: "", lock: "until_executed" }))
      assert.strictEqual(noWorker.field, "worker")
      const badLock = yield* Effect.flip(UniqueJob.make({ worker: "W", lock: "until_expired" }))
      assert.strictEqual(badLock.field, "lockTtl")
      // What an untyped caller (JSON config) might pass:
      const options = { worker: "W", lock: "while_executing", onConflict: { server: "replace" } }
      assert.throws(() => UniqueJob.unsafeMake(options as unknown as UniqueJob.Options), /onConflict\.server/)
    }))

  it.effect("jobs carry the worker, queue and a fresh 24-hex jid; Job.decode names a bad field", () =>
    Effect.gen(function*() {
      const worker = UniqueJob.unsafeMake({ worker: "W", queue: "critical", lock: "until_executed" })
      const a = worker.job([1])
      const b = worker.job([1])
      assert.strictEqual(a.queue, "critical")
      assert.match(a.jid, /^[0-9a-f]{24}$/)
      assert.notStrictEqual(a.jid, b.jid)
      const error = yield* Effect.flip(Job.decode({ jid: "x", worker: "W", queue: "q", args: "not an array" }))
      assert.include(error.message, "args")
    }))

  it.effect("describe: waiting, delayed with when it is due, active, failed for good with its reason, gone; another queue's job not told; data cut", () =>
    Effect.gen(function*() {
      const queue = yield* MemoryQueue.make({ maxRetries: 0, queues: ["default"] })
      const waiting = job([{ big: "x".repeat(5000) }])
      const later = job([2])
      const running = job([3])
      const dying = job([4])
      yield* queue.schedule(later, 5000)
      yield* queue.push(running)
      yield* queue.push(dying)
      const release = yield* Latch.make(false)
      yield* queue.work((j) => (j.jid === running.jid ? release.await : Effect.fail("card declined")), { concurrency: 2 })
      yield* TestClock.adjust(1)
      yield* queue.push(waiting)
      const answers = yield* queue.describe!([
        waiting,
        later,
        running,
        dying,
        { jid: "never", queue: "default" },
        { jid: waiting.jid, queue: "elsewhere" }
      ])
      assert.deepStrictEqual(answers.map((a) => a?.state), ["waiting", "delayed", "active", "failed", "gone", undefined])
      assert.strictEqual(answers[1]!.runsAt, 5000)
      assert.include(answers[3]!.failedReason, "card declined")
      assert.strictEqual(Buffer.byteLength(answers[0]!.data!), 2048)
      assert.isAbove(answers[0]!.dataBytes!, 5000)
      yield* release.open
    }))
})
