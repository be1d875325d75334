/**
 * Test Redis: a private redis-server per test file (or REDIS_URL), the RedisService over it, and a raw ioredis
 * client to check what Redis holds. Each test takes its own key prefix, so tests can run concurrently.
 */
import { Cluster as IOCluster, Redis as IORedis } from "ioredis"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Layout from "../../src/store/Layout.js"
import * as Redis from "../../src/Redis.js"
import * as RedisCluster from "../../src/testing/RedisCluster.js"
import * as RedisServer from "../../src/testing/RedisServer.js"

/**
 * `UNIQUE_JOBS_TEST_CLUSTER=1` (`npm run test:cluster`): the same suites on a private Redis Cluster (3 masters, 3
 * replicas), the store in its cluster layout, `raw` an ioredis `Cluster`.
 */
export const clusterMode = process.env.UNIQUE_JOBS_TEST_CLUSTER === "1"

/** The key layout the store under test writes. */
export const layout: Layout.Layout = clusterMode ? Layout.cluster() : Layout.standalone

/** The Redis keys of a lock, as the store under test names them. */
export const keysOf = (prefix: string, name: string): Layout.Keys => layout.keysOf({ prefix, name })

export class TestRedis extends Context.Service<TestRedis, {
  readonly source: RedisServer.Source
  /** A separate connection for inspecting keys (an ioredis `Cluster` in cluster mode: single-key commands only). */
  readonly raw: IORedis
  /** What `Redis.layer` / `UniqueQueue`'s `redis` option takes to reach it. */
  readonly options: Redis.Options | Redis.ClusterOptions
  /** The cluster, in cluster mode. */
  readonly cluster: RedisCluster.Cluster | undefined
  /** Every key matching `pattern`, from every master. */
  readonly keys: (pattern: string) => Promise<Array<string>>
}>()("test/TestRedis") {}

let counter = 0
/** A key prefix no other test in this process uses. */
export const uniquePrefix = (name = "t"): string => `test${process.pid}-${name}-${++counter}`

const layerCluster: Layer.Layer<TestRedis, RedisServer.RedisServerError> = Layer.effect(
  TestRedis,
  Effect.gen(function*() {
    const cluster = yield* RedisCluster.start()
    const nodes = cluster.startupNodes.map((node) => `${node.host}:${node.port}`)
    const raw = yield* Effect.acquireRelease(
      Effect.promise(async () => {
        const client = new IOCluster([...cluster.startupNodes], { lazyConnect: true })
        client.on("error", () => {})
        await client.connect()
        return client
      }),
      (client) => Effect.sync(() => client.disconnect())
    )
    const keys = async (pattern: string) => {
      const masters = raw.nodes("master")
      return (await Promise.all(masters.map((node) => node.keys(pattern)))).flat()
    }
    // The url of one master: for what only reads its port (a test that needs one Redis has no cluster variant).
    const source: RedisServer.Source = { url: `redis://${nodes[0]}`, source: "private", server: undefined }
    return { source, raw: raw as unknown as IORedis, options: { nodes }, cluster, keys }
  })
)

const layerStandalone: Layer.Layer<TestRedis, RedisServer.RedisServerError> = Layer.effect(
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
    return { source, raw, options: { url: source.url }, cluster: undefined, keys: (pattern: string) => raw.keys(pattern) }
  })
)

export const layerServer: Layer.Layer<TestRedis, RedisServer.RedisServerError> = clusterMode
  ? layerCluster
  : layerStandalone

/** RedisService on the test server, plus TestRedis. */
export const layer = (options: Omit<Redis.Options, "url"> = {}): Layer.Layer<Redis.RedisService | TestRedis, unknown> =>
  Layer.unwrap(
    Effect.map(TestRedis, ({ options: where, source }) =>
      "nodes" in where
        ? Redis.layerCluster({
          nodes: where.nodes,
          ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
          ...(options.enableAutoPipelining === undefined ? {} : { enableAutoPipelining: options.enableAutoPipelining })
        })
        : Redis.layer({ ...options, url: source.url }))
  ).pipe(Layer.provideMerge(layerServer))

/**
 * Every key under `prefix` that has no TTL, less the documented ones: the index (`<prefix>:digests`), the fencing
 * counter (`<prefix>:fence`) and the prefix's layout record (`<prefix>:layout`). A queue lock without `lockTtl` whose job still exists is documented too: pass its
 * digests in `queued`. The rest is a lock that would never end.
 */
export const keysWithoutTtl = (prefix: string, queued: ReadonlyArray<string> = []) =>
  Effect.flatMap(TestRedis, ({ keys, raw }) =>
    Effect.promise(async () => {
      const documented = (key: string) =>
        key === `${prefix}:digests` || key === `${prefix}:fence` || key === `${prefix}:layout` || /^.*:\{[^}]*\}:(digests|fence)$/.test(key) &&
          key.startsWith(`${prefix}:{`)
      const allowed = new Set(queued.map((d) => keysOf(prefix, d).locked))
      const found = await keys(`${prefix}:*`)
      const ttls = await Promise.all(found.map((key) => raw.pttl(key)))
      return found.filter((key, i) => ttls[i] === -1 && !documented(key) && !allowed.has(key)).sort()
    }))
