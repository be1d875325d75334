/**
 * Issue 47, observation 2, one mechanism at a time: a lock step whose answer is lost with its connection (a CLIENT
 * KILL right after the call was written: it ran, or it never reached Redis). A TCP proxy in front of the lock Redis
 * loses the next call's request or its reply and closes the connection (`Proxy.lose`); the store reconnects.
 *
 * - A run lock's release: tried again until Redis answers, so the lock is gone once the job's outcome is known, on the
 *   Effect face (the middleware) and the Promise face (UniqueQueue's hot path and its Effect path); before, the
 *   release was logged and dropped, the lock stayed for its lease, and a new job of the digest was turned away as a
 *   duplicate: BullMQ completed it without running it.
 * - A handoff: the job goes back to its queue and runs once, never completed unrun, and the undo of the lost call
 *   never ends the hold its next run takes.
 * - Issue 47, item 8: a wrong-typed key met by a handoff that went in a batch is an answer Redis gives again: the job
 *   fails, it is not put back.
 *
 * Counts and keys only; no timing is asserted.
 */
import { assert, describe, layer } from "@effect/vitest"
import type { Job as BullJob } from "bullmq"
import * as Effect from "effect/Effect"
import * as References from "effect/References"
import * as Layer from "effect/Layer"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as Job from "../src/Job.js"
import * as Lock from "../src/Lock.js"
import * as Middleware from "../src/Middleware.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as Bull from "./support/bullmq.js"
import * as Proxy from "./support/proxy.js"
import * as RedisTest from "./support/redis.js"
import { type Data, lockProxiedUniqueQueue, sleep, uniqueQueue } from "./support/uniquequeue.js"

const losses = ["request", "reply"] as const

/** Whether the lock's holders key is in Redis. */
const held = (definition: LockOptions.Definition, digest: string, phase: "queue" | "run") =>
  Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
    Effect.promise(() => raw.exists(RedisTest.keysOf(definition.lockPrefix, Lock.keyOf(definition, digest, phase).name).locked))
  ).pipe(Effect.map((n) => n === 1))

/** A UniqueQueue whose locks reach the test Redis through a proxy, and a worker that takes jobs only when asked. */
const proxied = (label: string, options: LockOptions.Options) =>
  Effect.gen(function*() {
    const { proxy, name, queue, unique, lockPrefix } = yield* lockProxiedUniqueQueue(label, "2 seconds", {
      lockLease: "30 seconds",
      history: false,
      ...options
    })
    const worker = yield* Bull.manualWorker(name)
    let tokens = 0
    /** The next waiting job (promoting delayed ones), run through `processor`: its answer, or its failure's name. */
    const next = (processor: (job: BullJob<Data>, token?: string) => Promise<unknown>) =>
      Effect.promise(async () => {
        for (let attempt = 0; attempt < 200; attempt++) {
          await queue.promoteJobs()
          const token = `t${++tokens}`
          const job = await worker.getNextJob(token, { block: false })
          if (job === undefined) {
            await sleep(50)
            continue
          }
          return await processor(job as BullJob<Data>, token).then(
            async (value) => {
              await job.moveToCompleted(value, token, false)
              return { id: job.id, answer: value === undefined ? "completed unrun" : String(value) }
            },
            (error: Error) => ({ id: job.id, answer: error.name, error })
          )
        }
        return undefined
      })
    return { proxy, queue, unique, lockPrefix, next }
  })

/** An add, tried again while the store still reconnects after the lost call (its calls fail fast meanwhile). */
const addOnceConnected = (unique: UniqueQueue.UniqueQueue<Data>, n: number) =>
  Effect.promise(async () => {
    for (let attempt = 0; ; attempt++) {
      try {
        return await unique.add("Work", { n })
      } catch (error) {
        if (attempt >= 100) throw error
        await sleep(50)
      }
    }
  })

describe("a lock step whose answer is lost with its connection (issue 47, observation 2)", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    for (const lock of ["while_executing", "until_and_while_executing"] as const) {
      for (const lost of losses) {
        it.effect(`Effect face, ${lock}: a release whose ${lost} is lost is tried again; the run lock is gone once the job is Performed`, () =>
          Effect.gen(function*() {
            const { source } = yield* RedisTest.TestRedis
            const proxy = yield* Proxy.start(source.url)
            const context = yield* Layer.build(
              Layer.merge(Redis.layer({ url: proxy.url, timeout: "2 seconds" }), MemoryQueue.layer())
            )
            const definition = LockOptions.unsafeMake({
              lock,
              lockLease: "30 seconds",
              lockPrefix: RedisTest.uniquePrefix(`lost-${lost}`)
            })
            const job = Job.make({ worker: "LostReleaseJob", queue: "q", args: [1] })
            const enqueued = yield* Middleware.client(definition, job, Effect.succeed).pipe(Effect.provide(context))
            let ran = 0
            // The perform's last act: the next call the store sends (the release) is lost with its connection.
            const outcome = yield* Middleware.server(
              definition,
              enqueued.job,
              Effect.andThen(proxy.lose(lost), Effect.sync(() => ++ran))
            ).pipe(Effect.provide(context))
            assert.strictEqual(outcome._tag, "Performed")
            assert.strictEqual(ran, 1)
            assert.isFalse(yield* held(definition, enqueued.digest, "run"), "the run lock outlived its job")
          }).pipe(Effect.provideService(References.MinimumLogLevel, "None")), 60_000)
      }
    }

    // The hot path (a fn that takes no signal: while_executing) and the Effect path (until_and_while_executing, and
    // while_executing with a fn that takes the signal) of UniqueQueue's processor.
    const faces: ReadonlyArray<readonly [string, "while_executing" | "until_and_while_executing", boolean]> = [
      ["hot path", "while_executing", false],
      ["a fn that takes a signal", "while_executing", true],
      ["handoff", "until_and_while_executing", false]
    ]
    for (const [label, lock, takesSignal] of faces) {
      for (const lost of losses) {
        it.effect(`UniqueQueue, ${lock}, ${label}: a release whose ${lost} is lost leaves no run lock; the next job of the digest runs, not completed unrun`, () =>
          Effect.gen(function*() {
            const { proxy, unique, next, lockPrefix } = yield* proxied(`uq-${lost}`, { lock })
            const ran: Array<string> = []
            const perform = async (job: BullJob<Data>) => {
              ran.push(job.id!)
              // The fn's last act: the release, the next call the store sends, is lost with its connection.
              await Effect.runPromise(proxy.lose(lost))
              return "ran"
            }
            const processor = unique.processor(
              takesSignal
                ? (job: BullJob<Data>, _token: string | undefined, _signal: AbortSignal) => perform(job)
                : (job: BullJob<Data>) => perform(job)
            )
            const first = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
            assert.strictEqual(first._tag, "Enqueued")
            assert.deepStrictEqual(yield* next(processor), { id: first.job.jid, answer: "ran" })
            const definition = LockOptions.unsafeMake({ lock, lockPrefix })
            assert.isFalse(yield* held(definition, first.digest, "run"), "the run lock outlived its job")
            // A new job of the digest, added once the first completed: it runs.
            const second = yield* addOnceConnected(unique, 1)
            assert.strictEqual(second._tag, "Enqueued")
            const answer = yield* next(processor)
            assert.deepStrictEqual(answer, { id: second.job.jid, answer: "ran" })
            assert.deepStrictEqual(ran, [first.job.jid, second.job.jid])
          }).pipe(Effect.provideService(References.MinimumLogLevel, "None")), 60_000)
      }
    }

    for (const lost of losses) {
      it.effect(`UniqueQueue, until_and_while_executing: a handoff whose ${lost} is lost puts the job back; it runs once, never completed unrun, its run lock gone`, () =>
        Effect.gen(function*() {
          const { proxy, unique, next, lockPrefix } = yield* proxied(`handoff-${lost}`, {
            lock: "until_and_while_executing"
          })
          const ran: Array<string> = []
          const processor = unique.processor(async (job: BullJob<Data>) => {
            ran.push(job.id!)
            // Long enough for a late undo of the lost handoff to land while it runs, if it were sent then.
            await sleep(1_500)
            return "ran"
          })
          const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
          yield* proxy.lose(lost)
          const first = yield* next(processor)
          assert.strictEqual(first?.answer, "DelayedError", "put back, not completed")
          assert.deepStrictEqual(ran, [])
          // Taken again until it runs (a copy that meets its own late hold is put back again).
          let answer = first
          for (let round = 0; round < 40 && answer?.answer === "DelayedError"; round++) answer = yield* next(processor)
          assert.deepStrictEqual(answer, { id: added.job.jid, answer: "ran" }, JSON.stringify(answer))
          assert.deepStrictEqual(ran, [added.job.jid])
          const definition = LockOptions.unsafeMake({ lock: "until_and_while_executing", lockPrefix })
          assert.isFalse(yield* held(definition, added.digest, "run"))
        }).pipe(Effect.provideService(References.MinimumLogLevel, "None")), 60_000)
    }

    it.effect("a wrong-typed run lock key met by a handoff that went in a batch: Redis answered, a retry meets the same; the job fails, it is not put back (issue 47, item 8)", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { name, queue, unique } = yield* uniqueQueue({ lock: "until_and_while_executing", history: false })
        const ran: Array<number> = []
        const processor = unique.processor(async (job: BullJob<Data>) => {
          ran.push(job.data.n)
          return "ran"
        })
        const worker = yield* Bull.manualWorker(name)
        // A first job through, so the store and its prefix's layout are ready: the three below go in one turn.
        yield* Effect.promise(() => unique.add("Work", { n: 0 }))
        const warm = yield* Effect.promise(() => worker.getNextJob("t0", { block: false }))
        assert.strictEqual(yield* Effect.promise(() => processor(warm as BullJob<Data>, "t0")), "ran")
        const added = yield* Effect.forEach([1, 2, 3], (n) => Effect.promise(() => unique.add("Work", { n })))
        // Another program's key where the third job's run lock would be.
        yield* Effect.promise(() => raw.set(`${added[2]!.digest}:RUN:LOCKED`, "not ours"))
        const jobs = yield* Effect.forEach([1, 2, 3], (n) =>
          Effect.promise(async () => (await worker.getNextJob(`t${n}`, { block: false }))!))
        // In one turn: the first handoff goes alone, the two after it wait for the turn's end and go as one batch.
        const answers = yield* Effect.promise(() =>
          Promise.all(jobs.map((job, i) => processor(job as BullJob<Data>, `t${i + 1}`).then(String, (error: unknown) => error)))
        )
        assert.deepStrictEqual(answers.slice(0, 2), ["ran", "ran"])
        const failure = answers[2] as Redis.RedisError
        assert.strictEqual(failure._tag, "RedisError", String(failure))
        assert.include(failure.reason, "WRONGTYPE")
        // Located by no script line: its error came from a step of batch.lua, not from handoff.lua alone.
        assert.isUndefined(failure.script, "the handoff went in a batch")
        assert.strictEqual(yield* Effect.promise(() => queue.getJobState(added[2]!.job.jid)), "active", "not put back")
        assert.deepStrictEqual(ran.sort(), [0, 1, 2])
      }).pipe(Effect.provideService(References.MinimumLogLevel, "None")), 60_000)
  })
})
