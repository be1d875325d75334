/**
 * What the layout tests share: the command run in this process, and an app's 30 until_executed locks.
 */
import * as Effect from "effect/Effect"
import { assert } from "vitest"
import * as MemoryQueue from "../../src/adapters/MemoryQueue.js"
import * as Cli from "../../src/Cli.js"
import { JobQueue } from "../../src/JobQueue.js"
import * as Redis from "../../src/Redis.js"
import * as UniqueJob from "../../src/UniqueJob.js"

/** Runs `unique-jobs args…` in this process, its stdout captured: the command's own code, with no build and no spawn. */
export const runCli = (args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const lines: Array<string> = []
    const log = console.log
    console.log = (...parts: Array<unknown>) => {
      lines.push(parts.map(String).join(" "))
    }
    const exit = yield* Effect.exit(Cli.run(["node", "unique-jobs", ...args]).pipe(Effect.provide(Cli.platform))).pipe(
      Effect.ensuring(Effect.sync(() => {
        console.log = log
      }))
    )
    return { exit, stdout: lines.join("\n") }
  })

/** 30 until_executed locks under `prefix`, taken by a store configured as a process on `shards` would be. */
export const thirtyLocks = (store: Redis.Store, prefix: string) =>
  Effect.gen(function*() {
    const unique = yield* UniqueJob.make({ worker: "Report", lock: "until_executed", lockPrefix: prefix })
    const queue = yield* MemoryQueue.make()
    for (let n = 0; n < 30; n++) {
      const added = yield* unique.enqueue([n]).pipe(
        Effect.provideService(Redis.RedisService, store),
        Effect.provideService(JobQueue, queue)
      )
      assert.strictEqual(added._tag, "Enqueued")
    }
  })

export { closedPort } from "./cli.js"
