/**
 * An in-process job queue: ready jobs, delayed jobs on Effect's Clock (so `TestClock` drives them), retries with
 * the same jid, a dead set, and workers with a concurrency. The embedded default for the demo and for users' own
 * tests; it implements the `JobQueue` port.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberSet from "effect/FiberSet"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import type { Job } from "../Job.js"
import { type JobDetails, JobQueue, type Presence, previewBytes, QueueError, reasonOf } from "../JobQueue.js"
import { endingOf } from "../Strategy.js"

/**
 * Something that happened to a job, with the Clock's time. A handler that returns the server middleware's
 * `Skipped`, `Rescheduled` or `Rejected` outcome records that instead of `succeeded`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Event {
  readonly at: number
  readonly type:
    | "pushed"
    | "scheduled"
    | "started"
    | "succeeded"
    | "skipped"
    | "rescheduled"
    | "rejected"
    | "failed"
    | "retried"
    | "dead"
    | "removed"
  readonly job: Job
  readonly detail?: string | undefined
}

/**
 * The queue's state, and how the handler's runs ended so far.
 *
 * @since 0.1.0
 * @category models
 */
export interface Snapshot {
  readonly ready: ReadonlyArray<Job>
  readonly scheduled: ReadonlyArray<{ readonly job: Job; readonly at: number }>
  readonly running: ReadonlyArray<Job>
  readonly dead: ReadonlyArray<{ readonly job: Job; readonly reason: string; readonly at: number }>
  /** Runs that did the work: the middleware's `Performed`, or any value of a plain handler. */
  readonly succeeded: number
  /** Runs the server middleware skipped as a duplicate execution (`Skipped`). */
  readonly skipped: number
  /** Runs the server middleware put back on the schedule (`Rescheduled`). */
  readonly rescheduled: number
  /** Runs the server middleware sent to the dead set (`Rejected`). */
  readonly rejected: number
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Retries of a failed job (same jid) before it goes to the dead set. Default 3. */
  readonly maxRetries?: number | undefined
  /** Delay before retry n (1-based). Default 100 ms × 2^(n-1). */
  readonly backoff?: ((retryCount: number) => Duration.Input) | undefined
  /** How many events to keep for `events`. Default 10,000. */
  readonly eventLimit?: number | undefined
  /**
   * The queue names this queue holds jobs of. Default: every name. With names given, `exists` answers `"unknown"`
   * for a job of any other queue (another adapter's to tell), and adding one fails with a `QueueError`.
   */
  readonly queues?: ReadonlyArray<string> | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface MemoryQueue extends Context.Service.Shape<typeof JobQueue> {
  /**
   * Starts `concurrency` workers that run `handler` for each ready job, until the scope closes. `onDeath` is
   * called once for a job whose retries are exhausted: wire `Middleware.died` (or `UniqueJob.died`) there.
   */
  readonly work: <E, R, R2 = never>(
    handler: (job: Job) => Effect.Effect<unknown, E, R>,
    options?: {
      readonly concurrency?: number | undefined
      readonly onDeath?: ((job: Job, reason: string) => Effect.Effect<unknown, unknown, R2>) | undefined
    }
  ) => Effect.Effect<void, never, R | R2 | Scope.Scope>
  readonly snapshot: Effect.Effect<Snapshot>
  /** What happened so far, oldest first. */
  readonly events: Effect.Effect<ReadonlyArray<Event>>
  /** Waits until nothing is ready, scheduled or running. */
  readonly awaitIdle: Effect.Effect<void>
}

/**
 * @since 0.1.0
 * @category tags
 */
export const MemoryQueue: Context.Service<MemoryQueue, MemoryQueue> = Context.Service<MemoryQueue>(
  "effect-unique-jobs/MemoryQueue"
)



/**
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Effect.Effect<MemoryQueue, never, Scope.Scope> =>
  Effect.gen(function*() {
    const maxRetries = options.maxRetries ?? 3
    const backoff = options.backoff ?? ((n: number) => Duration.millis(100 * 2 ** (n - 1)))
    const eventLimit = options.eventLimit ?? 10_000
    const ready = new Map<string, Job>()
    const scheduled = new Map<string, { job: Job; at: number; fiber: Fiber.Fiber<void> | undefined }>()
    const running = new Map<string, Job>()
    const dead: Array<{ job: Job; reason: string; at: number }> = []
    const events: Array<Event> = []
    const endings: Record<ReturnType<typeof endingOf>, number> = { succeeded: 0, skipped: 0, rescheduled: 0, rejected: 0 }
    let idleWaiters: Array<Deferred.Deferred<void>> = []
    const signal = yield* Queue.unbounded<string>()
    const timers = yield* FiberSet.make<void>()

    const record = (type: Event["type"], job: Job, detail?: string) =>
      Effect.map(Clock.currentTimeMillis, (at) => {
        events.push({ at, type, job, detail })
        if (events.length > eventLimit) events.splice(0, events.length - eventLimit)
      })

    const checkIdle = Effect.suspend(() => {
      if (ready.size > 0 || scheduled.size > 0 || running.size > 0 || idleWaiters.length === 0) return Effect.void
      const waiters = idleWaiters
      idleWaiters = []
      return Effect.forEach(waiters, (d) => Deferred.succeed(d, undefined), { discard: true })
    })

    const makeReady = (job: Job) =>
      Effect.suspend(() => {
        ready.set(job.jid, job)
        return Queue.offer(signal, job.jid)
      })

    const served = options.queues === undefined ? undefined : new Set(options.queues)
    const refuseOther = (operation: string, job: Job) =>
      served === undefined || served.has(job.queue)
        ? Effect.void
        : Effect.fail(
          new QueueError({
            operation,
            jid: job.jid,
            reason: `the job is for queue "${job.queue}"; this queue holds ${Array.from(served).join(", ")}`
          })
        )

    const push = (job: Job) =>
      Effect.andThen(refuseOther("push", job), Effect.andThen(makeReady(job), record("pushed", job)))

    const schedule = (job: Job, at: number) =>
      Effect.gen(function*() {
        yield* refuseOther("schedule", job)
        const existing = scheduled.get(job.jid)
        if (existing?.fiber !== undefined) yield* Fiber.interrupt(existing.fiber)
        const now = yield* Clock.currentTimeMillis
        // Listed before its timer starts: a timer already due runs as it is forked, and must find (and take out) its
        // own entry, not leave a running job listed as scheduled (remove would answer true for it).
        const entry: { job: Job; at: number; fiber: Fiber.Fiber<void> | undefined } = { job, at, fiber: undefined }
        scheduled.set(job.jid, entry)
        yield* record("scheduled", job, new Date(at).toISOString())
        entry.fiber = yield* FiberSet.run(
          timers,
          Effect.sleep(Math.max(0, at - now)).pipe(
            Effect.andThen(Effect.suspend(() => {
              if (scheduled.get(job.jid) !== entry) return Effect.void
              scheduled.delete(job.jid)
              return makeReady(job)
            }))
          )
        )
      })

    const remove = (jid: string) =>
      Effect.gen(function*() {
        const waiting = ready.get(jid)
        if (waiting !== undefined) {
          ready.delete(jid)
          yield* record("removed", waiting)
          yield* checkIdle
          return true
        }
        const timer = scheduled.get(jid)
        if (timer !== undefined) {
          scheduled.delete(jid)
          if (timer.fiber !== undefined) yield* Fiber.interrupt(timer.fiber)
          yield* record("removed", timer.job)
          yield* checkIdle
          return true
        }
        return false
      })

    const kill = (job: Job, reason: string) =>
      Effect.gen(function*() {
        dead.push({ job, reason, at: yield* Clock.currentTimeMillis })
        yield* record("dead", job, reason)
      })

    const fail = <R2>(
      job: Job,
      cause: Cause.Cause<unknown>,
      onDeath: ((job: Job, reason: string) => Effect.Effect<unknown, unknown, R2>) | undefined
    ) =>
      Effect.gen(function*() {
        const reason = reasonOf(cause)
        yield* record("failed", job, reason)
        const retryCount = (job.retryCount ?? 0) + 1
        if (retryCount <= maxRetries) {
          const at = (yield* Clock.currentTimeMillis) + Duration.toMillis(backoff(retryCount))
          yield* record("retried", job, `retry ${retryCount} of ${maxRetries}`)
          return yield* schedule({ ...job, retryCount }, at)
        }
        const final = `retries exhausted (${maxRetries}): ${reason}`
        yield* kill(job, final)
        if (onDeath !== undefined) {
          yield* onDeath(job, final).pipe(
            Effect.catchCause((c) => Effect.logWarning("onDeath failed", c))
          )
        }
      })

    const runOne = <E, R, R2>(
      handler: (job: Job) => Effect.Effect<unknown, E, R>,
      onDeath: ((job: Job, reason: string) => Effect.Effect<unknown, unknown, R2>) | undefined,
      jid: string
    ) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          const job = ready.get(jid)
          if (job === undefined) return // removed, or a stale signal of a jid pushed twice
          ready.delete(jid)
          running.set(jid, job)
          yield* record("started", job)
          const exit = yield* Effect.exit(restore(Effect.suspend(() => handler(job))))
          running.delete(jid)
          if (Exit.isSuccess(exit)) {
            const ending = endingOf(exit.value)
            endings[ending]++
            yield* record(ending, job)
          } else if (Cause.hasInterruptsOnly(exit.cause)) {
            // The worker stopped under it: the job goes back, as a broker would redeliver it.
            yield* makeReady(job)
          } else {
            yield* fail(job, exit.cause, onDeath)
          }
          yield* checkIdle
        })
      )

    const queue: MemoryQueue = {
      push,
      schedule,
      remove,
      kill,
      exists: (jobs) =>
        Effect.sync(() =>
          jobs.map(({ jid, queue }): Presence => {
            if (served !== undefined && !served.has(queue)) return "unknown"
            return ready.has(jid) || scheduled.has(jid) || running.has(jid) ? "exists" : "gone"
          })
        ),
      // Ready, scheduled and running jobs are found by jid; a dead one by a look through the dead set (in process).
      describe: (jobs) =>
        Effect.sync(() =>
          jobs.map(({ jid, queue }): JobDetails | undefined => {
            if (served !== undefined && !served.has(queue)) return undefined
            const timer = scheduled.get(jid)
            const deadOne = ready.has(jid) || timer !== undefined || running.has(jid)
              ? undefined
              : [...dead].reverse().find((d) => d.job.jid === jid && d.job.queue === queue)
            const job = ready.get(jid) ?? timer?.job ?? running.get(jid) ?? deadOne?.job
            if (job === undefined) return { jid, queue, state: "gone" }
            const data = JSON.stringify(job.args) ?? ""
            const bytes = Buffer.byteLength(data)
            return {
              jid,
              queue,
              state: ready.has(jid) ? "waiting" : timer !== undefined ? "delayed" : running.has(jid) ? "active" : "failed",
              name: job.worker,
              attemptsMade: job.retryCount ?? 0,
              runsAt: timer?.at,
              finishedOn: deadOne?.at,
              failedReason: deadOne?.reason.slice(0, previewBytes),
              data: bytes > previewBytes ? Buffer.from(data).subarray(0, previewBytes).toString().replace(/\uFFFD+$/, "") : data,
              dataBytes: bytes
            }
          })
        ),
      work: (handler, workOptions) =>
        Effect.forEach(
          Array.from({ length: Math.max(1, workOptions?.concurrency ?? 1) }),
          () =>
            Effect.forkScoped(
              Effect.forever(Effect.flatMap(Queue.take(signal), (jid) => runOne(handler, workOptions?.onDeath, jid)))
            ),
          { discard: true }
        ),
      snapshot: Effect.sync(() => ({
        ready: Array.from(ready.values()),
        scheduled: Array.from(scheduled.values(), ({ at, job }) => ({ job, at })),
        running: Array.from(running.values()),
        dead: [...dead],
        ...endings
      })),
      events: Effect.sync(() => [...events]),
      awaitIdle: Effect.flatMap(Deferred.make<void>(), (waiter) =>
        Effect.andThen(
          Effect.suspend(() => {
            idleWaiters.push(waiter)
            return checkIdle
          }),
          Deferred.await(waiter)
        ))
    }
    return queue
  })

/**
 * The queue as both `MemoryQueue` and the `JobQueue` port.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options?: Options): Layer.Layer<MemoryQueue | JobQueue> =>
  Layer.effectContext(
    Effect.map(make(options), (queue) => Context.make(MemoryQueue, queue).pipe(Context.add(JobQueue, queue)))
  )
