/**
 * `RedisService`: the lock store. One typed method per Lua script, each a single round trip; a memory store
 * with the same semantics for users' own tests and for differential tests. This module is the public face: the
 * service, the models and the layers; the stores themselves live in `store/`.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as PersistenceRedis from "effect/persistence/Redis"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import type * as Scope from "effect/Scope"
import type { LayoutMismatch } from "./Errors.js"
import * as EffectRedisStore from "./store/EffectRedis.js"
import * as IORedisStore from "./store/IORedis.js"
import * as Keeper from "./store/LeaseKeeper.js"
import * as Memory from "./store/Memory.js"
import * as RedisOptions from "./store/RedisOptions.js"
import type { InvalidLockOptions } from "./options/Decoding.js"
import { type Holder, RedisError, type Store } from "./store/Store.js"

// The shared models live apart so that the stores need not import this module back.
export { eventLog, holdersChanged, keysOf, RedisError } from "./store/Store.js"
export type {
  Fetched,
  HandoffResult,
  Holder,
  HolderPage,
  HolderRequest,
  LockEvent,
  LockKey,
  LockResult,
  PrefixLayout,
  ReapCandidate,
  ReapRequest,
  ReapResult,
  ReleaseChannel,
  ReleaseSignals,
  Removal,
  Renewal,
  ScanPage,
  Store,
  WaiterCaps
} from "./store/Store.js"

/**
 * The lock store as a service: provide it with `layer`, `layerConfig`, `layerCluster`, `layerFromClient` or
 * `layerMemory`.
 *
 * @since 0.1.0
 * @category tags
 */
export class RedisService extends Context.Service<RedisService, Store>()("effect-unique-jobs/RedisService") {}

/**
 * Checks, once, that `prefix`'s keys live where this process's store puts them: Redis records a prefix's layout (one
 * Redis, or a cluster and its `shards`) the first time the prefix is used, and this records it when nothing has yet.
 * Fails with `LayoutMismatch`, naming both layouts, when the record differs: a process configured otherwise would
 * lock keys the others never look at. `BullMQ.processor`, `BullMQ.worker` and `UniqueQueue` check their prefixes when
 * built; without it, the store's first call under the prefix checks (and fails with a `RedisError` of operation
 * `"layout"`). The memory store has no layout: it always succeeds.
 *
 * @since 0.1.0
 * @category layout
 */
export const checkLayout = (prefix: string): Effect.Effect<void, LayoutMismatch | RedisError, RedisService> =>
  Effect.flatMap(RedisService, (store) =>
    store.layout === undefined ? Effect.void : Effect.asVoid(store.layout(prefix)))

/**
 * Moves `prefix` to another layout, the drained way: refused (a `RedisError` of operation `"layout reset"`) while the
 * index of its recorded layout holds any lock; else retires the record's epoch in every shard of that layout and
 * deletes the record, and the next process to lock under the prefix records its own layout. Stop every process of the
 * prefix first, and start them again configured for the new layout: a process still running is refused at its next
 * lock call under the prefix (a `RedisError` whose cause is `LayoutMismatch` with `reset: true`), so it never locks
 * beside the new layout. Answers whether a record was deleted (`unique-jobs layout reset`).
 *
 * @since 0.1.0
 * @category layout
 */
export const resetLayout = (prefix: string): Effect.Effect<boolean, LayoutMismatch | RedisError, RedisService> =>
  Effect.gen(function*() {
    const store = yield* RedisService
    if (store.resetLayout === undefined) return false
    // Every shard of the recorded layout's index, until one lock is found.
    let cursor = "0"
    do {
      const page = yield* store.scan(prefix, cursor, "*", 1000)
      if (page.members.length > 0) {
        return yield* Effect.fail(
          new RedisError({
            operation: "layout reset",
            reason: `prefix ${prefix} still holds locks (${page.members[0]!.name}, …): drain it first (stop its ` +
              `producers, let its jobs finish or delete their locks with unique-jobs locks del), then reset`
          })
        )
      }
      cursor = page.cursor
    } while (cursor !== "0")
    return yield* store.resetLayout(prefix)
  })

/**
 * Connection options: `url`, the per-call `timeout`, auto-pipelining, and any other ioredis option.
 *
 * @since 0.1.0
 * @category models
 */
export type Options = IORedisStore.Options

/**
 * Redis Cluster: the nodes to start from, the per-call `timeout`, how many `shards` the index is split into, and any
 * other option of ioredis' `Cluster` under `client`.
 *
 * @since 0.1.0
 * @category models
 */
export type ClusterOptions = IORedisStore.ClusterOptions

/**
 * The client surface the store needs: ioredis' `Redis` or `Cluster` (a `Cluster` gets the cluster key layout).
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
  options?: FromClientOptions
): Effect.Effect<Store, RedisError> =>
  Effect.flatMap(Effect.mapError(Effect.fromResult(RedisOptions.decodeFromClient(options)), optionsError), (decoded) =>
    decoded.shards !== undefined && client.isCluster !== true
      ? Effect.fail(new RedisError({ operation: "options", reason: "shards: only a Redis Cluster client is sharded" }))
      : IORedisStore.makeFromClient(client, decoded))

/**
 * What `makeFromClient` takes beside the client: the per-call `timeout`, for an ioredis `Cluster` how many `shards`
 * the index is split into (24 by default; every process of a prefix must agree: Redis records it, and a store
 * configured otherwise is refused), and `lockTimeout`'s caps on waiting jobs (`maxLockWaiters`, default 1000 per
 * lock; `maxProcessWaiters`, default 10 000 per process; each a whole number from 1 to 1 000 000).
 *
 * @since 0.1.0
 * @category models
 */
export interface FromClientOptions {
  readonly timeout?: Duration.Input | undefined
  readonly shards?: number | undefined
  readonly maxLockWaiters?: number | undefined
  readonly maxProcessWaiters?: number | undefined
}

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

const optionsError = (invalid: InvalidLockOptions): RedisError =>
  new RedisError({
    operation: "options",
    reason: invalid.issues.map((issue) => `${issue.field}: ${issue.reason}`).join("; "),
    cause: invalid
  })

const decodeOptions = (options: unknown): Effect.Effect<Options, RedisError> =>
  Effect.mapError(Effect.fromResult(RedisOptions.decode(options)), optionsError)

/**
 * A store on Redis Cluster that owns its ioredis `Cluster`: connected when built, closed with its scope. Each lock's
 * keys, its shard of the index and that shard's fencing counter share one hash slot, so every script call touches
 * one slot (and names every key it touches); the shards spread over every master. Options that do not check fail
 * before any connection with a `RedisError` of operation `"options"` naming each field.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeCluster = (options: ClusterOptions): Effect.Effect<Store, RedisError, Scope.Scope> =>
  Effect.flatMap(Effect.mapError(Effect.fromResult(RedisOptions.decodeCluster(options)), optionsError), IORedisStore.makeCluster)

/**
 * @since 0.1.0
 * @category layers
 */
export const layerCluster = (options: ClusterOptions): Layer.Layer<RedisService, RedisError> =>
  Layer.effect(RedisService, makeCluster(options))

/**
 * Reads the cluster options from `Config`; by default the nodes from `REDIS_CLUSTER_NODES`, comma-separated
 * `host:port` pairs.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerClusterConfig = (
  config: Config.Wrap<ClusterOptions> = {
    nodes: Config.map(Config.String("REDIS_CLUSTER_NODES"), (text) =>
      text.split(",").map((node) => node.trim()).filter((node) => node !== ""))
  }
): Layer.Layer<RedisService, RedisError | Config.ConfigError> =>
  Layer.effect(RedisService, Effect.flatMap(Config.unwrap(config), makeCluster))

/**
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<RedisService, RedisError> =>
  Layer.effect(RedisService, make(options))

// A missing `REDIS_URL` would read as a bare `Expected string`: say what to set. Only absence is explained; a value
// that does not decode keeps its own message.
const explainMissing = <A>(config: Config.Config<A>, name: string): Config.Config<A> =>
  Config.flatMap(Config.option(config), (value) =>
    Option.isSome(value) ? Config.succeed(value.value) : Config.fail(
      new Schema.SchemaError(
        new SchemaIssue.Pointer(
          [name],
          new SchemaIssue.MissingKey({
            messageMissingKey: `${name} is not set: set it to redis://host:port[/db] (or pass Redis.layer({ url }))`
          })
        )
      )
    ))

/**
 * Reads the options from `Config`; by default the URL from `REDIS_URL`, kept `Redacted`. A missing `REDIS_URL` fails
 * with a `ConfigError` (tag `"ConfigError"`) that says what to set; a Redis that cannot be used, with `RedisError`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Wrap<Options> = { url: explainMissing(Config.Redacted("REDIS_URL"), "REDIS_URL") }
): Layer.Layer<RedisService, RedisError | Config.ConfigError> =>
  Layer.effect(RedisService, Effect.flatMap(Config.unwrap(config), make))

/**
 * A store over a client the caller owns and closes.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerFromClient = (
  client: Client,
  options?: FromClientOptions
): Layer.Layer<RedisService, RedisError> =>
  Layer.effect(RedisService, Effect.flatMap(makeFromClient(client, options), Keeper.scoped))

/**
 * An in-process store with the scripts' semantics, on Effect's `Clock` (so `TestClock` drives expiry).
 * For users' own tests and for differential tests; it is not shared between processes. Each build of the layer
 * is a new, empty store: provide it once to everything that must see the same locks.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerMemory: Layer.Layer<RedisService> = Layer.effect(
  RedisService,
  Effect.flatMap(Effect.sync(() => Memory.make()), Keeper.scoped)
)

/**
 * The ioredis client `layerEffectRedis` takes: a `Redis` or a `Cluster` (the one the lock store runs on, typically).
 *
 * @since 2.0.0
 * @category models
 */
export type EffectRedisClient = EffectRedisStore.Client

/**
 * What Effect's `Redis` service over an ioredis client takes: the `timeout` of each command (default 5 seconds, as the
 * lock store's calls; a blocking command such as `BLPOP key 10` gets its own block time on top, and `BLPOP key 0` none)
 * and the `pool` of connections behind `reserve` (Effect's `PoolOptions`: at most 10 by default).
 *
 * @since 2.0.0
 * @category models
 */
export interface EffectRedisOptions {
  readonly timeout?: Duration.Input | undefined
  readonly pool?: PersistenceRedis.PoolOptions | undefined
}

const decodeTimeout = (timeout: Duration.Input | undefined): Effect.Effect<void, RedisError> =>
  Effect.mapError(
    Effect.fromResult(RedisOptions.decodeFromClient(timeout === undefined ? {} : { timeout })),
    optionsError
  )

/**
 * Effect's `Redis` service (`effect/persistence/Redis`: `send`, `subscribe`, `eval`, `reserve`) over an ioredis client
 * the caller owns: it is not closed with the scope; the connections opened for `subscribe` (one per subscription) and
 * for `reserve` (pooled, from `client.duplicate()`) are.
 *
 * **Details**
 *
 * `send` is `client.call(command, ...args)`: Redis' error answer, a closed connection or no answer within `timeout`
 * fails with Effect's `RedisError`, whose `cause` is this package's `RedisError` (its `operation` the command, its
 * `reason` Redis' words). Scripts go through Effect's cache: SCRIPT LOAD once, then EVALSHA, loaded again on
 * NOSCRIPT. On a `Cluster`, SCRIPT LOAD reaches every master, so EVALSHA (routed by its first key) finds the script
 * wherever its keys live; a command's or a script's keys must share one hash slot: give the stores a prefix with a
 * hash tag (`PersistedQueue.layerStoreRedis({ prefix: "{jobs}:" })`).
 *
 * @since 2.0.0
 * @category constructors
 */
export const makeEffectRedis = (
  client: EffectRedisClient,
  options?: EffectRedisOptions
): Effect.Effect<PersistenceRedis.Redis["Service"], RedisError, Scope.Scope> =>
  Effect.andThen(decodeTimeout(options?.timeout), EffectRedisStore.make(client, options))

/**
 * Provides Effect's `Redis` service (`effect/persistence/Redis`) over an ioredis `Redis` or `Cluster` the caller owns
 * (and closes): `PersistedQueue.layerStoreRedis` and `RateLimiter.layerStoreRedis` then run on the client the locks
 * use (`layerFromClient`), with no second Redis client library. See `makeEffectRedis`.
 *
 * **Example** (The locks and a `PersistedQueue` on one ioredis client)
 *
 * ```ts
 * import { Layer } from "effect"
 * import { PersistedQueue } from "effect/persistence"
 * import { Redis as IORedis } from "ioredis"
 * import { Redis } from "effect-unique-jobs"
 *
 * const client = new IORedis("redis://127.0.0.1:6379")
 * const layer = Layer.mergeAll(
 *   Redis.layerFromClient(client),
 *   PersistedQueue.layer.pipe(
 *     Layer.provide(PersistedQueue.layerStoreRedis()),
 *     Layer.provide(Redis.layerEffectRedis(client))
 *   )
 * )
 * ```
 *
 * @since 2.0.0
 * @category layers
 */
export const layerEffectRedis = (
  client: EffectRedisClient,
  options?: EffectRedisOptions
): Layer.Layer<PersistenceRedis.Redis, RedisError> =>
  Layer.effect(PersistenceRedis.Redis, makeEffectRedis(client, options))

/**
 * The lock store and Effect's `Redis` service (`effect/persistence/Redis`) on ONE ioredis connection, built from
 * `Redis.Options` (as `layer`'s) and closed with the layer: one client for the locks, `PersistedQueue`'s and
 * `RateLimiter`'s Redis stores. `effectRedis` sets Effect's side (`timeout` defaults to the options' own).
 *
 * @since 2.0.0
 * @category layers
 */
export const layerWithEffectRedis = (
  options: Options = {},
  effectRedis?: EffectRedisOptions
): Layer.Layer<RedisService | PersistenceRedis.Redis, RedisError> =>
  Layer.effectContext(
    Effect.gen(function*() {
      const decoded = yield* decodeOptions(options)
      const { client, store } = yield* IORedisStore.makeWithClient(decoded)
      return yield* both(client, store, decoded.timeout, effectRedis)
    })
  )

/**
 * `layerWithEffectRedis` on Redis Cluster: the lock store (as `layerCluster`'s) and Effect's `Redis` service on one
 * ioredis `Cluster`. Effect's stores need their keys in one hash slot per command or script: give them a prefix with
 * a hash tag (`PersistedQueue.layerStoreRedis({ prefix: "{jobs}:" })`, `RateLimiter.layerStoreRedis({ prefix:
 * "{limits}:" })`).
 *
 * @since 2.0.0
 * @category layers
 */
export const layerClusterWithEffectRedis = (
  options: ClusterOptions,
  effectRedis?: EffectRedisOptions
): Layer.Layer<RedisService | PersistenceRedis.Redis, RedisError> =>
  Layer.effectContext(
    Effect.gen(function*() {
      const decoded = yield* Effect.mapError(Effect.fromResult(RedisOptions.decodeCluster(options)), optionsError)
      const { client, store } = yield* IORedisStore.makeClusterWithClient(decoded)
      return yield* both(client, store, decoded.timeout, effectRedis)
    })
  )

// Effect's service beside the lock store, on the store's own client (closed after both, with the scope).
const both = (
  client: EffectRedisClient,
  store: Store,
  timeout: Duration.Input | undefined,
  effectRedis: EffectRedisOptions | undefined
): Effect.Effect<Context.Context<RedisService | PersistenceRedis.Redis>, RedisError, Scope.Scope> =>
  Effect.gen(function*() {
    const service = yield* makeEffectRedis(client, { ...effectRedis, timeout: effectRedis?.timeout ?? timeout })
    return Context.make(RedisService, store).pipe(Context.add(PersistenceRedis.Redis, service))
  })
