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
import * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
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
export class Defaults extends Context.Reference<Defaults>()("effect-unique-jobs/Defaults", {
  defaultValue: () => builtIn
}) {}

const InputSchema = Schema.Struct({
  enabled: Schema.optionalWith(Schema.Boolean, { default: () => builtIn.enabled }),
  lockTtl: Schema.optionalWith(Options.PositiveDuration, { as: "Option" }),
  lockLease: Schema.optionalWith(Options.LeaseDuration, { default: () => builtIn.lockLease }),
  lockPrefix: Schema.optionalWith(Options.PrefixSchema, { default: () => builtIn.lockPrefix }),
  digestAlgorithm: Schema.optionalWith(Schema.Literal("legacy", "modern"), { default: () => builtIn.digestAlgorithm }),
  lockInfo: Schema.optionalWith(Schema.Boolean, { default: () => builtIn.lockInfo }),
  lockEvents: Schema.optionalWith(Schema.Boolean, { default: () => builtIn.lockEvents }),
  onConflict: Schema.optionalWith(Strategy.OnConflictSchema, { default: () => builtIn.onConflict }),
  rescheduleDelay: Schema.optionalWith(Options.PositiveDuration, { default: () => builtIn.rescheduleDelay })
})

const decodeInput = Schema.decodeUnknownEither(InputSchema, { errors: "all", onExcessProperty: "error" })

/**
 * Checks the defaults: fails with `InvalidLockOptions` naming each offending field.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (input: Input): Either.Either<Settings, Options.InvalidLockOptions> => {
  // Schema's own words for a non-object ("Expected Struct (Encoded side)") say nothing a user can act on.
  if (!Options.isRecord(input)) {
    const reason = `expected an object of defaults like { lockTtl: "1 hour" }, got ${Options.describeValue(input)}`
    return Either.left(Options.invalidOptions([{ field: "defaults", reason }]))
  }
  return Either.mapLeft(decodeInput(input), (error) => Options.invalidOptions(Options.formatIssues(error)))
}

/**
 * Provides the defaults to everything built on it.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (input: Input): Layer.Layer<Defaults, Options.InvalidLockOptions> =>
  Layer.unwrapEffect(Effect.map(make(input), (settings) => Layer.succeed(Defaults, settings)))

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
  enabled: Config.option(Config.boolean(variables.enabled)),
  lockTtl: Config.option(Config.string(variables.lockTtl)),
  lockLease: Config.option(Config.string(variables.lockLease)),
  lockPrefix: Config.option(Config.string(variables.lockPrefix)),
  digestAlgorithm: Config.option(Config.literal("legacy", "modern")(variables.digestAlgorithm)),
  lockInfo: Config.option(Config.boolean(variables.lockInfo)),
  lockEvents: Config.option(Config.boolean(variables.lockEvents)),
  onConflict: Config.option(Config.string(variables.onConflict)),
  rescheduleDelay: Config.option(Config.string(variables.rescheduleDelay))
}

/**
 * The defaults read from the `UNIQUE_JOBS_*` variables, as `layerConfig` provides them (for a caller that checks
 * them once, up front: `UniqueQueue.make`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromConfig: Effect.Effect<Settings, ConfigError.ConfigError> = Effect.suspend(() =>
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
    return Either.match(make(input as Input), {
      onLeft: (error) =>
        // One error per bad variable, joined pairwise: `And` takes exactly two.
        Effect.fail(
          error.issues.map((issue): ConfigError.ConfigError => {
            const name = variables[issue.field.split(/[.[]/)[0] as keyof typeof variables] ?? issue.field
            return ConfigError.InvalidData([name], issue.reason)
          }).reduce((left, right) => ConfigError.And(left, right))
        ),
      onRight: Effect.succeed
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
export const layerConfig = (): Layer.Layer<Defaults, ConfigError.ConfigError> => Layer.effect(Defaults, fromConfig)

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
