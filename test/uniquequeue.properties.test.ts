/**
 * UniqueQueue properties on real BullMQ queues over a private redis-server: the lock's TTL under any delay; adds
 * under ids from a small pool against a model of what BullMQ keeps; add options that cannot work with the locks;
 * `make` options of the wrong kind in any combination; bad UNIQUE_JOBS_* values in any combination; shutdown in
 * either order with jobs of any lock type running; remove of waiting, running and missing jobs; drain of any number
 * of jobs; adds under a tracer of their own; a revoked holder's fn on the Effect path running on for any time while
 * the next copy waits. Each checks what a user can see: answers, errors, and what Redis holds afterwards.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=100 npx vitest run test/uniquequeue.properties.test.ts
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { type ConnectionOptions, type Job as BullJob, Worker } from "bullmq"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as fc from "fast-check"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as Defaults from "../src/Defaults.js"
import * as Locks from "../src/Locks.js"
import * as Metrics from "../src/Metrics.js"
import * as Redis from "../src/Redis.js"
import type * as LockType from "../src/LockType.js"
import * as LockOptions from "../src/Options.js"
import * as Bull from "./support/bullmq.js"
import * as RedisTest from "./support/redis.js"
import { recording } from "./support/tracing.js"
import { type Data, lockKeys, lockProxiedUniqueQueue, proxiedUniqueQueue, runNext, sleep, thrown, uniqueQueue } from "./support/uniquequeue.js"

const runs = (ci: number): number => Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? ci)


// Jobs of `n` added through `unique`, each taken by a manual BullMQ worker (its lock held, its processor not yet run):
// what the close properties start from.
const addedAndTaken = (
  unique: UniqueQueue.UniqueQueue<Data>,
  name: string,
  ns: ReadonlyArray<number>,
  connection: ConnectionOptions
) =>
  Effect.gen(function*() {
    const added = []
    for (const n of ns) added.push(yield* Effect.promise(() => unique.add("Work", { n })))
    const jids = added.flatMap((a) => (a._tag === "Enqueued" ? [a.job.jid] : []))
    assert.strictEqual(jids.length, new Set(ns).size, "one job per distinct argument")
    const worker = yield* Effect.acquireRelease(
      Effect.sync(() => new Worker(name, null, { connection, autorun: false })),
      (w) => Effect.promise(() => w.close())
    )
    const processor = unique.processor(async (job) => job.data.n)
    const jobs: Array<BullJob | undefined> = []
    for (let i = 0; i < jids.length; i++) {
      jobs.push(yield* Effect.promise(() => worker.getNextJob(`t${i}`, { block: false })))
    }
    return { jids, processor, jobs }
  })

describe("UniqueQueue properties", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("property: the lock's TTL is lockTtl plus the add's delay, whatever both are", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { unique } = yield* uniqueQueue({ lock: "until_executed", lockTtl: "1 minute" })
        let n = 0
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 30 * 24 * 3_600_000 })),
              async (delay) => {
                const added = await unique.add("Work", { n: ++n }, { delay })
                if (added._tag !== "Enqueued") return false
                const ttl = await raw.pttl(`${added.digest}:LOCKED`)
                // The TTL is counted by Redis from the lock call: at most the round trips of this add below the sum.
                return ttl <= 60_000 + delay && ttl > 60_000 + delay - 10_000
              }
            ),
            { numRuns: runs(40) }
          )
        )
      }))

    it.effect("property: with ids from a small pool, every add's answer is what BullMQ did; an idle queue holds no lock", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const connection = yield* Bull.connection
        const step = fc.oneof(
          fc.record({
            _tag: fc.constant("add" as const),
            id: fc.option(fc.constantFrom("a", "b", "c"), { nil: undefined }),
            n: fc.integer({ min: 1, max: 2 })
          }),
          fc.constant({ _tag: "run" as const })
        )
        const check = (steps: ReadonlyArray<typeof step extends fc.Arbitrary<infer S> ? S : never>) =>
          Effect.gen(function*() {
            const { name, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
            const worker = yield* Effect.acquireRelease(
              Effect.sync(() => new Worker(name, null, { connection, autorun: false })),
              (w) => Effect.promise(() => w.close())
            )
            const processor = unique.processor(async () => "done")
            // The model: the ids BullMQ has seen (it keeps completed jobs), the data locked by a job still to run,
            // and those jobs in the order BullMQ hands them out.
            const used = new Set<string>()
            const locked = new Set<number>()
            const waiting: Array<{ readonly jid: string; readonly n: number }> = []
            let token = 0
            for (const s of steps) {
              if (s._tag === "run") {
                const next = waiting.shift()
                assert.strictEqual(yield* runNext(worker, processor as never, `t${++token}`), next?.jid)
                if (next !== undefined) locked.delete(next.n)
                continue
              }
              const answer = yield* Effect.promise(() =>
                unique.add("Work", { n: s.n }, s.id === undefined ? {} : { jobId: s.id }).then(
                  (outcome) => ({ tag: outcome._tag as string, jid: outcome.job.jid }),
                  (error: unknown) => ({
                    tag: error instanceof UniqueQueue.JobIdTaken ? "JobIdTaken" : String(error),
                    jid: undefined
                  })
                )
              )
              const expected = s.id !== undefined && used.has(s.id)
                ? "JobIdTaken"
                : locked.has(s.n)
                ? "Skipped"
                : "Enqueued"
              assert.strictEqual(answer.tag, expected, JSON.stringify(s))
              if (expected === "Enqueued") {
                if (s.id !== undefined) used.add(s.id)
                locked.add(s.n)
                waiting.push({ jid: answer.jid!, n: s.n })
              }
            }
            while (waiting.length > 0) {
              assert.strictEqual(yield* runNext(worker, processor as never, `t${++token}`), waiting.shift()!.jid)
            }
            assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], "every job ran and released its lock")
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.array(step, { minLength: 4, maxLength: 24 }), (steps) => Effect.runPromise(check(steps))),
            { numRuns: runs(15) }
          )
        )
      }), 120_000)

    it.effect("property: add options are refused exactly when one cannot work with the locks, naming it; a refused add takes nothing", () =>
      Effect.gen(function*() {
        const { queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
        const bad = <A>(arbitrary: fc.Arbitrary<A>) => arbitrary.map((value) => ({ value, bad: true }))
        const good = <A>(arbitrary: fc.Arbitrary<A>) => arbitrary.map((value) => ({ value, bad: false }))
        const option = fc.record({
          deduplication: fc.option(bad(fc.constant({ id: "d" })), { nil: undefined }),
          repeat: fc.option(bad(fc.constant({ every: 1000 })), { nil: undefined }),
          jobId: fc.option(
            fc.oneof(bad(fc.constantFrom("", 7, null, true)), good(fc.constant("fresh"))),
            { nil: undefined }
          ),
          delay: fc.option(
            fc.oneof(bad(fc.constantFrom(-1, Number.NaN, 1.5, Infinity, 1e20, "10")), good(fc.constantFrom(0, 1000))),
            { nil: undefined }
          ),
          attempts: fc.option(good(fc.integer({ min: 1, max: 5 })), { nil: undefined })
        })
        let n = 0
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(option, async (chosen) => {
              n++
              const opts: Record<string, unknown> = {}
              const expected: Array<string> = []
              for (const [key, entry] of Object.entries(chosen)) {
                if (entry === undefined) continue
                opts[key] = key === "jobId" && entry.value === "fresh" ? `fresh-${n}` : entry.value
                if (entry.bad) expected.push(`opts.${key}`)
              }
              const before = await queue.count()
              const answer = await unique.add("Work", { n }, opts as never).then(
                (outcome) => outcome._tag as unknown,
                (error: unknown) => error
              )
              if (expected.length === 0) return answer === "Enqueued"
              assert.instanceOf(answer, LockOptions.InvalidLockOptions, JSON.stringify(opts))
              const fields = (answer as LockOptions.InvalidLockOptions).issues.map((issue) => issue.field).sort()
              assert.deepStrictEqual(fields, expected.sort())
              assert.strictEqual(await queue.count(), before, "nothing was added")
              return true
            }),
            { numRuns: runs(60) }
          )
        )
        // Only the accepted adds hold locks (their jobs wait): one per accepted add.
        const accepted = yield* Effect.promise(() => queue.count())
        assert.strictEqual((yield* lockKeys(lockPrefix)).length, accepted)
      }))

    it.effect("property: make refuses every option of the wrong kind, in any combination, naming each", () =>
      Effect.gen(function*() {
        const queue = yield* Bull.queue(Bull.uniqueName("uqp"))
        const badDuration = fc.constantFrom(0, -1, Number.NaN, 1.5, 1e20, "abc", null, true)
        const cases: ReadonlyArray<readonly [string, fc.Arbitrary<Record<string, unknown>>]> = [
          ["redis", fc.constantFrom(5, "redis://x", true, null, [1]).map((redis) => ({ redis }))],
          ["redis.timeout", badDuration.map((timeout) => ({ redis: { url: "redis://127.0.0.1:1", timeout } }))],
          ["redis.url", fc.constantFrom(5, "", true, {}).map((url) => ({ redis: { url } }))],
          ["redis.host", fc.constant({ redis: { url: "redis://127.0.0.1:1", host: "x" } })],
          ["jobs", fc.constantFrom(5, "x", [1, 2], true).map((jobs) => ({ jobs }))],
          ["jobs.a", fc.constantFrom(null, 5, "x", [1]).map((a) => ({ jobs: { a } }))],
          ["deadLetter", fc.constantFrom({}, 5, "x", null).map((deadLetter) => ({ deadLetter }))],
          ["defaults", fc.constantFrom(5, "x", [1], null).map((defaults) => ({ defaults }))],
          ["defaults.lockTtl", badDuration.map((lockTtl) => ({ defaults: { lockTtl } }))],
          ["lockTtl", badDuration.map((lockTtl) => ({ lockTtl }))]
        ]
        // At most one case per top-level key: two for `redis` would be one object.
        const byKey = new Map<string, Array<number>>()
        cases.forEach(([field], i) => {
          const key = field.split(".")[0]!
          byKey.set(key, [...(byKey.get(key) ?? []), i])
        })
        const pick = fc.tuple(...Array.from(byKey.values(), (indices) => fc.option(fc.constantFrom(...indices), { nil: undefined })))
          .filter((chosen) => chosen.some((i) => i !== undefined))
          .chain((chosen) => {
            const indices = chosen.filter((i): i is number => i !== undefined)
            return fc.tuple(...indices.map((i) => cases[i]![1])).map((parts) => ({ indices, parts }))
          })
        yield* Effect.sync(() =>
          fc.assert(
            fc.property(pick, ({ indices, parts }) => {
              const options = Object.assign({ lock: "until_executed", defaults: {} }, ...parts)
              const error = thrown(() => UniqueQueue.make(queue, options as never))
              assert.instanceOf(error, LockOptions.InvalidLockOptions, JSON.stringify(options))
              const fields = (error as LockOptions.InvalidLockOptions).issues.map((issue) => issue.field).sort()
              assert.deepStrictEqual(fields, indices.map((i) => cases[i]![0]).sort(), JSON.stringify(options))
            }),
            { numRuns: runs(200) }
          )
        )
      }))

    it.effect("property: whatever the order of shutdown and the lock type, a running job completes and leaves no lock", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const connection = yield* Bull.connection
        const lockTypes: ReadonlyArray<LockType.LockType> = [
          "until_executed",
          "until_and_while_executing",
          "while_executing",
          "until_executing"
        ]
        const locksAtEnqueue = new Set<LockType.LockType>(["until_executed", "until_and_while_executing", "until_executing"])
        const check = (lock: LockType.LockType, uniqueFirst: boolean, runMs: number, extra: number, busy: boolean) =>
          Effect.gen(function*() {
            const { name, unique, lockPrefix } = yield* uniqueQueue({ lock })
            let started!: () => void
            const running = new Promise<void>((resolve) => (started = resolve))
            const worker = new Worker(name, unique.processor(async () => {
              started()
              await sleep(runMs)
              return "done"
            }), { connection })
            worker.on("error", () => {})
            yield* Effect.addFinalizer(() => Effect.promise(() => worker.close(true)))
            // Busy: a job is running when the shutdown begins; else the shutdown meets only the adds below.
            const added = busy ? yield* Effect.promise(() => unique.add("Work", { n: 0 })) : undefined
            if (added !== undefined) {
              assert.strictEqual(added._tag, "Enqueued")
              yield* Effect.promise(() => running)
            }
            // Adds still under way when the shutdown begins: each must finish, and its lock match its job.
            const late = Array.from({ length: extra }, (_, i) =>
              unique.add("Work", { n: i + 1 }).then((o) => ({ tag: o._tag as string, digest: o.digest, jid: o.job.jid })))
            yield* Effect.promise(async () => {
              if (uniqueFirst) {
                await unique.close()
                await worker.close()
              } else {
                await worker.close()
                await unique.close()
              }
            })
            const answers = yield* Effect.promise(() => Promise.all(late))
            assert.deepStrictEqual(answers.filter((a) => a.tag !== "Enqueued"), [])
            const reader = yield* Bull.queue(name)
            if (added !== undefined) {
              assert.strictEqual(yield* Effect.promise(() => reader.getJobState(added.job.jid)), "completed")
            }
            // A job still to run (waiting, or put back delayed by the closed processor) keeps its queue lock.
            const toRun = new Set(
              (yield* Effect.promise(() => reader.getJobs(["waiting", "delayed"]))).map((job) => job.id)
            )
            const held = locksAtEnqueue.has(lock)
              ? answers.filter((a) => toRun.has(a.jid)).map((a) => `${a.digest}:LOCKED`).sort()
              : []
            assert.deepStrictEqual(yield* lockKeys(lockPrefix), held)
            const queued = answers.filter((a) => toRun.has(a.jid)).map((a) => a.digest)
            assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix, queued), [])
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.constantFrom(...lockTypes),
              fc.boolean(),
              fc.integer({ min: 0, max: 150 }),
              fc.integer({ min: 0, max: 10 }),
              fc.boolean(),
              (lock, uniqueFirst, runMs, extra, busy) => Effect.runPromise(check(lock, uniqueFirst, runMs, extra, busy))
            ),
            { numRuns: runs(8) }
          )
        )
      }), 120_000)

    // unique_jobs_lock_hold_time_ms: each run lock held and let go is one sample, on the hot path (a fn that takes no
    // signal) as on the Effect path (one that takes it).
    it.effect("property: every run of either path records its run lock's hold time once", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const check = (takesSignal: boolean, jobs: number) =>
          Effect.gen(function*() {
            const { name, unique } = yield* uniqueQueue({ lock: "while_executing", history: false })
            const fn = async (job: BullJob<{ readonly n: number }>) => `ran ${job.data.n}`
            const processor = takesSignal
              ? unique.processor(async (job, _token, _signal) => fn(job))
              : unique.processor(async (job) => fn(job))
            for (let i = 0; i < jobs; i++) yield* Effect.promise(() => unique.add("Work", { n: i }))
            const worker = yield* Bull.manualWorker(name)
            const before = (yield* Metric.value(Metrics.holdTime)).count
            for (let i = 0; i < jobs; i++) assert.isDefined(yield* runNext(worker, processor, `t${i}`))
            const recorded = (yield* Metric.value(Metrics.holdTime)).count - before
            assert.strictEqual(recorded, jobs, JSON.stringify({ takesSignal, jobs }))
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.boolean(), fc.integer({ min: 1, max: 4 }), (takesSignal, jobs) =>
              Effect.runPromise(check(takesSignal, jobs))),
            { numRuns: runs(8), examples: [[false, 2], [true, 2]] }
          )
        )
      }), 120_000)

    it.effect("property: remove lets a job's lock go exactly when BullMQ removed the job: a running job, or none, keeps every lock", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const check = (lock: LockType.LockType, jobs: number, taken: number, asked: ReadonlyArray<number>) =>
          Effect.gen(function*() {
            const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock })
            const added = yield* Effect.forEach(Array.from({ length: jobs }, (_, i) => i), (i) =>
              Effect.promise(() => unique.add("Work", { n: i })))
            assert.deepStrictEqual(added.filter((a) => a._tag !== "Enqueued"), [])
            // The first `taken` are running: a worker took them (BullMQ's manual fetch) and holds them.
            const taker = yield* Bull.manualWorker(name)
            for (let i = 0; i < taken; i++) assert.isDefined(yield* Effect.promise(() => taker.getNextJob(`t${i}`, { block: false })))
            const removedIds = new Set<string>()
            const trace = JSON.stringify({ lock, jobs, taken, asked })
            for (const i of asked) {
              // An index past the jobs names an id BullMQ never had.
              const id = i < jobs ? added[i]!.job.jid : `missing-${i}`
              const answer = yield* Effect.promise(() => unique.remove(id))
              const waiting = i < jobs && i >= taken && !removedIds.has(id)
              assert.strictEqual(answer, waiting ? 1 : 0, `remove of ${id}: ${trace}`)
              if (waiting) removedIds.add(id)
            }
            // Locks left: every job's but those removed (run locks come only with a perform, and none ran here).
            const kept = added.filter((a) => !removedIds.has(a.job.jid)).map((a) => `${a.digest}:LOCKED`).sort()
            assert.deepStrictEqual(yield* lockKeys(lockPrefix), kept, trace)
            assert.strictEqual(yield* Effect.promise(() => queue.getJobCountByTypes("active")), taken, trace)
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.constantFrom<LockType.LockType>("until_executed", "until_executing", "until_and_while_executing"),
              fc.integer({ min: 1, max: 5 }).chain((jobs) =>
                fc.tuple(fc.constant(jobs), fc.integer({ min: 0, max: jobs }), fc.array(fc.integer({ min: 0, max: jobs }), { maxLength: 6 }))
              ),
              (lock, [jobs, taken, asked]) => Effect.runPromise(check(lock, jobs, taken, asked))
            ),
            { numRuns: runs(10), examples: [["until_executed", [2, 1, [0, 1]]]] }
          )
        )
      }), 120_000)

    // As BullMQ's obliterate: without force it refuses while a job runs, removing nothing (no job, no lock); with
    // force, or with none running, it removes every waiting job and lets each one's lock go.
    it.effect("property: obliterate without force refuses exactly while a job runs, removing nothing; else it removes every waiting job and its lock", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const check = (lock: LockType.LockType, jobs: number, taken: number, force: boolean) =>
          Effect.gen(function*() {
            const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock })
            const added = yield* Effect.forEach(Array.from({ length: jobs }, (_, i) => i), (i) =>
              Effect.promise(() => unique.add("Work", { n: i })))
            assert.deepStrictEqual(added.filter((a) => a._tag !== "Enqueued"), [])
            const taker = yield* Bull.manualWorker(name)
            for (let i = 0; i < taken; i++) assert.isDefined(yield* Effect.promise(() => taker.getNextJob(`t${i}`, { block: false })))
            const locksBefore = yield* lockKeys(lockPrefix)
            const answer = yield* Effect.promise(() =>
              unique.obliterate({ force }).then((removed) => ({ removed }), (error: Error) => ({ refused: error.message }))
            )
            const trace = JSON.stringify({ lock, jobs, taken, force, answer })
            if (!force && taken > 0) {
              assert.include("refused" in answer ? answer.refused : "", "running", trace)
              assert.deepStrictEqual(yield* lockKeys(lockPrefix), locksBefore, trace)
              assert.strictEqual(yield* Effect.promise(() => queue.getJobCountByTypes("waiting")), jobs - taken, trace)
              assert.strictEqual(yield* Effect.promise(() => queue.getJobCountByTypes("active")), taken, trace)
            } else {
              assert.deepStrictEqual(answer, { removed: jobs - taken }, trace)
              // The waiting jobs' locks are gone; a running job's stays with it.
              const running = new Set(added.slice(0, taken).map((a) => `${a.digest}:LOCKED`))
              assert.deepStrictEqual((yield* lockKeys(lockPrefix)).filter((key) => !running.has(key)), [], trace)
            }
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.constantFrom<LockType.LockType>("until_executed", "until_executing", "until_and_while_executing"),
              fc.integer({ min: 1, max: 4 }).chain((jobs) => fc.tuple(fc.constant(jobs), fc.integer({ min: 0, max: jobs }))),
              fc.boolean(),
              (lock, [jobs, taken], force) => Effect.runPromise(check(lock, jobs, taken, force))
            ),
            { numRuns: runs(8), examples: [["until_executed", [2, 1], false], ["until_executed", [2, 1], true]] }
          )
        )
      }), 120_000)

    // Adds made while a new UniqueQueue's runtime builds reach BullMQ in call order: of a burst of any length, with
    // duplicates among it, the first call of each data is the one Enqueued, and BullMQ's waiting jobs are in call order.
    it.effect("property: the first burst on a new UniqueQueue, duplicates among it, reaches BullMQ in call order; the first of each data wins", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const check = (lock: LockType.LockType, values: ReadonlyArray<number>) =>
          Effect.gen(function*() {
            const { queue, unique } = yield* uniqueQueue({ lock, history: false })
            // All in one go, before the runtime is built.
            const answers = yield* Effect.promise(() => Promise.all(values.map((n) => unique.add("Work", { n }))))
            const firsts = values.map((n, i) => values.indexOf(n) === i)
            const trace = JSON.stringify({ lock, values, answers: answers.map((a) => a._tag) })
            assert.deepStrictEqual(answers.map((a) => a._tag === "Enqueued"), firsts, trace)
            const waiting = (yield* Effect.promise(() => queue.getJobs(["waiting"], 0, -1, true))).map((job) => job.data.n as number)
            assert.deepStrictEqual(waiting, values.filter((_, i) => firsts[i]), trace)
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.constantFrom<LockType.LockType>("until_executed", "until_executing", "until_and_while_executing"),
              fc.array(fc.nat(5), { minLength: 2, maxLength: 12 }),
              (lock, values) => Effect.runPromise(check(lock, values))
            ),
            { numRuns: runs(6), examples: [["until_executed", [1, 2, 1, 3]]] }
          )
        )
      }), 120_000)

    // A replace that meets a holder caught starting (taken by a worker, its type letting the queue lock go as it
    // starts, its processor not yet run) waits for it to let go, instead of losing the trigger as Skipped: whenever
    // the holder starts within the wait, the trigger is Enqueued, its job waiting and its lock held.
    it.effect("property: a replace meeting a holder caught starting waits for it to let go and is Enqueued, never Skipped", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const check = (lock: "until_executing" | "until_and_while_executing", startsAfter: number) =>
          Effect.gen(function*() {
            const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
              lock,
              lockArgs: () => ["account-1"],
              onConflict: { client: "replace" },
              history: false
            })
            const manual = yield* Bull.manualWorker(name)
            const processor = unique.processor(async () => "ran")
            const first = yield* Effect.promise(() => unique.add("Sync", { n: 0 }))
            assert.strictEqual(first._tag, "Enqueued")
            const starting = (yield* Effect.promise(() => manual.getNextJob("t0", { block: false })))!
            const trigger = unique.add("Sync", { n: 1 })
            yield* Effect.promise(() => sleep(startsAfter))
            yield* Effect.promise(() => processor(starting as never, "t0").then((value) => starting.moveToCompleted(value, "t0", false)))
            const next = yield* Effect.promise(() => trigger)
            const trace = JSON.stringify({ lock, startsAfter, next: next._tag })
            assert.strictEqual(next._tag, "Enqueued", trace)
            const waiting = yield* Effect.promise(() => queue.getJobs(["waiting"], 0, -1, true))
            assert.deepStrictEqual(waiting.map((job) => job.data), [{ n: 1 }], trace)
            assert.deepStrictEqual(yield* lockKeys(lockPrefix), [`${next.digest}:LOCKED`], trace)
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.constantFrom("until_executing" as const, "until_and_while_executing" as const),
              // Well within the replace's waits for a starting holder (630 ms in all).
              fc.integer({ min: 0, max: 120 }),
              (lock, startsAfter) => Effect.runPromise(check(lock, startsAfter))
            ),
            { numRuns: runs(6), examples: [["until_and_while_executing", 20], ["until_executing", 20]] }
          )
        )
      }), 120_000)

    // A hot-path job (a fn without a signal) cancelled by close's timeout changes no lock when its fn ends later, as a
    // cancelled fiber does not: each until_executed job cancelled so keeps its queue lock for its retry, however many
    // run, whatever the timeout. Their fns end while close still runs, the lock connection open (close waits for an
    // add on its way to a stalled queue Redis, holding its lock): a release then would reach Redis.
    it.effect("property: jobs cancelled by close's timeout on the hot path, their fns ending while close runs, keep their locks for their retries", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const check = (jobs: number, timeoutMs: number) =>
          Effect.gen(function*() {
            const { lockPrefix, name, proxy, unique } = yield* proxiedUniqueQueue("uqpcancel")
            const gates: Array<() => void> = []
            let ended = 0
            yield* Effect.addFinalizer(() =>
              Effect.promise(async () => {
                for (const open of gates) open()
                await Effect.runPromise(proxy.resume)
                await unique.close({ timeout: 1000 }).catch(() => undefined)
              })
            )
            const processor = unique.processor(async (_job: BullJob<Data>) => {
              await new Promise<void>((resolve) => gates.push(resolve))
              ended++
              return "late"
            })
            // The first add builds the runtime: its job and the others run on the hot path.
            const added = []
            for (let n = 1; n <= jobs; n++) added.push(yield* Effect.promise(() => unique.add("Work", { n })))
            assert.deepStrictEqual(added.map((a) => a._tag), added.map(() => "Enqueued"))
            const worker = yield* Bull.manualWorker(name)
            const cancelled: Array<Promise<string>> = []
            for (let i = 0; i < jobs; i++) {
              const job = (yield* Effect.promise(() => worker.getNextJob(`t${i}`, { block: false }))) as BullJob<Data>
              cancelled.push(processor(job, `t${i}`).then(() => "completed", (error: Error) => error.message.endsWith("was cancelled") ? "cancelled" : error.message))
            }
            assert.isTrue(yield* Bull.until(Effect.sync(() => gates.length === jobs)), "every fn started")
            // An add (with a delay: the Effect path) stuck on the stalled queue Redis, holding its lock: close waits.
            yield* proxy.stall
            const adding = unique.add("Work", { n: 0 }, { delay: 60_000 }).then(() => undefined, () => undefined)
            assert.isTrue(yield* Bull.until(Effect.map(lockKeys(lockPrefix), (keys) => keys.length === jobs + 1)), "the add took its lock")
            const closing = unique.close({ timeout: timeoutMs })
            const trace = JSON.stringify({ jobs, timeoutMs })
            assert.deepStrictEqual(yield* Effect.promise(() => Promise.all(cancelled)), added.map(() => "cancelled"), trace)
            // The fns end while close waits for the add.
            for (const open of gates) open()
            assert.isTrue(yield* Bull.until(Effect.sync(() => ended === jobs)), "every fn ended")
            yield* Effect.promise(() => sleep(50))
            yield* proxy.resume
            yield* Effect.promise(() => Promise.all([closing.catch(() => undefined), adding]))
            for (const a of added) {
              if (a._tag !== "Enqueued") continue
              assert.deepStrictEqual(yield* Effect.promise(() => testRedis.raw.hkeys(`${a.digest}:LOCKED`)), [a.job.jid], trace)
            }
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 20, max: 200 }), (jobs, timeoutMs) =>
              Effect.runPromise(check(jobs, timeoutMs))),
            { numRuns: runs(4), examples: [[1, 100]] }
          )
        )
      }), 120_000)

    it.effect("property: drain removes every waiting job of any number, over every page it reads, and lets each one's lock go", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const check = (lock: LockType.LockType, n: number, delayed: number, withDelayed: boolean) =>
          Effect.gen(function*() {
            const { queue, unique, lockPrefix } = yield* uniqueQueue({ lock })
            // Waiting jobs, and a few delayed ones: drain(true) takes them too, drain() leaves them and their locks.
            const answers = yield* Effect.forEach(
              Array.from({ length: n + delayed }, (_, i) => i),
              (i) => Effect.promise(() => unique.add("Work", { n: i }, i < n ? {} : { delay: 3_600_000 })),
              { concurrency: 16 }
            )
            assert.deepStrictEqual(answers.filter((a) => a._tag !== "Enqueued"), [])
            const removed = yield* Effect.promise(() => unique.drain(withDelayed))
            const left = withDelayed ? 0 : delayed
            const trace = JSON.stringify({ lock, n, delayed, withDelayed, removed })
            assert.strictEqual(yield* Effect.promise(() => queue.getJobCountByTypes("waiting", "prioritized")), 0, trace)
            assert.strictEqual(yield* Effect.promise(() => queue.getJobCountByTypes("delayed")), left, trace)
            assert.strictEqual(removed, n + delayed - left, trace)
            // No lock left of any drained job; a job left keeps its own.
            const kept = answers.slice(n + delayed - left).map((a) => `${a.digest}:LOCKED`).sort()
            assert.deepStrictEqual(yield* lockKeys(lockPrefix), kept, trace)
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.constantFrom<LockType.LockType>("until_executed", "until_executing", "until_and_while_executing"),
              // drain reads 100 jobs a page: none, within one page, and over two or three.
              fc.oneof(fc.integer({ min: 0, max: 120 }), fc.integer({ min: 190, max: 260 })),
              fc.integer({ min: 0, max: 3 }),
              fc.boolean(),
              (lock, n, delayed, withDelayed) => Effect.runPromise(check(lock, n, delayed, withDelayed))
            ),
            { numRuns: runs(4), examples: [["until_executed", 250, 0, false]] }
          )
        )
      }), 120_000)

    it.effect("property: the tracer option reaches the queue's runtime: each add's lock span is its, a duplicate's links to its holder's", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const check = (adds: ReadonlyArray<number>) =>
          Effect.gen(function*() {
            const queue = yield* Bull.queue(Bull.uniqueName("traced"))
            const recorded = recording()
            const unique = yield* Effect.acquireRelease(
              Effect.sync(() =>
                UniqueQueue.make<{ readonly n: number }>(queue, {
                  lock: "until_executed",
                  lockPrefix: RedisTest.uniquePrefix("traced"),
                  redis: { url: testRedis.source.url },
                  defaults: {},
                  history: false,
                  tracer: recorded.tracer
                })
              ),
              (u) => Effect.promise(() => u.close())
            )
            // The model: the span of the add that holds each digest (no worker runs: a queue lock stays).
            const holders = new Map<number, string>()
            for (const n of adds) {
              const at = recorded.spans.length
              const outcome = yield* Effect.promise(() => unique.add("Work", { n }))
              const locks = recorded.spans.slice(at).filter((span) => span.name === "UniqueJobs.lock")
              const trace = `add of ${n} in ${JSON.stringify(adds)}: ${outcome._tag}`
              assert.strictEqual(locks.length, 1, `one lock span in the queue's tracer, ${trace}`)
              const held = holders.get(n)
              assert.strictEqual(outcome._tag, held === undefined ? "Enqueued" : "Skipped", trace)
              assert.deepStrictEqual(locks[0]!.links.map((link) => link.span.spanId), held === undefined ? [] : [held], trace)
              if (held === undefined) holders.set(n, locks[0]!.spanId)
            }
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 8 }), (adds) =>
              Effect.runPromise(check(adds))),
            { numRuns: runs(15) }
          )
        )
      }), 120_000)

    // Issue 47, observation 5, on the Effect path (a fn that takes a signal, lockTimeout, until_and_while_executing):
    // a fn whose run lock an operator revoked runs on, and the next copy of its digest waits until it has returned,
    // however long it runs on once its loss is told. What is checked is what ran: the bodies never overlap.
    it.effect("property: a revoked holder on the Effect path keeps its place until its fn returns, however long it runs on", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const configs: ReadonlyArray<{ readonly options: LockOptions.Options; readonly takesSignal: boolean }> = [
          { options: { lock: "while_executing", onConflict: { server: "reschedule" }, rescheduleDelay: 100 }, takesSignal: true },
          {
            options: { lock: "while_executing", lockTimeout: "20 seconds", onConflict: { server: "reschedule" }, rescheduleDelay: 100 },
            takesSignal: false
          },
          {
            options: { lock: "until_and_while_executing", onConflict: { server: "reschedule" }, rescheduleDelay: 100 },
            takesSignal: false
          }
        ]
        const check = (config: (typeof configs)[number], runsOnMs: number) =>
          Effect.gen(function*() {
            const { source } = yield* RedisTest.TestRedis
            const { name: queueName, unique, lockPrefix } = yield* uniqueQueue({ ...config.options, lockLease: 1000 })
            const lost = Metrics.lost.of(config.options.lock, "run")
            const before = (yield* Metric.value(lost)).count
            const told = () => Effect.runSync(Metric.value(lost)).count > before
            let firstId: string | undefined
            const running = new Set<string>()
            const overlaps: Array<string> = []
            const ended: Array<string> = []
            const body = async (id: string) => {
              const n = id === firstId ? "1" : "2"
              running.add(n)
              if (running.size > 1) overlaps.push(`fn bodies running now: ${[...running].sort().join(",")}`)
              try {
                if (n !== "1") return `done ${n}`
                // Until its loss is told, then on for runsOnMs, or until a second copy starts.
                while (!told()) await sleep(10)
                const until = Date.now() + runsOnMs
                while (Date.now() < until && running.size === 1) await sleep(10)
                return "done 1"
              } finally {
                running.delete(n)
                ended.push(n)
              }
            }
            const processor = config.takesSignal
              ? unique.processor(async (job, _token, _signal) => body(job.id!))
              : unique.processor(async (job) => body(job.id!))
            const failures: Array<string> = []
            const worker = yield* Bull.worker(queueName, processor, { concurrency: 2 })
            worker.on("failed", (job, error) =>
              failures.push(`${job?.id === firstId ? 1 : 2} ${(error as { _tag?: string })._tag ?? error.message}`))
            const first = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
            if (first._tag !== "Enqueued") return assert.fail(`the first add was ${first._tag}`)
            firstId = first.value.id
            assert.isTrue(yield* Bull.until(Effect.sync(() => running.has("1"))), "the first fn started")
            const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
            if (added._tag !== "Enqueued") return assert.fail(`the second add was ${added._tag}`)
            const second = added.value
            assert.isTrue(
              yield* Bull.until(Effect.promise(async () => {
                const state = await second.getState()
                return state === "delayed" || state === "active"
              })),
              "the second job met the run lock"
            )
            const removal = yield* Effect.flatMap(Locks.make({ prefix: lockPrefix }), (locks) =>
              locks.deleteByPattern(`${lockPrefix}:*`)).pipe(Effect.provide(Redis.layer({ url: source.url })))
            assert.strictEqual(removal.revoked.length, 1, "the running holder was revoked, not removed")
            assert.isTrue(
              yield* Bull.until(Effect.promise(async () => (await second.getState()) === "completed"), 60_000),
              "the second copy ran once the first had returned"
            )
            const trace = JSON.stringify({ options: config.options, takesSignal: config.takesSignal, runsOnMs })
            assert.deepStrictEqual(overlaps, [], trace)
            assert.deepStrictEqual(ended, ["1", "2"], trace)
            assert.deepStrictEqual(failures, ["1 LockLost"], trace)
            assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix), [], trace)
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.constantFrom(...configs), fc.integer({ min: 300, max: 800 }), (config, runsOnMs) =>
              Effect.runPromise(check(config, runsOnMs))),
            { numRuns: runs(3) }
          )
        )
      }), 120_000)

    // As BullMQ's Worker decides: a signal only for a fn that declares it, and only such a job can be cancelled. A
    // cancelled job fails (and is retried by its attempts); on its last attempt its locks go as a dead job's do.
    it.effect("property: until_executed jobs answer with their releases unanswered (the lock Redis stalled); close waits for each, or until its timeout", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const { raw } = testRedis
        const connection = yield* Bull.connection
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 6 }),
              fc.boolean(),
              (ns, timedOut) =>
                Effect.runPromise(Effect.scoped(Effect.gen(function*() {
                  // With a close timeout, a store timeout of 1 s: close's own end (QUIT on the stalled connection) is
                  // bounded by it.
                  const { lockPrefix, name, proxy, unique, unlocked } = yield* lockProxiedUniqueQueue(
                    "uqpafter",
                    timedOut ? "1 second" : "5 minutes"
                  )
                  const { jids, processor, jobs } = yield* addedAndTaken(unique, name, ns, connection)
                  yield* proxy.stall
                  const answers = yield* Effect.promise(() =>
                    Promise.all(jobs.map((job, i) => processor(job as never, `t${i}`)))
                  )
                  assert.deepStrictEqual(answers, jobs.map((job) => job?.data.n))
                  assert.deepStrictEqual(unlocked, [], "no release has answered yet")
                  assert.strictEqual((yield* lockKeys(lockPrefix)).length, jids.length, "every lock is held in Redis")
                  if (timedOut) {
                    // Ends while the proxy still holds the releases: after its timeout and QUIT's bound, long before
                    // the releases' retries would have ended (30 s). Each job has performed; a lock whose release went
                    // unanswered is the reaper's (its job completed), so what is left is only ever the job's own.
                    const first = yield* Effect.promise(() =>
                      Promise.race([unique.close({ timeout: 200 }).then(() => "closed"), sleep(20_000).then(() => "waiting")])
                    )
                    assert.strictEqual(first, "closed", "close waited for the releases' retries")
                    yield* proxy.resume
                    for (const key of yield* lockKeys(lockPrefix)) {
                      const holders = yield* Effect.promise(() => raw.hkeys(key))
                      assert.isTrue(holders.length === 1 && jids.includes(holders[0]!), JSON.stringify(holders))
                    }
                    return
                  }
                  const closing = unique.close()
                  yield* proxy.resume
                  yield* Effect.promise(() => closing)
                  assert.deepStrictEqual([...unlocked].sort(), [...jids].sort(), "each release answered before close ended")
                  assert.deepStrictEqual(yield* lockKeys(lockPrefix), [])
                  assert.deepStrictEqual(yield* Effect.promise(() => raw.keys(`${lockPrefix}:*:LOCKED`)), [])
                })).pipe(Effect.provideService(RedisTest.TestRedis, testRedis)))
            ),
            { numRuns: runs(8), examples: [[[1, 2], true], [[1, 2], false]] }
          )
        )
      }), 240_000)

    // One job's release lost on its way (its request dropped, the connection closed), the others' sent after it: close
    // waits until every release has answered, the lost one's retry included; none is cut off by the runtime's disposal.
    it.effect("property: until_executed jobs, the first release's request lost: close ends only once every release has answered", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const { raw } = testRedis
        const connection = yield* Bull.connection
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.uniqueArray(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 4 }), (ns) =>
              Effect.runPromise(Effect.scoped(Effect.gen(function*() {
                const { lockPrefix, name, proxy, unique, unlocked } = yield* lockProxiedUniqueQueue("uqplost", "1 second")
                const { jids, processor, jobs } = yield* addedAndTaken(unique, name, ns, connection)
                yield* proxy.lose("request")
                const answers = yield* Effect.promise(() => Promise.all(jobs.map((job, i) => processor(job as never, `t${i}`))))
                assert.deepStrictEqual(answers, jobs.map((job) => job?.data.n))
                yield* Effect.promise(() => unique.close())
                assert.deepStrictEqual([...unlocked].sort(), [...jids].sort(), "each release answered before close ended")
                assert.deepStrictEqual(yield* Effect.promise(() => raw.keys(`${lockPrefix}:*:LOCKED`)), [])
              })).pipe(Effect.provideService(RedisTest.TestRedis, testRedis)))
            ),
            { numRuns: runs(6) }
          )
        )
      }), 120_000)

    it.effect("property: a signal exactly for a fn of three parameters; a cancelled job fails or is retried, and no lock is left", () =>
      Effect.gen(function*() {
        const testRedis = yield* RedisTest.TestRedis
        const connection = yield* Bull.connection
        const check = (lock: LockType.LockType, arity: 1 | 2 | 3, attempts: 1 | 2, cancel: boolean) =>
          Effect.gen(function*() {
            const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
              lock,
              ...(lock === "while_executing" ? { onConflict: { server: "reschedule" as const } } : {})
            })
            const given: Array<boolean> = []
            let started!: () => void
            const running = new Promise<void>((resolve) => (started = resolve))
            let open!: () => void
            const gate = new Promise<void>((resolve) => (open = resolve))
            const body = async (signal: unknown) => {
              given.push(signal instanceof AbortSignal)
              started()
              if (signal instanceof AbortSignal) {
                await Promise.race([gate, new Promise((resolve) => signal.addEventListener("abort", resolve))])
                if (signal.aborted) throw new Error("stopped on its signal")
              } else {
                await gate
              }
              return "done"
            }
            const processor = arity === 3
              ? unique.processor((_job, _token, signal) => body(signal))
              : arity === 2
              ? unique.processor(function(_job, _token) {
                // eslint-disable-next-line prefer-rest-params
                return body(arguments[2])
              })
              : unique.processor(function(_job) {
                // eslint-disable-next-line prefer-rest-params
                return body(arguments[2])
              })
            assert.strictEqual(processor.length, arity === 3 ? 3 : 2)
            const worker = new Worker(name, processor, { connection })
            worker.on("error", () => {})
            yield* Effect.addFinalizer(() => Effect.promise(() => worker.close(true)))
            const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { attempts }))
            assert.strictEqual(added._tag, "Enqueued")
            yield* Effect.promise(() => running)
            if (cancel) assert.strictEqual(worker.cancelJob(added.job.jid), arity === 3, "cancellable")
            const cancelled = cancel && arity === 3
            if (cancelled) {
              assert.isTrue(yield* Bull.until(Effect.promise(async () => {
                const job = await queue.getJob(added.job.jid)
                return (job?.attemptsMade ?? 0) >= 1
              })))
            }
            open()
            const expected = cancelled && attempts === 1 ? "failed" : "completed"
            assert.isTrue(
              yield* Bull.until(Effect.promise(async () => (await queue.getJobState(added.job.jid)) === expected)),
              expected
            )
            assert.deepStrictEqual(given, Array.from(given, () => arity === 3), "a signal exactly when declared")
            assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], "no lock is left")
          }).pipe(Effect.scoped, Effect.provideService(RedisTest.TestRedis, testRedis))
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.constantFrom<LockType.LockType>("until_executed", "until_and_while_executing", "while_executing"),
              fc.constantFrom<1 | 2 | 3>(1, 2, 3),
              fc.constantFrom<1 | 2>(1, 2),
              fc.boolean(),
              (lock, arity, attempts, cancel) => Effect.runPromise(check(lock, arity, attempts, cancel))
            ),
            {
              numRuns: runs(24),
              // A cancel on the last attempt, for each type, every run: where a lock could be left behind.
              examples: [
                ["until_executed", 3, 1, true],
                ["until_and_while_executing", 3, 1, true],
                ["while_executing", 3, 1, true]
              ]
            }
          )
        )
      }), 120_000)
  })

  it.effect("property: any bad UNIQUE_JOBS_* values are each named once, as written, and nothing reads 'undefined'", () =>
    Effect.gen(function*() {
      const values = {
        UNIQUE_JOBS_LOCK_LEASE: fc.constantFrom("50", "-5", "1.5", "abc", "0"),
        UNIQUE_JOBS_LOCK_TTL: fc.constantFrom("-5", "1.5", "abc", "0", "99999999999999999999"),
        UNIQUE_JOBS_LOCK_PREFIX: fc.constantFrom("a b", "x*", "p:RUN"),
        UNIQUE_JOBS_ON_CONFLICT: fc.constantFrom("later", "{}"),
        UNIQUE_JOBS_RESCHEDULE_DELAY: fc.constantFrom("0", "-1", "2.5", "abc")
      }
      const env = fc.record(
        Object.fromEntries(Object.entries(values).map(([key, arbitrary]) => [key, fc.option(arbitrary, { nil: undefined })]))
      ).filter((chosen) => Object.values(chosen).some((value) => value !== undefined))
      const read = (map: Map<string, string>) =>
        Effect.runSync(Effect.flip(Effect.provide(
          Defaults.Defaults,
          Defaults.layerConfig().pipe(
            Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: Object.fromEntries(map) })))
          )
        )))
      fc.assert(
        fc.property(env, (chosen) => {
          const set = Object.entries(chosen).filter((entry): entry is [string, string] => entry[1] !== undefined)
          const message = String(read(new Map(set)))
          assert.notInclude(message, "undefined")
          for (const [name, value] of set) {
            // Effect 4's ConfigError names each variable by its path: `at ["UNIQUE_JOBS_LOCK_TTL"]`.
            assert.strictEqual(message.split(`at ${JSON.stringify([name])}`).length - 1, 1, `${name} once: ${message}`)
            if (/^-\d+$/.test(value)) assert.include(message, `got ${value} ms`)
            if (/^\d+\.\d+$/.test(value)) assert.include(message, `use ${Math.round(Number(value))}`)
          }
        }),
        { numRuns: runs(200) }
      )
    }))
})
