/**
 * A worker's uniqueness options: what users write (`Options`), the Schema that checks it once, where the worker is
 * defined, and what it decodes to (`Definition`). An option the lock type never reads is refused, not ignored.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaGetter from "effect/SchemaGetter"
import * as SchemaIssue from "effect/SchemaIssue"
import * as SchemaParser from "effect/SchemaParser"
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
  readonly lockTtl?: Duration.Input | undefined
  /**
   * How long a job whose run lock is held waits for it (`while_executing`, `while_executing_reject`,
   * `until_and_while_executing`): it is woken by the holder's release (a Redis PUBLISH, never a poll) or when the
   * holder's lease ends (a crashed holder), takes the lock then and runs; a wait that ends without it goes to the
   * server strategy. Jobs of one process wait first come, first served; across processes they race. 0 (the default):
   * no wait. Also stored with `lockInfo`. An enqueue never waits.
   */
  readonly lockTimeout?: Duration.Input | undefined
  /**
   * Debounce the enqueues of one digest: the first runs `delay` after it is added; each later one within the window
   * takes the waiting job's place (its arguments) and pushes the run to `delay` after itself, never past `maxWait`
   * after the window's first enqueue. The window ends when its job starts. Types that lock at enqueue and let go when
   * the job runs or ends (`until_executing`, `until_executed`, `until_and_while_executing`); the client strategy is
   * `replace`.
   */
  readonly debounce?: DebounceOptions | undefined
  /** How many jobs may hold one digest at once. Default 1. */
  readonly lockLimit?: number | undefined
  /**
   * How long an execution lock outlives a worker that stopped renewing it (crash). Default 30 seconds, at least
   * `minLeaseMs`. Types that lock around perform.
   */
  readonly lockLease?: Duration.Input | undefined
  /** What a duplicate turns into, one name or `{ client, server }`. Default `log`. */
  readonly onConflict?: Strategy.OnConflict | undefined
  /** How long the `reschedule` strategy puts a duplicate execution off. Default 5 seconds. */
  readonly rescheduleDelay?: Duration.Input | undefined
  /** Selects the arguments that count for uniqueness. */
  readonly lockArgs?: ((args: ReadonlyArray<unknown>) => unknown) | undefined
  readonly uniqueAcrossQueues?: boolean | undefined
  readonly uniqueAcrossWorkers?: boolean | undefined
  /** Store worker, queue, arguments and options with each holder, for the admin UI. */
  readonly lockInfo?: boolean | undefined
  /**
   * Keep the digest's activity log (`<digest>:EVENTS`: taken, refused with the holder, released, lost, revoked,
   * reaped; the newest 100, refusals in a row counted in one, for 24 hours while the digest is held and 1 hour once it
   * is not), for the admin UI and the CLI. Written by the lock scripts in the call that
   * makes the event: no extra round trip. Default false.
   */
  readonly lockEvents?: boolean | undefined
  /** Key prefix. Default `uniquejobs`. */
  readonly lockPrefix?: string | undefined
  /** `legacy` (MD5, default) or `modern` (SHA3-256). */
  readonly digestAlgorithm?: Digest.Algorithm | undefined
  /** Runs once after each release; never for `until_expired`. Its failures are logged, not raised. */
  readonly afterUnlock?: ((unlocked: Unlocked) => Effect.Effect<unknown, unknown>) | undefined
}

/**
 * `debounce`, as the user writes it. Durations as the other options take them.
 *
 * @since 0.1.0
 * @category models
 */
export interface DebounceOptions {
  /** How long after the newest enqueue of the window the job runs. */
  readonly delay: Duration.Input
  /** The longest the window's first enqueue waits for its run, however many follow. Default: no bound. */
  readonly maxWait?: Duration.Input | undefined
}

/**
 * `debounce`, decoded.
 *
 * @since 0.1.0
 * @category models
 */
export interface Debounce {
  readonly delay: Duration.Duration
  readonly maxWait: Option.Option<Duration.Duration>
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
  readonly debounce: Option.Option<Debounce>
  readonly lockLimit: number
  readonly lockLease: Duration.Duration
  readonly onConflict: Strategy.Resolved
  readonly rescheduleDelay: Duration.Duration
  readonly lockArgs: ((args: ReadonlyArray<unknown>) => unknown) | undefined
  readonly uniqueAcrossQueues: boolean
  readonly uniqueAcrossWorkers: boolean
  readonly lockInfo: boolean
  readonly lockEvents: boolean
  readonly lockPrefix: string
  readonly digestAlgorithm: Digest.Algorithm
  readonly afterUnlock: ((unlocked: Unlocked) => Effect.Effect<unknown, unknown>) | undefined
  /** The options the worker left out: the global defaults (`Defaults`) fill them in where the job runs. */
  readonly defaulted: ReadonlyArray<Defaultable>
}

export {
  describeValue,
  formatIssues,
  InvalidLockOptions,
  invalidOptions,
  isRecord,
  LeaseDuration,
  maxDurationMs,
  maxTimerMs,
  minLeaseMs,
  PositiveDuration,
  TimerDuration,
  withDefault
} from "./options/Decoding.js"
import {
  describeValue,
  formatIssues,
  InvalidLockOptions,
  isRecord,
  LeaseDuration,
  NonNegativeDuration,
  PositiveDuration,
  withDefault
} from "./options/Decoding.js"

/**
 * A schema for values that `is` accepts, refusing any other with `message(value)`.
 *
 * @internal
 */
export const guarded = <T>(is: (u: unknown) => u is T, message: (u: unknown) => string): Schema.Codec<T, unknown> =>
  Schema.Unknown.pipe(Schema.decodeTo(Schema.declare(is), {
    decode: SchemaGetter.transformEffect((u: unknown) =>
      is(u) ? Effect.succeed(u) : Effect.fail(new SchemaIssue.InvalidValue({ message: message(u) }))
    ),
    encode: SchemaGetter.transform((t: T): unknown => t)
  }))

const BooleanSchema = guarded(
  (u: unknown): u is boolean => typeof u === "boolean",
  (u) => `expected true or false, got ${describeValue(u)}`
)

const FunctionSchema = <F>(what: string) =>
  guarded((u: unknown): u is F => typeof u === "function", (u) => `expected a function (${what}), got ${typeof u}`)

const lockNames = Object.keys(LockType.names) as Array<LockType.Name>

const LockTypeSchema = guarded(
  (u: unknown): u is LockType.Name => typeof u === "string" && Object.hasOwn(LockType.names, u),
  (u) => `unknown lock type ${JSON.stringify(u)}; use one of ${lockNames.join(", ")}`
).pipe(Schema.decodeTo(Schema.Literals([...new Set(Object.values(LockType.names))]), {
  decode: SchemaGetter.transform((name: LockType.Name) => LockType.names[name]),
  encode: SchemaGetter.transform((type: LockType.LockType): LockType.Name => type)
}))

// A prefix ends up inside key names that are parsed and matched with patterns: keep it to plain characters, and
// clear of the suffixes the data model uses.
/** @internal */
export const PrefixSchema = guarded(
  (u: unknown): u is string => typeof u === "string",
  (u) => `expected a key prefix, a string like "billing", got ${describeValue(u)}`
).check(
  Schema.makeFilter((prefix: string) =>
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

const decodeOnConflict = SchemaParser.decodeUnknownEffect(Strategy.OnConflictSchema)

// A single name is checked only on the sides a type has; an explicit side is checked as written.
const OnConflictGiven = Schema.Unknown.pipe(
  Schema.decodeTo(
    Schema.declare((u: unknown): u is OnConflictGiven => typeof u === "object" && u !== null),
    {
      decode: SchemaGetter.transformEffect((input: unknown, options) =>
        Effect.map(decodeOnConflict(input, options), (resolved): OnConflictGiven => ({
          resolved,
          name: typeof input === "string" ? input : undefined
        }))
      ),
      encode: SchemaGetter.transform((given: OnConflictGiven): unknown => given.resolved)
    }
  )
)

// An option the type never reads would be dropped without a word: refuse it, and say what to do instead.
const ignoredOptions = (o: {
  readonly lock: LockType.LockType
  readonly lockTtl: Option.Option<Duration.Duration>
  readonly lockLease: Option.Option<Duration.Duration>
  readonly onConflict: Option.Option<OnConflictGiven>
  readonly rescheduleDelay: Option.Option<Duration.Duration>
  readonly debounce: Option.Option<Debounce>
  readonly lockTimeout: Duration.Duration
}): Array<Schema.FilterIssue> => {
  const issues: Array<Schema.FilterIssue> = []
  const record = LockType.records[o.lock]
  const { queue, run } = LockType.phases(o.lock)
  const { name, resolved } = Option.getOrElse(o.onConflict, () => ({ resolved: defaultOnConflict, name: undefined }))
  if (record.options.lockTtl === "never" && Option.isSome(o.lockTtl)) {
    issues.push({
      path: ["lockTtl"],
      issue: `${o.lock} takes no lock at enqueue, so lockTtl would never apply; its run lock lives by lockLease ` +
        "(drop lockTtl, or use until_and_while_executing to lock at enqueue too)"
    })
  }
  if (record.options.lockLease === "never" && Option.isSome(o.lockLease)) {
    issues.push({
      path: ["lockLease"],
      issue: `${o.lock} takes no lock around perform, so lockLease would never apply; its lock is bounded by ` +
        "lockTtl (drop lockLease, or use until_and_while_executing to lock around perform too)"
    })
  }
  if (!queue && (name === undefined ? resolved.client !== "log" : !Strategy.serverNames.includes(name as never))) {
    issues.push({
      path: name === undefined ? ["onConflict", "client"] : ["onConflict"],
      issue: `${o.lock} takes no lock at enqueue, so ${
        name === undefined ? `a client strategy (${Strategy.nameOf(resolved.client)})` : `"${name}" (client only)`
      } would never apply; use a server strategy (${Strategy.serverNames.join(", ")}) or a type that locks at enqueue`
    })
  }
  if (!run && (name === undefined ? resolved.server !== "log" : !Strategy.clientNames.includes(name as never))) {
    issues.push({
      path: name === undefined ? ["onConflict", "server"] : ["onConflict"],
      issue: `${o.lock} takes no lock around perform, so ${
        name === undefined ? `a server strategy (${Strategy.nameOf(resolved.server)})` : `"${name}" (server only)`
      } would never apply; use a client strategy (${Strategy.clientNames.join(", ")}) or until_and_while_executing`
    })
  }
  const fixed = record.options.serverStrategy
  if (fixed !== undefined && resolved.server !== fixed && resolved.server !== "log") {
    issues.push({
      path: name === undefined ? ["onConflict", "server"] : ["onConflict"],
      issue: `${o.lock} always uses ${fixed} on the server; drop ${Strategy.nameOf(resolved.server)}${
        o.lock === "while_executing_reject" ? " or use while_executing" : ""
      }`
    })
  }
  // A strategy function may read rescheduleDelay; a built-in other than reschedule never does.
  const server = fixed ?? resolved.server
  if (Option.isSome(o.rescheduleDelay) && typeof server === "string" && server !== "reschedule") {
    issues.push({
      path: ["rescheduleDelay"],
      issue: run
        ? `only the reschedule strategy reads rescheduleDelay, and the server strategy here is ${server} ` +
          `(drop rescheduleDelay, or set onConflict: { server: "reschedule" })`
        : `${o.lock} takes no lock around perform, so nothing is rescheduled (drop rescheduleDelay)`
    })
  }
  if (Option.isSome(o.debounce)) issues.push(...debounceIssues(o.lock, o.debounce.value, resolved.client))
  // A follow-up that waits for the run lock is running in the queue: it keeps its place and cannot be replaced, so
  // the newer enqueue that replace (or debounce) would put there is lost. Found by an outsider probe.
  if (
    o.lock === "until_and_while_executing" && Duration.toMillis(o.lockTimeout) > 0 &&
    (resolved.client === "replace" || Option.isSome(o.debounce))
  ) {
    issues.push({
      path: ["lockTimeout"],
      issue: `a job of until_and_while_executing that waits for the run lock (lockTimeout) keeps its queue lock while ` +
        `it runs in the queue, so ${Option.isSome(o.debounce) ? "debounce" : "the replace strategy"} could not put a ` +
        `newer enqueue in its place and that enqueue would be lost; drop lockTimeout (onConflict: { server: ` +
        `"reschedule" } runs the follow-up once the active job ends)`
    })
  }
  return issues
}

// Debounce moves a waiting job: the type must hold a queue lock while the job waits and let it go once it runs (or
// ends), and a later enqueue must take the waiting one's place.
const debounceTypes: ReadonlyArray<LockType.LockType> = ["until_executing", "until_executed", "until_and_while_executing"]

const debounceIssues = (
  lock: LockType.LockType,
  debounce: Debounce,
  client: Strategy.Resolved["client"]
): Array<Schema.FilterIssue> => {
  const issues: Array<Schema.FilterIssue> = []
  if (!debounceTypes.includes(lock)) {
    issues.push({
      path: ["debounce"],
      issue: LockType.phases(lock).queue
        ? `${lock} keeps its lock after the job ran, so a debounce window would never end; use ${debounceTypes.join(", ")}`
        : `${lock} takes no lock at enqueue, so nothing waits to be debounced; use ${debounceTypes.join(", ")}`
    })
  }
  if (Option.isSome(debounce.maxWait) && Duration.isLessThan(debounce.maxWait.value, debounce.delay)) {
    issues.push({
      path: ["debounce", "maxWait"],
      issue: `maxWait (${Duration.toMillis(debounce.maxWait.value)} ms) is shorter than delay (${
        Duration.toMillis(debounce.delay)
      } ms): every run would wait maxWait; make maxWait at least delay, or drop delay to it`
    })
  }
  if (client !== "log" && client !== "replace") {
    issues.push({
      path: ["onConflict", "client"],
      issue: `debounce replaces the waiting job with each later enqueue, so the client strategy is replace, not ${
        Strategy.nameOf(client)
      } (leave the client strategy out)`
    })
  }
  return issues
}

const DebounceFields = Schema.Struct({
  delay: PositiveDuration.annotateKey({
    messageMissingKey: "missing: how long after the newest enqueue the job runs, like \"5 seconds\""
  }),
  maxWait: Schema.OptionFromOptional(PositiveDuration)
}).annotate({ messageUnexpectedKey: "not a debounce option: debounce takes delay and maxWait" })

const DebounceSchema = guarded(
  isRecord,
  (u) => `expected { delay, maxWait? }, like { delay: "5 seconds" }, got ${describeValue(u)}`
).pipe(Schema.decodeTo(DebounceFields, {
  decode: SchemaGetter.passthrough({ strict: false }),
  encode: SchemaGetter.passthrough({ strict: false })
}))

// Each option's schema; a key not among them is refused, listing them.
const optionFields = {
  lock: LockTypeSchema.annotateKey({
    messageMissingKey: `missing: name a lock type (${[...new Set(Object.values(LockType.names))].join(", ")})`
  }),
  lockTtl: Schema.OptionFromOptional(PositiveDuration),
  lockTimeout: withDefault(NonNegativeDuration, () => Duration.zero),
  debounce: Schema.OptionFromOptional(DebounceSchema),
  lockLimit: withDefault(
    Schema.Unknown.pipe(Schema.decodeTo(Schema.Number, {
      decode: SchemaGetter.transformEffect((n: unknown) =>
        typeof n === "number" && Number.isSafeInteger(n) && n >= 1
          ? Effect.succeed(n)
          : Effect.fail(new SchemaIssue.InvalidValue({ message: `expected a whole number >= 1, got ${describeValue(n)}` }))
      ),
      encode: SchemaGetter.transform((n: number): unknown => n)
    })),
    () => 1
  ),
  // Options, not defaults, where a type refuses an option it never reads: the check must see what was given.
  lockLease: Schema.OptionFromOptional(LeaseDuration),
  onConflict: Schema.OptionFromOptional(OnConflictGiven),
  rescheduleDelay: Schema.OptionFromOptional(PositiveDuration),
  // `undefined` reads as absent, as the Options type says (`lockArgs: cond ? f : undefined`).
  lockArgs: Schema.optional(FunctionSchema<(args: ReadonlyArray<unknown>) => unknown>("lockArgs")),
  uniqueAcrossQueues: withDefault(BooleanSchema, () => false),
  uniqueAcrossWorkers: withDefault(BooleanSchema, () => false),
  lockInfo: withDefault(BooleanSchema, () => false),
  lockEvents: withDefault(BooleanSchema, () => false),
  lockPrefix: withDefault(PrefixSchema, () => Digest.defaultPrefix),
  digestAlgorithm: withDefault(
    guarded(
      (u: unknown): u is Digest.Algorithm => u === "legacy" || u === "modern",
      (u) => `expected "legacy" (MD5) or "modern" (SHA3-256), got ${describeValue(u)}`
    ),
    (): Digest.Algorithm => "legacy"
  ),
  afterUnlock: Schema.optional(FunctionSchema<(unlocked: Unlocked) => Effect.Effect<unknown, unknown>>("afterUnlock"))
}

/**
 * The options Schema: decodes and checks user input, leaving the options not given as `None` (an option a lock
 * type never reads is refused only when given). `make` turns the result into a `Definition`.
 *
 * @since 0.1.0
 * @category schemas
 */
export const OptionsSchema = Schema.Struct(optionFields).annotate({
  messageUnexpectedKey: `not a lock option: check its spelling (the options are ${Object.keys(optionFields).join(", ")})`
}).check(
  Schema.makeFilter((o) => [
    ...(LockType.records[o.lock].options.lockTtl === "required" && Option.isNone(o.lockTtl)
      ? [{ path: ["lockTtl"], issue: `${o.lock} needs a lockTtl of its own: nothing else ever releases it` }]
      : []),
    ...ignoredOptions(o)
  ])
)

const decodeOptions = Schema.decodeUnknownResult(OptionsSchema, { errors: "all", onExcessProperty: "error" })

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
  | "lockEvents"
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
  "lockEvents",
  "onConflict",
  "rescheduleDelay"
]

/**
 * A side's strategy where the type fixes one (`while_executing_reject` always rejects).
 *
 * @since 0.1.0
 * @category utils
 */
export const fixStrategies = (
  lock: LockType.LockType,
  onConflict: Strategy.Resolved,
  debounced = false
): Strategy.Resolved => {
  const fixed = LockType.records[lock].options.serverStrategy
  const client = debounced ? "replace" : onConflict.client
  return { client, server: fixed ?? onConflict.server }
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
    Option.match(decoded.onConflict, { onNone: () => defaultOnConflict, onSome: (given) => given.resolved }),
    Option.isSome(decoded.debounce)
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
export const make = (options: Options): Effect.Effect<Definition, InvalidLockOptions> =>
  Effect.fromResult(decode(options))

const decode = (options: Options): Result.Result<Definition, InvalidLockOptions> =>
  Result.mapBoth(decodeOptions(options), {
    onFailure: (error) => {
      const issues = formatIssues(error)
      const first = issues[0] ?? { field: "options", reason: "invalid" }
      return new InvalidLockOptions({ field: first.field, reason: first.reason, issues })
    },
    onSuccess: (decoded) => fromDecoded(options, decoded)
  })

/**
 * `make` for module top level: throws the `InvalidLockOptions` at definition time.
 *
 * @since 0.1.0
 * @category constructors
 */
export const unsafeMake = (options: Options): Definition =>
  Result.getOrThrowWith(decode(options), (error) => error)

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
  guarded(
    (u: unknown): u is string => typeof u === "string" && u !== "",
    (u) => `expected ${what}, a non-empty string, got ${shown(u)}`
  )

/**
 * The worker's name and queue, checked like the lock options.
 *
 * @since 0.1.0
 * @category schemas
 */
export const WorkerSchema = Schema.Struct({
  worker: NameSchema("the worker's name"),
  queue: withDefault(NameSchema("the queue's name"), () => "default")
})

const decodeWorker = Schema.decodeUnknownResult(WorkerSchema, { errors: "all", onExcessProperty: "ignore" })

/**
 * Decodes a worker's options once: its name and queue and its lock options, every issue reported together.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeWorker = (
  options: WorkerOptions
): Result.Result<{ readonly worker: string; readonly queue: string; readonly definition: Definition }, InvalidLockOptions> => {
  const { queue, worker, ...lock } = options
  const names = decodeWorker({ worker, queue })
  const definition = decode(lock)
  if (Result.isSuccess(names) && Result.isSuccess(definition)) {
    return Result.succeed({ ...names.success, definition: definition.success })
  }
  const issues = [
    ...(Result.isFailure(names) ? formatIssues(names.failure) : []),
    ...(Result.isFailure(definition) ? definition.failure.issues : [])
  ]
  const first = issues[0] ?? { field: "options", reason: "invalid" }
  return Result.fail(new InvalidLockOptions({ field: first.field, reason: first.reason, issues }))
}
