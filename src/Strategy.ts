/**
 * Conflict strategies: what a lost race turns into, on the client (a duplicate enqueue) and on the server
 * (a duplicate execution). A strategy is a function from the conflict to the side's outcome or a typed error; the
 * built-in ones are named, and users can pass their own functions.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as LogLevel from "effect/LogLevel"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import * as SchemaGetter from "effect/SchemaGetter"
import * as SchemaIssue from "effect/SchemaIssue"
import type { LockConflict } from "./Errors.js"
import { DuplicateJob, ExecutionConflict } from "./Errors.js"
import type { Job } from "./Job.js"
import { JobQueue, type Presence, type QueueError } from "./JobQueue.js"
import * as LockType from "./LockType.js"
import type { RedisError, RedisService } from "./Redis.js"

// ---------------------------------------------------------------------------------------------------------------
// Outcomes
// ---------------------------------------------------------------------------------------------------------------

/**
 * The fields of an outcome that went through: the job (stamped with its digest) and what the enqueue or perform
 * returned.
 *
 * @since 0.1.0
 * @category outcomes
 */
export interface Done<A> {
  readonly digest: string
  readonly job: Job
  readonly value: A
}

/**
 * The fields of an outcome that turned a duplicate away: `holders` are the jobs that held the lock.
 *
 * @since 0.1.0
 * @category outcomes
 */
export interface Turned {
  readonly digest: string
  readonly job: Job
  readonly holders: ReadonlyArray<string>
}

/**
 * What the client middleware did with an enqueue: `Enqueued`, `Replaced` (the holders' waiting jobs were removed
 * and this one took their place), `Skipped` (a duplicate, dropped; `holders` hold the lock) or `Rejected` (a
 * duplicate sent to the dead set).
 *
 * @since 0.1.0
 * @category outcomes
 */
export type ClientOutcome<A> = Data.TaggedEnum<{
  Enqueued: Done<A>
  Replaced: Done<A> & { readonly replaced: ReadonlyArray<string> }
  Skipped: Turned
  Rejected: Turned & { readonly reason: string }
}>

interface ClientOutcomeDefinition extends Data.TaggedEnum.WithGenerics<1> {
  readonly taggedEnum: ClientOutcome<this["A"]>
}

/**
 * Constructors and `$is` / `$match` for `ClientOutcome`.
 *
 * @since 0.1.0
 * @category outcomes
 */
export const ClientOutcome = Data.taggedEnum<ClientOutcomeDefinition>()

/**
 * What the server middleware did with an execution: `Performed`, `Rescheduled` (a duplicate put off until `at`, its
 * queue lock kept), `Skipped` or `Rejected`.
 *
 * @since 0.1.0
 * @category outcomes
 */
export type ServerOutcome<A> = Data.TaggedEnum<{
  Performed: Done<A>
  Rescheduled: Turned & { readonly at: number }
  Skipped: Turned
  Rejected: Turned & { readonly reason: string }
}>

interface ServerOutcomeDefinition extends Data.TaggedEnum.WithGenerics<1> {
  readonly taggedEnum: ServerOutcome<this["A"]>
}

/**
 * Constructors and `$is` / `$match` for `ServerOutcome`.
 *
 * @since 0.1.0
 * @category outcomes
 */
export const ServerOutcome = Data.taggedEnum<ServerOutcomeDefinition>()

/**
 * How a queue counts a handler's run: a server outcome other than `Performed` did not do the work, and is counted as
 * what it was; any other value (a plain handler's) is a success.
 *
 * @internal
 */
export const endingOf = (value: unknown): "succeeded" | "skipped" | "rescheduled" | "rejected" => {
  if (typeof value !== "object" || value === null || typeof (value as { digest?: unknown }).digest !== "string") {
    return "succeeded"
  }
  switch ((value as { _tag?: unknown })._tag) {
    case "Skipped":
      return "skipped"
    case "Rescheduled":
      return "rescheduled"
    case "Rejected":
      return "rejected"
    default:
      return "succeeded"
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------------------------

/**
 * What a client strategy is told: the conflict, the duplicate job, and how to take the holders' place.
 *
 * @since 0.1.0
 * @category models
 */
export interface ClientConflict<A, E, R> {
  readonly conflict: LockConflict
  readonly job: Job
  /**
   * Releases the given holders' locks (their jobs must be gone from the queue first) and runs the enqueue again:
   * `Replaced`, or `Skipped` when another duplicate took the freed place first. With no holders: a holder's job is
   * starting and its queue lock is about to end (or to come back delayed); tries again after a short wait, a few
   * times (`Skipped` if the holder still has its place then), each new conflict going to the strategy again.
   */
  readonly replace: (holders: ReadonlyArray<string>) => Effect.Effect<ClientOutcome<A>, E | RedisError, R | RedisService>
}

/**
 * What a server strategy is told: the conflict, the duplicate job, and the settings it may read.
 *
 * @since 0.1.0
 * @category models
 */
export interface ServerConflict {
  readonly conflict: LockConflict
  readonly job: Job
  /** The worker's `rescheduleDelay`. */
  readonly rescheduleDelay: Duration.Duration
}

/**
 * A client strategy: the outcome of a duplicate enqueue, or a typed failure.
 *
 * @since 0.1.0
 * @category models
 */
export type ClientStrategy = <A, E, R>(
  conflict: ClientConflict<A, E, R>
) => Effect.Effect<ClientOutcome<A>, E | DuplicateJob | QueueError | RedisError, R | JobQueue | RedisService>

/**
 * A server strategy: the outcome of a duplicate execution (`Skipped`, `Rejected` or `Rescheduled`), or a typed
 * failure (`raise`: the queue retries the job). `keepsQueueLock` says, before the conflict is known, whether a job it
 * turns away keeps its queue lock (`until_and_while_executing`): true when the job goes back to the queue
 * (`Rescheduled`, a failure), false when it is dropped (`Skipped`, `Rejected`). The handoff script is told, so the
 * strategy costs no call of its own. Unset (a plain function) counts as true; an outcome that contradicts the
 * declaration costs one more call (a dropped job's queue lock is released).
 *
 * @since 0.1.0
 * @category models
 */
export type ServerStrategy =
  & ((conflict: ServerConflict) => Effect.Effect<ServerOutcome<never>, ExecutionConflict | QueueError, JobQueue>)
  & { readonly keepsQueueLock?: boolean | undefined }

/**
 * A server strategy of your own, declaring whether the jobs it turns away keep their queue lock.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeServer = (
  options: { readonly keepsQueueLock: boolean },
  decide: (conflict: ServerConflict) => Effect.Effect<ServerOutcome<never>, ExecutionConflict | QueueError, JobQueue>
): ServerStrategy => Object.assign((conflict: ServerConflict) => decide(conflict), { keepsQueueLock: options.keepsQueueLock })

/**
 * The outcome of a dropped duplicate: `Skipped`, naming the holders.
 *
 * @since 0.1.0
 * @category outcomes
 */
export const skipped = (c: { readonly conflict: LockConflict; readonly job: Job }) =>
  ClientOutcome.Skipped({ digest: c.conflict.digest, job: c.job, holders: c.conflict.holders })

/**
 * The outcome of a duplicate sent to the dead set: `Rejected` with its reason.
 *
 * @since 0.1.0
 * @category outcomes
 */
export const rejected = (c: { readonly conflict: LockConflict; readonly job: Job }, reason: string) =>
  ClientOutcome.Rejected({ digest: c.conflict.digest, job: c.job, holders: c.conflict.holders, reason })

/**
 * @since 0.1.0
 * @category models
 */
export type Name = "log" | "raise" | "reject" | "replace" | "reschedule"

/**
 * Strategies that mean something for a duplicate enqueue.
 *
 * @since 0.1.0
 * @category models
 */
export type ClientName = "log" | "raise" | "reject" | "replace"

/**
 * Strategies that mean something for a duplicate execution.
 *
 * @since 0.1.0
 * @category models
 */
export type ServerName = "log" | "raise" | "reject" | "reschedule"

/**
 * One name for both sides, or a name or function per side.
 *
 * @since 0.1.0
 * @category models
 */
export type OnConflict =
  | Name
  | {
    readonly client?: ClientName | ClientStrategy | undefined
    readonly server?: ServerName | ServerStrategy | undefined
  }

/**
 * @since 0.1.0
 * @category models
 */
export interface Resolved {
  readonly client: ClientName | ClientStrategy
  readonly server: ServerName | ServerStrategy
}

/**
 * @since 0.1.0
 * @category constants
 */
export const names: ReadonlyArray<Name> = ["log", "raise", "reject", "replace", "reschedule"]

/**
 * @since 0.1.0
 * @category constants
 */
export const clientNames: ReadonlyArray<ClientName> = ["log", "raise", "reject", "replace"]

/**
 * @since 0.1.0
 * @category constants
 */
export const serverNames: ReadonlyArray<ServerName> = ["log", "raise", "reject", "reschedule"]

const isClientName = (u: unknown): u is ClientName => clientNames.includes(u as ClientName)
const isServerName = (u: unknown): u is ServerName => serverNames.includes(u as ServerName)

const sideMessage = (side: "client" | "server", actual: unknown): string => {
  const valid = side === "client" ? clientNames : serverNames
  const hint = side === "client" && actual === "reschedule"
    ? " (reschedule re-enqueues a duplicate execution: put it under server)"
    : side === "server" && actual === "replace"
    ? " (replace swaps a queued duplicate: put it under client)"
    : ""
  return `${JSON.stringify(actual)} is not a ${side} strategy${hint}; use one of ${valid.join(", ")} or a function`
}

/**
 * Decodes `onConflict` into a strategy per side. A single name applies where it has a meaning and `log` elsewhere;
 * a name given explicitly for a side where it has none is refused, naming that side.
 *
 * @since 0.1.0
 * @category schemas
 */
export const OnConflictSchema: Schema.Codec<Resolved, unknown> = Schema.Unknown.pipe(
  Schema.decodeTo(
    Schema.declare((u: unknown): u is Resolved => typeof u === "object" && u !== null),
    {
      decode: SchemaGetter.transformEffect((input: unknown): Effect.Effect<Resolved, SchemaIssue.Issue> => {
        const invalid = (message: string) => new SchemaIssue.InvalidValue({ message })
        if (typeof input === "string") {
          if (!names.includes(input as Name)) {
            return Effect.fail(invalid(`unknown strategy ${JSON.stringify(input)}; use one of ${names.join(", ")}`))
          }
          return Effect.succeed({
            client: isClientName(input) ? input : "log",
            server: isServerName(input) ? input : "log"
          })
        }
        if (typeof input !== "object" || input === null || Array.isArray(input)) {
          return Effect.fail(invalid("expected a strategy name or { client?, server? }"))
        }
        const sides = input as Record<string, unknown>
        const issues: Array<SchemaIssue.Issue> = []
        for (const key of Object.keys(sides)) {
          if (key !== "client" && key !== "server") {
            issues.push(new SchemaIssue.Pointer([key], invalid("only client and server")))
          }
        }
        const client = sides.client ?? "log"
        const server = sides.server ?? "log"
        if (!isClientName(client) && typeof client !== "function") {
          issues.push(new SchemaIssue.Pointer(["client"], invalid(sideMessage("client", client))))
        }
        if (!isServerName(server) && typeof server !== "function") {
          issues.push(new SchemaIssue.Pointer(["server"], invalid(sideMessage("server", server))))
        }
        const [first, ...rest] = issues
        if (first !== undefined) {
          return Effect.fail(rest.length === 0 ? first : new SchemaIssue.Composite(Schema.Unknown.ast, [first, ...rest]))
        }
        return Effect.succeed({ client, server } as Resolved)
      }),
      encode: SchemaGetter.transform((resolved: Resolved): unknown => resolved)
    }
  )
)

/**
 * A strategy's name for logs and metric labels (`custom` for a function).
 *
 * @since 0.1.0
 * @category utils
 */
export const nameOf = (strategy: string | ((conflict: never) => unknown)): string =>
  typeof strategy === "string" ? strategy : "custom"

const holdersText = (c: { readonly conflict: LockConflict }) => c.conflict.holders.join(", ")

// Debug: the outcome (Skipped) already tells the caller, and a busy queue has a duplicate at every enqueue.
// A debug line below the fiber's minimum log level costs nothing: its text and annotations (a context update) were
// most of a logged duplicate's CPU beside its lock call.
const logConflict = (c: { readonly conflict: LockConflict; readonly job: Job }, side: string) =>
  Effect.withFiber<void>((fiber) =>
    LogLevel.isGreaterThan(fiber.getRef(References.MinimumLogLevel), "Debug")
      ? Effect.void
      : Effect.logDebug(`${side} conflict: ${c.job.worker} ${c.job.jid} is a duplicate of ${holdersText(c)}`).pipe(
        Effect.annotateLogs({ package: "effect-unique-jobs", module: "Strategy", digest: c.conflict.digest, jid: c.job.jid })
      )
  )

const rejectReason = (c: { readonly conflict: LockConflict }, side: "client" | "server") =>
  side === "client"
    ? `duplicate enqueue of ${c.conflict.digest} while ${holdersText(c)} holds it`
    : `duplicate execution of ${c.conflict.digest} while ${holdersText(c)} runs`

const reject = (c: { readonly conflict: LockConflict; readonly job: Job }, side: "client" | "server") => {
  const reason = rejectReason(c, side)
  return Effect.as(Effect.flatMap(JobQueue, (queue) => queue.kill(c.job, reason)), rejected(c, reason))
}

/**
 * The built-in client strategies.
 *
 * @since 0.1.0
 * @category strategies
 */
export const client: { readonly [K in ClientName]: ClientStrategy } = {
  log: (c) => Effect.as(logConflict(c, "client"), skipped(c)),
  raise: (c) =>
    Effect.fail(
      new DuplicateJob({ digest: c.conflict.digest, jid: c.job.jid, worker: c.job.worker, holders: c.conflict.holders })
    ),
  reject: (c) => reject(c, "client"),
  // Removes the holders' waiting jobs, then takes their place. A holder whose job the queue says is gone (asked as
  // a job of this job's queue) is an orphaned lock and is replaced too; one it cannot tell about ("unknown") is not.
  // A holder that already runs cannot be replaced: the duplicate is skipped, unless its type lets the queue lock go
  // as the job starts (until_executing, until_and_while_executing): it is caught starting, and its place is about to
  // free up or its job to come back delayed (replaceable then), so the enqueue tries again (`replace([])`).
  // Uninterruptible from the removal to the release of the removed jobs' locks: cut between them, a lock would stay
  // held by a job the queue no longer has (found by test/faults.test.ts' random interruptions).
  replace: (c) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(placesOf(c.conflict.holders, c.job.queue), ({ freed, starting }) =>
        freed.length > 0
          ? c.replace(freed)
          : starting && Object.hasOwn(LockType.records, c.conflict.lockType) &&
              LockType.letsGoAtStart(c.conflict.lockType as LockType.LockType)
          ? restore(c.replace([]))
          : Effect.succeed(skipped(c))))
}

/**
 * What became of the jobs of a queue lock's holders, asked of the queue as jobs of `queue`: each waiting one is
 * removed (`removed`); `freed` is those and the ones the queue says are gone (orphaned locks), in the holders' order;
 * `starting` says whether one is still there (running: caught starting, or holding for its run). One that the queue
 * cannot tell about (`"unknown"`) is none of these.
 *
 * @internal
 */
export const placesOf = (
  holders: ReadonlyArray<string>,
  queue: string
): Effect.Effect<
  { readonly removed: ReadonlyArray<string>; readonly freed: ReadonlyArray<string>; readonly starting: boolean },
  QueueError,
  JobQueue
> =>
  Effect.flatMap(JobQueue, (jobs) =>
    Effect.map(
      Effect.forEach(holders, (jid): Effect.Effect<Presence | "removed", QueueError> =>
        Effect.flatMap(jobs.remove(jid), (removed) =>
          removed
            ? Effect.succeed("removed")
            : Effect.map(jobs.exists([{ jid, queue }]), ([presence]) => presence ?? "unknown"))),
      (places) => ({
        removed: holders.filter((_, i) => places[i] === "removed"),
        freed: holders.filter((_, i) => places[i] === "removed" || places[i] === "gone"),
        starting: places.includes("exists")
      })
    ))

/**
 * The built-in server strategies. `log` and `reject` drop the duplicate (its queue lock goes with it); `raise` and
 * `reschedule` send it back to the queue (its queue lock stays).
 *
 * @since 0.1.0
 * @category strategies
 */
export const server: { readonly [K in ServerName]: ServerStrategy } = {
  log: makeServer({ keepsQueueLock: false }, (c) => Effect.as(logConflict(c, "server"), skipped(c))),
  raise: makeServer({ keepsQueueLock: true }, (c) =>
    Effect.fail(
      new ExecutionConflict({
        digest: c.conflict.digest,
        jid: c.job.jid,
        worker: c.job.worker,
        holders: c.conflict.holders
      })
    )),
  reject: makeServer({ keepsQueueLock: false }, (c) => reject(c, "server")),
  reschedule: makeServer({ keepsQueueLock: true }, (c) =>
    Effect.gen(function*() {
      const queue = yield* JobQueue
      const at = (yield* Clock.currentTimeMillis) + Duration.toMillis(c.rescheduleDelay)
      yield* queue.schedule({ ...c.job, at }, at)
      return ServerOutcome.Rescheduled({ digest: c.conflict.digest, job: c.job, holders: c.conflict.holders, at })
    }))
}

/**
 * The function behind a side's strategy.
 *
 * @since 0.1.0
 * @category utils
 */
export const clientStrategy = (strategy: ClientName | ClientStrategy): ClientStrategy =>
  typeof strategy === "string" ? client[strategy] : strategy

/**
 * @since 0.1.0
 * @category utils
 */
export const serverStrategy = (strategy: ServerName | ServerStrategy): ServerStrategy =>
  typeof strategy === "string" ? server[strategy] : strategy

/**
 * Whether a job the strategy turns away keeps its queue lock, as it declares (a plain function: yes).
 *
 * @since 0.1.0
 * @category utils
 */
export const keepsQueueLock = (strategy: ServerName | ServerStrategy): boolean =>
  serverStrategy(strategy).keepsQueueLock ?? true
