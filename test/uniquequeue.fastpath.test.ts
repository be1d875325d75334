/**
 * The Promise face's hot path (issue 20): `UniqueQueue.add` and `unique.processor` answer without a fiber where they
 * can (adapters/bullmq/HotPath: clientFast, serverFast). A differential property runs the same steps through a UniqueQueue and
 * through the Effect API (`Middleware.client`, `BullMQ.processor`) on twin queues of one name, and checks every answer,
 * every holder and every lock left are the same; examples pin what the hot path must keep: no fiber for a duplicate,
 * the metrics, a refused or failed add's lock, a sync throw or a plain value from a processor, close's timeout.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=100 npx vitest run test/uniquequeue.fastpath.test.ts
 */
import { assert, describe, layer } from "@effect/vitest"
import { type Job as BullJob, Queue, Worker } from "bullmq"
import * as Cause from "effect/Cause"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "fast-check"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Metric from "effect/Metric"
import * as Tracer from "effect/Tracer"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as Defaults from "../src/Defaults.js"
import * as Job from "../src/Job.js"
import type * as LockType from "../src/LockType.js"
import * as Metrics from "../src/Metrics.js"
import * as Middleware from "../src/Middleware.js"
import * as Locks from "../src/Locks.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import type * as Strategy from "../src/Strategy.js"
import * as Bull from "./support/bullmq.js"
import * as RedisTest from "./support/redis.js"
import { recording } from "./support/tracing.js"
import { type Data, downLockRedisQueue, lockKeys, proxiedUniqueQueue, rejection, sleep, uniqueQueue } from "./support/uniquequeue.js"

const runs = (ci: number): number => Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? ci)

/** How many fibers were started (anywhere in this process) since the last call: fiber ids come from one counter. */
const fiberCounter = () => {
  const id = () => Effect.runSync(Effect.fiberId)
  let last = id()
  return () => {
    const now = id()
    const started = now - last - 1
    last = now
    return started
  }
}

const lockTypes: ReadonlyArray<{ readonly lock: LockType.LockType; readonly lockTtl?: Duration.Input }> = [
  { lock: "until_executing" },
  { lock: "until_executed" },
  { lock: "until_expired", lockTtl: "1 hour" },
  { lock: "while_executing" },
  { lock: "until_and_while_executing" }
]
const strategies: ReadonlyArray<Strategy.ClientName> = ["log", "raise", "reject", "replace"]

type Step =
  | { readonly _tag: "add"; readonly n: number }
  | { readonly _tag: "run"; readonly fail: boolean }

// An answer with its jids named by the argument list of the job that holds them, so the two sides compare.
const answerOf = (
  settled: { readonly ok: true; readonly outcome: Strategy.ClientOutcome<unknown> } | {
    readonly ok: false
    readonly error: unknown
  },
  owner: (jid: string) => string
): string => {
  if (!settled.ok) {
    const error = settled.error as { readonly _tag?: string; readonly message?: string }
    return `error ${error._tag ?? error.message}`
  }
  const outcome = settled.outcome
  switch (outcome._tag) {
    case "Enqueued":
      return "Enqueued"
    case "Skipped":
      return `Skipped by ${outcome.holders.map(owner).join(",")}`
    case "Replaced":
      return `Replaced ${outcome.replaced.map(owner).join(",")}`
    case "Rejected":
      return "Rejected"
  }
}

describe("UniqueQueue: the hot path answers as the Effect path", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("property: the same adds and runs through UniqueQueue and through the Effect API give the same answers and locks", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const connection = yield* Bull.connection
        const step: fc.Arbitrary<Step> = fc.oneof(
          { weight: 3, arbitrary: fc.record({ _tag: fc.constant("add" as const), n: fc.integer({ min: 1, max: 3 }) }) },
          { weight: 1, arbitrary: fc.record({ _tag: fc.constant("run" as const), fail: fc.boolean() }) }
        )
        const check = (type: (typeof lockTypes)[number], strategy: Strategy.ClientName, steps: ReadonlyArray<Step>) =>
          Effect.gen(function*() {
            const name = Bull.uniqueName("fp")
            // A type that takes no lock at enqueue has no client strategy.
            const options: LockOptions.Options = type.lock === "while_executing"
              ? type
              : { ...type, onConflict: { client: strategy } }
            // Twin queues: one name (so one digest), two BullMQ prefixes and two lock prefixes.
            const twin = (side: string) =>
              Effect.acquireRelease(
                Effect.sync(() => new Queue(name, { connection, prefix: `{fp${side}${process.pid}}` })),
                (q) => Effect.promise(() => q.close())
              )
            const queueA = yield* twin("a")
            const queueB = yield* twin("b")
            const prefixA = RedisTest.uniquePrefix("fpa")
            const prefixB = RedisTest.uniquePrefix("fpb")
            const unique = yield* Effect.acquireRelease(
              Effect.sync(() =>
                UniqueQueue.make<Data>(queueA, {
                  ...options,
                  lockPrefix: prefixA,
                  redis: { url: testRedis.source.url },
                  defaults: {},
                  history: false
                })
              ),
              (u) => Effect.promise(() => u.close())
            )
            const definition = Effect.runSync(LockOptions.make({ ...options, lockPrefix: prefixB }))
            const runtime = yield* Effect.acquireRelease(
              Effect.sync(() =>
                ManagedRuntime.make(
                  Layer.mergeAll(BullMQ.layer(queueB), Defaults.layer({})).pipe(
                    Layer.provideMerge(Redis.layer({ url: testRedis.source.url }))
                  )
                )
              ),
              (r) => Effect.promise(() => r.dispose())
            )
            const failing = new Set<string>()
            const processorA = unique.processor(async (job) => {
              if (failing.has(job.id ?? "")) throw new Error("boom")
              return `done ${job.data.n}`
            })
            const processorB = yield* Effect.promise(() =>
              runtime.runPromise(
                BullMQ.processor({ definition }, (job) =>
                  failing.has(job.id ?? "") ? Effect.fail(new Error("boom")) : Effect.succeed(`done ${job.data.n}`))
              )
            )
            const workerA = yield* Effect.acquireRelease(
              Effect.sync(() => new Worker(name, null, { connection, prefix: `{fpa${process.pid}}`, autorun: false })),
              (w) => Effect.promise(() => w.close())
            )
            const workerB = yield* Effect.acquireRelease(
              Effect.sync(() => new Worker(name, null, { connection, prefix: `{fpb${process.pid}}`, autorun: false })),
              (w) => Effect.promise(() => w.close())
            )
            const ownerA = new Map<string, string>()
            const ownerB = new Map<string, string>()
            const named = (owners: Map<string, string>) => (jid: string) => owners.get(jid) ?? `unknown ${jid}`
            let token = 0
            const runOne = (worker: Worker, processor: (job: BullJob, token?: string) => Promise<unknown>, fail: boolean) =>
              Effect.promise(async () => {
                const t = `t${++token}`
                const job = await worker.getNextJob(t, { block: false })
                if (job === undefined) return "none"
                if (fail) failing.add(job.id!)
                try {
                  const value = await processor(job, t)
                  await job.moveToCompleted(value, t, false)
                  return `completed ${String(value)}`
                } catch (error) {
                  await job.moveToFailed(error as Error, t, false)
                  return `failed ${(error as Error).message}`
                }
              })
            // Each side's first call builds its runtime; UniqueQueue's hot path starts once it is built.
            const warm: ReadonlyArray<Step> = [{ _tag: "add", n: 0 }, { _tag: "add", n: 0 }]
            for (const s of [...warm, ...steps]) {
              if (s._tag === "run") {
                // The same hold times recorded (unique_jobs_lock_hold_time_ms, the same labels) on either face.
                const holds = () => Effect.runSync(Metric.value(Metrics.holdTime)).count
                const before = holds()
                const a = yield* runOne(workerA, processorA as never, s.fail)
                const heldA = holds() - before
                const b = yield* runOne(workerB, processorB, s.fail)
                assert.strictEqual(a, b, `run: ${JSON.stringify(steps)}`)
                assert.strictEqual(heldA, holds() - before - heldA, `hold times: ${JSON.stringify(steps)}`)
                continue
              }
              const a = yield* Effect.promise(() =>
                unique.add("Work", { n: s.n }).then(
                  (outcome) => ({ ok: true as const, outcome }),
                  (error: unknown) => ({ ok: false as const, error })
                )
              )
              const b = yield* Effect.promise(() =>
                runtime.runPromiseExit(
                  Middleware.client(definition)(
                    Job.make({ worker: "Work", queue: name, args: [{ n: s.n }] }),
                    (stamped) => Effect.flatMap(BullMQ.BullMQ, (bull) => bull.add(stamped))
                  )
                ).then((exit) =>
                  Exit.isSuccess(exit)
                    ? { ok: true as const, outcome: exit.value }
                    : { ok: false as const, error: Cause.squash(exit.cause) }
                )
              )
              if (a.ok && a.outcome._tag !== "Skipped") ownerA.set(a.outcome.job.jid, `n${s.n}`)
              if (b.ok && b.outcome._tag !== "Skipped") ownerB.set(b.outcome.job.jid, `n${s.n}`)
              assert.strictEqual(answerOf(a, named(ownerA)), answerOf(b, named(ownerB)), `add ${s.n}: ${JSON.stringify(steps)}`)
            }
            // The same locks, held by the jobs of the same argument lists.
            const held = (prefix: string, owners: Map<string, string>) =>
              Effect.flatMap(lockKeys(prefix), (keys) =>
                Effect.forEach(keys, (key) =>
                  Effect.promise(async () =>
                    `${key.slice(prefix.length)} ${
                      Object.keys(await testRedis.raw.hgetall(key)).map(named(owners)).sort().join(",")
                    }`
                  )))
            assert.deepStrictEqual(yield* held(prefixA, ownerA), yield* held(prefixB, ownerB), JSON.stringify(steps))
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.constantFrom(...lockTypes),
              fc.constantFrom(...strategies),
              fc.array(step, { minLength: 3, maxLength: 14 }),
              (type, strategy, steps) => Effect.runPromise(check(type, strategy, steps))
            ),
            {
              numRuns: runs(40),
              // Every lock type through a run that completes and one that fails on its last attempt, every time.
              examples: lockTypes.map((type): [(typeof lockTypes)[number], Strategy.ClientName, Array<Step>] => [
                type,
                "log",
                [
                  { _tag: "add", n: 1 },
                  { _tag: "add", n: 2 },
                  { _tag: "run", fail: false },
                  { _tag: "run", fail: false },
                  { _tag: "run", fail: true },
                  { _tag: "add", n: 1 },
                  { _tag: "add", n: 2 },
                  { _tag: "add", n: 2 }
                ]
              ])
            }
          )
        )
      }), 240_000)

    it.effect("a duplicate add starts no fiber, and is counted in the metrics as the Effect path counts it", () =>
      Effect.gen(function*() {
        const { unique } = yield* uniqueQueue({ lock: "until_executed", history: false })
        // The first add builds the runtime (through the Effect path); the hot path starts after it.
        const first = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        assert.strictEqual(first._tag, "Enqueued")
        yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        const counter = Metrics.conflicts.of("until_executed", "queue")
        const before = Effect.runSync(Metric.value(counter)).count
        const fibers = fiberCounter()
        for (let i = 0; i < 50; i++) {
          const outcome = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
          assert.strictEqual(outcome._tag, "Skipped")
          // As the Effect path answers it: the digest, and the holder by its jid.
          if (outcome._tag === "Skipped") {
            assert.deepStrictEqual([outcome.digest, outcome.holders], [first.digest, [first.job.jid]])
          }
        }
        // Background work (BullMQ's own timers run no fibers; the store's lease keeper holds no lease here) stays far
        // below one fiber per add.
        assert.isBelow(fibers(), 10, "50 duplicates started (almost) no fiber")
        const after = Effect.runSync(Metric.value(counter)).count
        assert.isAtLeast(after - before, 50, "every duplicate counted")
      }))

    it.effect("the hot path counts what it takes and releases; a release that finds its lock deleted warns and counts", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { name, unique } = yield* uniqueQueue({ lock: "until_executed", history: false })
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        const count = (family: { readonly of: (lockType: string, phase: string) => Metric.Counter<number> }) =>
          Effect.runSync(Metric.value(family.of("until_executed", "queue"))).count
        const before = { acquired: count(Metrics.acquired), released: count(Metrics.released), missed: count(Metrics.releaseMissed) }
        for (let n = 1; n <= 3; n++) yield* Effect.promise(() => unique.add("Work", { n }))
        const processor = unique.processor(async (job: BullJob<Data>) => {
          // An operator deletes the lock of n=3 while its job runs.
          if (job.data.n === 3) {
            const outcome = await unique.add("Work", { n: 3 })
            await raw.del(`${outcome.digest}:LOCKED`)
          }
          return "done"
        })
        const worker = yield* Bull.manualWorker(name)
        for (let t = 0; t < 4; t++) {
          const job = yield* Effect.promise(() => worker.getNextJob(`t${t}`, { block: false }))
          yield* Effect.promise(() => processor(job as BullJob<Data>, `t${t}`))
        }
        // An until_executed job's release goes out with its outcome, and is counted when it answers: close waits for it.
        yield* Effect.promise(() => unique.close())
        assert.strictEqual(count(Metrics.acquired) - before.acquired, 3, "three locks taken")
        assert.strictEqual(count(Metrics.released) - before.released, 3, "the warm-up job's and two others released")
        assert.strictEqual(count(Metrics.releaseMissed) - before.missed, 1, "the deleted one missed, and counted")
      }))

    it.effect("an until_executing job whose queue lock was deleted before it ran: its release warns and counts, once", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { name, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executing", history: false })
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        yield* Effect.promise(() => raw.del(`${added.digest}:LOCKED`))
        const missed = () => Effect.runSync(Metric.value(Metrics.releaseMissed.of("until_executing", "queue"))).count
        const before = missed()
        const processor = unique.processor(async () => "done")
        const worker = yield* Bull.manualWorker(name)
        for (let t = 0; t < 2; t++) {
          const job = yield* Effect.promise(() => worker.getNextJob(`t${t}`, { block: false }))
          assert.strictEqual(yield* Effect.promise(() => processor(job as BullJob<Data>, `t${t}`)), "done")
        }
        assert.strictEqual(missed() - before, 1, "the deleted lock's release missed, and was counted")
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [])
      }))

    it.effect("a fresh add on the hot path whose BullMQ add fails lets its lock go; the next add is Enqueued", () =>
      Effect.gen(function*() {
        const { queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed", history: false })
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        // BullMQ refuses the data it cannot pack: the add fails after the lock was taken.
        const original = queue.add.bind(queue)
        let failNext = true
        queue.add = ((...args: Parameters<Queue["add"]>) => {
          if (failNext) {
            failNext = false
            return Promise.reject(new Error("queue refused"))
          }
          return original(...args)
        }) as Queue["add"]
        const error = yield* rejection(() => unique.add("Work", { n: 7 }))
        assert.strictEqual((error as { readonly _tag?: string })._tag, "QueueError")
        assert.include(String((error as Error).message), "queue refused")
        assert.deepStrictEqual((yield* lockKeys(lockPrefix)).length, 1, "only the warm-up job's lock is left")
        assert.strictEqual((yield* Effect.promise(() => unique.add("Work", { n: 7 })))._tag, "Enqueued")
      }))

    it.effect("a fresh add on the hot path that BullMQ stores under another id is a QueueError, and lets its lock go", () =>
      Effect.gen(function*() {
        const { queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed", history: false })
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        // A queue subclass that rewrites ids: BullMQ answers a job, but not the one under the lock's jid.
        const original = queue.add.bind(queue)
        queue.add = ((name: string, data: unknown, opts?: Parameters<Queue["add"]>[2]) =>
          original(name, data, { ...opts, jobId: `other-${opts?.jobId}` })) as Queue["add"]
        const error = yield* rejection(() => unique.add("Work", { n: 8 }))
        assert.strictEqual((error as { readonly _tag?: string })._tag, "QueueError")
        assert.include(String((error as Error).message), "instead of storing this one under its id")
        assert.deepStrictEqual((yield* lockKeys(lockPrefix)).length, 1, "only the warm-up job's lock is left")
      }))

    it.effect("every client strategy on the hot path: raise fails DuplicateJob, reject sends to the dead set, replace replaces", () =>
      Effect.gen(function*() {
        for (const strategy of ["raise", "reject", "replace"] as const) {
          const { unique, lockPrefix } = yield* uniqueQueue({
            lock: "until_executed",
            onConflict: { client: strategy },
            history: false
          })
          yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
          const first = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
          assert.strictEqual(first._tag, "Enqueued")
          const second = yield* Effect.promise(() =>
            unique.add("Work", { n: 1 }).then((outcome) => outcome._tag, (error: { readonly _tag: string }) => error._tag)
          )
          assert.strictEqual(second, { raise: "DuplicateJob", reject: "Rejected", replace: "Replaced" }[strategy])
          assert.strictEqual((yield* lockKeys(lockPrefix)).length, 2, strategy)
        }
      }))

    // A fn of three parameters always takes the Effect path; one of one, the hot path.
    for (const arity of [1, 3] as const) {
    it.effect(`a processor's fn (${arity} parameters) that throws at once, or answers a plain value, ends as BullMQ's own`, () =>
      Effect.gen(function*() {
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed", history: false })
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        const plain = (job: BullJob<Data>) => {
          if (job.data.n === 1) throw new Error("sync boom")
          return `plain ${job.data.n}` as unknown as Promise<string>
        }
        const processor = arity === 1
          ? unique.processor(plain as (job: BullJob<Data>) => Promise<string>)
          : unique.processor(((job: BullJob<Data>, _token: string | undefined, _signal: AbortSignal) => plain(job)) as (
            job: BullJob<Data>,
            token: string | undefined,
            signal: AbortSignal
          ) => Promise<string>)
        const worker = yield* Bull.manualWorker(name)
        yield* Effect.promise(() => queue.obliterate({ force: true }))
        yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        yield* Effect.promise(() => unique.add("Work", { n: 2 }))
        const ends: Array<string> = []
        for (let t = 1; t <= 2; t++) {
          const job = yield* Effect.promise(() => worker.getNextJob(`t${t}`, { block: false }))
          ends.push(yield* Effect.promise(() =>
            processor(job as BullJob<Data>, `t${t}`).then((value) => `value ${value}`, (error: Error) => `error ${error.message}`)
          ))
        }
        assert.deepStrictEqual(ends, ["error sync boom", "value plain 2"])
        // n=1 failed on its only attempt: its lock went as a dead job's; n=2 completed: its lock went.
        const left = yield* lockKeys(lockPrefix)
        assert.strictEqual(left.length, 1, "only the warm-up job's lock, whose job was obliterated before it ran")
      }))
    }

    it.effect("a retry of an until_executing job finds its lock released by the first attempt: no warning, on either path", () =>
      Effect.gen(function*() {
        const missed = () => Effect.runSync(Metric.value(Metrics.releaseMissed.of("until_executing", "queue"))).count
        for (const arity of [1, 3] as const) {
          const { name, unique } = yield* uniqueQueue({ lock: "until_executing", history: false })
          yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
          let attempt = 0
          const fn = async (job: BullJob<Data>) => {
            if (job.data.n === 1 && attempt++ === 0) throw new Error("first attempt fails")
            return "done"
          }
          const processor = arity === 1
            ? unique.processor(fn)
            : unique.processor((job: BullJob<Data>, _token: string | undefined, _signal: AbortSignal) => fn(job))
          const worker = yield* Bull.manualWorker(name)
          yield* Effect.promise(() => unique.add("Work", { n: 1 }, { attempts: 2 }))
          const before = missed()
          const ends: Array<string> = []
          for (let t = 0; t < 3; t++) {
            const job = yield* Effect.promise(() => worker.getNextJob(`t${t}`, { block: false }))
            if (job === undefined) break
            ends.push(yield* Effect.promise(() =>
              processor(job as BullJob<Data>, `t${t}`).then(
                async (value) => {
                  await job.moveToCompleted(value, `t${t}`, false)
                  return `${job.data.n} completed`
                },
                async (error: Error) => {
                  await job.moveToFailed(error, `t${t}`, false)
                  return `${job.data.n} failed`
                }
              )
            ))
          }
          assert.deepStrictEqual(ends, ["0 completed", "1 failed", "1 completed"], `arity ${arity}`)
          assert.strictEqual(missed() - before, 0, `arity ${arity}: the retry's release found nothing, as expected`)
        }
      }))

    it.effect("a lock Redis down at the first call: that call fails with RedisError, and once it is back the queue works", () =>
      Effect.gen(function*() {
        const { name, server, unique } = yield* downLockRedisQueue("fpdown")
        const first = yield* rejection(() => unique.add("Work", { n: 1 }))
        assert.strictEqual((first as { readonly _tag?: string })._tag, "RedisError", String(first))
        yield* server.restart
        // The failed build is let go once it has failed; the next calls build anew.
        let answer: unknown = undefined
        for (let attempt = 0; attempt < 50; attempt++) {
          answer = yield* Effect.promise(() => unique.add("Work", { n: 2 }).then((outcome) => outcome._tag, (error: unknown) => error))
          if (answer === "Enqueued") break
          yield* Effect.promise(() => sleep(100))
        }
        assert.strictEqual(answer, "Enqueued")
        // And its processor runs jobs under their run locks on the rebuilt runtime.
        let ran = 0
        yield* Bull.worker(name, unique.processor(async () => {
          ran++
          return "done"
        }))
        assert.isTrue(yield* Bull.until(Effect.sync(() => ran >= 1)), "a job ran")
      }), 60_000)

    it.effect("close({ timeout }) cuts off no add, hot path or not: every job BullMQ stores has its lock", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { lockPrefix, name, proxy, unique } = yield* proxiedUniqueQueue("fpclose")
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        yield* proxy.stall
        // A jobId or a delay takes the Effect path; the rest the hot path.
        const adds = [1, 2, 3, 4, 5, 6].map((n) =>
          unique.add("Work", { n }, n % 3 === 0 ? { jobId: `job-${n}` } : n % 3 === 1 ? { delay: 60_000 } : {}).then(
            (outcome) => outcome._tag,
            (error: { readonly _tag?: string }) => error._tag ?? String(error)
          )
        )
        yield* Effect.promise(() => sleep(100))
        const closed = unique.close({ timeout: 100 })
        yield* Effect.promise(() => sleep(200))
        yield* proxy.resume
        yield* Effect.promise(() => closed.catch(() => undefined))
        const answers = yield* Effect.promise(() => Promise.all(adds))
        for (const answer of answers) assert.oneOf(answer, ["Enqueued", "QueueError"], String(answers))
        // Every job BullMQ holds (after its late adds landed) has its lock, held by its id.
        yield* Effect.promise(() => sleep(300))
        const direct = yield* Bull.queue(name)
        const jobs = (yield* Effect.promise(() => direct.getJobs(["wait", "delayed"]))).map((job) => job.id!)
        const holders = new Set<string>()
        for (const key of yield* lockKeys(lockPrefix)) {
          for (const jid of yield* Effect.promise(() => raw.hkeys(key))) holders.add(jid)
        }
        for (const id of jobs) assert.isTrue(holders.has(id), `job ${id} has its lock (${JSON.stringify(answers)})`)
        assert.isAtLeast(jobs.length, 2, "the warm-up job and the adds that landed")
      }), 60_000)

    it.effect("a hot-path run lock deleted while its job runs (a fn without a signal): the job fails LockLost once its fn returns", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
          lock: "while_executing",
          lockLease: "900 millis",
          onConflict: { server: "reschedule" },
          history: false
        })
        yield* Effect.addFinalizer(() => Effect.promise(() => unique.close({ timeout: 1000 }).catch(() => undefined)))
        let release!: () => void
        const gate = new Promise<void>((resolve) => (release = resolve))
        yield* Effect.addFinalizer(() => Effect.sync(() => release()))
        let started!: () => void
        const running = new Promise<void>((resolve) => (started = resolve))
        yield* Bull.worker(name, unique.processor(async (job: BullJob<Data>) => {
          if (job.data.n === 1) {
            started()
            await gate
          }
          return "done"
        }))
        // The first job builds the runtime; the second runs on the hot path.
        assert.strictEqual((yield* Effect.promise(() => unique.add("Work", { n: 0 })))._tag, "Enqueued")
        yield* Effect.promise(() => sleep(100))
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { attempts: 1 }))
        yield* Effect.promise(() => running)
        const [runLock] = yield* lockKeys(lockPrefix)
        assert.strictEqual(runLock, `${added.digest}:RUN:LOCKED`)
        const lost = Metrics.lost.of("while_executing", "run")
        const before = (yield* Metric.value(lost)).count
        yield* Effect.promise(() => raw.del(runLock!))
        // Told at the next renewal (a third of the lease), while its fn still runs: the job stays active until its fn
        // has returned (nothing can stop it), then fails for good.
        assert.isTrue(yield* Bull.until(Effect.map(Metric.value(lost), (value) => value.count > before)), "the loss was told")
        assert.strictEqual(yield* Effect.promise(() => queue.getJobState(added.job.jid)), "active", "its fn still runs")
        release()
        assert.isTrue(
          yield* Bull.until(Effect.promise(async () => (await queue.getJobState(added.job.jid)) === "failed")),
          "the job failed once its fn had returned"
        )
        const job = yield* Effect.promise(() => queue.getJob(added.job.jid))
        assert.include(job?.failedReason ?? "", "lost its lock")
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], "nothing is left held")
      }), 30_000)

    it.effect("a hot-path run lock deleted just before its job ends: the release finds it gone, the job fails LockLost", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        // A long lease: no renewal comes between the delete and the release.
        const { name, unique, lockPrefix } = yield* uniqueQueue({ lock: "while_executing", lockLease: "1 minute", history: false })
        const processor = unique.processor(async (job: BullJob<Data>) => {
          if (job.data.n === 1) {
            const [runLock] = (await raw.keys(`${lockPrefix}:*:RUN:LOCKED`))
            await raw.del(runLock!)
          }
          return "done"
        })
        const worker = yield* Bull.manualWorker(name)
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        const ends: Array<string> = []
        for (let t = 0; t < 2; t++) {
          const job = yield* Effect.promise(() => worker.getNextJob(`t${t}`, { block: false }))
          ends.push(yield* Effect.promise(() =>
            processor(job as BullJob<Data>, `t${t}`).then(
              (value) => `value ${String(value)}`,
              (error: Error & { readonly _tag?: string }) => error._tag ?? error.message
            )
          ))
        }
        assert.deepStrictEqual(ends, ["value done", "LockLost"])
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [])
      }))

    it.effect("a hot-path run lock held by a running copy: each server strategy's answer, on the job's own fiber", () =>
      Effect.gen(function*() {
        const connection = yield* Bull.connection
        for (const strategy of ["log", "raise", "reject", "reschedule"] as const) {
          const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
            lock: "while_executing",
            onConflict: { server: strategy },
            history: false
          })
          let release!: () => void
          const gate = new Promise<void>((resolve) => (release = resolve))
          const processor = unique.processor(async (job: BullJob<Data>) => {
            if (job.data.n === 1) await gate
            return `done ${job.data.n}`
          })
          const worker = yield* Bull.manualWorker(name)
          const next = (token: string) =>
            Effect.promise(async () => (await worker.getNextJob(token, { block: false })) as BullJob<Data>)
          // A warm-up job builds the runtime: the jobs below run on the hot path.
          yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
          const warm = yield* next("w")
          yield* Effect.promise(() => processor(warm, "w"))
          yield* Effect.promise(() => unique.add("Work", { n: 1 }, { jobId: "first" }))
          yield* Effect.promise(() => unique.add("Work", { n: 1 }, { jobId: "copy", attempts: 3 }))
          const first = yield* next("t1")
          const running = processor(first, "t1")
          assert.isTrue(
            yield* Bull.until(Effect.map(lockKeys(lockPrefix), (keys) => keys.some((key) => key.endsWith(":RUN:LOCKED")))),
            "the first copy holds its run lock"
          )
          const copy = yield* next("t2")
          const answer = yield* Effect.promise(() =>
            processor(copy, "t2").then(
              (value) => `value ${String(value)}`,
              (error: Error & { readonly _tag?: string }) => error._tag ?? error.name
            )
          )
          const expected = {
            log: "value undefined",
            raise: "ExecutionConflict",
            reject: "value undefined",
            reschedule: "DelayedError"
          }[strategy]
          assert.strictEqual(answer, expected, strategy)
          if (strategy === "reschedule") {
            assert.strictEqual(yield* Effect.promise(() => queue.getJobState("copy")), "delayed", "moved under its id")
          }
          if (strategy === "reject") {
            const dead = new Queue(`${name}-dead`, { connection, ...Bull.prefix })
            yield* Effect.addFinalizer(() => Effect.promise(() => dead.close()))
            assert.isDefined(yield* Effect.promise(() => dead.getJob("copy")), "the copy went to the dead-letter queue")
          }
          release()
          assert.strictEqual(yield* Effect.promise(() => running), "done 1")
          assert.deepStrictEqual(
            (yield* lockKeys(lockPrefix)).filter((key) => key.endsWith(":RUN:LOCKED")),
            [],
            `${strategy}: no run lock left`
          )
        }
      }), 60_000)

    for (const lock of ["until_executed", "while_executing"] as const) {
      it.effect(`close({ timeout }) cancels a hot-path ${lock} job (a fn without a signal): it fails as cancelled`, () =>
        Effect.gen(function*() {
          const { name, unique, lockPrefix } = yield* uniqueQueue({ lock, history: false })
          yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
          yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
          let release!: () => void
          const gate = new Promise<void>((resolve) => (release = resolve))
          let started!: () => void
          const running = new Promise<void>((resolve) => (started = resolve))
          const processor = unique.processor(async (job) => {
            if (job.data.n === 1) {
              started()
              await gate
            }
            return "late"
          })
          const worker = yield* Bull.manualWorker(name)
          yield* Effect.promise(() => unique.add("Work", { n: 1 }))
          // The warm-up jobs first (while_executing adds each: it takes no lock at enqueue): they run and complete.
          let job = yield* Effect.promise(() => worker.getNextJob("t", { block: false }))
          while (job !== undefined && (job.data as Data).n !== 1) {
            yield* Effect.promise(() => processor(job as BullJob<Data>, "t"))
            yield* Effect.promise(() => job!.moveToCompleted("late", "t", false))
            job = yield* Effect.promise(() => worker.getNextJob("t", { block: false }))
          }
          // The fn ends the moment its job is cancelled, while close still has the lock connection open: what it
          // does after that must not touch the lock.
          const ended = processor(job as BullJob<Data>, "t").then(() => "completed", (error: Error) => {
            release()
            return error.message
          })
          yield* Effect.promise(() => running)
          yield* Effect.promise(() => unique.close({ timeout: 200 }))
          assert.strictEqual(yield* Effect.promise(() => ended), `job ${job!.id} was cancelled`)
          yield* Effect.promise(() => sleep(50))
          // until_executed keeps its queue lock for the job's retry; while_executing's run lock was released.
          assert.deepStrictEqual(
            (yield* lockKeys(lockPrefix)).map((key) => key.endsWith(":RUN:LOCKED") ? "run" : "queue"),
            lock === "until_executed" ? ["queue"] : []
          )
        }))
    }
  })
})

// The lock steps' spans a tracer recorded, as `<phase> <jid> -> <the jids of the holds its links point at>`; a link
// may point at a span another tracer (the other face's) recorded.
const lockSteps = (recorded: ReturnType<typeof recording>, ...others: ReadonlyArray<ReturnType<typeof recording>>) =>
  recorded.spans.filter((span) => span.name === "UniqueJobs.lock" || span.name === "UniqueJobs.handoff").map((span) => {
    const every = [recorded, ...others].flatMap((r) => r.spans)
    const holders = span.links.map((link) =>
      every.find((held) => held.spanId === link.span.spanId)?.attributes.get("unique_jobs.jid") ?? "unknown"
    )
    return `${String(span.attributes.get("unique_jobs.phase"))} ${String(span.attributes.get("unique_jobs.jid"))}${
      holders.length === 0 ? "" : ` -> ${holders.join(",")}`
    }`
  })

describe("UniqueQueue under a recording tracer (its tracer option), beside the Effect face", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("a refused duplicate's span links to its holder's on both faces: at enqueue, and while a worker runs, across the faces", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const connection = yield* Bull.connection
        const name = Bull.uniqueName("trace")
        const queue = yield* Bull.queue(name)
        const lockPrefix = RedisTest.uniquePrefix("trace")
        const promiseFace = recording()
        const effectFace = recording()
        const options = { lock: "while_executing", lockPrefix } as const
        const unique = yield* Effect.acquireRelease(
          Effect.sync(() =>
            UniqueQueue.make<Data>(queue, {
              ...options,
              redis: { url: testRedis.source.url },
              defaults: {},
              history: false,
              tracer: promiseFace.tracer
            })
          ),
          (u) => Effect.promise(() => u.close())
        )
        const definition = Effect.runSync(LockOptions.make(options))
        const runtime = yield* Effect.acquireRelease(
          Effect.sync(() =>
            ManagedRuntime.make(
              Layer.mergeAll(BullMQ.layer(queue), Defaults.layer({}), Layer.succeed(Tracer.Tracer, effectFace.tracer)).pipe(
                Layer.provideMerge(Redis.layer({ url: testRedis.source.url }))
              )
            )
          ),
          (r) => Effect.promise(() => r.dispose())
        )
        let release!: () => void
        const gate = new Promise<void>((resolve) => (release = resolve))
        yield* Effect.addFinalizer(() => Effect.sync(() => release()))
        let started!: () => void
        const running = new Promise<void>((resolve) => (started = resolve))
        const processorA = unique.processor(async () => {
          started()
          await gate
          return "done"
        })
        const processorB = yield* Effect.promise(() =>
          runtime.runPromise(BullMQ.processor({ definition }, () => Effect.succeed("done")))
        )
        const worker = yield* Effect.acquireRelease(
          Effect.sync(() => new Worker(name, null, { connection, ...Bull.prefix, autorun: false })),
          (w) => Effect.promise(() => w.close())
        )
        // Three copies of one job: the Promise face runs the first; a copy meets its run lock on each face.
        for (let i = 0; i < 3; i++) yield* Effect.promise(() => queue.add("Work", { n: 1 }, { jobId: `copy-${i}` }))
        const next = (token: string) => Effect.promise(() => worker.getNextJob(token, { block: false }))
        const first = (yield* next("t0"))!
        const holding = processorA(first as BullJob<Data>, "t0")
        yield* Effect.promise(() => running)
        const second = (yield* next("t1"))!
        assert.isUndefined(yield* Effect.promise(() => processorA(second as BullJob<Data>, "t1")), "refused on the Promise face")
        const third = (yield* next("t2"))!
        assert.isUndefined(yield* Effect.promise(() => processorB(third, "t2")), "refused on the Effect face")
        release()
        assert.strictEqual(yield* Effect.promise(() => holding), "done")
        assert.deepStrictEqual(lockSteps(promiseFace), ["run copy-0", "run copy-1 -> copy-0"])
        assert.deepStrictEqual(lockSteps(effectFace, promiseFace), ["run copy-2 -> copy-0"])

        // At enqueue: the same adds on each face make the same lock steps, and the duplicate links to its holder.
        const queued = recording()
        const producer = yield* uniqueQueue({ lock: "until_executed", history: false }, {})
        const traced = UniqueQueue.make<Data>(producer.queue, {
          lock: "until_executed",
          lockPrefix: producer.lockPrefix,
          redis: { url: testRedis.source.url },
          defaults: {},
          history: false,
          tracer: queued.tracer
        })
        yield* Effect.addFinalizer(() => Effect.promise(() => traced.close()))
        const tags = yield* Effect.forEach([1, 1, 2], (n) => Effect.promise(() => traced.add("Work", { n }).then((o) => o._tag)))
        assert.deepStrictEqual(tags, ["Enqueued", "Skipped", "Enqueued"])
        const effectAdds = recording()
        const twin = Effect.runSync(LockOptions.make({ lock: "until_executed", lockPrefix: RedisTest.uniquePrefix("trace") }))
        const jids: Array<string> = []
        for (const n of [1, 1, 2]) {
          const job = Job.make({ worker: "Work", queue: name, args: [{ n }] })
          jids.push(job.jid)
          yield* Effect.promise(() =>
            runtime.runPromise(
              Middleware.client(twin)(job, (stamped) => Effect.flatMap(BullMQ.BullMQ, (bull) => bull.add(stamped))).pipe(
                Effect.withTracer(effectAdds.tracer)
              )
            )
          )
        }
        // Each jid named by the order it first appears in: the two faces' jids differ, their shapes must not.
        const shape = (steps: ReadonlyArray<string>) => {
          const names = new Map<string, string>()
          return steps.map((step) =>
            step.replace(/(?<=^\w+ )\S+|(?<=-> )\S+/g, (jid) => {
              if (!names.has(jid)) names.set(jid, String.fromCharCode(65 + names.size))
              return names.get(jid)!
            })
          )
        }
        assert.deepStrictEqual(shape(lockSteps(queued)), ["queue A", "queue B -> A", "queue C"])
        assert.deepStrictEqual(shape(lockSteps(effectAdds)), shape(lockSteps(queued)))
        assert.strictEqual(lockSteps(effectAdds)[0], `queue ${jids[0]}`)
        // Anything else than a Tracer is refused at make, named.
        const refused = yield* Effect.flip(Effect.try({
          try: () => UniqueQueue.make(queue, { lock: "until_executed", tracer: {} as Tracer.Tracer }),
          catch: (error) => error as LockOptions.InvalidLockOptions
        }))
        assert.include(refused.message, "tracer: expected an Effect Tracer")
      }), 60_000)
  })
})

describe("UniqueQueue and the Effect face: an operator's revoke while the job's promise runs on", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("both faces keep the revoked place until the perform has returned: the same bodies in turn, LockLost, nothing left", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const options = { lock: "while_executing", lockLease: 1000, onConflict: { server: "reschedule" }, rescheduleDelay: 100 } as const
        // One face's run: a job whose body runs on 2 s past the revoke (twice its lease) unless a second copy starts,
        // and a second copy of it, rescheduled while the first holds. Answers what the bodies and BullMQ saw.
        const face = (side: "promise" | "effect") =>
          Effect.gen(function*() {
            const name = Bull.uniqueName(`rv${side}`)
            const queue = yield* Bull.queue(name)
            const lockPrefix = RedisTest.uniquePrefix(`rv${side}`)
            const events: Array<string> = []
            const running = new Set<string>()
            let revokedAt: number | undefined
            const body = async (id: string) => {
              if (id !== "first" && id !== "second") return "warm"
              running.add(id)
              events.push(`${id} started${running.size > 1 ? " beside another" : ""}`)
              if (id === "first") {
                while (revokedAt === undefined) await sleep(20)
                while (Date.now() - revokedAt < 2000 && running.size === 1) await sleep(20)
              }
              running.delete(id)
              events.push(`${id} ended`)
              return "done"
            }
            let processor: (job: BullJob<Data>, token?: string) => Promise<unknown>
            if (side === "promise") {
              const unique = yield* Effect.acquireRelease(
                Effect.sync(() =>
                  UniqueQueue.make<Data>(queue, { ...options, lockPrefix, redis: { url: testRedis.source.url }, defaults: {}, history: false })
                ),
                (u) => Effect.promise(() => u.close())
              )
              // The first add builds the runtime: the jobs run on the hot path.
              yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
              processor = unique.processor(async (job: BullJob<Data>) => body(job.id!))
            } else {
              const definition = Effect.runSync(LockOptions.make({ ...options, lockPrefix }))
              const runtime = yield* Effect.acquireRelease(
                Effect.sync(() =>
                  ManagedRuntime.make(
                    Layer.mergeAll(BullMQ.layer(queue), Defaults.layer({})).pipe(
                      Layer.provideMerge(Redis.layer({ url: testRedis.source.url }))
                    )
                  )
                ),
                (r) => Effect.promise(() => r.dispose())
              )
              // An Effect perform over a promise that cannot be stopped: uninterruptible, so it too runs to its end.
              processor = yield* Effect.promise(() =>
                runtime.runPromise(
                  BullMQ.processor({ definition }, (job) => Effect.uninterruptible(Effect.promise(() => body(job.id!))))
                )
              )
            }
            const failures: Array<string> = []
            const worker = yield* Bull.worker(name, processor as never, { concurrency: 2 })
            worker.on("failed", (job, error) => failures.push(`${job?.id} ${(error as { _tag?: string })._tag ?? error.message}`))
            yield* Effect.promise(() => queue.add("Work", { n: 1 }, { jobId: "first", attempts: 1 }))
            assert.isTrue(yield* Bull.until(Effect.sync(() => running.has("first"))))
            yield* Effect.promise(() => queue.add("Work", { n: 1 }, { jobId: "second" }))
            assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getJobState("second")) === "delayed")))
            const removal = yield* Effect.flatMap(Locks.make({ prefix: lockPrefix }), (locks) =>
              locks.deleteByPattern(`${lockPrefix}:*`)).pipe(Effect.provide(Redis.layer({ url: testRedis.source.url })))
            revokedAt = Date.now()
            events.push(`operator revoked ${removal.revoked.map((r) => r.jid).join(",")}`)
            assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getJobState("second")) === "completed")))
            return { events, failures, left: yield* RedisTest.keysWithoutTtl(lockPrefix) }
          })
        const promise = yield* face("promise")
        const effect = yield* face("effect")
        assert.deepStrictEqual(promise, effect)
        assert.deepStrictEqual(promise, {
          events: ["first started", "operator revoked first", "first ended", "second started", "second ended"],
          failures: ["first LockLost"],
          left: []
        })
      }), 90_000)
  })
})
