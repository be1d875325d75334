/**
 * Lock types, their options (a Schema decoded once, when a worker's uniqueness is defined), and the lock steps:
 * `lock` / `unlock` / `handoff` / `renew` for phases that happen in different processes, and `acquire` /
 * `withLock` for a lock held as a scoped resource.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Digest from "./Digest.js"
import * as Metrics from "./Metrics.js"
import type { HolderRequest, LockKey, LockResult, RedisError } from "./Redis.js"
import { RedisService } from "./Redis.js"
import * as Strategy from "./Strategy.js"

// ---------------------------------------------------------------------------------------------------------------
// Lock types
// ---------------------------------------------------------------------------------------------------------------

/**
 * The canonical lock types.
 *
 * @since 0.1.0
 * @category models
 */
export type LockType =
  | "until_executing"
  | "until_executed"
  | "until_expired"
  | "while_executing"
  | "while_executing_reject"
  | "until_and_while_executing"

/**
 * Every name `lock` accepts, aliases included.
 *
 * @since 0.1.0
 * @category models
 */
export type LockTypeName =
  | LockType
  | "while_enqueued"
  | "until_completed"
  | "until_performed"
  | "until_processed"
  | "until_successfully_completed"
  | "around_perform"
  | "while_busy"
  | "while_working"

/**
 * Each accepted name and the type it stands for.
 *
 * @since 0.1.0
 * @category constants
 */
export const lockTypes: { readonly [K in LockTypeName]: LockType } = {
  until_executing: "until_executing",
  while_enqueued: "until_executing",
  until_executed: "until_executed",
  until_completed: "until_executed",
  until_performed: "until_executed",
  until_processed: "until_executed",
  until_successfully_completed: "until_executed",
  until_expired: "until_expired",
  while_executing: "while_executing",
  around_perform: "while_executing",
  while_busy: "while_executing",
  while_working: "while_executing",
  while_executing_reject: "while_executing_reject",
  until_and_while_executing: "until_and_while_executing"
}

/**
 * Which lock a type holds: `queue` from enqueue (the digest itself), `run` during perform (`<digest>:RUN`).
 *
 * @since 0.1.0
 * @category models
 */
export type Phase = "queue" | "run"

/**
 * Whether a type takes a lock at enqueue (client) and/or around perform (server).
 *
 * @since 0.1.0
 * @category utils
 */
export const phases = (type: LockType): { readonly queue: boolean; readonly run: boolean } => {
  switch (type) {
    case "until_executing":
    case "until_executed":
    case "until_expired":
      return { queue: true, run: false }
    case "while_executing":
    case "while_executing_reject":
      return { queue: false, run: true }
    case "until_and_while_executing":
      return { queue: true, run: true }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------------------------

/**
 * What `afterUnlock` is told.
 *
 * @since 0.1.0
 * @category models
 */
export interface Unlocked {
  readonly digest: string
  readonly jid: string
  readonly lockType: LockType
  readonly phase: Phase
}

/**
 * A worker's uniqueness, as the user writes it. Durations are milliseconds or strings like `"30 seconds"`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The lock type, or one of its aliases. */
  readonly lock: LockTypeName
  /** How long the queue lock lives, counted from enqueue (from the run time for a scheduled job). */
  readonly lockTtl?: Duration.DurationInput | undefined
  /** Validated and stored with `lockInfo`; never makes anything wait (locks are non-blocking). */
  readonly lockTimeout?: Duration.DurationInput | undefined
  /** How many jobs may hold one digest at once. Default 1. */
  readonly lockLimit?: number | undefined
  /** How long an execution lock outlives a worker that stopped renewing it (crash). Default 30 seconds. */
  readonly lockLease?: Duration.DurationInput | undefined
  /** What a duplicate turns into, one name or `{ client, server }`. Default `log`. */
  readonly onConflict?: Strategy.OnConflict | undefined
  /** How long the `reschedule` strategy puts a duplicate execution off. Default 5 seconds. */
  readonly rescheduleDelay?: Duration.DurationInput | undefined
  /** Selects the arguments that count for uniqueness. */
  readonly lockArgs?: ((args: ReadonlyArray<unknown>) => unknown) | undefined
  readonly uniqueAcrossQueues?: boolean | undefined
  readonly uniqueAcrossWorkers?: boolean | undefined
  /** Store worker, queue, arguments and options with each holder, for the admin UI. */
  readonly lockInfo?: boolean | undefined
  /** Key prefix. Default `uniquejobs`. */
  readonly lockPrefix?: string | undefined
  /** `legacy` (MD5, default) or `modern` (SHA3-256). */
  readonly digestAlgorithm?: Digest.Algorithm | undefined
  /** Runs once after each release; never for `until_expired`. Its failures are logged, not raised. */
  readonly afterUnlock?: ((unlocked: Unlocked) => Effect.Effect<unknown, unknown>) | undefined
}

/**
 * The options, decoded: aliases resolved, durations decoded, defaults filled in, strategies split by side.
 *
 * @since 0.1.0
 * @category models
 */
export interface Definition {
  readonly lock: LockType
  readonly lockTtl: Option.Option<Duration.Duration>
  readonly lockTimeout: Duration.Duration
  readonly lockLimit: number
  readonly lockLease: Duration.Duration
  readonly onConflict: Strategy.Resolved
  readonly rescheduleDelay: Duration.Duration
  readonly lockArgs: ((args: ReadonlyArray<unknown>) => unknown) | undefined
  readonly uniqueAcrossQueues: boolean
  readonly uniqueAcrossWorkers: boolean
  readonly lockInfo: boolean
  readonly lockPrefix: string
  readonly digestAlgorithm: Digest.Algorithm
  readonly afterUnlock: ((unlocked: Unlocked) => Effect.Effect<unknown, unknown>) | undefined
}

/**
 * The options could not be decoded. `field` names the first offending option; `issues` lists every one.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidLockOptions extends Schema.TaggedError<InvalidLockOptions>(
  "effect-unique-jobs/InvalidLockOptions"
)("InvalidLockOptions", {
  field: Schema.String,
  reason: Schema.String,
  issues: Schema.Array(Schema.Struct({ field: Schema.String, reason: Schema.String }))
}) {
  override get message(): string {
    return `Invalid lock options: ${this.issues.map((issue) => `${issue.field}: ${issue.reason}`).join("; ")}`
  }
}

const durationFrom = (check: (d: Duration.Duration) => boolean, expected: string) =>
  Schema.transformOrFail(Schema.Unknown, Schema.DurationFromSelf, {
    strict: true,
    decode: (input, _, ast) =>
      Option.match(Duration.decodeUnknown(input), {
        onNone: () =>
          ParseResult.fail(
            new ParseResult.Type(
              ast,
              input,
              `expected ${expected}: milliseconds, a string like "30 seconds", or a Duration`
            )
          ),
        onSome: (d) =>
          check(d) && Duration.isFinite(d)
            ? ParseResult.succeed(d)
            : ParseResult.fail(new ParseResult.Type(ast, input, `expected ${expected}, got ${Duration.format(d)}`))
      }),
    encode: ParseResult.succeed
  })

const PositiveDuration = durationFrom((d) => Duration.greaterThan(d, Duration.zero), "a positive duration")
const NonNegativeDuration = durationFrom((d) => Duration.greaterThanOrEqualTo(d, Duration.zero), "a duration >= 0")

const FunctionSchema = <F>(what: string) =>
  Schema.declare((u: unknown): u is F => typeof u === "function", {
    message: (issue) => `expected a function (${what}), got ${typeof issue.actual}`
  })

const lockNames = Object.keys(lockTypes) as Array<LockTypeName>

const LockTypeSchema = Schema.transformOrFail(Schema.Unknown, Schema.Literal(...new Set(Object.values(lockTypes))), {
  strict: true,
  decode: (input, _, ast) =>
    typeof input === "string" && Object.hasOwn(lockTypes, input)
      ? ParseResult.succeed(lockTypes[input as LockTypeName])
      : ParseResult.fail(
        new ParseResult.Type(ast, input, `unknown lock type ${JSON.stringify(input)}; use one of ${lockNames.join(", ")}`)
      ),
  encode: ParseResult.succeed
})

// A prefix ends up inside key names that are parsed and matched with patterns: keep it to plain characters, and
// clear of the suffixes the data model uses.
const PrefixSchema = Schema.String.pipe(
  Schema.filter((prefix) =>
    (/^[A-Za-z0-9_.\-:]+$/.test(prefix) && !prefix.endsWith(":") && !/:(LOCKED|RUN|digests)/.test(prefix)) ||
    "use letters, digits, '_', '-', '.' and inner ':' only (no spaces, '*', braces, or :LOCKED, :RUN, :digests)"
  )
)

const defaultLease = Duration.seconds(30)

/**
 * The options Schema: `Schema.decodeUnknown(OptionsSchema)` turns user input into a `Definition`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const OptionsSchema = Schema.Struct({
  lock: LockTypeSchema,
  lockTtl: Schema.optionalWith(PositiveDuration, { as: "Option" }),
  lockTimeout: Schema.optionalWith(NonNegativeDuration, { default: () => Duration.zero }),
  lockLimit: Schema.optionalWith(
    Schema.Number.pipe(
      Schema.filter((n) => (Number.isSafeInteger(n) && n >= 1) || "expected a whole number >= 1")
    ),
    { default: () => 1 }
  ),
  lockLease: Schema.optionalWith(PositiveDuration, { default: () => defaultLease }),
  onConflict: Schema.optionalWith(Strategy.OnConflictSchema, {
    default: () => ({ client: "log", server: "log" }) as const
  }),
  rescheduleDelay: Schema.optionalWith(PositiveDuration, { default: () => Duration.seconds(5) }),
  lockArgs: Schema.optionalWith(FunctionSchema<(args: ReadonlyArray<unknown>) => unknown>("lockArgs"), {
    exact: true
  }),
  uniqueAcrossQueues: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  uniqueAcrossWorkers: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  lockInfo: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  lockPrefix: Schema.optionalWith(PrefixSchema, { default: () => Digest.defaultPrefix }),
  digestAlgorithm: Schema.optionalWith(Schema.Literal("legacy", "modern"), { default: () => "legacy" }),
  afterUnlock: Schema.optionalWith(
    FunctionSchema<(unlocked: Unlocked) => Effect.Effect<unknown, unknown>>("afterUnlock"),
    { exact: true }
  )
}).pipe(
  Schema.filter((o) => {
    if (o.lock === "until_expired" && Option.isNone(o.lockTtl)) {
      return { path: ["lockTtl"], message: "until_expired needs a lockTtl: nothing else ever releases it" }
    }
    if (o.lock === "while_executing_reject" && o.onConflict.server !== "reject" && o.onConflict.server !== "log") {
      return {
        path: ["onConflict", "server"],
        message: `while_executing_reject always rejects on the server; drop ${
          Strategy.nameOf(o.onConflict.server)
        } or use while_executing`
      }
    }
    return undefined
  })
)

const fieldName = (path: ReadonlyArray<PropertyKey>): string =>
  path.length === 0
    ? "options"
    : path.map((key, i) =>
      typeof key === "string" && /^[A-Za-z_$][\w$]*$/.test(key)
        ? (i === 0 ? key : `.${key}`)
        : `[${JSON.stringify(String(key))}]`
    ).join("")

// One reason per field: an optional field is a union with undefined, whose "Expected undefined" adds nothing.
const formatIssues = (error: ParseResult.ParseError) => {
  const byField = new Map<string, string>()
  for (const issue of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const field = fieldName(issue.path)
    if (!byField.has(field) && !issue.message.startsWith("Expected undefined")) byField.set(field, issue.message)
  }
  return Array.from(byField, ([field, reason]) => ({ field, reason }))
}

const decodeOptions = Schema.decodeUnknownEither(OptionsSchema, { errors: "all", onExcessProperty: "error" })

const fromDecoded = (decoded: typeof OptionsSchema.Type): Definition => ({
  ...decoded,
  lockArgs: decoded.lockArgs ?? undefined,
  afterUnlock: decoded.afterUnlock ?? undefined,
  onConflict: decoded.lock === "while_executing_reject" ? { ...decoded.onConflict, server: "reject" } : decoded.onConflict
})

/**
 * Decodes a worker's options once. An impossible combination fails here, naming the field.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options): Effect.Effect<Definition, InvalidLockOptions> => decode(options)

const decode = (options: Options): Either.Either<Definition, InvalidLockOptions> =>
  Either.mapBoth(decodeOptions(options), {
    onLeft: (error) => {
      const issues = formatIssues(error)
      const first = issues[0] ?? { field: "options", reason: "invalid" }
      return new InvalidLockOptions({ field: first.field, reason: first.reason, issues })
    },
    onRight: fromDecoded
  })

/**
 * `make` for module top level: throws the `InvalidLockOptions` at definition time.
 *
 * @since 0.1.0
 * @category constructors
 */
export const unsafeMake = (options: Options): Definition =>
  Either.getOrThrowWith(decode(options), (error) => error)

/**
 * The digest of a job under a definition.
 *
 * @since 0.1.0
 * @category utils
 */
export const digest = (definition: Definition, input: Digest.Input): Effect.Effect<string, Digest.DigestError> =>
  Digest.make(input, {
    lockArgs: definition.lockArgs,
    uniqueAcrossQueues: definition.uniqueAcrossQueues,
    uniqueAcrossWorkers: definition.uniqueAcrossWorkers,
    algorithm: definition.digestAlgorithm,
    prefix: definition.lockPrefix
  })

// ---------------------------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------------------------

/**
 * The lock is held by other jobs (as many as `lockLimit`). The conflict strategies turn it into an outcome.
 *
 * @since 0.1.0
 * @category errors
 */
export class LockConflict extends Schema.TaggedError<LockConflict>("effect-unique-jobs/LockConflict")("LockConflict", {
  digest: Schema.String,
  jid: Schema.String,
  phase: Schema.Literal("queue", "run"),
  lockType: Schema.String,
  holders: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `Job ${this.jid} cannot take the ${this.phase} lock ${this.digest}: held by ${this.holders.join(", ")}`
  }
}

/**
 * A held execution lock was found gone by a lease renewal (deleted, or its lease passed and another job took it).
 *
 * @since 0.1.0
 * @category errors
 */
export class LockLost extends Schema.TaggedError<LockLost>("effect-unique-jobs/LockLost")("LockLost", {
  digest: Schema.String,
  jid: Schema.String,
  lockType: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `Job ${this.jid} lost its lock ${this.digest} while running (${this.reason}); another copy may run now`
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Lock steps
// ---------------------------------------------------------------------------------------------------------------

/**
 * Which job wants which lock.
 *
 * @since 0.1.0
 * @category models
 */
export interface Target {
  readonly digest: string
  readonly jid: string
  /** Default: `queue` for types that lock at enqueue, else `run`. */
  readonly phase?: Phase | undefined
  /** For a scheduled job: its queue lock's TTL counts from its run time, so the TTL grows by the delay. */
  readonly delay?: Duration.DurationInput | undefined
  /** Worker, queue and arguments, stored with the holder when `lockInfo` is on. */
  readonly info?: { readonly worker?: string; readonly queue?: string; readonly args?: unknown } | undefined
}

/**
 * A lock taken.
 *
 * @since 0.1.0
 * @category models
 */
export interface Acquired {
  readonly digest: string
  readonly jid: string
  readonly phase: Phase
  /** The job already held it (a retry or a redelivery). */
  readonly reentrant: boolean
}

const phaseOf = (definition: Definition, target: Target): Phase =>
  target.phase ?? (phases(definition.lock).queue ? "queue" : "run")

/**
 * The lock's Redis identity: the digest for the queue phase, `<digest>:RUN` for the run phase.
 *
 * @since 0.1.0
 * @category utils
 */
export const keyOf = (definition: Definition, digest: string, phase: Phase): LockKey => ({
  prefix: definition.lockPrefix,
  name: phase === "queue" ? digest : `${digest}:RUN`
})

const infoOf = (definition: Definition, target: Target): string =>
  definition.lockInfo
    ? JSON.stringify({
      type: definition.lock,
      limit: definition.lockLimit,
      ttl: Option.match(definition.lockTtl, { onNone: () => null, onSome: Duration.toMillis }),
      timeout: Duration.toMillis(definition.lockTimeout),
      ...target.info
    })
    : ""

// The queue lock lives for lockTtl (plus the delay); the run lock lives by its renewed lease.
const requestOf = (definition: Definition, target: Target, phase: Phase): HolderRequest => ({
  jid: target.jid,
  limit: definition.lockLimit,
  ttlMs: phase === "queue"
    ? Option.match(definition.lockTtl, {
      onNone: () => 0,
      onSome: (ttl) => Duration.toMillis(ttl) + (target.delay === undefined ? 0 : Duration.toMillis(target.delay))
    })
    : 0,
  leaseMs: phase === "run" ? Duration.toMillis(definition.lockLease) : 0,
  info: infoOf(definition, target)
})

const counter = (family: Metrics.Family, lockType: LockType, phase: Phase) => family.of(lockType, phase)

// Lock steps carry no span of their own: a span costs more Node CPU than the Redis call (measured in bench/);
// the middleware phases that call them carry one each.

/** An acquire reply as the step's outcome: `Acquired`, or a `LockConflict` failure; counted either way. */
const settle = <Extra extends object>(
  definition: Definition,
  target: Target,
  phase: Phase,
  result: LockResult,
  extra: Extra
): Effect.Effect<Acquired & Extra, LockConflict> =>
  Effect.withFiberRuntime((fiber) => {
    if (result._tag === "Acquired") {
      Metrics.unsafeIncrement(counter(Metrics.acquired, definition.lock, phase), fiber)
      return Effect.succeed({
        digest: target.digest,
        jid: target.jid,
        phase,
        reentrant: result.reentrant,
        ...extra
      })
    }
    Metrics.unsafeIncrement(counter(Metrics.conflicts, definition.lock, phase), fiber)
    return Effect.fail(
      new LockConflict({
        digest: target.digest,
        jid: target.jid,
        phase,
        lockType: definition.lock,
        holders: result.holders
      })
    )
  })

/**
 * Takes the lock for `target.jid` in one round trip, or fails with `LockConflict` naming the holders.
 * Never waits: a held lock is a conflict at once.
 *
 * @since 0.1.0
 * @category lock steps
 */
export const lock = (
  definition: Definition,
  target: Target
): Effect.Effect<Acquired, LockConflict | RedisError, RedisService> => {
  const phase = phaseOf(definition, target)
  return Effect.flatMap(RedisService, (redis) =>
    Effect.flatMap(
      redis.lock(keyOf(definition, target.digest, phase), requestOf(definition, target, phase)),
      (result) => settle(definition, target, phase, result, {})
    ))
}

const runAfterUnlock = (definition: Definition, unlocked: Unlocked): Effect.Effect<void> =>
  definition.afterUnlock === undefined || definition.lock === "until_expired"
    ? Effect.void
    : Effect.suspend(() => definition.afterUnlock!(unlocked)).pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("afterUnlock failed", cause)),
      Effect.annotateLogs({ package: "effect-unique-jobs", module: "Lock", digest: unlocked.digest, jid: unlocked.jid }),
      Effect.asVoid
    )

/**
 * Releases `target.jid`'s hold in one round trip; answers whether it held the lock. `afterUnlock` runs once
 * when it did (never for `until_expired`, which only expiry releases).
 *
 * @since 0.1.0
 * @category lock steps
 */
export const unlock = (definition: Definition, target: Target): Effect.Effect<boolean, RedisError, RedisService> => {
  const phase = phaseOf(definition, target)
  return Effect.flatMap(RedisService, (redis) =>
    Effect.flatMap(
      redis.unlock(keyOf(definition, target.digest, phase), target.jid),
      (released) => released ? afterRelease(definition, target, phase) : notReleased
    ))
}

const notReleased = Effect.succeed(false)
const wasReleased = Effect.succeed(true)

const afterRelease = (definition: Definition, target: Target, phase: Phase): Effect.Effect<boolean> =>
  Effect.withFiberRuntime((fiber) => {
    Metrics.unsafeIncrement(counter(Metrics.released, definition.lock, phase), fiber)
    return definition.afterUnlock === undefined || definition.lock === "until_expired"
      ? wasReleased
      : Effect.as(
        runAfterUnlock(definition, { digest: target.digest, jid: target.jid, lockType: definition.lock, phase }),
        true
      )
  })

/**
 * The server step of `until_and_while_executing`: takes `<digest>:RUN` and releases the queue lock in one script.
 * On conflict the queue lock is kept when `keepQueueLock` (the job goes back to the queue, still unique).
 *
 * @since 0.1.0
 * @category lock steps
 */
export const handoff = (
  definition: Definition,
  target: Target,
  options: { readonly keepQueueLock: boolean }
): Effect.Effect<Acquired & { readonly queueLockHeld: boolean }, LockConflict | RedisError, RedisService> =>
  Effect.flatMap(RedisService, (redis) =>
    Effect.flatMap(
      redis.handoff(
        keyOf(definition, target.digest, "queue"),
        keyOf(definition, target.digest, "run"),
        requestOf(definition, target, "run"),
        { keepOnConflict: options.keepQueueLock }
      ),
      (result) => settle(definition, target, "run", result, { queueLockHeld: result.queueLockHeld })
    ))

/**
 * Moves the run lock's lease forward; fails with `LockLost` when the entry is gone.
 *
 * @since 0.1.0
 * @category lock steps
 */
export const renew = (definition: Definition, target: Target): Effect.Effect<void, LockLost | RedisError, RedisService> =>
  Effect.flatMap(RedisService, (redis) =>
    Effect.flatMap(
      redis.renew(keyOf(definition, target.digest, "run"), target.jid, Duration.toMillis(definition.lockLease)),
      (renewed) =>
        renewed ? Effect.void : Effect.fail(
          new LockLost({ digest: target.digest, jid: target.jid, lockType: definition.lock, reason: "the entry is gone" })
        )
    ))

/**
 * Renews the run lock every lease/3 until interrupted. Fails with `LockLost` when the entry is gone, or when no
 * renewal succeeded for a whole lease (Redis unreachable: the lock may have passed to another job).
 *
 * @since 0.1.0
 * @category lock steps
 */
export const keepAlive = (
  definition: Definition,
  target: Target
): Effect.Effect<never, LockLost, RedisService> => {
  const leaseMs = Duration.toMillis(definition.lockLease)
  const every = Duration.millis(Math.max(1, Math.floor(leaseMs / 3)))
  const loop = (lastRenewed: number): Effect.Effect<never, LockLost, RedisService> =>
    Effect.sleep(every).pipe(
      Effect.zipRight(renew(definition, target)),
      Effect.zipRight(Clock.currentTimeMillis),
      Effect.catchTag("RedisError", (error) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          now - lastRenewed >= leaseMs
            ? Effect.fail(
              new LockLost({
                digest: target.digest,
                jid: target.jid,
                lockType: definition.lock,
                reason: `no renewal succeeded for a whole lease: ${error.message}`
              })
            )
            : Effect.as(Effect.logWarning("lease renewal failed; retrying", error), lastRenewed))),
      Effect.flatMap(loop)
    )
  return Effect.flatMap(Clock.currentTimeMillis, loop).pipe(
    Effect.tapError(() => Metric.increment(counter(Metrics.lost, definition.lock, "run")))
  )
}

/**
 * A lock held for as long as its scope: released (and `afterUnlock` run) when the scope closes, however it
 * closes. A run lock's lease is renewed meanwhile; `lost` fails with `LockLost` if the lock is lost.
 *
 * @since 0.1.0
 * @category models
 */
export interface Held extends Acquired {
  readonly lost: Effect.Effect<never, LockLost>
}

const hold = <A extends Acquired, E>(
  definition: Definition,
  target: Target,
  phase: Phase,
  take: Effect.Effect<A, E, RedisService>
): Effect.Effect<A & Held, E, RedisService | Scope.Scope> => {
  const pinned: Target = { ...target, phase }
  // Built step by step rather than with Effect.gen, and annotated only where it logs: a scoped lock is taken once
  // per job, and each of these costs more Node CPU than the Redis call.
  const release = (start: number) =>
    Effect.catchAll(
      Effect.zipRight(
        unlock(definition, pinned),
        Effect.flatMap(Clock.currentTimeMillis, (end) => Metric.update(Metrics.holdTime, end - start))
      ),
      (error) =>
        Effect.logWarning("releasing the lock failed; its TTL or lease will free it", error).pipe(
          Effect.annotateLogs({ package: "effect-unique-jobs", module: "Lock", digest: target.digest, jid: target.jid })
        )
    )
  return Effect.flatMap(Clock.currentTimeMillis, (start) =>
    Effect.flatMap(
      Effect.acquireRelease(take, () => release(start)),
      (acquired): Effect.Effect<A & Held, never, RedisService | Scope.Scope> =>
        phase === "run"
          ? Effect.flatMap(Deferred.make<never, LockLost>(), (lostSignal) =>
            Effect.as(
              keepAlive(definition, pinned).pipe(
                Effect.catchAll((lost) => Deferred.fail(lostSignal, lost)),
                Effect.forkScoped
              ),
              { ...acquired, lost: Deferred.await(lostSignal) }
            ))
          // A queue lock has no lease to lose.
          : Effect.succeed({ ...acquired, lost: Effect.never })
    ))
}

/**
 * Takes the lock as a scoped resource.
 *
 * @since 0.1.0
 * @category resources
 */
export const acquire = (
  definition: Definition,
  target: Target
): Effect.Effect<Held, LockConflict | RedisError, RedisService | Scope.Scope> => {
  const phase = phaseOf(definition, target)
  return hold(definition, target, phase, lock(definition, { ...target, phase }))
}

/**
 * `handoff` as a scoped resource: the run lock is held (and renewed) until the scope closes.
 *
 * @since 0.1.0
 * @category resources
 */
export const acquireHandoff = (
  definition: Definition,
  target: Target,
  options: { readonly keepQueueLock: boolean }
): Effect.Effect<Held & { readonly queueLockHeld: boolean }, LockConflict | RedisError, RedisService | Scope.Scope> =>
  hold(definition, target, "run", handoff(definition, target, options))

/**
 * Runs `self` holding the lock: released when `self` ends, fails, or is interrupted. If the run lock is lost
 * meanwhile, `self` is interrupted and the result is a `LockLost` failure.
 *
 * @since 0.1.0
 * @category resources
 */
export const withLock = (definition: Definition, target: Target) =>
<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E | LockConflict | LockLost | RedisError, R | RedisService> =>
  Effect.scoped(Effect.flatMap(acquire(definition, target), (held) => Effect.raceFirst(self, held.lost)))
