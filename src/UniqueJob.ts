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
 *   args: Schema.Tuple(Schema.Number), // optional: types enqueue and perform, decodes what the queue delivers
 *   lock: "until_and_while_executing",
 *   onConflict: { client: "log", server: "reschedule" }
 * })
 *
 * // producer: Enqueued | Skipped | Replaced | Rejected
 * const outcome = RebuildReport.enqueue([42])
 * // worker: Performed | Skipped | Rescheduled | Rejected
 * const run = (job) => RebuildReport.perform(job, ([reportId]) => rebuild(reportId))
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import type * as Digest from "./Digest.js"
import { InvalidJobArgs } from "./Errors.js"
import * as Job from "./Job.js"
import { JobQueue } from "./JobQueue.js"
import * as Lock from "./Lock.js"
import * as Middleware from "./Middleware.js"
import * as LockOptions from "./Options.js"
import type { RedisError, RedisService } from "./Redis.js"
import type * as Strategy from "./Strategy.js"

/**
 * A schema of a worker's argument list: what `enqueue` takes (its type) and what the queue carries (its encoded
 * form, which the digest is computed from).
 *
 * @since 0.1.0
 * @category models
 */
export type ArgsSchema<Args extends ReadonlyArray<unknown>, Encoded extends ReadonlyArray<unknown>> = Schema.Codec<
  Args,
  Encoded
>

/**
 * A worker's uniqueness options: the lock options plus the worker's name and default queue (`default`), and
 * optionally `args`, the schema of its argument list.
 *
 * @since 0.1.0
 * @category models
 */
export type Options = LockOptions.WorkerOptions & { readonly args?: undefined }

/**
 * `Options` with the schema of the argument list: the worker's jobs are typed by it.
 *
 * @since 0.1.0
 * @category models
 */
export type TypedOptions<Args extends ReadonlyArray<unknown>, Encoded extends ReadonlyArray<unknown>> =
  & LockOptions.WorkerOptions
  & { readonly args: ArgsSchema<Args, Encoded> }

type JobOptions = { readonly jid?: string | undefined; readonly at?: number | undefined }

/**
 * A worker's uniqueness: its wrappers, typed by its argument list `Args`. `ArgsError` is `InvalidJobArgs` for a worker
 * with an `args` schema (arguments are encoded on the way in and decoded on the way out, either may fail), `never`
 * for one without (its arguments are passed as they are).
 *
 * @since 0.1.0
 * @category models
 */
export interface UniqueJob<Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>, ArgsError = never> {
  readonly worker: string
  readonly queue: string
  /** The worker's options, decoded; the global `Defaults` fill in what it left out where the job runs. */
  readonly definition: LockOptions.Definition
  /** A new job of this worker, its arguments encoded; throws `InvalidJobArgs` when they do not encode. */
  readonly job: (args: Args, options?: JobOptions) => Job.Job
  readonly digest: (args: Args) => Effect.Effect<string, Digest.DigestError | ArgsError>
  /**
   * Pushes (or, with `at`, schedules) a new job through the client wrapper onto the `JobQueue`; arguments that do not
   * encode fail with `InvalidJobArgs`, locking and enqueuing nothing.
   */
  readonly enqueue: (
    args: Args,
    options?: JobOptions
  ) => Effect.Effect<Strategy.ClientOutcome<void>, Middleware.ClientError | ArgsError, RedisService | JobQueue>
  /** The arguments of a job the queue delivered, decoded; `InvalidJobArgs` names each path that does not. */
  readonly decode: (job: Job.Job) => Effect.Effect<Args, ArgsError>
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
  /**
   * `server` with the job's arguments decoded: `perform` gets them typed, and never runs on a payload that does not
   * decode (the job fails with `InvalidJobArgs`, through the middleware, as a failed perform does).
   */
  readonly perform: <A, E, R>(
    job: Job.Job,
    perform: (args: Args, running: Lock.Running) => Effect.Effect<A, E, R>
  ) => Effect.Effect<
    Strategy.ServerOutcome<A>,
    E | ArgsError | Middleware.ServerError,
    R | RedisService | JobQueue
  >
  /** `Middleware.died` for this worker: call it when the queue gives a job up for good. */
  readonly died: (job: Job.Job) => Effect.Effect<boolean, RedisError | Digest.DigestError, RedisService>
}

// `args[0].reportId`: a path into the argument list, as the issues name it.
const pathOf = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>(
    (shown, key) => typeof key === "number" ? `${shown}[${key}]` : `${shown}.${String(key)}`,
    "args"
  )

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

const invalid = (worker: string, jid: string, direction: "encode" | "decode") => (error: Schema.SchemaError) =>
  new InvalidJobArgs({
    worker,
    jid,
    direction,
    issues: formatter(error.issue).issues.map((issue) => ({
      path: pathOf((issue.path ?? []).map((key) => typeof key === "object" ? key.key : key)),
      message: issue.message
    }))
  })

const fromDefinition = <Args extends ReadonlyArray<unknown>, Encoded extends ReadonlyArray<unknown>>(
  worker: string,
  queue: string,
  definition: LockOptions.Definition,
  schema: ArgsSchema<Args, Encoded> | undefined
): UniqueJob<Args, InvalidJobArgs> => {
  const client = Middleware.client(definition)
  const server = Middleware.server(definition)
  const encode = schema === undefined ? undefined : Schema.encodeUnknownResult(schema, { errors: "all" })
  const decodeArgs = schema === undefined ? undefined : Schema.decodeUnknownResult(schema, { errors: "all" })
  // The job as the queue carries it; with a schema, its arguments encoded.
  const build = (args: Args, options: JobOptions | undefined): Result.Result<Job.Job, InvalidJobArgs> => {
    const made = Job.make({ worker, queue, args, jid: options?.jid, at: options?.at })
    if (encode === undefined) return Result.succeed(made)
    return Result.mapBoth(encode(args), {
      onFailure: invalid(worker, made.jid, "encode"),
      onSuccess: (encoded): Job.Job => ({ ...made, args: encoded })
    })
  }
  const decode: UniqueJob<Args, InvalidJobArgs>["decode"] = (job) =>
    decodeArgs === undefined
      ? Effect.succeed(job.args as Args)
      : Effect.fromResult(Result.mapError(decodeArgs(job.args), invalid(worker, job.jid, "decode")))
  return {
    worker,
    queue,
    definition,
    job: (args, options) => Result.getOrThrow(build(args, options)),
    digest: (args) => Effect.flatMap(Effect.fromResult(build(args, undefined)), (job) => Lock.digest(definition, job)),
    enqueue: (args, options) =>
      Effect.flatMap(Effect.fromResult(build(args, options)), (job) =>
        client(job, (stamped) =>
          Effect.flatMap(JobQueue, (q) => (stamped.at === undefined ? q.push(stamped) : q.schedule(stamped, stamped.at))))),
    decode,
    client,
    server,
    perform: (job, perform) =>
      server(job, (running) => Effect.flatMap(decode(job), (args) => perform(args, running))),
    died: Middleware.died(definition)
  }
}

const made = <Args extends ReadonlyArray<unknown>, Encoded extends ReadonlyArray<unknown>>(
  options: Options | TypedOptions<Args, Encoded>
): Result.Result<UniqueJob<Args, InvalidJobArgs>, LockOptions.InvalidLockOptions> => {
  if (!LockOptions.isRecord(options)) {
    const reason = `expected worker options like { worker: "MyJob", lock: "until_executed" }, got ${
      LockOptions.describeValue(options)
    }`
    return Result.fail(LockOptions.invalidOptions([{ field: "options", reason }]))
  }
  const { args, ...rest } = options
  if (args !== undefined && !Schema.isSchema(args)) {
    const reason = `expected a Schema of the argument list, like Schema.Tuple(Schema.Number), got ${
      LockOptions.describeValue(args)
    }`
    return Result.fail(LockOptions.invalidOptions([{ field: "args", reason }]))
  }
  return Result.map(
    LockOptions.makeWorker(rest),
    ({ definition, queue, worker }) =>
      fromDefinition(worker, queue, definition, args as ArgsSchema<Args, Encoded> | undefined)
  )
}

/**
 * Decodes the options once; an impossible combination fails with `InvalidLockOptions` naming the field. With
 * `args`, the worker's jobs are typed by that schema.
 *
 * @since 0.1.0
 * @category constructors
 */
export function make<Args extends ReadonlyArray<unknown>, Encoded extends ReadonlyArray<unknown>>(
  options: TypedOptions<Args, Encoded>
): Effect.Effect<UniqueJob<Args, InvalidJobArgs>, LockOptions.InvalidLockOptions>
export function make(options: Options): Effect.Effect<UniqueJob, LockOptions.InvalidLockOptions>
export function make(
  options: Options | TypedOptions<ReadonlyArray<unknown>, ReadonlyArray<unknown>>
): Effect.Effect<UniqueJob<ReadonlyArray<unknown>, InvalidJobArgs>, LockOptions.InvalidLockOptions> {
  return Effect.fromResult(made(options))
}

/**
 * `make` for module top level: invalid options throw `InvalidLockOptions` right where the worker is defined.
 *
 * @since 0.1.0
 * @category constructors
 */
export function unsafeMake<Args extends ReadonlyArray<unknown>, Encoded extends ReadonlyArray<unknown>>(
  options: TypedOptions<Args, Encoded>
): UniqueJob<Args, InvalidJobArgs>
export function unsafeMake(options: Options): UniqueJob
export function unsafeMake(
  options: Options | TypedOptions<ReadonlyArray<unknown>, ReadonlyArray<unknown>>
): UniqueJob<ReadonlyArray<unknown>, InvalidJobArgs> {
  return Result.getOrThrowWith(made(options), (error) => error)
}
