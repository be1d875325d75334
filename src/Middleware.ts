/**
 * The client and server wrappers around any queue's effects. `client` wraps an enqueue, `server` wraps a perform;
 * each lock phase is one Redis round trip, and each lock type takes and releases its locks at the moments the
 * spec gives (see the README's lock-type table).
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Schedule from "effect/Schedule"
import type * as Digest from "./Digest.js"
import type { Job } from "./Job.js"
import type { JobQueue, QueueError } from "./JobQueue.js"
import * as Lock from "./Lock.js"
import * as Metrics from "./Metrics.js"
import type { RedisError, RedisService } from "./Redis.js"
import * as Strategy from "./Strategy.js"

const annotations = { package: "effect-unique-jobs", module: "Middleware" }

/** The digest computed at enqueue travels in the job; only a job that never met the client computes it here. */
const digestOf = (definition: Lock.Definition, job: Job): Effect.Effect<string, Digest.DigestError> =>
  job.lockDigest !== undefined ? Effect.succeed(job.lockDigest) : Lock.digest(definition, job)

const infoOf = (job: Job) => ({ worker: job.worker, queue: job.queue, args: job.args })

const spanAttributes = (definition: Lock.Definition, job: Job) => ({
  "messaging.destination.name": job.queue,
  "messaging.message.id": job.jid,
  "unique_jobs.worker": job.worker,
  "unique_jobs.lock_type": definition.lock
})

/**
 * A perform: an effect, or a function of the lock it runs under (`running.fence` is the run lock's fencing token).
 *
 * @since 0.1.0
 * @category models
 */
export type Perform<A, E, R> = Effect.Effect<A, E, R> | ((running: Lock.Running) => Effect.Effect<A, E, R>)

/**
 * The errors of the client wrapper, beside the enqueue's own.
 *
 * @since 0.1.0
 * @category models
 */
export type ClientError = Strategy.DuplicateJob | Digest.DigestError | RedisError | QueueError

/**
 * The errors of the server wrapper, beside the perform's own.
 *
 * @since 0.1.0
 * @category models
 */
export type ServerError = Strategy.ExecutionConflict | Lock.LockLost | Digest.DigestError | RedisError | QueueError

/**
 * Wraps an enqueue. Computes the digest once and stamps it into `job.lockDigest`; for types that lock at enqueue,
 * takes the queue lock (its TTL grows by a scheduled job's delay) and runs `enqueue` only when it got it. A lock
 * whose enqueue fails or is interrupted is released. A conflict goes to the client strategy.
 *
 * @since 0.1.0
 * @category middleware
 */
export const client = (definition: Lock.Definition) =>
<A, E, R>(
  job: Job,
  enqueue: (job: Job) => Effect.Effect<A, E, R>
): Effect.Effect<Strategy.ClientOutcome<A>, E | ClientError, R | RedisService | JobQueue> =>
  Effect.gen(function*() {
    const digest = yield* digestOf(definition, job)
    const stamped: Job = { ...job, lockDigest: digest }
    if (!Lock.phases(definition.lock).queue) {
      return { _tag: "Enqueued", digest, job: stamped, value: yield* enqueue(stamped) } as const
    }
    // Only a scheduled job needs the time: its TTL counts from when it runs (in whole ms, as the scripts take them).
    const delay = job.at === undefined ? 0 : Math.max(0, Math.ceil(job.at - (yield* Clock.currentTimeMillis)))
    const target: Lock.Target = {
      digest,
      jid: job.jid,
      phase: "queue",
      delay,
      info: infoOf(job)
    }
    // Lock, then enqueue; a lock whose enqueue fails or is interrupted is released. A conflict comes back as a
    // value, so it is never confused with a failure of the user's enqueue.
    const lockAndEnqueue = Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(
        Effect.catchTag(Lock.lock(definition, target), "LockConflict", Effect.succeed),
        (acquired): Effect.Effect<Lock.LockConflict | { readonly value: A }, E | RedisError, R | RedisService> =>
          acquired instanceof Lock.LockConflict
            ? Effect.succeed(acquired)
            : restore(enqueue(stamped)).pipe(
              Effect.onError(() => releaseQueueLock(definition, target)),
              Effect.map((value) => ({ value }))
            )
      )
    )
    const first = yield* lockAndEnqueue
    if (!(first instanceof Lock.LockConflict)) {
      return { _tag: "Enqueued", digest, job: stamped, value: first.value } as const
    }
    const decision = yield* Strategy.clientStrategy(definition.onConflict.client)({
      conflict: first,
      job: stamped,
      definition
    })
    switch (decision._tag) {
      case "Skip":
        return { _tag: "Skipped", digest, job: stamped, holders: first.holders } as const
      case "Reject":
        return { _tag: "Rejected", digest, job: stamped, holders: first.holders, reason: decision.reason } as const
      case "Retry": {
        yield* Effect.forEach(decision.replaced, (jid) => Lock.unlock(definition, { ...target, jid }), { discard: true })
        const again = yield* lockAndEnqueue
        // Another duplicate took the freed place first: this one is the duplicate now.
        return again instanceof Lock.LockConflict
          ? { _tag: "Skipped", digest, job: stamped, holders: again.holders } as const
          : { _tag: "Replaced", digest, job: stamped, replaced: decision.replaced, value: again.value } as const
      }
    }
  }).pipe(
    Effect.withSpan("UniqueJobs.client", {
      kind: "producer",
      attributes: spanAttributes(definition, job),
      captureStackTrace: false
    })
  )

const afterConflict = <A>(
  definition: Lock.Definition,
  job: Job,
  digest: string,
  conflict: Lock.LockConflict
) =>
  Effect.map(
    Strategy.serverStrategy(definition.onConflict.server)({ conflict, job, definition }),
    (decision): Strategy.ServerOutcome<A> => {
      switch (decision._tag) {
        case "Skip":
          return { _tag: "Skipped", digest, job, holders: conflict.holders }
        case "Reject":
          return { _tag: "Rejected", digest, job, holders: conflict.holders, reason: decision.reason }
        case "Reschedule":
          return { _tag: "Rescheduled", digest, job, holders: conflict.holders, at: decision.at }
      }
    }
  )

// A queue lock often has no TTL: an unlock lost to a dropped connection would keep its digest locked for good. So a
// failed release is tried again (100 ms, doubling, at most 2 s apart) for up to 30 s, which outlasts a reconnect or a
// failover; the job's outcome waits for it, and never fails because of it.
const releaseRetry = Schedule.exponential("100 millis").pipe(
  Schedule.union(Schedule.spaced("2 seconds")),
  Schedule.upTo("30 seconds")
)

/**
 * Releases a queue lock without failing the job: a release that finds the lock already ended (its own `lockTtl`
 * passed, or it was deleted) is logged; one that cannot reach Redis is retried, then logged. The common case, a
 * release that works, pays for none of it: retries, logs and their annotations are built only when needed.
 */
const releaseQueueLock = (definition: Lock.Definition, target: Lock.Target): Effect.Effect<boolean, never, RedisService> => {
  const queued: Lock.Target = { ...target, phase: "queue" }
  const logged = <A>(self: Effect.Effect<A>) =>
    Effect.annotateLogs(self, { ...annotations, digest: target.digest, jid: target.jid })
  return Effect.matchEffect(Lock.unlock(definition, queued), {
    onSuccess: (released) =>
      released
        ? wasReleased
        : logged(Effect.as(Effect.logDebug("the queue lock had already ended (its lockTtl passed, or it was deleted)"), false)),
    onFailure: () =>
      Lock.unlock(definition, queued).pipe(
        Effect.retry(releaseRetry),
        Effect.catchAll((error) =>
          logged(
            Effect.as(Effect.logWarning("could not release the queue lock; it stays until its TTL or the reaper", error), false)
          )
        )
      )
  })
}

const wasReleased = Effect.succeed(true)

/**
 * Wraps a perform. `until_executing` releases its queue lock just before; `until_executed` releases it after a
 * success (a failure keeps it for the retry, which has the same jid); `while_executing` holds `<digest>:RUN` with
 * a kept lease around it; `until_and_while_executing` hands the queue lock over to `<digest>:RUN` in one script.
 * A run lock is held per acquisition: a redelivered copy of a job that still runs is a conflict, and goes to the
 * server strategy like any other duplicate. A run lock lost while the perform runs interrupts it with `LockLost`;
 * one found gone when it is released fails it with `LockLost` too, never `Performed`. `perform` may be a function of
 * the lock (`Lock.Running`) to receive the run lock's fencing token.
 *
 * @since 0.1.0
 * @category middleware
 */
export const server = (definition: Lock.Definition) =>
<A, E, R>(
  job: Job,
  perform: Perform<A, E, R>
): Effect.Effect<Strategy.ServerOutcome<A>, E | ServerError, R | RedisService | JobQueue> =>
  Effect.gen(function*() {
    const digest = yield* digestOf(definition, job)
    const target: Lock.Target = { digest, jid: job.jid, info: infoOf(job) }
    const performed = (value: A): Strategy.ServerOutcome<A> => ({ _tag: "Performed", digest, job, value })
    const unlocked = Effect.isEffect(perform)
      ? perform
      : Effect.suspend(() => perform({ digest, jid: job.jid, fence: undefined }))
    switch (definition.lock) {
      case "until_executing": {
        yield* releaseQueueLock(definition, target)
        return performed(yield* unlocked)
      }
      case "until_executed": {
        const value = yield* unlocked
        yield* releaseQueueLock(definition, target)
        return performed(value)
      }
      case "until_expired":
        return performed(yield* unlocked)
      case "while_executing":
      case "while_executing_reject":
        return yield* Effect.scoped(
          Effect.flatMap(
            Effect.catchTag(Lock.acquire(definition, { ...target, phase: "run" }), "LockConflict", Effect.succeed),
            (held): Effect.Effect<
              Strategy.ServerOutcome<A>,
              E | Lock.LockLost | Strategy.ExecutionConflict | QueueError,
              R | JobQueue
            > =>
              held instanceof Lock.LockConflict
                ? afterConflict<A>(definition, job, digest, held)
                : Effect.map(Lock.runHolding(held, perform), performed)
          )
        )
      case "until_and_while_executing": {
        const strategy = definition.onConflict.server
        // The queue lock stays with a job that goes back to the queue (reschedule, raise, or a custom strategy's
        // choice); it is dropped with a job that is discarded.
        const keepQueueLock = strategy !== "log" && strategy !== "reject"
        return yield* Effect.scoped(
          Effect.gen(function*() {
            const held = yield* Effect.catchTag(
              Lock.acquireHandoff(definition, target, { keepQueueLock }),
              "LockConflict",
              Effect.succeed
            )
            if (held instanceof Lock.LockConflict) {
              const outcome = yield* afterConflict<A>(definition, job, digest, held)
              if (keepQueueLock && (outcome._tag === "Skipped" || outcome._tag === "Rejected")) {
                yield* releaseQueueLock(definition, target)
              }
              return outcome
            }
            if (!held.queueLockHeld && (job.retryCount ?? 0) === 0) {
              yield* Metric.increment(Metrics.uniquenessLapsed.of(definition.lock, "queue"))
              yield* Effect.logWarning(
                "the queue lock was gone when the job started (expired or deleted); running it anyway"
              ).pipe(Effect.annotateLogs({ ...annotations, digest, jid: job.jid }))
            }
            return performed(yield* Lock.runHolding(held, perform))
          })
        )
      }
    }
  }).pipe(
    Effect.withSpan("UniqueJobs.server", {
      kind: "consumer",
      attributes: spanAttributes(definition, job),
      captureStackTrace: false
    })
  )

/**
 * For the queue adapter to call when a job has died for good (retries exhausted, killed): releases the queue
 * lock it still holds (`until_executed`, and `until_and_while_executing` while it waited for a retry).
 * `until_expired` keeps its lock: only its TTL ends it. Answers whether a lock was released.
 *
 * @since 0.1.0
 * @category middleware
 */
export const died = (definition: Lock.Definition) =>
(job: Job): Effect.Effect<boolean, RedisError | Digest.DigestError, RedisService> =>
  !Lock.phases(definition.lock).queue || definition.lock === "until_expired"
    ? Effect.succeed(false)
    : Effect.flatMap(digestOf(definition, job), (digest) =>
      Lock.unlock(definition, { digest, jid: job.jid, phase: "queue" }))
