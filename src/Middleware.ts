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
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"
import { Defaults, resolve } from "./Defaults.js"
import type * as Digest from "./Digest.js"
import type { ExecutionConflict, LockConflict, LockLost } from "./Errors.js"
import type { DuplicateJob } from "./Errors.js"
import type { Job } from "./Job.js"
import { JobQueue } from "./JobQueue.js"
import type { QueueError } from "./JobQueue.js"
import * as Tracing from "./observability/Tracing.js"
import * as Lock from "./Lock.js"
import * as LockType from "./LockType.js"
import * as Metrics from "./Metrics.js"
import type * as Options from "./Options.js"
import type { Definition } from "./Options.js"
import type { RedisError, Store } from "./Redis.js"
import { RedisService } from "./Redis.js"
import * as Strategy from "./Strategy.js"

const annotations = { package: "effect-unique-jobs", module: "Middleware" }

/** The digest computed at enqueue travels in the job; only a job that never met the client computes it here. */
const digestOf = (definition: Definition, job: Job): Effect.Effect<string, Digest.DigestError> =>
  job.lockDigest !== undefined ? Effect.succeed(job.lockDigest) : Lock.digestWith(definition, job)

/** What a hold keeps of its job for the admin UI: its worker, queue and arguments. @internal */
export const infoOf = (job: Job) => ({ worker: job.worker, queue: job.queue, args: job.args })


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
  Effect.withFiber((fiber) => {
    const context = fiber.context as Context.Context<RedisService>
    const settings = Context.get(context, Defaults)
    const resolved = resolve(definition, settings)
    const phase = f(Context.get(context, RedisService), resolved, settings.enabled)
    // A phase runs in a span only under a tracer that exports it (OpenTelemetry, or any installed with
    // Layer.setTracer): a span costs more Node CPU than a lock call.
    if (job === undefined || fiber.getRef(Tracer.Tracer) === Tracing.builtInTracer) return phase
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
    if (Option.isSome(definition.debounce)) return debounced(redis, definition, definition.debounce.value, stamped, enqueue)
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

/**
 * Releases the queue locks of the holders a replace freed, and answers those it replaced: a holder whose entry was gone
 * by its release had let go itself (its job started, or ran, after all), so it was not replaced.
 */
const releaseReplaced = (definition: Definition, target: Lock.Target, holders: ReadonlyArray<string>) =>
  Effect.map(
    Effect.forEach(holders, (jid) => Lock.unlock(definition, { ...target, jid })),
    (released) => holders.filter((_, i) => released[i])
  )

/**
 * A conflict at enqueue, as the client strategy says. Its `replace` releases the holders' places (their jobs are
 * gone) and tries once more: another duplicate may take the freed place first, and this one is the duplicate then.
 * `replace([])` waits for a holder caught starting (`Strategy.client.replace`) and tries again: a new conflict goes
 * to the strategy again, at most `startRetries` times, the waits doubling from `startRetryMs`.
 *
 * @internal
 */
export const clientConflict = <A, E, R>(
  redis: Store,
  definition: Definition,
  stamped: Job,
  target: Lock.Target,
  enqueue: (job: Job) => Effect.Effect<A, E, R>,
  retried = 0
) =>
(conflict: LockConflict): Effect.Effect<Strategy.ClientOutcome<A>, E | ClientError, R | RedisService | JobQueue> => {
  const skipped = (again: LockConflict) =>
    Effect.succeed(Strategy.skipped({ conflict: again, job: stamped }) as Strategy.ClientOutcome<A>)
  const replace = (holders: ReadonlyArray<string>) =>
    holders.length === 0
      ? retried >= startRetries
        ? skipped(conflict)
        : Effect.andThen(
          Effect.sleep(startRetryMs * 2 ** retried),
          Lock.queueLocked(
            redis,
            definition,
            target,
            Effect.map(enqueue(stamped), (value) => Strategy.ClientOutcome.Enqueued({ digest: target.digest, job: stamped, value })),
            clientConflict(redis, definition, stamped, target, enqueue, retried + 1)
          )
        )
      : Effect.flatMap(releaseReplaced(definition, target, holders), (replaced) =>
        Lock.queueLocked(
          redis,
          definition,
          target,
          Effect.map(enqueue(stamped), (value) =>
            replaced.length === 0
              ? Strategy.ClientOutcome.Enqueued({ digest: target.digest, job: stamped, value })
              : Strategy.ClientOutcome.Replaced({ digest: target.digest, job: stamped, replaced, value })),
          skipped
        ))
  return Strategy.clientStrategy(definition.onConflict.client)({ conflict, job: stamped, replace })
}

// A holder caught starting lets its queue lock go (or is moved back to delayed) within a round trip or two of its
// worker; these waits (10 ms doubling, 630 ms in all) cover a slow worker, and bound a holder that does not let go.
const startRetries = 6
const startRetryMs = 10

// Debounce (`Options.debounce`): the job runs `delay` after this enqueue, never past `maxWait` after its window's
// first trigger, wherever that trigger ran. The window lives with the lock: each holder's entry keeps its window's start
// and due time (`Lock.Target.window`, `due`), and an enqueue that meets a waiting job takes its place in one script
// call (`Lock.Target.swap`): the place goes from holder to holder, its window with it, and no other producer can take
// it, or open a window of its own, in between. A conflict reads the holders' entries, then asks the queue: a job still
// waiting is removed; one the queue no longer has was removed by a concurrent enqueue, is still on its way to the
// queue (its producer will find its place taken and remove it, `Lock.confirmQueueLock`; one that landed already due
// and started first is skipped by `server`), or ran or was removed long ago. Its window is kept while its job is not
// yet due (the first three), else a new window opens. The swap holds only if every entry is as read: a refused swap
// reads again (`swapRetries`). A job caught starting is waited for (`startRetries`), then a new window opens.
const debounced = <A, E, R>(
  redis: Store,
  definition: Definition,
  debounce: Options.Debounce,
  stamped: Job,
  enqueue: (job: Job) => Effect.Effect<A, E, R>
): Effect.Effect<Strategy.ClientOutcome<A>, E | ClientError, R | RedisService | JobQueue> => {
  const digest = stamped.lockDigest!
  // waits: sleeps so far (a job starting or due); swaps: reads so far; window: the one this try keeps (undefined: a new
  // one); swap: the holders this try takes the place of; ours: the jobs this enqueue removed, in any try.
  const attempt = (
    waits: number,
    swaps: number,
    window: number | undefined,
    swap: ReadonlyArray<{ readonly jid: string; readonly lockedAt: number }>,
    ours: ReadonlyArray<string>
  ): Effect.Effect<Strategy.ClientOutcome<A>, E | ClientError, R | RedisService | JobQueue> =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => {
      const since = Math.min(window ?? now, now)
      const bound = Option.match(debounce.maxWait, {
        onNone: () => Infinity,
        onSome: (maxWait) => since + Duration.toMillis(maxWait)
      })
      const at = Math.max(now, Math.min(now + Duration.toMillis(debounce.delay), bound))
      const job: Job = { ...stamped, at }
      const target: Lock.Target = {
        digest,
        jid: job.jid,
        phase: "queue",
        delay: at - now,
        info: infoOf(job),
        window: since,
        due: at,
        swap
      }
      const replaced = swap.map((held) => held.jid)
      const taken = Effect.flatMap(enqueue(job), (value) =>
        Effect.as(
          confirmed(target),
          replaced.length === 0
            ? Strategy.ClientOutcome.Enqueued({ digest, job, value })
            : Strategy.ClientOutcome.Replaced({ digest, job, replaced, value })
        ))
      const skipped = (conflict: LockConflict) =>
        Effect.succeed(Strategy.skipped({ conflict, job }) as Strategy.ClientOutcome<A>)
      return Lock.queueLocked(redis, definition, target, taken, (conflict) => {
        // A swap refused with nobody holding: the holders it named let go (their jobs started); the lock is free.
        if (conflict.holders.length === 0) {
          return swaps >= swapRetries ? skipped(conflict) : attempt(waits, swaps + 1, undefined, [], ours)
        }
        if (swaps >= swapRetries) return skipped(conflict)
        // Uninterruptible from the removal to the swap (as Strategy.client.replace): a removed job keeps its place
        // until this enqueue takes it.
        return Effect.uninterruptibleMask((restore) =>
          Effect.flatMap(Lock.windowHolders(redis, definition, digest), (entries) =>
            Effect.flatMap(overdue(entries, conflict.holders, job.queue), (due) =>
              due && waits < startRetries
                ? restore(wait(waits, swaps, ours))
                : Effect.flatMap(Strategy.placesOf(conflict.holders, job.queue), ({ freed, removed, starting }) => {
              const removedNow = [...ours, ...removed]
              const read = entries.filter((entry) => freed.includes(entry.jid))
              // Freed, but let go or swapped by another enqueue before the read: the place has moved on; try again.
              if (freed.length > 0 && read.length === 0) return restore(attempt(waits, swaps + 1, undefined, [], removedNow))
              if (read.length > 0) {
                return Effect.flatMap(Clock.currentTimeMillis, (now) => {
                  // A job this enqueue removed, or one gone before it was due (another enqueue removed it, or it is on
                  // its way to the queue): its window stands. One gone once due is another enqueue's removal about to
                  // be swapped (waited for), or, once the waits are spent, a job run or removed by hand: a new window.
                  const stands = (entry: Lock.WindowHolder) =>
                    removedNow.includes(entry.jid) || (entry.due !== undefined && entry.due > now)
                  if (waits < startRetries && !read.every(stands)) return restore(wait(waits, swaps, removedNow))
                  const next = read.map((entry) => ({ jid: entry.jid, lockedAt: entry.lockedAt }))
                  return restore(attempt(waits, swaps + 1, Lock.windowOf(read, stands), next, removedNow))
                })
              }
              // until_executed holds its place while its job runs: only a type that lets go at the start is waited for.
              return starting && LockType.letsGoAtStart(definition.lock) && waits < startRetries
                ? restore(wait(waits, swaps, removedNow))
                : skipped(conflict)
            }))))
      })
    })
  const wait = (waits: number, swaps: number, ours: ReadonlyArray<string>) =>
    Effect.andThen(Effect.sleep(startRetryMs * 2 ** waits), attempt(waits + 1, swaps, undefined, [], ours))
  // A window past its bound has a job due: a trigger now is the next window's, so the due job is left to run (a
  // worker takes it within a poll) and the trigger waits for it to start, as for a job caught starting; replacing it
  // again and again would put its run off as long as triggers come. Only for a type that lets go at the start (for
  // until_executed the trigger would then meet the run and be skipped), and only a job the queue still has.
  const overdue = (entries: ReadonlyArray<Lock.WindowHolder>, holders: ReadonlyArray<string>, queue: string) =>
    LockType.letsGoAtStart(definition.lock)
      ? Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const due = entries.filter((entry) => holders.includes(entry.jid) && entry.due !== undefined && entry.due <= now)
        return due.length === 0
          ? Effect.succeed(false)
          : Effect.flatMap(JobQueue, (jobs) =>
            Effect.map(jobs.exists(due.map((entry) => ({ jid: entry.jid, queue }))), (presence) =>
              presence.includes("exists")))
      })
      : Effect.succeed(false)
  // Once the job is in the queue: a place taken meanwhile by a later enqueue (which took this job for gone, not yet in
  // the queue) leaves the job uncovered, and it is removed. Never fails the enqueue: its job and lock stand as they are.
  const confirmed = (target: Lock.Target) =>
    Lock.confirmQueueLock(redis, definition, target).pipe(
      Effect.flatMap((kept) =>
        kept ? Effect.void : Effect.flatMap(JobQueue, (queue) => Effect.asVoid(queue.remove(target.jid)))
      ),
      Effect.catch((error) =>
        Effect.logDebug("debounce: the hold could not be confirmed after the enqueue", error).pipe(
          Effect.annotateLogs({ ...annotations, digest, jid: target.jid })
        )
      )
    )
  return attempt(0, 0, undefined, [], [])
}

// A refused swap (another enqueue swapped or confirmed between the read and the swap) reads again: each refusal is
// another enqueue's progress, so this bounds one enqueue's bad luck under many producers, not a wait.
const swapRetries = 50

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

/**
 * A conflict on the server: the strategy's outcome. A job turned away under the handoff has kept its queue lock when
 * the strategy said it would (it goes back to the queue); one dropped against that word gives it up here.
 *
 * @internal
 */
export const afterConflict = (
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
    if (!enabled) return Effect.map(bare(perform, job, ""), (value) => Strategy.ServerOutcome.Performed({ digest: "", job, value }))
    const digest = job.lockDigest ?? Lock.digestNow(definition, job)
    if (typeof digest !== "string") return Effect.fail(digest)
    // Every job pays what is made here: only what its lock type's phase uses is made (no closure for the others).
    const performed = (value: A) => Strategy.ServerOutcome.Performed({ digest, job, value })
    // A run lock's entry keeps the job's info only under lockInfo (a queue lock's release reads none).
    const target: Lock.Target = definition.lockInfo ? { digest, jid: job.jid, info: infoOf(job) } : { digest, jid: job.jid }
    // A debounced job whose place a later trigger took while it was on its way to the queue, landed already due and
    // started before its producer could remove it (Lock.confirmQueueLock): superseded, it never runs. Another job
    // holds its place, or none does and the swap's record names it (the one that took its place started already). A
    // retry is its window's run, begun; a lock no swap took from it runs as it would (its TTL passed, or deleted).
    if (Option.isNone(definition.debounce) || (job.retryCount ?? 0) > 0) {
      return phases(redis, definition, job, perform, digest, target, performed)
    }
    const run = phases(redis, definition, job, perform, digest, target, performed)
    const superseded = (holders: ReadonlyArray<string>) =>
      Effect.succeed(Strategy.ServerOutcome.Skipped({ digest, job, holders }))
    return Effect.flatMap(Lock.windowHolders(redis, definition, digest), (entries) => {
      const holders = entries.map((entry) => entry.jid)
      if (holders.includes(job.jid)) return run
      if (holders.length > 0) return superseded(holders)
      return Effect.flatMap(
        Lock.wasReplaced(redis, definition, digest, job.jid),
        (replaced) => replaced ? superseded(holders) : run
      )
    })
  })

// The steps of the job's lock type around its perform.
const phases = <A, E, R>(
  redis: Store,
  definition: Definition,
  job: Job,
  perform: Perform<A, E, R>,
  digest: string,
  target: Lock.Target,
  performed: (value: A) => Strategy.ServerOutcome<A>
): Effect.Effect<Strategy.ServerOutcome<A>, E | ServerError, R | RedisService | JobQueue> => {
  const record = LockType.records[definition.lock]
  switch (record.beforePerform) {
    case "releaseQueueLock":
      // A retry of a type that releases before its perform released on its first attempt: a miss is expected.
      return Effect.andThen(
        Lock.releaseQueueLockWith(redis, definition, target, (job.retryCount ?? 0) > 0),
        Effect.map(bare(perform, job, digest), performed)
      )
    case "none":
      return record.afterPerform === "releaseQueueLockOnSuccess"
        ? Effect.flatMap(
          bare(perform, job, digest),
          (value) => Effect.as(Lock.releaseQueueLockWith(redis, definition, target), performed(value))
        )
        : Effect.map(bare(perform, job, digest), performed)
    case "takeRunLock":
      return heldWhile(
        definition,
        job,
        perform,
        performed,
        Lock.takeRunLock(redis, definition, { ...target, phase: "run" }),
        false,
        Lock.waitOf(redis, definition, digest)
      )
    case "handoff": {
      const wait = Lock.waitOf(redis, definition, digest)
      // A job that waits keeps its queue lock while it waits (each try is a handoff); the strategy's word is
      // kept when the wait ends without the run lock (afterConflict releases the queue lock of a dropped job).
      const keepQueueLock = wait !== undefined || Strategy.keepsQueueLock(definition.onConflict.server)
      return heldWhile(
        definition,
        job,
        perform,
        performed,
        Effect.tap(Lock.takeHandoff(redis, definition, target, { keepQueueLock }), (taken) =>
          taken.queueLockHeld || (job.retryCount ?? 0) > 0 ? Effect.void : lapsed(definition, digest, job)),
        keepQueueLock,
        wait
      )
    }
  }
}

// The perform with no lock around it.
const bare = <A, E, R>(perform: Perform<A, E, R>, job: Job, digest: string): Effect.Effect<A, E, R> =>
  Effect.isEffect(perform) ? perform : Effect.suspend(() => perform({ digest, jid: job.jid, fence: undefined }))

// The perform under the run lock `take` takes. lockTimeout (`wait`): a held run lock is waited for, and taken once
// released, before the strategy has the conflict.
const heldWhile = <A, E, R>(
  definition: Definition,
  job: Job,
  perform: Perform<A, E, R>,
  performed: (value: A) => Strategy.ServerOutcome<A>,
  take: Effect.Effect<Lock.Held, LockConflict | RedisError>,
  keptQueueLock: boolean,
  wait: Lock.Wait | undefined
) =>
  Lock.holdWhile(
    take,
    Effect.isEffect(perform)
      ? Effect.map(perform, performed)
      : (running: Lock.Running) => Effect.map(perform(running), performed),
    (conflict) => afterConflict(definition, job, conflict, keptQueueLock),
    wait
  )

const lapsed = (definition: Definition, digest: string, job: Job) =>
  Effect.andThen(
    Metric.update(Metrics.uniquenessLapsed.of(definition.lock, "queue"), 1),
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
 * other duplicate, unless `lockTimeout` is set: a job whose run lock is held then waits up to that long for its release
 * (woken by it, never by polling) and takes it, and only a wait that ends without it goes to the strategy. A run lock
 * lost while the perform runs interrupts it with `LockLost`; one found gone when it is
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

const awaiting = {
  reschedule: new WeakMap<Definition, Definition>(),
  raise: new WeakMap<Definition, Definition>()
}

/**
 * `definition`, its server strategy turned for a copy the queue redelivered while its first copy still holds the run
 * lock (a run lock held only by the job's own jid: a worker stalled, cut off or killed). Whatever the strategy says of
 * duplicates, the copy is not one: dropping it (`log`) or killing it (`reject`) would lose the job if the first copy is
 * dead. It is answered with `itself` instead: `reschedule` (BullMQ: moved to delayed under its id) or `raise` (a queue
 * that retries a failure by its own schedule). One wrapped definition per definition.
 *
 * @internal
 */
export const awaitingItself = (definition: Definition, itself: "reschedule" | "raise"): Definition => {
  let wrapped = awaiting[itself].get(definition)
  if (wrapped === undefined) {
    const configured = Strategy.serverStrategy(definition.onConflict.server)
    const onItself = Strategy.serverStrategy(itself)
    const server = Strategy.makeServer(
      { keepsQueueLock: Strategy.keepsQueueLock(configured) },
      (conflict) =>
        conflict.conflict.holders.every((holder) => holder === conflict.job.jid) ? onItself(conflict) : configured(conflict)
    )
    wrapped = { ...definition, onConflict: { ...definition.onConflict, server } }
    awaiting[itself].set(definition, wrapped)
  }
  return wrapped
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
