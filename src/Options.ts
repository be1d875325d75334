/**
 * A worker's uniqueness options: what users write (`Options`), the Schema that checks it once, where the worker is
 * defined, and what it decodes to (`Definition`). An option the lock type never reads is refused, not ignored.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Digest from "./Digest.js"
import * as LockType from "./LockType.js"
import * as Strategy from "./Strategy.js"

/**
 * What `afterUnlock` is told.
 *
 * @since 0.1.0
 * @category models
 */
export interface Unlocked {
  readonly digest: string
  readonly jid: string
  readonly lockType: LockType.LockType
  readonly phase: LockType.Phase
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
  readonly lock: LockType.Name
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
  readonly lock: LockType.LockType
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
  /** The options the worker left out: the global defaults (`Defaults`) fill them in where the job runs. */
  readonly defaulted: ReadonlyArray<Defaultable>
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
 * One `InvalidLockOptions` from a list of issues (the first names `field`), each field under `under` when given:
 * `redis.timeout`, `jobs.rebuild.lockTtl`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const invalidOptions = (
  issues: ReadonlyArray<{ readonly field: string; readonly reason: string }>,
  under?: string | undefined
): InvalidLockOptions => {
  const named = under === undefined ? issues : issues.map((issue) => ({
    field: issue.field === "options" ? under : `${under}.${issue.field}`,
    reason: issue.reason
  }))
  const first = named[0] ?? { field: under ?? "options", reason: "invalid" }
  return new InvalidLockOptions({ field: first.field, reason: first.reason, issues: named })
}

/** What a value is, for a message: `number 5`, `null`, `an array`. @internal */
export const describeValue = (value: unknown): string =>
  Array.isArray(value)
    ? "an array"
    : value === null
    ? "null"
    : typeof value === "string"
    ? `the string ${JSON.stringify(value)}`
    : typeof value === "object" || typeof value === "function"
    ? `a ${typeof value}`
    : `${typeof value} ${String(value)}`

/** A plain object (not null, not an array). @internal */
export const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

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
const durationFrom = (minMs: number, expected: string, maxMs: number = maxDurationMs) =>
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
      if (!(ms <= maxMs)) {
        const got = ms === Infinity ? "Infinity" : `${ms} ms`
        const most = maxMs === maxDurationMs ? "1000 years" : Duration.format(Duration.millis(maxMs))
        return fail(`expected at most ${most} (${maxMs} ms), got ${got}`)
      }
      const whole = wholeMillis(decoded.value)
      if (whole === undefined) return fail(`expected whole milliseconds, got ${ms} ms (use ${Math.round(ms)})`)
      return whole < minMs ? fail(`expected ${expected}, got ${whole} ms`) : ParseResult.succeed(Duration.millis(whole))
    },
    encode: ParseResult.succeed
  })

/** @internal */
export const PositiveDuration = durationFrom(1, "a positive duration")
const NonNegativeDuration = durationFrom(0, "a duration >= 0")
/**
 * The longest timer Node keeps, in milliseconds (2^31 - 1, about 24.8 days): a longer one fires at once.
 *
 * @since 0.1.0
 * @category constants
 */
export const maxTimerMs = 2_147_483_647
/** A duration that becomes a Node timer (a call's timeout): positive and at most `maxTimerMs`. @internal */
export const TimerDuration = durationFrom(1, "a positive duration", maxTimerMs)
/** @internal */
export const LeaseDuration = durationFrom(
  minLeaseMs,
  `at least ${minLeaseMs} ms (the lease is renewed every lease/3; a shorter one runs out before a renewal keeps it)`
)

const FunctionSchema = <F>(what: string) =>
  Schema.declare((u: unknown): u is F => typeof u === "function", {
    message: (issue) => `expected a function (${what}), got ${typeof issue.actual}`
  })

const lockNames = Object.keys(LockType.names) as Array<LockType.Name>

const LockTypeSchema = Schema.transformOrFail(Schema.Unknown, Schema.Literal(...new Set(Object.values(LockType.names))), {
  strict: true,
  decode: (input, _, ast) =>
    typeof input === "string" && Object.hasOwn(LockType.names, input)
      ? ParseResult.succeed(LockType.names[input as LockType.Name])
      : ParseResult.fail(
        new ParseResult.Type(ast, input, `unknown lock type ${JSON.stringify(input)}; use one of ${lockNames.join(", ")}`)
      ),
  encode: ParseResult.succeed
})

// A prefix ends up inside key names that are parsed and matched with patterns: keep it to plain characters, and
// clear of the suffixes the data model uses.
/** @internal */
export const PrefixSchema = Schema.String.pipe(
  Schema.filter((prefix) =>
    (/^[A-Za-z0-9_.\-:]+$/.test(prefix) && !prefix.endsWith(":") && !/:(LOCKED|RUN|digests)/.test(prefix)) ||
    "use letters, digits, '_', '-', '.' and inner ':' only (no spaces, '*', braces, or :LOCKED, :RUN, :digests)"
  )
)

/** @internal */
export const defaultLease = Duration.seconds(30)
/** @internal */
export const defaultRescheduleDelay = Duration.seconds(5)
/** @internal */
export const defaultOnConflict: Strategy.Resolved = { client: "log", server: "log" }

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
  readonly lock: LockType.LockType
  readonly lockTtl: Option.Option<Duration.Duration>
  readonly lockLease: Option.Option<Duration.Duration>
  readonly onConflict: Option.Option<OnConflictGiven>
  readonly rescheduleDelay: Option.Option<Duration.Duration>
}): Array<Schema.FilterIssue> => {
  const issues: Array<Schema.FilterIssue> = []
  const record = LockType.records[o.lock]
  const { queue, run } = LockType.phases(o.lock)
  const { name, resolved } = Option.getOrElse(o.onConflict, () => ({ resolved: defaultOnConflict, name: undefined }))
  if (record.options.lockTtl === "never" && Option.isSome(o.lockTtl)) {
    issues.push({
      path: ["lockTtl"],
      message: `${o.lock} takes no lock at enqueue, so lockTtl would never apply; its run lock lives by lockLease ` +
        "(drop lockTtl, or use until_and_while_executing to lock at enqueue too)"
    })
  }
  if (record.options.lockLease === "never" && Option.isSome(o.lockLease)) {
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
  const fixed = record.options.serverStrategy
  if (fixed !== undefined && resolved.server !== fixed && resolved.server !== "log") {
    issues.push({
      path: name === undefined ? ["onConflict", "server"] : ["onConflict"],
      message: `${o.lock} always uses ${fixed} on the server; drop ${Strategy.nameOf(resolved.server)}${
        o.lock === "while_executing_reject" ? " or use while_executing" : ""
      }`
    })
  }
  // A strategy function may read rescheduleDelay; a built-in other than reschedule never does.
  const server = fixed ?? resolved.server
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
    LockType.records[o.lock].options.lockTtl === "required" && Option.isNone(o.lockTtl)
      ? { path: ["lockTtl"], message: `${o.lock} needs a lockTtl of its own: nothing else ever releases it` }
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
/** @internal */
export const formatIssues = (error: ParseResult.ParseError): Array<{ readonly field: string; readonly reason: string }> => {
  const byField = new Map<string, string>()
  for (const issue of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const field = fieldName(issue.path)
    if (!byField.has(field) && !issue.message.startsWith("Expected undefined")) byField.set(field, issue.message)
  }
  return Array.from(byField, ([field, reason]) => ({ field, reason }))
}

const decodeOptions = Schema.decodeUnknownEither(OptionsSchema, { errors: "all", onExcessProperty: "error" })

/**
 * The options a worker may leave to the global defaults (`Defaults`).
 *
 * @since 0.1.0
 * @category models
 */
export type Defaultable =
  | "lockTtl"
  | "lockLease"
  | "lockPrefix"
  | "digestAlgorithm"
  | "lockInfo"
  | "onConflict"
  | "rescheduleDelay"

/**
 * Every option a worker may leave to the global defaults.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultable: ReadonlyArray<Defaultable> = [
  "lockTtl",
  "lockLease",
  "lockPrefix",
  "digestAlgorithm",
  "lockInfo",
  "onConflict",
  "rescheduleDelay"
]

/**
 * A side's strategy where the type fixes one (`while_executing_reject` always rejects).
 *
 * @since 0.1.0
 * @category utils
 */
export const fixStrategies = (lock: LockType.LockType, onConflict: Strategy.Resolved): Strategy.Resolved => {
  const fixed = LockType.records[lock].options.serverStrategy
  return fixed === undefined ? onConflict : { ...onConflict, server: fixed }
}

/**
 * Which options apply to a lock type, from its record.
 *
 * @since 0.1.0
 * @category utils
 */
export const applicable = (lock: LockType.LockType): LockType.Record["options"] => LockType.records[lock].options

const fromDecoded = (options: Options, decoded: typeof OptionsSchema.Type): Definition => ({
  ...decoded,
  lockLease: Option.getOrElse(decoded.lockLease, () => defaultLease),
  rescheduleDelay: Option.getOrElse(decoded.rescheduleDelay, () => defaultRescheduleDelay),
  lockArgs: decoded.lockArgs ?? undefined,
  afterUnlock: decoded.afterUnlock ?? undefined,
  onConflict: fixStrategies(
    decoded.lock,
    Option.match(decoded.onConflict, { onNone: () => defaultOnConflict, onSome: (given) => given.resolved })
  ),
  // `until_expired`'s lockTtl is its own (required): a default never stands in for it.
  defaulted: defaultable.filter((field) => options[field] === undefined)
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
    onRight: (decoded) => fromDecoded(options, decoded)
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
 * A worker's options: the lock options, the worker's name and its default queue (`default`).
 *
 * @since 0.1.0
 * @category models
 */
export interface WorkerOptions extends Options {
  readonly worker: string
  readonly queue?: string | undefined
}

const shown = (u: unknown): string => {
  try {
    return JSON.stringify(u) ?? typeof u
  } catch {
    return typeof u
  }
}

// Both names go into every job and its digest: an empty one is refused where the worker is defined.
const NameSchema = (what: string) =>
  Schema.declare((u: unknown): u is string => typeof u === "string" && u !== "", {
    message: (issue) => `expected ${what}, a non-empty string, got ${shown(issue.actual)}`
  })

/**
 * The worker's name and queue, checked like the lock options.
 *
 * @since 0.1.0
 * @category schemas
 */
export const WorkerSchema = Schema.Struct({
  worker: NameSchema("the worker's name"),
  queue: Schema.optionalWith(NameSchema("the queue's name"), { default: () => "default" })
})

const decodeWorker = Schema.decodeUnknownEither(WorkerSchema, { errors: "all", onExcessProperty: "ignore" })

/**
 * Decodes a worker's options once: its name and queue and its lock options, every issue reported together.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeWorker = (
  options: WorkerOptions
): Either.Either<{ readonly worker: string; readonly queue: string; readonly definition: Definition }, InvalidLockOptions> => {
  const { queue, worker, ...lock } = options
  const names = decodeWorker({ worker, queue })
  const definition = decode(lock)
  if (Either.isRight(names) && Either.isRight(definition)) {
    return Either.right({ ...names.right, definition: definition.right })
  }
  const issues = [
    ...(Either.isLeft(names) ? formatIssues(names.left) : []),
    ...(Either.isLeft(definition) ? definition.left.issues : [])
  ]
  const first = issues[0] ?? { field: "options", reason: "invalid" }
  return Either.left(new InvalidLockOptions({ field: first.field, reason: first.reason, issues }))
}
