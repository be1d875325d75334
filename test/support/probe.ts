/**
 * The overlap probe of issue 18, item 2: a `while_executing` job runs (its own store and lease keeper) while a second
 * worker (another connection, another keeper) retries the same job every 50 ms, and an operator acts on its lock.
 * It records the order of events (each copy's start and end, the operator's action), never how long anything took.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Lock from "../../src/Lock.js"
import * as LockOptions from "../../src/Options.js"
import * as Redis from "../../src/Redis.js"
import * as RedisTest from "./redis.js"

/** What happened, in order: each copy's start and end, and the operator's action. */
type Event = "first started" | "first ended" | "second started" | "second ended" | "operator"

/**
 * Runs the probe: `operate` is the operator's action on the running job's lock (its digest and jid given); answers
 * the events in order, the first copy's exit, the most copies seen running at once, and what `operate` answered.
 */
export const probe = <A, E>(
  name: string,
  operate: (digest: string, jid: string, prefix: string) => Effect.Effect<A, E, Redis.RedisService>
) =>
  Effect.gen(function*() {
    const prefix = RedisTest.uniquePrefix(name)
    const definition = LockOptions.unsafeMake({ lock: "while_executing", lockPrefix: prefix, lockLease: 1500 })
    const target = { digest: `${prefix}:job`, jid: "jid-1" }
    const events: Array<Event> = []
    let running = 0
    let most = 0
    const perform = (who: "first" | "second", body: Effect.Effect<void>) =>
      Effect.suspend(() => {
        running++
        most = Math.max(most, running)
        events.push(`${who} started`)
        return body
      }).pipe(
        Effect.ensuring(Effect.sync(() => {
          running--
          events.push(`${who} ended`)
        }))
      )
    const started = yield* Deferred.make<void>()
    // The first copy runs until it is told it lost the lock.
    const first = yield* Effect.forkChild(
      Lock.withLock(definition, target)(perform("first", Effect.andThen(Deferred.succeed(started, undefined), Effect.never)))
    )
    yield* Deferred.await(started)
    // The second worker: its own connection and lease keeper, retrying the same job every 50 ms until it runs.
    const { source } = yield* RedisTest.TestRedis
    const other = Redis.layer({ url: source.url })
    let attempts = 0
    const second = yield* Effect.forkChild(
      Effect.suspend(() => {
        attempts++
        return Lock.withLock(definition, target)(perform("second", Effect.void))
      }).pipe(
        Effect.catchTag("LockConflict", (conflict) => Effect.andThen(Effect.sleep(50), Effect.fail(conflict))),
        Effect.retry({ while: (error) => error._tag === "LockConflict" }),
        Effect.provide(Layer.fresh(other))
      )
    )
    // Let it be refused a few times first: the first copy holds the lock.
    while (attempts < 3) yield* Effect.sleep(20)
    events.push("operator")
    const answer = yield* operate(target.digest, target.jid, prefix)
    const firstExit = yield* Fiber.await(first)
    yield* Fiber.join(second)
    return { events, firstExit, most, answer, prefix }
  }).pipe(
    // Real time whatever the suite's services: the leases and the 50 ms retries run on Redis' clock.
    Effect.provideService(Clock.Clock, Clock.Clock.defaultValue())
  )

/** Whether the run ended with a `LockLost` failure. */
export const isLockLost = (exit: Exit.Exit<unknown, unknown>): boolean =>
  Exit.isFailure(exit) && exit.cause.reasons.length === 1 && Cause.isFailReason(exit.cause.reasons[0]!) &&
  (exit.cause.reasons[0].error as { _tag?: string })._tag === "LockLost"

/** The events of a run with no overlap: the first copy ends before the second starts. */
export const inTurn = ["first started", "operator", "first ended", "second started", "second ended"]
