/**
 * A producer and worker in a process of its own, for the shutdown tests: adds one until_executed job through a
 * `UniqueQueue`, and once the job runs closes the UniqueQueue and the Worker in the order given (`unique-first` or
 * `worker-first`), then prints `CLOSED <PTTL of the lock>` and returns from main: the process must then exit by
 * itself. Started as `node --import tsx test/support/uniquequeue-close-process.ts <redis url> <queue> <prefix> <order>`.
 */
import { Queue, Worker } from "bullmq"
import { Redis as IORedis } from "ioredis"
import * as UniqueQueue from "../../src/adapters/UniqueQueue.js"

const [url, name, lockPrefix, order] = process.argv.slice(2) as [string, string, string, string]
const parsed = new URL(url)
const connection = { host: parsed.hostname, port: Number(parsed.port) }
const queue = new Queue(name, { connection })
const unique = UniqueQueue.make<{ readonly n: number }>(queue, {
  lock: "until_executed",
  lockPrefix,
  redis: { url },
  defaults: {}
})
let started!: () => void
const running = new Promise<void>((resolve) => (started = resolve))
const worker = new Worker(
  name,
  unique.processor(async () => {
    started()
    await new Promise((resolve) => setTimeout(resolve, 300))
    return "done"
  }),
  { connection }
)
worker.on("error", () => {})
const added = await unique.add("Work", { n: 1 })
await running
if (order === "unique-first") {
  await unique.close()
  await worker.close()
} else {
  await worker.close()
  await unique.close()
}
const raw = new IORedis(url)
const pttl = await raw.pttl(`${added.digest}:LOCKED`)
raw.disconnect()
process.stdout.write(`CLOSED ${pttl}\n`)
