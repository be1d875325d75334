/**
 * Debounce with a maximum wait (issue 40): each enqueue of a digest within a window takes the waiting job's place and
 * pushes its run to `delay` after itself, never past `maxWait` after the window's first enqueue; the window ends when
 * its job runs. On MemoryQueue and TestClock against Redis, by example; the option's refusals. The properties are in
 * debounce.properties.test.ts, on BullMQ in debounce.bullmq.test.ts.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Deferred from "effect/Deferred"
import * as Fiber from "effect/Fiber"
import * as Ref from "effect/Ref"
import * as Result from "effect/Result"
import * as TestClock from "effect/testing/TestClock"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import { debouncedWorker, settle, tick } from "./support/debounce.js"
import * as RedisTest from "./support/redis.js"

describe("debounce", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("a burst runs once, delay after its last trigger, with the last trigger's arguments", () =>
      Effect.gen(function*() {
        const { queue, runs, trigger } = yield* debouncedWorker("until_executing", 1_000, 5_000)
        const outcomes: Array<string> = []
        for (const [n, gap] of [[1, 0], [2, 300], [3, 300]] as const) {
          yield* TestClock.adjust(gap)
          outcomes.push((yield* trigger(n))._tag)
          yield* settle(queue)
        }
        assert.deepStrictEqual(outcomes, ["Enqueued", "Replaced", "Replaced"])
        assert.strictEqual((yield* queue.snapshot).scheduled.length, 1, "one job waits: the newest")
        yield* TestClock.adjust(999)
        yield* settle(queue)
        assert.deepStrictEqual(yield* Ref.get(runs), [], "600 + 999: not yet")
        yield* TestClock.adjust(1)
        yield* settle(queue)
        assert.deepStrictEqual(yield* Ref.get(runs), [{ at: 1_600, args: [3] }])
        // The window ended with the run: the next trigger opens one of its own.
        assert.strictEqual((yield* trigger(4))._tag, "Enqueued")
        yield* TestClock.adjust(1_000)
        yield* settle(queue)
        assert.deepStrictEqual((yield* Ref.get(runs)).map((r) => r.args), [[3], [4]])
      }))

    it.effect("a steady stream of triggers still runs maxWait after the window's first, then a new window opens", () =>
      Effect.gen(function*() {
        const { queue, runs, trigger } = yield* debouncedWorker("until_and_while_executing", 1_000, 3_000)
        // A trigger every 500 ms for 6 s: never 1 s of quiet, so only maxWait ends each window.
        for (let n = 0; n <= 12; n++) {
          if (n > 0) yield* TestClock.adjust(500)
          yield* settle(queue)
          yield* trigger(n)
          yield* settle(queue)
        }
        yield* TestClock.adjust(1_000)
        yield* settle(queue)
        // Windows: 0–3000 (run at 3000 with the trigger of 2500), 3000–6000 (the trigger at 3000 opens it; run at
        // 6000 with 5500's), and 6000's own, run 1 s later.
        assert.deepStrictEqual(yield* Ref.get(runs), [
          { at: 3_000, args: [5] },
          { at: 6_000, args: [11] },
          { at: 7_000, args: [12] }
        ])
      }))

    // Found by an outsider probe: the window of a holder whose job is gone (removed by hand) was kept, so the next
    // trigger, long after, ran at once instead of opening a window of its own.
    it.effect("a waiting job removed by hand: the next trigger opens a window of its own, delay after itself", () =>
      Effect.gen(function*() {
        const { queue, runs, start, trigger } = yield* debouncedWorker("until_executing", 1_000, 2_000)
        const first = yield* trigger(1)
        assert.isTrue(yield* queue.remove(first.job.jid))
        yield* TestClock.adjust(2_500)
        // A job gone once due may be another producer's removal about to be swapped (issue 47): the trigger waits for
        // that (10 ms doubling, 630 ms in all) before it takes the place with a window of its own.
        const pending = yield* Effect.forkChild(trigger(2))
        let waited = 0
        while ((yield* Effect.sync(() => pending.pollUnsafe())) === undefined && waited < 5_000) {
          yield* tick
          yield* TestClock.adjust(10)
          waited += 10
        }
        const next = yield* Fiber.join(pending)
        const now = yield* Clock.currentTimeMillis
        assert.strictEqual(next._tag, "Replaced", "the orphaned lock's place is taken")
        assert.isAtLeast(next.job.at! - start, 2_500 + 1_000, "delay after itself, not at once (the gone job's window)")
        assert.isAtMost(next.job.at!, now + 1_000)
        yield* TestClock.adjust(1_000)
        yield* settle(queue)
        assert.deepStrictEqual(yield* Ref.get(runs), [{ at: next.job.at! - start, args: [2] }])
      }))

    // Found by a fresh clone's CI (debounce.bullmq, under load): the holder's job was active when the queue was asked,
    // and ran to its end before the remove, which then removed a completed job; the add answered Replaced although
    // nothing waiting was replaced. Here the queue lets the holder go just before each remove, as that job did.
    it.effect("a holder whose job let go before the remove (it ran after all) is not reported replaced", () =>
      Effect.gen(function*() {
        const queue = yield* MemoryQueue.make()
        for (const debounce of [undefined, { delay: 1_000 }]) {
          const worker = UniqueJob.unsafeMake({
            worker: "Report",
            lock: "until_executed",
            lockPrefix: RedisTest.uniquePrefix("let-go"),
            lockArgs: () => ["one"],
            onConflict: { client: "replace", server: "log" },
            ...(debounce === undefined ? {} : { debounce })
          })
          const first = yield* Effect.provideService(worker.enqueue([1]), JobQueue, queue)
          assert.strictEqual(first._tag, "Enqueued")
          const redis = yield* Redis.RedisService
          const racing: Context.Service.Shape<typeof JobQueue> = {
            ...queue,
            remove: (jid) =>
              Effect.andThen(
                Effect.orDie(Lock.unlock(worker.definition, { digest: first.digest, jid, phase: "queue" })).pipe(
                  Effect.provideService(Redis.RedisService, redis)
                ),
                queue.remove(jid)
              )
          }
          const second = yield* Effect.provideService(worker.enqueue([2]), JobQueue, racing)
          assert.strictEqual(second._tag, "Enqueued", debounce === undefined ? "replace" : "debounce")
        }
      }))

    // Issue 47, observation 1: two producers of one digest. A producer whose remove lost the race to another's (the
    // queue no longer had the job) went back to the start and opened a window of its own, so maxWait bounded nothing.
    // Here the queue lets the other producer remove the waiting job just before this one's remove.
    it.effect("a producer whose remove another producer beat keeps the window: maxWait from its first trigger", () =>
      Effect.gen(function*() {
        const { queue, runs, start, trigger } = yield* debouncedWorker("until_executing", 500, 1_000)
        const first = yield* trigger(0)
        assert.strictEqual(first._tag, "Enqueued")
        yield* TestClock.adjust(400)
        assert.strictEqual((yield* trigger(1)).job.at! - start, 900, "delay after the second trigger")
        yield* TestClock.adjust(400)
        // The other producer removed the job (its own replace, whose swap comes later): this one finds it gone.
        const racing: Context.Service.Shape<typeof JobQueue> = {
          ...queue,
          remove: (jid) => Effect.andThen(queue.remove(jid), Effect.succeed(false))
        }
        const second = yield* Effect.provideService(
          UniqueJob.unsafeMake({
            worker: "Report",
            lock: "until_executing",
            lockPrefix: first.digest.slice(0, first.digest.lastIndexOf(":")),
            lockArgs: () => ["one"],
            debounce: { delay: 500, maxWait: 1_000 }
          }).enqueue([2]),
          JobQueue,
          racing
        )
        assert.strictEqual(second._tag, "Replaced")
        assert.strictEqual(second.job.at! - start, 1_000, "min(800 + 500, 0 + maxWait 1000): the first trigger's window")
        assert.deepStrictEqual((yield* queue.snapshot).scheduled.map((s) => s.job.args), [[2]])
        yield* TestClock.adjust(500)
        yield* settle(queue)
        assert.deepStrictEqual(yield* Ref.get(runs), [{ at: 1_000, args: [2] }])
      }))

    // Issue 47, observation 1: with producer processes, several jobs of one digest waited at once. A producer took the
    // place of a holder whose job was still on its way to the queue (it looked gone) and added its own; the first job
    // then landed beside it. Now the first producer finds its place taken once its job is in, and removes it.
    it.effect("a job still on its way when a later trigger takes its place is removed once it lands: one job waits", () =>
      Effect.gen(function*() {
        const { queue, runs, trigger, start } = yield* debouncedWorker("until_executing", 500, 1_000)
        const landing = yield* Deferred.make<void>()
        const slow: Context.Service.Shape<typeof JobQueue> = {
          ...queue,
          push: (job) => Effect.andThen(Deferred.await(landing), queue.push(job)),
          schedule: (job, at) => Effect.andThen(Deferred.await(landing), queue.schedule(job, at))
        }
        const digest = (yield* trigger(0)).digest
        yield* TestClock.adjust(1_500)
        yield* settle(queue)
        assert.strictEqual((yield* Ref.get(runs)).length, 1, "a window before, run")
        const worker = UniqueJob.unsafeMake({
          worker: "Report",
          lock: "until_executing",
          lockPrefix: digest.slice(0, digest.lastIndexOf(":")),
          lockArgs: () => ["one"],
          debounce: { delay: 500, maxWait: 1_000 }
        })
        const redis = yield* Redis.RedisService
        const held = redis.holders(Lock.keyOf(worker.definition, digest, "queue"))
        const onItsWay = yield* Effect.forkChild(Effect.provideService(worker.enqueue([1]), JobQueue, slow))
        // Until the first holds the lock, its job not yet in the queue.
        for (let i = 0; i < 500 && (yield* held).length === 0; i++) yield* tick
        yield* TestClock.adjust(100)
        const later = yield* trigger(2)
        assert.strictEqual(later._tag, "Replaced", "the later trigger took the place")
        yield* Deferred.succeed(landing, undefined)
        const first = yield* Fiber.join(onItsWay)
        assert.strictEqual(first._tag, "Enqueued", "the first opened the window")
        const waiting = (yield* queue.snapshot).scheduled.map((s) => s.job.args)
        assert.deepStrictEqual(waiting, [[2]], "one job waits: the later trigger's")
        yield* TestClock.adjust(1_000)
        yield* settle(queue)
        assert.deepStrictEqual((yield* Ref.get(runs)).slice(1), [{ at: 1_500 + 100 + 500, args: [2] }])
        assert.isAtMost(first.job.at! - start, 1_500 + 500)
      }))

    // Issue 47, item 8: which window bounds maxWait when several holders of one digest carry windows: the earliest (the
    // window's first trigger), never the latest. Two holders written with lockLimit 2, each with a window and a job.
    it.effect("an enqueue that takes the place of several holders keeps the earliest of their windows", () =>
      Effect.gen(function*() {
        const { queue, runs, trigger, start } = yield* debouncedWorker("until_executing", 500, 1_000)
        yield* TestClock.adjust(1_000)
        const probe = yield* trigger(0)
        yield* TestClock.adjust(1_000)
        yield* settle(queue)
        assert.strictEqual((yield* Ref.get(runs)).length, 1)
        const now = start + 2_000
        const two = UniqueJob.unsafeMake({
          worker: "Report",
          lock: "until_executing",
          lockLimit: 2,
          lockPrefix: probe.digest.slice(0, probe.digest.lastIndexOf(":")),
          lockArgs: () => ["one"]
        })
        for (const [jid, window] of [["early", now - 900], ["late", now - 100]] as const) {
          yield* Lock.lock(two.definition, { digest: probe.digest, jid, phase: "queue", window, due: now + 100 })
          yield* queue.schedule(Job.make({ worker: "Report", args: [jid], jid }), now + 100)
        }
        const next = yield* trigger(3)
        assert.strictEqual(next._tag, "Replaced")
        assert.sameMembers([...(next as { replaced: ReadonlyArray<string> }).replaced], ["early", "late"])
        assert.strictEqual(next.job.at! - start, 2_100, "the earliest window (now - 900) + maxWait 1000, not the latest's")
        assert.deepStrictEqual((yield* queue.snapshot).scheduled.map((s) => s.job.args), [[3]])
      }))

    it.effect("without maxWait a window lasts as long as its triggers keep coming", () =>
      Effect.gen(function*() {
        const { queue, runs, trigger } = yield* debouncedWorker("until_executed", 1_000, undefined)
        for (let n = 0; n < 10; n++) {
          if (n > 0) yield* TestClock.adjust(900)
          yield* settle(queue)
          yield* trigger(n)
        }
        yield* settle(queue)
        assert.deepStrictEqual(yield* Ref.get(runs), [])
        yield* TestClock.adjust(1_000)
        yield* settle(queue)
        assert.deepStrictEqual(yield* Ref.get(runs), [{ at: 9 * 900 + 1_000, args: [9] }])
      }))

  })

  // Issue 47: the swap a debounced enqueue takes a waiting job's place with (lock.lua's ARGV[9] on, and the memory
  // store alike): only in place of holders as they were read, in one call, the new entry's t above theirs.
  for (const [store, provided] of [["Redis", RedisTest.layer()], ["memory", Redis.layerMemory]] as const) {
    layer(provided)((it) => {
      it.effect(`the swap takes the place only of holders as they were read (${store})`, () =>
        Effect.gen(function*() {
          const redis = yield* Redis.RedisService
          const key = { prefix: RedisTest.uniquePrefix("swap"), name: "d" }
          const request = { limit: 1, ttlMs: 0, leaseMs: 0, info: "", fenced: false }
          assert.strictEqual((yield* redis.lock(key, { ...request, jid: "a" }))._tag, "Acquired")
          const [a] = yield* redis.holders(key)
          // Written again since it was read (its t moved on), or not there: nothing is written.
          const stale = yield* redis.lock(key, { ...request, jid: "b", swap: [{ jid: "a", lockedAt: a!.lockedAt - 1 }] })
          assert.deepStrictEqual(stale, { _tag: "Conflict", holders: ["a"] })
          const gone = yield* redis.lock(key, { ...request, jid: "b", swap: [{ jid: "x" }] })
          assert.deepStrictEqual(gone, { _tag: "Conflict", holders: ["a"] })
          assert.deepStrictEqual((yield* redis.holders(key)).map((h) => h.jid), ["a"])
          // As read: b takes a's place, above its t; a swap of itself writes its entry again, above that.
          const taken = yield* redis.lock(key, { ...request, jid: "b", swap: [{ jid: "a", lockedAt: a!.lockedAt }] })
          assert.strictEqual(taken._tag, "Acquired")
          const [b] = yield* redis.holders(key)
          assert.strictEqual(b!.jid, "b")
          assert.isAbove(b!.lockedAt, a!.lockedAt)
          assert.strictEqual((yield* redis.lock(key, { ...request, jid: "b", swap: [{ jid: "b" }] }))._tag, "Acquired")
          const [again] = yield* redis.holders(key)
          assert.isAbove(again!.lockedAt, b!.lockedAt)
          // Its place taken, a swap of itself writes nothing and names no holder it could not see.
          assert.deepStrictEqual(yield* redis.lock(key, { ...request, jid: "a", swap: [{ jid: "a" }] }), {
            _tag: "Conflict",
            holders: ["b"]
          })
          yield* redis.unlock(key, "b")
          assert.deepStrictEqual(yield* redis.lock(key, { ...request, jid: "a", swap: [{ jid: "a" }] }), {
            _tag: "Conflict",
            holders: []
          })
          assert.deepStrictEqual(yield* redis.holders(key), [])
        }))
    })
  }

  describe("refused where it cannot work, naming the field", () => {
    const refusal = (options: Omit<LockOptions.Options, "lock"> & { readonly lock: string }) => {
      const made = Effect.runSync(Effect.result(LockOptions.make(options as LockOptions.Options)))
      assert.isTrue(Result.isFailure(made), JSON.stringify(options))
      return Result.isFailure(made) ? made.failure.issues.map((i) => `${i.field}: ${i.reason}`) : []
    }
    it("a type whose lock outlives the run, or that takes none at enqueue", () => {
      assert.match(refusal({ lock: "until_expired", lockTtl: 1_000, debounce: { delay: 100 } })[0]!, /^debounce: until_expired keeps its lock/)
      assert.match(refusal({ lock: "while_executing", debounce: { delay: 100 } })[0]!, /^debounce: while_executing takes no lock at enqueue/)
    })
    it("maxWait shorter than delay; a delay of 0, -1, NaN or text", () => {
      assert.match(refusal({ lock: "until_executing", debounce: { delay: 1_000, maxWait: 500 } })[0]!, /^debounce\.maxWait: maxWait \(500 ms\) is shorter than delay/)
      for (const delay of [0, -1, Number.NaN, "soon"]) {
        assert.match(refusal({ lock: "until_executing", debounce: { delay: delay as number } })[0]!, /^debounce\.delay: /)
      }
      assert.match(refusal({ lock: "until_executing", debounce: { maxWait: 100 } as never })[0]!, /^debounce\.delay/)
      assert.match(refusal({ lock: "until_executing", debounce: { delay: 100, later: 1 } as never })[0]!, /^debounce\.later/)
    })
    it("a client strategy other than replace", () => {
      assert.match(
        refusal({ lock: "until_executed", onConflict: { client: "raise" }, debounce: { delay: 100 } })[0]!,
        /^onConflict\.client: debounce replaces the waiting job/
      )
    })
    // Found by an outsider probe: the follow-up waiting for its run lock is running in the queue and cannot be
    // replaced, so the newest trigger was Skipped: lost.
    it("lockTimeout on until_and_while_executing with replace or debounce", () => {
      for (const options of [
        { onConflict: { client: "replace", server: "reschedule" } },
        { onConflict: "replace" },
        { debounce: { delay: 100 } }
      ] as const) {
        assert.match(
          refusal({ lock: "until_and_while_executing", lockTimeout: "10 seconds", ...options })[0]!,
          /^lockTimeout: a job of until_and_while_executing that waits for the run lock/,
          JSON.stringify(options)
        )
      }
      assert.doesNotThrow(() =>
        LockOptions.unsafeMake({ lock: "until_and_while_executing", lockTimeout: "10 seconds", onConflict: { server: "reschedule" } })
      )
    })
    it("given as it should be, the client strategy is replace and the server one stays", () => {
      const definition = LockOptions.unsafeMake({
        lock: "until_and_while_executing",
        onConflict: { server: "reschedule" },
        debounce: { delay: "1 second", maxWait: "10 seconds" }
      })
      assert.deepStrictEqual(definition.onConflict, { client: "replace", server: "reschedule" })
    })
  })
})
