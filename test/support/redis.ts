/**
 * Test Redis: a private redis-server per test file (or REDIS_URL), the RedisService over it, and a raw ioredis
 * client to check what Redis holds. Each test takes its own key prefix, so tests can run concurrently.
 */
import { Redis as IORedis } from "ioredis"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redis from "../../src/Redis.js"
import * as RedisServer from "../../src/RedisServer.js"

export class TestRedis extends Context.Tag("test/TestRedis")<TestRedis, {
  readonly source: RedisServer.Source
  /** A separate connection for inspecting keys. */
  readonly raw: IORedis
}>() {}

let counter = 0
/** A key prefix no other test in this process uses. */
export const uniquePrefix = (name = "t"): string => `test${process.pid}-${name}-${++counter}`

export const layerServer: Layer.Layer<TestRedis, RedisServer.RedisServerError> = Layer.scoped(
  TestRedis,
  Effect.gen(function*() {
    const source = yield* RedisServer.acquire
    const raw = yield* Effect.acquireRelease(
      Effect.promise(async () => {
        const client = new IORedis(source.url, { lazyConnect: true, maxRetriesPerRequest: 1 })
        client.on("error", () => {}) // fault tests kill the server under it
        await client.connect()
        return client
      }),
      (client) => Effect.sync(() => client.disconnect())
    )
    return { source, raw }
  })
)

/** RedisService on the test server, plus TestRedis. */
export const layer = (options: Omit<Redis.Options, "url"> = {}): Layer.Layer<Redis.RedisService | TestRedis, unknown> =>
  Layer.unwrapEffect(
    Effect.map(TestRedis, ({ source }) => Redis.layer({ ...options, url: source.url }))
  ).pipe(Layer.provideMerge(layerServer))

/**
 * Every key under `prefix` that has no TTL, less the documented ones: the index (`<prefix>:digests`) and the fencing
 * counter (`<prefix>:fence`). A queue lock without `lockTtl` whose job still exists is documented too: pass its
 * digests in `queued`. The rest is a lock that would never end.
 */
export const keysWithoutTtl = (prefix: string, queued: ReadonlyArray<string> = []) =>
  Effect.flatMap(TestRedis, ({ raw }) =>
    Effect.promise(async () => {
      const allowed = new Set([`${prefix}:digests`, `${prefix}:fence`, ...queued.map((d) => `${d}:LOCKED`)])
      const keys = await raw.keys(`${prefix}:*`)
      const ttls = await Promise.all(keys.map((key) => raw.pttl(key)))
      return keys.filter((key, i) => ttls[i] === -1 && !allowed.has(key)).sort()
    }))
