/**
 * A perform held open by the test: forks `server(job)` with a perform that runs until `finish`, and returns once the
 * perform runs, so the lock is held from then on, whatever the machine's speed.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Job from "../../src/Job.js"

export const gated = <A, R>(
  server: (job: Job.Job, perform: Effect.Effect<string>) => Effect.Effect<A, unknown, R>,
  job: Job.Job
) =>
  Effect.gen(function*() {
    const started = yield* Deferred.make<void>()
    const gate = yield* Deferred.make<void>()
    const fiber = yield* Effect.forkChild(
      server(job, Effect.andThen(Deferred.succeed(started, undefined), Effect.as(Deferred.await(gate), job.jid)))
    )
    yield* Deferred.await(started)
    return { fiber, finish: Effect.andThen(Deferred.succeed(gate, undefined), Fiber.join(fiber)) }
  })
