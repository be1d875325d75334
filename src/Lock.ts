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
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Digest from "./Digest.js"
import * as Metrics from "./Metrics.js"
import { unsafeIncrement } from "./internal/metrics.js"
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
 * A worker's uniqueness, as the user writes it. Durations are whole milliseconds, strings like `"30 seconds"`, or
 * Durations, up to `maxDurationMs`. An option the lock type never reads is refused, not ignored.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The lock type, or one of its aliases. */
  readonly lock: LockTypeName
  /**
   * How long the queue lock lives, counted from enqueue (from the run time for a scheduled job). Types that lock at
   * enqueue.
   */
  readonly lockTtl?: Duration.DurationInput | undefined
  /** Validated and stored with `lockInfo`; never makes anything wait (locks are non-blocking). */
  readonly lockTimeout?: Duration.DurationInput | undefined
  /** How many jobs may hold one digest at once. Default 1. */
  readonly lockLimit?: number | undefined
  /**
   * How long an execution lock outlives a worker that stopped renewing it (crash). Default 30 seconds, at least
   * `minLeaseMs`. Types that lock around perform.
   */
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

/**
 * The longest duration any option takes, in milliseconds: 1000 years of 365 days. An expiry (Redis time plus a
 * duration) then stays a whole number that a double, the index's score, holds exactly.
 *
 * @since 0.1.0
 * @category constants
 */
export const maxDurationMs = 31_536_000_000_000

/**
 * The shortest `lockLease`, in milliseconds. The lease is renewed every lease/3, so a shorter one runs out before a
 * renewal's round trip can keep it.
 *
 * @since 0.1.0
 * @category constants
 */
export const minLeaseMs = 100

// Duration clamps a negative to zero: "got 0" would hide the -5 that was written, so look at the input itself.
const isNegative = (input: unknown): boolean =>
  typeof input === "number"
    ? !(input >= 0)
    : typeof input === "bigint"
    ? input < 0n
    : typeof input === "string"
    ? parseFloat(input) < 0
    : Array.isArray(input) && !(Number(input[0]) * 1e9 + Number(input[1]) >= 0)

const written = (input: unknown): string =>
  typeof input === "number"
    ? `${input} ms`
    : typeof input === "bigint"
    ? `${input} ns`
    : Array.isArray(input)
    ? `[${input.join(", ")}]`
    : String(input)

// Exactly: a Duration keeps a fraction of a millisecond as nanoseconds, which a double cannot always carry.
const wholeMillis = (d: Duration.Duration): number | undefined =>
  d.value._tag === "Millis"
    ? (Number.isInteger(d.value.millis) ? d.value.millis : undefined)
    : d.value._tag === "Nanos" && d.value.nanos % 1_000_000n === 0n
    ? Number(d.value.nanos / 1_000_000n)
    : undefined

// Every duration reaches a script as whole milliseconds within range (PEXPIRE refuses a fraction after the
// script's first write), so it decodes to exactly that or fails here.
const durationFrom = (minMs: number, expected: string) =>
  Schema.transformOrFail(Schema.Unknown, Schema.DurationFromSelf, {
    strict: true,
    decode: (input, _, ast) => {
      const fail = (reason: string) => ParseResult.fail(new ParseResult.Type(ast, input, reason))
      const decoded = Duration.decodeUnknown(input)
      if (Option.isNone(decoded)) {
        return fail(`expected ${expected}: milliseconds, a string like "30 seconds", or a Duration`)
      }
      if (isNegative(input)) return fail(`expected ${expected}, got ${written(input)}`)
      // Duration keeps nanoseconds: a number with a finer fraction would be rounded into a whole millisecond.
      if (typeof input === "number" && !Number.isInteger(input) && Number.isFinite(input)) {
        return fail(`expected whole milliseconds, got ${input} ms (use ${Math.round(input)})`)
      }
      const ms = Duration.toMillis(decoded.value)
      if (!(ms <= maxDurationMs)) {
        const got = ms === Infinity ? "Infinity" : `${ms} ms`
        return fail(`expected at most 1000 years (${maxDurationMs} ms), got ${got}`)
      }
      const whole = wholeMillis(decoded.value)
      if (whole === undefined) return fail(`expected whole milliseconds, got ${ms} ms (use ${Math.round(ms)})`)
      return whole < minMs ? fail(`expected ${expected}, got ${whole} ms`) : ParseResult.succeed(Duration.millis(whole))
    },
    encode: ParseResult.succeed
  })

const PositiveDuration = durationFrom(1, "a positive duration")
const NonNegativeDuration = durationFrom(0, "a duration >= 0")
const LeaseDuration = durationFrom(
  minLeaseMs,
  `at least ${minLeaseMs} ms (the lease is renewed every lease/3; a shorter one runs out before a renewal keeps it)`
)

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
const defaultRescheduleDelay = Duration.seconds(5)
const defaultOnConflict: Strategy.Resolved = { client: "log", server: "log" }

interface OnConflictGiven {
  readonly resolved: Strategy.Resolved
  /** The one name given for both sides, if so. */
  readonly name: string | undefined
}

const decodeOnConflict = ParseResult.decodeUnknown(Strategy.OnConflictSchema)

// A single name is checked only on the sides a type has; an explicit side is checked as written.
const OnConflictGiven = Schema.transformOrFail(
  Schema.Unknown,
  Schema.declare((u: unknown): u is OnConflictGiven => typeof u === "object" && u !== null),
  {
    strict: true,
    decode: (input, options) =>
      ParseResult.map(decodeOnConflict(input, options), (resolved) => ({
        resolved,
        name: typeof input === "string" ? input : undefined
      })),
    encode: (given) => ParseResult.succeed(given.resolved)
  }
)

// An option the type never reads would be dropped without a word: refuse it, and say what to do instead.
const ignoredOptions = (o: {
  readonly lock: LockType
  readonly lockTtl: Option.Option<Duration.Duration>
  readonly lockLease: Option.Option<Duration.Duration>
  readonly onConflict: Option.Option<OnConflictGiven>
  readonly rescheduleDelay: Option.Option<Duration.Duration>
}): Array<Schema.FilterIssue> => {
  const issues: Array<Schema.FilterIssue> = []
  const { queue, run } = phases(o.lock)
  const { name, resolved } = Option.getOrElse(o.onConflict, () => ({ resolved: defaultOnConflict, name: undefined }))
  if (!queue && Option.isSome(o.lockTtl)) {
    issues.push({
      path: ["lockTtl"],
      message: `${o.lock} takes no lock at enqueue, so lockTtl would never apply; its run lock lives by lockLease ` +
        "(drop lockTtl, or use until_and_while_executing to lock at enqueue too)"
    })
  }
  if (!run && Option.isSome(o.lockLease)) {
    issues.push({
      path: ["lockLease"],
      message: `${o.lock} takes no lock around perform, so lockLease would never apply; its lock is bounded by ` +
        "lockTtl (drop lockLease, or use until_and_while_executing to lock around perform too)"
    })
  }
  if (!queue && (name === undefined ? resolved.client !== "log" : !Strategy.serverNames.includes(name as never))) {
    issues.push({
      path: name === undefined ? ["onConflict", "client"] : ["onConflict"],
      message: `${o.lock} takes no lock at enqueue, so ${
        name === undefined ? `a client strategy (${Strategy.nameOf(resolved.client)})` : `"${name}" (client only)`
      } would never apply; use a server strategy (${Strategy.serverNames.join(", ")}) or a type that locks at enqueue`
    })
  }
  if (!run && (name === undefined ? resolved.server !== "log" : !Strategy.clientNames.includes(name as never))) {
    issues.push({
      path: name === undefined ? ["onConflict", "server"] : ["onConflict"],
      message: `${o.lock} takes no lock around perform, so ${
        name === undefined ? `a server strategy (${Strategy.nameOf(resolved.server)})` : `"${name}" (server only)`
      } would never apply; use a client strategy (${Strategy.clientNames.join(", ")}) or until_and_while_executing`
    })
  }
  if (o.lock === "while_executing_reject" && resolved.server !== "reject" && resolved.server !== "log") {
    issues.push({
      path: name === undefined ? ["onConflict", "server"] : ["onConflict"],
      message: `while_executing_reject always rejects on the server; drop ${
        Strategy.nameOf(resolved.server)
      } or use while_executing`
    })
  }
  // A strategy function may read rescheduleDelay; a built-in other than reschedule never does.
  const server = o.lock === "while_executing_reject" ? "reject" : resolved.server
  if (Option.isSome(o.rescheduleDelay) && typeof server === "string" && server !== "reschedule") {
    issues.push({
      path: ["rescheduleDelay"],
      message: run
        ? `only the reschedule strategy reads rescheduleDelay, and the server strategy here is ${server} ` +
          `(drop rescheduleDelay, or set onConflict: { server: "reschedule" })`
        : `${o.lock} takes no lock around perform, so nothing is rescheduled (drop rescheduleDelay)`
    })
  }
  return issues
}

/**
 * The options Schema: decodes and checks user input, leaving the options not given as `None` (an option a lock
 * type never reads is refused only when given). `make` turns the result into a `Definition`.
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
  // Options, not defaults, where a type refuses an option it never reads: the check must see what was given.
  lockLease: Schema.optionalWith(LeaseDuration, { as: "Option" }),
  onConflict: Schema.optionalWith(OnConflictGiven, { as: "Option" }),
  rescheduleDelay: Schema.optionalWith(PositiveDuration, { as: "Option" }),
  // `undefined` reads as absent, as the Options type says (`lockArgs: cond ? f : undefined`).
  lockArgs: Schema.optional(FunctionSchema<(args: ReadonlyArray<unknown>) => unknown>("lockArgs")),
  uniqueAcrossQueues: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  uniqueAcrossWorkers: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  lockInfo: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  lockPrefix: Schema.optionalWith(PrefixSchema, { default: () => Digest.defaultPrefix }),
  digestAlgorithm: Schema.optionalWith(Schema.Literal("legacy", "modern"), { default: () => "legacy" }),
  afterUnlock: Schema.optional(FunctionSchema<(unlocked: Unlocked) => Effect.Effect<unknown, unknown>>("afterUnlock"))
}).pipe(
  Schema.filter((o) => [
    o.lock === "until_expired" && Option.isNone(o.lockTtl)
      ? { path: ["lockTtl"], message: "until_expired needs a lockTtl: nothing else ever releases it" }
      : undefined,
    ...ignoredOptions(o)
  ])
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

const fromDecoded = (decoded: typeof OptionsSchema.Type): Definition => {
  const onConflict = Option.match(decoded.onConflict, {
    onNone: () => defaultOnConflict,
    onSome: (given) => given.resolved
  })
  return {
    ...decoded,
    lockLease: Option.getOrElse(decoded.lockLease, () => defaultLease),
    rescheduleDelay: Option.getOrElse(decoded.rescheduleDelay, () => defaultRescheduleDelay),
    lockArgs: decoded.lockArgs ?? undefined,
    afterUnlock: decoded.afterUnlock ?? undefined,
    onConflict: decoded.lock === "while_executing_reject" ? { ...onConflict, server: "reject" } : onConflict
  }
}

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
 * A held execution lock was lost while the job ran: a renewal or the release found it gone (deleted, or its lease
 * passed and another job may have taken it), or no renewal was confirmed before the lease ended. The perform is
 * interrupted when the loss is seen while it runs. The job's writes since then may overlap another holder's: pass
 * the fencing token (`Running.fence`) to the stores it writes to so they can refuse the stale holder.
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
  /** For `unlock` and `renew` of a run lock: the acquisition's fencing token, so no other copy's hold is touched. */
  readonly fence?: number | undefined
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
  /** The job already held it (a retry of the same jid re-entering its queue lock). */
  readonly reentrant: boolean
  /**
   * A run lock's fencing token: it strictly increases per digest across acquisitions (and lock lifetimes), so a
   * store the job writes to can refuse writes carrying a lower token than it has seen. 0 for a queue lock.
   */
  readonly fence: number
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

// Info is for people reading locks: values JSON cannot carry are written as text, never thrown (the arguments are the
// job's own, not only the lock arguments the digest checked).
const infoReplacer = () => {
  const ancestors: Array<unknown> = []
  return function(this: unknown, _key: string, value: unknown): unknown {
    if (typeof value === "bigint") return `${value}n`
    if (typeof value === "function" || typeof value === "symbol") return String(value)
    if (typeof value === "number" && !Number.isFinite(value)) return String(value)
    if (typeof value !== "object" || value === null) return value
    while (ancestors.length > 0 && ancestors[ancestors.length - 1] !== this) ancestors.pop()
    if (ancestors.includes(value)) return "[Circular]"
    ancestors.push(value)
    return value
  }
}

const infoOf = (definition: Definition, target: Target): string => {
  if (!definition.lockInfo) return ""
  const info = {
    type: definition.lock,
    limit: definition.lockLimit,
    ttl: Option.match(definition.lockTtl, { onNone: () => null, onSome: Duration.toMillis }),
    timeout: Duration.toMillis(definition.lockTimeout),
    ...target.info
  }
  try {
    return JSON.stringify(info, infoReplacer())
  } catch (cause) {
    // A toJSON that throws: keep the lock's own fields.
    return JSON.stringify({ ...info, args: `unreadable: ${String(cause)}` }, infoReplacer())
  }
}

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
  info: infoOf(definition, target),
  fenced: phase === "run"
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
      unsafeIncrement(counter(Metrics.acquired, definition.lock, phase), fiber)
      return Effect.succeed({
        digest: target.digest,
        jid: target.jid,
        phase,
        reentrant: result.reentrant,
        fence: result.fence,
        ...extra
      })
    }
    unsafeIncrement(counter(Metrics.conflicts, definition.lock, phase), fiber)
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
 * Releases `target.jid`'s hold in one round trip (only the acquisition `target.fence` when given); answers whether
 * that hold was still live. False means it was gone already: expired, deleted, or (a run lock) taken over after its
 * lease passed. `afterUnlock` runs once when it was live (never for `until_expired`, which only expiry releases).
 *
 * @since 0.1.0
 * @category lock steps
 */
export const unlock = (definition: Definition, target: Target): Effect.Effect<boolean, RedisError, RedisService> => {
  const phase = phaseOf(definition, target)
  return Effect.flatMap(RedisService, (redis) =>
    Effect.flatMap(
      redis.unlock(keyOf(definition, target.digest, phase), target.jid, target.fence ?? 0),
      (released) => released ? afterRelease(definition, target, phase) : notReleased
    ))
}

const notReleased = Effect.succeed(false)
const wasReleased = Effect.succeed(true)

const afterRelease = (definition: Definition, target: Target, phase: Phase): Effect.Effect<boolean> =>
  Effect.withFiberRuntime((fiber) => {
    unsafeIncrement(counter(Metrics.released, definition.lock, phase), fiber)
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
      (result) => {
        const taken = settle(definition, target, "run", result, { queueLockHeld: result.queueLockHeld })
        // The script released the queue lock unless it kept it for a job going back to the queue: that release counts
        // (and runs afterUnlock) like any other.
        return result.queueLockHeld && (result._tag === "Acquired" || !options.keepQueueLock)
          ? Effect.zipRight(afterRelease(definition, { ...target, phase: "queue" }, "queue"), taken)
          : taken
      }
    ))

/**
 * Moves the run lock's lease forward (only the acquisition `target.fence` when given); fails with `LockLost` when the
 * hold is gone, another acquisition's, or its lease already passed.
 *
 * @since 0.1.0
 * @category lock steps
 */
export const renew = (definition: Definition, target: Target): Effect.Effect<void, LockLost | RedisError, RedisService> =>
  Effect.flatMap(RedisService, (redis) =>
    Effect.flatMap(
      redis.renew(
        keyOf(definition, target.digest, "run"),
        target.jid,
        Duration.toMillis(definition.lockLease),
        target.fence ?? 0
      ),
      (renewed) =>
        renewed ? Effect.void : Effect.fail(
          new LockLost({
            digest: target.digest,
            jid: target.jid,
            lockType: definition.lock,
            reason: "a renewal found the hold gone (deleted, or its lease passed)"
          })
        )
    ))

/**
 * How long before its lease could end in Redis a holder gives the lock up: a tenth of the lease, at most 2 seconds.
 * It covers the time to interrupt the perform and a small drift between the two clocks.
 *
 * @since 0.1.0
 * @category utils
 */
export const leaseGuardMs = (leaseMs: number): number => Math.min(2000, Math.ceil(leaseMs / 10))

/**
 * Keeps a run lock: renews its lease every lease/3 (a failed renewal is retried within a second), and fails with
 * `LockLost` when a renewal finds the hold gone, or the moment the last confirmed lease ends. A lease counts from when
 * its renewal (or, for the first, the acquisition at `sentAt`) was sent, by this process' clock, less
 * `leaseGuardMs`: the call reached Redis after it was sent, so the lease ends here before it can end in Redis, and no
 * other process can take the lock while this one still believes it holds it.
 *
 * @since 0.1.0
 * @category lock steps
 */
export const keepAlive = (
  definition: Definition,
  target: Target,
  sentAt: number
): Effect.Effect<never, LockLost, RedisService> => {
  const leaseMs = Duration.toMillis(definition.lockLease)
  const guard = leaseGuardMs(leaseMs)
  const every = Math.max(1, Math.floor(leaseMs / 3))
  const retry = Math.min(every, 1000)
  let lastError: RedisError | undefined
  const ended = () =>
    new LockLost({
      digest: target.digest,
      jid: target.jid,
      lockType: definition.lock,
      reason: `no renewal was confirmed before its lease ended${
        lastError === undefined ? "" : ` (last renewal: ${lastError.message})`
      }`
    })
  // One renewal after `delay`: the next deadline and delay. Only the renewal call races the deadline (a timeout forks a
  // fiber): the wait before it simply stops at the deadline, so a short-lived lock costs no fiber beyond its keeper.
  const step = (deadline: number, delay: number) =>
    Effect.flatMap(
      Clock.currentTimeMillis,
      (now): Effect.Effect<readonly [number, number], LockLost, RedisService> =>
        Effect.zipRight(
          Effect.sleep(Math.max(0, Math.min(delay, deadline - now))),
          Effect.flatMap(Clock.currentTimeMillis, (sent) =>
            deadline <= sent ? Effect.fail(ended()) : renew(definition, target).pipe(
              Effect.as([sent + leaseMs - guard, every] as const),
              Effect.catchTag("RedisError", (error) => {
                lastError = error
                return Effect.as(
                  Effect.logWarning("lease renewal failed; retrying until the lease ends", error).pipe(
                    Effect.annotateLogs(lockAnnotations(target))
                  ),
                  [deadline, retry] as const
                )
              }),
              Effect.timeoutFail({ duration: deadline - sent, onTimeout: ended })
            ))
        )
    )
  const loop = (deadline: number, delay: number): Effect.Effect<never, LockLost, RedisService> =>
    Effect.flatMap(step(deadline, delay), ([next, after]) => loop(next, after))
  return loop(sentAt + leaseMs - guard, every)
}

/**
 * A lock held for as long as its scope: released (and `afterUnlock` run) when the scope closes, however it
 * closes, or earlier by `release`. A run lock's lease is kept meanwhile.
 *
 * @since 0.1.0
 * @category models
 */
export interface Held extends Acquired {
  /** Fails with `LockLost` the moment a run lock is lost; never completes for a queue lock (it has no lease). */
  readonly lost: Effect.Effect<never, LockLost>
  /**
   * Releases the lock now; the scope's release then does nothing. A run lock whose hold was already gone fails with
   * `LockLost` (another copy may have run meanwhile). A queue lock found gone ended by its own `lockTtl` or was
   * deleted: that is logged, not a failure. A release that cannot reach Redis is logged: the lease or TTL frees it.
   */
  readonly release: Effect.Effect<void, LockLost>
}

const lockAnnotations = (target: Target) => ({
  package: "effect-unique-jobs",
  module: "Lock",
  digest: target.digest,
  jid: target.jid
})

const hold = <A extends Acquired, E>(
  definition: Definition,
  target: Target,
  phase: Phase,
  take: Effect.Effect<A, E, RedisService>
): Effect.Effect<A & Held, E, RedisService | Scope.Scope> =>
  // Built step by step rather than with Effect.gen, and annotated only where it logs: a scoped lock is taken once
  // per job, and each of these costs more Node CPU than the Redis call.
  Effect.flatMap(Effect.zip(Clock.currentTimeMillis, RedisService), ([start, redis]) => {
    const state: { released: boolean; lostReported: boolean; keeper: Fiber.RuntimeFiber<void> | undefined } = {
      released: false,
      lostReported: false,
      keeper: undefined
    }
    const lostAtRelease = (pinned: Target) =>
      new LockLost({
        digest: target.digest,
        jid: target.jid,
        lockType: definition.lock,
        reason: `the release found the hold gone (its lease passed or it was deleted)${
          pinned.fence ? `; fence ${pinned.fence}` : ""
        }`
      })
    // Unlocks once; answers whether the hold was still live, or undefined when Redis could not be reached.
    const unlockOnce = (pinned: Target) =>
      Effect.suspend(() => {
        if (state.released) return Effect.succeed(true as boolean | undefined)
        state.released = true
        const keeper = state.keeper
        // The keeper is stopped without waiting for it: a renewal still in flight is ignored (released is set).
        return Effect.zipRight(
          keeper === undefined ? Effect.void : Fiber.interruptFork(keeper),
          unlock(definition, pinned).pipe(
            Effect.provideService(RedisService, redis),
            Effect.tap(() =>
              Effect.flatMap(Clock.currentTimeMillis, (end) => Metric.update(Metrics.holdTime, end - start))
            ),
            Effect.catchAll((error) =>
              Effect.as(
                Effect.logWarning("releasing the lock failed; its TTL or lease will free it", error).pipe(
                  Effect.annotateLogs(lockAnnotations(target))
                ),
                undefined
              )
            )
          )
        )
      })
    // A run lock's loss is counted once, whoever sees it first: the keeper or the release.
    const countLost = Effect.suspend(() => {
      if (state.lostReported) return Effect.succeed(false)
      state.lostReported = true
      return Effect.as(Metric.increment(counter(Metrics.lost, definition.lock, "run")), true)
    })
    // The one release, used by `Held.release` and by the scope: a hold found gone is logged (and, for a run lock,
    // counted and failed with LockLost; the scope ignores that failure, the job's own outcome stands).
    const releaseOf = (acquired: A): Effect.Effect<void, LockLost> => {
      const pinned: Target = { ...target, phase, fence: acquired.fence }
      return Effect.flatMap(unlockOnce(pinned), (live) => {
        if (live !== false) return Effect.void
        if (phase === "queue") {
          return Effect.logDebug("the queue lock had already ended (its lockTtl passed, or it was deleted)").pipe(
            Effect.annotateLogs(lockAnnotations(target))
          )
        }
        const lost = lostAtRelease(pinned)
        return Effect.zipRight(
          Effect.flatMap(countLost, (first) =>
            first ? Effect.logWarning(lost.message).pipe(Effect.annotateLogs(lockAnnotations(target))) : Effect.void),
          Effect.fail(lost)
        )
      })
    }
    return Effect.flatMap(
      Effect.acquireRelease(take, (acquired) => Effect.ignore(releaseOf(acquired))),
      (acquired): Effect.Effect<A & Held, never, RedisService | Scope.Scope> => {
        const release = releaseOf(acquired)
        if (phase === "queue") return Effect.succeed({ ...acquired, lost: Effect.never, release })
        return Effect.flatMap(Deferred.make<never, LockLost>(), (lostSignal) =>
          keepAlive(definition, { ...target, phase, fence: acquired.fence }, start).pipe(
            // After the release, a renewal still in flight finds the hold gone: that is no loss.
            Effect.catchAll((lost) =>
              state.released ? Effect.void : Effect.zipRight(countLost, Deferred.fail(lostSignal, lost))
            ),
            Effect.asVoid,
            Effect.forkScoped,
            Effect.map((keeper) => {
              state.keeper = keeper
              return { ...acquired, lost: Deferred.await(lostSignal), release }
            })
          ))
      }
    )
  })

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
 * `handoff` as a scoped resource: the run lock is held (and its lease kept) until the scope closes.
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
 * What a perform is told about the lock it runs under.
 *
 * @since 0.1.0
 * @category models
 */
export interface Running {
  readonly digest: string
  readonly jid: string
  /**
   * The run lock's fencing token (`Acquired.fence`); undefined for lock types that hold no run lock. Pass it to the
   * stores the job writes to, and have them refuse a write whose token is lower than one they have seen.
   */
  readonly fence: number | undefined
}

/**
 * Runs `self` holding the lock: released when `self` ends, fails, or is interrupted. If the run lock is lost
 * meanwhile, `self` is interrupted and the result is a `LockLost` failure; a release that finds the run lock already
 * gone is a `LockLost` failure too.
 *
 * @since 0.1.0
 * @category resources
 */
export const withLock = (definition: Definition, target: Target) =>
<A, E, R>(
  self: Effect.Effect<A, E, R> | ((running: Running) => Effect.Effect<A, E, R>)
): Effect.Effect<A, E | LockConflict | LockLost | RedisError, R | RedisService> =>
  Effect.scoped(Effect.flatMap(acquire(definition, target), (held) => runHolding(held, self)))

/**
 * Runs a perform under a held lock: racing the lease (losing it interrupts the perform with `LockLost`), then
 * releasing it, so a release that finds the hold gone is a `LockLost` too.
 *
 * @since 0.1.0
 * @category resources
 */
export const runHolding = <A, E, R>(
  held: Held,
  self: Effect.Effect<A, E, R> | ((running: Running) => Effect.Effect<A, E, R>)
): Effect.Effect<A, E | LockLost, R> => {
  const running: Running = { digest: held.digest, jid: held.jid, fence: held.phase === "run" ? held.fence : undefined }
  const perform = Effect.isEffect(self) ? self : Effect.suspend(() => self(running))
  return Effect.zipLeft(held.phase === "run" ? Effect.raceFirst(perform, held.lost) : perform, held.release)
}
