/**
 * Issue 47, observation 5: an operator's revoke on the Promise face. The admin UI and the CLI say a revoked holder
 * "keeps its place until it stops, so no second copy starts"; a processor's `fn` that ignores its signal (or takes
 * none) runs on after its run lock is revoked, and the next copy must not start until it has returned, however long
 * that is beside the lease. Each case: a job's `fn` starts, a second job of the same digest waits for the run lock
 * (rescheduled, or waiting with lockTimeout), an operator deletes the digest through `Locks`, and the first `fn` runs
 * on for a while past its 1 s lease, or until the second copy starts. What is checked is what ran: the two bodies
 * never overlap, the second runs once the first has returned, the first job fails with `LockLost`, and nothing is
 * left behind. A busy machine can only make an overlap less likely to be seen, never make the test red.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Locks from "../src/Locks.js"
import * as Metrics from "../src/Metrics.js"
import type * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as Bull from "./support/bullmq.js"
import * as RedisTest from "./support/redis.js"
import { sleep, uniqueQueue } from "./support/uniquequeue.js"

// How long the revoked fn runs on after the revoke when no second copy starts: twice its lease.
const runsOnMs = 2_200

const cases: ReadonlyArray<{
  readonly name: string
  readonly options: LockOptions.Options
  readonly takesSignal: boolean
}> = [
  {
    name: "while_executing, a fn without a signal (the hot path), the duplicate rescheduled",
    options: { lock: "while_executing", onConflict: { server: "reschedule" }, rescheduleDelay: 100 },
    takesSignal: false
  },
  {
    name: "while_executing, a fn that takes its signal and ignores it, the duplicate rescheduled",
    options: { lock: "while_executing", onConflict: { server: "reschedule" }, rescheduleDelay: 100 },
    takesSignal: true
  },
  {
    name: "while_executing with lockTimeout, a fn without a signal, the duplicate waiting for the lock",
    options: { lock: "while_executing", lockTimeout: "20 seconds", onConflict: { server: "reschedule" }, rescheduleDelay: 100 },
    takesSignal: false
  },
  {
    name: "until_and_while_executing, a fn without a signal, the duplicate rescheduled",
    options: { lock: "until_and_while_executing", onConflict: { server: "reschedule" }, rescheduleDelay: 100 },
    takesSignal: false
  }
]

describe("UniqueQueue: a revoked holder keeps its place until its fn returns", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    for (const { name, options, takesSignal } of cases) {
      it.effect(name, () =>
        Effect.gen(function*() {
          const { source } = yield* RedisTest.TestRedis
          const { name: queueName, unique, lockPrefix } = yield* uniqueQueue({ ...options, lockLease: 1000 })
          // Both jobs carry the same data (one digest): told apart by their BullMQ ids, the first's known once added.
          let firstId: string | undefined
          const running = new Set<string>()
          const overlaps: Array<string> = []
          const ended: Array<string> = []
          let revokedAt: number | undefined
          const body = async (id: string) => {
            const n = id === firstId ? "1" : "2"
            running.add(n)
            if (running.size > 1) overlaps.push(`fn bodies running now: ${[...running].sort().join(",")}`)
            try {
              if (n !== "1") return `done ${n}`
              // The first runs until the operator has acted, then on past its lease, or until a second copy starts.
              while (revokedAt === undefined) await sleep(20)
              while (Date.now() - revokedAt < runsOnMs && running.size === 1) await sleep(20)
              return "done 1"
            } finally {
              running.delete(n)
              ended.push(n)
            }
          }
          const processor = takesSignal
            ? unique.processor(async (job, _token, _signal) => body(job.id!))
            : unique.processor(async (job) => body(job.id!))
          const failures: Array<string> = []
          const worker = yield* Bull.worker(queueName, processor, { concurrency: 2 })
          worker.on("failed", (job, error) =>
            failures.push(`${job?.id === firstId ? 1 : 2} ${(error as { _tag?: string })._tag ?? error.message}`))
          // The second is added once the first runs (an until_… lock would refuse it while the first waits).
          const first = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
          if (first._tag !== "Enqueued") return assert.fail(`the first add was ${first._tag}`)
          firstId = first.value.id
          assert.isTrue(yield* Bull.until(Effect.sync(() => running.has("1"))), "the first fn started")
          const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
          if (added._tag !== "Enqueued") return assert.fail(`the second add was ${added._tag}`)
          const second = added.value
          // The second meets the held run lock at least once before the operator acts.
          assert.isTrue(
            yield* Bull.until(Effect.promise(async () => {
              const state = await second.getState()
              return state === "delayed" || state === "active"
            })),
            "the second job met the run lock"
          )
          const removal = yield* Effect.flatMap(Locks.make({ prefix: lockPrefix }), (locks) =>
            locks.deleteByPattern(`${lockPrefix}:*`)).pipe(Effect.provide(Redis.layer({ url: source.url })))
          revokedAt = Date.now()
          assert.strictEqual(removal.revoked.length, 1, "the running holder was revoked, not removed")
          assert.isTrue(
            yield* Bull.until(Effect.promise(async () => (await second.getState()) === "completed"), 60_000),
            "the second copy ran once the first had returned"
          )
          assert.deepStrictEqual(overlaps, [])
          assert.deepStrictEqual(ended, ["1", "2"])
          assert.deepStrictEqual(failures, ["1 LockLost"])
          assert.strictEqual(yield* Effect.promise(() => second.getState()), "completed")
          assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix), [])
        }), { timeout: 90_000 })
    }
  })
})

describe("UniqueQueue: close's timeout ends the wait for a revoked fn", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    for (const takesSignal of [false, true]) {
      it.effect(`a revoked fn that never returns (${takesSignal ? "it ignores its signal" : "it takes none"}) keeps no close({ timeout }) waiting`, () =>
        Effect.gen(function*() {
          const { source } = yield* RedisTest.TestRedis
          const { name, unique, lockPrefix } = yield* uniqueQueue({ lock: "while_executing", lockLease: 900 })
          let release!: () => void
          const never = new Promise<string>((resolve) => (release = () => resolve("late")))
          yield* Effect.addFinalizer(() => Effect.sync(() => release()))
          let started = false
          const processor = takesSignal
            ? unique.processor(async (_job, _token, _signal) => {
              started = true
              return never
            })
            : unique.processor(async () => {
              started = true
              return never
            })
          const worker = yield* Bull.worker(name, processor)
          const lost = Metrics.lost.of("while_executing", "run")
          const before = (yield* Metric.value(lost)).count
          yield* Effect.promise(() => unique.add("Work", { n: 1 }))
          assert.isTrue(yield* Bull.until(Effect.sync(() => started)))
          yield* Effect.flatMap(Locks.make({ prefix: lockPrefix }), (locks) => locks.deleteByPattern(`${lockPrefix}:*`)).pipe(
            Effect.provide(Redis.layer({ url: source.url }))
          )
          assert.isTrue(yield* Bull.until(Effect.map(Metric.value(lost), (value) => value.count > before)), "told")
          // Bounded by the timeout, not by the fn: the test's own limit catches a close that waits for it.
          yield* Effect.promise(() => unique.close({ timeout: 500 }))
          yield* Effect.promise(() => worker.close(true))
        }), { timeout: 60_000 })
    }
  })
})
