/**
 * Conflict strategies' side effects that outcomes do not show: what `log` writes, and at which level.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as References from "effect/References"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Lock from "../src/Lock.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"

interface Entry {
  /** The level as Effect 3 labelled it ("DEBUG"): Effect 4's levels are the strings "Debug", "Info", … */
  readonly level: string
  readonly text: string
}

/** A logger that keeps every entry it is given, in place of the default (stdout) one. */
const capture = () => {
  const entries: Array<Entry> = []
  const logger = Logger.make(({ logLevel, message }) => {
    entries.push({ level: logLevel.toUpperCase(), text: (Array.isArray(message) ? message : [message]).join(" ") })
  })
  return { entries, layer: Logger.layer([logger]) }
}

/** One duplicate enqueue and one duplicate execution, both under `log`. */
const duplicates = Effect.gen(function*() {
  const job = UniqueJob.unsafeMake({ worker: "SyncJob", lock: "until_and_while_executing", onConflict: "log" })
  assert.strictEqual((yield* job.enqueue([1]))._tag, "Enqueued")
  assert.strictEqual((yield* job.enqueue([1]))._tag, "Skipped")
  const running = job.job([2])
  const digest = yield* job.digest([2])
  yield* Lock.lock(job.definition, { digest, jid: "elsewhere", phase: "run" })
  assert.strictEqual((yield* job.server(running, Effect.void))._tag, "Skipped")
}).pipe(Effect.provide(Layer.merge(MemoryQueue.layer(), Redis.layerMemory)))

describe("Strategy", () => {
  it.effect("log writes each conflict at Debug, so the default Info level keeps duplicates quiet", () =>
    Effect.gen(function*() {
      const all = capture()
      yield* duplicates.pipe(Effect.provide(all.layer), Effect.provideService(References.MinimumLogLevel, "All"))
      const conflicts = all.entries.filter((e) => e.text.includes("conflict"))
      assert.deepStrictEqual(conflicts.map((e) => [e.level, e.text.split(":")[0]]), [
        ["DEBUG", "client conflict"],
        ["DEBUG", "server conflict"]
      ])
      assert.include(conflicts[1]!.text, "is a duplicate of elsewhere")

      const atDefault = capture()
      yield* duplicates.pipe(Effect.provide(atDefault.layer), Effect.provideService(References.MinimumLogLevel, "Info"))
      assert.deepStrictEqual(atDefault.entries, [])
    }))
})
