/**
 * Debounce (issue 48's note): a trigger whose job is held on its way to the queue across its window's whole maxWait,
 * while later triggers take its place and a next window opens. On MemoryQueue and TestClock against Redis, the push
 * held by a latch.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/testing/TestClock"
import { debouncedWorker, onItsWay, settle } from "./support/debounce.js"
import * as RedisTest from "./support/redis.js"

describe("debounce: a job held on its way past its window's maxWait", () => {
  layer(RedisTest.layer())((it) => {
    // The property's counterexample: delay 200, maxWait 200, the first job on its way from 0 until after later
    // triggers at +42, +126 and +200 (the last past the window's maxWait: a new window). Ran [3], [1], [4].
    for (const lock of ["until_executing", "until_executed", "until_and_while_executing"] as const) {
      it.effect(`${lock}: the job on its way never runs once superseded; each window runs once, the last trigger's`, () =>
        Effect.gen(function*() {
          const { queue, runs, start, trigger } = yield* debouncedWorker(lock, 200, 200)
          // A first window, run: its lock is gone, so the enqueue on its way takes the place anew.
          const digest = (yield* trigger(0)).digest
          const prefix = digest.slice(0, digest.lastIndexOf(":"))
          yield* TestClock.adjust(400)
          yield* settle(queue)
          const setOut = (yield* Clock.currentTimeMillis) - start
          const { fiber: pushing, landing } = yield* onItsWay(queue, lock, digest, { delay: 200, maxWait: 200 }, [1])
          // Each later trigger once the jobs due by then have run: the one at +200 finds the window's job run.
          const tags: Array<string> = []
          for (const [k, gap] of [42, 84, 74].entries()) {
            yield* TestClock.adjust(gap)
            yield* settle(queue)
            tags.push((yield* trigger(2 + k))._tag)
          }
          assert.deepStrictEqual(tags, ["Replaced", "Replaced", "Enqueued"], "two take the place, the last opens a window")
          // The job on its way lands, due since +200: its producer finds its place taken and removes it, or it has
          // started and is skipped.
          yield* Deferred.succeed(landing, undefined)
          assert.strictEqual((yield* Fiber.join(pushing))._tag, "Enqueued")
          const snapshot = yield* queue.snapshot
          const waiting = [...snapshot.ready, ...snapshot.scheduled.map((s) => s.job)].map((job) => job.args)
          assert.deepStrictEqual(waiting, [[4]], "one job waits: the last trigger's")
          yield* TestClock.adjust(400)
          yield* settle(queue)
          const ran = (yield* Ref.get(runs)).slice(1)
          const events = (yield* queue.events).map((e) => `${e.type} ${JSON.stringify(e.job.args)}`)
          assert.deepStrictEqual(
            ran.map((r) => ({ at: r.at - setOut, args: r.args })),
            [{ at: 200, args: [3] }, { at: 400, args: [4] }],
            `each window once, its last trigger's; never the job on its way: ${JSON.stringify(events)}`
          )
          assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [], "no lock is left without an end")
        }))
    }
  })
})
