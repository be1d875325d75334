/**
 * Typed job arguments (issue 19, item 5): a worker whose uniqueness carries the Schema of its argument list. Its
 * `enqueue` takes only that type (a wrong one fails `tsc`: the `@ts-expect-error` lines below are checked by
 * `npm run typecheck`), encodes it for the queue (the digest is of what the queue carries), and its perform gets the
 * arguments decoded. A payload that does not decode never reaches the perform: a typed `InvalidJobArgs` naming the
 * job and each path, on the memory queue and on BullMQ (where the job fails for good, its lock released).
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import { InvalidJobArgs } from "../src/Errors.js"
import * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as Bull from "./support/bullmq.js"
import * as RedisTest from "./support/redis.js"

// Effect 4: Schema.Date is the Date itself; the queue carries its ISO string through Schema.DateFromString.
const Report = Schema.Struct({ reportId: Schema.Number, due: Schema.DateFromString })

const rebuild = (lockPrefix: string) =>
  UniqueJob.unsafeMake({
    worker: "RebuildReportJob",
    queue: "typed",
    args: Schema.Tuple([Report]),
    lock: "until_executed",
    lockPrefix
  })

// What tsc refuses (checked by `npm run typecheck`, which includes this file): each line must stay an error.
export const refused = (job: ReturnType<typeof rebuild>) => [
  // @ts-expect-error reportId is a number
  job.enqueue([{ reportId: "42", due: new Date() }]),
  // @ts-expect-error due is a Date, not its encoded string
  job.enqueue([{ reportId: 42, due: "2026-12-01" }]),
  // @ts-expect-error one argument, not two
  job.enqueue([{ reportId: 42, due: new Date() }, 1]),
  // @ts-expect-error the perform's arguments are typed: reportId is no string
  job.perform(Job.make({ worker: "W", args: [] }), ([report]) => Effect.succeed(report.reportId.toUpperCase()))
]

describe("typed job arguments", () => {
  // Live services: the memory queue's retries and BullMQ's jobs run on real time.
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("on the memory queue: encoded for the queue, decoded for the perform; a bad payload never performs", () =>
      Effect.gen(function*() {
        const lockPrefix = RedisTest.uniquePrefix("typed")
        const Rebuild = rebuild(lockPrefix)
        const queue = yield* MemoryQueue.MemoryQueue
        const due = new Date("2026-12-24T00:00:00.000Z")
        const performed: Array<{ reportId: number; due: Date }> = []
        const failures: Array<unknown> = []
        yield* queue.work(
          (job) =>
            Rebuild.perform(job, ([report]) => Effect.sync(() => void performed.push(report))).pipe(
              Effect.tapError((error) => Effect.sync(() => void failures.push(error)))
            ),
          { onDeath: (job) => Rebuild.died(job) }
        )
        const first = yield* Rebuild.enqueue([{ reportId: 42, due }])
        assert.strictEqual(first._tag, "Enqueued")
        // The queue carries the encoded form, and the digest is of it: a worker in another process computes it again.
        assert.deepStrictEqual(first.job.args, [{ reportId: 42, due: "2026-12-24T00:00:00.000Z" }])
        assert.strictEqual(first.digest, yield* Lock.digest(Rebuild.definition, first.job))
        assert.strictEqual(first.digest, yield* Rebuild.digest([{ reportId: 42, due }]))
        assert.strictEqual((yield* Rebuild.enqueue([{ reportId: 42, due }]))._tag, "Skipped")
        yield* queue.awaitIdle
        assert.strictEqual(performed.length, 1)
        assert.instanceOf(performed[0]!.due, Date, "decoded: a Date again")
        assert.strictEqual(performed[0]!.due.getTime(), due.getTime())

        // A payload from elsewhere (another producer, an older version): the perform never sees it.
        const bad = Job.make({ worker: "RebuildReportJob", queue: "typed", args: [{ reportId: "x", due: "soon" }] })
        const pushed = yield* Rebuild.client(bad, (stamped) => Effect.flatMap(JobQueue, (q) => q.push(stamped)))
        assert.strictEqual(pushed._tag, "Enqueued")
        yield* queue.awaitIdle
        assert.strictEqual(performed.length, 1, "the bad payload was not performed")
        assert.strictEqual(failures.length >= 1, true)
        const error = failures[0]
        assert.instanceOf(error, InvalidJobArgs)
        const invalid = error as InvalidJobArgs
        assert.strictEqual(invalid.jid, bad.jid)
        assert.strictEqual(invalid.direction, "decode")
        assert.deepStrictEqual(invalid.issues.map((issue) => issue.path).sort(), ["args[0].due", "args[0].reportId"])
        assert.include(invalid.message, "RebuildReportJob job")
        // A failed perform as any other: retried, then dead, and its lock released with it.
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix), [])
      }).pipe(Effect.provide(MemoryQueue.layer({ maxRetries: 1, backoff: () => "1 millis" }))), { timeout: 30_000 })

    it.effect("arguments that do not encode are refused before anything is locked or enqueued", () =>
      Effect.gen(function*() {
        const lockPrefix = RedisTest.uniquePrefix("typed-enc")
        const Positive = UniqueJob.unsafeMake({
          worker: "PositiveJob",
          args: Schema.Tuple([Schema.Number.check(Schema.isGreaterThan(0))]),
          lock: "until_executed",
          lockPrefix
        })
        const error = yield* Effect.flip(Positive.enqueue([-1]))
        assert.instanceOf(error, InvalidJobArgs)
        assert.strictEqual((error as InvalidJobArgs).direction, "encode")
        assert.deepStrictEqual((error as InvalidJobArgs).issues.map((issue) => issue.path), ["args[0]"])
        const { raw } = yield* RedisTest.TestRedis
        const locked = yield* Effect.promise(() => raw.keys(`${lockPrefix}:*`))
        assert.deepStrictEqual(locked.filter((key) => key !== `${lockPrefix}:layout`), [], "nothing locked")
        assert.deepStrictEqual((yield* Effect.flatMap(MemoryQueue.MemoryQueue, (q) => q.snapshot)).ready, [])
        // Options: `args` must be a Schema.
        assert.throws(() => UniqueJob.unsafeMake({ worker: "W", args: [1] as never, lock: "until_executed" }), /args/)
      }).pipe(Effect.provide(MemoryQueue.layer())))
  })

  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("on BullMQ: the perform gets the decoded data; a bad payload fails for good, typed, its lock released", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const name = Bull.uniqueName("typed")
        const queue = yield* Bull.queue(name)
        const lockPrefix = RedisTest.uniquePrefix("typed-bull")
        const Rebuild = UniqueJob.unsafeMake({
          worker: "RebuildReportJob",
          queue: name,
          args: Schema.Tuple([Report]),
          lock: "until_executed",
          lockPrefix
        })
        const performed: Array<Date> = []
        const run = Effect.gen(function*() {
          const connection = yield* Bull.connection
          yield* BullMQ.worker(Rebuild, (_job, _running, _token, [report]) =>
            Effect.sync(() => {
              performed.push(report.due)
              return report.reportId
            }), { connection })
          const due = new Date("2026-12-24T00:00:00.000Z")
          const good = yield* Rebuild.enqueue([{ reportId: 7, due }])
          assert.strictEqual(good._tag, "Enqueued")
          assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getJobState(good.job.jid)) === "completed")))
          assert.strictEqual((yield* Effect.promise(() => queue.getJob(good.job.jid)))?.returnvalue, 7)
          assert.instanceOf(performed[0], Date)
          // A bad payload through the same locks: it takes its lock, fails once (not retried), and lets the lock go.
          const bad = Job.make({ worker: "RebuildReportJob", queue: name, args: [{ reportId: 8, due: "not a date" }] })
          const pushed = yield* Rebuild.client(bad, (stamped) =>
            Effect.flatMap(BullMQ.BullMQ, (bull) => bull.add(stamped, { attempts: 5 })))
          assert.strictEqual(pushed._tag, "Enqueued")
          assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getJobState(bad.jid)) === "failed")))
          const failed = yield* Effect.promise(() => queue.getJob(bad.jid))
          assert.strictEqual(failed?.attemptsMade, 1, "a payload that does not decode is not retried")
          assert.include(failed?.failedReason ?? "", "does not decode")
          assert.include(failed?.failedReason ?? "", "args[0].due")
          assert.strictEqual(performed.length, 1, "never performed on bad data")
          assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix), [])
        })
        yield* run.pipe(Effect.provide(Layer.merge(BullMQ.layer(queue), Redis.layer({ url: source.url }))))
      }), { timeout: 60_000 })
  })
})
