/**
 * The README's Effect example: `REDIS_URL=redis://127.0.0.1:6379 npx tsx examples/quickstart.ts`.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { MemoryQueue, Redis, UniqueJob } from "effect-unique-jobs"

// Define a worker's uniqueness once; bad options fail here, naming the field.
// `args` types enqueue and perform; what the queue delivers is decoded, never performed on bad data.
const RebuildReport = UniqueJob.unsafeMake({
  worker: "RebuildReportJob",
  args: Schema.Tuple([Schema.Number]),
  lock: "until_and_while_executing",
  onConflict: { client: "log", server: "reschedule" }
})

const rebuild = (reportId: number) => Effect.log(`rebuilding report ${reportId}`)

const program = Effect.gen(function*() {
  const queue = yield* MemoryQueue.MemoryQueue
  // Worker side: Performed | Skipped | Rescheduled | Rejected
  yield* queue.work((job) => RebuildReport.perform(job, ([reportId]) => rebuild(reportId)), { concurrency: 4 })
  // Producer side: Enqueued | Skipped | Replaced | Rejected
  const first = yield* RebuildReport.enqueue([42]) // Enqueued
  const again = yield* RebuildReport.enqueue([42]) // Skipped: 42 is already queued
  yield* Effect.log(`${first._tag}, then ${again._tag}`)
  yield* queue.awaitIdle
})

Effect.runPromise(
  program.pipe(
    Effect.scoped,
    Effect.provide(MemoryQueue.layer()),
    Effect.provide(Redis.layerConfig()) // REDIS_URL
  )
).catch((error) => {
  process.exitCode = 1
  process.stderr.write(`${String(error)}\n`)
})
