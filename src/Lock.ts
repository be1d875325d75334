/**
 * The lock steps and resources: `lock` / `unlock` / `handoff` / `renew` for phases that happen in different
 * processes (each one round trip), the queue lock an enqueue holds (`withQueueLock`), and a lock held as a scoped
 * resource (`acquire`, `withLock`) whose run lock's lease the process' lease keeper renews.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import { dual } from "effect/Function"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import type * as Tracer from "effect/Tracer"
import { Defaults, resolve } from "./Defaults.js"
import * as Digest from "./Digest.js"
import { LockConflict, LockLost } from "./Errors.js"
import * as Keeper from "./store/LeaseKeeper.js"
import * as Waits from "./store/ReleaseWaits.js"
import { QueueError } from "./JobQueue.js"
import { unsafeIncrement } from "./observability/MetricState.js"
import * as Tracing from "./observability/Tracing.js"
import type { Phase } from "./LockType.js"
import * as LockType from "./LockType.js"
import * as Metrics from "./Metrics.js"
import type { Definition, Unlocked } from "./Options.js"
import { passes } from "./store/Store.js"
import type { HolderRequest, LockKey, LockResult, RedisError, Store } from "./Redis.js"
import { RedisService } from "./Redis.js"

/**
 * Which job wants which lock.
 *
 * @since 0.1.0
 * @category models
 */
export interface Target {
  readonly digest: string
  readonly jid: string
  /** Default: `queue` for types that lock at enqueue, else `run`. */
  readonly phase?: Phase | undefined
  /** For a scheduled job: its queue lock's TTL counts from its run time, so the TTL grows by the delay. */
  readonly delay?: Duration.Input | undefined
  /** Worker, queue and arguments, stored with the holder when `lockInfo` is on. */
  readonly info?: { readonly worker?: string; readonly queue?: string; readonly args?: unknown } | undefined
  /** For `unlock` and `renew` of a run lock: the acquisition's fencing token, so no other copy's hold is touched. */
  readonly fence?: number | undefined
  /**
   * A debounced queue lock: when its window's first enqueue was (epoch ms). Stored in the entry's info whether or not
   * `lockInfo` is on, so that the next enqueue of the window keeps the bound (`windowOf`), in whichever process it runs.
   */
  readonly window?: number | undefined
  /** A debounced queue lock: when its job is due to run (epoch ms), stored beside `window`. */
  readonly due?: number | undefined
  /**
   * A debounced queue lock taken in place of these holders, in the same call, only if each is there as it was read
   * (live, its `lockedAt` unchanged): no other enqueue can take the place, or lose the window, between the two.
   */
  readonly swap?: ReadonlyArray<{ readonly jid: string; readonly lockedAt?: number | undefined }> | undefined
}

/**
 * A lock taken.
 *
 * @since 0.1.0
 * @category models
 */
export interface Acquired {
  readonly digest: string
  readonly jid: string
  readonly phase: Phase
  /** The job already held it (a retry of the same jid re-entering its queue lock). */
  readonly reentrant: boolean
  /**
   * A run lock's fencing token: it strictly increases per digest across acquisitions (and lock lifetimes), so a
   * store the job writes to can refuse writes carrying a lower token than it has seen. 0 for a queue lock.
   */
  readonly fence: number
}

const phaseOf = (definition: Definition, target: Target): Phase =>
  target.phase ?? (LockType.phases(definition.lock).queue ? "queue" : "run")

/**
 * The lock's Redis identity: the digest for the queue phase, `<digest>:RUN` for the run phase.
 *
 * @since 0.1.0
 * @category utils
 */
export const keyOf = (definition: Definition, digest: string, phase: Phase): LockKey => ({
  prefix: definition.lockPrefix,
  name: phase === "queue" ? digest : `${digest}:RUN`
})

// Info is for people reading locks: values JSON cannot carry are written as text, never thrown (the arguments are the
// job's own, not only the lock arguments the digest checked).
const infoReplacer = () => {
  const ancestors: Array<unknown> = []
  return function(this: unknown, _key: string, value: unknown): unknown {
    if (typeof value === "bigint") return `${value}n`
    if (typeof value === "function" || typeof value === "symbol") return String(value)
    if (typeof value === "number" && !Number.isFinite(value)) return String(value)
    if (typeof value !== "object" || value === null) return value
    while (ancestors.length > 0 && ancestors[ancestors.length - 1] !== this) ancestors.pop()
    if (ancestors.includes(value)) return "[Circular]"
    ancestors.push(value)
    return value
  }
}

// A debounced lock's window and due time lead its info (whether or not lockInfo is on).
const windowInfo = (target: Target): string =>
  target.window === undefined
    ? ""
    : `"window":${target.window}${target.due === undefined ? "" : `,"due":${target.due}`}`

const infoOf = (definition: Definition, target: Target): string => {
  if (!definition.lockInfo) return target.window === undefined ? "" : `{${windowInfo(target)}}`
  const info = {
    ...(target.window === undefined ? {} : { window: target.window }),
    ...(target.window === undefined || target.due === undefined ? {} : { due: target.due }),
    type: definition.lock,
    limit: definition.lockLimit,
    ttl: Option.match(definition.lockTtl, { onNone: () => null, onSome: Duration.toMillis }),
    timeout: Duration.toMillis(definition.lockTimeout),
    ...target.info
  }
  try {
    return JSON.stringify(info, infoReplacer())
  } catch (cause) {
    // A toJSON that throws: keep the lock's own fields.
    return JSON.stringify({ ...info, args: `unreadable: ${String(cause)}` }, infoReplacer())
  }
}

/**
 * A debounced queue lock's holder as its entry keeps it: when it was locked (Redis ms, the entry's `t`, which a swap
 * checks), and its window's start and due time (`Target.window`, `Target.due`) where the entry keeps them.
 *
 * @internal
 */
export interface WindowHolder {
  readonly jid: string
  readonly lockedAt: number
  readonly window: number | undefined
  readonly due: number | undefined
}

const finite = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isFinite(value) ? value : undefined

/**
 * Whether a debounced enqueue took `jid`'s place in `digest`'s queue lock within the last hour (`Store.replaced`): its
 * job was superseded. A store that keeps no such record answers false.
 *
 * @internal
 */
export const wasReplaced = (
  redis: Store,
  definition: Definition,
  digest: string,
  jid: string
): Effect.Effect<boolean, RedisError> =>
  redis.replaced === undefined ? Effect.succeed(false) : redis.replaced(keyOf(definition, digest, "queue"), jid)

/**
 * A debounced queue lock's holders, with the windows their entries keep. One read of the lock's holders.
 *
 * @internal
 */
export const windowHolders = (
  redis: Store,
  definition: Definition,
  digest: string
): Effect.Effect<ReadonlyArray<WindowHolder>, RedisError> =>
  Effect.map(redis.holders(keyOf(definition, digest, "queue")), (holders) =>
    holders.map((holder) => {
      const info = typeof holder.info === "object" && holder.info !== null
        ? holder.info as { readonly window?: unknown; readonly due?: unknown }
        : {}
      return { jid: holder.jid, lockedAt: holder.lockedAt, window: finite(info.window), due: finite(info.due) }
    }))

/**
 * When the debounce window of the holders an enqueue takes the place of began: the earliest window among those
 * `kept` keeps (the window's first trigger bounds `maxWait`, whichever holder carries it), or undefined when none
 * keeps one.
 *
 * @internal
 */
export const windowOf = (
  holders: ReadonlyArray<WindowHolder>,
  kept: (holder: WindowHolder) => boolean
): number | undefined => {
  let earliest: number | undefined
  for (const holder of holders) {
    if (holder.window === undefined || !kept(holder)) continue
    if (earliest === undefined || holder.window < earliest) earliest = holder.window
  }
  return earliest
}

// The queue lock lives for lockTtl (plus the delay); the run lock lives by its renewed lease.
/** @internal */
export const requestOf = (definition: Definition, target: Target, phase: Phase): HolderRequest => {
  // Built in place: every lock step makes one, and optional fields spread in would make an object each.
  const request: { -readonly [K in keyof HolderRequest]: HolderRequest[K] } = {
    jid: target.jid,
    limit: definition.lockLimit,
    ttlMs: phase === "queue"
      ? Option.match(definition.lockTtl, {
        onNone: () => 0,
        onSome: (ttl) => Duration.toMillis(ttl) + (target.delay === undefined ? 0 : Duration.toMillis(target.delay))
      })
      : 0,
    leaseMs: phase === "run" ? Duration.toMillis(definition.lockLease) : 0,
    info: infoOf(definition, target),
    fenced: phase === "run"
  }
  // The reaper asks this queue about a queue lock's job; a run lock ends by its lease.
  if (phase === "queue" && target.info?.queue !== undefined) request.queue = target.info.queue
  // Only when on: a request without it is the one every earlier version sent.
  if (definition.lockEvents) request.events = true
  if (target.swap !== undefined && target.swap.length > 0) request.swap = target.swap
  return request
}

const counter = (family: Metrics.Family, lockType: string, phase: Phase) => family.of(lockType, phase)

// A lock step's span, made only under a tracer that records it (observability/Tracing): the step's one Redis call.
const attributesOf = (script: string, definition: Definition, target: Target, phase: Phase) => () => ({
  ...Tracing.redisAttributes(script),
  "unique_jobs.digest": target.digest,
  "unique_jobs.jid": target.jid,
  "unique_jobs.lock_type": definition.lock,
  "unique_jobs.phase": phase
})

// A traced hold carries its span's context in its entry's info, so a duplicate refused later can link to it.
const withTrace = (request: HolderRequest, span: Tracer.Span): HolderRequest => {
  const trace = `"trace":${JSON.stringify(Tracing.contextOf(span))}`
  return { ...request, info: request.info === "" ? `{${trace}}` : `{${trace},${request.info.slice(1)}` }
}

// A refused duplicate's span links to the holders that refused it, where their entry holds a span's context. One
// read more, made only under a tracer that records; a failed read leaves the span without links.
const linkHolders = (redis: Store, key: LockKey, holders: ReadonlyArray<string>, span: Tracer.Span) =>
  redis.fetch(key).pipe(
    Effect.map((fetched) => {
      const links = fetched.holders.flatMap((holder) => {
        if (!holders.includes(holder.jid)) return []
        const info = holder.info as { readonly trace?: unknown } | undefined
        const link = typeof info === "object" && info !== null ? Tracing.linkTo(info.trace, holder.jid) : undefined
        return link === undefined ? [] : [link]
      })
      span.attribute("unique_jobs.holders", holders.join(","))
      if (links.length > 0) span.addLinks(links)
    }),
    Effect.ignore
  )

// A store call that takes a place in `key` (lock, handoff) in its span: the hold carries the span's context, and a
// conflict links to the holders'.
const holdCall = <A extends LockResult>(
  redis: Store,
  name: string,
  attributes: () => Record<string, unknown>,
  key: LockKey,
  request: HolderRequest,
  call: (request: HolderRequest) => Effect.Effect<A, RedisError>
): Effect.Effect<A, RedisError> =>
  Tracing.traced(name, attributes, (span) =>
    span === undefined
      ? call(request)
      : Effect.tap(call(withTrace(request, span)), (result) =>
        result._tag === "Conflict" ? linkHolders(redis, key, result.holders, span) : Effect.void))

const lockCall = (
  redis: Store,
  definition: Definition,
  target: Target,
  phase: Phase
): Effect.Effect<LockResult, RedisError> => {
  const key = keyOf(definition, target.digest, phase)
  const request = requestOf(definition, target, phase)
  const attributes = attributesOf("lock", definition, target, phase)
  return holdCall(redis, "UniqueJobs.lock", attributes, key, request, (traced) => redis.lock(key, traced))
}

/**
 * A debounced enqueue's queue lock confirmed once its job is in the queue: its entry written again in its own place (a
 * swap of itself, `Target.swap`), which writes nothing when a later enqueue took the place while the job was on its
 * way. Answers whether the place is still its own: when not, the caller removes the job, which no place covers. An
 * enqueue that read the entry before this sees it written again (`lockedAt`) and reads it anew, so the job it took for
 * gone (not yet in the queue) is never left beside its own. Not logged in the activity log: the hold is the same.
 *
 * @internal
 */
export const confirmQueueLock = (redis: Store, definition: Definition, target: Target): Effect.Effect<boolean, RedisError> => {
  const own: Target = { ...target, swap: [{ jid: target.jid }] }
  const key = keyOf(definition, target.digest, "queue")
  const request: HolderRequest = { ...requestOf(definition, own, "queue"), events: false }
  const attributes = attributesOf("lock", definition, own, "queue")
  return Effect.map(
    holdCall(redis, "UniqueJobs.lock", attributes, key, request, (traced) => redis.lock(key, traced)),
    (result) => result._tag === "Acquired"
  )
}

/** An acquire reply as the step's outcome: `Acquired`, or a `LockConflict` failure; counted either way. */
const settle = <Extra extends object>(
  definition: Definition,
  target: Target,
  phase: Phase,
  result: LockResult,
  extra: Extra
): Effect.Effect<Acquired & Extra, LockConflict> =>
  Effect.withFiber((fiber) => {
    if (result._tag === "Acquired") {
      unsafeIncrement(counter(Metrics.acquired, definition.lock, phase), fiber)
      return Effect.succeed({
        digest: target.digest,
        jid: target.jid,
        phase,
        reentrant: result.reentrant,
        fence: result.fence,
        ...extra
      })
    }
    unsafeIncrement(counter(Metrics.conflicts, definition.lock, phase), fiber)
    return Effect.fail(conflictOf({
      digest: target.digest,
      jid: target.jid,
      phase,
      lockType: definition.lock,
      holders: result.holders
    }))
  })

// A conflict is an answer, not a bug: the duplicate's strategy handles it, and a stack trace would only cost time
// (about a tenth of a duplicate enqueue's CPU when captured). Its fields come from the definition and the script's
// reply, already of their types: validating them again cost a duplicate enqueue about 3 µs (bench/).
/** @internal */
export const conflictOf = (fields: ConstructorParameters<typeof LockConflict>[0]): LockConflict => {
  const limit = Error.stackTraceLimit
  Error.stackTraceLimit = 0
  try {
    return new LockConflict(fields, { disableChecks: true })
  } finally {
    Error.stackTraceLimit = limit
  }
}

/**
 * The digest of a job under a definition.
 *
 * @since 0.1.0
 * @category utils
 */
export const digest = (definition: Definition, input: Digest.Input): Effect.Effect<string, Digest.DigestError> =>
  Effect.flatMap(Defaults, (settings) => digestWith(resolve(definition, settings), input))

/** @internal */
export const digestWith = (definition: Definition, input: Digest.Input): Effect.Effect<string, Digest.DigestError> =>
  Effect.suspend(() => {
    const digest = digestNow(definition, input)
    return typeof digest === "string" ? Effect.succeed(digest) : Effect.fail(digest)
  })

/** `digestWith` at once, the error as a value. @internal */
export const digestNow = (definition: Definition, input: Digest.Input): string | Digest.DigestError =>
  Digest.compute(input, {
    lockArgs: definition.lockArgs,
    uniqueAcrossQueues: definition.uniqueAcrossQueues,
    uniqueAcrossWorkers: definition.uniqueAcrossWorkers,
    algorithm: definition.digestAlgorithm,
    prefix: definition.lockPrefix
  })

// Every step reads the store and the global defaults in one go; a definition without options left to the defaults,
// or under the built-in ones, is used as it is.
const withStore = <A, E, R = never>(
  definition: Definition,
  f: (redis: Store, definition: Definition) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R | RedisService> =>
  Effect.contextWith((context: Context.Context<RedisService>) =>
    f(Context.get(context, RedisService), resolve(definition, Context.get(context, Defaults)))
  )

/**
 * Takes the lock for `target.jid` in one round trip, or fails with `LockConflict` naming the holders.
 * Never waits: a held lock is a conflict at once.
 *
 * @since 0.1.0
 * @category lock steps
 */
export const lock = (
  definition: Definition,
  target: Target
): Effect.Effect<Acquired, LockConflict | RedisError, RedisService> =>
  withStore(definition, (redis, definition) => lockWith(redis, definition, target))

const lockWith = (redis: Store, definition: Definition, target: Target) => {
  const phase = phaseOf(definition, target)
  return Effect.flatMap(
    lockCall(redis, definition, target, phase),
    (result) => settle(definition, target, phase, result, {})
  )
}

const runAfterUnlock = (definition: Definition, unlocked: Unlocked): Effect.Effect<void> =>
  definition.afterUnlock === undefined || LockType.records[definition.lock].releasedBy === "expiry"
    ? Effect.void
    : Effect.suspend(() => definition.afterUnlock!(unlocked)).pipe(
      Effect.catchCause((cause) => Effect.logWarning("afterUnlock failed", cause)),
      Effect.annotateLogs({ package: "effect-unique-jobs", module: "Lock", digest: unlocked.digest, jid: unlocked.jid }),
      Effect.asVoid
    )

/**
 * Releases `target.jid`'s hold in one round trip (only the acquisition `target.fence` when given); answers whether
 * that hold was still live. False means it was gone already: expired, deleted, or (a run lock) taken over after its
 * lease passed. `afterUnlock` runs once when it was live (never for `until_expired`, which only expiry releases).
 *
 * @since 0.1.0
 * @category lock steps
 */
export const unlock = (definition: Definition, target: Target): Effect.Effect<boolean, RedisError, RedisService> =>
  withStore(definition, (redis, definition) => unlockWith(redis, definition, target))

const unlockWith = (redis: Store, definition: Definition, target: Target): Effect.Effect<boolean, RedisError> => {
  const phase = phaseOf(definition, target)
  return Effect.flatMap(
    Tracing.traced(
      "UniqueJobs.unlock",
      attributesOf("unlock", definition, target, phase),
      () =>
        redis.unlock(
          keyOf(definition, target.digest, phase),
          target.jid,
          target.fence ?? 0,
          definition.lockEvents,
          // A worker with a lockTimeout tells the waiters of its run lock of the release (one PUBLISH).
          phase === "run" && Duration.toMillis(definition.lockTimeout) > 0
        )
    ),
    (released) => released ? afterRelease(definition, target, phase) : notReleased
  )
}

const notReleased = Effect.succeed(false)
const wasReleased = Effect.succeed(true)

/** A release that found its hold live: counted, then `afterUnlock`. Answers true. @internal */
export const afterRelease = (definition: Definition, target: Target, phase: Phase): Effect.Effect<boolean> =>
  Effect.withFiber((fiber) => {
    unsafeIncrement(counter(Metrics.released, definition.lock, phase), fiber)
    return definition.afterUnlock === undefined || LockType.records[definition.lock].releasedBy === "expiry"
      ? wasReleased
      : Effect.as(
        runAfterUnlock(definition, { digest: target.digest, jid: target.jid, lockType: definition.lock, phase }),
        true
      )
  })

/**
 * The server step of `until_and_while_executing`: takes `<digest>:RUN` and releases the queue lock in one script.
 * On conflict the queue lock is kept when `keepQueueLock` (the job goes back to the queue, still unique).
 *
 * @since 0.1.0
 * @category lock steps
 */
export const handoff = (
  definition: Definition,
  target: Target,
  options: { readonly keepQueueLock: boolean }
): Effect.Effect<Acquired & { readonly queueLockHeld: boolean }, LockConflict | RedisError, RedisService> =>
  withStore(definition, (redis, definition) => handoffWith(redis, definition, target, options))

const handoffWith = (
  redis: Store,
  definition: Definition,
  target: Target,
  options: { readonly keepQueueLock: boolean }
) =>
  Effect.flatMap(
    holdCall(
      redis,
      "UniqueJobs.handoff",
      attributesOf("handoff", definition, target, "run"),
      keyOf(definition, target.digest, "run"),
      requestOf(definition, target, "run"),
      (request) =>
        redis.handoff(keyOf(definition, target.digest, "queue"), keyOf(definition, target.digest, "run"), request, {
          keepOnConflict: options.keepQueueLock
        })
    ),
    (result) => {
      const taken = settle(definition, target, "run", result, { queueLockHeld: result.queueLockHeld })
      // The script released the queue lock unless it kept it for a job going back to the queue: that release counts
      // (and runs afterUnlock) like any other.
      return result.queueLockHeld && (result._tag === "Acquired" || !options.keepQueueLock)
        ? Effect.andThen(afterRelease(definition, { ...target, phase: "queue" }, "queue"), taken)
        : taken
    }
  )

/**
 * Moves the run lock's lease forward (only the acquisition `target.fence` when given); fails with `LockLost` when the
 * hold is gone, another acquisition's, or its lease already passed. A lock held by `acquire` or `withLock` needs no
 * call of this: the process' lease keeper renews it.
 *
 * @since 0.1.0
 * @category lock steps
 */
export const renew = (definition: Definition, target: Target): Effect.Effect<void, LockLost | RedisError, RedisService> =>
  withStore(definition, (redis, definition) =>
    Effect.flatMap(
      Tracing.traced("UniqueJobs.renew", attributesOf("renew", definition, target, "run"), () =>
        redis.renew(
          keyOf(definition, target.digest, "run"),
          target.jid,
          Duration.toMillis(definition.lockLease),
          target.fence ?? 0,
          definition.lockEvents
        )),
      (renewed) =>
        renewed ? Effect.void : Effect.fail(
          new LockLost({
            digest: target.digest,
            jid: target.jid,
            lockType: definition.lock,
            reason: Keeper.renewalRefused
          })
        )
    ))

/**
 * How long before its lease could end in Redis a holder gives the lock up: a tenth of the lease, at most 2 seconds.
 * It covers the time to interrupt the perform and a small drift between the two clocks.
 *
 * @since 0.1.0
 * @category utils
 */
export const leaseGuardMs: (leaseMs: number) => number = Keeper.leaseGuardMs

const annotations = (target: Target) => ({
  package: "effect-unique-jobs",
  module: "Lock",
  digest: target.digest,
  jid: target.jid
})

// ---------------------------------------------------------------------------------------------------------------
// The queue lock of an enqueue
// ---------------------------------------------------------------------------------------------------------------

// A queue lock often has no TTL: an unlock lost to a dropped connection would keep its digest locked for good. So a
// failed release is tried again (100 ms, doubling, at most 2 s apart) for up to 30 s, which outlasts a reconnect or a
// failover; the job's outcome waits for it, and never fails because of it.
/** @internal */
export const releaseRetry = Schedule.min([Schedule.exponential("100 millis"), Schedule.spaced("2 seconds")]).pipe(
  Schedule.upTo({ duration: "30 seconds" })
)

// A run lock's release is tried again as a queue lock's is, until its lease ends: nothing renews it meanwhile, so by
// then its lease has ended it in Redis (its last renewal was sent before the release).
const runReleaseRetry = (forMs: number) =>
  Schedule.min([Schedule.exponential("100 millis"), Schedule.spaced("2 seconds")]).pipe(
    Schedule.upTo({ duration: Duration.millis(Math.max(0, forMs)) })
  )

/**
 * Releases a queue lock without failing: a release that finds nothing to release is a warning naming the likely
 * cause (a producer whose lockPrefix or digest options differ, a delete, a `lockTtl` that passed) and counts
 * `unique_jobs_release_missed_total`; one that cannot reach Redis is retried for up to 30 seconds, then logged.
 * Answers whether the hold was live. The common case, a release that works, pays for none of it.
 *
 * @since 0.1.0
 * @category lock steps
 */
export const releaseQueueLock = (definition: Definition, target: Target): Effect.Effect<boolean, never, RedisService> =>
  withStore(definition, (redis, definition) => releaseQueueLockWith(redis, definition, target))

// The lock type says this job holds its queue lock until now, yet the release found none: said and counted, since
// the likeliest cause leaves a lock behind for good (a producer that locked under other options).
const missed = (definition: Definition, target: Target): Effect.Effect<boolean> =>
  Effect.andThen(
    Metric.update(counter(Metrics.releaseMissed, definition.lock, "queue"), 1),
    Effect.logWarning(
      `releasing the queue lock of ${target.jid} found nothing to release (digest ${target.digest}). ` +
        `Likely cause: the producer's lockPrefix or digest options (lockArgs, uniqueAcrossQueues, ` +
        `uniqueAcrossWorkers, digestAlgorithm) differ from this worker's (lockPrefix "${definition.lockPrefix}"), ` +
        `so the lock it took stays and later enqueues of this job are Skipped; or the lock was deleted${
          Option.isSome(definition.lockTtl)
            ? `, or its lockTtl (${Duration.format(definition.lockTtl.value)}) passed`
            : ""
        }`
    ).pipe(Effect.as(false))
  )

/**
 * `releaseQueueLock` over a store and a resolved definition the caller already holds. `expectGone`: the lock may well
 * have been released already (a retry of an `until_executing` job released it on its first attempt), so finding
 * nothing is no warning.
 *
 * @internal
 */
export const releaseQueueLockWith = (
  redis: Store,
  definition: Definition,
  target: Target,
  expectGone = false
): Effect.Effect<boolean> =>
  Effect.matchEffect(unlockWith(redis, definition, { ...target, phase: "queue" }), {
    onSuccess: (released) => released ? wasReleased : expectGone ? notReleased : releaseMissed(definition, target),
    onFailure: () => releaseAgain(redis, definition, target)
  })

/** A queue lock's release that found nothing to release: said and counted. Answers false. @internal */
export const releaseMissed = (definition: Definition, target: Target): Effect.Effect<boolean> =>
  Effect.annotateLogs(missed(definition, target), annotations(target))

/** A queue lock's release that could not reach Redis, tried again (`releaseRetry`), then logged. @internal */
export const releaseAgain = (redis: Store, definition: Definition, target: Target): Effect.Effect<boolean> =>
  unlockWith(redis, definition, { ...target, phase: "queue" }).pipe(
    Effect.retry(releaseRetry),
    // The first call's outcome is unknown (it may have run, and timed out on the way back): which of the three ended
    // the lock cannot be told, so nothing says it was this release.
    Effect.tap((live) =>
      live ? Effect.void : Effect.logWarning(
        "a release that could not be confirmed was tried again and found the lock gone (released by the first try, " +
          "expired or deleted); it is not counted released, and afterUnlock did not run for it"
      ).pipe(Effect.annotateLogs(annotations(target)))
    ),
    Effect.catch((error) =>
      Effect.as(Effect.logWarning("could not release the queue lock; it stays until its TTL or the reaper", error), false)
        .pipe(Effect.annotateLogs(annotations(target)))
    )
  )

/**
 * Runs an enqueue holding the job's queue lock: takes it first (a held lock fails with `LockConflict` and the
 * enqueue never runs), releases it when the enqueue fails or is interrupted, and keeps it when the enqueue succeeds
 * (the job now holds it until its lock type lets it go).
 *
 * @since 0.1.0
 * @category resources
 */
export const withQueueLock: {
  (definition: Definition, target: Target): <A, E, R>(
    self: Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | LockConflict | RedisError, R | RedisService>
  <A, E, R>(
    self: Effect.Effect<A, E, R>,
    definition: Definition,
    target: Target
  ): Effect.Effect<A, E | LockConflict | RedisError, R | RedisService>
} = dual(3, <A, E, R>(self: Effect.Effect<A, E, R>, definition: Definition, target: Target) =>
  withStore(definition, (redis, definition) => queueLocked(redis, definition, target, self, Effect.fail)))

/**
 * `withQueueLock` over a store, with the conflict handled by `onConflict` (the lock's typed failure, matched by its
 * tag: never confused with a failure of `self`).
 *
 * @internal
 */
export const queueLocked = <A, E, R, B, E2, R2>(
  redis: Store,
  definition: Definition,
  target: Target,
  self: Effect.Effect<A, E, R>,
  onConflict: (conflict: LockConflict) => Effect.Effect<B, E2, R2>
): Effect.Effect<A | B, E | E2 | RedisError, R | R2> =>
  // The reply is read in one step: counted, then the enqueue (its release registered before it can be interrupted)
  // or the conflict's handler. Every enqueue pays this path, so it takes no step it does not need.
  Effect.uninterruptibleMask((restore) =>
    Effect.withFiber((fiber) =>
      Effect.flatMap(
        lockCall(redis, definition, target, "queue"),
        (result): Effect.Effect<A | B, E | E2 | RedisError, R | R2> => {
          if (result._tag === "Conflict") {
            unsafeIncrement(counter(Metrics.conflicts, definition.lock, "queue"), fiber)
            return restore(onConflict(conflictOf({
              digest: target.digest,
              jid: target.jid,
              phase: "queue",
              lockType: definition.lock,
              holders: result.holders
            })))
          }
          unsafeIncrement(counter(Metrics.acquired, definition.lock, "queue"), fiber)
          return keepIfEnqueued(redis, definition, target, restore(self))
        }
      )
    )
  )

/**
 * An enqueue made holding `target`'s queue lock (taken already): the lock is kept when it succeeds, released when it
 * fails or is interrupted. The caller makes it uninterruptible until `self` runs (`Effect.uninterruptibleMask`).
 *
 * @internal
 */
export const keepIfEnqueued = <A, E, R>(
  redis: Store,
  definition: Definition,
  target: Target,
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.onExit(self, (exit) => {
    if (Exit.isSuccess(exit)) return Effect.void
    const landing = landingOf(exit)
    // An enqueue that may still land keeps its lock until the queue answers: released only if it did not.
    return landing === undefined
      ? releaseQueueLockWith(redis, definition, target)
      : Effect.asVoid(Effect.forkDetach(
        Effect.flatMap(landing, (landed) =>
          landed ? Effect.void : Effect.asVoid(releaseQueueLockWith(redis, definition, target))),
        { uninterruptible: "inherit" }
      ))
  })

const landingOf = (exit: Exit.Exit<unknown, unknown>): Effect.Effect<boolean> | undefined => {
  if (Exit.isSuccess(exit)) return undefined
  const failure = Cause.findErrorOption(exit.cause)
  return Option.isSome(failure) && failure.value instanceof QueueError ? failure.value.landing : undefined
}

/**
 * `withQueueLock` as a scoped resource: the queue lock is released when the scope closes with a failure or an
 * interruption, and kept when it closes with a success.
 *
 * @since 0.1.0
 * @category resources
 */
export const acquireQueueLock = (
  definition: Definition,
  target: Target
): Effect.Effect<Acquired, LockConflict | RedisError, RedisService | Scope.Scope> =>
  withStore(definition, (redis, definition) =>
    Effect.acquireRelease(
      lockWith(redis, definition, { ...target, phase: "queue" }),
      (_, exit) => Exit.isSuccess(exit) ? Effect.void : releaseQueueLockWith(redis, definition, target)
    ))

// ---------------------------------------------------------------------------------------------------------------
// A lock held for a while
// ---------------------------------------------------------------------------------------------------------------

/**
 * A lock held for as long as its scope: released (and `afterUnlock` run) when the scope closes, however it
 * closes, or earlier by `release`. A run lock's lease is kept meanwhile by the process' lease keeper.
 *
 * @since 0.1.0
 * @category models
 */
export interface Held extends Acquired {
  /** Fails with `LockLost` the moment a run lock is lost; never completes for a queue lock (it has no lease). */
  readonly lost: Effect.Effect<never, LockLost>
  /**
   * Releases the lock now; the scope's release then does nothing. A run lock whose hold was already gone fails with
   * `LockLost` (another copy may have run meanwhile). A queue lock found gone ended by its own `lockTtl` or was
   * deleted: that is logged, not a failure. A release Redis does not answer (it may have run) is tried again until it
   * does, for at most one lease for a run lock (30 s for a queue lock), and `release` waits for it; one that still
   * cannot reach Redis is logged: the lease or TTL frees it.
   */
  readonly release: Effect.Effect<void, LockLost>
}

interface Holding extends Held {
  readonly lease: Keeper.Lease | undefined
}

// Takes a lock and, for a run lock, hands its lease to the keeper: the step and the registration run without an
// interruption between them, so a taken lock always has its release. A run lock is taken in its turn (the keeper's
// admission), and its lease counts from when its call was sent.
const take = <A extends Acquired, E>(
  redis: Store,
  definition: Definition,
  target: Target,
  phase: Phase,
  step: Effect.Effect<A, E>
): Effect.Effect<A & Holding, E> =>
  phase === "queue"
    ? Effect.flatMap(Clock.currentTimeMillis, (start) =>
      Effect.map(step, (acquired) => holding(redis, definition, target, phase, acquired, undefined, start)))
    : Keeper.admitted(
      redis,
      Effect.flatMap(Clock.currentTimeMillis, (start) =>
        Effect.flatMap(step, (acquired) =>
          Effect.map(
            Keeper.keep(
              redis,
              {
                lock: keyOf(definition, target.digest, "run"),
                jid: target.jid,
                leaseMs: Duration.toMillis(definition.lockLease),
                fence: acquired.fence,
                ...(definition.lockEvents ? { events: true } : {})
              },
              { digest: target.digest, lockType: definition.lock },
              start
            ),
            (lease) => holding(redis, definition, target, phase, acquired, lease, start)
          )))
    )

const holding = <A extends Acquired>(
  redis: Store,
  definition: Definition,
  target: Target,
  phase: Phase,
  acquired: A,
  lease: Keeper.Lease | undefined,
  start: number
): A & Holding => {
  const pinned: Target = { ...target, phase, fence: acquired.fence }
  let released = false
  // Unlocks once; answers whether the hold was still live, or undefined when Redis could not be reached.
  const unlockOnce = Effect.suspend(() => {
    if (released) return Effect.succeed(true as boolean | undefined)
    released = true
    if (lease !== undefined) Keeper.letGo(redis, lease)
    return unlockWith(redis, definition, pinned).pipe(
      Effect.tap(() =>
        Effect.clockWith((clock) => Metric.update(Metrics.holdTime, clock.currentTimeMillisUnsafe() - start))
      ),
      Effect.catch((error) => releaseHeldAgain(redis, definition, pinned, error, lease?.deadline))
    )
  })
  const release: Effect.Effect<void, LockLost> = Effect.flatMap(unlockOnce, (live) => {
    if (live !== false) return Effect.void
    if (phase === "queue") {
      return Effect.logDebug("the queue lock had already ended (its lockTtl passed, or it was deleted)").pipe(
        Effect.annotateLogs(annotations(target))
      )
    }
    return runLockGone(definition, target, acquired.fence, lease)
  })
  const lost: Effect.Effect<never, LockLost> = lease === undefined ? Effect.never : Effect.callback((resume) => {
    if (lease.lost !== undefined) return resume(Effect.fail(lease.lost))
    const previous = lease.onLost
    lease.onLost = (error) => {
      previous?.(error)
      resume(Effect.fail(error))
    }
  })
  return { ...acquired, lease, lost, release }
}

/** A hold's release that could not reach Redis: logged, never a failure (its TTL or lease frees it). @internal */
export const releaseUnreached = (target: Target, error: RedisError): Effect.Effect<void> =>
  Effect.logWarning("releasing the lock failed; its TTL or lease will free it", error).pipe(
    Effect.annotateLogs(annotations(target))
  )

/**
 * A held lock's release whose call failed with `error`, on either face. Without an answer the call may have run or
 * not (a timeout, a connection closed before it answered, one not sent while reconnecting): it is tried again until
 * Redis answers, so a lock is never left held by a lost answer (issue 47: a CLIENT KILL left run locks of finished jobs
 * held for their whole lease, and a new job of the digest was turned away as a duplicate meanwhile). A run lock's for
 * at most its lease's end (`deadline`, the holder's own: past it Redis has ended the hold by itself; one lease from now
 * without it), a queue lock's as `releaseRetry` says; the job's outcome waits for it, so a job is only done once its
 * lock is known to be gone. It is tried again rather than its lease kept renewed: renewing would hold the lock of a
 * finished job longer, and a renewal's answer is as unknown as the release's. A release on a fiber being interrupted
 * (a shutdown, the store closing) is not tried again: no job is done then, and its lease frees the lock.
 *
 * Answers true when a retry found the hold live (counted, `afterUnlock` run), undefined otherwise, never false: a
 * retry that finds it gone cannot tell whether the first call ended it (logged as `releaseAgain` logs it), and is no
 * `LockLost`. An answer a retry would meet again (a wrong-typed key), and retries that ran out, are logged.
 *
 * @internal
 */
export const releaseHeldAgain = (
  redis: Store,
  definition: Definition,
  target: Target,
  error: RedisError,
  deadline?: number
): Effect.Effect<boolean | undefined> => Effect.flatMap(interrupting, (interrupted) => {
  // The fiber releasing was interrupted (its finalizers run uninterruptibly: the request is read, not felt).
  if (!passes(error) || interrupted) return Effect.as(releaseUnreached(target, error), undefined)
  const phase = phaseOf(definition, target)
  return Effect.clockWith((clock) => unlockWith(redis, definition, target).pipe(
    Effect.retry({
      schedule: phase === "run"
        ? runReleaseRetry(
          deadline === undefined ? Duration.toMillis(definition.lockLease) : deadline - clock.currentTimeMillisUnsafe()
        )
        : releaseRetry,
      while: passes
    }),
    Effect.matchEffect({
      onSuccess: (live) =>
        live ? Effect.succeed(true) : Effect.as(
          Effect.logWarning(
            "a release that could not be confirmed was tried again and found the lock gone (released by the first " +
              "try, expired or deleted); it is not counted released, and afterUnlock did not run for it"
          ).pipe(Effect.annotateLogs(annotations(target))),
          undefined
        ),
      onFailure: (error) => Effect.as(releaseUnreached(target, error), undefined)
    })
  ))
})

// Whether the current fiber has been asked to stop: a finalizer runs uninterruptibly, so an interruption is pending
// rather than felt. Opening an interruptible region surfaces a pending one (and nothing else), caught here at once.
const interrupting: Effect.Effect<boolean> = Effect.map(Effect.exit(Effect.interruptible(Effect.void)), Exit.isFailure)

/**
 * A run lock's release that found its hold gone: another copy may have run meanwhile. The keeper's loss when it saw it
 * first (counted and logged already), else a `LockLost` counted and logged here.
 *
 * @internal
 */
export const runLockGone = (
  definition: Definition,
  target: Target,
  fence: number,
  lease: Keeper.Lease | undefined
): Effect.Effect<never, LockLost> => {
  if (lease?.lost !== undefined) return Effect.fail(lease.lost)
  const lost = new LockLost({
    digest: target.digest,
    jid: target.jid,
    lockType: definition.lock,
    reason: `the release found the hold gone (its lease passed or it was deleted)${fence ? `; fence ${fence}` : ""}`
  })
  return Effect.andThen(
    Effect.andThen(
      Metric.update(counter(Metrics.lost, definition.lock, "run"), 1),
      Effect.logWarning(lost.message).pipe(Effect.annotateLogs(annotations(target)))
    ),
    Effect.fail(lost)
  )
}

const takeFor = (redis: Store, definition: Definition, target: Target) => {
  const phase = phaseOf(definition, target)
  return take(redis, definition, target, phase, lockWith(redis, definition, { ...target, phase }))
}

/**
 * Takes the lock as a scoped resource; a run lock's lease is kept until the scope closes.
 *
 * @since 0.1.0
 * @category resources
 */
export const acquire = (
  definition: Definition,
  target: Target
): Effect.Effect<Held, LockConflict | RedisError, RedisService | Scope.Scope> =>
  withStore(definition, (redis, definition) =>
    Effect.acquireRelease(takeFor(redis, definition, target), (held) => Effect.ignore(held.release)))

/**
 * `handoff` as a scoped resource: the run lock is held (and its lease kept) until the scope closes.
 *
 * @since 0.1.0
 * @category resources
 */
export const acquireHandoff = (
  definition: Definition,
  target: Target,
  options: { readonly keepQueueLock: boolean }
): Effect.Effect<Held & { readonly queueLockHeld: boolean }, LockConflict | RedisError, RedisService | Scope.Scope> =>
  withStore(definition, (redis, definition) =>
    Effect.acquireRelease(
      take(redis, definition, target, "run", handoffWith(redis, definition, target, options)),
      (held) => Effect.ignore(held.release)
    ))

/**
 * What a perform is told about the lock it runs under.
 *
 * @since 0.1.0
 * @category models
 */
export interface Running {
  readonly digest: string
  readonly jid: string
  /**
   * The run lock's fencing token (`Acquired.fence`); undefined for lock types that hold no run lock. Pass it to the
   * stores the job writes to, and have them refuse a write whose token is lower than one they have seen.
   */
  readonly fence: number | undefined
}

/**
 * A perform: an effect, or a function of the lock it runs under (`running.fence` is the run lock's fencing token).
 *
 * @since 0.1.0
 * @category models
 */
export type Perform<A, E, R> = Effect.Effect<A, E, R> | ((running: Running) => Effect.Effect<A, E, R>)

/**
 * Runs `self` holding the lock: released when `self` ends, fails, or is interrupted. If the run lock is lost
 * meanwhile, `self` is interrupted and the result is a `LockLost` failure; a release that finds the run lock already
 * gone is a `LockLost` failure too.
 *
 * @since 0.1.0
 * @category resources
 */
export const withLock: {
  (definition: Definition, target: Target): <A, E, R>(
    self: Perform<A, E, R>
  ) => Effect.Effect<A, E | LockConflict | LockLost | RedisError, R | RedisService>
  <A, E, R>(
    self: Perform<A, E, R>,
    definition: Definition,
    target: Target
  ): Effect.Effect<A, E | LockConflict | LockLost | RedisError, R | RedisService>
} = dual(3, <A, E, R>(self: Perform<A, E, R>, definition: Definition, target: Target) =>
  withStore(definition, (redis, definition) => holdWhile(takeFor(redis, definition, target), self, Effect.fail)))

/**
 * What a run-lock take waits for when it meets the lock held (`lockTimeout`): the store, the lock, its limit, and for
 * how long at most.
 *
 * @internal
 */
export interface Wait {
  readonly redis: Store
  readonly lock: LockKey
  readonly limit: number
  readonly timeoutMs: number
  /** The lock type, the waits' metrics' `lock_type`. */
  readonly lockType: string
}

/** The `Wait` of `definition`'s run lock of `digest`; undefined when its `lockTimeout` is 0 (nothing waits). @internal */
export const waitOf = (redis: Store, definition: Definition, digest: string): Wait | undefined => {
  const timeoutMs = Duration.toMillis(definition.lockTimeout)
  return timeoutMs > 0
    ? {
      redis,
      lock: keyOf(definition, digest, "run"),
      limit: definition.lockLimit,
      timeoutMs,
      lockType: definition.lock
    }
    : undefined
}

// The holders fetch reads to time a crashed holder's end: the first page is enough (the wake is a fallback).
const horizonPage = { cursor: "0", count: 100, bytes: 64 } as const

// When the store says a place is free but the try finds none (never expected: both judge by Redis time), the next
// try waits for a signal or this long at most, so a disagreement costs a call a second, never a loop of calls.
const disagreedMs = 1_000

/**
 * When the lock may have a free place for `jid`, in ms from now by the store's answer: 0 when it has one already, the
 * earliest end of a holder's lease or expiry otherwise, undefined when no holder's end is known (only a release
 * frees it) or the store cannot be read. A live entry of `jid`'s own (a redelivered copy still running) is no place.
 */
const freeIn = (wait: Wait, jid: string): Effect.Effect<number | undefined> =>
  Effect.match(wait.redis.fetch(wait.lock, horizonPage), {
    onFailure: () => undefined,
    onSuccess: (fetched) => {
      let live = 0
      let own = false
      let earliest: number | undefined
      for (const holder of fetched.holders) {
        if (holder.foreign !== undefined) continue
        const ends = [holder.expiresAt, holder.leaseUntil].filter((at): at is number => at !== undefined && at > 0)
        const end = ends.length === 0 ? undefined : Math.min(...ends)
        if (end !== undefined && end <= fetched.now) continue
        live++
        if (holder.jid === jid) own = true
        if (end !== undefined && (earliest === undefined || end < earliest)) earliest = end
      }
      if (!own && live < wait.limit && fetched.size <= fetched.holders.length) return 0
      return earliest === undefined ? undefined : earliest - fetched.now + 1
    }
  })

const isConflict = (error: LockConflict | RedisError): error is LockConflict => error._tag === "LockConflict"

/** How a wait ended (`Metrics.lockWaits`' `outcome`); `unsupported` (a store with no release signals) counts none. */
type WaitEnd = "taken" | "timed_out" | "full" | "closed" | "interrupted" | "failed" | "unsupported"

// Counted when a wait ends, never on a first try that takes the lock: the no-conflict path pays nothing. A wait refused
// as it starts (`lined` false) is counted, not timed.
const recordWait = <H>(
  wait: Wait,
  start: number,
  lined: boolean,
  ended: WaitEnd,
  exit: Exit.Exit<H, LockConflict | RedisError>
): Effect.Effect<void> => {
  const outcome: WaitEnd = Exit.isSuccess(exit)
    ? "taken"
    : Cause.hasInterruptsOnly(exit.cause)
    ? "interrupted"
    : Option.exists(Cause.findErrorOption(exit.cause), isConflict)
    ? ended
    : "failed"
  if (outcome === "unsupported") return Effect.void
  const counted = Metric.update(Metrics.lockWaits.of(wait.lockType, outcome), 1)
  return lined
    ? Effect.andThen(
      counted,
      Effect.clockWith((clock) => Metric.update(Metrics.waitTime, clock.currentTimeMillisUnsafe() - start))
    )
    : counted
}

/**
 * `take` once more each time the lock is released, for at most `wait.timeoutMs` after its first conflict
 * (`lockTimeout`). The job lines up among this process' waiters for the lock (store/ReleaseWaits): a release
 * signal wakes the first in line, which tries once; a lost try goes back to the front. Without a signal (a holder
 * that crashed publishes none) it tries when the earliest holder's lease or expiry ends, as one read of the holders
 * tells (after each conflict: the subscription is made before it, so a release after it is heard). The last conflict
 * is the answer when the wait ends without the lock (its deadline, the store closing, a line too long, a store with
 * no release signals). The waits are interruptible (`restore`); the tries are not (a taken lock always gets its
 * release).
 */
const waiting = <H extends Held>(
  take: Effect.Effect<H, LockConflict | RedisError>,
  wait: Wait,
  restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
): Effect.Effect<H, LockConflict | RedisError> =>
  Effect.catchIf(take, isConflict, (first) =>
    Effect.flatMap(Clock.currentTimeMillis, (start) => {
      // Why a wait that ends on a conflict ended: its deadline, unless a step below says otherwise.
      let ended: WaitEnd = "timed_out"
      let lined = true
      const deadline = start + wait.timeoutMs
      const remaining = <A>(f: (left: number) => Effect.Effect<A, LockConflict | RedisError>, conflict: LockConflict) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => now >= deadline ? Effect.fail(conflict) : f(deadline - now))
      const loop = (
        member: Waits.Member,
        conflict: LockConflict,
        front: boolean,
        eager: boolean
      ): Effect.Effect<H, LockConflict | RedisError> => {
        const retry = (wasEager: boolean) =>
          Effect.suspend(() => {
            member.spend()
            return Effect.catchIf(take, isConflict, (again) => loop(member, again, true, !wasEager))
          })
        return remaining((left) =>
          Effect.flatMap(restore(Effect.timeoutOption(freeIn(wait, conflict.jid), left)), (free) => {
            const known = Option.getOrUndefined(free)
            if (known === 0 && eager) return retry(true)
            return remaining((left) => {
              const until = known === undefined ? left : Math.min(left, known === 0 ? disagreedMs : known)
              return Effect.flatMap(restore(Effect.timeoutOption(member.turn(front), until)), (turn) =>
                Option.isSome(turn)
                  ? turn.value === "signal" ? retry(false) : Effect.suspend(() => {
                    ended = "closed"
                    return Effect.fail(conflict)
                  })
                  // The earliest holder's end has come (it may have crashed): try, unless the deadline has come.
                  : until < left
                  ? retry(false)
                  : Effect.fail(conflict))
            }, conflict)
          }), conflict)
      }
      return Effect.onExit(
        Effect.acquireUseRelease(
          Waits.join(wait.redis, wait.lock),
          (member) => {
            if (typeof member === "string") {
              ended = member
              lined = false
              return Effect.fail(first)
            }
            // Subscribed before the store is read: a release after the read reaches this process.
            return Effect.flatMap(
              restore(Effect.timeoutOption(Effect.promise(() => member.ready), Math.max(0, deadline - start))),
              (ready) => {
                if (Option.isSome(ready) && ready.value) return loop(member, first, false, true)
                // Not subscribed by the deadline (timed out), refused by Redis, or ended by the store's close meanwhile.
                if (Option.isSome(ready)) ended = Waits.closed(wait.redis) ? "closed" : "failed"
                return Effect.fail(first)
              }
            )
          },
          (member) => typeof member === "string" ? Effect.void : member.leave
        ),
        (exit) => recordWait(wait, start, lined, ended, exit)
      )
    }))

/**
 * Runs `self` under the lock `take` takes, then releases it (also on failure or interruption). With a `wait`, a
 * conflict first waits for the lock's release (`lockTimeout`) and takes it then.
 *
 * @internal
 */
export const holdWhile = <H extends Held, A, E, R, B, E2, R2>(
  take: Effect.Effect<H, LockConflict | RedisError>,
  self: Perform<A, E, R>,
  onConflict: (conflict: LockConflict) => Effect.Effect<B, E2, R2>,
  wait?: Wait
): Effect.Effect<A | B, E | E2 | RedisError | LockLost, R | R2> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.matchEffect(wait === undefined ? take : waiting(take, wait, restore), {
      onFailure: (error): Effect.Effect<B, E2 | RedisError, R2> =>
        error._tag === "LockConflict" ? restore(onConflict(error)) : Effect.fail(error),
      // A perform that succeeded has been released already (runHolding ends with the release); any other end is
      // released here (a second release does nothing).
      onSuccess: (held) =>
        Effect.onExit(
          restore(runHolding(held, self)),
          (exit) => Exit.isSuccess(exit) ? Effect.void : Effect.ignore(held.release)
        )
    })
  )

/** @internal */
export const takeRunLock = (redis: Store, definition: Definition, target: Target) =>
  take(redis, definition, target, "run", lockWith(redis, definition, { ...target, phase: "run" }))

/** @internal */
export const takeHandoff = (
  redis: Store,
  definition: Definition,
  target: Target,
  options: { readonly keepQueueLock: boolean }
) => take(redis, definition, target, "run", handoffWith(redis, definition, target, options))

/**
 * The fiber a queue's processor runs one job on, from its start to its end (`BullMQ.processorWith` makes one per
 * job). The first run lock held on it lets a loss interrupt that fiber itself rather than run the perform in a fiber
 * of its own: a fork per perform cost a run-lock job about 19 µs of Node CPU, half of its Node-side cost (bench/).
 * `lost` then tells the processor why its fiber was interrupted, and it answers as the fork's join would have.
 *
 * @internal
 */
export interface Boundary {
  readonly fiber: Fiber.Fiber<unknown, unknown>
  /** Taken by the first hold on the fiber: a hold nested in its perform forks, so its loss stays its own. */
  taken: boolean
  lost: LockLost | undefined
}

/** @internal */
export const currentBoundary: Context.Reference<Boundary | undefined> = Context.Reference<Boundary | undefined>(
  "effect-unique-jobs/Lock/currentBoundary",
  { defaultValue: () => undefined }
)

/**
 * Runs a perform under a held lock, then releases it, so a release that finds the hold gone is a `LockLost` too.
 * Under a run lock the perform runs in a fiber of its own, which the lease keeper interrupts if the lock is lost:
 * the result is then that `LockLost`. On a processor's own fiber (a `Boundary`) the perform runs on that fiber, and
 * the keeper interrupts the fiber.
 *
 * @since 0.1.0
 * @category resources
 */
export const runHolding = <A, E, R>(held: Held, self: Perform<A, E, R>): Effect.Effect<A, E | LockLost, R> => {
  const running: Running = { digest: held.digest, jid: held.jid, fence: held.phase === "run" ? held.fence : undefined }
  const perform = Effect.isEffect(self) ? self : Effect.suspend(() => self(running))
  const lease = (held as Partial<Holding>).lease
  if (held.phase === "queue") return Effect.tap(perform, () => held.release)
  if (lease === undefined) return Effect.tap(Effect.raceFirst(perform, held.lost), () => held.release)
  // Lost between the acquisition and now, or answered too late to count as held: the perform never starts.
  return Effect.flatMap(Keeper.check(lease), (lost) => {
    if (lost !== undefined) return Effect.andThen(Effect.ignore(held.release), Effect.fail(lost))
    return Effect.withFiber((current) => {
      // Lost since the check (the fiber yielded in between): nothing would tell the perform.
      if (lease.lost !== undefined) return Effect.andThen(Effect.ignore(held.release), Effect.fail(lease.lost))
      const previous = lease.onLost
      const boundary = current.getRef(currentBoundary)
      if (boundary !== undefined && boundary.fiber === current && !boundary.taken) {
        boundary.taken = true
        lease.onLost = (lost) => {
          previous?.(lost)
          boundary.lost = lost
          current.interruptUnsafe(current.id)
        }
        return Effect.tap(perform, () => held.release)
      }
      return Effect.tap(
        Effect.flatMap(Effect.forkChild(perform, { uninterruptible: "inherit" }), (fiber) => {
          lease.onLost = (lost) => {
            previous?.(lost)
            fiber.interruptUnsafe(fiber.id)
          }
          return Effect.flatMap(
            Effect.onInterrupt(Fiber.await(fiber), () => Fiber.interrupt(fiber)),
            (exit): Effect.Effect<A, E | LockLost> =>
              lease.lost !== undefined && Exit.hasInterrupts(exit) ? Effect.fail(lease.lost) : exit
          )
        }),
        () => held.release
      )
    })
  })
}
