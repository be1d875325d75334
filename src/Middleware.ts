/**
 * The client and server wrappers around any queue's effects. `client` wraps an enqueue, `server` wraps a perform;
 * each lock phase is one Redis round trip, and what each phase does is read from the lock type's record
 * (`LockType.records`), with the worker's definition completed by the global `Defaults`.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as LogLevel from "effect/LogLevel"
import * as Metric from "effect/Metric"
import type * as MetricLabel from "effect/MetricLabel"
import { Defaults, resolve } from "./Defaults.js"
import type * as Digest from "./Digest.js"
import type { ExecutionConflict, LockConflict, LockLost } from "./Errors.js"
import type { DuplicateJob } from "./Errors.js"
import type { Job } from "./Job.js"
import type { JobQueue, QueueError } from "./JobQueue.js"
import * as Direct from "./internal/direct.js"
import * as Keeper from "./internal/leaseKeeper.js"
import * as Tracing from "./internal/tracing.js"
import * as Lock from "./Lock.js"
import * as LockType from "./LockType.js"
import * as Metrics from "./Metrics.js"
import type { Definition } from "./Options.js"
import type { RedisError, Store } from "./Redis.js"
import { RedisService } from "./Redis.js"
import * as Strategy from "./Strategy.js"

const annotations = { package: "effect-unique-jobs", module: "Middleware" }

/** The digest computed at enqueue travels in the job; only a job that never met the client computes it here. */
const digestOf = (definition: Definition, job: Job): Effect.Effect<string, Digest.DigestError> =>
  job.lockDigest !== undefined ? Effect.succeed(job.lockDigest) : Lock.digestWith(definition, job)

const infoOf = (job: Job) => ({ worker: job.worker, queue: job.queue, args: job.args })


const spanOf = <A, E, R>(
  self: Effect.Effect<A, E, R>,
  name: string,
  kind: "producer" | "consumer",
  definition: Definition,
  job: Job
): Effect.Effect<A, E, R> =>
  Effect.withSpan(self, name, {
    kind,
    attributes: {
      "messaging.destination.name": job.queue,
      "messaging.message.id": job.jid,
      "unique_jobs.worker": job.worker,
      "unique_jobs.lock_type": definition.lock
    },
    captureStackTrace: false
  })

/**
 * A perform: an effect, or a function of the lock it runs under (`running.fence` is the run lock's fencing token).
 *
 * @since 0.1.0
 * @category models
 */
export type Perform<A, E, R> = Lock.Perform<A, E, R>

/**
 * The errors of the client wrapper, beside the enqueue's own.
 *
 * @since 0.1.0
 * @category models
 */
export type ClientError = DuplicateJob | Digest.DigestError | RedisError | QueueError

/**
 * The errors of the server wrapper, beside the perform's own.
 *
 * @since 0.1.0
 * @category models
 */
export type ServerError = ExecutionConflict | LockLost | Digest.DigestError | RedisError | QueueError

// One step per phase for what every phase reads: the store and the defaults from the context (the definition
// completed by the defaults), and whether a tracer records the span of `job`'s phase (none without a job).
const withContext = <A, E, R>(
  definition: Definition,
  job: Job | undefined,
  kind: "producer" | "consumer",
  f: (redis: Store, definition: Definition, enabled: boolean) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R | RedisService> =>
  Effect.withFiberRuntime((fiber) => {
    const context = fiber.currentContext as Context.Context<RedisService>
    const settings = Context.get(context, Defaults)
    const resolved = resolve(definition, settings)
    const phase = f(Context.get(context, RedisService), resolved, settings.enabled)
    // A phase runs in a span only under a tracer that exports it (OpenTelemetry, or any installed with
    // Layer.setTracer): a span costs more Node CPU than a lock call.
    if (job === undefined || fiber.currentTracer === Tracing.builtInTracer) return phase
    return spanOf(phase, kind === "producer" ? "UniqueJobs.client" : "UniqueJobs.server", kind, resolved, job)
  })

const clientPhase = <A, E, R>(
  definition: Definition,
  job: Job,
  enqueue: (job: Job) => Effect.Effect<A, E, R>
): Effect.Effect<Strategy.ClientOutcome<A>, E | ClientError, R | RedisService | JobQueue> =>
  withContext(definition, job, "producer", (redis, definition, enabled): Effect.Effect<
    Strategy.ClientOutcome<A>,
    E | ClientError,
    R | RedisService | JobQueue
  > => {
    if (!enabled) return Effect.map(enqueue(job), (value) => Strategy.ClientOutcome.Enqueued({ digest: "", job, value }))
    // Computed here, not in a step of its own: every enqueue pays this path.
    const digest = job.lockDigest ?? Lock.digestNow(definition, job)
    if (typeof digest !== "string") return Effect.fail(digest)
    const stamped: Job = { ...job, lockDigest: digest }
    const enqueued = (value: A) => Strategy.ClientOutcome.Enqueued({ digest, job: stamped, value })
    if (LockType.records[definition.lock].enqueue === "pass") return Effect.map(enqueue(stamped), enqueued)
    // Lock, then enqueue; the lock is released when the enqueue fails or is interrupted. A conflict is the lock's
    // typed failure: it goes to the strategy, never confused with a failure of the user's enqueue.
    const locked = (delay: number) => {
      const target: Lock.Target = { digest, jid: job.jid, phase: "queue", delay, info: infoOf(job) }
      const onConflict = clientConflict(redis, definition, stamped, target, enqueue)
      return Lock.queueLocked(redis, definition, target, Effect.map(enqueue(stamped), enqueued), onConflict)
    }
    // Only a scheduled job needs the time: its TTL counts from when it runs (in whole ms, as the scripts take them).
    return job.at === undefined
      ? locked(0)
      : Effect.flatMap(Clock.currentTimeMillis, (now) => locked(Math.max(0, Math.ceil(job.at! - now))))
  })

// A conflict at enqueue, as the client strategy says. Its `replace` releases the holders' places (their jobs are
// gone) and tries once more: another duplicate may take the freed place first, and this one is the duplicate then.
const clientConflict = <A, E, R>(
  redis: Store,
  definition: Definition,
  stamped: Job,
  target: Lock.Target,
  enqueue: (job: Job) => Effect.Effect<A, E, R>
) =>
(conflict: LockConflict): Effect.Effect<Strategy.ClientOutcome<A>, E | ClientError, R | RedisService | JobQueue> => {
  const replace = (holders: ReadonlyArray<string>) =>
    Effect.zipRight(
      Effect.forEach(holders, (jid) => Lock.unlock(definition, { ...target, jid }), { discard: true }),
      Lock.queueLocked(
        redis,
        definition,
        target,
        Effect.map(enqueue(stamped), (value) =>
          Strategy.ClientOutcome.Replaced({ digest: target.digest, job: stamped, replaced: holders, value })),
        (again) => Effect.succeed(Strategy.skipped({ conflict: again, job: stamped }) as Strategy.ClientOutcome<A>)
      )
    )
  return Strategy.clientStrategy(definition.onConflict.client)({ conflict, job: stamped, replace })
}

/**
 * Wraps an enqueue. Computes the digest once and stamps it into `job.lockDigest`; for types that lock at enqueue,
 * takes the queue lock (its TTL grows by a scheduled job's delay) and runs `enqueue` only when it got it. A lock
 * whose enqueue fails or is interrupted is released. A conflict goes to the client strategy. Under
 * `Defaults.enabled: false` the enqueue runs as it is.
 *
 * @since 0.1.0
 * @category middleware
 */
export const client: {
  (definition: Definition): <A, E, R>(
    job: Job,
    enqueue: (job: Job) => Effect.Effect<A, E, R>
  ) => Effect.Effect<Strategy.ClientOutcome<A>, E | ClientError, R | RedisService | JobQueue>
  <A, E, R>(
    definition: Definition,
    job: Job,
    enqueue: (job: Job) => Effect.Effect<A, E, R>
  ): Effect.Effect<Strategy.ClientOutcome<A>, E | ClientError, R | RedisService | JobQueue>
} = function(
  definition: Definition,
  ...rest: [] | [Job, (job: Job) => Effect.Effect<unknown, unknown, unknown>]
): any {
  const wrapped = <A, E, R>(job: Job, enqueue: (job: Job) => Effect.Effect<A, E, R>) =>
    clientPhase(definition, job, enqueue)
  return rest.length === 0 ? wrapped : wrapped(rest[0], rest[1])
}

// A conflict on the server: the strategy's outcome. A job turned away under the handoff has kept its queue lock when
// the strategy said it would (it goes back to the queue); one dropped against that word gives it up here.
const afterConflict = (
  definition: Definition,
  job: Job,
  conflict: LockConflict,
  keptQueueLock: boolean
): Effect.Effect<Strategy.ServerOutcome<never>, ExecutionConflict | QueueError, JobQueue | RedisService> =>
  Effect.flatMap(
    Strategy.serverStrategy(definition.onConflict.server)({
      conflict,
      job,
      rescheduleDelay: definition.rescheduleDelay
    }),
    (outcome) =>
      keptQueueLock && outcome._tag !== "Rescheduled"
        ? Effect.as(Lock.releaseQueueLock(definition, { digest: conflict.digest, jid: job.jid }), outcome)
        : Effect.succeed(outcome)
  )

const serverPhase = <A, E, R>(
  definition: Definition,
  job: Job,
  perform: Perform<A, E, R>
): Effect.Effect<Strategy.ServerOutcome<A>, E | ServerError, R | RedisService | JobQueue> =>
  withContext(definition, job, "consumer", (redis, definition, enabled): Effect.Effect<
    Strategy.ServerOutcome<A>,
    E | ServerError,
    R | RedisService | JobQueue
  > => {
    const bare = (digest: string) =>
      Effect.isEffect(perform) ? perform : Effect.suspend(() => perform({ digest, jid: job.jid, fence: undefined }))
    if (!enabled) return Effect.map(bare(""), (value) => Strategy.ServerOutcome.Performed({ digest: "", job, value }))
    const digest = job.lockDigest ?? Lock.digestNow(definition, job)
    if (typeof digest !== "string") return Effect.fail(digest)
    {
      const performed = (value: A) => Strategy.ServerOutcome.Performed({ digest, job, value })
      const target: Lock.Target = { digest, jid: job.jid, info: infoOf(job) }
      const record = LockType.records[definition.lock]
      // A retry of a type that releases before its perform released on its first attempt: a miss is expected.
      const release = (expectGone = false) => Lock.releaseQueueLockWith(redis, definition, target, expectGone)
      const held = (take: Effect.Effect<Lock.Held, LockConflict | RedisError>, keptQueueLock: boolean) =>
        Lock.holdWhile(
          take,
          Effect.isEffect(perform)
            ? Effect.map(perform, performed)
            : (running: Lock.Running) => Effect.map(perform(running), performed),
          (conflict) => afterConflict(definition, job, conflict, keptQueueLock)
        )
      switch (record.beforePerform) {
        case "releaseQueueLock":
          return Effect.zipRight(release((job.retryCount ?? 0) > 0), Effect.map(bare(digest), performed))
        case "none":
          return record.afterPerform === "releaseQueueLockOnSuccess"
            ? Effect.flatMap(bare(digest), (value) => Effect.as(release(), performed(value)))
            : Effect.map(bare(digest), performed)
        case "takeRunLock":
          return held(Lock.takeRunLock(redis, definition, { ...target, phase: "run" }), false)
        case "handoff": {
          const keepQueueLock = Strategy.keepsQueueLock(definition.onConflict.server)
          return held(
            Effect.tap(Lock.takeHandoff(redis, definition, target, { keepQueueLock }), (taken) =>
              taken.queueLockHeld || (job.retryCount ?? 0) > 0 ? Effect.void : lapsed(definition, digest, job)),
            keepQueueLock
          )
        }
      }
    }
  })

const lapsed = (definition: Definition, digest: string, job: Job) =>
  Effect.zipRight(
    Metric.increment(Metrics.uniquenessLapsed.of(definition.lock, "queue")),
    Effect.logWarning("the queue lock was gone when the job started (expired or deleted); running it anyway").pipe(
      Effect.annotateLogs({ ...annotations, digest, jid: job.jid })
    )
  )

/**
 * Wraps a perform, as the lock type's record says: `until_executing` releases its queue lock just before;
 * `until_executed` releases it after a success (a failure keeps it for the retry, which has the same jid);
 * `while_executing` holds `<digest>:RUN` around it, its lease kept by the process' lease keeper;
 * `until_and_while_executing` hands the queue lock over to `<digest>:RUN` in one script. A run lock is held per
 * acquisition: a redelivered copy of a job that still runs is a conflict, and goes to the server strategy like any
 * other duplicate. A run lock lost while the perform runs interrupts it with `LockLost`; one found gone when it is
 * released fails it with `LockLost` too, never `Performed`. `perform` may be a function of the lock
 * (`Lock.Running`) to receive the run lock's fencing token. Under `Defaults.enabled: false` the perform runs as it is.
 *
 * @since 0.1.0
 * @category middleware
 */
export const server: {
  (definition: Definition): <A, E, R>(
    job: Job,
    perform: Perform<A, E, R>
  ) => Effect.Effect<Strategy.ServerOutcome<A>, E | ServerError, R | RedisService | JobQueue>
  <A, E, R>(
    definition: Definition,
    job: Job,
    perform: Perform<A, E, R>
  ): Effect.Effect<Strategy.ServerOutcome<A>, E | ServerError, R | RedisService | JobQueue>
} = function(definition: Definition, ...rest: [] | [Job, Perform<unknown, unknown, unknown>]): any {
  const wrapped = <A, E, R>(job: Job, perform: Perform<A, E, R>) =>
    serverPhase(definition, job, perform)
  return rest.length === 0 ? wrapped : wrapped(rest[0], rest[1])
}

/**
 * For the queue adapter to call when a job has died for good (retries exhausted, killed): releases the queue
 * lock it still holds where its lock type's record says so (`until_executed`, and `until_and_while_executing` while
 * it waited for a retry); `until_expired` keeps its lock: only its TTL ends it. Answers whether a lock was released.
 *
 * @since 0.1.0
 * @category middleware
 */
export const died = (definition: Definition) =>
(job: Job): Effect.Effect<boolean, RedisError | Digest.DigestError, RedisService> =>
  withContext(definition, undefined, "consumer", (_, definition, enabled) =>
    !enabled || LockType.records[definition.lock].onDeath === "none"
      ? Effect.succeed(false)
      : Effect.flatMap(digestOf(definition, job), (digest) =>
        Lock.unlock(definition, { digest, jid: job.jid, phase: "queue" })))

// ---------------------------------------------------------------------------------------------------------------
// The Promise face's hot path
// ---------------------------------------------------------------------------------------------------------------

/**
 * A definition resolved once for a runtime, with what its fast phases read: the store and its promise calls, the
 * runtime's metric labels, and whether a conflict's debug line would be written. Made only where the phases would
 * take the same steps as `client` and `server` on that runtime: locks enabled, no tracer recording spans, and a store
 * with promise calls (internal/direct).
 *
 * @internal
 */
export interface Fast {
  readonly definition: Definition
  readonly clock: Clock.Clock
  readonly redis: Store
  readonly direct: Direct.Direct
  readonly labels: ReadonlyArray<MetricLabel.MetricLabel>
  readonly logsConflicts: boolean
}

/**
 * How a fast phase runs the steps it leaves to Effect (a strategy, an enqueue holding its lock, a failed release):
 * on a fiber of the caller's runtime, answered as a promise that rejects with the failure itself.
 *
 * @internal
 */
export type Run<R> = <A, E>(effect: Effect.Effect<A, E, R>) => Promise<A>

/** `definition` as a `Fast` on the current runtime, or undefined where its phases must run as effects. @internal */
export const fast = (definition: Definition): Effect.Effect<Fast | undefined, never, RedisService> =>
  Effect.clockWith((clock) => Effect.withFiberRuntime((fiber) => {
    const context = fiber.currentContext as Context.Context<RedisService>
    const settings = Context.get(context, Defaults)
    const redis = Context.get(context, RedisService)
    const direct = Direct.directOf(redis)
    if (!settings.enabled || direct === undefined || fiber.currentTracer !== Tracing.builtInTracer) {
      return Effect.succeed(undefined)
    }
    return Effect.succeed({
      definition: resolve(definition, settings),
      clock,
      redis,
      direct,
      labels: fiber.getFiberRef(FiberRef.currentMetricLabels),
      logsConflicts: LogLevel.lessThanEqual(fiber.getFiberRef(FiberRef.currentMinimumLogLevel), LogLevel.Debug)
    })
  }))

/**
 * `client` as a promise, for an enqueue of `job` now (no `at`) under a lock type that locks at enqueue: the lock call
 * and the enqueue (`enqueueNow`, the promise twin of `enqueue`) go out with no fiber, and a duplicate under `log` is
 * answered with none. A failed enqueue's release, and any other strategy, run on a fiber (`run`) as in `client`.
 * Undefined when the job must take `client` instead.
 *
 * @internal
 */
export const clientFast = <A, E, R>(
  fast: Fast,
  job: Job,
  enqueue: (job: Job) => Effect.Effect<A, E, R>,
  enqueueNow: (job: Job) => Promise<A>,
  run: Run<R | RedisService | JobQueue>
): Promise<Strategy.ClientOutcome<A>> | undefined => {
  const { definition, redis } = fast
  if (job.at !== undefined || LockType.records[definition.lock].enqueue !== "lock") return undefined
  const digest = job.lockDigest ?? Lock.digestNow(definition, job)
  if (typeof digest !== "string") return Promise.reject(digest)
  const stamped: Job = { ...job, lockDigest: digest }
  const target: Lock.Target = { digest, jid: job.jid, phase: "queue", info: infoOf(job) }
  const request = Lock.requestOf(definition, target, "queue")
  return fast.direct.lock(Lock.keyOf(definition, digest, "queue"), request).then((result) => {
    if (result._tag === "Conflict") {
      Metrics.conflicts.of(definition.lock, "queue").unsafeUpdate(1, fast.labels)
      // `log` writes a debug line and answers Skipped: with the line below the runtime's level, that is all (and
      // the conflict, an error class, is not even made).
      if (definition.onConflict.client === "log" && !fast.logsConflicts) {
        return Strategy.ClientOutcome.Skipped({ digest, job: stamped, holders: result.holders })
      }
      const conflict = Lock.conflictOf({
        digest,
        jid: job.jid,
        phase: "queue",
        lockType: definition.lock,
        holders: result.holders
      })
      return run(clientConflict(redis, definition, stamped, target, enqueue)(conflict))
    }
    Metrics.acquired.of(definition.lock, "queue").unsafeUpdate(1, fast.labels)
    // The lock is kept when the job is stored; a failed enqueue lets it go as `client` does (after the queue's
    // answer, when the add may still land).
    return enqueueNow(stamped).then(
      (value) => Strategy.ClientOutcome.Enqueued({ digest, job: stamped, value }),
      (error: unknown) => run(Lock.keepIfEnqueued(redis, definition, target, Effect.fail(error)))
    )
  })
}

/**
 * A job on the hot path: its outcome, and how to end it from outside (close's timeout) as interrupting its fiber
 * would. The outcome then rejects with the error given, a run lock released first; what the perform does after that
 * changes no lock.
 *
 * @internal
 */
export interface FastJob<A> {
  readonly outcome: Promise<Strategy.ServerOutcome<A>>
  readonly interrupt: (error: unknown) => void
}

// How a hot-path job ends: settled once, interrupted from outside, and who is told of an interruption.
interface Ending<A> {
  ended: boolean
  interrupted: { readonly error: unknown } | undefined
  onInterrupt: ((error: unknown) => void) | undefined
  readonly resolve: (outcome: Strategy.ServerOutcome<A>) => void
  readonly reject: (error: unknown) => void
}

/**
 * `server` as a promise, for every lock type but `until_and_while_executing`: the perform, the queue lock's release,
 * and a run lock's acquisition, lease and release go out with no fiber. What is rare runs on one (`run`), as `server`
 * runs it: a conflict's strategy, a release that misses or fails, a lease answered late or lost before the perform
 * starts, a burst beyond the lease keeper's admission. The outcome rejects with the perform's own failure, or the
 * run lock's `LockLost` the moment it is lost (the perform, which takes no signal, is left to end on its own).
 * Undefined when the job must take `server` instead.
 *
 * @internal
 */
export const serverFast = <A>(
  fast: Fast,
  job: Job,
  perform: () => Promise<A>,
  run: Run<RedisService | JobQueue>
): FastJob<A> | undefined => {
  const { definition } = fast
  const record = LockType.records[definition.lock]
  if (record.beforePerform === "handoff") return undefined
  const digest = job.lockDigest ?? Lock.digestNow(definition, job)
  // A job whose digest cannot be computed fails as `server` fails it.
  if (typeof digest !== "string") return undefined
  if (record.beforePerform === "takeRunLock" && !Keeper.admitNow(fast.redis)) return undefined
  let ending!: Ending<A>
  const outcome = new Promise<Strategy.ServerOutcome<A>>((resolve, reject) => {
    ending = {
      ended: false,
      interrupted: undefined,
      onInterrupt: undefined,
      resolve: (outcome) => {
        if (ending.ended) return
        ending.ended = true
        resolve(outcome)
      },
      reject: (error) => {
        if (ending.ended) return
        ending.ended = true
        reject(error)
      }
    }
  })
  const performed = (value: A) => ending.resolve(Strategy.ServerOutcome.Performed({ digest, job, value }))
  // A perform that throws, or answers no promise, still settles one (as Effect.tryPromise takes it).
  const performing = (): Promise<A> => {
    try {
      return Promise.resolve(perform())
    } catch (cause) {
      return Promise.reject(cause)
    }
  }
  const target: Lock.Target = { digest, jid: job.jid, info: infoOf(job) }
  switch (record.beforePerform) {
    case "releaseQueueLock":
      releaseFast(fast, target, run, (job.retryCount ?? 0) > 0).then(() => {
        if (ending.interrupted === undefined) performing().then(performed, ending.reject)
      }, ending.reject)
      break
    case "none":
      performing().then((value) => {
        // Interrupted meanwhile: the job is retried under its jid, and keeps its lock for it.
        if (record.afterPerform !== "releaseQueueLockOnSuccess" || ending.interrupted !== undefined) return performed(value)
        releaseFast(fast, target, run).then(() => performed(value), ending.reject)
      }, ending.reject)
      break
    case "takeRunLock":
      holdFast(fast, job, { ...target, phase: "run" }, performing, run, ending, performed)
      break
  }
  return {
    outcome,
    interrupt: (error) => {
      if (ending.ended || ending.interrupted !== undefined) return
      ending.interrupted = { error }
      // A run lock is released first (once it is held); nothing else is waited for.
      if (ending.onInterrupt !== undefined) ending.onInterrupt(error)
      else if (record.beforePerform !== "takeRunLock") ending.reject(error)
    }
  }
}

// `Lock.holdWhile` over `Lock.takeRunLock` without a fiber, admitted by the caller (`Keeper.admitNow`): the lock call,
// the lease handed to the keeper, the perform, and the release of exactly this acquisition (its fence). The lock is
// released before the outcome settles, however the job ends: its perform's success or failure, the lease's loss, or
// an interruption (one that came during the acquisition takes effect once the lock is held).
const holdFast = <A>(
  fast: Fast,
  job: Job,
  target: Lock.Target,
  performing: () => Promise<A>,
  run: Run<RedisService | JobQueue>,
  ending: Ending<A>,
  performed: (value: A) => void
): void => {
  const { definition, redis } = fast
  const key = Lock.keyOf(definition, target.digest, "run")
  const start = fast.clock.unsafeCurrentTimeMillis()

  const held = (lease: Keeper.Lease, fence: number) => {
    let unlocked: Promise<boolean | undefined> | undefined
    // Unlocks once; answers whether the hold was still live, or undefined when Redis could not be reached. Never
    // rejects: a release decides no job's outcome but by finding its hold gone.
    const unlockOnce = () => {
      if (unlocked !== undefined) return unlocked
      Keeper.letGo(redis, lease)
      return unlocked = fast.direct.unlock(key, target.jid, fence).then(
        (live): boolean | Promise<boolean> => {
          Metrics.holdTime.unsafeUpdate(fast.clock.unsafeCurrentTimeMillis() - start, fast.labels)
          if (!live) return false
          if (definition.afterUnlock !== undefined) return run(Lock.afterRelease(definition, target, "run"))
          Metrics.released.of(definition.lock, "run").unsafeUpdate(1, fast.labels)
          return true
        },
        (error: RedisError) => run(Lock.releaseUnreached(target, error)).then(() => undefined)
      ).then(undefined, () => undefined)
    }
    // The release's answer on a success: a hold found gone is a LockLost (another copy may have run meanwhile).
    const gone = () => run(Lock.runLockGone(definition, target, fence, lease))
    let over = false
    // Ended other than by the perform's success: released (a hold found gone warns and counts), then failed.
    const stop = (error: unknown) => {
      if (over) return
      over = true
      unlockOnce()
        .then((live) => (live === false ? gone().then(undefined, () => undefined) : undefined))
        .then(() => ending.reject(error))
    }
    const previous = lease.onLost
    lease.onLost = (lost) => {
      previous?.(lost)
      stop(lost)
    }
    ending.onInterrupt = stop
    if (ending.interrupted !== undefined) return stop(ending.interrupted.error)
    const go = () =>
      performing().then((value) => {
        if (over) return
        over = true
        unlockOnce().then((live) => (live === false ? gone().then(undefined, ending.reject) : performed(value)))
      }, stop)
    // Lost between the acquisition and now, or answered too late to count as held: the perform never starts.
    if (Keeper.checkNow(lease, fast.clock.unsafeCurrentTimeMillis())) return void go()
    run(Keeper.check(lease)).then((lost) => (lost !== undefined ? stop(lost) : over ? undefined : go()), stop)
  }

  const admitted = (then: () => void) => {
    Keeper.leaveNow(redis)
    then()
  }
  // Every branch settles the outcome; a throw in one (a bug) fails the job rather than the process.
  fast.direct.lock(key, Lock.requestOf(definition, target, "run")).then((result) => {
    if (result._tag === "Conflict") {
      return admitted(() => {
        Metrics.conflicts.of(definition.lock, "run").unsafeUpdate(1, fast.labels)
        if (ending.interrupted !== undefined) return ending.reject(ending.interrupted.error)
        const conflict = Lock.conflictOf({
          digest: target.digest,
          jid: target.jid,
          phase: "run",
          lockType: definition.lock,
          holders: result.holders
        })
        run(afterConflict(definition, job, conflict, false)).then(ending.resolve, ending.reject)
      })
    }
    Metrics.acquired.of(definition.lock, "run").unsafeUpdate(1, fast.labels)
    const renewal = { lock: key, jid: target.jid, leaseMs: Duration.toMillis(definition.lockLease), fence: result.fence }
    const about = { digest: target.digest, lockType: definition.lock }
    const kept = Keeper.keepNow(redis, renewal, about, start, fast.clock)
    if (kept !== undefined) return admitted(() => held(kept, result.fence))
    run(Keeper.keep(redis, renewal, about, start)).then(
      (lease) => admitted(() => held(lease, result.fence)),
      (error: unknown) => admitted(() => ending.reject(error))
    )
  }, (error: unknown) => admitted(() => ending.reject(error))).then(undefined, ending.reject)
}

// `Lock.releaseQueueLockWith` with its common case, a release that found its hold, answered without a fiber.
const releaseFast = (
  fast: Fast,
  target: Lock.Target,
  run: Run<RedisService | JobQueue>,
  expectGone = false
): Promise<boolean> => {
  const { definition } = fast
  return fast.direct.unlock(Lock.keyOf(definition, target.digest, "queue"), target.jid, 0).then(
    (released) => {
      if (!released) return expectGone ? false : run(Lock.releaseMissed(definition, target))
      if (definition.afterUnlock !== undefined) return run(Lock.afterRelease(definition, target, "queue"))
      Metrics.released.of(definition.lock, "queue").unsafeUpdate(1, fast.labels)
      return true
    },
    () => run(Lock.releaseAgain(fast.redis, definition, target))
  )
}
