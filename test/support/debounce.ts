/**
 * A debounced worker on MemoryQueue and TestClock against the test Redis, and waiting for its queue to settle: for
 * the debounce tests and properties (issue 40).
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import { assert } from "vitest"
import * as MemoryQueue from "../../src/adapters/MemoryQueue.js"
import { JobQueue } from "../../src/JobQueue.js"
import * as UniqueJob from "../../src/UniqueJob.js"
import * as RedisTest from "./redis.js"

// Real time for Redis' replies while TestClock stands still.
export const tick = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 2)))

// Until the jobs due by now have run: nothing due on the schedule, ready or running.
export const settle = (queue: MemoryQueue.MemoryQueue) =>
  Effect.gen(function*() {
    for (let i = 0; i < 5_000; i++) {
      const now = yield* Clock.currentTimeMillis
      const snapshot = yield* queue.snapshot
      if (snapshot.ready.length === 0 && snapshot.running.length === 0 && snapshot.scheduled.every((s) => s.at > now)) {
        return
      }
      yield* tick
    }
    assert.fail("the queue did not settle")
  })

export type DebouncedLock = "until_executing" | "until_executed" | "until_and_while_executing"

// A debounced worker on a fresh prefix whose runs are recorded with the time they started and their arguments; every
// enqueue has the same digest (lockArgs), whatever its arguments.
export const debouncedWorker = (lock: DebouncedLock, delay: number, maxWait: number | undefined) =>
  Effect.gen(function*() {
    const prefix = RedisTest.uniquePrefix("debounce")
    const queue = yield* MemoryQueue.make()
    const worker = UniqueJob.unsafeMake({
      worker: "Report",
      lock,
      lockPrefix: prefix,
      lockArgs: () => ["one"],
      debounce: { delay, maxWait }
    })
    const runs = yield* Ref.make<Array<{ readonly at: number; readonly args: ReadonlyArray<unknown> }>>([])
    // A run is recorded at the time it was due (the job's `at`: the clock has moved on by the time it runs, as
    // TestClock.adjust wakes each sleeper at its time but the job's Redis calls end after the adjust), from the
    // worker's start (a layer's TestClock runs on from the test before).
    const start = yield* Clock.currentTimeMillis
    yield* queue.work((job) =>
      worker.server(
        job,
        Ref.update(runs, (r) => [...r, { at: (job.at ?? Number.NaN) - start, args: job.args }])
      ).pipe(Effect.provideService(JobQueue, queue))
    )
    const trigger = (n: number) => Effect.provideService(worker.enqueue([n]), JobQueue, queue)
    return { queue, runs, start, trigger }
  })
