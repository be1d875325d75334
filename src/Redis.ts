/**
 * `RedisService`: the lock store. One typed method per Lua script, each a single round trip; a memory store
 * with the same semantics for users' own tests and for differential tests. This module is the public face: the
 * Tag, the models and the layers; the stores themselves live in `internal/`.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as IORedisStore from "./internal/ioredis.js"
import * as Keeper from "./internal/leaseKeeper.js"
import * as Memory from "./internal/memory.js"
import * as RedisOptions from "./internal/redisOptions.js"
import { type Holder, RedisError, type Store } from "./internal/models.js"

// The shared models live apart so that the stores need not import this module back.
export { keysOf, RedisError } from "./internal/models.js"
export type {
  Fetched,
  HandoffResult,
  Holder,
  HolderRequest,
  LockKey,
  LockResult,
  ReapCandidate,
  ReapRequest,
  ReapResult,
  Removal,
  Renewal,
  ScanPage,
  Store
} from "./internal/models.js"

/**
 * @since 0.1.0
 * @category tags
 */
export class RedisService extends Context.Tag("effect-unique-jobs/RedisService")<RedisService, Store>() {}

/**
 * Connection options: `url`, the per-call `timeout`, auto-pipelining, and any other ioredis option.
 *
 * @since 0.1.0
 * @category models
 */
export type Options = IORedisStore.Options

/**
 * The client surface the store needs: ioredis' `Redis` (and later `Cluster`).
 *
 * @since 0.1.0
 * @category models
 */
export type Client = IORedisStore.Client

/**
 * Reads a holder entry as the scripts do; one in any other shape is reported as `foreign` (it counts as gone).
 *
 * @since 0.1.0
 * @category utils
 */
export const parseHolder: (jid: string, raw: string) => Holder = IORedisStore.parseHolder

/**
 * A store over a connected client that the caller owns. A `timeout` that is not a positive duration fails with a
 * `RedisError` of operation `"options"`, as `make`'s options do.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeFromClient = (
  client: Client,
  options?: { readonly timeout?: Duration.DurationInput | undefined }
): Effect.Effect<Store, RedisError> =>
  Effect.flatMap(
    decodeOptions(options === undefined ? undefined : { timeout: options.timeout }),
    () => IORedisStore.makeFromClient(client, options)
  )

/**
 * A store that owns its ioredis connection: connected (and checked) when built, closed with its scope. Options that
 * do not check (`timeout: 0`, `{ host }` beside `url` instead of under `client`, a number) fail before any
 * connection with a `RedisError` of operation `"options"` whose reason names each field and what to write (its
 * cause is the `InvalidLockOptions`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options?: Options): Effect.Effect<Store, RedisError, Scope.Scope> =>
  Effect.flatMap(decodeOptions(options), IORedisStore.make)

const decodeOptions = (options: unknown): Effect.Effect<Options, RedisError> =>
  Effect.mapError(RedisOptions.decode(options), (invalid) =>
    new RedisError({
      operation: "options",
      reason: invalid.issues.map((issue) => `${issue.field}: ${issue.reason}`).join("; "),
      cause: invalid
    }))

/**
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<RedisService, RedisError> =>
  Layer.scoped(RedisService, make(options))

// A missing secret reads `Missing data at REDIS_URL: "<redacted>"` (Config.redacted hides every message of its value).
// The url is the only secret among the options, so such a leaf is the url: say what to set.
const explainMissing = (error: ConfigError.ConfigError): ConfigError.ConfigError => {
  switch (error._op) {
    case "And":
      return ConfigError.And(explainMissing(error.left), explainMissing(error.right))
    case "Or":
      return ConfigError.Or(explainMissing(error.left), explainMissing(error.right))
    case "MissingData": {
      if (error.message !== "<redacted>") return error
      const name = error.path.join(".")
      return ConfigError.MissingData(
        error.path,
        `${name} is not set: set it to redis://host:port[/db] (or pass Redis.layer({ url }))`
      )
    }
    default:
      return error
  }
}

/**
 * Reads the options from `Config`; by default the URL from `REDIS_URL`, kept `Redacted`. A missing `REDIS_URL` fails
 * with a `ConfigError` (tag `"ConfigError"`) that says what to set; a Redis that cannot be used, with `RedisError`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Config.Wrap<Options> = { url: Config.redacted("REDIS_URL") }
): Layer.Layer<RedisService, RedisError | ConfigError.ConfigError> =>
  Layer.scoped(RedisService, Effect.flatMap(Effect.mapError(Config.unwrap(config), explainMissing), make))

/**
 * A store over a client the caller owns and closes.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerFromClient = (
  client: Client,
  options?: { readonly timeout?: Duration.DurationInput | undefined }
): Layer.Layer<RedisService, RedisError> =>
  Layer.scoped(RedisService, Effect.flatMap(makeFromClient(client, options), Keeper.scoped))

/**
 * An in-process store with the scripts' semantics, on Effect's `Clock` (so `TestClock` drives expiry).
 * For users' own tests and for differential tests; it is not shared between processes. Each build of the layer
 * is a new, empty store: provide it once to everything that must see the same locks.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerMemory: Layer.Layer<RedisService> = Layer.scoped(
  RedisService,
  Effect.flatMap(Effect.sync(() => Memory.make()), Keeper.scoped)
)
