/**
 * A BullMQ Worker in a process of its own for the pause-then-kill run (test/release.faults.test.ts): it takes jobs of
 * `<queue>` through a `UniqueQueue` (until_and_while_executing, its locks on a Redis of their own) and records every
 * perform on the queue's Redis (`RPUSH <queue>:performed`, JSON `{ jid, n, start, end }`), so the test counts jobs
 * completed unrun and performs of one digest at once. Says `READY` on stdout once the worker is; ends on SIGTERM, or
 * by itself after five minutes. Started as
 * `node --import tsx test/support/release-faults-worker.ts <queue url> <lock url> <queue> <lock prefix> <concurrency>`.
 */
import { Queue, Worker } from "bullmq"
import { Redis as IORedis } from "ioredis"
import * as UniqueQueue from "../../src/adapters/UniqueQueue.js"

const [queueUrl, lockUrl, name, lockPrefix, concurrency] = process.argv.slice(2) as [string, string, string, string, string]
const parsed = new URL(queueUrl)
const connection = { host: parsed.hostname, port: Number(parsed.port) }
const queue = new Queue(name, { connection })
const records = new IORedis(connection.port, connection.host, { maxRetriesPerRequest: null })
records.on("error", () => {})
const unique = UniqueQueue.make<{ readonly n: number }>(queue, {
  lock: "until_and_while_executing",
  lockLease: "30 seconds",
  lockPrefix,
  redis: { url: lockUrl },
  defaults: {},
  history: false
})
const worker = new Worker(
  name,
  unique.processor(async (job) => {
    const start = Date.now()
    await new Promise((resolve) => setTimeout(resolve, 5 + Math.floor(Math.random() * 15)))
    await records.rpush(`${name}:performed`, JSON.stringify({ jid: job.id, n: job.data.n, start, end: Date.now() }))
    return "ran"
  }),
  { connection, concurrency: Number(concurrency) }
)
worker.on("error", () => {})

const stop = async () => {
  await worker.close(true).catch(() => undefined)
  await unique.close({ timeout: 5_000 }).catch(() => undefined)
  await queue.close().catch(() => undefined)
  records.disconnect()
  process.exit(0)
}
process.on("SIGTERM", () => void stop())
setTimeout(() => void stop(), 300_000).unref()
worker.waitUntilReady().then(() => process.stdout.write("READY\n"), () => process.exit(1))
