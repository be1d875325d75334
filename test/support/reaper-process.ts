/**
 * A reaper in a process of its own, for the one-runner-at-a-time test: one slow pass (each step waits `stepMs`), saying
 * `STEP <n>` on stdout after each step and `DONE <json Pass>` at the end. Started as
 * `node --import tsx test/support/reaper-process.ts <options json> <prefix> <lease ms> <batch> <step ms>`, the options
 * `TestRedis.options`: `{ url }` for one Redis, `{ nodes }` for a cluster.
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as References from "effect/References"
import * as Reaper from "../../src/Reaper.js"
import * as Redis from "../../src/Redis.js"

const [options, prefix, lease, batch, stepMs] = process.argv.slice(2)
const where = JSON.parse(options!) as Redis.Options | Redis.ClusterOptions

Effect.gen(function*() {
  const runner = yield* Reaper.make({ prefix, lease: Number(lease), batch: Number(batch) })
  const pass = yield* runner.pass((sofar) => Effect.andThen(Console.log(`STEP ${sofar.steps}`), Effect.sleep(Number(stepMs))))
  yield* Console.log(`DONE ${JSON.stringify(pass)}`)
}).pipe(
  Effect.provide("nodes" in where ? Redis.layerCluster(where) : Redis.layer(where)),
  Effect.provideService(References.MinimumLogLevel, "None"),
  Effect.runPromise
).then(() => process.exit(0), (error: unknown) => {
  process.stderr.write(`${String(error)}\n`)
  process.exit(1)
})
