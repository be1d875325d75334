/**
 * The pieces every option decoder shares: the `InvalidLockOptions` error, how a value and a field are named in a
 * message, and the duration schemas (whole milliseconds within range). Kept apart from `Options.ts` so the Redis,
 * BullMQ and reaper option checks use them without importing the lock options (and the strategies) back.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaGetter from "effect/SchemaGetter"
import * as SchemaIssue from "effect/SchemaIssue"

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
    : Duration.isDuration(input)
    ? Duration.format(input)
    : isRecord(input)
    ? JSON.stringify(input)
    : String(input)

// Exactly: a Duration keeps a fraction of a millisecond as nanoseconds, which a double cannot always carry.
const wholeMillis = (d: Duration.Duration): number | undefined =>
  d.value._tag === "Millis"
    ? (Number.isInteger(d.value.millis) ? d.value.millis : undefined)
    : d.value._tag === "Nanos" && d.value.nanos % 1_000_000n === 0n
    ? Number(d.value.nanos / 1_000_000n)
    : undefined

// The object form of `Duration.Input` (`{ seconds: 30 }`): only its own keys, each a number.
const durationObjectKeys = new Set([
  "weeks",
  "days",
  "hours",
  "minutes",
  "seconds",
  "milliseconds",
  "microseconds",
  "nanoseconds"
])

const isDurationInput = (input: unknown): input is Duration.Input => {
  if (Duration.isDuration(input)) return true
  if (typeof input === "number" || typeof input === "bigint" || typeof input === "string") return true
  if (Array.isArray(input)) return input.length === 2 && input.every((n) => typeof n === "number")
  if (!isRecord(input)) return false
  const keys = Object.keys(input)
  return keys.length > 0 &&
    keys.every((key) => durationObjectKeys.has(key) && (input[key] === undefined || typeof input[key] === "number"))
}

const decodeDurationInput = (input: unknown): Option.Option<Duration.Duration> =>
  isDurationInput(input) ? Duration.fromInput(input) : Option.none()

/**
 * Decodes a duration as the options take it: whole milliseconds from `minMs` to `maxMs`, or the reason it is
 * refused, naming what was written.
 *
 * @internal
 */
export const decodeDuration = (
  input: unknown,
  minMs: number,
  expected: string,
  maxMs: number = maxDurationMs
): Result.Result<Duration.Duration, string> => {
  const fail = Result.fail
  const decoded = decodeDurationInput(input)
  if (Option.isNone(decoded)) {
    return fail(`expected ${expected}: milliseconds, a string like "30 seconds", or a Duration`)
  }
  if (isNegative(input) || Duration.isNegative(decoded.value)) return fail(`expected ${expected}, got ${written(input)}`)
  // Duration keeps nanoseconds: a number with a finer fraction would be rounded into a whole millisecond.
  if (typeof input === "number" && !Number.isInteger(input) && Number.isFinite(input)) {
    return fail(`expected whole milliseconds, got ${input} ms (use ${Math.round(input)})`)
  }
  const ms = Duration.toMillis(decoded.value)
  if (!(ms <= maxMs)) {
    const got = ms === Infinity ? "Infinity" : `${ms} ms`
    const most = maxMs === maxDurationMs ? "1000 years" : Duration.format(Duration.millis(maxMs))
    return fail(`expected ${expected}, at most ${most} (${maxMs} ms), got ${got}`)
  }
  const whole = wholeMillis(decoded.value)
  if (whole === undefined) return fail(`expected whole milliseconds, got ${ms} ms (use ${Math.round(ms)})`)
  return whole < minMs ? fail(`expected ${expected}, got ${whole} ms`) : Result.succeed(Duration.millis(whole))
}

/**
 * A queue adapter's call timeout (`BullMQ`'s and `PersistedQueue`'s `timeout`): whole milliseconds from 1 ms to 1
 * hour, or the reason it is refused, naming what was written.
 *
 * @internal
 */
export const adapterTimeoutMs = (input: unknown): Result.Result<number, string> => {
  const decoded = typeof input === "number" && !Number.isFinite(input)
    ? Option.none()
    : Duration.fromInput(input as Duration.Input)
  const ms = Option.isSome(decoded) && !(typeof input === "number" && input < 0)
    ? Duration.toMillis(decoded.value)
    : Number.NaN
  return Number.isInteger(ms) && ms >= 1 && ms <= 3_600_000
    ? Result.succeed(ms)
    : Result.fail(
      `expected a duration from 1 ms to 1 hour, such as "5 seconds" (a number is milliseconds); got ${
        typeof input === "string" ? JSON.stringify(input) : String(input)
      }`
    )
}

// Every duration reaches a script as whole milliseconds within range (PEXPIRE refuses a fraction after the
// script's first write), so it decodes to exactly that or fails here.
/** A duration schema: whole milliseconds from `minMs` to `maxMs`, refused naming what was written otherwise. @internal */
export const durationFrom = (minMs: number, expected: string, maxMs: number = maxDurationMs) =>
  Schema.Unknown.pipe(
    Schema.decodeTo(Schema.Duration, {
      decode: SchemaGetter.transformEffect((input: unknown) => {
        const decoded = decodeDuration(input, minMs, expected, maxMs)
        return Result.isSuccess(decoded)
          ? Effect.succeed(decoded.success)
          : Effect.fail(new SchemaIssue.InvalidValue({ message: decoded.failure }))
      }),
      encode: SchemaGetter.transform((duration: Duration.Duration): unknown => duration)
    })
  )

/**
 * `self`, or `value()` where the option is missing or `undefined`.
 *
 * @internal
 */
export const withDefault = <S extends Schema.Constraint>(self: S, value: () => S["Type"]) =>
  Schema.withDecodingDefaultType<S>(Effect.sync(value))(self)

/** @internal */
export const PositiveDuration = durationFrom(1, "a positive duration")
/** @internal */
export const NonNegativeDuration = durationFrom(0, "a duration >= 0")
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

const fieldName = (path: ReadonlyArray<PropertyKey>): string =>
  path.length === 0
    ? "options"
    : path.map((key, i) =>
      typeof key === "string" && /^[A-Za-z_$][\w$]*$/.test(key)
        ? (i === 0 ? key : `.${key}`)
        : `[${JSON.stringify(String(key))}]`
    ).join("")

// One reason per field: an optional field is a union with undefined, whose "Expected undefined" adds nothing.
/**
 * Every issue of a failed decoding as `{ field, reason }`, the first reason per field.
 *
 * @internal
 */
export const formatIssues = (
  error: Schema.SchemaError | SchemaIssue.Issue
): Array<{ readonly field: string; readonly reason: string }> => {
  const byField = new Map<string, string>()
  const issue = Schema.isSchemaError(error) ? error.issue : error
  for (const { message, path } of formatter(issue).issues) {
    const field = fieldName((path ?? []).map((key) => typeof key === "object" ? key.key : key))
    if (!byField.has(field) && !message.startsWith("Expected undefined")) byField.set(field, message)
  }
  return Array.from(byField, ([field, reason]) => ({ field, reason }))
}

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()
