/**
 * Conflict strategies: what a lost race turns into, on the client (a duplicate enqueue) and on the server
 * (a duplicate execution). A strategy is a function from the conflict to a decision or a typed error; the
 * built-in ones are named, and users can pass their own functions.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type { Job } from "./Job.js"
import { JobQueue, type QueueError } from "./JobQueue.js"
import type { Definition, LockConflict } from "./Lock.js"

// ---------------------------------------------------------------------------------------------------------------
// Outcomes and errors
// ---------------------------------------------------------------------------------------------------------------

/**
 * The duplicate was dropped; `holders` are the jobs that held the lock.
 *
 * @since 0.1.0
 * @category outcomes
 */
export interface Skipped {
  readonly _tag: "Skipped"
  readonly digest: string
  readonly job: Job
  readonly holders: ReadonlyArray<string>
}

/**
 * The duplicate went to the dead set.
 *
 * @since 0.1.0
 * @category outcomes
 */
export interface Rejected {
  readonly _tag: "Rejected"
  readonly digest: string
  readonly job: Job
  readonly holders: ReadonlyArray<string>
  readonly reason: string
}

/**
 * What the client middleware did with an enqueue.
 *
 * @since 0.1.0
 * @category outcomes
 */
export type ClientOutcome<A> =
  | { readonly _tag: "Enqueued"; readonly digest: string; readonly job: Job; readonly value: A }
  | {
    readonly _tag: "Replaced"
    readonly digest: string
    readonly job: Job
    readonly replaced: ReadonlyArray<string>
    readonly value: A
  }
  | Skipped
  | Rejected

/**
 * What the server middleware did with an execution.
 *
 * @since 0.1.0
 * @category outcomes
 */
export type ServerOutcome<A> =
  | { readonly _tag: "Performed"; readonly digest: string; readonly job: Job; readonly value: A }
  | {
    readonly _tag: "Rescheduled"
    readonly digest: string
    readonly job: Job
    readonly holders: ReadonlyArray<string>
    readonly at: number
  }
  | Skipped
  | Rejected

/**
 * A duplicate enqueue under `raise`.
 *
 * @since 0.1.0
 * @category errors
 */
export class DuplicateJob extends Schema.TaggedError<DuplicateJob>("effect-unique-jobs/DuplicateJob")("DuplicateJob", {
  digest: Schema.String,
  jid: Schema.String,
  worker: Schema.String,
  holders: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `${this.worker} ${this.jid} is a duplicate of ${this.holders.join(", ")} (${this.digest}); ` +
      "it was not enqueued. Catch DuplicateJob, or use onConflict: \"log\" to skip duplicates quietly."
  }
}

/**
 * A duplicate execution under `raise`: fails the job so the queue retries it later.
 *
 * @since 0.1.0
 * @category errors
 */
export class ExecutionConflict extends Schema.TaggedError<ExecutionConflict>("effect-unique-jobs/ExecutionConflict")(
  "ExecutionConflict",
  {
    digest: Schema.String,
    jid: Schema.String,
    worker: Schema.String,
    holders: Schema.Array(Schema.String)
  }
) {
  override get message(): string {
    return `${this.worker} ${this.jid} cannot run while ${this.holders.join(", ")} runs (${this.digest}); ` +
      "failing it so the queue retries it later."
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------------------------

/**
 * What a strategy is told.
 *
 * @since 0.1.0
 * @category models
 */
export interface Conflict {
  readonly conflict: LockConflict
  readonly job: Job
  readonly definition: Definition
}

/**
 * A client strategy's decision. `Retry` means the holders were cleared out of the way: lock again and enqueue.
 *
 * @since 0.1.0
 * @category models
 */
export type ClientDecision =
  | { readonly _tag: "Skip" }
  | { readonly _tag: "Reject"; readonly reason: string }
  | { readonly _tag: "Retry"; readonly replaced: ReadonlyArray<string> }

/**
 * A server strategy's decision.
 *
 * @since 0.1.0
 * @category models
 */
export type ServerDecision =
  | { readonly _tag: "Skip" }
  | { readonly _tag: "Reject"; readonly reason: string }
  | { readonly _tag: "Reschedule"; readonly at: number }

/**
 * @since 0.1.0
 * @category models
 */
export type ClientStrategy = (conflict: Conflict) => Effect.Effect<ClientDecision, DuplicateJob | QueueError, JobQueue>

/**
 * @since 0.1.0
 * @category models
 */
export type ServerStrategy = (
  conflict: Conflict
) => Effect.Effect<ServerDecision, ExecutionConflict | QueueError, JobQueue>

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
export const OnConflictSchema: Schema.Schema<Resolved, unknown> = Schema.transformOrFail(
  Schema.Unknown,
  Schema.declare((u: unknown): u is Resolved => typeof u === "object" && u !== null),
  {
    strict: true,
    decode: (input, _, ast) => {
      if (typeof input === "string") {
        if (!names.includes(input as Name)) {
          return ParseResult.fail(
            new ParseResult.Type(ast, input, `unknown strategy ${JSON.stringify(input)}; use one of ${names.join(", ")}`)
          )
        }
        return ParseResult.succeed({
          client: isClientName(input) ? input : "log",
          server: isServerName(input) ? input : "log"
        })
      }
      if (typeof input !== "object" || input === null || Array.isArray(input)) {
        return ParseResult.fail(
          new ParseResult.Type(ast, input, "expected a strategy name or { client?, server? }")
        )
      }
      const sides = input as Record<string, unknown>
      const issues: Array<ParseResult.ParseIssue> = []
      for (const key of Object.keys(sides)) {
        if (key !== "client" && key !== "server") {
          issues.push(new ParseResult.Pointer(key, input, new ParseResult.Unexpected(sides[key], "only client and server")))
        }
      }
      const client = sides.client ?? "log"
      const server = sides.server ?? "log"
      if (!isClientName(client) && typeof client !== "function") {
        issues.push(new ParseResult.Pointer("client", input, new ParseResult.Type(ast, client, sideMessage("client", client))))
      }
      if (!isServerName(server) && typeof server !== "function") {
        issues.push(new ParseResult.Pointer("server", input, new ParseResult.Type(ast, server, sideMessage("server", server))))
      }
      const [first, ...rest] = issues
      if (first !== undefined) {
        return ParseResult.fail(rest.length === 0 ? first : new ParseResult.Composite(ast, input, [first, ...rest]))
      }
      return ParseResult.succeed({ client, server } as Resolved)
    },
    encode: (resolved) => ParseResult.succeed(resolved)
  }
)

/**
 * A strategy's name for logs and metric labels (`custom` for a function).
 *
 * @since 0.1.0
 * @category utils
 */
export const nameOf = (strategy: string | ((conflict: Conflict) => unknown)): string =>
  typeof strategy === "string" ? strategy : "custom"

const holdersText = (c: Conflict) => c.conflict.holders.join(", ")

// Debug: the outcome (Skipped) already tells the caller, and a busy queue has a duplicate at every enqueue.
const logConflict = (c: Conflict, side: string) =>
  Effect.logDebug(`${side} conflict: ${c.job.worker} ${c.job.jid} is a duplicate of ${holdersText(c)}`).pipe(
    Effect.annotateLogs({ package: "effect-unique-jobs", module: "Strategy", digest: c.conflict.digest, jid: c.job.jid })
  )

const rejectReason = (c: Conflict, side: "client" | "server") =>
  side === "client"
    ? `duplicate enqueue of ${c.conflict.digest} while ${holdersText(c)} holds it`
    : `duplicate execution of ${c.conflict.digest} while ${holdersText(c)} runs`

/**
 * The built-in client strategies.
 *
 * @since 0.1.0
 * @category strategies
 */
export const client: { readonly [K in ClientName]: ClientStrategy } = {
  log: (c) => Effect.as(logConflict(c, "client"), { _tag: "Skip" } as const),
  raise: (c) =>
    Effect.fail(
      new DuplicateJob({ digest: c.conflict.digest, jid: c.job.jid, worker: c.job.worker, holders: c.conflict.holders })
    ),
  reject: (c) => {
    const reason = rejectReason(c, "client")
    return Effect.as(Effect.flatMap(JobQueue, (queue) => queue.kill(c.job, reason)), { _tag: "Reject", reason } as const)
  },
  // Removes the holders' waiting jobs; the middleware then releases their locks and locks again. A holder the
  // queue no longer knows at all is an orphaned lock and is replaced too. A holder that already runs cannot be
  // replaced: the duplicate is skipped.
  replace: (c) =>
    Effect.flatMap(JobQueue, (queue) =>
      Effect.map(
        Effect.forEach(c.conflict.holders, (holder) =>
          Effect.flatMap(queue.remove(holder), (removed) =>
            removed ? Effect.succeed(true) : Effect.map(queue.exists(holder), (exists) => !exists))),
        (replaceable): ClientDecision => {
          const replaced = c.conflict.holders.filter((_, i) => replaceable[i])
          return replaced.length > 0 ? { _tag: "Retry", replaced } : { _tag: "Skip" }
        }
      ))
}

/**
 * The built-in server strategies.
 *
 * @since 0.1.0
 * @category strategies
 */
export const server: { readonly [K in ServerName]: ServerStrategy } = {
  log: (c) => Effect.as(logConflict(c, "server"), { _tag: "Skip" } as const),
  raise: (c) =>
    Effect.fail(
      new ExecutionConflict({
        digest: c.conflict.digest,
        jid: c.job.jid,
        worker: c.job.worker,
        holders: c.conflict.holders
      })
    ),
  reject: (c) => {
    const reason = rejectReason(c, "server")
    return Effect.as(Effect.flatMap(JobQueue, (queue) => queue.kill(c.job, reason)), { _tag: "Reject", reason } as const)
  },
  reschedule: (c) =>
    Effect.gen(function*() {
      const queue = yield* JobQueue
      const at = (yield* Clock.currentTimeMillis) + Duration.toMillis(c.definition.rescheduleDelay)
      yield* queue.schedule({ ...c.job, at }, at)
      return { _tag: "Reschedule", at } as const
    })
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
