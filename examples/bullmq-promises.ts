/**
 * The README's first example: BullMQ with Promises (`UniqueQueue`). With a Redis running,
 * `REDIS_URL=redis://127.0.0.1:6379 npx tsx examples/bullmq-promises.ts` runs it; BullMQ and the locks share that Redis.
 */
import { once } from "node:events"
import { Queue, Worker } from "bullmq"
import { Redis as IORedis } from "ioredis"
import { UniqueQueue } from "effect-unique-jobs/bullmq"

const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379"
// BullMQ's connection (workers block on it: no retry limit). UniqueQueue keeps its locks on the same Redis.
const connection = new IORedis(url, { maxRetriesPerRequest: null })

const rebuild = async (account: number) => console.log(`rebuilding report ${account}`)

const main = async () => {
  const queue = new Queue("reports", { connection })
  // Wrap the queue once; bad options throw here, naming the field.
  const unique = UniqueQueue.make<{ account: number }>(queue, { lock: "until_executed", lockTtl: "1 hour" })
  // Add through the wrapper: Enqueued | Skipped | Replaced | Rejected
  const first = await unique.add("rebuild", { account: 42 }) // Enqueued
  const again = await unique.add("rebuild", { account: 42 }) // Skipped: 42 is already queued
  console.log(`${first._tag}, then ${again._tag}`)
  // Give the Worker the wrapped processor: it releases the lock once the job succeeds.
  const worker = new Worker(queue.name, unique.processor((job) => rebuild(job.data.account)), { connection })
  await once(worker, "completed")
  await worker.close()
  await unique.close() // the lock store's connection, the dead-letter queue, then the queue
}

main()
  .catch((error) => {
    process.exitCode = 1
    process.stderr.write(`${String(error)}\n`)
  })
  .finally(() => connection.quit())
