/**
 * Effect's `PersistedQueue` on each of its stores, for the adapter's suites: the memory store, the Redis store on the
 * test's private redis-server (through Effect's `Redis` service over an ioredis client), and the SQL store on a
 * PostgreSQL database made for the file (127.0.0.1:5432, user postgres) and dropped after it.
 *
 * Effect's `Redis` service is the library's own (`Redis.makeEffectRedis`) over an ioredis client.
 */
import { Redis as IORedis } from "ioredis"
import { PgClient } from "@effect/sql-pg"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as PersistedQueue from "effect/persistence/PersistedQueue"
import * as EffectRedis from "effect/persistence/Redis"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import * as UniquePersistedQueue from "../../src/adapters/PersistedQueue.js"
import * as Redis from "../../src/Redis.js"
import * as RedisTest from "./redis.js"

/**
 * Effect's `Redis` service over an ioredis client of `url` (the library's `Redis.makeEffectRedis`), the client closed
 * with the scope.
 */
export const makeEffectRedis = (url: string): Effect.Effect<EffectRedis.Redis["Service"], never, Scope.Scope> =>
  Effect.gen(function*() {
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const client = new IORedis(url, { maxRetriesPerRequest: 1 })
        client.on("error", () => {})
        return client
      }),
      (client) => Effect.sync(() => client.disconnect())
    )
    return yield* Effect.orDie(Redis.makeEffectRedis(client))
  })

/** Effect's `Redis` service on the test's redis-server. */
export const layerEffectRedis: Layer.Layer<EffectRedis.Redis, never, RedisTest.TestRedis> = Layer.effect(
  EffectRedis.Redis,
  Effect.flatMap(RedisTest.TestRedis, ({ source }) => makeEffectRedis(source.url))
)

type Made = { readonly context: Context.Context<PersistedQueue.PersistedQueueFactory>; readonly presence: UniquePersistedQueue.Presence }

/** What a suite's adapter is made over: a fresh factory (its own store, prefix or table) and the presence reading it. */
export interface Store<R> {
  readonly name: "memory" | "redis" | "sql"
  /** Built in the current scope; the context also holds what the presence reads with. */
  readonly make: Effect.Effect<Made, unknown, Scope.Scope | R>
}

let tables = 0

const build = <R>(layer: Layer.Layer<PersistedQueue.PersistedQueueStore, unknown, R>) =>
  Effect.flatMap(Effect.scope, (scope) =>
    Layer.buildWithScope(PersistedQueue.layer.pipe(Layer.provide(layer)), scope))

/** The memory store: a new one per `make`. */
export const memory: Store<never> = {
  name: "memory",
  make: Effect.map(build(PersistedQueue.layerStoreMemory), (context) => ({
    context,
    presence: UniquePersistedQueue.presenceMemory
  }))
}

/** Short poll and lock intervals: tests count work, and a 1 s poll would make each wait a second. */
const storeTiming = { pollInterval: "50 millis", lockRefreshInterval: "1 second", lockExpiration: "5 seconds" } as const

/** The Redis store under a fresh prefix; needs Effect's `Redis`. */
export const redis: Store<EffectRedis.Redis> = {
  name: "redis",
  make: Effect.gen(function*() {
    const prefix = `${RedisTest.uniquePrefix("pq")}:`
    const context = yield* build(PersistedQueue.layerStoreRedis({ prefix, ...storeTiming }))
    const service = yield* EffectRedis.Redis
    return {
      context: Context.add(context, EffectRedis.Redis, service) as Context.Context<PersistedQueue.PersistedQueueFactory>,
      presence: UniquePersistedQueue.presenceRedis({ prefix })
    }
  })
}

/** The SQL store on a fresh table; needs a `SqlClient`. */
export const sql: Store<SqlClient.SqlClient> = {
  name: "sql",
  make: Effect.gen(function*() {
    const tableName = `pq_${process.pid}_${++tables}`
    const context = yield* build(PersistedQueue.layerStoreSql({ tableName, ...storeTiming }))
    const client = yield* SqlClient.SqlClient
    return {
      context: Context.add(context, SqlClient.SqlClient, client) as Context.Context<PersistedQueue.PersistedQueueFactory>,
      presence: UniquePersistedQueue.presenceSql({ tableName })
    }
  })
}

const pgUrl = (database: string) => `postgres://postgres@127.0.0.1:5432/${database}`

/**
 * A `SqlClient` on a PostgreSQL database of its own (a unique name), created when the layer is built and dropped
 * when it is released.
 */
export const layerPg = (name: string): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, unknown> => {
  const database = `uj_${name}_${process.pid}_${Date.now()}`.toLowerCase().replace(/[^a-z0-9_]/g, "_")
  const admin = Layer.build(PgClient.layer({ url: Redacted.make(pgUrl("postgres")) }))
  const onAdmin = (statement: string) =>
    Effect.scoped(Effect.flatMap(admin, (context) => Effect.provideContext(
      Effect.flatMap(SqlClient.SqlClient, (client) => client.unsafe(statement)),
      context
    )))
  const made = Layer.effectDiscard(
    Effect.acquireRelease(
      onAdmin(`CREATE DATABASE ${database}`),
      () => Effect.ignore(onAdmin(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`))
    )
  )
  return PgClient.layer({ url: Redacted.make(pgUrl(database)) }).pipe(Layer.provide(made))
}

/**
 * The adapter over `store`, with the contract suite's settings: 3 attempts (2 retries) 500 ms apart. `context` holds
 * the factory and what the presence reads, to provide to what else uses the store.
 */
export const adapterOn = <R>(
  store: Store<R>,
  options: Partial<UniquePersistedQueue.Options> = {}
): Effect.Effect<
  { readonly adapter: UniquePersistedQueue.UniquePersistedQueue; readonly context: Context.Context<PersistedQueue.PersistedQueueFactory> },
  unknown,
  Scope.Scope | R
> =>
  Effect.gen(function*() {
    const { context, presence } = yield* store.make
    const adapter = yield* (UniquePersistedQueue.make({
      name: RedisTest.uniquePrefix("q"),
      presence,
      maxAttempts: 3,
      retrySchedule: Schedule.spaced("500 millis"),
      ...options
    }) as Effect.Effect<UniquePersistedQueue.UniquePersistedQueue, unknown, PersistedQueue.PersistedQueueFactory | Scope.Scope>)
      .pipe(Effect.provideContext(context))
    return { adapter, context }
  })
