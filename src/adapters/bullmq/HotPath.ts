/**
 * The Promise face's hot path: `Middleware.client` and `Middleware.server` as promises, for `UniqueQueue`. A call that
 * runs no fiber pays for none: the lock calls go out through the store's promise calls (store/Direct), and only
 * what is rare runs on a fiber of the caller's runtime, through the same Effect code as `client` and `server`.
 * `test/uniquequeue.fastpath.test.ts` holds both faces to the same answers.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as References from "effect/References"
import * as Tracer from "effect/Tracer"
import { Defaults, resolve } from "../../Defaults.js"
import type { Job } from "../../Job.js"
import type { JobQueue } from "../../JobQueue.js"
import * as Lock from "../../Lock.js"
import * as LockType from "../../LockType.js"
import * as Metrics from "../../Metrics.js"
import { afterConflict, clientConflict, infoOf } from "../../Middleware.js"
import type { Definition } from "../../Options.js"
import type { RedisError, Store } from "../../Redis.js"
import { RedisService } from "../../Redis.js"
import * as Strategy from "../../Strategy.js"
import * as Direct from "../../store/Direct.js"
import * as Keeper from "../../store/LeaseKeeper.js"
import * as Tracing from "../../observability/Tracing.js"

/**
 * A definition resolved once for a runtime, with what its fast phases read: the store and its promise calls, the
 * runtime's context (its metric attributes), and whether a conflict's debug line would be written. Made only where the
 * phases would take the same steps as `client` and `server` on that runtime: locks enabled, no tracer recording spans,
 * and a store with promise calls (store/Direct).
 *
 * @internal
 */
export interface Fast {
  readonly definition: Definition
  readonly clock: Clock.Clock
  readonly redis: Store
  readonly direct: Direct.Direct
  /** The runtime's context, which metric updates read their attributes from. */
  readonly context: Context.Context<never>
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
  Effect.withFiber((fiber) => {
    const context = fiber.context as Context.Context<RedisService>
    const settings = Context.get(context, Defaults)
    const redis = Context.get(context, RedisService)
    const direct = Direct.directOf(redis)
    if (!settings.enabled || direct === undefined || fiber.getRef(Tracer.Tracer) !== Tracing.builtInTracer) {
      return Effect.succeed(undefined)
    }
    return Effect.succeed({
      definition: resolve(definition, settings),
      clock: fiber.getRef(Clock.Clock),
      redis,
      direct,
      context: fiber.context,
      logsConflicts: !LogLevel.isGreaterThan(fiber.getRef(References.MinimumLogLevel), "Debug")
    })
  })

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
  if (job.at !== undefined || LockType.records[definition.lock].enqueue !== "lock" || Option.isSome(definition.debounce)) {
    return undefined
  }
  const digest = job.lockDigest ?? Lock.digestNow(definition, job)
  if (typeof digest !== "string") return Promise.reject(digest)
  const stamped: Job = { ...job, lockDigest: digest }
  const target: Lock.Target = { digest, jid: job.jid, phase: "queue", info: infoOf(job) }
  const request = Lock.requestOf(definition, target, "queue")
  return fast.direct.lock(Lock.keyOf(definition, digest, "queue"), request).then((result) => {
    if (result._tag === "Conflict") {
      Metrics.conflicts.of(definition.lock, "queue").updateUnsafe(1, fast.context)
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
    Metrics.acquired.of(definition.lock, "queue").updateUnsafe(1, fast.context)
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
 * changes no lock. `after` is a call still answering once the outcome has settled (`until_executed`'s release, sent
 * with it), never rejecting; close waits for it too.
 *
 * @internal
 */
export interface FastJob<A> {
  readonly outcome: Promise<Strategy.ServerOutcome<A>>
  readonly after: () => Promise<void> | undefined
  readonly interrupt: (error: unknown) => void
}

// How a hot-path job ends: settled once, interrupted from outside, and who is told of an interruption.
interface Ending<A> {
  ended: boolean
  interrupted: { readonly error: unknown } | undefined
  onInterrupt: ((error: unknown) => void) | undefined
  /** A call still answering after the outcome settled. */
  after: Promise<void> | undefined
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
  // A debounced job reads its window's holders before it runs (a superseded one is skipped): `server`'s step.
  if (record.beforePerform === "handoff" || Option.isSome(definition.debounce)) return undefined
  // A run lock met held waits for its release (lockTimeout): that wait is `server`'s.
  if (record.beforePerform === "takeRunLock" && Duration.toMillis(definition.lockTimeout) > 0) return undefined
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
      after: undefined,
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
  // A run lock's entry keeps the job's info only under lockInfo (a queue lock's release reads none).
  const target: Lock.Target = definition.lockInfo ? { digest, jid: job.jid, info: infoOf(job) } : { digest, jid: job.jid }
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
        // Whatever the release answers, the job has performed (a miss or an unreachable Redis is logged, never a
        // failure): the outcome goes once the release is sent (a batched one at its turn's end), so the queue's own
        // move of the job overlaps its round trip rather than following it. On one Redis the release, sent first,
        // is done before that move is answered. A release that fails before it is sent settles the outcome too.
        const done = () => performed(value)
        ending.after = releaseFast(fast, target, run, false, done).then(done, done)
      }, ending.reject)
      break
    case "takeRunLock":
      holdFast(fast, job, { ...target, phase: "run" }, performing, run, ending, performed)
      break
  }
  return {
    outcome,
    after: () => ending.after,
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
  const start = fast.clock.currentTimeMillisUnsafe()

  const held = (lease: Keeper.Lease, fence: number) => {
    let unlocked: Promise<boolean | undefined> | undefined
    // Unlocks once; answers whether the hold was still live, or undefined when that could not be confirmed. A call
    // Redis did not answer is tried again on a fiber until it answers (`Lock.releaseHeldAgain`), and the outcome waits
    // for it. Never rejects: a release decides no job's outcome but by finding its hold gone.
    const unlockOnce = () => {
      if (unlocked !== undefined) return unlocked
      Keeper.letGo(redis, lease)
      return unlocked = fast.direct.unlock(key, target.jid, fence, definition.lockEvents).then(
        (live): boolean | Promise<boolean> => {
          Metrics.holdTime.updateUnsafe(fast.clock.currentTimeMillisUnsafe() - start, fast.context)
          return live && released(fast, target, "run", run)
        },
        (error: RedisError) => run(Lock.releaseHeldAgain(redis, definition, { ...target, fence }, error))
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
    // The perform once started: a loss while it runs waits for it, since nothing can stop a promise.
    let running: Promise<unknown> | undefined
    let lostWhileRunning: unknown
    const previous = lease.onLost
    lease.onLost = (lost) => {
      previous?.(lost)
      // Lost while the perform runs (an operator revoked the hold): the place is kept (the keeper renews it with
      // `keep`) until the perform has returned, then released, and the job fails with the loss. No second copy
      // starts while this one still runs, whether or not it would have stopped on a signal.
      if (running === undefined) return stop(lost)
      lostWhileRunning = lost
      running.then(() => stop(lost), () => stop(lost))
    }
    ending.onInterrupt = stop
    if (ending.interrupted !== undefined) return stop(ending.interrupted.error)
    const go = () => {
      running = performing().then((value) => {
        if (over || lostWhileRunning !== undefined) return
        over = true
        unlockOnce().then((live) => (live === false ? gone().then(undefined, ending.reject) : performed(value)))
      }, (error: unknown) => lostWhileRunning === undefined ? stop(error) : undefined)
    }
    // Lost between the acquisition and now, or answered too late to count as held: the perform never starts.
    if (Keeper.checkNow(lease, fast.clock.currentTimeMillisUnsafe())) return void go()
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
        Metrics.conflicts.of(definition.lock, "run").updateUnsafe(1, fast.context)
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
    Metrics.acquired.of(definition.lock, "run").updateUnsafe(1, fast.context)
    const leaseMs = Duration.toMillis(definition.lockLease)
    const renewal = {
      lock: key,
      jid: target.jid,
      leaseMs,
      fence: result.fence,
      ...(definition.lockEvents ? { events: true } : {})
    }
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
  expectGone = false,
  sent?: () => void
): Promise<boolean> => {
  const { definition } = fast
  const key = Lock.keyOf(definition, target.digest, "queue")
  return fast.direct.unlock(key, target.jid, 0, definition.lockEvents, sent).then(
    (live) => {
      if (!live) return expectGone ? false : run(Lock.releaseMissed(definition, target))
      return released(fast, target, "queue", run)
    },
    () => run(Lock.releaseAgain(fast.redis, definition, target))
  )
}

// `Lock.afterRelease` without a fiber when there is no `afterUnlock` to run: a release that found its hold, counted.
const released = (
  fast: Fast,
  target: Lock.Target,
  phase: Lock.Acquired["phase"],
  run: Run<RedisService | JobQueue>
): boolean | Promise<boolean> => {
  if (fast.definition.afterUnlock !== undefined) return run(Lock.afterRelease(fast.definition, target, phase))
  Metrics.released.of(fast.definition.lock, phase).updateUnsafe(1, fast.context)
  return true
}
