/**
 * UniqueQueue at its edges, on real BullMQ queues over a private redis-server: ids the caller supplies (a reused one,
 * one of a waiting job, an empty or non-string one), BullMQ options that cannot work with the locks, every option of
 * `make` decoded once, and shutdown in both orders with a job running. The properties are in
 * uniquequeue.properties.test.ts.
 */
import { assert, describe, layer } from "@effect/vitest"
import { type Job as BullJob, Queue, Worker } from "bullmq"
import { Redis as IORedis } from "ioredis"
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as Metrics from "../src/Metrics.js"
import * as LockOptions from "../src/Options.js"
import * as Bull from "./support/bullmq.js"
import * as RedisTest from "./support/redis.js"
import {
  consoleLines,
  type Data,
  downLockRedisQueue,
  lockKeys,
  lockProxiedUniqueQueue,
  proxiedUniqueQueue,
  rejection,
  sleep,
  thrown,
  uniqueQueue
} from "./support/uniquequeue.js"

describe("UniqueQueue: the admin UI's metrics", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("counts its locks into History's buckets by default (flushed at close at the latest); history: false writes none", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const counted = yield* uniqueQueue({ lock: "until_executed" })
        for (let n = 0; n < 5; n++) yield* Effect.promise(() => counted.unique.add("Work", { n }))
        yield* Effect.promise(() => counted.unique.add("Work", { n: 0 }))
        yield* Effect.promise(() => counted.unique.close())
        const keys = yield* Effect.promise(() => raw.keys(`${counted.lockPrefix}:metrics:*`))
        assert.isAbove(keys.length, 0, "a bucket was written")
        const totals: Record<string, number> = {}
        for (const key of keys) {
          for (const [field, n] of Object.entries(yield* Effect.promise(() => raw.hgetall(key)))) totals[field] = (totals[field] ?? 0) + Number(n)
          assert.isAbove(yield* Effect.promise(() => raw.pttl(key)), 0, "every bucket has a TTL")
        }
        // The process' counters are shared by every test of this file: at least this queue's own counts are there.
        assert.isAtLeast(totals["until_executed|acquired"] ?? 0, 5)
        assert.isAtLeast(totals["until_executed|conflicts"] ?? 0, 1)

        const quiet = yield* uniqueQueue({ lock: "until_executed", history: false })
        yield* Effect.promise(() => quiet.unique.add("Work", { n: 1 }))
        yield* Effect.promise(() => quiet.unique.close())
        assert.deepStrictEqual(yield* Effect.promise(() => raw.keys(`${quiet.lockPrefix}:metrics:*`)), [])
        const { queue } = yield* uniqueQueue({ lock: "until_executed" })
        const bad = yield* Effect.flip(Effect.try({
          try: () => UniqueQueue.make(queue, { lock: "until_executed", history: "yes" as unknown as boolean }),
          catch: (error) => error as LockOptions.InvalidLockOptions
        }))
        assert.strictEqual(bad._tag, "InvalidLockOptions")
        assert.include(bad.message, "history: expected true or false")
      }))
  })
})

// What tsc accepts and refuses of `lockArgs` on `UniqueQueue.make<Data>` (checked by `npm run typecheck`, which
// includes this file): it is given the job's arguments, `[data]`, typed as the queue's data.
interface Order {
  readonly account: number
  readonly note: string
}
export const typedLockArgs = (queue: Queue) => [
  UniqueQueue.make<Order>(queue, { lock: "until_executed", lockArgs: ([order]) => order.account }),
  UniqueQueue.make<Order>(queue, {
    lock: "until_executed",
    jobs: { rebuild: { lock: "while_executing", lockArgs: ([order]) => [order.account, order.note.length] } }
  }),
  // @ts-expect-error an Order has no `id`
  UniqueQueue.make<Order>(queue, { lock: "until_executed", lockArgs: ([order]) => order.id }),
  // @ts-expect-error account is a number
  UniqueQueue.make<Order>(queue, { lock: "until_executed", jobs: { a: { lockArgs: ([order]) => order.account.trim() } } })
]

describe("UniqueQueue: lockArgs", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("is given [data], typed as the queue's data: what it selects is what makes a duplicate", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const queue = yield* Bull.queue(Bull.uniqueName("uqargs"))
        const unique = yield* Effect.acquireRelease(
          Effect.sync(() =>
            UniqueQueue.make<Order>(queue, {
              lock: "until_executed",
              lockArgs: ([order]) => order.account,
              lockPrefix: RedisTest.uniquePrefix("uqargs"),
              redis: { url: source.url },
              defaults: {},
              history: false
            })
          ),
          (u) => Effect.promise(() => u.close())
        )
        const answers = yield* Effect.forEach(
          [{ account: 1, note: "a" }, { account: 1, note: "b" }, { account: 2, note: "a" }],
          (order) => Effect.promise(() => unique.add("Work", order).then((outcome) => outcome._tag))
        )
        assert.deepStrictEqual(answers, ["Enqueued", "Skipped", "Enqueued"])
      }))
  })
})

describe("UniqueQueue: adds reach BullMQ in call order", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("the first burst on a new UniqueQueue (the runtime still building), and the next, arrive in call order", () =>
      Effect.gen(function*() {
        const { queue, unique } = yield* uniqueQueue({ lock: "until_executed", history: false })
        const order = (from: number) =>
          Effect.promise(async () =>
            (await queue.getJobs(["waiting"], 0, -1, true)).map((job) => (job.data as Data).n).filter((n) => n >= from)
          )
        const burst = (from: number) =>
          Effect.promise(() => Promise.all(Array.from({ length: 10 }, (_, i) => unique.add("Work", { n: from + i }))))
        const first = yield* burst(1)
        assert.deepStrictEqual(first.map((outcome) => outcome._tag), Array.from({ length: 10 }, () => "Enqueued"))
        assert.deepStrictEqual(yield* order(1), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        // Built by now: the hot path.
        yield* burst(101)
        assert.deepStrictEqual(yield* order(101), [101, 102, 103, 104, 105, 106, 107, 108, 109, 110])
      }))
  })
})

describe("UniqueQueue: ids the caller supplies", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("a jobId BullMQ keeps (completed) fails with JobIdTaken naming it and its state; no lock is left", () =>
      Effect.gen(function*() {
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
        const first = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { jobId: "order-1" }))
        assert.strictEqual(first._tag, "Enqueued")
        yield* Bull.worker(name, unique.processor(async () => "done"))
        assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getJobState("order-1")) === "completed")))
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], "the completed job released its lock")
        const again = yield* rejection(() => unique.add("Work", { n: 1 }, { jobId: "order-1" }))
        assert.instanceOf(again, UniqueQueue.JobIdTaken)
        const taken = again as UniqueQueue.JobIdTaken
        assert.deepStrictEqual([taken.jid, taken.state, taken.queue], ["order-1", "completed", name])
        assert.include(taken.message, "order-1")
        assert.include(taken.message, "completed")
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], "no lock was taken for a job BullMQ did not add")
        // The same data under a new id is a new job, and runs.
        const fresh = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        assert.strictEqual(fresh._tag, "Enqueued")
        assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getJobState(fresh.job.jid)) === "completed")))
      }))

    it.effect("the jobId of a waiting job: JobIdTaken, and the waiting job keeps its lock", () =>
      Effect.gen(function*() {
        const { unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
        const first = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { jobId: "w-1" }))
        assert.strictEqual(first._tag, "Enqueued")
        // Same data (the lock is w-1's own, re-entrant) and other data (another digest): neither adds anything.
        for (const data of [{ n: 1 }, { n: 2 }]) {
          const again = yield* rejection(() => unique.add("Work", data, { jobId: "w-1" }))
          assert.instanceOf(again, UniqueQueue.JobIdTaken, JSON.stringify(data))
          assert.strictEqual((again as UniqueQueue.JobIdTaken).state, "waiting")
        }
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [`${first.digest}:LOCKED`], "w-1 still holds its lock")
        const duplicate = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        assert.strictEqual(duplicate._tag, "Skipped", "the data is still locked by w-1")
      }))

    it.effect("the jobId check is bounded: a queue whose Redis does not answer fails the add with a QueueError, no lock", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { lockPrefix, proxy, unique } = yield* proxiedUniqueQueue("uqcut")
        yield* proxy.cut
        const error = yield* rejection(() => unique.add("Work", { n: 1 }, { jobId: "cut-1" }))
        assert.strictEqual((error as { _tag?: string })._tag, "QueueError", String(error))
        assert.include(String(error), "did not answer")
        assert.deepStrictEqual(yield* Effect.promise(() => raw.keys(`${lockPrefix}:*:LOCKED`)), [])
        // close is bounded too: BullMQ's own close waits for an answer to QUIT that never comes; ours drops the
        // connection after the adapter's timeout and says so.
        const closing = yield* rejection(() => unique.close())
        assert.strictEqual((closing as { _tag?: string })._tag, "QueueError", String(closing))
        assert.include(String(closing), "connection was dropped")
      }), 60_000)

    it.effect("an add that times out on a stalled queue Redis keeps its lock until BullMQ answers: one job, never two", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        // BullMQ sends the add when its Redis answers again (stored), or never (its connection dropped first).
        for (const ending of ["stored", "dropped"] as const) {
          const { lockPrefix, name, proxy, queue, unique } = yield* proxiedUniqueQueue("uqstall")
          yield* Effect.addFinalizer(() => Effect.promise(() => unique.close({ timeout: 1000 }).catch(() => undefined)))
          yield* proxy.stall
          const error = yield* rejection(() => unique.add("Work", { n: 1 }))
          assert.strictEqual((error as { _tag?: string })._tag, "QueueError", String(error))
          assert.include(String(error), "may still be stored", ending)
          const jid = (error as { jid?: string }).jid!
          // Until BullMQ answers, the lock stays with the add's jid: a second add of the data is a duplicate.
          assert.strictEqual((yield* lockKeys(lockPrefix)).length, 1, ending)
          const again = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
          assert.strictEqual(again._tag, "Skipped", ending)
          const jobKey = `bull:${name}:${jid}`
          if (ending === "stored") {
            yield* proxy.resume
            assert.isTrue(yield* Bull.until(Effect.promise(async () => (await raw.exists(jobKey)) === 1)), "stored late")
            // Stored under its lock: the lock stays with it, and the queue holds one copy.
            yield* Effect.promise(() => sleep(200))
            const [lockKey] = yield* lockKeys(lockPrefix)
            const holders = yield* Effect.promise(() => raw.hkeys(lockKey!))
            assert.deepStrictEqual(holders, [jid])
            assert.strictEqual(yield* Effect.promise(() => raw.llen(`bull:${name}:wait`)), 1)
          } else {
            yield* Effect.promise(() => queue.disconnect())
            // BullMQ's add fails with the connection: the job was never stored, and its lock goes.
            assert.isTrue(yield* Bull.until(Effect.map(lockKeys(lockPrefix), (keys) => keys.length === 0)), "released")
            assert.strictEqual(yield* Effect.promise(() => raw.exists(jobKey)), 0)
          }
        }
      }), 60_000)

    // The test above times out the first add, which builds the runtime and so takes the Effect path; once it is
    // built an add takes the hot path (adapters/bullmq/HotPath), whose failed BullMQ add must keep its lock the same way.
    it.effect("a hot-path add that times out on a stalled queue Redis keeps its lock until BullMQ stores the job: one copy", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { name, proxy, unique } = yield* proxiedUniqueQueue("uqstallfast")
        yield* Effect.addFinalizer(() => Effect.promise(() => unique.close({ timeout: 1000 }).catch(() => undefined)))
        assert.strictEqual((yield* Effect.promise(() => unique.add("Warm", { n: 0 })))._tag, "Enqueued")
        yield* proxy.stall
        const error = yield* rejection(() => unique.add("Work", { n: 1 }))
        assert.strictEqual((error as { _tag?: string })._tag, "QueueError", String(error))
        assert.include(String(error), "may still be stored")
        const jid = (error as { jid?: string }).jid!
        // BullMQ has not answered: the lock stays with the add's jid, and a second add of the data is a duplicate.
        const again = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        assert.strictEqual(again._tag, "Skipped", "no second copy while the first may still be stored")
        if (again._tag === "Skipped") assert.deepStrictEqual(again.holders, [jid])
        yield* proxy.resume
        const direct = yield* Bull.queue(name)
        assert.isTrue(yield* Bull.until(Effect.promise(async () => (await direct.getJob(jid)) !== undefined)), "stored late")
        // Stored under its lock: it keeps it, and the queue holds one copy of the data.
        assert.deepStrictEqual(yield* Effect.promise(() => raw.hkeys(`${again.digest}:LOCKED`)), [jid])
        const copies = (yield* Effect.promise(() => direct.getJobs(["wait"]))).filter((job) => job.name === "Work")
        assert.deepStrictEqual(copies.map((job) => job.id), [jid])
      }), 60_000)

    it.effect("with the locks off (enabled: false) a reused jobId is still JobIdTaken, never an untrue Enqueued", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const queue = yield* Bull.queue(Bull.uniqueName("uqoff"))
        const unique = yield* Effect.acquireRelease(
          Effect.sync(() =>
            UniqueQueue.make<Data>(queue, { lock: "until_executed", redis: { url: source.url }, defaults: { enabled: false } })
          ),
          (u) => Effect.promise(() => u.close())
        )
        assert.strictEqual((yield* Effect.promise(() => unique.add("Work", { n: 1 }, { jobId: "off-1" })))._tag, "Enqueued")
        assert.instanceOf(yield* rejection(() => unique.add("Work", { n: 1 }, { jobId: "off-1" })), UniqueQueue.JobIdTaken)
        for (const name of ["", 5, undefined]) {
          const error = yield* rejection(() => unique.add(name as never, { n: 1 }))
          assert.instanceOf(error, LockOptions.InvalidLockOptions, String(name))
          assert.strictEqual((error as LockOptions.InvalidLockOptions).field, "name")
        }
      }))

    it.effect("options that cannot work with the locks are refused at add, naming opts.<option>; nothing is added", () =>
      Effect.gen(function*() {
        const { queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
        const cases: ReadonlyArray<readonly [string, object]> = [
          ["opts.deduplication", { deduplication: { id: "x" } }],
          ["opts.debounce", { debounce: { id: "x" } }],
          ["opts.repeat", { repeat: { every: 1000 } }],
          ["opts.jobId", { jobId: "" }],
          ["opts.jobId", { jobId: 123 }],
          ["opts.delay", { delay: -1 }],
          ["opts.delay", { delay: Number.NaN }],
          ["opts.delay", { delay: 1.5 }],
          ["opts.delay", { delay: 1e20 }],
          ["opts", 5 as never]
        ]
        for (const [field, opts] of cases) {
          const error = yield* rejection(() => unique.add("Work", { n: 1 }, opts as never))
          assert.instanceOf(error, LockOptions.InvalidLockOptions, `${field} ${JSON.stringify(opts)}: ${String(error)}`)
          assert.strictEqual((error as LockOptions.InvalidLockOptions).field, field)
        }
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [])
        const counts = yield* Effect.promise(() => queue.getJobCounts())
        assert.strictEqual(Object.values(counts).reduce((a, b) => a + b, 0), 0, JSON.stringify(counts))
      }))

    it.effect("a queue's defaultJobOptions with deduplication or jobId are refused at make", () =>
      Effect.gen(function*() {
        const queue = yield* Bull.queue(Bull.uniqueName("uqd"), {
          defaultJobOptions: { deduplication: { id: "x" }, jobId: "same" } as never
        })
        const error = thrown(() => UniqueQueue.make(queue, { lock: "until_executed", defaults: {} }))
        assert.instanceOf(error, LockOptions.InvalidLockOptions)
        assert.deepStrictEqual(
          (error as LockOptions.InvalidLockOptions).issues.map((issue) => issue.field).sort(),
          ["queue.defaultJobOptions.deduplication", "queue.defaultJobOptions.jobId"]
        )
      }))

    it.effect("opts.delay and the queue's default delay count for the lock's TTL", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const hour = 3_600_000
        const { unique } = yield* uniqueQueue({ lock: "until_executed", lockTtl: hour })
        const delayed = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { delay: 10 * hour }))
        const ttl = yield* Effect.promise(() => raw.pttl(`${delayed.digest}:LOCKED`))
        assert.isTrue(ttl > 10.9 * hour && ttl <= 11 * hour, `lockTtl counts from the run: ${ttl}`)
        const byDefault = yield* uniqueQueue({ lock: "until_executed", lockTtl: hour }, {
          defaultJobOptions: { delay: 5 * hour }
        })
        const queued = yield* Effect.promise(() => byDefault.unique.add("Work", { n: 1 }))
        const defaultTtl = yield* Effect.promise(() => raw.pttl(`${queued.digest}:LOCKED`))
        assert.isTrue(defaultTtl > 5.9 * hour && defaultTtl <= 6 * hour, `the queue's delay counts too: ${defaultTtl}`)
      }))

  })
})

describe("UniqueQueue: many calls in flight", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    // Each call used to add an abort listener to one signal shared by the queue: past ten in flight, Node warned of a
    // listener leak (MaxListenersExceededWarning), once per queue, in every busy producer and worker.
    it.effect("64 adds and 64 performs in flight at once: every outcome right, and no listener-leak warning", () =>
      Effect.gen(function*() {
        const warnings: Array<string> = []
        const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`)
        yield* Effect.acquireRelease(
          Effect.sync(() => process.on("warning", onWarning)),
          () => Effect.sync(() => process.off("warning", onWarning))
        )
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
        // 64 distinct argument lists, each added twice at once: 64 Enqueued, 64 Skipped.
        const outcomes = yield* Effect.promise(() =>
          Promise.all(Array.from({ length: 128 }, (_, i) => unique.add("Work", { n: i % 64 })))
        )
        const tags = outcomes.map((outcome) => outcome._tag)
        assert.deepStrictEqual(
          [tags.filter((tag) => tag === "Enqueued").length, tags.filter((tag) => tag === "Skipped").length],
          [64, 64]
        )
        let performed = 0
        yield* Bull.worker(name, unique.processor(async () => {
          performed++
          await sleep(20)
        }), { concurrency: 64 })
        assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getCompletedCount()) === 64)))
        assert.strictEqual(performed, 64)
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], "every job released its lock")
        // Warnings are emitted on a later tick.
        yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
        assert.deepStrictEqual(warnings.filter((w) => w.startsWith("MaxListenersExceededWarning")), [])
      }), 60_000)

    // The processor runs each job on a fiber of its own and holds the run lock on it (no fork per perform): the loss
    // must still stop the perform and fail the job with LockLost, never complete it, and the lock must be free after.
    it.effect("a run lock deleted while the processor's job runs: the perform's signal aborts, the job fails LockLost", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
          lock: "while_executing",
          lockLease: "900 millis",
          onConflict: { server: "reschedule" }
        })
        // Bounded: a perform that is never told of the loss would keep close waiting for it.
        yield* Effect.addFinalizer(() => Effect.promise(() => unique.close({ timeout: 1000 }).catch(() => undefined)))
        const events: Array<string> = []
        let started: () => void = () => undefined
        const running = new Promise<void>((resolve) => (started = resolve))
        yield* Bull.worker(name, unique.processor(async (_job, _token, signal) => {
          events.push("started")
          started()
          await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }))
          events.push("aborted")
          return "done"
        }))
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { attempts: 1 }))
        assert.strictEqual(added._tag, "Enqueued")
        yield* Effect.promise(() => running)
        const [runLock] = yield* lockKeys(lockPrefix)
        assert.strictEqual(runLock, `${added.digest}:RUN:LOCKED`)
        yield* Effect.promise(() => raw.del(runLock!))
        assert.isTrue(
          yield* Bull.until(Effect.promise(async () => (await queue.getJobState(added.job.jid)) === "failed")),
          "the job failed"
        )
        const job = yield* Effect.promise(() => queue.getJob(added.job.jid))
        assert.include(job?.failedReason ?? "", "lost its lock")
        assert.deepStrictEqual(events, ["started", "aborted"])
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], "nothing is left held")
      }), 30_000)
  })
})

describe("UniqueQueue.processor: a signal for a fn that declares it", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    // As BullMQ's Worker decides for its own processors: a signal (dear to make) only for a fn of three parameters,
    // and only such a job can be cancelled; a fn that could not stop on it is never told to.
    it.effect("worker.cancelJob aborts a fn of three parameters; a fn of fewer gets no signal and runs to its end", () =>
      Effect.gen(function*() {
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
        const started: Array<string> = []
        const given: Array<number> = []
        let release: () => void = () => undefined
        const gate = new Promise<void>((resolve) => (release = resolve))
        const withSignal = unique.processor(async (job, _token, signal) => {
          given.push(signal instanceof AbortSignal ? 3 : -1)
          started.push(job.id!)
          if (job.name === "WithSignal") {
            await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }))
            throw new Error("stopped on its signal")
          }
          await gate
          return "ran"
        })
        const without = unique.processor(async function(this: unknown, job) {
          // eslint-disable-next-line prefer-rest-params
          given.push(arguments.length)
          started.push(job.id!)
          await gate
          return "ran"
        })
        assert.strictEqual(withSignal.length, 3, "asks BullMQ for its signal")
        assert.strictEqual(without.length, 2, "asks for none")
        const worker = yield* Bull.worker<Data>(
          name,
          (job, token, signal) => job.name === "WithSignal" ? withSignal(job, token, signal) : without(job, token),
          { concurrency: 4 }
        )
        const cancelled = yield* Effect.promise(() => unique.add("WithSignal", { n: 1 }, { attempts: 1 }))
        const plain = yield* Effect.promise(() => unique.add("Plain", { n: 2 }, { attempts: 1 }))
        assert.strictEqual(cancelled._tag, "Enqueued")
        assert.strictEqual(plain._tag, "Enqueued")
        assert.isTrue(yield* Bull.until(Effect.sync(() => started.length === 2)))
        assert.isTrue(worker.cancelJob(cancelled.job.jid), "BullMQ holds a signal for it")
        assert.isTrue(
          yield* Bull.until(Effect.promise(async () => (await queue.getJobState(cancelled.job.jid)) === "failed"))
        )
        release()
        assert.isTrue(
          yield* Bull.until(Effect.promise(async () => (await queue.getJobState(plain.job.jid)) === "completed"))
        )
        assert.sameMembers(given, [3, 2], "the fn of fewer parameters was called with two arguments")
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], "both locks released (the failed job's last attempt)")
      }), 30_000)
  })
})

/** `work`'s answer, or `instead` once `ms` have passed: a bound for a wait that must end, never a measure. */
const orAfter = <A>(work: Promise<A>, ms: number, instead: string): Promise<A | string> => {
  let timer: ReturnType<typeof setTimeout> | undefined
  const bound = new Promise<string>((resolve) => (timer = setTimeout(() => resolve(instead), ms)))
  return Promise.race([work, bound]).finally(() => clearTimeout(timer))
}

// A processor's fn of one parameter (no signal) runs on the hot path (adapters/bullmq/HotPath) once the runtime is built; one
// of three on the Effect path. What BullMQ and Redis end up with must not depend on which.
describe("UniqueQueue.processor: what BullMQ and Redis see of its jobs", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("a job whose run lock entry is removed before its fn returns fails LockLost in BullMQ, never completes", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        // A long lease: no renewal comes between the removal and the release, which is what finds the hold gone.
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
          lock: "while_executing",
          lockLease: "1 minute",
          history: false
        })
        // The first add builds the runtime: the job below runs on the hot path.
        const warm = yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { attempts: 1 }))
        yield* Bull.worker(name, unique.processor(async (job: BullJob<Data>) => {
          // An operator removes this job's hold from its run lock while it runs.
          if (job.name === "Work") await raw.hdel(`${added.digest}:RUN:LOCKED`, job.id!)
          return "done"
        }))
        const state = (jid: string) => Effect.promise(() => queue.getJobState(jid))
        assert.isTrue(yield* Bull.until(Effect.map(state(added.job.jid), (s) => s === "completed" || s === "failed")))
        assert.strictEqual(yield* state(added.job.jid), "failed", "another copy may have run meanwhile: not completed")
        const job = yield* Effect.promise(() => queue.getJob(added.job.jid))
        assert.include(job?.failedReason ?? "", "the release found the hold gone")
        assert.strictEqual(yield* state(warm.job.jid), "completed")
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [])
      }), 60_000)

    it.effect("a job whose run lock entry is removed while its fn runs fails LockLost once its fn has returned, never completes", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { name, unique, lockPrefix } = yield* uniqueQueue({
          lock: "while_executing",
          lockLease: "900 millis",
          history: false
        })
        let release!: () => void
        const gate = new Promise<void>((resolve) => (release = resolve))
        // Runs before the queue's close (finalizers run last first): a fn left waiting would keep close waiting.
        yield* Effect.addFinalizer(() => Effect.sync(() => release()))
        let started!: () => void
        const running = new Promise<void>((resolve) => (started = resolve))
        let fnEnded = false
        const processor = unique.processor(async (job: BullJob<Data>) => {
          if (job.name === "Work") {
            started()
            await gate
            fnEnded = true
          }
          return "done"
        })
        const worker = yield* Bull.manualWorker(name)
        // The first add builds the runtime: the job below runs on the hot path.
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { attempts: 1 }))
        const warm = yield* Effect.promise(() => worker.getNextJob("t0", { block: false }))
        assert.strictEqual(yield* Effect.promise(() => processor(warm as BullJob<Data>, "t0")), "done")
        const job = yield* Effect.promise(() => worker.getNextJob("t1", { block: false }))
        assert.strictEqual(job?.id, added.job.jid)
        const outcome = processor(job as BullJob<Data>, "t1").then(
          (value) => `value ${String(value)}`,
          (error: Error & { readonly _tag?: string }) => error._tag ?? error.message
        )
        yield* Effect.promise(() => running)
        const lost = Metrics.lost.of("while_executing", "run")
        const before = (yield* Metric.value(lost)).count
        yield* Effect.promise(() => raw.hdel(`${added.digest}:RUN:LOCKED`, added.job.jid))
        // The keeper renews every third of the lease and tells the job; it answers once its fn has returned (nothing
        // can stop a promise: a run lock still in place, revoked, stays until then).
        assert.isTrue(yield* Bull.until(Effect.map(Metric.value(lost), (value) => value.count > before)), "the loss was told")
        assert.strictEqual(yield* Effect.promise(() => orAfter(outcome, 0, "still running")), "still running")
        release()
        assert.strictEqual(yield* Effect.promise(() => orAfter(outcome, 20_000, "still running")), "LockLost")
        assert.isTrue(fnEnded, "the job failed once its fn had returned")
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], "nothing is left held")
      }), 60_000)

    it.effect("a worker started while its lock Redis is down: its job is put back, no attempt spent, and once Redis is back it runs", () =>
      Effect.gen(function*() {
        const { name, queue, server, unique } = yield* downLockRedisQueue("uqdown")
        // Added by BullMQ itself (while_executing takes no lock at enqueue): the processor is the queue's first call.
        yield* Effect.promise(() => queue.add("Work", { n: 1 }, { jobId: "down-1", attempts: 1 }))
        let ran = 0
        const processor = unique.processor(async (job: BullJob<Data>) => {
          ran++
          return `done ${job.data.n}`
        })
        const worker = yield* Bull.manualWorker(name)
        const job = (yield* Effect.promise(() => worker.getNextJob("t", { block: false }))) as BullJob<Data>
        const first = yield* rejection(() => processor(job, "t"))
        // Not a failure of the job's: BullMQ's DelayedError, and the job waits delayed with its one attempt unspent.
        assert.strictEqual((first as Error).name, "DelayedError", String(first))
        assert.strictEqual(yield* Effect.promise(() => queue.getJobState("down-1")), "delayed")
        assert.strictEqual((yield* Effect.promise(() => queue.getJob("down-1")))?.attemptsMade, 0)
        assert.strictEqual(ran, 0)
        yield* server.restart
        // The failed build is let go once it has failed, and the next call builds anew: a bounded number of tries,
        // each taking the job again (put back while the store is not built yet).
        let answer: unknown = undefined
        for (let attempt = 0; attempt < 20 && answer !== "done 1"; attempt++) {
          yield* Effect.promise(() => queue.promoteJobs())
          const again = (yield* Effect.promise(() => worker.getNextJob(`t${attempt}`, { block: false }))) as
            | BullJob<Data>
            | undefined
          if (again === undefined) {
            yield* Effect.promise(() => sleep(100))
            continue
          }
          answer = yield* Effect.promise(() =>
            processor(again, `t${attempt}`).then(async (value) => {
              await again.moveToCompleted(value, `t${attempt}`, false)
              return value
            }, (error: unknown) => String(error))
          )
        }
        assert.strictEqual(answer, "done 1")
        assert.strictEqual(ran, 1)
        assert.strictEqual(yield* Effect.promise(() => queue.getJobState("down-1")), "completed")
      }), 60_000)

    it.effect("a fn of three parameters that answers a plain value, not a promise: BullMQ completes the job with it", () =>
      Effect.gen(function*() {
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed", history: false })
        const plain = (job: BullJob<Data>, _token: string | undefined, _signal: AbortSignal) =>
          `plain ${job.data.n}` as unknown as Promise<string>
        yield* Bull.worker(name, unique.processor(plain))
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { attempts: 1 }))
        const state = Effect.promise(() => queue.getJobState(added.job.jid))
        assert.isTrue(yield* Bull.until(Effect.map(state, (s) => s === "completed" || s === "failed")))
        const job = yield* Effect.promise(() => queue.getJob(added.job.jid))
        assert.strictEqual(yield* state, "completed", job?.failedReason)
        assert.strictEqual(job?.returnvalue, "plain 1")
        assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], "its lock went with its success")
      }), 60_000)

    it.effect("an until_executing job retried after a failed attempt logs no 'found nothing to release'; one whose lock was deleted does", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        // The UniqueQueue's runtime logs with Effect's default logger, to console.log.
        const logged = yield* consoleLines
        const missed = () => Effect.runSync(Metric.value(Metrics.releaseMissed.of("until_executing", "queue"))).count
        const { name, queue, unique } = yield* uniqueQueue({ lock: "until_executing", history: false })
        // The first add builds the runtime: the jobs below run on the hot path (a fn of one parameter).
        yield* Effect.promise(() => unique.add("Warm", { n: 0 }))
        const retried = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { attempts: 2 }))
        const deleted = yield* Effect.promise(() => unique.add("Work", { n: 2 }))
        // An operator deletes n=2's lock before it runs: its release finds nothing, which is worth a warning.
        yield* Effect.promise(() => raw.del(`${deleted.digest}:LOCKED`))
        const before = missed()
        let attempts = 0
        yield* Bull.worker(name, unique.processor(async (job: BullJob<Data>) => {
          if (job.data.n === 1 && attempts++ === 0) throw new Error("first attempt fails")
          return "done"
        }))
        for (const jid of [retried.job.jid, deleted.job.jid]) {
          assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getJobState(jid)) === "completed")), jid)
        }
        assert.strictEqual(attempts, 2, "n=1 ran twice")
        const warnings = logged.filter((line) => line.includes("found nothing to release"))
        assert.strictEqual(warnings.length, 1, warnings.join("\n"))
        assert.include(warnings[0], deleted.job.jid)
        assert.strictEqual(missed() - before, 1, "only the deleted lock's release counted missed")
      }), 60_000)
  })
})

describe("UniqueQueue.make: every option decoded once", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("values of the wrong kind are refused at make, naming the field and what to write", () =>
      Effect.gen(function*() {
        const queue = yield* Bull.queue(Bull.uniqueName("uqm"))
        const cases: ReadonlyArray<readonly [string, Record<string, unknown>]> = [
          ["redis", { redis: 5 }],
          ["redis.url", { redis: { url: 5 } }],
          ["redis.timeout", { redis: { url: "redis://127.0.0.1:1", timeout: 0 } }],
          ["redis.host", { redis: { url: "redis://127.0.0.1:1", host: "elsewhere" } }],
          ["jobs", { jobs: [1, 2] }],
          ["jobs.a", { jobs: { a: null } }],
          ["jobs.a.lockTtl", { jobs: { a: { lock: "while_executing", lockTtl: 5 } } }],
          ["deadLetter", { deadLetter: {} }],
          ["deadLetter", { deadLetter: queue }],
          ["defaults.lockTtl", { defaults: { lockTtl: -1 } }],
          ["defaults", { defaults: 5 }],
          ["lockTtl", { lockTtl: Number.NaN }]
        ]
        for (const [field, extra] of cases) {
          const error = thrown(() => UniqueQueue.make(queue, { lock: "until_executed", defaults: {}, ...extra } as never))
          assert.instanceOf(error, LockOptions.InvalidLockOptions, `${field}: ${String(error)}`)
          const invalid = error as LockOptions.InvalidLockOptions
          assert.strictEqual(invalid.field, field, invalid.message)
          assert.isAbove(invalid.reason.length, 10, "it says what to write")
        }
        // Every bad field at once, not only the first.
        const all = thrown(() =>
          UniqueQueue.make(queue, { lock: "until_executed", redis: 5, jobs: [1], deadLetter: {}, defaults: 5 } as never)
        ) as LockOptions.InvalidLockOptions
        assert.deepStrictEqual(all.issues.map((issue) => issue.field).sort(), ["deadLetter", "defaults", "jobs", "redis"])
        assert.instanceOf(thrown(() => UniqueQueue.make(5 as never, { lock: "until_executed" })), LockOptions.InvalidLockOptions)
        assert.instanceOf(thrown(() => UniqueQueue.make(queue, 5 as never)), LockOptions.InvalidLockOptions)
      }))

    it.effect("a queue on an ioredis client (whose unset username and password are null) keeps its locks beside it", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const client = yield* Effect.acquireRelease(
          Effect.sync(() => new IORedis(source.url, { maxRetriesPerRequest: null })),
          (c) => Effect.sync(() => c.disconnect())
        )
        const queue = yield* Effect.acquireRelease(
          Effect.sync(() => new Queue(Bull.uniqueName("uqc"), { connection: client })),
          (q) => Effect.promise(() => q.close())
        )
        const lockPrefix = RedisTest.uniquePrefix("uqc")
        const unique = yield* Effect.acquireRelease(
          Effect.sync(() => UniqueQueue.make(queue, { lock: "until_executed", lockPrefix, defaults: {} })),
          (u) => Effect.promise(() => u.close())
        )
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        assert.strictEqual(added._tag, "Enqueued")
        assert.strictEqual(yield* Effect.promise(() => raw.exists(`${added.digest}:LOCKED`)), 1)
      }))

    it.effect("bad UNIQUE_JOBS_* values fail at make, each named by its variable, not at every add", () =>
      Effect.gen(function*() {
        const queue = yield* Bull.queue(Bull.uniqueName("uqe"))
        const saved = { lease: process.env.UNIQUE_JOBS_LOCK_LEASE, prefix: process.env.UNIQUE_JOBS_LOCK_PREFIX }
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            for (const [key, value] of [["UNIQUE_JOBS_LOCK_LEASE", saved.lease], ["UNIQUE_JOBS_LOCK_PREFIX", saved.prefix]]) {
              if (value === undefined) delete process.env[key!]
              else process.env[key!] = value
            }
          })
        )
        process.env.UNIQUE_JOBS_LOCK_LEASE = "50"
        process.env.UNIQUE_JOBS_LOCK_PREFIX = "a b"
        const error = thrown(() => UniqueQueue.make(queue, { lock: "until_executed" }))
        assert.instanceOf(error, LockOptions.InvalidLockOptions)
        const invalid = error as LockOptions.InvalidLockOptions
        assert.deepStrictEqual(
          invalid.issues.map((issue) => issue.field).sort(),
          ["UNIQUE_JOBS_LOCK_LEASE", "UNIQUE_JOBS_LOCK_PREFIX"]
        )
        assert.notInclude(invalid.message, "undefined")
      }))
  })
})

// An until_executed job added through a lock-proxied UniqueQueue and run by hand through its processor with the lock
// Redis stalled: the processor has answered, and the proxy holds the job's release.
const performedWithReleaseHeld = (label: string, timeout?: Duration.Input) =>
  Effect.gen(function*() {
    const queued = yield* lockProxiedUniqueQueue(label, timeout)
    const added = yield* Effect.promise(() => queued.unique.add("Work", { n: 1 }))
    assert.strictEqual(added._tag, "Enqueued")
    const processor = queued.unique.processor(async () => "done")
    const worker = yield* Bull.manualWorker(queued.name)
    const job = (yield* Effect.promise(() => worker.getNextJob("t", { block: false }))) as BullJob<Data>
    yield* queued.proxy.stall
    assert.strictEqual(yield* Effect.promise(() => processor(job, "t")), "done")
    return { ...queued, added, job }
  })

// close({ timeout: 100 }) passing while a hot-path until_executed job's fn (no signal) still runs and an add (with a
// delay: the Effect path, a fiber close could interrupt) is on its way to a stalled queue Redis, holding its lock.
// Answers once the job was cancelled, which is how the test knows the timeout passed: close still waits for the add.
const closeTimedOutMidAdd = (label: string) =>
  Effect.gen(function*() {
    const queued = yield* proxiedUniqueQueue(label)
    const { lockPrefix, name, proxy, unique } = queued
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    let started!: () => void
    const running = new Promise<void>((resolve) => (started = resolve))
    let fnEnded!: () => void
    const ended = new Promise<void>((resolve) => (fnEnded = resolve))
    yield* Effect.addFinalizer(() =>
      Effect.promise(async () => {
        release()
        await Effect.runPromise(proxy.resume)
        await unique.close({ timeout: 1000 }).catch(() => undefined)
      })
    )
    const processor = unique.processor(async (_job: BullJob<Data>) => {
      started()
      await gate
      fnEnded()
      return "late"
    })
    // The first add builds the runtime: its job runs on the hot path.
    const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
    assert.strictEqual(added._tag, "Enqueued")
    const worker = yield* Bull.manualWorker(name)
    const job = (yield* Effect.promise(() => worker.getNextJob("t", { block: false }))) as BullJob<Data>
    const cancelled = processor(job, "t").then(() => "completed", (error: Error) => error.message)
    yield* Effect.promise(() => running)
    yield* proxy.stall
    const adding = unique.add("Work", { n: 2 }, { delay: 60_000 }).then(
      (outcome) => outcome._tag,
      (error: { readonly _tag?: string }) => error._tag ?? String(error)
    )
    assert.isTrue(yield* Bull.until(Effect.map(lockKeys(lockPrefix), (keys) => keys.length === 2)), "the add took its lock")
    const closing = unique.close({ timeout: 100 })
    assert.strictEqual(yield* Effect.promise(() => cancelled), `job ${job.id} was cancelled`)
    return { ...queued, added, adding, closing, ended, job, release }
  })

describe("UniqueQueue.close: shutdown in either order with a job running", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    for (const order of ["unique.close, then worker.close", "worker.close, then unique.close"] as const) {
      it.effect(`${order}: the running until_executed job completes and releases its lock`, () =>
        Effect.gen(function*() {
          const { raw } = yield* RedisTest.TestRedis
          const connection = yield* Bull.connection
          const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
          let started!: () => void
          const running = new Promise<void>((resolve) => (started = resolve))
          const worker = new Worker(name, unique.processor(async () => {
            started()
            await sleep(300)
            return "done"
          }), { connection })
          yield* Effect.addFinalizer(() => Effect.promise(() => worker.close(true)))
          const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
          yield* Effect.promise(() => running)
          yield* Effect.promise(async () => {
            if (order === "unique.close, then worker.close") {
              await unique.close()
              await worker.close()
            } else {
              await worker.close()
              await unique.close()
            }
          })
          // unique.close closed `queue`: read through another instance.
          const reader = yield* Bull.queue(queue.name)
          assert.strictEqual(yield* Effect.promise(() => reader.getJobState(added.job.jid)), "completed")
          assert.strictEqual(yield* Effect.promise(() => raw.pttl(`${added.digest}:LOCKED`)), -2, "the lock is gone")
          assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix), [])
          // A second close answers the first one's promise; an add after close says the queue is closed.
          yield* Effect.promise(() => unique.close())
          const late = yield* rejection(() => unique.add("Work", { n: 2 }))
          assert.include(String(late), "closed")
        }))
    }

    for (const order of ["unique-first", "worker-first"] as const) {
      it.effect(`${order}, in a process of its own: the lock is gone and the process exits by itself`, () =>
        Effect.gen(function*() {
          const { source } = yield* RedisTest.TestRedis
          const child = spawn(process.execPath, [
            "--import",
            "tsx",
            fileURLToPath(new URL("./support/uniquequeue-close-process.ts", import.meta.url)),
            source.url,
            Bull.uniqueName("uqp"),
            RedisTest.uniquePrefix("uqp"),
            order
          ], { stdio: ["ignore", "pipe", "inherit"] })
          yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
          let output = ""
          child.stdout.on("data", (chunk) => {
            output += String(chunk)
          })
          // No kill here: the test's own timeout is the bound; a process that stays up fails it.
          const code = yield* Effect.promise(() => new Promise((resolve) => child.once("exit", resolve)))
          assert.strictEqual(code, 0)
          assert.strictEqual(output.trim(), "CLOSED -2", "the completed job released its lock")
        }), 60_000)
    }

    it.effect("adds under way when close is called finish first: every lock left has its job, every job its lock", () =>
      Effect.gen(function*() {
        const { queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
        const adds = Array.from({ length: 50 }, (_, n) =>
          unique.add("Work", { n }).then((outcome) => outcome._tag, (error: unknown) => String(error)))
        yield* Effect.promise(() => unique.close())
        const answers = yield* Effect.promise(() => Promise.all(adds))
        assert.deepStrictEqual(new Set(answers), new Set(["Enqueued"]), "each add began before close, and finished")
        const reader = yield* Bull.queue(queue.name)
        assert.strictEqual(yield* Effect.promise(() => reader.count()), 50)
        assert.strictEqual((yield* lockKeys(lockPrefix)).length, 50)
      }))

    it.effect("close with a timeout that is not a positive duration is refused, and the queue stays open", () =>
      Effect.gen(function*() {
        const { unique } = yield* uniqueQueue({ lock: "until_executed" })
        for (const timeout of [0, -1, Number.NaN, "abc", 1e20]) {
          const error = yield* rejection(() => unique.close({ timeout } as never))
          assert.instanceOf(error, LockOptions.InvalidLockOptions, String(timeout))
          assert.strictEqual((error as LockOptions.InvalidLockOptions).field, "timeout")
        }
        assert.strictEqual((yield* Effect.promise(() => unique.add("Work", { n: 1 })))._tag, "Enqueued")
      }))

    it.effect("a job handed to the processor after close is put back (delayed, no attempt spent), keeping its lock", () =>
      Effect.gen(function*() {
        const { name, queue, unique } = yield* uniqueQueue({ lock: "until_executed" })
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        const processor = unique.processor(async () => "done")
        yield* Effect.promise(() => unique.close())
        const worker = yield* Bull.manualWorker(name)
        const job = yield* Effect.promise(() => worker.getNextJob("late", { block: false }))
        const error = yield* rejection(() => processor(job as BullJob<Data>, "late"))
        assert.strictEqual((error as Error).name, "DelayedError")
        const reader = yield* Bull.queue(queue.name)
        assert.strictEqual(yield* Effect.promise(() => reader.getJobState(added.job.jid)), "delayed")
        const after = yield* Effect.promise(() => reader.getJob(added.job.jid))
        assert.strictEqual(after?.attemptsMade, 0, "no attempt spent")
        const { raw } = yield* RedisTest.TestRedis
        assert.strictEqual(yield* Effect.promise(() => raw.hexists(`${added.digest}:LOCKED`, added.job.jid)), 1)
      }))

    it.effect("an until_executed job's outcome goes with its release sent, not answered; close waits for the answer", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { added, lockPrefix, proxy, unique, unlocked } = yield* performedWithReleaseHeld("uqafter")
        const lock = `${added.digest}:LOCKED`
        assert.strictEqual(yield* Effect.promise(() => raw.exists(lock)), 1, "the release is held by the proxy")
        let closed = false
        const closing = unique.close().then(() => (closed = true))
        yield* Effect.promise(() => sleep(300))
        assert.isFalse(closed, "close waited for the release")
        yield* proxy.resume
        yield* Effect.promise(() => closing)
        assert.strictEqual(yield* Effect.promise(() => raw.exists(lock)), 0, "released before close ended")
        assert.deepStrictEqual(unlocked, [added.job.jid], "afterUnlock ran before close ended")
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix), [])
      }), 60_000)

    // The release's request lost on its way, the connection then closed: the release is tried again once Redis answers,
    // and close waits for that answer. Without the wait, close disposed of the runtime under the retry: the lock stayed.
    it.effect("close waits for an until_executed job's release whose request was lost: it is tried again and answers first", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { lockPrefix, name, proxy, unique, unlocked } = yield* lockProxiedUniqueQueue("uqlostrel", "1 second")
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        assert.strictEqual(added._tag, "Enqueued")
        const processor = unique.processor(async () => "done")
        const worker = yield* Bull.manualWorker(name)
        const job = (yield* Effect.promise(() => worker.getNextJob("t", { block: false }))) as BullJob<Data>
        yield* proxy.lose("request")
        assert.strictEqual(yield* Effect.promise(() => processor(job, "t")), "done")
        yield* Effect.promise(() => unique.close())
        assert.deepStrictEqual(unlocked, [added.job.jid], "the release answered before close ended")
        assert.strictEqual(yield* Effect.promise(() => raw.exists(`${added.digest}:LOCKED`)), 0, "no lock left")
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix), [])
      }), 60_000)

    it.effect("close({ timeout }) stops waiting for a release still unanswered (the lock Redis stalled): the job has performed", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        // A store timeout of 1 s: close's own end (QUIT on the stalled connection) is bounded by it.
        const { added, job, proxy, queue, unique } = yield* performedWithReleaseHeld("uqaftercut", "1 second")
        yield* Effect.promise(() => job.moveToCompleted("done", "t", false))
        // Ends while the proxy still holds the release: after its timeout and QUIT's bound (1 s), long before the
        // release's retries would have ended (30 s).
        const first = yield* Effect.promise(() =>
          Promise.race([unique.close({ timeout: 300 }).then(() => "closed"), sleep(20_000).then(() => "waiting")])
        )
        assert.strictEqual(first, "closed", "close waited for the release's retries")
        const reader = yield* Bull.queue(queue.name)
        assert.strictEqual(yield* Effect.promise(() => reader.getJobState(added.job.jid)), "completed", "performed once")
        yield* proxy.resume
        // What the release did once let through is Redis' to say; a lock left is the reaper's (its job completed).
        const left = yield* Effect.promise(() => raw.hkeys(`${added.digest}:LOCKED`))
        assert.isTrue(left.length === 0 || (left.length === 1 && left[0] === added.job.jid), JSON.stringify(left))
      }), 60_000)

    it.effect("close({ timeout }) cancels a job that outlives it: its perform is aborted, and close ends", () =>
      Effect.gen(function*() {
        const connection = yield* Bull.connection
        const { name, unique } = yield* uniqueQueue({ lock: "while_executing" })
        let started!: () => void
        const running = new Promise<void>((resolve) => (started = resolve))
        let aborted = false
        const worker = new Worker(name, unique.processor((_, __, signal) =>
          new Promise((resolve) => {
            started()
            signal.addEventListener("abort", () => {
              aborted = true
              resolve("aborted")
            })
          })
        ), { connection })
        yield* Effect.addFinalizer(() => Effect.promise(() => worker.close(true)))
        yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        yield* Effect.promise(() => running)
        yield* Effect.promise(() => unique.close({ timeout: 200 }))
        assert.isTrue(aborted, "the perform was told to stop")
      }))

    it.effect("close({ timeout }) cancels a hot-path until_executed job; its fn ending while close still runs leaves the lock to its retry", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const { added, closing, ended, job, lockPrefix, name, proxy, release } = yield* closeTimedOutMidAdd("uqcancel")
        // The fn ends while close waits for the add, the lock connection still open: it must change no lock.
        release()
        yield* Effect.promise(() => ended)
        yield* proxy.resume
        yield* Effect.promise(() => closing)
        assert.deepStrictEqual(yield* Effect.promise(() => raw.hkeys(`${added.digest}:LOCKED`)), [job.id!])
        // As another producer sees it: the data is still locked by the job BullMQ will retry.
        const direct = yield* Bull.queue(name)
        const other = yield* Effect.acquireRelease(
          Effect.sync(() =>
            UniqueQueue.make<Data>(direct, { lock: "until_executed", lockPrefix, redis: { url: source.url }, defaults: {} })
          ),
          (u) => Effect.promise(() => u.close())
        )
        const again = yield* Effect.promise(() => other.add("Work", { n: 1 }))
        assert.strictEqual(again._tag, "Skipped")
        if (again._tag === "Skipped") assert.deepStrictEqual(again.holders, [job.id!])
      }), 60_000)

    it.effect("close({ timeout }) passing while an add waits for BullMQ does not cut it off: the job is stored with its lock", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { adding, closing, lockPrefix, name, proxy, release } = yield* closeTimedOutMidAdd("uqcloseadd")
        yield* proxy.resume
        release()
        yield* Effect.promise(() => closing)
        // Enqueued; or, on a machine slow enough for the adapter's timeout to pass first, a QueueError whose lock is
        // kept until BullMQ answers. Never cut off.
        assert.oneOf(yield* Effect.promise(() => adding), ["Enqueued", "QueueError"])
        const direct = yield* Bull.queue(name)
        const delayed = (yield* Effect.promise(() => direct.getJobs(["delayed"]))).map((job) => job.id!)
        assert.strictEqual(delayed.length, 1, "the add, sent before close, was stored")
        const holders = new Set<string>()
        for (const key of yield* lockKeys(lockPrefix)) {
          for (const jid of yield* Effect.promise(() => raw.hkeys(key))) holders.add(jid)
        }
        assert.isTrue(holders.has(delayed[0]!), `the stored job ${delayed[0]} holds its lock`)
      }), 60_000)
  })
})
