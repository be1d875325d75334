/**
 * What the foundation tests share: counting what a call costs in Redis (INFO commandstats), holding many run locks at
 * once, and a custom server strategy that keeps or drops the queue lock.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Ref from "effect/Ref"
import type { LockConflict, LockLost } from "../../src/Errors.js"
import { JobQueue } from "../../src/JobQueue.js"
import * as Lock from "../../src/Lock.js"
import type * as LockOptions from "../../src/Options.js"
import type * as Redis from "../../src/Redis.js"
import * as Strategy from "../../src/Strategy.js"
import * as RedisTest from "./redis.js"

/** Top-level script calls Redis has run so far (INFO commandstats: EVALSHA and EVAL). */
export const scriptCalls = Effect.flatMap(RedisTest.TestRedis, ({ raw }) => Effect.promise(() => scriptCallsOn(raw)))

/** EVALSHA and EVAL calls the Redis behind `raw` has run so far. */
export const scriptCallsOn = async (raw: { readonly info: (section: string) => Promise<string> }): Promise<number> => {
  const info = await raw.info("commandstats")
  let calls = 0
  for (const match of info.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+)/gm)) calls += Number(match[2])
  return calls
}

/** How many script calls `self` made. */
export const counted = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const before = yield* scriptCalls
    const value = yield* self
    return { value, calls: (yield* scriptCalls) - before }
  })

const realSleep = (ms: number) => Effect.promise(() => new Promise((resolve) => setTimeout(resolve, ms)))

/**
 * The script calls since `before`, once at least `atLeast` have been made (or 30 s of real time have passed), and a
 * moment more: calls made beyond them were sent together and are seen too.
 */
export const callsSince = (before: number, atLeast: number) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 30_000
    while ((yield* scriptCalls) - before < atLeast && Date.now() <= deadline) yield* realSleep(10)
    yield* realSleep(50)
    return (yield* scriptCalls) - before
  })

/**
 * `holds` run locks (digests d0…, jids j0…), each held until `release` is completed; answers once all are held, with
 * the holders' fibers.
 */
export const holdRunLocks = (
  definition: LockOptions.Definition,
  holds: number,
  release: Deferred.Deferred<void>
): Effect.Effect<ReadonlyArray<Fiber.Fiber<void, LockConflict | LockLost | Redis.RedisError>>, never, Redis.RedisService> =>
  Effect.gen(function*() {
    const started = yield* Ref.make(0)
    const allStarted = yield* Deferred.make<void>()
    const fibers = yield* Effect.forEach(Array.from({ length: holds }, (_, i) => i), (i) =>
      Effect.forkChild(
        Lock.withLock(definition, { digest: `${definition.lockPrefix}:d${i}`, jid: `j${i}` })(
          Effect.andThen(
            Effect.flatMap(Ref.updateAndGet(started, (n) => n + 1), (n) =>
              n === holds ? Deferred.succeed(allStarted, undefined) : Effect.void),
            Deferred.await(release)
          )
        )
      ))
    yield* Deferred.await(allStarted)
    return fibers
  })

/** A server strategy that puts the duplicate back (keeping its queue lock) or drops it (giving it up), as declared. */
export const customServer = (keepsQueueLock: boolean): Strategy.ServerStrategy =>
  Strategy.makeServer({ keepsQueueLock }, (c) =>
    keepsQueueLock
      ? Effect.as(
        Effect.flatMap(JobQueue, (q) => q.schedule({ ...c.job, at: 1 }, 1)),
        Strategy.ServerOutcome.Rescheduled({ digest: c.conflict.digest, job: c.job, holders: c.conflict.holders, at: 1 })
      )
      : Effect.succeed(Strategy.skipped(c)))
