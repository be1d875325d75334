/**
 * Debounce: a job whose place a later trigger took while it was on its way to the queue, that lands already due and
 * is started by a worker before its producer can remove it, after the trigger that took its place has started (and let
 * its queue lock go). No holder is left to tell it apart from its window's own job: the swap's record of the jids it
 * replaced (`<digest>:REPLACED`, `Store.replaced`) does, and the job is skipped, never run with the superseded
 * arguments. On MemoryQueue and TestClock against Redis; the landing job's add answers only once a worker has taken it
 * (a slow reply: the job is in the queue, the producer not yet told). Found by an outsider's probe (issue 50).
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/testing/TestClock"
import * as Lock from "../src/Lock.js"
import { debouncedWorker, onItsWay, settle, untilStarted } from "./support/debounce.js"
import * as RedisTest from "./support/redis.js"

describe("debounce: a superseded job that starts after its window's run has started", () => {
  layer(RedisTest.layer())((it) => {
    for (const lock of ["until_executing", "until_executed", "until_and_while_executing"] as const) {
      it.effect(`${lock}: the job on its way never runs once superseded, even with no holder left`, () =>
        Effect.gen(function*() {
          // delay = maxWait: the trigger that takes the place is due when the job it replaced was.
          const { queue, runs, trigger } = yield* debouncedWorker(lock, 200, 200)
          // The job lands when let go, but its add answers only once a worker has it: the producer cannot remove it.
          const started = untilStarted(queue)
          // The first trigger, its job held on its way (its lock taken).
          const first = yield* trigger(0)
          assert.strictEqual(first._tag, "Enqueued")
          const digest = first.digest
          const prefix = digest.slice(0, digest.lastIndexOf(":"))
          // Run the first window out, so the job on its way opens a window of its own.
          yield* TestClock.adjust(400)
          yield* settle(queue)
          const { fiber: pushing, held, landing } = yield* onItsWay(
            queue,
            lock,
            digest,
            { delay: 200, maxWait: 200 },
            [1],
            started
          )
          assert.strictEqual((yield* held).length, 1, "the job on its way holds the place")
          // A later trigger takes its place (not yet due: its window stands), due when it was (maxWait).
          yield* TestClock.adjust(50)
          assert.strictEqual((yield* trigger(2))._tag, "Replaced")
          // Its window's run: the later trigger's job starts and ends.
          yield* TestClock.adjust(150)
          yield* settle(queue)
          // The job on its way lands, already due; a worker takes it before its producer is answered.
          yield* Deferred.succeed(landing, undefined)
          assert.strictEqual((yield* Fiber.join(pushing))._tag, "Enqueued")
          yield* TestClock.adjust(400)
          yield* settle(queue)
          const ran = (yield* Ref.get(runs)).slice(1).map((r) => r.args)
          const events = (yield* queue.events).map((e) => `${e.type} ${JSON.stringify(e.job.args)}`)
          assert.deepStrictEqual(ran, [[2]], `the window runs once, its last trigger's: ${JSON.stringify(events)}`)
          assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [], "no lock is left without an end")
        }))

      it.effect(`${lock}: a job whose lock was let go by hand on its way, landing while a later job holds the digest, is skipped`, () =>
        Effect.gen(function*() {
          const { queue, runs, trigger } = yield* debouncedWorker(lock, 200, 200)
          const started = untilStarted(queue)
          const digest = (yield* trigger(0)).digest
          const prefix = digest.slice(0, digest.lastIndexOf(":"))
          yield* TestClock.adjust(400)
          yield* settle(queue)
          const { fiber: pushing, held, landing, producer } = yield* onItsWay(
            queue,
            lock,
            digest,
            { delay: 200, maxWait: 200 },
            [1],
            started
          )
          // An operator lets its hold go: no swap takes its place, so no record names it.
          const [holder] = yield* held
          assert.isTrue(yield* Lock.unlock(producer.definition, { digest, jid: holder!.jid, phase: "queue" }))
          // A later trigger opens a window of its own (due at +250), and holds the digest meanwhile.
          yield* TestClock.adjust(50)
          assert.strictEqual((yield* trigger(2))._tag, "Enqueued")
          yield* TestClock.adjust(160)
          yield* settle(queue)
          // The job on its way lands, due since +200; a worker takes it before its producer is answered.
          yield* Deferred.succeed(landing, undefined)
          assert.strictEqual((yield* Fiber.join(pushing))._tag, "Enqueued")
          yield* TestClock.adjust(400)
          yield* settle(queue)
          const ran = (yield* Ref.get(runs)).slice(1).map((r) => r.args)
          const events = (yield* queue.events).map((e) => `${e.type} ${JSON.stringify(e.job.args)}`)
          assert.deepStrictEqual(ran, [[2]], `the digest runs once, the holder's job: ${JSON.stringify(events)}`)
          assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [], "no lock is left without an end")
        }))
    }
  })
})
