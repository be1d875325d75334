/**
 * A worker started while Redis is down (issue 18, item 13): it says "connecting", builds `Redis.layer` (whose
 * first connect is retried within the timeout), takes a lock and says "locked".
 */
import * as Effect from "effect/Effect"
import { Lock, Options, Redis } from "../../src/index.js"

const definition = Options.unsafeMake({ lock: "until_executed", lockPrefix: `late-${process.pid}` })

process.stdout.write("connecting\n")
Effect.runPromise(
  Effect.gen(function*() {
    const digest = yield* Lock.digest(definition, { worker: "W", queue: "q", args: [1] })
    yield* Lock.lock(definition, { digest, jid: "j1" })
    yield* Effect.log("locked")
  }).pipe(Effect.provide(Redis.layer({ url: process.env.REDIS_URL!, timeout: "20 seconds" })))
).catch((error) => {
  process.exitCode = 1
  process.stderr.write(`${String(error)}\n`)
})
