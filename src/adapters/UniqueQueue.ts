/**
 * The Promise face for BullMQ teams that don't write Effect: wrap a `Queue` once, then `add` through it and give
 * `Worker` its `processor`. One `ManagedRuntime` inside holds the lock store's connection and the dead-letter queue;
 * `close()` closes it and the queue.
 *
 * @example
 * ```ts
 * import { Queue, Worker } from "bullmq"
 * import { UniqueQueue } from "effect-unique-jobs/bullmq"
 *
 * const queue = new Queue("reports", { connection })
 * const unique = UniqueQueue.make(queue, { lock: "until_executed", lockTtl: "1 hour" })
 * const outcome = await unique.add("rebuild", { account: 42 }) // outcome._tag: "Enqueued" | "Skipped" | …
 * new Worker("reports", unique.processor(async (job) => rebuild(job.data.account)), { connection })
 * ```
 *
 * @since 0.1.0
 */
import type { ConnectionOptions, Job as BullJob, JobsOptions, Queue } from "bullmq"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Defaults from "../Defaults.js"
import * as Job from "../Job.js"
import type { JobQueue } from "../JobQueue.js"
import * as Middleware from "../Middleware.js"
import * as LockOptions from "../Options.js"
import * as Redis from "../Redis.js"
import type * as Strategy from "../Strategy.js"
import * as BullMQ from "./BullMQ.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options extends LockOptions.Options {
  /**
   * The Redis that holds the locks. Default: the queue's own connection settings (url, or host, port, db, credentials, tls),
   * on a connection of its own.
   */
  readonly redis?: Redis.Options | undefined
  /** Other lock options for some job names; the rest use these. */
  readonly jobs?: Readonly<Record<string, LockOptions.Options>> | undefined
  /** Where rejected jobs go (default: a queue named `<queue>-dead`). */
  readonly deadLetter?: Queue | undefined
  /**
   * The global defaults for what these options leave out (`Defaults.layer`'s input). Default: read from the
   * `UNIQUE_JOBS_*` variables, as `Defaults.layerConfig` does, so a Promise-face producer and an Effect worker
   * configured the same way compute the same digests.
   */
  readonly defaults?: Defaults.Input | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface UniqueQueue<DataType = unknown> {
  readonly queue: Queue
  /**
   * `queue.add` through the client middleware: `Enqueued` (with the BullMQ job as `value`) when it was added,
   * else `Skipped`, `Replaced` or `Rejected` as the strategy decided. `opts.jobId` becomes the lock's jid
   * (default: a new one); `opts.delay` makes the lock's TTL count from when the job runs.
   */
  readonly add: (name: string, data: DataType, opts?: JobsOptions) => Promise<Strategy.ClientOutcome<BullJob>>
  /**
   * A processor for `new Worker(queue.name, …)`: runs `fn` through the server middleware. `signal` aborts when the
   * run lock is lost or BullMQ cancels the job. A job turned away completes with `undefined`.
   */
  readonly processor: <R>(
    fn: (job: BullJob<DataType>, token: string | undefined, signal: AbortSignal) => Promise<R>
  ) => (job: BullJob<DataType>, token?: string, signal?: AbortSignal) => Promise<R | undefined>
  /** Releases the locks a job that will never run again still holds (the processor does it on a last failure). */
  readonly died: (job: BullJob<DataType>) => Promise<boolean>
  /** Closes the runtime (lock connection, dead-letter queue) and then the queue. */
  readonly close: () => Promise<void>
}

const connectionKeys = ["host", "port", "db", "username", "password", "tls", "family", "path"] as const

// The queue's connection settings, whether it was given options (`{ url }` included) or an ioredis instance (which
// keeps them in `options`). Only where to connect is taken: BullMQ's retry and blocking settings are not for locks.
const redisOf = (connection: ConnectionOptions | undefined): Redis.Options => {
  const source = connection as Record<string, unknown> & { readonly options?: Record<string, unknown> } | undefined
  const settings = typeof source?.options === "object" && source.options !== null ? source.options : source ?? {}
  const client: Record<string, unknown> = {}
  for (const key of connectionKeys) if (settings[key] !== undefined) client[key] = settings[key]
  return typeof settings.url === "string" ? { url: settings.url, client } : { client }
}

// Options for one job name, checked with the name in the field: `jobs.rebuild.lockTtl`.
const definitionOf = (options: LockOptions.Options, name?: string): LockOptions.Definition => {
  try {
    return LockOptions.unsafeMake(options)
  } catch (error) {
    if (name === undefined || !(error instanceof LockOptions.InvalidLockOptions)) throw error
    const named = (field: string) => `jobs.${name}.${field}`
    throw new LockOptions.InvalidLockOptions({
      field: named(error.field),
      reason: error.reason,
      issues: error.issues.map((issue) => ({ ...issue, field: named(issue.field) }))
    })
  }
}

// Effect's own failures reach the caller as themselves (a DuplicateJob, a RedisError…), not wrapped.
const settle = <A>(exit: Exit.Exit<A, unknown>): A => {
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}

/**
 * Wraps `queue`. Lock options are checked here: an impossible combination throws `InvalidLockOptions` naming the
 * field and the job name.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <DataType = unknown>(queue: Queue, options: Options): UniqueQueue<DataType> => {
  const { deadLetter, defaults, jobs, redis, ...base } = options
  const fallback = definitionOf(base)
  const named = new Map(
    Object.entries(jobs ?? {}).map(([name, own]) => [name, definitionOf({ ...base, ...own }, name)])
  )
  const defined = (name: string): BullMQ.Defined => ({ definition: named.get(name) ?? fallback })

  const runtime = ManagedRuntime.make(
    Layer.mergeAll(
      Redis.layer(redis ?? redisOf(queue.opts.connection)),
      BullMQ.layer(queue, { deadLetter }),
      defaults === undefined ? Defaults.layerConfig() : Defaults.layer(defaults)
    )
  )
  const run = <A, E>(effect: Effect.Effect<A, E, Redis.RedisService | JobQueue | BullMQ.BullMQ>) =>
    runtime.runPromiseExit(effect).then(settle)

  return {
    queue,
    add: (name, data, opts) =>
      run(Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const job = Job.make({
          worker: name,
          queue: queue.name,
          args: [data],
          jid: opts?.jobId,
          at: opts?.delay !== undefined && opts.delay > 0 ? now + opts.delay : undefined
        })
        return yield* Middleware.client(defined(name).definition)(
          job,
          (stamped) => Effect.flatMap(BullMQ.BullMQ, (bull) => bull.add(stamped, opts))
        )
      })),
    processor: (fn) =>
      BullMQ.processorWith<Redis.RedisService | JobQueue>((effect, signal) => runtime.runPromiseExit(effect, { signal }))(
        (job) => defined(job.name),
        (job, _, token) => Effect.tryPromise({ try: (abort) => fn(job, token, abort), catch: (cause) => cause })
      ),
    died: (job) => run(Middleware.died(defined(job.name).definition)(BullMQ.toJob(job))),
    close: async () => {
      await runtime.dispose()
      await queue.close()
    }
  }
}
