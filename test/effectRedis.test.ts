/**
 * Effect's `Redis` service (`effect/persistence/Redis`) on the library's ioredis client (issue 49): its four
 * operations on a private redis-server, a stalled Redis ending in `RedisError` within the timeout, Effect's own stores
 * (`PersistedQueue`, `RateLimiter`) on it, and the locks and a `PersistedQueue` on one ioredis connection.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as PersistedQueue from "effect/persistence/PersistedQueue"
import * as RateLimiter from "effect/persistence/RateLimiter"
import * as PersistenceRedis from "effect/persistence/Redis"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import type { RedisOptions } from "ioredis"
import { Redis as IORedis } from "ioredis"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as RedisTest from "./support/redis.js"

// A client the test owns (as a user's app would), closed with the test's scope.
const ioredis = (url: string, options: RedisOptions = {}) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new IORedis(url, { lazyConnect: true, ...options })
      client.on("error", () => {})
      await client.connect()
      return client
    }),
    (client) => Effect.sync(() => client.disconnect())
  )

const client = (options?: RedisOptions) =>
  Effect.flatMap(RedisTest.TestRedis, ({ source }) => ioredis(source.url, options))

// The clients connected to the server whose name is `name` (CLIENT LIST, one line per connection).
const connectionsNamed = (raw: IORedis, name: string) =>
  Effect.promise(async () =>
    String(await raw.call("CLIENT", "LIST")).split("\n").filter((line) => line.includes(` name=${name} `)).length
  )

const incrBy = PersistenceRedis.script((key: string, by: number) => [key, by], {
  lua: `return redis.call("INCRBY", KEYS[1], ARGV[1])`,
  numberOfKeys: 1
}).withReturnType<number>()

// Effect's RedisError carries ours as its cause: the command and Redis' words.
const causeOf = (error: PersistenceRedis.RedisError): Redis.RedisError => {
  assert.instanceOf(error.cause, Redis.RedisError)
  return error.cause as Redis.RedisError
}

describe("Effect's Redis service on an ioredis client", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("send: replies as ioredis gives them; an error answer is a RedisError naming the command", () =>
      Effect.gen(function*() {
        const redis = yield* Redis.makeEffectRedis(yield* client())
        const key = RedisTest.uniquePrefix("send")
        assert.strictEqual(yield* redis.send("SET", key, "41"), "OK")
        assert.strictEqual(yield* redis.send<number>("INCR", key), 42)
        assert.strictEqual(yield* redis.send<string>("GET", key), "42")
        assert.isNull(yield* redis.send("GET", `${key}:none`))
        yield* redis.send("RPUSH", `${key}:list`, "a", "b")
        assert.deepStrictEqual(yield* redis.send<Array<string>>("LRANGE", `${key}:list`, "0", "-1"), ["a", "b"])
        const error = yield* Effect.flip(redis.send("INCR", `${key}:list`))
        assert.strictEqual(error._tag, "RedisError")
        assert.strictEqual(causeOf(error).operation, "INCR")
        assert.include(causeOf(error).reason, "WRONGTYPE")
      }))

    it.effect("eval: loaded once (SCRIPT LOAD), run by EVALSHA; after SCRIPT FLUSH, NOSCRIPT loads it again", () =>
      Effect.gen(function*() {
        const raw = yield* client()
        const redis = yield* Redis.makeEffectRedis(raw)
        const key = RedisTest.uniquePrefix("eval")
        const run = redis.eval(incrBy)
        assert.strictEqual(yield* run(key, 2), 2)
        assert.strictEqual(yield* run(key, 3), 5)
        const sha = String(yield* Effect.promise(() => raw.call("SCRIPT", "LOAD", incrBy.lua)))
        assert.deepStrictEqual(yield* Effect.promise(() => raw.call("SCRIPT", "EXISTS", sha)), [1])
        yield* Effect.promise(() => raw.call("SCRIPT", "FLUSH"))
        assert.deepStrictEqual(yield* Effect.promise(() => raw.call("SCRIPT", "EXISTS", sha)), [0])
        // The cached sha meets NOSCRIPT; Effect loads the script again through `send` and runs it.
        assert.strictEqual(yield* run(key, 4), 9)
        assert.deepStrictEqual(yield* Effect.promise(() => raw.call("SCRIPT", "EXISTS", sha)), [1])
        assert.strictEqual(yield* Effect.promise(() => raw.get(key)), "9")
      }))

    it.effect("subscribe: a published message arrives; the subscription (and its connection) ends with its scope", () =>
      Effect.gen(function*() {
        const raw = yield* client()
        const redis = yield* Redis.makeEffectRedis(raw)
        const channel = RedisTest.uniquePrefix("channel")
        const scope = yield* Scope.make()
        const messages = yield* Scope.provide(redis.subscribe(channel), scope)
        assert.strictEqual(yield* redis.send<number>("PUBLISH", channel, "one"), 1)
        assert.strictEqual(yield* redis.send<number>("PUBLISH", `${channel}:other`, "not for it"), 0)
        assert.strictEqual(yield* redis.send<number>("PUBLISH", channel, "two"), 1)
        assert.deepStrictEqual(yield* Queue.take(messages), { channel, message: "one" })
        assert.deepStrictEqual(yield* Queue.take(messages), { channel, message: "two" })
        yield* Scope.close(scope, Exit.void)
        // Unsubscribed: no one gets what is published now, and the queue is shut down.
        const subscribers = yield* Effect.promise(() => raw.call("PUBSUB", "NUMSUB", channel)) as Effect.Effect<
          [string, number]
        >
        assert.strictEqual(subscribers[1], 0)
        assert.strictEqual(yield* redis.send<number>("PUBLISH", channel, "three"), 0)
        assert.isTrue(Exit.isFailure(yield* Effect.exit(Queue.take(messages))))
      }))

    it.effect("reserve: a BLPOP on a reserved connection blocks none of send; closing it ends the BLPOP", () =>
      Effect.gen(function*() {
        const raw = yield* client({ connectionName: "reserve-test" })
        // A short timeout: a blocking command gets its own block time on top.
        const redis = yield* Redis.makeEffectRedis(raw, { timeout: 300 })
        const key = RedisTest.uniquePrefix("reserve")
        const scope = yield* Scope.make()
        const connection = yield* Scope.provide(redis.reserve, scope)
        const id = yield* connection.send<number>("CLIENT", "ID")
        const blpop = yield* Effect.forkChild(connection.send<[string, string] | null>("BLPOP", key, "0"))
        // The shared connection answers while the reserved one blocks.
        for (let i = 0; i < 10; i++) assert.strictEqual(yield* redis.send("PING"), "PONG")
        assert.strictEqual(yield* connectionsNamed(raw, "reserve-test"), 2)
        yield* redis.send("RPUSH", key, "v")
        assert.deepStrictEqual(yield* Fiber.join(blpop), [key, "v"])
        // BLPOP for 1 s outlives the 300 ms timeout: it answers null when its own time is up, not a timeout.
        assert.isNull(yield* connection.send("BLPOP", `${key}:empty`, "1"))
        // A BLPOP still in flight when the reservation ends: its connection is closed and the command fails.
        const pending = yield* Effect.forkChild(Effect.exit(connection.send("BLPOP", `${key}:never`, "0")))
        yield* Effect.sleep(50)
        yield* Scope.close(scope, Exit.void)
        const ended = yield* Fiber.join(pending)
        assert.isTrue(Exit.isFailure(ended))
        // Once Redis has seen the connection go, what is pushed stays: the BLPOP took nothing.
        yield* Effect.promise(() => raw.call("CLIENT", "LIST", "ID", String(id))).pipe(
          Effect.repeat({ until: (list) => String(list).trim() === "", schedule: Schedule.spaced(10) })
        )
        yield* redis.send("RPUSH", `${key}:never`, "late")
        assert.strictEqual(yield* Effect.promise(() => raw.llen(`${key}:never`)), 1, "the closed BLPOP took nothing")
        // The pool's connection is gone with it, and so is the reservation: a new one works.
        const again = yield* redis.reserve
        assert.strictEqual(yield* again.send("PING"), "PONG")
        assert.strictEqual(yield* again.eval(incrBy)(`${key}:n`, 7), 7)
      }))

    it.effect("a stalled Redis (CLIENT PAUSE 3000 ALL): a command fails with RedisError within the timeout", () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.start
        // No ioredis command timeout on the client: the service's own timeout ends the call.
        const stalled = yield* ioredis(server.url)
        const redis = yield* Redis.makeEffectRedis(stalled, { timeout: 300 })
        assert.strictEqual(yield* redis.send("PING"), "PONG")
        const control = yield* ioredis(server.url)
        yield* Effect.promise(() => control.call("CLIENT", "PAUSE", "3000", "ALL"))
        const started = Date.now()
        const error = yield* Effect.flip(redis.send("GET", "some-key"))
        const elapsed = Date.now() - started
        assert.strictEqual(error._tag, "RedisError")
        assert.strictEqual(causeOf(error).operation, "GET")
        assert.include(causeOf(error).reason, "no answer within 300ms (the timeout option)")
        // Before the pause ends: the timeout ended it, not Redis' answer.
        assert.isBelow(elapsed, 2900)
        const failed = yield* Effect.flip(redis.eval(incrBy)("k", 1))
        assert.include(causeOf(failed).reason, "no answer within")
      }), { timeout: 30_000 })

    it.effect("a timeout that is not a positive duration is refused with a RedisError of operation options", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(Redis.makeEffectRedis(yield* client(), { timeout: 0 }))
        assert.strictEqual(error.operation, "options")
        assert.include(error.reason, "timeout")
      }))
  })
})

class Task extends Schema.Class<Task>("Task")({ n: Schema.Number }) {}

describe("Effect's stores on it", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    const queueLayer = (raw: IORedis, prefix: string) =>
      PersistedQueue.layer.pipe(
        Layer.provide(PersistedQueue.layerStoreRedis({ prefix, pollInterval: "20 millis" })),
        Layer.provide(Redis.layerEffectRedis(raw))
      )

    it.effect("PersistedQueue.layerStoreRedis: offer and take; an id offered twice is stored once", () =>
      Effect.gen(function*() {
        const raw = yield* client()
        const prefix = `${RedisTest.uniquePrefix("pq")}:`
        yield* Effect.gen(function*() {
          const queue = yield* PersistedQueue.make({ name: "tasks", schema: Task })
          assert.strictEqual(yield* queue.offer(new Task({ n: 1 }), { id: "a" }), "a")
          assert.strictEqual(yield* queue.offer(new Task({ n: 1 }), { id: "a" }), "a")
          yield* queue.offer(new Task({ n: 2 }), { id: "b" })
          assert.strictEqual(yield* Effect.promise(() => raw.llen(`${prefix}tasks`)), 2, "a once, b once")
          const taken: Array<[string, number]> = []
          for (let i = 0; i < 2; i++) yield* queue.take((task, { id }) => Effect.sync(() => taken.push([id, task.n])))
          assert.deepStrictEqual(taken, [["a", 1], ["b", 2]])
          assert.strictEqual(yield* Effect.promise(() => raw.llen(`${prefix}tasks`)), 0)
          // Still reserved (deduplicate "untilRemoved", the default): offering "a" again stores nothing.
          yield* queue.offer(new Task({ n: 3 }), { id: "a" })
          assert.strictEqual(yield* Effect.promise(() => raw.llen(`${prefix}tasks`)), 0)
        }).pipe(Effect.provide(queueLayer(raw, prefix)))
      }))

    it.effect("PersistedQueue: a failing handler is retried, then dead-lettered after maxAttempts", () =>
      Effect.gen(function*() {
        const raw = yield* client()
        const prefix = `${RedisTest.uniquePrefix("pq")}:`
        yield* Effect.gen(function*() {
          const queue = yield* PersistedQueue.make({
            name: "failing",
            schema: Task,
            maxAttempts: 3,
            retrySchedule: Schedule.spaced("10 millis")
          })
          yield* queue.offer(new Task({ n: 7 }), { id: "doomed" })
          const attempts: Array<number> = []
          for (let i = 0; i < 3; i++) {
            const exit = yield* Effect.exit(
              queue.take((_, meta) =>
                Effect.flatMap(Effect.sync(() => attempts.push(meta.attempts)), () => Effect.fail("boom"))
              )
            )
            assert.isTrue(Exit.isFailure(exit))
          }
          assert.deepStrictEqual(attempts, [1, 2, 3])
          const failed = yield* Effect.promise(() => raw.lrange(`${prefix}failing:failed`, 0, -1))
          assert.strictEqual(failed.length, 1)
          const record = JSON.parse(failed[0]!)
          assert.strictEqual(record.id, "doomed")
          assert.deepStrictEqual(record.element, { n: 7 })
          assert.strictEqual(record.attempts, 3)
          assert.strictEqual(yield* Effect.promise(() => raw.llen(`${prefix}failing`)), 0)
          assert.strictEqual(yield* Effect.promise(() => raw.zcard(`${prefix}failing:delayed`)), 0)
        }).pipe(Effect.provide(queueLayer(raw, prefix)))
      }))

    it.effect("PersistedQueue: a delayed offer waits in the delayed set and is taken no sooner than its delay", () =>
      Effect.gen(function*() {
        const raw = yield* client()
        const prefix = `${RedisTest.uniquePrefix("pq")}:`
        yield* Effect.gen(function*() {
          const queue = yield* PersistedQueue.make({ name: "later", schema: Task })
          const offered = Date.now()
          yield* queue.offer(new Task({ n: 5 }), { id: "later-1", delay: "400 millis" })
          assert.strictEqual(yield* Effect.promise(() => raw.zcard(`${prefix}later:delayed`)), 1)
          assert.strictEqual(yield* Effect.promise(() => raw.llen(`${prefix}later`)), 0)
          const n = yield* queue.take((task) => Effect.succeed(task.n))
          assert.strictEqual(n, 5)
          assert.isAtLeast(Date.now() - offered, 400)
          assert.strictEqual(yield* Effect.promise(() => raw.zcard(`${prefix}later:delayed`)), 0)
        }).pipe(Effect.provide(queueLayer(raw, prefix)))
      }))

    it.effect("RateLimiter.layerStoreRedis: consumes until limited, then fails with RateLimitExceeded", () =>
      Effect.gen(function*() {
        const raw = yield* client()
        const prefix = `${RedisTest.uniquePrefix("rl")}:`
        yield* Effect.gen(function*() {
          const limiter = yield* RateLimiter.RateLimiter
          const consume = limiter.consume({ key: "user-1", limit: 3, window: "1 minute", onExceeded: "fail" })
          const remaining: Array<number> = []
          for (let i = 0; i < 3; i++) remaining.push((yield* consume).remaining)
          assert.deepStrictEqual(remaining, [2, 1, 0])
          const error = yield* Effect.flip(consume)
          assert.strictEqual(error.reason._tag, "RateLimitExceeded")
          // Another key has its own window.
          assert.strictEqual(
            (yield* limiter.consume({ key: "user-2", limit: 3, window: "1 minute", onExceeded: "fail" })).remaining,
            2
          )
          assert.strictEqual(yield* Effect.promise(() => raw.get(`${prefix}user-1`)), "3")
          // The token bucket runs its own script on the same service.
          const bucket = limiter.consume({
            key: "bucket",
            algorithm: "token-bucket",
            limit: 2,
            window: "1 minute",
            onExceeded: "fail"
          })
          yield* bucket
          yield* bucket
          assert.strictEqual((yield* Effect.flip(bucket)).reason._tag, "RateLimitExceeded")
        }).pipe(
          Effect.provide(
            RateLimiter.layer.pipe(
              Layer.provide(RateLimiter.layerStoreRedis({ prefix })),
              Layer.provide(Redis.layerEffectRedis(raw))
            )
          )
        )
      }))
  })
})

describe("the locks and Effect's stores on ONE ioredis client", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    const lockAndQueue = (raw: IORedis, name: string) =>
      Effect.gen(function*() {
        const lockPrefix = RedisTest.uniquePrefix("one")
        const definition = yield* LockOptions.make({ lock: "until_executed", lockPrefix })
        const digest = `${lockPrefix}:d1`
        yield* Lock.lock(definition, { digest, jid: "jid-1" })
        const conflict = yield* Effect.flip(Lock.lock(definition, { digest, jid: "jid-2" }))
        assert.strictEqual(conflict._tag, "LockConflict")
        const queue = yield* PersistedQueue.make({ name: "one", schema: Task })
        yield* queue.offer(new Task({ n: 1 }), { id: "jid-1" })
        assert.strictEqual(yield* queue.take((task) => Effect.succeed(task.n)), 1)
        assert.isTrue(yield* Lock.unlock(definition, { digest, jid: "jid-1" }))
        // Every command above went over this one connection.
        assert.strictEqual(yield* connectionsNamed(raw, name), 1)
      })

    it.effect("layerFromClient + layerEffectRedis on a client the caller owns: one connection, left open", () =>
      Effect.gen(function*() {
        const name = `one-${process.pid}-a`
        const owned = yield* client({ connectionName: name })
        const prefix = `${RedisTest.uniquePrefix("pq")}:`
        const services = Layer.mergeAll(
          Redis.layerFromClient(owned),
          PersistedQueue.layer.pipe(
            Layer.provide(PersistedQueue.layerStoreRedis({ prefix, pollInterval: "20 millis" })),
            Layer.provide(Redis.layerEffectRedis(owned))
          )
        )
        yield* lockAndQueue(owned, name).pipe(Effect.provide(services))
        // The layers are closed; the client is the caller's, still open.
        assert.strictEqual(owned.status, "ready")
        assert.strictEqual(yield* Effect.promise(() => owned.ping()), "PONG")
      }))

    it.effect("layerWithEffectRedis: both services on the one connection it opens, closed with the layer", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const name = `one-${process.pid}-b`
        const prefix = `${RedisTest.uniquePrefix("pq")}:`
        const services = Redis.layerWithEffectRedis({ url: source.url, client: { connectionName: name } })
        const app = Layer.mergeAll(
          services,
          PersistedQueue.layer.pipe(
            Layer.provide(PersistedQueue.layerStoreRedis({ prefix, pollInterval: "20 millis" })),
            Layer.provide(services)
          )
        )
        yield* lockAndQueue(raw, name).pipe(Effect.provide(app))
        assert.strictEqual(yield* connectionsNamed(raw, name), 0, "closed with the layer")
      }))

    it.effect("layerWithEffectRedis: a Redis that never answers fails with RedisError connect within the timeout", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(
          Effect.provide(Effect.void, Redis.layerWithEffectRedis({ url: "redis://127.0.0.1:1", timeout: 300 }))
        )
        assert.strictEqual(error.operation, "connect")
        assert.include(error.reason, "within 300ms")
      }))

    it.effect("layerWithEffectRedis: options that do not check fail before any connection", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(
          Effect.provide(Effect.void, Redis.layerWithEffectRedis({ timeout: 0 } as Redis.Options))
        )
        assert.strictEqual(error.operation, "options")
      }))
  })
})
