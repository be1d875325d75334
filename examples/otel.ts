/**
 * The lock steps' spans in OpenTelemetry: @effect/opentelemetry's NodeSdk with a console exporter. Each Redis call
 * is a client span (`db.system.name: "redis"`, the script as `db.stored_procedure.name`, the digest and lock type),
 * and the refused duplicate's span links to the span of the hold that refused it. Run with
 * `REDIS_URL=redis://127.0.0.1:6379 npx tsx examples/otel.ts`; a test runs it.
 */
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import { ConsoleSpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import * as Effect from "effect/Effect"
import { Lock, Options, Redis } from "effect-unique-jobs"

const Tracing = NodeSdk.layer(() => ({
  resource: { serviceName: "unique-jobs-example" },
  spanProcessor: new SimpleSpanProcessor(new ConsoleSpanExporter())
}))

const Report = Options.unsafeMake({ lock: "until_executed", lockInfo: true, lockTtl: "1 minute" })

const program = Effect.gen(function*() {
  const digest = yield* Lock.digest(Report, { worker: "ReportJob", queue: "default", args: [42] })
  yield* Lock.lock(Report, { digest, jid: "first" }).pipe(Effect.withSpan("enqueue first"))
  yield* Lock.lock(Report, { digest, jid: "second" }).pipe(
    Effect.catchTag("LockConflict", (refused) => Effect.log(`second: refused, held by ${refused.holders.join(", ")}`)),
    Effect.withSpan("enqueue second")
  )
  yield* Lock.unlock(Report, { digest, jid: "first" })
})

Effect.runPromise(program.pipe(Effect.provide(Tracing), Effect.provide(Redis.layerConfig()))).catch((error) => {
  process.exitCode = 1
  process.stderr.write(`${String(error)}\n`)
})
