/**
 * The global defaults, as the gem's `configure` block: `lockTtl`, `lockLease`, `lockPrefix`, `digestAlgorithm`,
 * `lockInfo`, `lockEvents`, `onConflict` and `rescheduleDelay` for every worker that does not set them, and `enabled: false`,
 * which passes every job straight through (for users' own tests). A worker's own options always win.
 *
 * A worker's options are checked on their own where the worker is defined (`UniqueJob.make`): an option its lock
 * type never reads is refused there. The defaults are checked when their layer is built, and fill in, where the job
 * is enqueued or performed, only the options that apply to the worker's lock type (a default `lockTtl` never
 * reaches a type that locks only around perform; `until_expired` must name its own `lockTtl`).
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { Defaults, Redis } from "effect-unique-jobs"
 *
 * const UniqueJobsLive = Layer.mergeAll(
 *   Redis.layerConfig(),
 *   Defaults.layer({ lockPrefix: "billing", lockTtl: "1 hour", onConflict: "log" })
 * )
 * // or from UNIQUE_JOBS_LOCK_PREFIX, UNIQUE_JOBS_LOCK_TTL, …, UNIQUE_JOBS_ENABLED
 * const FromEnv = Defaults.layerConfig()
 * ```
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import * as Digest from "./Digest.js"
import * as Options from "./Options.js"
import * as Strategy from "./Strategy.js"

/**
 * The defaults as given: every field optional.
 *
 * @since 0.1.0
 * @category models
 */
export interface Input {
  /** false: the middleware passes every job straight through, with no lock and no Redis call. Default true. */
  readonly enabled?: boolean | undefined
  readonly lockTtl?: Duration.Input | undefined
  readonly lockLease?: Duration.Input | undefined
  readonly lockPrefix?: string | undefined
  readonly digestAlgorithm?: Digest.Algorithm | undefined
  readonly lockInfo?: boolean | undefined
  readonly lockEvents?: boolean | undefined
  readonly onConflict?: Strategy.OnConflict | undefined
  readonly rescheduleDelay?: Duration.Input | undefined
}

/**
 * The defaults, decoded.
 *
 * @since 0.1.0
 * @category models
 */
export interface Settings {
  readonly enabled: boolean
  readonly lockTtl: Option.Option<Duration.Duration>
  readonly lockLease: Duration.Duration
  readonly lockPrefix: string
  readonly digestAlgorithm: Digest.Algorithm
  readonly lockInfo: boolean
  readonly lockEvents: boolean
  readonly onConflict: Strategy.Resolved
  readonly rescheduleDelay: Duration.Duration
}

/**
 * The built-in defaults: what a worker gets when no `Defaults` layer is provided.
 *
 * @since 0.1.0
 * @category constants
 */
export const builtIn: Settings = {
  enabled: true,
  lockTtl: Option.none(),
  lockLease: Options.defaultLease,
  lockPrefix: Digest.defaultPrefix,
  digestAlgorithm: "legacy",
  lockInfo: false,
  lockEvents: false,
  onConflict: Options.defaultOnConflict,
  rescheduleDelay: Options.defaultRescheduleDelay
}

/**
 * The defaults in effect: the built-in ones unless a layer provides others.
 *
 * @since 0.1.0
 * @category tags
 */
export class Defaults extends Context.Reference<Settings>("effect-unique-jobs/Defaults", {
  defaultValue: () => builtIn
}) {}

const BooleanSchema = Options.guarded(
  (u: unknown): u is boolean => typeof u === "boolean",
  (u) => `expected true or false, got ${Options.describeValue(u)}`
)

const InputSchema = Schema.Struct({
  enabled: Options.withDefault(BooleanSchema, () => builtIn.enabled),
  lockTtl: Schema.OptionFromOptional(Options.PositiveDuration),
  lockLease: Options.withDefault(Options.LeaseDuration, () => builtIn.lockLease),
  lockPrefix: Options.withDefault(Options.PrefixSchema, () => builtIn.lockPrefix),
  digestAlgorithm: Options.withDefault(
    Options.guarded(
      (u: unknown): u is Digest.Algorithm => u === "legacy" || u === "modern",
      (u) => `expected "legacy" (MD5) or "modern" (SHA3-256), got ${Options.describeValue(u)}`
    ),
    () => builtIn.digestAlgorithm
  ),
  lockInfo: Options.withDefault(BooleanSchema, () => builtIn.lockInfo),
  lockEvents: Options.withDefault(BooleanSchema, () => builtIn.lockEvents),
  onConflict: Options.withDefault(Strategy.OnConflictSchema, () => builtIn.onConflict),
  rescheduleDelay: Options.withDefault(Options.PositiveDuration, () => builtIn.rescheduleDelay)
}).annotate({
  messageUnexpectedKey: "not a default: the defaults are enabled, lockTtl, lockLease, lockPrefix, digestAlgorithm, " +
    "lockInfo, lockEvents, onConflict and rescheduleDelay"
})

const decodeInput = Schema.decodeUnknownResult(InputSchema, { errors: "all", onExcessProperty: "error" })

/**
 * Checks the defaults: fails with `InvalidLockOptions` naming each offending field.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (input: Input): Result.Result<Settings, Options.InvalidLockOptions> => {
  // Schema's own words for a non-object ("Expected object") say nothing a user can act on.
  if (!Options.isRecord(input)) {
    const reason = `expected an object of defaults like { lockTtl: "1 hour" }, got ${Options.describeValue(input)}`
    return Result.fail(Options.invalidOptions([{ field: "defaults", reason }]))
  }
  return Result.mapError(decodeInput(input), (error) => Options.invalidOptions(Options.formatIssues(error)))
}

/**
 * Provides the defaults to everything built on it.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (input: Input): Layer.Layer<never, Options.InvalidLockOptions> =>
  Layer.effect(Defaults, Effect.fromResult(make(input)))

// Each default and the variable it is read from.
const variables = {
  enabled: "UNIQUE_JOBS_ENABLED",
  lockTtl: "UNIQUE_JOBS_LOCK_TTL",
  lockLease: "UNIQUE_JOBS_LOCK_LEASE",
  lockPrefix: "UNIQUE_JOBS_LOCK_PREFIX",
  digestAlgorithm: "UNIQUE_JOBS_DIGEST_ALGORITHM",
  lockInfo: "UNIQUE_JOBS_LOCK_INFO",
  lockEvents: "UNIQUE_JOBS_LOCK_EVENTS",
  onConflict: "UNIQUE_JOBS_ON_CONFLICT",
  rescheduleDelay: "UNIQUE_JOBS_RESCHEDULE_DELAY"
} as const

const env = {
  enabled: Config.option(Config.Boolean(variables.enabled)),
  lockTtl: Config.option(Config.String(variables.lockTtl)),
  lockLease: Config.option(Config.String(variables.lockLease)),
  lockPrefix: Config.option(Config.String(variables.lockPrefix)),
  digestAlgorithm: Config.option(Config.Literals(["legacy", "modern"], variables.digestAlgorithm)),
  lockInfo: Config.option(Config.Boolean(variables.lockInfo)),
  lockEvents: Config.option(Config.Boolean(variables.lockEvents)),
  onConflict: Config.option(Config.String(variables.onConflict)),
  rescheduleDelay: Config.option(Config.String(variables.rescheduleDelay))
}

/**
 * The defaults read from the `UNIQUE_JOBS_*` variables, as `layerConfig` provides them (for a caller that checks
 * them once, up front: `UniqueQueue.make`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromConfig: Effect.Effect<Settings, Config.ConfigError> = Effect.suspend(() =>
  Effect.flatMap(Config.all(env), (read) => {
    const input: Record<string, unknown> = {}
    for (const [key, value] of Object.entries(read) as Array<[string, Option.Option<unknown>]>) {
      if (Option.isSome(value)) {
        const raw = value.value
        // A duration in milliseconds may be written as a bare number; a negative or fractional one is read as a
        // number too, so the message names what was written ("got -5 ms", "use 2").
        input[key] = typeof raw === "string" && /^-?\d+(\.\d+)?$/.test(raw) ? Number(raw) : raw
      }
    }
    return Result.match(make(input as Input), {
      onFailure: (error) => {
        // One issue per bad variable, at the variable's name.
        const [first, ...rest] = error.issues.map((issue): SchemaIssue.Issue => {
          const name = variables[issue.field.split(/[.[]/)[0] as keyof typeof variables] ?? issue.field
          return new SchemaIssue.Pointer([name], new SchemaIssue.InvalidValue({ message: issue.reason }))
        })
        const issue = first === undefined
          ? new SchemaIssue.InvalidValue({ message: error.reason })
          : rest.length === 0
          ? first
          : new SchemaIssue.Composite(Schema.Unknown.ast, [first, ...rest])
        return Effect.fail(new Config.ConfigError(new Schema.SchemaError(issue)))
      },
      onSuccess: Effect.succeed
    })
  })
)

/**
 * Reads the defaults from `UNIQUE_JOBS_ENABLED`, `UNIQUE_JOBS_LOCK_TTL`, `UNIQUE_JOBS_LOCK_LEASE`,
 * `UNIQUE_JOBS_LOCK_PREFIX`, `UNIQUE_JOBS_DIGEST_ALGORITHM`, `UNIQUE_JOBS_LOCK_INFO`, `UNIQUE_JOBS_LOCK_EVENTS`, `UNIQUE_JOBS_ON_CONFLICT` (one
 * strategy name) and `UNIQUE_JOBS_RESCHEDULE_DELAY` (durations as `"30 seconds"` or milliseconds); any unset keeps its
 * built-in value. A value that does not check fails with a `ConfigError` naming the variable and the reason.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (): Layer.Layer<never, Config.ConfigError> => Layer.effect(Defaults, fromConfig)

// Cache per definition and settings: resolving costs nothing after the first job of a worker.
const resolvedCache = new WeakMap<Options.Definition, WeakMap<Settings, Options.Definition>>()

/**
 * A worker's definition with the defaults filled in for the options it left out, where they apply to its lock type.
 * The definition itself when there is nothing to fill in.
 *
 * @since 0.1.0
 * @category utils
 */
export const resolve = (definition: Options.Definition, settings: Settings): Options.Definition => {
  if (settings === builtIn || definition.defaulted.length === 0) return definition
  let bySettings = resolvedCache.get(definition)
  if (bySettings === undefined) {
    bySettings = new WeakMap()
    resolvedCache.set(definition, bySettings)
  }
  let resolved = bySettings.get(settings)
  if (resolved === undefined) {
    resolved = fill(definition, settings)
    bySettings.set(settings, resolved)
  }
  return resolved
}

const fill = (definition: Options.Definition, settings: Settings): Options.Definition => {
  const options = Options.applicable(definition.lock)
  const left = new Set(definition.defaulted)
  const take = <K extends Options.Defaultable>(field: K, applies: boolean): Partial<Options.Definition> =>
    left.has(field) && applies ? { [field]: settings[field] } : {}
  return {
    ...definition,
    ...take("lockTtl", options.lockTtl === "optional"),
    ...take("lockLease", options.lockLease === "optional"),
    ...take("lockPrefix", true),
    ...take("digestAlgorithm", true),
    ...take("lockInfo", true),
    ...take("lockEvents", true),
    ...take("rescheduleDelay", true),
    ...(left.has("onConflict") ? { onConflict: Options.fixStrategies(definition.lock, settings.onConflict, Option.isSome(definition.debounce)) } : {}),
    defaulted: []
  }
}
