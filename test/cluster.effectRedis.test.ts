/**
 * Effect's `Redis` service on an ioredis `Cluster` (issue 49): scripts loaded on every master (EVALSHA routed by its
 * first key finds the script on whichever master owns it), NOSCRIPT after a flush of every master, a command across
 * slots refused, subscribe and reserve, and Effect's stores plus the locks on the one `Cluster` client, their keys
 * under a hash tag.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as PersistedQueue from "effect/persistence/PersistedQueue"
import * as RateLimiter from "effect/persistence/RateLimiter"
import * as PersistenceRedis from "effect/persistence/Redis"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import { Redis as IORedis } from "ioredis"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisCluster from "../src/testing/RedisCluster.js"
import * as RedisTest from "./support/redis.js"

class TestCluster extends Context.Service<TestCluster, RedisCluster.Cluster>()("test/EffectRedisCluster") {}

const clusterLayer = Layer.effect(TestCluster, RedisCluster.start({ replicas: 0 }))

// Every master, each its own connection, for what a Cluster client would route elsewhere.
const eachMaster = <A>(f: (node: IORedis) => Promise<A>) =>
  Effect.flatMap(TestCluster, (cluster) =>
    Effect.flatMap(cluster.masters, (ports) =>
      Effect.promise(() =>
        Promise.all(ports.map(async (port) => {
          const node = new IORedis(port, "127.0.0.1", { lazyConnect: true })
          node.on("error", () => {})
          try {
            await node.connect()
            return await f(node)
          } finally {
            node.disconnect()
          }
        }))
      )))

const incrBy = PersistenceRedis.script((key: string, by: number) => [key, by], {
  lua: `return redis.call("INCRBY", KEYS[1], ARGV[1])`,
  numberOfKeys: 1
}).withReturnType<number>()

class Task extends Schema.Class<Task>("Task")({ n: Schema.Number }) {}

const services = Layer.unwrap(
  Effect.map(TestCluster, (cluster) =>
    Redis.layerClusterWithEffectRedis({ nodes: cluster.startupNodes.map((node) => `${node.host}:${node.port}`) }))
)

describe("Effect's Redis service on an ioredis Cluster", () => {
  layer(Layer.provideMerge(services, clusterLayer), { excludeTestServices: true, timeout: 120_000 })((it) => {
    it.effect("eval: one load reaches every master; keys in slots of every master run by EVALSHA at once", () =>
      Effect.gen(function*() {
        const redis = yield* PersistenceRedis.Redis
        const prefix = RedisTest.uniquePrefix("ceval")
        const keys = Array.from({ length: 30 }, (_, i) => `{${prefix}-${i}}:n`)
        for (const key of keys) assert.strictEqual(yield* redis.eval(incrBy)(key, 2), 2)
        // Each master holds some of the keys, and every master has the script.
        const held = yield* eachMaster(async (node) => (await node.keys(`{${prefix}-*`)).length)
        assert.strictEqual(held.length, 3)
        for (const count of held) assert.isAbove(count, 0)
        const sha = String(yield* redis.send("SCRIPT", "LOAD", incrBy.lua))
        assert.deepStrictEqual(yield* eachMaster((node) => node.call("SCRIPT", "EXISTS", sha)), [[1], [1], [1]])
      }))

    it.effect("eval after SCRIPT FLUSH on every master: NOSCRIPT, loaded again everywhere, every key answered", () =>
      Effect.gen(function*() {
        const redis = yield* PersistenceRedis.Redis
        const prefix = RedisTest.uniquePrefix("cflush")
        const keys = Array.from({ length: 30 }, (_, i) => `{${prefix}-${i}}:n`)
        for (const key of keys) yield* redis.eval(incrBy)(key, 1)
        yield* eachMaster((node) => node.call("SCRIPT", "FLUSH"))
        for (const key of keys) assert.strictEqual(yield* redis.eval(incrBy)(key, 1), 2)
        const sha = String(yield* redis.send("SCRIPT", "LOAD", incrBy.lua))
        assert.deepStrictEqual(yield* eachMaster((node) => node.call("SCRIPT", "EXISTS", sha)), [[1], [1], [1]])
      }))

    it.effect("send: keys of one hash tag go together; keys across slots are refused (CROSSSLOT) as a RedisError", () =>
      Effect.gen(function*() {
        const redis = yield* PersistenceRedis.Redis
        const tag = `{${RedisTest.uniquePrefix("ctag")}}`
        assert.strictEqual(yield* redis.send("MSET", `${tag}:a`, "1", `${tag}:b`, "2"), "OK")
        assert.deepStrictEqual(yield* redis.send("MGET", `${tag}:a`, `${tag}:b`), ["1", "2"])
        const error = yield* Effect.flip(redis.send("MGET", "untagged-a", "untagged-b"))
        assert.instanceOf(error.cause, Redis.RedisError)
        assert.include((error.cause as Redis.RedisError).reason, "CROSSSLOT")
      }))

    it.effect("subscribe and reserve on the cluster: a message arrives; a BLPOP blocks none of send", () =>
      Effect.gen(function*() {
        const redis = yield* PersistenceRedis.Redis
        const channel = RedisTest.uniquePrefix("cchannel")
        const messages = yield* redis.subscribe(channel)
        // PUBLISH answers the subscribers of the node it reached only; the cluster bus carries it to the others.
        yield* redis.send("PUBLISH", channel, "hello")
        assert.deepStrictEqual(yield* Queue.take(messages), { channel, message: "hello" })
        const key = `{${RedisTest.uniquePrefix("cblpop")}}:list`
        const connection = yield* redis.reserve
        const blpop = yield* Effect.forkChild(connection.send<[string, string]>("BLPOP", key, "0"))
        for (let i = 0; i < 10; i++) assert.strictEqual(yield* redis.send("PING"), "PONG")
        yield* redis.send("RPUSH", key, "v")
        assert.deepStrictEqual(yield* Fiber.join(blpop), [key, "v"])
      }))

    it.effect("PersistedQueue and RateLimiter (prefixes with a hash tag) and the locks on the one Cluster client", () =>
      Effect.gen(function*() {
        const tag = RedisTest.uniquePrefix("cq")
        const lockPrefix = RedisTest.uniquePrefix("clock")
        const definition = yield* LockOptions.make({ lock: "until_executed", lockPrefix })
        yield* Lock.lock(definition, { digest: `${lockPrefix}:d1`, jid: "jid-1" })
        assert.strictEqual(
          (yield* Effect.flip(Lock.lock(definition, { digest: `${lockPrefix}:d1`, jid: "jid-2" })))._tag,
          "LockConflict"
        )
        yield* Effect.gen(function*() {
          const queue = yield* PersistedQueue.make({ name: "tasks", schema: Task, maxAttempts: 2 })
          yield* queue.offer(new Task({ n: 1 }), { id: "jid-1" })
          yield* queue.offer(new Task({ n: 1 }), { id: "jid-1" })
          yield* queue.offer(new Task({ n: 2 }), { id: "jid-2", delay: "100 millis" })
          const taken: Array<number> = []
          for (let i = 0; i < 2; i++) yield* queue.take((task) => Effect.sync(() => taken.push(task.n)))
          assert.deepStrictEqual(taken.sort(), [1, 2])
          const limiter = yield* RateLimiter.RateLimiter
          const consume = limiter.consume({ key: "k", limit: 2, window: "1 minute", onExceeded: "fail" })
          yield* consume
          yield* consume
          assert.strictEqual((yield* Effect.flip(consume)).reason._tag, "RateLimitExceeded")
        }).pipe(
          Effect.provide(Layer.mergeAll(
            PersistedQueue.layer.pipe(
              Layer.provide(PersistedQueue.layerStoreRedis({ prefix: `{${tag}}:`, pollInterval: "20 millis" }))
            ),
            RateLimiter.layer.pipe(Layer.provide(RateLimiter.layerStoreRedis({ prefix: `{${tag}-limits}:` })))
          ))
        )
        assert.isTrue(yield* Lock.unlock(definition, { digest: `${lockPrefix}:d1`, jid: "jid-1" }))
      }))
  })
})
