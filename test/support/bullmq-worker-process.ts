/**
 * A BullMQ worker in a process of its own, for the killed-worker test: it takes jobs of `<queue>` through a
 * `UniqueQueue` (while_executing, the given lease), says `STARTED <job id>` on stdout when a run begins, and never
 * finishes it: the test kills this process mid-job. Started as
 * `node --import tsx test/support/bullmq-worker-process.ts <redis url> <queue> <lock prefix> <lease ms> <bullmq lock ms>`.
 */
import { Queue, Worker } from "bullmq"
import * as UniqueQueue from "../../src/adapters/UniqueQueue.js"

const [url, name, lockPrefix, lease, lockDuration] = process.argv.slice(2) as [string, string, string, string, string]
const parsed = new URL(url)
const connection = { host: parsed.hostname, port: Number(parsed.port) }
const queue = new Queue(name, { connection })
const unique = UniqueQueue.make<{ readonly n: number }>(queue, {
  lock: "while_executing",
  lockLease: Number(lease),
  lockPrefix,
  redis: { url }
})
const worker = new Worker(
  name,
  unique.processor(async (job) => {
    process.stdout.write(`STARTED ${job.id}\n`)
    await new Promise(() => {})
  }),
  // The stalled check runs once per interval across all workers (a key with that TTL): keep it short here too.
  { connection, lockDuration: Number(lockDuration), stalledInterval: 300 }
)
worker.on("error", () => {})
