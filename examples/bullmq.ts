/**
 * The manual's BullMQ page (docs/bullmq.md): the Promise face (`UniqueQueue`) and the Effect face (`BullMQ`) on
 * real BullMQ queues.
 * `REDIS_URL=redis://127.0.0.1:6379 npx tsx examples/bullmq.ts` runs it; BullMQ and the locks share that Redis.
 */
import { once } from "node:events"
import { Queue, Worker } from "bullmq"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import { Redis as IORedis } from "ioredis"
import { Redis, UniqueJob } from "effect-unique-jobs"
import { BullMQ, UniqueQueue } from "effect-unique-jobs/bullmq"

const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379"
// BullMQ's connection (workers block on it: no retry limit). UniqueQueue keeps its locks on the same Redis.
const connection = new IORedis(url, { maxRetriesPerRequest: null })

const rebuild = async (account: number) => console.log(`rebuilding report ${account}`)

// The Promise face: wrap the queue once, add through the wrapper, give the Worker its processor.
const promiseFace = async () => {
  const queue = new Queue("reports", { connection })
  const unique = UniqueQueue.make<{ account: number }>(queue, { lock: "until_executed", lockTtl: "1 hour" })
  const first = await unique.add("rebuild", { account: 42 }) // Enqueued
  const again = await unique.add("rebuild", { account: 42 }) // Skipped: 42 is already queued
  console.log(`${first._tag}, then ${again._tag}`)
  const worker = new Worker(queue.name, unique.processor((job) => rebuild(job.data.account)), { connection })
  await once(worker, "completed")
  await worker.close()
  await unique.close() // the lock store's connection, the dead-letter queue, then the queue
}

// The Effect face: a UniqueJob on the BullMQ queue's name. `enqueue` adds to it, `BullMQ.worker` runs it.
const Charge = UniqueJob.unsafeMake({ worker: "charge", queue: "payments", lock: "until_executed" })

const charge = (customer: number) => Effect.log(`charging customer ${customer}`)

const effectFace = Effect.gen(function*() {
  const first = yield* Charge.enqueue([{ customer: 7 }]) // Enqueued
  const again = yield* Charge.enqueue([{ customer: 7 }]) // Skipped: customer 7 is already queued
  yield* Effect.log(`${first._tag}, then ${again._tag}`)
  const charged = yield* Deferred.make<void>()
  // Closed with the scope, once the job it runs has finished.
  yield* BullMQ.worker(
    Charge,
    (job) => Effect.andThen(charge(job.data.customer), Deferred.succeed(charged, undefined)),
    { connection }
  )
  yield* Deferred.await(charged)
})

const main = async () => {
  await promiseFace()
  const payments = new Queue(Charge.queue, { connection })
  await Effect.runPromise(
    effectFace.pipe(
      Effect.scoped,
      Effect.provide(BullMQ.layer(payments)), // the JobQueue port: enqueue adds to `payments`
      Effect.provide(Redis.layer({ url }))
    )
  )
  await payments.close()
}

main()
  .catch((error) => {
    process.exitCode = 1
    process.stderr.write(`${String(error)}\n`)
  })
  .finally(() => connection.quit())
