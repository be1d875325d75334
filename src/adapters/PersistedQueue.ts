/**
 * The `PersistedQueue` adapter: the `JobQueue` port over one of Effect's `PersistedQueue`s (`effect/persistence`),
 * on whichever store its `PersistedQueueFactory` was built with (memory, Redis, SQL), and the takers that run the
 * server middleware inside `take`. A job is one element, offered under its jid; a retry is the queue's own (same
 * element, same jid, `retryCount` = attempts - 1); a job killed or dead for good goes to a second queue,
 * `<name>:dead`, of `{ job, reason, at }`.
 *
 * What `PersistedQueue` cannot do is refused, never faked: it cannot remove a waiting element (`remove` answers
 * false), nor put the element it is taking back at a time of our choosing (`schedule` of the job being performed
 * fails). So the strategies that need either, the server's `reschedule`, the client's `replace` and `debounce`, are
 * refused where a worker meets the adapter (`processor`, `worker`, `check`) with `UnsupportedStrategy`.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import * as PersistedQueue from "effect/persistence/PersistedQueue"
 * import { Redis, UniqueJob } from "effect-unique-jobs"
 * import { UniquePersistedQueue } from "effect-unique-jobs/persisted-queue"
 *
 * const Charge = UniqueJob.unsafeMake({ worker: "charge", lock: "until_executed" })
 * const program = Effect.gen(function*() {
 *   yield* Charge.enqueue([{ customer: 1 }]) // Enqueued | Skipped | …
 *   yield* UniquePersistedQueue.worker(Charge, ([order]) => charge(order), { concurrency: 4 })
 * })
 * const Live = UniquePersistedQueue.layer({ name: "default", presence: UniquePersistedQueue.presenceMemory }).pipe(
 *   Layer.provide(PersistedQueue.layer),
 *   Layer.provide(PersistedQueue.layerStoreMemory)
 * )
 * ```
 *
 * @since 2.0.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as EffectPersistedQueue from "effect/persistence/PersistedQueue"
import * as EffectRedis from "effect/persistence/Redis"
import type * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import { Defaults, resolve } from "../Defaults.js"
import type * as Digest from "../Digest.js"
import { UnsupportedStrategy } from "../Errors.js"
import { Job } from "../Job.js"
import { JobQueue, type Presence as PresenceAnswer, QueueError, reasonOf } from "../JobQueue.js"
import type * as Lock from "../Lock.js"
import * as Middleware from "../Middleware.js"
import { type Definition, type InvalidLockOptions, invalidOptions } from "../Options.js"
import { adapterTimeoutMs, describeValue, isRecord } from "../options/Decoding.js"
import type { RedisError, RedisService } from "../Redis.js"
import * as Strategy from "../Strategy.js"

const adapterName = "PersistedQueue"
const annotations = { package: "effect-unique-jobs", module: "PersistedQueue" }

// ---------------------------------------------------------------------------------------------------------------
// Presence: where `exists` reads whether a jid is still to run
// ---------------------------------------------------------------------------------------------------------------

/**
 * Where `exists` reads whether a job is still to run (`"exists"`: pending, delayed, processing, waiting for a retry)
 * or over (`"gone"`: completed, failed for good, never offered). `PersistedQueue` has no read API, so each store is
 * read where it keeps its ids:
 *
 * - `presenceMemory`: a ledger the adapter keeps in process (offered → to run; a take that ends in a success, a
 *   final failure or a kill → over). Exact for the memory store, which lives in one process; shared by every adapter
 *   over the same `PersistedQueueFactory`. Wrong for a store other processes use: pick the store's own.
 * - `presenceRedis({ prefix })`: the Redis store's id set, `<prefix><name>:ids` (one `ZMSCORE` per batch), through
 *   Effect's `Redis` service. `prefix` is the store's (`layerStoreRedis({ prefix })`, default `"effectq:"`).
 * - `presenceSql({ tableName })`: the SQL store's table (one `SELECT` per batch), through `SqlClient`. `tableName`
 *   is the store's (`layerStoreSql({ tableName })`, default `"effect_queue"`).
 *
 * @since 2.0.0
 * @category presence
 */
export type Presence =
  | { readonly _tag: "Memory" }
  | { readonly _tag: "Redis"; readonly prefix: string }
  | { readonly _tag: "Sql"; readonly tableName: string }

/**
 * The services a `Presence` reads with: Effect's `Redis` for `presenceRedis`, `SqlClient` for `presenceSql`.
 *
 * @since 2.0.0
 * @category presence
 */
export type PresenceServices<P extends Presence> = P extends { readonly _tag: "Redis" } ? EffectRedis.Redis
  : P extends { readonly _tag: "Sql" } ? SqlClient.SqlClient
  : never

/**
 * Presence from the adapter's own ledger: for the memory store (`layerStoreMemory`).
 *
 * @since 2.0.0
 * @category presence
 */
export const presenceMemory: { readonly _tag: "Memory" } = { _tag: "Memory" }

/**
 * Presence from the Redis store's id set (`<prefix><name>:ids`): for `layerStoreRedis({ prefix })`.
 *
 * @since 2.0.0
 * @category presence
 */
export const presenceRedis = (
  options?: { readonly prefix?: string | undefined } | undefined
): { readonly _tag: "Redis"; readonly prefix: string } => ({ _tag: "Redis", prefix: options?.prefix ?? "effectq:" })

/**
 * Presence from the SQL store's table: for `layerStoreSql({ tableName })`.
 *
 * @since 2.0.0
 * @category presence
 */
export const presenceSql = (
  options?: { readonly tableName?: string | undefined } | undefined
): { readonly _tag: "Sql"; readonly tableName: string } => ({
  _tag: "Sql",
  tableName: options?.tableName ?? "effect_queue"
})

// The Redis store's id scores (effect/persistence/PersistedQueue.ts): 1e15 while pending or processing, 2e15 +
// failedAt once failed, the completion time once completed, "inf" for an entry of an older effect (in flight or
// failed: it cannot be told, so it counts as there, and the reaper keeps its lock).
const inFlightIdScore = 1e15
const failedIdScore = 2e15
const redisPresenceOf = (score: unknown): "exists" | "gone" => {
  if (score === null || score === undefined) return "gone"
  const text = String(score)
  if (text === "inf" || text === "+inf") return "exists"
  const n = Number(text)
  return n === inFlightIdScore ? "exists" : n >= failedIdScore ? "gone" : Number.isFinite(n) ? "gone" : "exists"
}

type Reader = (jids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<"exists" | "gone">, unknown>

interface Ledger {
  readonly live: Set<string>
}

// One ledger per factory and queue name: adapters over the same memory store agree.
const ledgers = new WeakMap<object, Map<string, Ledger>>()
const ledgerOf = (factory: object, name: string): Ledger => {
  let byName = ledgers.get(factory)
  if (byName === undefined) {
    byName = new Map()
    ledgers.set(factory, byName)
  }
  let ledger = byName.get(name)
  if (ledger === undefined) {
    ledger = { live: new Set() }
    byName.set(name, ledger)
  }
  return ledger
}

const readerOf = (
  presence: Presence,
  name: string,
  ledger: Ledger
): Effect.Effect<Reader, never, EffectRedis.Redis | SqlClient.SqlClient> => {
  switch (presence._tag) {
    case "Memory":
      return Effect.succeed((jids) => Effect.sync(() => jids.map((jid) => ledger.live.has(jid) ? "exists" : "gone")))
    case "Redis":
      return Effect.map(EffectRedis.Redis, (redis): Reader => (jids) =>
        jids.length === 0
          ? Effect.succeed([])
          : Effect.map(
            redis.send<ReadonlyArray<unknown>>("ZMSCORE", `${presence.prefix}${name}:ids`, ...jids),
            (scores) => {
              if (!Array.isArray(scores) || scores.length !== jids.length) {
                throw new Error(`ZMSCORE answered ${String(scores)} for ${jids.length} ids`)
              }
              return scores.map(redisPresenceOf)
            }
          ))
    case "Sql":
      return Effect.map(SqlClient.SqlClient, (client): Reader => {
        const sql = client.withoutTransforms()
        return (jids) =>
          jids.length === 0
            ? Effect.succeed([])
            : Effect.map(
              sql<{ readonly id: string }>`
                SELECT id FROM ${sql(presence.tableName)}
                WHERE queue_name = ${name} AND state = 'pending' AND ${sql.in("id", jids)}
              `,
              (rows) => {
                const pending = new Set(rows.map((row) => row.id))
                return jids.map((jid) => pending.has(jid) ? "exists" : "gone")
              }
            )
      })
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The adapter
// ---------------------------------------------------------------------------------------------------------------

/**
 * @since 2.0.0
 * @category models
 */
export interface Options<P extends Presence = Presence> {
  /** The `PersistedQueue`'s name: one queue of jobs; the dead set is `<name>:dead`. */
  readonly name: string
  /** The job-queue names (`Job.queue`) this adapter serves. Default: `[name]`. Another queue's job: `"unknown"`. */
  readonly queues?: ReadonlyArray<string> | undefined
  /** Where `exists` reads (see `Presence`). Required: the wrong one would tell the reaper a waiting job is gone. */
  readonly presence: P
  /** `PersistedQueue`'s attempts before a job fails for good (and `onDeath` is called). Default 10, as Effect's. */
  readonly maxAttempts?: number | undefined
  /** `PersistedQueue`'s delay before a retry; its input is the attempt. Default Effect's (1 s doubling, up to 5 min). */
  readonly retrySchedule?: Schedule.Schedule<unknown, number> | undefined
  /** How long any call to the queue may take before it fails with a `QueueError`. Default 5 seconds. */
  readonly timeout?: Duration.Input | undefined
}

/**
 * What a dead-letter element carries: the job, why it died, and when (epoch ms).
 *
 * @since 2.0.0
 * @category models
 */
export interface DeadLetter {
  readonly job: Job
  readonly reason: string
  readonly at: number
}

/**
 * The schema of a dead-letter element, for a `PersistedQueue` of your own over `<name>:dead`.
 *
 * @since 2.0.0
 * @category schemas
 */
export const DeadLetter: Schema.Codec<DeadLetter, { readonly job: typeof Job.Encoded; readonly reason: string; readonly at: number }> =
  Schema.Struct({ job: Job, reason: Schema.String, at: Schema.Number })

/**
 * How the takers' runs ended so far: what `MemoryQueue`'s snapshot counts, plus failures.
 *
 * @since 2.0.0
 * @category models
 */
export interface Stats {
  /** Runs that did the work (`Performed`, or any value of a plain handler). */
  readonly succeeded: number
  /** Runs the server middleware skipped as a duplicate (`Skipped`). */
  readonly skipped: number
  /** Runs the server middleware sent to the dead set (`Rejected`), or that `kill`ed their own job. */
  readonly rejected: number
  /** Runs that failed (each retried by the queue, but the last). */
  readonly failed: number
  /** Jobs whose last attempt failed: `onDeath` was called for each. */
  readonly dead: number
}

/**
 * The adapter: the `JobQueue` port, the `PersistedQueue`s it stands on, and its takers.
 *
 * @since 2.0.0
 * @category models
 */
export interface UniquePersistedQueue extends Context.Service.Shape<typeof JobQueue> {
  readonly name: string
  /** The `PersistedQueue` of jobs. */
  readonly queue: EffectPersistedQueue.PersistedQueue<Job>
  /** The dead set, `<name>:dead`: take from it to read (or retry) what died. This adapter never takes from it. */
  readonly deadLetter: EffectPersistedQueue.PersistedQueue<DeadLetter>
  /** Attempts per job, as given to the queue. */
  readonly maxAttempts: number
  /**
   * Forks `concurrency` takers (default 1) that run `handler` on each job inside `take`, until the scope closes. A
   * failure is retried by the queue (same jid); on the last attempt `onDeath` is called first: wire
   * `Middleware.died` (`UniqueJob.died`) there. A taker interrupted mid-job gives the job back (no attempt spent).
   * A `concurrency` that is not a whole number from 1 to 10,000 is refused with `InvalidLockOptions`.
   */
  readonly work: <E, R, R2 = never>(
    handler: (job: Job) => Effect.Effect<unknown, E, R>,
    options?: {
      readonly concurrency?: number | undefined
      readonly onDeath?: ((job: Job, reason: string) => Effect.Effect<unknown, unknown, R2>) | undefined
    } | undefined
  ) => Effect.Effect<void, InvalidLockOptions, R | R2 | Scope.Scope>
  readonly stats: Effect.Effect<Stats>
}

/**
 * @since 2.0.0
 * @category tags
 */
export const UniquePersistedQueue: Context.Service<UniquePersistedQueue, UniquePersistedQueue> = Context.Service<
  UniquePersistedQueue
>("effect-unique-jobs/PersistedQueue")

/**
 * How long every call to the queue may take before it fails with a `QueueError`: 5 seconds (as BullMQ's adapter).
 *
 * @since 2.0.0
 * @category constants
 */
export const defaultTimeout: Duration.Input = "5 seconds"

/**
 * `PersistedQueue`'s default attempts per element.
 *
 * @since 2.0.0
 * @category constants
 */
export const defaultMaxAttempts = 10

// The most takers one `work` forks: each is a fiber polling the store.
const maxTakers = 10_000

// The job being taken by this fiber: `schedule` and `kill` of that jid act on it.
interface Active {
  readonly jid: string
  killed: boolean
}
const currentActive = Context.Reference<Active | undefined>("effect-unique-jobs/PersistedQueue/currentActive", {
  defaultValue: () => undefined
})


const settingsOf = (options: Options | undefined): Effect.Effect<{
  readonly served: ReadonlySet<string>
  readonly timeoutMs: number
  readonly maxAttempts: number
}, InvalidLockOptions> => {
  if (!isRecord(options)) {
    return Effect.fail(invalidOptions([{
      field: "options",
      reason: `expected { name, presence, … }; got ${describeValue(options)}`
    }]))
  }
  const issues: Array<{ field: string; reason: string }> = []
  if (typeof options.name !== "string" || options.name.length === 0) {
    issues.push({ field: "name", reason: `expected a non-empty queue name; got ${describeValue(options.name)}` })
  }
  // Without `queues`, the adapter serves `name` alone: a bad name is said once, as `name`.
  const queues = options.queues ?? (typeof options.name === "string" && options.name.length > 0 ? [options.name] : [])
  if (
    options.queues !== undefined &&
    (!Array.isArray(queues) || queues.length === 0 || queues.some((q) => typeof q !== "string" || q.length === 0))
  ) {
    issues.push({ field: "queues", reason: `expected a non-empty array of queue names; got ${describeValue(options.queues)}` })
  }
  const presence: unknown = options.presence
  const presenceProblem = !isRecord(presence)
    ? `got ${describeValue(presence)}`
    : presence._tag === "Memory"
    ? undefined
    : presence._tag === "Redis"
    ? (typeof presence.prefix === "string" ? undefined : `presenceRedis needs the store's prefix; got ${describeValue(presence.prefix)}`)
    : presence._tag === "Sql"
    ? (typeof presence.tableName === "string" && presence.tableName.length > 0
      ? undefined
      : `presenceSql needs the store's table name; got ${describeValue(presence.tableName)}`)
    : `got ${describeValue(presence._tag)} as its kind`
  if (presenceProblem !== undefined) {
    issues.push({
      field: "presence",
      reason: `expected presenceMemory, presenceRedis({ prefix }) or presenceSql({ tableName }), as the store is: ${presenceProblem}`
    })
  }
  const maxAttempts: unknown = options.maxAttempts ?? defaultMaxAttempts
  if (typeof maxAttempts !== "number" || !Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 2147483647) {
    issues.push({
      field: "maxAttempts",
      reason: `expected a whole number of attempts, at least 1; got ${describeValue(maxAttempts)}`
    })
  }
  const timeout = adapterTimeoutMs(options.timeout ?? defaultTimeout)
  if (Result.isFailure(timeout)) issues.push({ field: "timeout", reason: timeout.failure })
  return issues.length > 0 || Result.isFailure(timeout)
    ? Effect.fail(invalidOptions(issues))
    : Effect.succeed({ served: new Set(queues as ReadonlyArray<string>), timeoutMs: timeout.success, maxAttempts: maxAttempts as number })
}

/**
 * The adapter over a `PersistedQueue` named `options.name`, made with the `PersistedQueueFactory` in context.
 * `push` offers the job under its jid; `schedule` offers a new job with a delay (`at` − now), and refuses the job
 * being performed; `remove` answers false (a waiting element cannot be removed); `kill` offers `{ job, reason, at }`
 * to the dead set, and a job killed while it is performed (a server `reject`) then ends as done, not retried;
 * `exists` reads `options.presence`, one round trip per batch. Every call fails with a `QueueError` when the queue
 * does not answer within `timeout`; an offer that timed out may still be stored (`landing`).
 *
 * @since 2.0.0
 * @category constructors
 */
export const make = <P extends Presence>(
  options: Options<P>
): Effect.Effect<
  UniquePersistedQueue,
  InvalidLockOptions,
  EffectPersistedQueue.PersistedQueueFactory | PresenceServices<P> | Scope.Scope
> =>
  Effect.gen(function*() {
    const settings = yield* settingsOf(options)
    const factory = yield* EffectPersistedQueue.PersistedQueueFactory
    const queue: EffectPersistedQueue.PersistedQueue<Job> = yield* factory.make({
      name: options.name,
      schema: Job,
      maxAttempts: settings.maxAttempts,
      retrySchedule: options.retrySchedule
    })
    const deadLetter: EffectPersistedQueue.PersistedQueue<DeadLetter> = yield* factory.make({
      name: `${options.name}:dead`,
      schema: DeadLetter
    })
    const ledger = ledgerOf(factory, options.name)
    const tracked = options.presence._tag === "Memory"
    const read = yield* (readerOf(options.presence, options.name, ledger) as Effect.Effect<Reader>)
    const scope = yield* Effect.scope
    const counts = { succeeded: 0, skipped: 0, rejected: 0, failed: 0, dead: 0 }
    const { served, timeoutMs } = settings

    const timedOut = (sent: boolean) =>
      `the queue did not answer within ${timeoutMs} ms` +
      (sent ? "; the offer was sent and may still be stored (the job's lock is kept until the queue answers)" : "")

    const failedWith = (operation: string, jid: string | undefined) => (cause: Cause.Cause<unknown>) => {
      const failure = Cause.squash(cause)
      const reason = failure instanceof Schema.SchemaError
        ? `the job does not encode as JSON: ${failure.message}`
        : failure instanceof Error
        ? failure.message
        : String(failure)
      return Effect.fail(new QueueError({ operation, jid, reason, cause: failure }))
    }

    // A read, bounded: it fails with a QueueError when the store does not answer in time.
    const bounded = <A>(operation: string, jid: string | undefined, effect: Effect.Effect<A, unknown>) =>
      effect.pipe(
        Effect.catchCause(failedWith(operation, jid)),
        Effect.timeoutOrElse({
          duration: timeoutMs,
          orElse: () => Effect.fail(new QueueError({ operation, jid, reason: timedOut(false) }))
        })
      )

    // An offer, bounded. It runs in a fiber of the adapter's scope, so one that times out goes on: the error's
    // `landing` is its eventual answer (true: stored, or the adapter closed first and it cannot be told; false: it
    // failed). The store ignores an offer whose id it holds, so a late one never makes a second copy.
    const offering = (operation: string, job: Job, effect: Effect.Effect<unknown, unknown>) =>
      Effect.flatMap(Effect.forkIn(Effect.catchCause(effect, failedWith(operation, job.jid)), scope, { startImmediately: true }), (fiber) =>
        Fiber.join(fiber).pipe(
          Effect.timeoutOrElse({
            duration: timeoutMs,
            orElse: () =>
              Effect.fail(
                new QueueError({
                  operation,
                  jid: job.jid,
                  reason: timedOut(true),
                  landing: Effect.map(Fiber.await(fiber), (exit) => Exit.isSuccess(exit) || Exit.hasInterrupts(exit))
                })
              )
          }),
          Effect.asVoid
        ))

    const refuseOther = (operation: string, job: Job) =>
      served.has(job.queue)
        ? Effect.void
        : Effect.fail(
          new QueueError({
            operation,
            jid: job.jid,
            reason: `the job is for queue "${job.queue}"; this adapter serves ${
              Array.from(served, (name) => `"${name}"`).join(", ")
            }`
          })
        )

    // "untilExecuted": an offer of a jid still to run is ignored (one element per jid), and one of a jid that ended
    // is a new element, as the ledger counts it. The default ("untilRemoved") would drop it silently and leave its
    // lock to the reaper.
    const offerOf = (job: Job, delayMs: number) =>
      queue.offer(
        job,
        delayMs > 0
          ? { id: job.jid, delay: Duration.millis(delayMs), deduplicate: "untilExecuted" }
          : { id: job.jid, deduplicate: "untilExecuted" }
      )

    // A jid still to run is one job: the store would ignore the offer (one element per id) and the enqueue would
    // answer Enqueued for a job that never runs. Read first, and refuse it instead.
    const refuseTaken = (operation: string, job: Job) =>
      Effect.flatMap(bounded(operation, job.jid, read([job.jid])), ([presence]) =>
        presence === "exists"
          ? Effect.fail(
            new QueueError({
              operation,
              jid: job.jid,
              reason: `queue "${options.name}" already has job ${job.jid} still to run: nothing was offered (a jid ` +
                "names one job; give each job its own, as Job.make does)"
            })
          )
          : Effect.void)

    const offer = (operation: string, job: Job, delayMs: number) =>
      Effect.andThen(
        Effect.andThen(refuseOther(operation, job), refuseTaken(operation, job)),
        offering(
          operation,
          job,
          // Entered in the ledger before the offer: a taker may run the job to its end before the offer's fiber
          // resumes.
          tracked
            ? Effect.suspend(() => {
              const added = !ledger.live.has(job.jid)
              ledger.live.add(job.jid)
              return Effect.onError(offerOf(job, delayMs), () => Effect.sync(() => added && ledger.live.delete(job.jid)))
            })
            : offerOf(job, delayMs)
        )
      )

    const bury = (job: Job, reason: string) =>
      Effect.flatMap(Clock.currentTimeMillis, (at) =>
        offering(
          "kill",
          job,
          deadLetter.offer({ job, reason, at }, { id: job.jid, deduplicate: "untilExecuted" })
        ))

    const adapter: UniquePersistedQueue = {
      name: options.name,
      queue,
      deadLetter,
      maxAttempts: settings.maxAttempts,
      push: (job) => offer("push", job, 0),
      schedule: (job, at) =>
        Effect.flatMap(currentActive, (active) =>
          active?.jid === job.jid
            ? Effect.fail(
              new QueueError({
                operation: "schedule",
                jid: job.jid,
                reason: "PersistedQueue cannot put the job it is taking back at a chosen time (a re-offer of its " +
                  "id is ignored while it runs; completing it first would lose it in a crash between): use the " +
                  "server strategy raise, which the queue retries by its retrySchedule"
              })
            )
            : Effect.flatMap(Clock.currentTimeMillis, (now) => offer("schedule", job, Math.ceil(at - now)))),
      // PersistedQueue has no removal: a waiting element stays until it is taken.
      remove: () => Effect.succeed(false),
      kill: (job, reason) =>
        Effect.flatMap(currentActive, (active) =>
          Effect.andThen(
            bury(job, reason),
            Effect.sync(() => {
              if (active?.jid === job.jid) active.killed = true
            })
          )),
      exists: (jobs) => {
        const asked: Array<number> = []
        jobs.forEach((job, i) => {
          if (served.has(job.queue)) asked.push(i)
        })
        const answers: Array<PresenceAnswer> = jobs.map(() => "unknown")
        if (asked.length === 0) return Effect.succeed(answers)
        return Effect.map(
          bounded("exists", jobs.length === 1 ? jobs[0]!.jid : undefined, read(asked.map((i) => jobs[i]!.jid))),
          (found) => {
            asked.forEach((position, k) => {
              answers[position] = found[k] ?? "unknown"
            })
            return answers
          }
        )
      },
      work: <E, R, R2 = never>(
        handler: (job: Job) => Effect.Effect<unknown, E, R>,
        workOptions?: {
          readonly concurrency?: number | undefined
          readonly onDeath?: ((job: Job, reason: string) => Effect.Effect<unknown, unknown, R2>) | undefined
        } | undefined
      ) => {
        const onDeath = workOptions?.onDeath
        const forget = (jid: string) => tracked ? Effect.sync(() => ledger.live.delete(jid)) : Effect.void
        const step = (job: Job, metadata: { readonly id: string; readonly attempts: number }) => {
          const current: Job = { ...job, retryCount: metadata.attempts - 1 }
          const active: Active = { jid: job.jid, killed: false }
          return Effect.flatMap(
            Effect.exit(Effect.provideService(Effect.suspend(() => handler(current)), currentActive, active)),
            (exit): Effect.Effect<void, E, R2> => {
              if (Exit.isSuccess(exit) || active.killed) {
                // A job killed while it ran is in the dead set: it ends as done, whatever the run ended with.
                const ending = active.killed || Exit.isFailure(exit) ? "rejected" : Strategy.endingOf(exit.value)
                if (ending === "skipped") counts.skipped++
                else if (ending === "rejected") counts.rejected++
                else counts.succeeded++
                return forget(job.jid)
              }
              if (Cause.hasInterruptsOnly(exit.cause)) return Effect.failCause(exit.cause)
              counts.failed++
              if (metadata.attempts < settings.maxAttempts) return Effect.failCause(exit.cause)
              // The last attempt: the queue fails it for good when this take ends.
              counts.dead++
              const reason = `attempts exhausted (${settings.maxAttempts}): ${reasonOf(exit.cause)}`
              const died = onDeath === undefined
                ? Effect.void
                : Effect.catchCause(
                  onDeath(current, reason),
                  (cause) => Effect.logWarning("onDeath failed", cause).pipe(Effect.annotateLogs(annotations))
                )
              return Effect.andThen(
                Effect.andThen(
                  Effect.andThen(died, Effect.ignore(bury(current, reason))),
                  forget(job.jid)
                ),
                Effect.failCause(exit.cause)
              )
            }
          )
        }
        const taker = queue.take(step).pipe(
          Effect.catchCause((cause) =>
            Cause.hasInterruptsOnly(cause)
              ? Effect.failCause(cause)
              : Cause.squash(cause) instanceof EffectPersistedQueue.PersistedQueueError
              ? Effect.andThen(
                Effect.logWarning("PersistedQueue take failed; taking again in 1 s", cause).pipe(
                  Effect.annotateLogs(annotations)
                ),
                Effect.sleep(1000)
              )
              : Effect.void
          ),
          Effect.forever
        )
        const concurrency: unknown = workOptions?.concurrency ?? 1
        if (typeof concurrency !== "number" || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > maxTakers) {
          return Effect.fail(invalidOptions([{
            field: "concurrency",
            reason: `expected a whole number of takers from 1 to ${maxTakers}; got ${describeValue(concurrency)}`
          }]))
        }
        return Effect.forEach(Array.from({ length: concurrency }), () => Effect.forkScoped(taker), { discard: true })
      },
      stats: Effect.sync(() => ({ ...counts }))
    }
    return adapter
  })

/**
 * The adapter as both `UniquePersistedQueue` and the `JobQueue` port.
 *
 * @since 2.0.0
 * @category layers
 */
export const layer = <P extends Presence>(
  options: Options<P>
): Layer.Layer<
  UniquePersistedQueue | JobQueue,
  InvalidLockOptions,
  EffectPersistedQueue.PersistedQueueFactory | PresenceServices<P>
> =>
  Layer.effectContext(
    Effect.map(make(options), (adapter) => Context.make(UniquePersistedQueue, adapter).pipe(Context.add(JobQueue, adapter)))
  )

// ---------------------------------------------------------------------------------------------------------------
// Workers: where a definition meets the adapter
// ---------------------------------------------------------------------------------------------------------------

/**
 * Something that has a worker's definition: a `UniqueJob`, or `{ definition }`.
 *
 * @since 2.0.0
 * @category models
 */
export interface Defined<Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>, ArgsError = never> {
  readonly definition: Definition
  readonly worker?: string | undefined
  /** A `UniqueJob` with an `args` schema decodes the job's arguments with it before the perform. */
  readonly decode?: ((job: Job) => Effect.Effect<Args, ArgsError>) | undefined
}

/**
 * What this adapter refuses of a definition (completed by the `Defaults` in context), or undefined:
 *
 * - the server strategy `reschedule`: `PersistedQueue` cannot put the element it is taking back at a chosen time;
 * - the client strategy `replace`: it cannot remove the holder's waiting element;
 * - `debounce`: it is a `replace` of the waiting job at every trigger.
 *
 * @since 2.0.0
 * @category workers
 */
export const unsupported = (definition: Definition, worker?: string | undefined): UnsupportedStrategy | undefined => {
  const refuse = (strategy: string, reason: string) =>
    new UnsupportedStrategy({ adapter: adapterName, worker, strategy, reason })
  if (Option.isSome(definition.debounce)) {
    return refuse(
      "debounce",
      "a debounce replaces the waiting job at each trigger, and PersistedQueue cannot remove a waiting element; " +
        "drop debounce and use until_executed with log (the first trigger runs, the rest are skipped) or BullMQ's debounce"
    )
  }
  if (definition.onConflict.server === "reschedule") {
    return refuse(
      "server: reschedule",
      "PersistedQueue cannot put the element it is taking back at a chosen time (a re-offer of its id is ignored " +
        "while it runs; completing it and offering it again would lose it in a crash between); use raise, which " +
        "the queue retries by its retrySchedule, or log"
    )
  }
  if (definition.onConflict.client === "replace") {
    return refuse(
      "client: replace",
      "PersistedQueue cannot remove a waiting element, so a holder's job can never be replaced; use log or raise"
    )
  }
  return undefined
}

/**
 * Fails with `UnsupportedStrategy` when this adapter cannot serve the worker's definition (see `unsupported`),
 * with the `Defaults` in context filled in. Producers that enqueue without building a worker can call it at start.
 *
 * @since 2.0.0
 * @category workers
 */
export const check = (unique: { readonly definition: Definition; readonly worker?: string | undefined }): Effect.Effect<void, UnsupportedStrategy> =>
  Effect.flatMap(Defaults, (settings) => {
    const refused = unsupported(resolve(unique.definition, settings), unique.worker)
    return refused === undefined ? Effect.void : Effect.fail(refused)
  })

/**
 * A perform for this adapter: the job's arguments (decoded by the worker's `args` schema when it has one), the lock
 * it runs under, and the job.
 *
 * @since 2.0.0
 * @category models
 */
export type Perform<A, E, R, Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>> = (
  args: Args,
  running: Lock.Running,
  job: Job
) => Effect.Effect<A, E, R>

/**
 * The handler for `work`: one job through the server middleware. Built once per worker, it fails with
 * `UnsupportedStrategy` when the definition (completed by the `Defaults` in context) asks for what `PersistedQueue`
 * cannot do (see `unsupported`). A redelivered copy that meets its own first copy's run lock fails with
 * `ExecutionConflict` (retried by the queue), whatever the server strategy.
 *
 * @since 2.0.0
 * @category workers
 */
export const processor = <A, E, R, Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>, ArgsError = never>(
  unique: Defined<Args, ArgsError>,
  perform: Perform<A, E, R, Args>
): Effect.Effect<
  (job: Job) => Effect.Effect<Strategy.ServerOutcome<A>, E | ArgsError | Middleware.ServerError, R | RedisService | JobQueue>,
  UnsupportedStrategy
> =>
  Effect.as(check(unique), (job: Job) =>
    Effect.flatMap(Defaults, (settings) =>
      Middleware.server(Middleware.awaitingItself(resolve(unique.definition, settings), "raise"))(
        job,
        (running: Lock.Running) =>
          unique.decode === undefined
            ? perform(job.args as unknown as Args, running, job)
            : Effect.flatMap(unique.decode(job), (args) => perform(args, running, job))
      )))

/**
 * `processor` run by the `UniquePersistedQueue` in context with `concurrency` takers (default 1) until the scope
 * closes; a job whose last attempt failed releases its lock through `Middleware.died`.
 *
 * @since 2.0.0
 * @category workers
 */
export const worker = <A, E, R, Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>, ArgsError = never>(
  unique: Defined<Args, ArgsError>,
  perform: Perform<A, E, R, Args>,
  options?: { readonly concurrency?: number | undefined } | undefined
): Effect.Effect<
  void,
  UnsupportedStrategy | InvalidLockOptions,
  R | RedisService | JobQueue | UniquePersistedQueue | Scope.Scope
> =>
  Effect.gen(function*() {
    const handle = yield* processor(unique, perform)
    const adapter = yield* UniquePersistedQueue
    const context = yield* Effect.context<R | RedisService | JobQueue>()
    const died = Middleware.died(unique.definition)
    yield* adapter.work((job) => Effect.provideContext(handle(job), context), {
      concurrency: options?.concurrency,
      onDeath: (job) => Effect.provideContext(diedLogged(died, job), context)
    })
  })

const diedLogged = (
  died: (job: Job) => Effect.Effect<boolean, RedisError | Digest.DigestError, RedisService>,
  job: Job
) =>
  Effect.catchCause(died(job), (cause) =>
    Effect.logWarning("releasing the lock of a dead job failed; its TTL or the reaper ends it", cause).pipe(
      Effect.annotateLogs({ ...annotations, jid: job.jid })
    ))
