/**
 * What the Promise face costs its lock Redis, counted by that Redis (MONITOR, on a redis-server of the locks' own):
 * `UniqueQueue.add` and a job through `unique.processor` make one command per lock phase for every lock type, on the
 * hot path (a fn without a signal) and on the Effect path (a fn that takes one), a duplicate add one; commands the
 * scripts run inside are not round trips and are not counted.
 */
import { assert, describe, layer } from "@effect/vitest"
import type { Job as BullJob } from "bullmq"
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import { flushAt } from "../src/store/IORedis.js"
import type * as LockType from "../src/LockType.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as Bull from "./support/bullmq.js"
import * as RedisTest from "./support/redis.js"
import type { Data } from "./support/uniquequeue.js"

/** Commands per lock type: a new job's add, a duplicate's add, and its job's run through the processor. */
const expected: Record<LockType.LockType, { readonly add: number; readonly duplicate: number; readonly job: number }> = {
  until_executing: { add: 1, duplicate: 1, job: 1 },
  until_executed: { add: 1, duplicate: 1, job: 1 },
  until_expired: { add: 1, duplicate: 1, job: 0 },
  // No queue lock: every add enqueues, none touches the lock Redis.
  while_executing: { add: 0, duplicate: 0, job: 2 },
  while_executing_reject: { add: 0, duplicate: 0, job: 2 },
  until_and_while_executing: { add: 1, duplicate: 1, job: 2 }
}

/**
 * The commands `url`'s Redis runs for clients other than `raw` and its scripts, seen through MONITOR. `settled` answers
 * how many came since the last call, once a marker `raw` sends after `ready` is done has come through: every command
 * run before it is counted.
 */
const monitored = (url: string) =>
  Effect.gen(function*() {
    const raw = yield* Effect.acquireRelease(
      Effect.sync(() => new IORedis(url).on("error", () => {})),
      (c) => Effect.promise(() => c.quit().catch(() => undefined))
    )
    const own = /addr=(\S+)/.exec(String(yield* Effect.promise(() => raw.client("INFO"))))![1]!
    const monitor = yield* Effect.acquireRelease(
      Effect.promise(() => new IORedis(url).on("error", () => {}).monitor()),
      (m) => Effect.sync(() => m.disconnect())
    )
    let counted = 0
    const markers = new Set<string>()
    monitor.on("monitor", (_time: string, args: ReadonlyArray<string>, source: string) => {
      if (source === own) {
        if (args[0]?.toLowerCase() === "echo") markers.add(args[1]!)
        return
      }
      if (source !== "lua") counted++
    })
    let n = 0
    // Bounded waits: one that runs out fails the count below, never hangs the test.
    const settled = (ready: () => Promise<boolean>) =>
      Effect.gen(function*() {
        yield* Bull.until(Effect.promise(ready), 5_000)
        const marker = `marker-${++n}`
        yield* Effect.promise(() => raw.echo(marker))
        yield* Bull.until(Effect.sync(() => markers.has(marker)), 5_000)
        const seen = counted
        counted = 0
        return seen
      })
    return { raw, settled }
  })

describe("UniqueQueue: one command per lock phase on its lock Redis", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    // Issue 39: the lock steps one process asks for in one turn share a call (batch.lua), the first going alone.
    for (const lock of ["until_executed", "while_executing", "until_and_while_executing"] as const) {
      it.effect(`${lock}: 20 adds in one turn, 20 duplicates in one turn and 20 jobs run at once share their calls`, () =>
        Effect.gen(function*() {
          const locks = yield* RedisServer.start
          const { raw, settled } = yield* monitored(locks.url)
          const name = Bull.uniqueName(`rtb-${lock}`)
          const queue = yield* Bull.queue(name)
          const lockPrefix = `rtb-${lock}`
          const unique = yield* Effect.acquireRelease(
            Effect.sync(() =>
              UniqueQueue.make<Data>(queue, { lock, lockPrefix, redis: { url: locks.url }, defaults: {}, history: false })
            ),
            (u) => Effect.promise(() => u.close())
          )
          const worker = yield* Bull.manualWorker(name)
          const processor = unique.processor(async (job: BullJob<Data>) => job.data.n)
          const each = <A>(f: (n: number) => Promise<A>) =>
            Effect.promise(() => Promise.all(Array.from({ length: 20 }, (_, n) => f(n + 1))))
          // The runtime built and the scripts loaded first: not counted.
          yield* Effect.promise(() => unique.add("Work", { n: 0 }))
          yield* settled(async () => true)
          const queueLocked = lock !== "while_executing"
          const added = yield* each((n) => unique.add("Work", { n }))
          assert.isTrue(added.every((a) => a._tag === "Enqueued"))
          // The first alone (nothing in flight), then a batch each time flushAt steps have gathered, the rest at the
          // turn's end.
          const calls = 1 + Math.ceil(19 / flushAt)
          assert.strictEqual(yield* settled(async () => true), queueLocked ? calls : 0, "20 adds")
          const again = yield* each((n) => unique.add("Work", { n }))
          assert.isTrue(again.every((a) => a._tag === (queueLocked ? "Skipped" : "Enqueued")))
          assert.strictEqual(yield* settled(async () => true), queueLocked ? calls : 0, "20 duplicates alike")
          // 21 (or 41) jobs waiting: each taken, then all run in one turn.
          const jobs: Array<BullJob<Data>> = []
          for (let job = yield* Effect.promise(() => worker.getNextJob("t", { block: false })); job !== undefined;) {
            jobs.push(job as BullJob<Data>)
            job = yield* Effect.promise(() => worker.getNextJob("t", { block: false }))
          }
          yield* settled(async () => true)
          yield* Effect.promise(() => Promise.all(jobs.map((job) => processor(job, "t"))))
          const commands = yield* settled(async () => (await raw.keys(`${lockPrefix}:*:LOCKED`)).length === 0)
          // One step per job and phase alone would be jobs.length (a release) or twice that (a run lock's take and
          // release, a handoff and a release); batched, a few calls per phase.
          const phases = lock === "until_executed" ? 1 : 2
          assert.isAtMost(commands, phases * (2 + Math.ceil(jobs.length / flushAt)), `${jobs.length} jobs: ${commands} commands`)
          assert.isAtLeast(commands, 2)
        }), 120_000)
    }

    // lockEvents on: the activity log is written inside the same script calls, so every count stays the same.
    for (const path of ["hot path (a fn without a signal)", "Effect path (a fn that takes a signal)"] as const) {
    for (const lockEvents of [false, true]) {
      it.effect(`every lock type, ${path}${lockEvents ? ", lockEvents on" : ""}: an add, a duplicate and a job cost what their phases are`, () =>
        Effect.gen(function*() {
          const locks = yield* RedisServer.start
          const { raw, settled } = yield* monitored(locks.url)
          for (const lock of Object.keys(expected) as Array<LockType.LockType>) {
            const name = Bull.uniqueName(`rt-${lock}`)
            const queue = yield* Bull.queue(name)
            const lockPrefix = `rt-${lock}`
            const unique = yield* Effect.acquireRelease(
              Effect.sync(() =>
                UniqueQueue.make<Data>(queue, {
                  lock,
                  lockPrefix,
                  lockEvents,
                  ...(lock === "until_expired" ? { lockTtl: "1 minute" } : {}),
                  redis: { url: locks.url },
                  defaults: {},
                  history: false
                })
              ),
              (u) => Effect.promise(() => u.close())
            )
            const worker = yield* Bull.manualWorker(name)
            const fn = path.startsWith("hot")
              ? async (job: BullJob<Data>) => job.data.n
              : async (job: BullJob<Data>, _token?: string, _signal?: AbortSignal) => job.data.n
            const processor = unique.processor(fn)
            const held = () => raw.keys(`${lockPrefix}:*:LOCKED`).then((keys) => keys.length)
            // until_expired keeps every lock to its TTL; the others' are gone once their job is done.
            let kept = 0
            const effectPath = !path.startsWith("hot")
            // Runs the next job, and counts once its locks are as they end (a release may be answered after the job).
            const runNext = Effect.promise(async () => {
              const job = (await worker.getNextJob("t", { block: false }))!
              await job.moveToCompleted(await processor(job as BullJob<Data>, "t"), "t", false)
            }).pipe(Effect.andThen(settled(async () => (await held()) === kept)))
            // A jobId sends an add down the Effect path, as a delay would; without one it takes the hot path.
            const add = (n: number, copy: string) =>
              Effect.promise(() => unique.add("Work", { n }, effectPath ? { jobId: `${lock}-${n}-${copy}` } : {}))
            // The first add builds the runtime and loads the scripts: not counted.
            yield* add(0, "warm")
            if (lock === "until_expired") kept++
            yield* runNext
            for (let n = 1; n <= 3; n++) {
              const added = yield* add(n, "a")
              assert.strictEqual(added._tag, "Enqueued", lock)
              assert.strictEqual(yield* settled(async () => true), expected[lock].add, `${lock}: an add`)
              const again = yield* add(n, "b")
              assert.strictEqual(again._tag, expected[lock].add === 0 ? "Enqueued" : "Skipped", lock)
              assert.strictEqual(yield* settled(async () => true), expected[lock].duplicate, `${lock}: a duplicate add`)
              if (lock === "until_expired") kept++
              for (let j = 0; j < (expected[lock].add === 0 ? 2 : 1); j++) {
                assert.strictEqual(yield* runNext, expected[lock].job, `${lock}: a job`)
              }
              assert.strictEqual(yield* Effect.promise(held), kept, `${lock}: the locks left`)
            }
            // The log was written (on) or not (off): the same calls carried it.
            const logs = yield* Effect.promise(() => raw.keys(`${lockPrefix}:*:EVENTS`))
            assert.strictEqual(logs.length > 0, lockEvents, `${lock}: the activity log`)
            if (lockEvents) {
              const newest = JSON.parse((yield* Effect.promise(() => raw.lrange(logs[0]!, 0, 0)))[0]!) as { event: string }
              assert.include(["taken", "released", "refused"], newest.event, lock)
            }
          }
        }), 120_000)
    }
    }
  })
})
