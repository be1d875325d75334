/**
 * Property (issue 18, item 6): a worker whose options differ from the producer's. Producer and worker each take their
 * lockPrefix from their own defaults and may differ in uniqueAcrossQueues; the job reaches the worker with or without
 * the digest the producer stamped. Whatever the mix: the job is Performed; the worker's release finds nothing exactly
 * when the two digests differ and the job did not carry its own; exactly then the producer's lock stays, one warning
 * names the likely cause and `unique_jobs_release_missed_total` counts one; otherwise nothing is left, said or counted.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import * as Logger from "effect/Logger"
import * as Metric from "effect/Metric"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Defaults from "../src/Defaults.js"
import type * as Job from "../src/Job.js"
import * as Lock from "../src/Lock.js"
import * as Metrics from "../src/Metrics.js"
import * as Middleware from "../src/Middleware.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as Model from "./support/model.js"
import { uniquePrefix } from "./support/redis.js"

const side = fc.record({ prefix: fc.constantFrom("a", "b"), acrossQueues: fc.boolean() })

describe("release properties: producer and worker options", () => {
  it.effect("the release misses exactly when the digests differ and the job carries none: then it warns, counts", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(
          fc.constantFrom("until_executing" as const, "until_executed" as const),
          side,
          side,
          fc.boolean(),
          (lock, producer, worker, carried) =>
            Effect.runPromise(Effect.gen(function*() {
              const base = uniquePrefix("rel")
              const make = (s: typeof producer) => LockOptions.unsafeMake({ lock, uniqueAcrossQueues: s.acrossQueues })
              const defaults = (s: typeof producer) => Defaults.layer({ lockPrefix: `${base}-${s.prefix}` })
              const job: Job.Job = { worker: "W", queue: "q", args: [1], jid: "j1" }
              const enqueued = yield* Middleware.client(make(producer), job, Effect.succeed).pipe(
                Effect.provide(defaults(producer))
              )
              assert.strictEqual(enqueued._tag, "Enqueued")
              const resolved = (s: typeof producer) =>
                Effect.map(
                  Effect.provide(Defaults.Defaults, defaults(s)),
                  (settings) => Defaults.resolve(make(s), settings)
                )
              const workerDefinition = yield* resolved(worker)
              const workerDigest = yield* Lock.digestWith(workerDefinition, job)
              const misses = !carried && workerDigest !== enqueued.digest
              const counter = Metrics.releaseMissed.of(lock, "queue")
              const before = (yield* Metric.value(counter)).count
              const warnings: Array<string> = []
              const capture = Logger.make(({ logLevel, message }) => {
                if (logLevel._tag === "Warning") warnings.push(String(message))
              })
              const received: Job.Job = { ...job, lockDigest: carried ? enqueued.job.lockDigest : undefined }
              const performed = yield* Middleware.server(make(worker), received, Effect.void).pipe(
                Effect.provide(defaults(worker)),
                Effect.provide(Logger.replace(Logger.defaultLogger, capture))
              )
              assert.strictEqual(performed._tag, "Performed")
              assert.strictEqual((yield* Metric.value(counter)).count - before, misses ? 1 : 0)
              assert.strictEqual(warnings.length, misses ? 1 : 0, JSON.stringify(warnings))
              if (misses) assert.include(warnings[0], "lockPrefix")
              const redis = yield* Redis.RedisService
              const left = yield* redis.holders(
                Lock.keyOf(yield* resolved(producer), enqueued.digest, "queue")
              )
              assert.strictEqual(left.length, misses ? 1 : 0)
            }).pipe(Effect.provide(MemoryQueue.layer()), Effect.provide(Redis.layerMemory)))
        ),
        { numRuns: Model.runs(80) }
      )
    ), 120_000)
})
