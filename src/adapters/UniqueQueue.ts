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
import { DelayedError } from "bullmq"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import type * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Tracer from "effect/Tracer"
import * as Defaults from "../Defaults.js"
import * as History from "../History.js"
import * as BullOptions from "./bullmq/Options.js"
import * as HotPath from "./bullmq/HotPath.js"
import * as Waits from "../store/ReleaseWaits.js"
import * as RedisOptions from "../store/RedisOptions.js"
import * as Job from "../Job.js"
import * as Lock from "../Lock.js"
import { type JobQueue, QueueError } from "../JobQueue.js"
import * as Middleware from "../Middleware.js"
import * as LockOptions from "../Options.js"
import * as Redis from "../Redis.js"
import type * as Strategy from "../Strategy.js"
import * as BullMQ from "./BullMQ.js"

/**
 * The lock options of a queue's jobs, with `lockArgs` given what BullMQ carries: the job's arguments are `[data]`.
 *
 * @since 0.1.0
 * @category models
 */
export interface JobOptions<DataType = unknown> extends Omit<LockOptions.Options, "lockArgs"> {
  /** What counts for uniqueness (the gem's `lock_args_method`): given `[data]`, the job's data as the queue types it. */
  readonly lockArgs?: ((args: readonly [DataType]) => unknown) | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options<DataType = unknown> extends JobOptions<DataType> {
  /**
   * The Redis that holds the locks: `Redis.Options`, or `Redis.ClusterOptions` (`{ nodes }`) for Redis Cluster. Default:
   * the queue's own connection settings (url, or host, port, db, credentials, tls; a `Cluster`'s nodes and node
   * options), on a connection of its own.
   */
  readonly redis?: Redis.Options | Redis.ClusterOptions | undefined
  /** Other lock options for some job names; the rest use these. */
  readonly jobs?: Readonly<Record<string, JobOptions<DataType>>> | undefined
  /** Where rejected jobs go (default: a queue named `<queue>-dead`). */
  readonly deadLetter?: Queue | undefined
  /**
   * The global defaults for what these options leave out (`Defaults.layer`'s input). Default: read from the
   * `UNIQUE_JOBS_*` variables, as `Defaults.layerConfig` does, so a Promise-face producer and an Effect worker
   * configured the same way compute the same digests.
   */
  readonly defaults?: Defaults.Input | undefined
  /**
   * The Effect tracer its spans go to (for OpenTelemetry, `@effect/opentelemetry`'s `OtelTracer.make` run with an
   * `OtelTracer` layer: see the Telemetry page). This face runs its own runtime, so a tracer installed elsewhere never
   * reaches it. With one that records, every call runs through the Effect middleware and makes the spans the Effect
   * face makes: a hold keeps its span's context, and a duplicate it refuses, here or on the Effect face, links to it.
   * Default none: no span is made.
   */
  readonly tracer?: Tracer.Tracer | undefined
  /**
   * Count this queue's locks into the admin UI's metrics (`History.layer` on the lock prefix: one script call every
   * 10 s, whatever the number of jobs). Default true; false writes nothing of the kind.
   */
  readonly history?: boolean | undefined
}

/**
 * How `close` ends.
 *
 * @since 0.1.0
 * @category models
 */
export interface CloseOptions {
  /**
   * How long to wait for the jobs this queue's processors are running. Default: until they end, as `worker.close()`
   * waits. When it passes, they are cancelled (their run locks released; BullMQ retries them by their attempts).
   */
  readonly timeout?: Duration.Input | undefined
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
   * (default: a new one); `opts.delay` makes the lock's TTL count from when the job runs. An id BullMQ already
   * has (a completed job it keeps, say) fails with `JobIdTaken`, before any lock is taken: BullMQ would add nothing.
   * Options that cannot work with the locks (`deduplication`, `repeat`, an empty or non-string `jobId`, a `delay`
   * that is not whole milliseconds) fail with `InvalidLockOptions` naming `opts.<option>`.
   */
  readonly add: (name: string, data: DataType, opts?: JobsOptions) => Promise<Strategy.ClientOutcome<BullJob>>
  /**
   * A processor for `new Worker(queue.name, …)`: runs `fn` through the server middleware. `signal` aborts when the
   * run lock is lost, `close`'s timeout passes or BullMQ cancels the job (`worker.cancelJob`). As with BullMQ's own
   * processors, only a `fn` that declares it (three parameters) is given one; BullMQ cancels only such a job. A job
   * turned away completes with `undefined`. A job it is handed after `close()` began is put back (delayed by a
   * second, no attempt spent) for a worker that is still open; so is one whose handoff or run lock Redis failed to
   * take before `fn` started (a timeout, a closed connection, a failover: delayed 0.5 s, doubling up to 8 s).
   */
  readonly processor: <R>(
    fn: (job: BullJob<DataType>, token: string | undefined, signal: AbortSignal) => Promise<R>
  ) => (job: BullJob<DataType>, token?: string, signal?: AbortSignal) => Promise<R | undefined>
  /** Releases the locks a job that will never run again still holds (the processor does it on a last failure). */
  readonly died: (job: BullJob<DataType>) => Promise<boolean>
  /**
   * `queue.remove(jobId)`, and the queue lock the job held goes with it (as `died` lets it go: `until_expired` keeps
   * its lock until its TTL). A running job is not removed (BullMQ answers 0) and keeps its locks. Answers BullMQ's 1
   * (removed) or 0.
   */
  readonly remove: (jobId: string, opts?: { readonly removeChildren?: boolean | undefined }) => Promise<number>
  /**
   * As `queue.drain(delayed)`: removes the waiting and prioritized jobs (and the delayed ones with `delayed`), a page
   * at a time and each as `remove` does, so each one's queue lock goes with it; as many as were there when it was
   * called, oldest first, so a producer adding meanwhile never keeps it going. A job a worker takes meanwhile runs,
   * with its locks. Answers how many it removed (a job a worker finishes at that very moment may be among them).
   */
  readonly drain: (delayed?: boolean) => Promise<number>
  /**
   * As `queue.obliterate(opts)`: pauses the queue, removes every job that is not running as `remove` does (their
   * queue locks go with them), then lets BullMQ delete what is left. Without `force` it refuses, removing nothing,
   * while a job runs; with `force` a running job's locks stay its own: they go as its run ends. Answers how many
   * jobs it removed before BullMQ deleted the rest.
   */
  readonly obliterate: (opts?: { readonly force?: boolean | undefined; readonly count?: number | undefined }) => Promise<number>
  /**
   * Ends the waits of jobs waiting for a run lock (`lockTimeout`: each goes to its server strategy), waits for the
   * jobs its processors are running (so each releases its lock), then closes the runtime (lock connection,
   * dead-letter queue) and the queue. Safe in either order with `worker.close()`; a second call
   * answers the first one's promise.
   */
  readonly close: (options?: CloseOptions) => Promise<void>
}

/**
 * An add under a `jobId` BullMQ already has: BullMQ keeps the job it has (waiting, running, or completed and kept)
 * and adds nothing, so no lock was taken for it. Use another id, or remove the old job first.
 *
 * @since 0.1.0
 * @category errors
 */
export class JobIdTaken extends Schema.TaggedError<JobIdTaken>("effect-unique-jobs/JobIdTaken")("JobIdTaken", {
  queue: Schema.String,
  jid: Schema.String,
  /** BullMQ's state of the job it has: waiting, delayed, active, completed, failed… */
  state: Schema.String
}) {
  override get message(): string {
    return `queue "${this.queue}" already has job ${this.jid} (${this.state}): BullMQ adds nothing under an id it ` +
      "knows, so nothing was added and no lock was taken; add under another jobId, or remove the old job first " +
      "(queue.remove, or removeOnComplete / removeOnFail)"
  }
}

const connectionKeys = ["host", "port", "db", "username", "password", "tls", "family", "path"] as const

// The queue's connection settings, whether it was given options (`{ url }` included) or an ioredis instance (which
// keeps them in `options`). Only where to connect is taken: BullMQ's retry and blocking settings are not for locks.
const redisOf = (connection: ConnectionOptions | undefined): Redis.Options | Redis.ClusterOptions => {
  if (isCluster(connection)) return clusterOf(connection)
  const source = connection as Record<string, unknown> & { readonly options?: Record<string, unknown> } | undefined
  const settings = typeof source?.options === "object" && source.options !== null ? source.options : source ?? {}
  const client: Record<string, unknown> = {}
  // ioredis keeps an unset username or password as null.
  for (const key of connectionKeys) {
    if (settings[key] !== undefined && settings[key] !== null) client[key] = settings[key]
  }
  return typeof settings.url === "string" ? { url: settings.url, client } : { client }
}

type Issue = BullOptions.Issue

// What an ioredis `Cluster` keeps of how it was made (its startup nodes are private in its types, public at run time).
interface ClusterConnection {
  readonly isCluster: true
  readonly startupNodes: ReadonlyArray<string | number | { readonly host?: string; readonly port?: number }>
  readonly options: { readonly redisOptions?: unknown }
}

const isCluster = (connection: unknown): connection is ClusterConnection =>
  LockOptions.isRecord(connection) && connection.isCluster === true && Array.isArray(connection.startupNodes)

// A Cluster connection's startup nodes and what each node's connection was given to connect (credentials, tls).
const clusterOf = (connection: ClusterConnection): Redis.ClusterOptions => {
  const nodes = connection.startupNodes.map((node) =>
    typeof node === "number"
      ? `127.0.0.1:${node}`
      : typeof node === "string"
      ? node
      : { host: node.host ?? "127.0.0.1", port: node.port ?? 6379 }
  )
  const own = (connection.options.redisOptions ?? {}) as Record<string, unknown>
  const redisOptions: Record<string, unknown> = {}
  for (const key of connectionKeys) {
    if (key !== "host" && key !== "port" && own[key] !== undefined && own[key] !== null) redisOptions[key] = own[key]
  }
  return { nodes, client: { redisOptions } }
}

const isClusterOptions = (options: Redis.Options | Redis.ClusterOptions): options is Redis.ClusterOptions =>
  "nodes" in options

const prefixesOf = (definitions: ReadonlyArray<LockOptions.Definition>, settings: Defaults.Settings) =>
  new Set(definitions.map((definition) => Defaults.resolve(definition, settings).lockPrefix))

const isQueue = (value: unknown): value is Queue =>
  LockOptions.isRecord(value) && typeof value.name === "string" && typeof value.add === "function"

const issuesOf = <A>(result: Result.Result<A, LockOptions.InvalidLockOptions>, found: Array<Issue>): A | undefined => {
  if (Result.isSuccess(result)) return result.success
  found.push(...result.failure.issues)
  return undefined
}

// A ConfigError's issues, each named by its variable (the path of a schema issue); a source that could not be read is
// one issue of the defaults.
const configIssues = (error: Config.ConfigError): Array<Issue> => {
  if (Schema.isSchemaError(error.cause)) {
    const issues = LockOptions.formatIssues(error.cause)
    if (issues.length > 0) return issues.map((issue) => ({ field: issue.field || "defaults", reason: issue.reason }))
  }
  return [{ field: "defaults", reason: error.message }]
}

// A job's arguments here are always `[data]` (BullMQ carries one value): a lockArgs typed for that takes them all.
const definitionOf = (options: JobOptions<never>, under: string | undefined) =>
  Result.mapError(
    Effect.runSync(Effect.result(LockOptions.make(options as LockOptions.Options))),
    (error) => LockOptions.invalidOptions(error.issues, under)
  )

// How long BullMQ's Redis has to answer, as an error says it ("5s").
const defaultTimeoutText = Duration.format(Duration.fromInputUnsafe(BullMQ.defaultTimeout))

// A call bounded in time that fails with `onTimeout`'s error when the time passes (the call is interrupted).
const timeoutFail = <E2>(options: { readonly duration: Duration.Input; readonly onTimeout: () => E2 }) =>
  Effect.timeoutOrElse({ duration: options.duration, orElse: () => Effect.fail(options.onTimeout()) })

// Effect's own failures reach the caller as themselves (a DuplicateJob, a RedisError…), not wrapped.
const settle = <A>(exit: Exit.Exit<A, unknown>): A => {
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}

/**
 * A processor's `fn` as an effect. Interrupted because its run lock was lost (an operator revoked it), it waits for
 * `fn`'s promise to settle before the lock is released: nothing stops a promise, so the lock's place is kept (the lease
 * keeper renews it with `keep`) until `fn` has returned, and no second copy starts beside it, unless close's timeout
 * passes first (`cut`). Any other interruption (close's timeout, `worker.cancelJob`) ends at once. `fn` is given a
 * signal, aborted on any interruption, only when it takes one.
 */
const untilReturned = <A>(
  f: (signal: AbortSignal | undefined) => Promise<A> | A,
  withSignal: boolean,
  cut: Promise<void>
) =>
  Effect.callback<A, unknown>((resume) => {
    const controller = withSignal ? new AbortController() : undefined
    let settled: Promise<unknown>
    try {
      settled = Promise.resolve(f(controller?.signal)).then(
        (value) => resume(Effect.succeed(value)),
        (cause: unknown) => resume(Effect.fail(cause))
      )
    } catch (cause) {
      resume(Effect.fail(cause))
      settled = Promise.resolve()
    }
    return Effect.flatMap(Lock.currentBoundary, (boundary) => {
      controller?.abort()
      return boundary?.lost === undefined ? Effect.void : Effect.promise(() => Promise.race([settled, cut]))
    })
  })

// What every call of the face runs with: the lock store, the queue port and the adapter.
type Services = Redis.RedisService | JobQueue | BullMQ.BullMQ

// What close waits for, and how its timeout ends it.
interface Cancellable {
  readonly cancel: () => void
}

// How long a job handed to a closed queue's processor waits before BullMQ offers it again: long enough not to spin
// while the worker is still open, short enough for another worker to take it soon.
const putBackMs = 1_000

// Jobs read and removed at once by drain and obliterate: one page of BullMQ reads, then its removals together.
const removalPage = 100

/**
 * Wraps `queue`. Every option is checked here, once: an impossible combination, a value of the wrong kind
 * (`redis: 5`, `jobs: [1, 2]`, `jobs: { a: null }`, `deadLetter: {}`), bad `defaults` or `UNIQUE_JOBS_*` values, and
 * queue `defaultJobOptions` that cannot work with the locks throw one `InvalidLockOptions` naming every field
 * (`redis.url`, `jobs.<name>.<field>`, `defaults.lockTtl`, `UNIQUE_JOBS_LOCK_TTL`…).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <DataType = unknown>(queue: Queue, options: Options<DataType>): UniqueQueue<DataType> => {
  if (!isQueue(queue)) {
    const reason = `expected a BullMQ Queue, got ${LockOptions.describeValue(queue)}`
    throw LockOptions.invalidOptions([{ field: "queue", reason }])
  }
  if (!LockOptions.isRecord(options)) {
    const reason = `expected lock options like { lock: "until_executed" }, got ${LockOptions.describeValue(options)}`
    throw LockOptions.invalidOptions([{ field: "options", reason }])
  }
  const { deadLetter, defaults, history, jobs, redis, tracer, ...base } = options
  if (history !== undefined && typeof history !== "boolean") {
    throw LockOptions.invalidOptions([{ field: "history", reason: `expected true or false, got ${LockOptions.describeValue(history)}` }])
  }
  const found: Array<Issue> = []
  if (tracer !== undefined && !(LockOptions.isRecord(tracer) && typeof tracer.span === "function")) {
    const reason = `expected an Effect Tracer (Tracer.make, or @effect/opentelemetry's OtelTracer.make), got ${
      LockOptions.describeValue(tracer)
    }`
    found.push({ field: "tracer", reason })
  }
  const fallback = issuesOf(definitionOf(base, undefined), found)
  const named = new Map<string, LockOptions.Definition>()
  if (jobs !== undefined && !LockOptions.isRecord(jobs)) {
    found.push({
      field: "jobs",
      reason: `expected lock options by job name, like { rebuild: { lock: "while_executing" } }, got ${
        LockOptions.describeValue(jobs)
      }`
    })
  } else {
    for (const [name, own] of Object.entries(jobs ?? {})) {
      if (!LockOptions.isRecord(own)) {
        found.push({
          field: `jobs.${name}`,
          reason: `expected the lock options of jobs named "${name}", like { lock: "while_executing" }, got ${
            LockOptions.describeValue(own)
          }`
        })
        continue
      }
      const definition = issuesOf(definitionOf({ ...base, ...own }, `jobs.${name}`), found)
      if (definition !== undefined) named.set(name, definition)
    }
  }
  const redisOptions = redis === undefined
    ? redisOf(queue.opts?.connection)
    : LockOptions.isRecord(redis) && isClusterOptions(redis)
    ? issuesOf(RedisOptions.decodeCluster(redis, "redis"), found)
    : issuesOf(RedisOptions.decode(redis, "redis"), found)
  if (deadLetter !== undefined) {
    if (!isQueue(deadLetter)) {
      const reason = `expected a BullMQ Queue, got ${LockOptions.describeValue(deadLetter)}`
      found.push({ field: "deadLetter", reason })
    } else if (
      deadLetter === queue || (deadLetter.name === queue.name && deadLetter.opts?.prefix === queue.opts?.prefix)
    ) {
      const reason = "expected another queue than the one it serves: a rejected job would run again"
      found.push({ field: "deadLetter", reason })
    }
  }
  found.push(...BullOptions.issues(queue.defaultJobOptions, "queue.defaultJobOptions", "defaults"))
  const settings = defaults === undefined
    ? Exit.match(Effect.runSyncExit(Defaults.fromConfig), {
      onFailure: (cause) => {
        const error = Cause.findErrorOption(cause)
        if (error._tag === "None") throw Cause.squash(cause)
        found.push(...configIssues(error.value))
        return undefined
      },
      onSuccess: (settings) => settings
    })
    : issuesOf(
      Result.mapError(Defaults.make(defaults), (error) =>
        LockOptions.invalidOptions(error.issues.map((issue) =>
          issue.field === "defaults" ? issue : { field: `defaults.${issue.field}`, reason: issue.reason }
        ))),
      found
    )
  if (found.length > 0 || fallback === undefined || settings === undefined || redisOptions === undefined) {
    throw LockOptions.invalidOptions(found)
  }
  const defined = (name: string): BullMQ.Defined => ({ definition: named.get(name) ?? fallback })
  // A delay BullMQ applies to every job of the queue counts for the lock's TTL as the add's own does.
  const queueDelay = queue.defaultJobOptions.delay ?? 0

  const layer = Layer.mergeAll(
    BullMQ.layer(queue, { deadLetter }),
    Layer.succeed(Defaults.Defaults, settings),
    tracer === undefined ? Layer.empty : Layer.succeed(Tracer.Tracer, tracer),
    // The prefix is decoded already: the layer cannot fail.
    history === false ? Layer.empty : Layer.orDie(History.layer({ prefix: Defaults.resolve(fallback, settings).lockPrefix })),
    // Every prefix's layout checked at the build: a process configured otherwise fails its first call, runs nothing.
    settings.enabled
      ? Layer.effectDiscard(
        Effect.forEach(prefixesOf([fallback, ...named.values()], settings), Redis.checkLayout, { discard: true })
      )
      : Layer.empty
  ).pipe(Layer.provideMerge(
    isClusterOptions(redisOptions) ? Redis.layerCluster(redisOptions) : Redis.layer(redisOptions)
  ))
  // Built at the first call. A build that failed (the lock Redis down then) would answer every later call with that
  // failure, for good: ManagedRuntime keeps it. So a failed build is let go, and the next call builds anew.
  // Calls made while it builds start once it is built, in the order they were made (`building`'s callbacks run in
  // the order they were added): a fiber forked on a runtime still building waits on its build, and those waits end
  // last first, so the first burst of adds reached BullMQ in reverse order.
  // Once built, every call runs on the runtime's services (`Effect.runForkWith`): a fiber of its own, as the runtime's
  // `runFork` would start, without the runtime's per-fiber bookkeeping (close waits for the calls itself).
  let runtime = ManagedRuntime.make(layer)
  let services: Context.Context<Services> | undefined
  let built: "no" | "building" | "yes" = "no"
  let building: Promise<Exit.Exit<unknown, unknown>> = Promise.resolve(Exit.void)
  const build = () => {
    if (built !== "no") return
    built = "building"
    const current = runtime
    building = Effect.runPromiseExit(current.contextEffect).then((exit) => {
      if (Exit.isSuccess(exit)) {
        if (runtime === current) {
          services = exit.value
          built = "yes"
        }
      } else if (runtime === current && closing === undefined) {
        runtime = ManagedRuntime.make(layer)
        built = "no"
        void current.dispose().catch(() => undefined)
      }
      return exit
    })
  }
  // Adds and performs under way, so that close waits for them (each releases what it took); a processor's jobs are
  // cancelled when close's timeout passes, and nothing else is: an add's calls are each bounded (the lock's by the
  // store's timeout, BullMQ's by the adapter's), and an add cut off while BullMQ's add is still on its way could leave a
  // job without its lock. One entry per call, watched by its observer: no promise chain and no abort listener per call
  // (a listener per add on one shared signal cost CPU and warned past ten adds in flight).
  const inFlight = new Set<Cancellable>()
  let drained: Array<() => void> = []
  // Set when close's timeout passes: a job's fiber started after it is interrupted at once, as it would have been had
  // it been running.
  let cancelled = false
  // Settles then too: a revoked job waiting for its fn to return (untilReturned) waits no longer.
  let timeoutPassed!: () => void
  const timedOut = new Promise<void>((resolve) => (timeoutPassed = resolve))
  const settledAll = (): Promise<void> =>
    inFlight.size === 0 ? Promise.resolve() : new Promise((resolve) => drained.push(resolve))
  const finished = (entry: Cancellable) => {
    inFlight.delete(entry)
    if (inFlight.size === 0 && drained.length > 0) {
      const waiting = drained
      drained = []
      for (const resolve of waiting) resolve()
    }
  }
  const runExit = <A, E>(
    effect: Effect.Effect<A, E, Services>,
    signal?: AbortSignal | undefined,
    job = false
  ): Promise<Exit.Exit<A, unknown>> =>
    new Promise((resolve) => {
      build()
      let cancel = false
      let fiber: Fiber.Fiber<A, unknown> | undefined
      const entry: Cancellable = {
        cancel: job ? () => (fiber === undefined ? (cancel = true) : fiber.interruptUnsafe()) : () => undefined
      }
      inFlight.add(entry)
      const ended = (exit: Exit.Exit<A, unknown>) => {
        finished(entry)
        resolve(exit)
      }
      const start = () => {
        const started = fiber = Effect.runForkWith(services!)(effect)
        if (signal !== undefined) {
          const abort = () => started.interruptUnsafe()
          if (signal.aborted) abort()
          else signal.addEventListener("abort", abort, { once: true })
          started.addObserver(() => signal.removeEventListener("abort", abort))
        }
        started.addObserver(ended)
        if (cancelled || cancel) entry.cancel()
      }
      if (built === "yes") return start()
      // A failed build fails the call with the build's failure, as a fiber on that runtime would have ended.
      building.then((exit) => (Exit.isSuccess(exit) ? start() : ended(exit as Exit.Exit<never, unknown>)))
    })
  const run = <A, E>(effect: Effect.Effect<A, E, Services>) =>
    runExit(effect).then(settle)
  // A hot-path call (adapters/bullmq/HotPath): waited for by close as a fiber is, until it settles and then what it still
  // has answering (`after`: a job's release sent with its outcome). `cancel` is how close's timeout ends it (the job
  // then settles as cancelled); a release still answering after its job settled is no longer waited for then (the
  // job has performed; a lock whose release goes unanswered ends by its TTL or the reaper). An add has no `cancel`:
  // its lock call is bounded by the store's timeout and its BullMQ add by the adapter's, and it ends when they answer.
  const tracked = <A>(work: Promise<A>, cancel?: () => void, after?: () => Promise<void> | undefined): Promise<A> => {
    let answering: Promise<void> | undefined
    const entry: Cancellable = {
      cancel: () => (answering === undefined ? cancel?.() : finished(entry))
    }
    inFlight.add(entry)
    return work.finally(() => {
      answering = after?.()
      if (answering === undefined) finished(entry)
      else answering.then(() => finished(entry))
    })
  }

  // Each job name's fast phases, made once the runtime is built (the first call starts building it); null where the
  // name has none (locks disabled).
  // `processing`: the definition as the processor runs it (a redelivered copy meeting its own run lock waits).
  type Fast = HotPath.Fast & {
    readonly addNow: (job: Job.Job, options?: JobsOptions | undefined) => Promise<BullJob>
    readonly processing: HotPath.Fast
  }
  const fastByName = new Map<string, Fast | null>()
  const fastFor = (name: string): Fast | undefined => {
    if (built !== "yes") return undefined
    let found = fastByName.get(name)
    if (found === undefined) {
      const made = Effect.runSyncWith(services!)(HotPath.fast(defined(name).definition))
      const addNow = BullMQ.addNow(Context.get(services!, BullMQ.BullMQ))
      found = made === undefined || addNow === undefined
        ? null
        : { ...made, addNow, processing: { ...made, definition: Middleware.awaitingItself(made.definition, "reschedule") } }
      fastByName.set(name, found)
    }
    return found ?? undefined
  }

  let closing: Promise<void> | undefined
  const closed = (operation: string, jid: string | undefined) =>
    new QueueError({ operation, jid, reason: `the UniqueQueue of "${queue.name}" is closed` })

  // BullMQ ignores an add under an id it knows (a completed job it keeps, say): without this check the lock would be
  // taken for a job that never runs. Only a caller's jobId can be known: our own jids are new.
  const notTaken = (jid: string) =>
    Effect.gen(function*() {
      const known = yield* Effect.tryPromise({
        try: () => queue.getJob(jid),
        catch: (cause) =>
          new QueueError({
            operation: "add",
            jid,
            reason: cause instanceof Error ? cause.message : String(cause),
            cause
          })
      }).pipe(
        // Bounded as the adapter's calls are: a queue whose Redis does not answer fails the add, taking no lock.
        timeoutFail({
          duration: BullMQ.defaultTimeout,
          onTimeout: () =>
            new QueueError({
              operation: "add",
              jid,
              reason: `BullMQ's Redis did not answer within ${defaultTimeoutText}`
            })
        })
      )
      if (known === undefined || known === null) return
      // Only to name the state in the error: a slow or failed read says "unknown".
      const state = yield* Effect.tryPromise(() => queue.getJobState(jid)).pipe(
        Effect.timeout(BullMQ.defaultTimeout),
        Effect.orElseSucceed(() => "unknown")
      )
      return yield* Effect.fail(new JobIdTaken({ queue: queue.name, jid, state }))
    })

  // A call to BullMQ bounded as the adapter's are: a queue whose Redis does not answer fails it.
  const bounded = <A>(operation: string, jid: string | undefined, f: () => Promise<A>) =>
    Effect.tryPromise({
      try: f,
      catch: (cause) =>
        new QueueError({ operation, jid, reason: cause instanceof Error ? cause.message : String(cause), cause })
    }).pipe(timeoutFail({
      duration: BullMQ.defaultTimeout,
      onTimeout: () =>
        new QueueError({
          operation,
          jid,
          reason: `BullMQ's Redis did not answer within ${defaultTimeoutText}`
        })
    }))
  // BullMQ's remove is one script that refuses a job a worker holds: a job it removed never runs, so its queue lock
  // goes (only that jid's hold: the lock is re-entrant by jid); a run lock is never touched here.
  // A release that fails after the removal says what is left and what frees it.
  const removeJob = (operation: string, job: BullJob, removeChildren: boolean) =>
    Effect.flatMap(bounded(operation, job.id, () => queue.remove(job.id!, { removeChildren })), (code) =>
      code !== 1 ? Effect.succeed(0) : Middleware.died(defined(job.name).definition)(BullMQ.toJob(job)).pipe(
        Effect.mapError((error) =>
          error._tag === "RedisError"
            ? new Redis.RedisError({
              ...error,
              reason: `${error.reason}; job ${job.id} was removed from queue "${queue.name}" but its lock may be left: ` +
                `once Redis answers, unique-jobs reap --bullmq-queue ${queue.name} frees it`
            })
            : error
        ),
        Effect.as(1)
      ))
  // The jobs of `types` there now, oldest first and a page at a time, each removed with its lock; a job scheduler's
  // next run is BullMQ's own (its drain keeps it too). Answers how many went.
  const removeAll = (operation: string, types: Array<"waiting" | "prioritized" | "delayed" | "waiting-children">) =>
    Effect.gen(function*() {
      const total = yield* bounded(operation, undefined, () => queue.getJobCountByTypes(...types))
      let seen = 0
      let removed = 0
      while (seen < total) {
        const page = yield* bounded(operation, undefined, () => queue.getJobs(types, 0, removalPage - 1, true))
        if (page.length === 0) break
        seen += page.length
        const asked = page.filter((job) => job.id !== undefined && job.repeatJobKey === undefined)
        // A job a worker finished since the page was read is not removed: its record is the user's (one call a page).
        const presence = yield* Effect.flatMap(BullMQ.BullMQ, (bull) => bull.exists(asked.map(BullMQ.toJob)))
        const answers = yield* Effect.forEach(
          asked.filter((_, i) => presence[i] === "exists"),
          (job) => removeJob(operation, job, true),
          { concurrency: removalPage }
        )
        removed += answers.reduce((sum: number, n) => sum + n, 0)
      }
      return removed
    })

  return {
    queue,
    add: (name, data, opts) => {
      if (closing !== undefined) return Promise.reject(closed("add", undefined))
      if (typeof name !== "string" || name.length === 0) {
        const reason = `expected the job's name, a non-empty string, got ${LockOptions.describeValue(name)}`
        return Promise.reject(LockOptions.invalidOptions([{ field: "name", reason }]))
      }
      const refused = BullOptions.issues(opts, "opts", "add")
      if (refused.length > 0) return Promise.reject(LockOptions.invalidOptions(refused))
      const { definition } = defined(name)
      if (Option.isSome(definition.debounce) && (opts?.delay !== undefined || opts?.timestamp !== undefined)) {
        const given = opts?.delay !== undefined ? "delay" : "timestamp"
        const reason = `${name}'s debounce sets when each job runs (its delay after the newest add, within maxWait): ` +
          `leave ${given} out`
        return Promise.reject(LockOptions.invalidOptions([{ field: `opts.${given}`, reason }]))
      }
      const delay = Option.isSome(definition.debounce) ? 0 : opts?.delay ?? queueDelay
      // A debounced add runs when the middleware timed it (`at`): BullMQ gets that as the add's delay.
      const addAs = (stamped: Job.Job) =>
        Effect.flatMap(BullMQ.BullMQ, (bull) =>
          stamped.at === undefined || Option.isNone(definition.debounce)
            ? bull.add(stamped, opts)
            : Effect.flatMap(Clock.currentTimeMillis, (now) =>
              bull.add(stamped, { ...opts, delay: Math.max(0, stamped.at! - now) })))
      const enqueue = (at: number | undefined) => {
        const job = Job.make({ worker: name, queue: queue.name, args: [data], jid: opts?.jobId, at })
        return Middleware.client(definition)(job, addAs)
      }
      const fast = delay > 0 || opts?.jobId !== undefined ? undefined : fastFor(name)
      if (fast !== undefined) {
        const answer = HotPath.clientFast(
          fast,
          Job.make({ worker: name, queue: queue.name, args: [data] }),
          (stamped) => Effect.flatMap(BullMQ.BullMQ, (bull) => bull.add(stamped, opts)),
          (stamped) => fast.addNow(stamped, opts),
          run
        )
        if (answer !== undefined) return tracked(answer)
      }
      // BullMQ runs a delayed job at its timestamp (default: now) plus its delay.
      const timed = delay > 0
        ? Effect.flatMap(Clock.currentTimeMillis, (now) => enqueue((opts?.timestamp ?? now) + delay))
        : enqueue(undefined)
      // Even with the locks off (`enabled: false`): BullMQ would still add nothing, and Enqueued would be untrue.
      return run(opts?.jobId === undefined ? timed : Effect.andThen(notTaken(opts.jobId), timed))
    },
    processor: (fn) => {
      build()
      void runtime.runFork(
        Effect.forEach(
          new Set([fallback, ...named.values()]),
          (definition) => Effect.flatMap(Defaults.Defaults, (s) => BullMQ.warnIfDropping(Defaults.resolve(definition, s))),
          { discard: true }
        )
      )
      // As BullMQ's Worker decides: a signal only for a function that declares it. Each costs several µs of Node
      // CPU (an AbortSignal is dear to make and to collect), and a function that takes none could not stop on it:
      // its promise would go on running after its lock was let go.
      const takesSignal = fn.length >= 3
      const untilDone = fn as (job: BullJob<DataType>, token: string | undefined) => ReturnType<typeof fn>
      // A processor's job, which close's timeout cancels. A fn that answers a plain value, not a promise, is taken as
      // BullMQ's Worker takes it (and the hot path).
      const perform = BullMQ.processorWith<Redis.RedisService | JobQueue>((effect, signal) =>
        runExit(effect, signal, true)
      )(
        (job) => defined(job.name),
        takesSignal
          ? (job, _, token) => untilReturned((abort) => fn(job, token, abort!), true, timedOut)
          : (job, _, token) => untilReturned(() => untilDone(job, token), false, timedOut)
      )
      // A job for a fn that takes no signal, of any lock type but until_and_while_executing: run with no fiber
      // (adapters/bullmq/HotPath). Cancelled by close's timeout as its fiber would be: its run lock released, it fails as
      // cancelled, and what its fn does after that changes no lock. Conflicts run as the processor runs them: on the
      // job's own fiber, which `schedule` and `kill` act on (BullMQ.performing).
      const performFast = (
        job: BullJob<DataType>,
        token: string | undefined
      ): Promise<Awaited<ReturnType<typeof fn>> | undefined> | undefined => {
        const fast = takesSignal ? undefined : fastFor(job.name)
        if (fast === undefined) return undefined
        const ours = BullMQ.toJob(job)
        // Whether its fn has started: Redis failing before then puts the job back (BullMQ.failedAs).
        const active: BullMQ.Active = { job, token, moved: false, started: false }
        const started = HotPath.serverFast(
          fast.processing,
          ours,
          () => {
            active.started = true
            return untilDone(job, token)
          },
          (effect) => run(BullMQ.performing(job, token, effect))
        )
        if (started === undefined) return undefined
        let cancellation: Error | undefined
        return tracked(
          started.outcome.then(
            (ended) => ended._tag === "Performed" ? ended.value as Awaited<ReturnType<typeof fn>> : undefined,
            (failure: unknown) =>
              cancellation !== undefined
                ? Promise.reject(cancellation)
                : run(BullMQ.failedAs(defined(job.name).definition, active, ours)(failure))
          ),
          () => started.interrupt(cancellation = new Error(`job ${job.id} was cancelled`)),
          started.after
        )
      }
      const handle = async (job: BullJob<DataType>, token: string | undefined, signal: AbortSignal | undefined) => {
        if (closing !== undefined) {
          // The runtime is going or gone: nothing could release a lock taken now. Back to delayed, no attempt spent.
          if (token === undefined) throw closed("perform", job.id)
          await job.moveToDelayed(Date.now() + putBackMs, token)
          throw new DelayedError()
        }
        return performFast(job, token) ?? perform(job, token, signal)
      }
      // Three parameters ask BullMQ for its signal (`worker.cancelJob`); two ask for none.
      return takesSignal
        ? (job, token, signal) => handle(job, token, signal)
        : (job, token) => handle(job, token, undefined)
    },
    died: (job) =>
      closing !== undefined
        ? Promise.reject(closed("died", job.id))
        : run(Middleware.died(defined(job.name).definition)(BullMQ.toJob(job))),
    remove: (jobId, opts) => {
      if (closing !== undefined) return Promise.reject(closed("remove", jobId))
      if (typeof jobId !== "string" || jobId === "") {
        const reason = `expected the id of a job, a non-empty string, got ${LockOptions.describeValue(jobId)}`
        return Promise.reject(LockOptions.invalidOptions([{ field: "jobId", reason }]))
      }
      return run(Effect.flatMap(bounded("remove", jobId, () => queue.getJob(jobId)), (job) =>
        job === undefined || job === null ? Effect.succeed(0) : removeJob("remove", job, opts?.removeChildren ?? true)))
    },
    drain: (delayed = false) => {
      if (closing !== undefined) return Promise.reject(closed("drain", undefined))
      if (typeof delayed !== "boolean") {
        const reason = `expected true (delayed jobs too) or false, got ${LockOptions.describeValue(delayed)}`
        return Promise.reject(LockOptions.invalidOptions([{ field: "delayed", reason }]))
      }
      return run(removeAll("drain", delayed ? ["waiting", "prioritized", "delayed"] : ["waiting", "prioritized"]))
    },
    obliterate: (opts) => {
      if (closing !== undefined) return Promise.reject(closed("obliterate", undefined))
      const force = opts?.force ?? false
      const count = opts?.count ?? 1000
      const refused: Array<Issue> = []
      if (opts !== undefined && !LockOptions.isRecord(opts)) {
        refused.push({ field: "opts", reason: `expected { force?, count? }, got ${LockOptions.describeValue(opts)}` })
      } else {
        if (typeof force !== "boolean") {
          refused.push({ field: "opts.force", reason: `expected true or false, got ${LockOptions.describeValue(force)}` })
        }
        if (!Number.isSafeInteger(count) || count < 1) {
          const reason = `expected a whole number of keys per call from 1 up, such as 1000, got ${LockOptions.describeValue(count)}`
          refused.push({ field: "opts.count", reason })
        }
      }
      if (refused.length > 0) return Promise.reject(LockOptions.invalidOptions(refused))
      return run(Effect.gen(function*() {
        // Paused first, as BullMQ's obliterate does: no job starts from here on, so "running" is settled.
        yield* bounded("obliterate", undefined, () => queue.pause())
        if (!force) {
          const running = yield* bounded("obliterate", undefined, () => queue.getActiveCount())
          if (running > 0) {
            return yield* new QueueError({
              operation: "obliterate",
              reason: `${running} job(s) of queue "${queue.name}" are running: nothing was removed (the queue is ` +
                "left paused, as BullMQ leaves it); wait for them, or pass force: true"
            })
          }
        }
        const removed = yield* removeAll("obliterate", ["waiting", "prioritized", "delayed", "waiting-children"])
        // Unbounded in time, as BullMQ's own: it deletes the queue a chunk (`count`) per call.
        yield* Effect.tryPromise({
          try: () => queue.obliterate({ force, count }),
          catch: (cause) =>
            new QueueError({ operation: "obliterate", reason: cause instanceof Error ? cause.message : String(cause), cause })
        })
        return removed
      }))
    },
    close: (closeOptions) => {
      if (closing !== undefined) return closing
      const timeout = closeTimeout(closeOptions)
      if (Result.isFailure(timeout)) return Promise.reject(timeout.failure)
      return closing = (async () => {
        // Jobs waiting for a run lock (lockTimeout) end their wait now and go to their strategy: close waits for the
        // jobs that run, not for a wait of up to lockTimeout. Found by an outsider probe (close took the lockTimeout).
        if (built === "yes") {
          await Effect.runPromiseWith(services!)(Effect.flatMap(Redis.RedisService, Waits.close)).catch(() => undefined)
        }
        if (timeout.success === undefined) {
          await settledAll()
        } else {
          let timer: ReturnType<typeof setTimeout> | undefined
          const passed = new Promise<"passed">((resolve) => {
            timer = setTimeout(() => resolve("passed"), timeout.success)
          })
          const first = await Promise.race([settledAll(), passed])
          clearTimeout(timer)
          if (first === "passed") {
            cancelled = true
            timeoutPassed()
            for (const entry of inFlight) entry.cancel()
            await settledAll()
          }
        }
        await runtime.dispose()
        await closeQueue(queue)
      })()
    }
  }
}

// BullMQ's close waits for its Redis to answer QUIT, forever when that Redis is down: bounded, then the connection is
// dropped and the caller told.
const closeQueue = (queue: Queue): Promise<void> =>
  Effect.runPromiseExit(
    Effect.tryPromise({
      try: () => queue.close(),
      catch: (cause) => new QueueError({ operation: "close", reason: String(cause), cause })
    }).pipe(
      timeoutFail({
        duration: BullMQ.defaultTimeout,
        onTimeout: () =>
          new QueueError({
            operation: "close",
            reason: `BullMQ's Redis did not answer within ${defaultTimeoutText}; its connection was dropped`
          })
      }),
      Effect.tapError(() => Effect.promise(() => queue.disconnect().catch(() => undefined)))
    )
  ).then(settle)

const decodeTimer = Schema.decodeUnknownResult(LockOptions.TimerDuration)

// close's timeout in whole milliseconds (undefined: wait as long as the jobs run), or what to write instead.
const closeTimeout = (
  options: CloseOptions | undefined
): Result.Result<number | undefined, LockOptions.InvalidLockOptions> => {
  if (options === undefined || options.timeout === undefined) return Result.succeed(undefined)
  return Result.mapBoth(decodeTimer(options.timeout), {
    onFailure: (error) => LockOptions.invalidOptions(LockOptions.formatIssues(error), "timeout"),
    onSuccess: Duration.toMillis
  })
}
