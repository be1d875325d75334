/**
 * The BullMQ adapter: the `JobQueue` port over a BullMQ `Queue`, and a processor for BullMQ's `Worker` that runs
 * the server middleware. A BullMQ job is one of ours with `jid` = the job's id, `worker` = its name, `queue` = its
 * queue's name and `args` = `[data]`: the data your processor reads stays yours, untouched.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Queue } from "bullmq"
 * import { UniqueJob } from "effect-unique-jobs"
 * import { BullMQ } from "effect-unique-jobs/bullmq"
 *
 * const Charge = UniqueJob.unsafeMake({ worker: "charge", queue: "payments", lock: "until_executed" })
 * const program = Effect.gen(function*() {
 *   yield* Charge.enqueue([{ customer: 1 }]) // Enqueued | Skipped | …
 *   yield* BullMQ.worker(Charge, (job) => charge(job.data), { connection })
 * })
 * ```
 *
 * @since 0.1.0
 */
import type { Job as BullJob, JobsOptions, Queue, WorkerOptions } from "bullmq"
import { DelayedError, UnrecoverableError, Worker } from "bullmq"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberRef from "effect/FiberRef"
import * as Layer from "effect/Layer"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import type { Job } from "../Job.js"
import { JobQueue, QueueError } from "../JobQueue.js"
import type * as Lock from "../Lock.js"
import * as Middleware from "../Middleware.js"
import { Defaults, resolve } from "../Defaults.js"
import type { Definition } from "../Options.js"
import type { RedisService } from "../Redis.js"
import * as Strategy from "../Strategy.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /**
   * Where `kill` puts a job, with its reason: a BullMQ queue you can inspect and retry from. Default: a queue
   * named `<queue>-dead` on the queue's connection, closed with the adapter.
   */
  readonly deadLetter?: Queue | undefined
  /** Options for every job this adapter adds (a push or a schedule): attempts, backoff, removeOnComplete… */
  readonly jobOptions?: JobsOptions | undefined
}

/**
 * What a dead-letter entry carries: the job as we knew it, why it died, and when (epoch ms).
 *
 * @since 0.1.0
 * @category models
 */
export interface DeadLetter {
  readonly job: { readonly jid: string; readonly worker: string; readonly queue: string; readonly args: ReadonlyArray<unknown> }
  readonly reason: string
  readonly at: number
}

/**
 * The adapter: the `JobQueue` port over `queue`, and the dead-letter queue.
 *
 * @since 0.1.0
 * @category models
 */
export interface BullMQ extends Context.Tag.Service<JobQueue> {
  readonly queue: Queue
  readonly deadLetter: Queue
  /**
   * `queue.add` of a stamped job under its jid, with BullMQ options beside the adapter's `jobOptions` (a `delay`, a
   * `priority`…): what `push` and `schedule` do, for callers that have options of their own.
   */
  readonly add: (job: Job, options?: JobsOptions | undefined) => Effect.Effect<BullJob, QueueError>
}

/**
 * @since 0.1.0
 * @category tags
 */
export const BullMQ = Context.GenericTag<BullMQ>("effect-unique-jobs/BullMQ")

/** The BullMQ job a processor is running, with the token that lets it move that job. */
interface Active {
  readonly job: BullJob
  readonly token: string | undefined
  /** Set by `schedule`: the job was moved to delayed, so the processor must end with `DelayedError`. */
  moved: boolean
}

// Which job the current fiber performs: `schedule` and `kill` receive the job being performed (a server strategy's
// reschedule or reject), and only its processor's token can move an active job. Fibers a strategy forks inherit it.
const currentActive = FiberRef.unsafeMake<Active | undefined>(undefined)

/**
 * A BullMQ job as the middleware sees it.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toJob = (job: BullJob): Job => ({
  jid: job.id ?? "",
  worker: job.name,
  queue: job.queueName,
  args: [job.data],
  retryCount: job.attemptsMade
})

const attempt = <A>(operation: string, jid: string | undefined, f: () => Promise<A>): Effect.Effect<A, QueueError> =>
  Effect.tryPromise({
    try: f,
    catch: (cause) =>
      new QueueError({ operation, jid, reason: cause instanceof Error ? cause.message : String(cause), cause })
  })

const refuse = (operation: string, jid: string, reason: string) => Effect.fail(new QueueError({ operation, jid, reason }))

// BullMQ carries one data value per job: our args are `[data]`.
const dataOf = (operation: string, job: Job, queue: Queue): Effect.Effect<unknown, QueueError> => {
  if (job.queue !== queue.name) {
    return refuse(operation, job.jid, `the job is for queue "${job.queue}" but this adapter adds to "${queue.name}"`)
  }
  if (job.args.length !== 1) {
    return refuse(
      operation,
      job.jid,
      `a BullMQ job carries one data value: args must be [data] (got ${job.args.length} arguments)`
    )
  }
  return Effect.succeed(job.args[0])
}

const waiting = new Set(["waiting", "delayed", "prioritized", "waiting-children"])
const finished = new Set(["completed", "failed", "unknown"])

/**
 * The adapter over `queue`. `push` adds the job under its jid; `schedule` adds a new job delayed, and moves the
 * job being performed to delayed (the only way BullMQ lets a running job come back later under its id); `remove`
 * removes a waiting or delayed job; `kill` adds the job to the dead-letter queue with its reason; `exists` reads
 * the job's state (waiting, delayed, prioritized, active: yes; completed, failed, unknown: no).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (queue: Queue, options: Options = {}): Effect.Effect<BullMQ, never, Scope.Scope> =>
  Effect.gen(function*() {
    // Made at the first kill: a queue writes its keys to Redis as it connects, and most never kill a job.
    let madeDeadLetter: Queue | undefined
    const deadLetter = (): Queue =>
      options.deadLetter ??
        // The queue's own class: a subclass keeps its behaviour, and no second copy of bullmq is loaded.
        (madeDeadLetter ??= new (queue.constructor as typeof Queue)(`${queue.name}-dead`, queue.opts))
    yield* Effect.addFinalizer(() =>
      madeDeadLetter === undefined ? Effect.void : Effect.promise(() => madeDeadLetter!.close())
    )
    const jobOptions = options.jobOptions ?? {}

    const activeOf = (jid: string) =>
      Effect.map(FiberRef.get(currentActive), (active) => (active?.job.id === jid ? active : undefined))

    const addAs = (operation: string, job: Job, own: JobsOptions | undefined) =>
      Effect.flatMap(dataOf(operation, job, queue), (data) =>
        attempt(operation, job.jid, () => queue.add(job.worker, data, { ...jobOptions, ...own, jobId: job.jid })))

    const adapter: BullMQ = {
      queue,
      get deadLetter() {
        return deadLetter()
      },
      add: (job, own) => addAs("add", job, own),
      push: (job) => Effect.asVoid(addAs("push", job, undefined)),
      schedule: (job, at) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const active = yield* activeOf(job.jid)
          if (active !== undefined) {
            yield* attempt("schedule", job.jid, () => active.job.moveToDelayed(Math.max(at, now), active.token))
            active.moved = true
            return
          }
          // BullMQ ignores an add whose id it knows: say so rather than lose the job.
          const state = yield* attempt("schedule", job.jid, () => queue.getJobState(job.jid))
          if (state === "unknown") return yield* Effect.asVoid(addAs("schedule", job, { delay: Math.max(0, at - now) }))
          if (state === "delayed") {
            const known = yield* attempt("schedule", job.jid, () => queue.getJob(job.jid))
            if (known !== undefined) {
              return yield* attempt("schedule", job.jid, () => known.changeDelay(Math.max(0, at - now)))
            }
          }
          return yield* refuse(
            "schedule",
            job.jid,
            `BullMQ already has this job id (${state}); only its own processor can move it while it runs`
          )
        }),
      remove: (jid) =>
        Effect.gen(function*() {
          const state = yield* attempt("remove", jid, () => queue.getJobState(jid))
          if (!waiting.has(state)) return false
          // A job that became active meanwhile is locked: BullMQ answers 0 and leaves it.
          return (yield* attempt("remove", jid, () => queue.remove(jid))) === 1
        }),
      kill: (job, reason) =>
        Effect.gen(function*() {
          const at = yield* Clock.currentTimeMillis
          const entry: DeadLetter = {
            job: { jid: job.jid, worker: job.worker, queue: job.queue, args: job.args },
            reason,
            at
          }
          yield* attempt("kill", job.jid, () => deadLetter().add(job.worker, entry, { jobId: job.jid }))
        }),
      exists: (jid) => Effect.map(attempt("exists", jid, () => queue.getJobState(jid)), (state) => !finished.has(state))
    }
    return adapter
  })

/**
 * The adapter as both `BullMQ` and the `JobQueue` port. Closing the layer closes the dead-letter queue it made, not
 * `queue`: that one is yours.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (queue: Queue, options?: Options): Layer.Layer<BullMQ | JobQueue> =>
  Layer.scopedContext(
    Effect.map(make(queue, options), (adapter) => Context.make(BullMQ, adapter).pipe(Context.add(JobQueue, adapter)))
  )

/**
 * Something that has a worker's definition: a `UniqueJob`, or `{ definition }`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Defined {
  readonly definition: Definition
}

/**
 * A perform for BullMQ: the job, the lock it runs under (`running.fence` is the run lock's fencing token), and
 * BullMQ's token for the job.
 *
 * @since 0.1.0
 * @category models
 */
export type Perform<A, E, R> = (
  job: BullJob,
  running: Lock.Running,
  token: string | undefined
) => Effect.Effect<A, E, R>

// A failure as BullMQ wants it: an Error. Ours (ExecutionConflict, LockLost, …) already are.
const asError = (failure: unknown): Error =>
  failure instanceof Error ? failure : new Error(typeof failure === "string" ? failure : JSON.stringify(failure))

/** BullMQ will not try the job again after this failure: its attempts are spent, or it said so. */
const lastAttempt = (job: BullJob, error: Error): boolean =>
  error instanceof UnrecoverableError || error.name === "UnrecoverableError" ||
  job.attemptsMade + 1 >= (job.opts.attempts ?? 1)

/**
 * Runs `effect` as the perform of `job`: `schedule` and `kill` called from inside it (a server strategy) act on this
 * active job, with its `token`. A job that `schedule` moved to delayed ends with BullMQ's `DelayedError`, whatever
 * `effect` ended: it is coming back under its id, and BullMQ must neither complete nor fail it.
 *
 * @since 0.1.0
 * @category processor
 */
export const performing = <A, E, R>(
  job: BullJob,
  token: string | undefined,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | DelayedError, R> =>
  Effect.suspend(() => {
    const active: Active = { job, token, moved: false }
    return Effect.flatMap(
      Effect.exit(Effect.locally(effect, currentActive, active)),
      (exit): Effect.Effect<A, E | DelayedError> => (active.moved ? Effect.fail(new DelayedError()) : exit)
    )
  })

const awaiting = new WeakMap<Definition, Definition>()

// A run lock held only by this job's own jid is its first copy: BullMQ redelivered the job after a stall (a worker
// blocked, cut off or killed). Whatever the strategy says about duplicates, the copy is not one: dropping it
// (log) or killing it (reject) would lose the job if the first copy is dead. It waits instead, moved to delayed
// under its id, until the first copy's lease has ended or its run has finished.
const awaitingItself = (definition: Definition): Definition => {
  let wrapped = awaiting.get(definition)
  if (wrapped === undefined) {
    const configured = Strategy.serverStrategy(definition.onConflict.server)
    const server = Strategy.makeServer(
      { keepsQueueLock: Strategy.keepsQueueLock(configured) },
      (conflict) =>
        conflict.conflict.holders.every((holder) => holder === conflict.job.jid)
          ? Strategy.serverStrategy("reschedule")(conflict)
          : configured(conflict)
    )
    wrapped = { ...definition, onConflict: { ...definition.onConflict, server } }
    awaiting.set(definition, wrapped)
  }
  return wrapped
}

/**
 * One BullMQ job through the server middleware, ended as BullMQ must see it: `Performed` completes with the
 * perform's value; `Skipped` and `Rejected` complete with `undefined` (a rejected job is in the dead-letter queue);
 * `Rescheduled` fails with BullMQ's `DelayedError` (the job was moved to delayed under its id); a failure fails
 * with an Error, so BullMQ retries it by its `attempts` and `backoff`, an `ExecutionConflict` (`raise`) included.
 * A failure on the job's last attempt first calls `Middleware.died`, so `until_executed` lets its lock go. A copy
 * BullMQ redelivered while its first copy still holds the run lock is rescheduled, whatever the server strategy:
 * it is not a duplicate, and the first copy may be dead.
 *
 * @since 0.1.0
 * @category processor
 */
export const handle = <A, E, R>(
  unique: Defined,
  perform: Perform<A, E, R>,
  job: BullJob,
  token?: string | undefined
): Effect.Effect<Strategy.ServerOutcome<A>, Error, R | RedisService | JobQueue> => {
  const ours = toJob(job)
  const run = Effect.flatMap(Defaults, (settings) =>
    Middleware.server(awaitingItself(resolve(unique.definition, settings)))(ours, (running) =>
      perform(job, running, token)))
  return performing(job, token, run).pipe(
    Effect.catchAll((failure) => {
      const error = asError(failure)
      if (error instanceof DelayedError || !lastAttempt(job, error)) return Effect.fail(error)
      return Effect.zipRight(
        Effect.catchAllCause(
          Middleware.died(unique.definition)(ours),
          (cause) => Effect.logWarning("releasing the lock of a dead job failed; its TTL or the reaper ends it", cause)
        ),
        Effect.fail(error)
      )
    })
  )
}

/**
 * A BullMQ processor function `(job, token, signal)` over any way to run an effect to its `Exit` (a `Runtime`'s,
 * a `ManagedRuntime`'s); `unique` may depend on the job (its name). BullMQ's abort signal (`worker.cancelJob`)
 * interrupts the perform, which releases its run lock; a job turned away completes with `undefined`.
 *
 * @since 0.1.0
 * @category processor
 */
export const processorWith = <R>(
  runExit: (
    effect: Effect.Effect<Strategy.ServerOutcome<unknown>, Error, R>,
    signal: AbortSignal | undefined
  ) => Promise<Exit.Exit<Strategy.ServerOutcome<unknown>, unknown>>
) =>
<A, E, R2 extends R>(unique: Defined | ((job: BullJob) => Defined), perform: Perform<A, E, R2>) =>
async (job: BullJob, token?: string, signal?: AbortSignal): Promise<A | undefined> => {
  const defined = typeof unique === "function" ? unique(job) : unique
  const handled = handle(defined, perform, job, token) as Effect.Effect<Strategy.ServerOutcome<A>, Error, R>
  const exit = await runExit(handled, signal)
  if (Exit.isSuccess(exit)) return exit.value._tag === "Performed" ? exit.value.value as A : undefined
  throw Cause.isInterruptedOnly(exit.cause) ? new Error(`job ${job.id} was cancelled`) : Cause.squash(exit.cause)
}

/**
 * A BullMQ processor function from an Effect perform, run on the current runtime.
 *
 * @since 0.1.0
 * @category processor
 */
export const processor = <A, E, R>(
  unique: Defined,
  perform: Perform<A, E, R>
): Effect.Effect<
  (job: BullJob, token?: string, signal?: AbortSignal) => Promise<A | undefined>,
  never,
  R | RedisService | JobQueue
> =>
  Effect.map(
    Effect.runtime<R | RedisService | JobQueue>(),
    (runtime) =>
      processorWith<R | RedisService | JobQueue>((effect, signal) =>
        Runtime.runPromiseExit(runtime, effect, signal === undefined ? {} : { signal })
      )(unique, perform)
  )

/**
 * A BullMQ `Worker` on `unique`'s queue running `perform` through the server middleware; closed with the scope
 * (waiting for the jobs it runs).
 *
 * @since 0.1.0
 * @category processor
 */
export const worker = <A, E, R>(
  unique: Defined & { readonly queue: string },
  perform: Perform<A, E, R>,
  options: WorkerOptions
): Effect.Effect<Worker, never, R | RedisService | JobQueue | Scope.Scope> =>
  Effect.flatMap(processor(unique, perform), (fn) =>
    Effect.acquireRelease(
      Effect.sync(() => new Worker(unique.queue, fn, options)),
      (worker) => Effect.promise(() => worker.close())
    ))
