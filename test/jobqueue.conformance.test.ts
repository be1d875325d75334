/**
 * The `JobQueue` contract (test/support/jobQueueContract.ts) on `MemoryQueue` and on BullMQ on a private
 * redis-server, and BullMQ's calls bounded against a stalled Redis. Real time: BullMQ's delays run on it, and the
 * memory queue runs on the live clock here too.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { Queue } from "bullmq"
import { Redis as IORedis } from "ioredis"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Job from "../src/Job.js"
import { JobQueue, type QueueError } from "../src/JobQueue.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as Bull from "./support/bullmq.js"
import { contract, type Driver, type Harness } from "./support/jobQueueContract.js"
import * as RedisTest from "./support/redis.js"

const memory: Driver<RedisTest.TestRedis> = {
  name: "MemoryQueue",
  make: Effect.map(MemoryQueue.make({ maxRetries: 2, backoff: () => 500, queues: ["default"] }), (queue) => ({
    queueName: "default",
    port: queue,
    work: (handler) => queue.work((job) => Effect.provideService(handler(job), JobQueue, queue), { concurrency: 2 }),
    dead: Effect.map(queue.snapshot, (s) => s.dead.map(({ job, reason }) => ({ jid: job.jid, reason })))
  }))
}

const bullmq: Driver<RedisTest.TestRedis> = {
  name: "BullMQ",
  make: Effect.gen(function*() {
    const name = Bull.uniqueName("conf")
    const queue = yield* Bull.queue(name)
    const port = yield* BullMQ.make(queue, { jobOptions: { attempts: 3, backoff: { type: "fixed", delay: 500 } } })
    const runPromise = Effect.runPromiseWith(yield* Effect.context<never>())
    const context = yield* Effect.context<RedisTest.TestRedis>()
    return {
      queueName: name,
      port,
      work: (handler) =>
        Effect.asVoid(Bull.worker(
          name,
          (bullJob, token) =>
            runPromise(
              BullMQ.performing(bullJob, token, Effect.provideService(handler(BullMQ.toJob(bullJob)), JobQueue, port))
            ),
          { concurrency: 2 }
        ).pipe(Effect.provide(context))),
      dead: Effect.promise(async () => {
        const entries = await port.deadLetter.getJobs(["waiting", "delayed", "completed", "failed"])
        return entries.map((entry) => {
          const letter = entry.data as BullMQ.DeadLetter
          return { jid: letter.job.jid, reason: letter.reason }
        })
      })
    } satisfies Harness
  })
}

contract(memory, RedisTest.layerServer)
contract(bullmq, RedisTest.layerServer)

// Every call is bounded: BullMQ's Redis stalled (CLIENT PAUSE) answers nothing, and each call fails with a
// QueueError once the adapter's timeout has passed, instead of waiting for it.
describe("JobQueue contract: BullMQ, its Redis stalled", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("push, schedule, remove, kill and exists each fail with a QueueError within the timeout", () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.start
        const url = new URL(server.url)
        const name = Bull.uniqueName("stalled")
        const queue = yield* Effect.acquireRelease(
          Effect.sync(() => new Queue(name, { connection: { host: url.hostname, port: Number(url.port) } })),
          (q) => Effect.promise(() => q.close().catch(() => undefined))
        )
        queue.on("error", () => {})
        const port = yield* BullMQ.make(queue, { timeout: 200 })
        const job = (n: number) => Job.make({ worker: "Stalled", queue: name, args: [n] })
        yield* port.push(job(0)) // connected, scripts loaded
        const control = yield* Effect.acquireRelease(
          Effect.sync(() => new IORedis(server.url)),
          (client) => Effect.sync(() => client.disconnect())
        )
        yield* Effect.promise(() => control.call("CLIENT", "PAUSE", "3000", "ALL"))
        const calls: ReadonlyArray<readonly [string, Effect.Effect<unknown, QueueError>]> = [
          ["push", port.push(job(1))],
          ["schedule", port.schedule(job(2), Date.now() + 60_000)],
          ["remove", port.remove("some-jid")],
          ["kill", port.kill(job(3), "reason")],
          ["exists", port.exists([job(4)])]
        ]
        for (const [operation, call] of calls) {
          const error = yield* Effect.flip(call)
          assert.strictEqual(error._tag, "QueueError", operation)
          assert.include(error.reason, "did not answer within 200 ms", operation)
        }
      }), { timeout: 30_000 })
  })
})

