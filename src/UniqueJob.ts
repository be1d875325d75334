/**
 * The friendly top level: define a worker's uniqueness once, get its client and server wrappers.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { UniqueJob } from "effect-unique-jobs"
 *
 * const RebuildReport = UniqueJob.unsafeMake({
 *   worker: "RebuildReportJob",
 *   lock: "until_and_while_executing",
 *   onConflict: { client: "log", server: "reschedule" }
 * })
 *
 * // producer: Enqueued | Skipped | Replaced | Rejected
 * const outcome = RebuildReport.enqueue([42])
 * // worker: Performed | Skipped | Rescheduled | Rejected
 * const run = (job) => RebuildReport.server(job, rebuild(job.args[0]))
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Digest from "./Digest.js"
import * as Job from "./Job.js"
import { JobQueue } from "./JobQueue.js"
import * as Lock from "./Lock.js"
import * as Middleware from "./Middleware.js"
import * as LockOptions from "./Options.js"
import type { RedisError, RedisService } from "./Redis.js"
import type * as Strategy from "./Strategy.js"

/**
 * A worker's uniqueness options: the lock options plus the worker's name and default queue (`default`).
 *
 * @since 0.1.0
 * @category models
 */
export type Options = LockOptions.WorkerOptions

/**
 * @since 0.1.0
 * @category models
 */
export interface UniqueJob {
  readonly worker: string
  readonly queue: string
  /** The worker's options, decoded; the global `Defaults` fill in what it left out where the job runs. */
  readonly definition: LockOptions.Definition
  /** A new job of this worker. */
  readonly job: (
    args: ReadonlyArray<unknown>,
    options?: { readonly jid?: string | undefined; readonly at?: number | undefined }
  ) => Job.Job
  readonly digest: (args: ReadonlyArray<unknown>) => Effect.Effect<string, Digest.DigestError>
  /** Pushes (or, with `at`, schedules) a new job through the client wrapper onto the `JobQueue`. */
  readonly enqueue: (
    args: ReadonlyArray<unknown>,
    options?: { readonly jid?: string | undefined; readonly at?: number | undefined }
  ) => Effect.Effect<Strategy.ClientOutcome<void>, Middleware.ClientError, RedisService | JobQueue>
  /** `Middleware.client` for this worker. */
  readonly client: <A, E, R>(
    job: Job.Job,
    enqueue: (job: Job.Job) => Effect.Effect<A, E, R>
  ) => Effect.Effect<Strategy.ClientOutcome<A>, E | Middleware.ClientError, R | RedisService | JobQueue>
  /** `Middleware.server` for this worker. */
  readonly server: <A, E, R>(
    job: Job.Job,
    perform: Middleware.Perform<A, E, R>
  ) => Effect.Effect<Strategy.ServerOutcome<A>, E | Middleware.ServerError, R | RedisService | JobQueue>
  /** `Middleware.died` for this worker: call it when the queue gives a job up for good. */
  readonly died: (job: Job.Job) => Effect.Effect<boolean, RedisError | Digest.DigestError, RedisService>
}

const fromDefinition = (worker: string, queue: string, definition: LockOptions.Definition): UniqueJob => {
  const client = Middleware.client(definition)
  const job: UniqueJob["job"] = (args, options) => Job.make({ worker, queue, args, jid: options?.jid, at: options?.at })
  return {
    worker,
    queue,
    definition,
    job,
    digest: (args) => Lock.digest(definition, { worker, queue, args }),
    enqueue: (args, options) =>
      client(job(args, options), (stamped) =>
        Effect.flatMap(JobQueue, (q) => (stamped.at === undefined ? q.push(stamped) : q.schedule(stamped, stamped.at)))),
    client,
    server: Middleware.server(definition),
    died: Middleware.died(definition)
  }
}

/**
 * Decodes the options once; an impossible combination fails with `InvalidLockOptions` naming the field.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<UniqueJob, LockOptions.InvalidLockOptions> =>
  Either.map(LockOptions.makeWorker(options), ({ definition, queue, worker }) => fromDefinition(worker, queue, definition))

/**
 * `make` for module top level: invalid options throw `InvalidLockOptions` right where the worker is defined.
 *
 * @since 0.1.0
 * @category constructors
 */
export const unsafeMake = (options: Options): UniqueJob =>
  Either.getOrThrowWith(
    Either.map(LockOptions.makeWorker(options), ({ definition, queue, worker }) =>
      fromDefinition(worker, queue, definition)),
    (error) => error
  )
