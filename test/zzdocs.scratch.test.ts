import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/TestClock"
import { MemoryQueue, Redis, UniqueJob } from "../src/index.js"

const RebuildReport = UniqueJob.unsafeMake({ worker: "RebuildReportJob", lock: "until_executed" })
const Hourly = UniqueJob.unsafeMake({ worker: "HourlyDigestJob", lock: "until_expired", lockTtl: "1 hour" })

const TestLive = Layer.merge(MemoryQueue.layer(), Redis.layerMemory)

describe("uniqueness", () => {
  it.scoped("a duplicate enqueue is skipped while the first job waits", () =>
    Effect.gen(function*() {
      const first = yield* RebuildReport.enqueue([42])
      const again = yield* RebuildReport.enqueue([42])
      assert.strictEqual(first._tag, "Enqueued")
      assert.strictEqual(again._tag, "Skipped")
    }).pipe(Effect.provide(TestLive)))

  it.scoped("an until_expired lock ends with its TTL, on the test clock", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* Hourly.enqueue(["team-1"]))._tag, "Enqueued")
      assert.strictEqual((yield* Hourly.enqueue(["team-1"]))._tag, "Skipped")
      yield* TestClock.adjust("1 hour")
      assert.strictEqual((yield* Hourly.enqueue(["team-1"]))._tag, "Enqueued")
    }).pipe(Effect.provide(TestLive)))
})
