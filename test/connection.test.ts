/**
 * Connecting, configuring and losing the connection (issue 8, items 11-13), each against a private redis-server:
 * - a database out of range fails at connect instead of silently using db 0;
 * - a missing REDIS_URL says what to set, and the url stays redacted;
 * - while the connection is known to be down, every call fails at once (also one in flight when it closed), naming
 *   the connection's state, and works again after a restart.
 */
import { assert, describe, it } from "@effect/vitest"
import { Redis as IORedis } from "ioredis"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as Proxy from "./support/proxy.js"
import * as RedisTest from "./support/redis.js"

/** A raw connection for setting the server up and checking what it holds. */
const rawClient = (url: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new IORedis(url, {
        lazyConnect: true,
        maxRetriesPerRequest: 1,
        // A spin cut off by a kill would otherwise be sent again to the restarted server, and keep it busy.
        autoResendUnfulfilledCommands: false
      })
      client.on("error", () => {}) // the server is killed under it
      await client.connect()
      return client
    }),
    (client) => Effect.sync(() => client.disconnect())
  )

/**
 * Keeps the server busy for 10 seconds: calls sent meanwhile wait for their answer. The tests need it for well under a
 * second (they kill the server, or time out, long before it ends); the rest is margin for a busy machine.
 */
const spin = "local t = redis.call('TIME')[1] + 10 while tonumber(redis.call('TIME')[1]) < t do end"

/**
 * Starts the spin on `raw`'s server. A script past the busy threshold (default 5 s) gets other clients' calls answered
 * with BUSY instead of waiting: raise it so that every call waits for the whole spin.
 */
const startSpin = (raw: IORedis) =>
  Effect.promise(() => raw.config("SET", "lua-time-limit", "60000")).pipe(
    Effect.andThen(Effect.sync(() => {
      raw.eval(spin, 0).catch(() => {})
    }))
  )

const connectError = (options: Redis.Options) =>
  Effect.scoped(Effect.flip(Redis.make({ timeout: "5 seconds", ...options })))

describe("connect: the database", () => {
  it.live("a database out of range fails at connect, saying what the server has", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      const error = yield* connectError({ url: `${server.url}/99` })
      assert.strictEqual(error._tag, "RedisError")
      assert.strictEqual(error.operation, "connect")
      // redis-server's default: 16 databases.
      assert.include(error.reason, "database 99 is out of range: this server has databases 0 to 15")
    }), 30_000)

  it.live("without CONFIG rights the SELECT error is reported", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      const raw = yield* rawClient(server.url)
      yield* Effect.promise(() => raw.call("ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "+@all", "-config"))
      const error = yield* connectError({ url: `redis://noconfig:pw@127.0.0.1:${server.port}/99` })
      assert.strictEqual(error.operation, "connect")
      assert.match(error.reason, /^cannot select database 99: .*out of range/i)
    }), 30_000)

  it.live("a database that is not a number fails at connect", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      const error = yield* connectError({ url: `${server.url}/abc` })
      assert.strictEqual(error.operation, "connect")
      assert.include(error.reason, "is not a whole number")
    }), 30_000)

  it.live("a database in range is the one written to", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      const raw = yield* rawClient(`${server.url}/7`)
      const prefix = RedisTest.uniquePrefix("db")
      const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
      const digest = yield* Lock.digest(definition, { worker: "W", queue: "q", args: [1] })
      yield* Lock.lock(definition, { digest, jid: "j1" }).pipe(
        Effect.provide(Layer.fresh(Redis.layer({ url: `${server.url}/7` })))
      )
      assert.strictEqual(yield* Effect.promise(() => raw.exists(`${digest}:LOCKED`)), 1)
    }), 30_000)
})

describe("layerConfig", () => {
  const buildWith = (env: ReadonlyArray<readonly [string, string]>) =>
    Effect.scoped(Layer.build(Redis.layerConfig())).pipe(
      Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: Object.fromEntries(env) }))
    )

  it.effect("REDIS_URL unset: a ConfigError that says what to set", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(buildWith([]))
      assert.strictEqual(error._tag, "ConfigError")
      const text = String(error)
      assert.include(text, "REDIS_URL is not set: set it to redis://host:port[/db] (or pass Redis.layer({ url }))")
      assert.notInclude(text, "<redacted>")
      // Told apart from a Redis failure by its tag.
      const caught = yield* buildWith([]).pipe(
        Effect.as("built"),
        Effect.catchTag("RedisError", () => Effect.succeed("RedisError")),
        Effect.catchTag("ConfigError", () => Effect.succeed("ConfigError"))
      )
      assert.strictEqual(caught, "ConfigError")
    }))

  it.live("REDIS_URL set: connects, and a failure does not show the password", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      yield* buildWith([["REDIS_URL", server.url]])
      const error = yield* Effect.flip(buildWith([["REDIS_URL", `redis://someone:s3cr3t@127.0.0.1:${server.port}`]]))
      assert.strictEqual(error._tag, "RedisError")
      if (error._tag === "RedisError") assert.strictEqual(error.operation, "connect")
      assert.notInclude(String(error), "s3cr3t")
      assert.notInclude(JSON.stringify(error), "s3cr3t")
    }), 30_000)
})

describe("an outage", () => {
  // Long enough that a call which waits for it is told apart from one that fails at once on any machine.
  const timeout = Duration.seconds(10)
  const fast = Duration.toMillis(timeout) / 2

  const setup = Effect.gen(function*() {
    const server = yield* RedisServer.start
    const redis = yield* Redis.make({ url: server.url, timeout })
    const prefix = RedisTest.uniquePrefix("outage")
    const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
    let n = 0
    const lock = Effect.suspend(() =>
      Effect.flatMap(
        Lock.digest(definition, { worker: "W", queue: "q", args: [++n] }),
        (digest) => Lock.lock(definition, { digest, jid: `j${n}` })
      )
    ).pipe(Effect.provideService(Redis.RedisService, redis))
    /** How long a lock call takes to fail, and its error. */
    const failing = Effect.gen(function*() {
      const start = Date.now()
      const error = yield* Effect.flip(lock)
      return { ms: Date.now() - start, error }
    })
    return { server, lock, failing }
  })

  it.live("a lock call made while the server is down fails at once, naming the connection state", () =>
    Effect.gen(function*() {
      const { failing, lock, server } = yield* setup
      yield* lock
      yield* server.kill
      for (let i = 0; i < 5; i++) {
        const { error, ms } = yield* failing
        assert.strictEqual(error._tag, "RedisError")
        assert.isBelow(ms, fast, `call ${i} waited for the timeout`)
        // The first call may still go out on the dying socket before ioredis handles its close.
        assert.match(
          error.message,
          /not connected to Redis \(connection \w+\)|the connection to Redis closed before it answered \(connection \w+\)/
        )
        yield* Effect.sleep(200)
      }
      yield* server.restart
      // Works again once ioredis has reconnected.
      yield* lock.pipe(Effect.retry({ schedule: Schedule.spaced(100), times: 100 }))
    }), 60_000)

  it.live("a lock call in flight when the server dies fails at once, not after the timeout", () =>
    Effect.gen(function*() {
      const { failing, lock, server } = yield* setup
      yield* lock
      // Keep the server busy (a script that spins for 10 s) so that the next call is sent and waits for its answer.
      const raw = yield* rawClient(server.url)
      yield* startSpin(raw)
      yield* Effect.sleep(300)
      const call = yield* Effect.forkChild(failing)
      yield* Effect.sleep(300)
      const killedAt = Date.now()
      yield* server.kill
      const { error } = yield* Fiber.await(call).pipe(Effect.flatten)
      const afterKill = Date.now() - killedAt
      assert.strictEqual(error._tag, "RedisError")
      assert.isBelow(afterKill, fast, "the call waited for the timeout after the connection closed")
      assert.include(error.message, "the connection to Redis closed before it answered")
      yield* server.restart
      yield* lock.pipe(Effect.retry({ schedule: Schedule.spaced(100), times: 100 }))
    }), 60_000)

  it.live("a call the server is slow to answer still gets the whole timeout (the socket is open)", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      const redis = yield* Redis.make({ url: server.url, timeout: "1 second" })
      const raw = yield* rawClient(server.url)
      yield* startSpin(raw)
      yield* Effect.sleep(300)
      const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: RedisTest.uniquePrefix("slow") })
      const digest = yield* Lock.digest(definition, { worker: "W", queue: "q", args: [1] })
      const result = yield* Effect.result(
        Lock.lock(definition, { digest, jid: "j1" }).pipe(Effect.provideService(Redis.RedisService, redis))
      )
      assert.isTrue(Result.isFailure(result))
      // Our deadline and ioredis' commandTimeout are both the timeout: whichever fires first says so.
      if (Result.isFailure(result)) assert.match(result.failure.message, /no answer within|Command timed out/)
    }), 60_000)
})

describe("connect: the first attempt is retried within the timeout (issue 18, item 13)", () => {
  it.live("a worker started while Redis is down connects once Redis is up", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      yield* server.kill
      const store = yield* Effect.forkChild(Redis.make({ url: server.url, timeout: "20 seconds" }))
      yield* Effect.sleep(1000)
      yield* server.restart
      const redis = yield* Fiber.await(store).pipe(Effect.flatten)
      const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: RedisTest.uniquePrefix("late") })
      const digest = yield* Lock.digest(definition, { worker: "W", queue: "q", args: [1] })
      const taken = yield* Lock.lock(definition, { digest, jid: "j1" }).pipe(
        Effect.provideService(Redis.RedisService, redis)
      )
      assert.strictEqual(taken.jid, "j1")
    }), 60_000)

  it.live("a worker started while Redis is stalled connects once Redis answers", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      const raw = yield* rawClient(server.url)
      yield* Effect.promise(() => raw.config("SET", "lua-time-limit", "60000"))
      raw.eval(
        `local t = redis.call('TIME') local e = t[1] * 1000000 + t[2] + 1500000
         while true do local n = redis.call('TIME') if n[1] * 1000000 + n[2] > e then break end end`,
        0
      ).catch(() => {})
      yield* Effect.sleep(100)
      const redis = yield* Redis.make({ url: server.url, timeout: "20 seconds" })
      const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: RedisTest.uniquePrefix("stall") })
      const digest = yield* Lock.digest(definition, { worker: "W", queue: "q", args: [1] })
      const taken = yield* Lock.lock(definition, { digest, jid: "j1" }).pipe(
        Effect.provideService(Redis.RedisService, redis)
      )
      assert.strictEqual(taken.jid, "j1")
    }), 60_000)

  it.live("no Redis within the timeout: a RedisError naming the timeout and the last error", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      yield* server.kill
      const error = yield* connectError({ url: server.url, timeout: "1 second" })
      assert.strictEqual(error.operation, "connect")
      assert.include(error.message, "no connection within 1s")
      assert.include(error.message, "ECONNREFUSED")
    }), 60_000)

  it.live("a refusal that retrying cannot change (a wrong password) fails at once, not at the timeout", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      const url = `redis://someone:wrong@127.0.0.1:${server.port}`
      const error = yield* connectError({ url, timeout: "60 seconds" })
      assert.strictEqual(error.operation, "connect")
      assert.include(error.message, "cannot reach Redis")
      assert.notInclude(error.message, "no connection within")
    }), 60_000)
})

describe("a partition (the connection open, nothing answering)", () => {
  // Every call ends by its deadline; QUIT at close, which has none of ours, by ioredis' command timeout (without it, a
  // close inside the layer's release would wait for an answer that never comes).
  it.live("a held run lock ends LockLost, its release ends by its deadline, and the store's layer closes", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.start
      const proxy = yield* Proxy.start(server.url)
      const definition = LockOptions.unsafeMake({
        lock: "while_executing",
        lockLease: 3000,
        lockPrefix: RedisTest.uniquePrefix("partition")
      })
      const scope = yield* Scope.make()
      const redis = yield* Layer.buildWithScope(Redis.layer({ url: proxy.url, timeout: "1 second" }), scope)
      const held = yield* Effect.result(
        Lock.withLock(Effect.andThen(proxy.cut, Effect.never), definition, { digest: `${definition.lockPrefix}:d`, jid: "j" })
      ).pipe(Effect.provide(redis))
      assert.isTrue(held._tag === "Failure" && held.failure._tag === "LockLost", JSON.stringify(held))
      // It ends (it hung before): well within the 10 s given, the store's timeout being 1 s.
      // Closed on a fiber of its own: a timeout interrupts the wait for it, not the close (which would be waited out).
      const closing = yield* Effect.forkDetach(Scope.close(scope, Exit.void))
      const closed = yield* Fiber.join(closing).pipe(Effect.timeout("10 seconds"), Effect.result)
      assert.strictEqual(closed._tag, "Success", "the layer closed")
    }), 30_000)
})

