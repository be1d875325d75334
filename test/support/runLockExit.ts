/**
 * A program that takes one run lock with a 60 s lease, performs, prints its last line and ends: it must exit by itself
 * right after (issue 18, item 12). A lease keeper that kept the process alive would hold it for up to lease / 3 = 20 s.
 */
import * as Effect from "effect/Effect"
import { MemoryQueue, Redis, UniqueJob } from "../../src/index.js"

const Job = UniqueJob.unsafeMake({ worker: "ExitProbeJob", lock: "while_executing", lockLease: "60 seconds" })

Effect.runPromise(
  Effect.gen(function*() {
    const outcome = yield* Job.server(Job.job([1]), Effect.sleep("100 millis"))
    yield* Effect.log(`run lock: ${outcome._tag}`)
  }).pipe(Effect.provide(MemoryQueue.layer()), Effect.provide(Redis.layerConfig()))
).catch((error) => {
  process.exitCode = 1
  process.stderr.write(`${String(error)}\n`)
})
