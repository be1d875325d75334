/**
 * What the scripts leave in Redis: keys, TTLs, index scores. Checked with a separate raw connection.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisTest from "./support/redis.js"

const setup = (options: LockOptions.Options) =>
  Effect.map(LockOptions.make({ ...options, lockPrefix: RedisTest.uniquePrefix("r") }), (definition) => ({
    definition,
    digest: `${definition.lockPrefix}:ace64a5ce1899f22b3c3cb97985a733d`,
    index: `${definition.lockPrefix}:digests`
  }))

// Less the prefix's layout record: not a lock's key.
const keysUnder = (prefix: string) =>
  Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
    Effect.promise(async () => (await raw.keys(`${prefix}:*`)).filter((key) => key !== `${prefix}:layout`)))

const redisTime = Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
  Effect.promise(async () => {
    const [s, us] = await raw.time()
    return Number(s) * 1000 + Math.floor(Number(us) / 1000)
  }))

describe("Redis data model", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("a held lock is two keys: <digest>:LOCKED (jid -> metadata) and <prefix>:digests", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { definition, digest, index } = yield* setup({ lock: "until_executed" })
        const before = yield* redisTime
        yield* Lock.lock(definition, { digest, jid: "jid-1" })
        assert.deepStrictEqual((yield* keysUnder(definition.lockPrefix)).sort(), [`${digest}:LOCKED`, index].sort())
        assert.strictEqual(yield* Effect.promise(() => raw.type(`${digest}:LOCKED`)), "hash")
        const entry = JSON.parse((yield* Effect.promise(() => raw.hget(`${digest}:LOCKED`, "jid-1")))!)
        // A queue lock has no fencing token: its entry leaves "f" out.
        assert.deepStrictEqual(Object.keys(entry), ["t", "x", "l"])
        assert.isAtLeast(entry.t, before)
        // No TTL asked for: the key has none, and the index score is the lock time in ms.
        assert.strictEqual(yield* Effect.promise(() => raw.pttl(`${digest}:LOCKED`)), -1)
        assert.strictEqual(Number(yield* Effect.promise(() => raw.zscore(index, digest))), entry.t)
      }))

    it.effect("after the last release no key of the digest remains and the index has no member for it", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { definition, digest, index } = yield* setup({ lock: "until_and_while_executing", lockLimit: 2 })
        yield* Lock.lock(definition, { digest, jid: "a" })
        yield* Lock.lock(definition, { digest, jid: "b" })
        yield* Lock.handoff(definition, { digest, jid: "a" }, { keepQueueLock: true })
        assert.strictEqual(yield* Effect.promise(() => raw.zcard(index)), 2)
        yield* Lock.unlock(definition, { digest, jid: "b" })
        yield* Lock.unlock(definition, { digest, jid: "a", phase: "run" })
        // What stays is one key per prefix: the fencing counter (the last token handed out), so tokens keep rising.
        assert.deepStrictEqual(yield* keysUnder(definition.lockPrefix), [`${definition.lockPrefix}:fence`])
        assert.isNull(yield* Effect.promise(() => raw.zscore(index, digest)))
        assert.isNull(yield* Effect.promise(() => raw.zscore(index, `${digest}:RUN`)))
      }))

    it.effect("lockTtl 3 s: PTTL at most 3000 ms, index score = expiry in ms, another jid locks after expiry", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { definition, digest, index } = yield* setup({ lock: "until_expired", lockTtl: "3 seconds" })
        const before = yield* redisTime
        yield* Lock.lock(definition, { digest, jid: "a" })
        const after = yield* redisTime
        const pttl = yield* Effect.promise(() => raw.pttl(`${digest}:LOCKED`))
        assert.isAbove(pttl, 0)
        assert.isAtMost(pttl, 3000)
        const score = Number(yield* Effect.promise(() => raw.zscore(index, digest)))
        const entry = JSON.parse((yield* Effect.promise(() => raw.hget(`${digest}:LOCKED`, "a")))!)
        assert.strictEqual(score, entry.x)
        assert.strictEqual(entry.x, entry.t + 3000)
        assert.isAtLeast(score, before + 3000)
        assert.isAtMost(score, after + 3000)
        assert.isTrue(Result.isFailure(yield* Effect.result(Lock.lock(definition, { digest, jid: "b" }))))
        // 3 s leave a busy machine room for the steps above; then wait for the expiry itself.
        yield* Effect.sleep(Math.max(0, score - (yield* redisTime)) + 100)
        assert.strictEqual(yield* Effect.promise(() => raw.exists(`${digest}:LOCKED`)), 0)
        yield* Lock.lock(definition, { digest, jid: "b" })
        assert.deepStrictEqual(
          Object.keys(yield* Effect.promise(() => raw.hgetall(`${digest}:LOCKED`))),
          ["b"]
        )
      }))

    it.effect("a run lock's key lives by its lease: PTTL at most the lease, renewed forward", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { definition, digest } = yield* setup({ lock: "while_executing", lockLease: 2000 })
        const key = `${digest}:RUN:LOCKED`
        /** The entry's lease end and the key's expiry (Redis time + PTTL, read at once: PEXPIRETIME needs Redis 7). */
        const stored = Effect.promise(async () => ({
          leaseUntil: JSON.parse((await raw.hget(key, "a"))!).l as number,
          expiresAt: Number(
            await raw.eval(
              "local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000) + redis.call('PTTL', KEYS[1])",
              1,
              key
            )
          )
        }))
        yield* Lock.lock(definition, { digest, jid: "a" })
        const pttl = yield* Effect.promise(() => raw.pttl(key))
        assert.isAbove(pttl, 0)
        assert.isAtMost(pttl, 2000)
        const before = yield* stored
        // Redis time moves on by at least the sleep (however long it really takes): the renewed lease ends later, and
        // the key, which lives by it, with it.
        yield* Effect.sleep(200)
        yield* Lock.renew(definition, { digest, jid: "a" })
        const after = yield* stored
        assert.isAbove(after.leaseUntil, before.leaseUntil)
        assert.isAbove(after.expiresAt, before.expiresAt)
        assert.isAtMost(yield* Effect.promise(() => raw.pttl(key)), 2000)
      }))

    it.effect("a lock without expiry makes a shared key persistent; the TTL holder alone does not shorten it", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { definition: withTtl, digest } = yield* setup({ lock: "until_executed", lockLimit: 2, lockTtl: 5000 })
        const forever = { ...withTtl, lockTtl: (yield* LockOptions.make({ lock: "until_executed" })).lockTtl }
        yield* Lock.lock(withTtl, { digest, jid: "a" })
        assert.isAbove(yield* Effect.promise(() => raw.pttl(`${digest}:LOCKED`)), 0)
        yield* Lock.lock(forever, { digest, jid: "b" })
        assert.strictEqual(yield* Effect.promise(() => raw.pttl(`${digest}:LOCKED`)), -1)
      }))

    it.effect("SCRIPT FLUSH: scripts reload transparently", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { definition, digest } = yield* setup({ lock: "until_executed" })
        yield* Effect.promise(() => raw.script("FLUSH"))
        yield* Lock.lock(definition, { digest, jid: "a" })
        yield* Effect.promise(() => raw.script("FLUSH"))
        assert.isTrue(yield* Lock.unlock(definition, { digest, jid: "a" }))
      }))
  })
})

/** How many EVALSHA calls the server has run (INFO commandstats). */
const evalshaCalls = Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
  Effect.promise(async () => Number(/cmdstat_evalsha:calls=(\d+)/.exec(await raw.info("commandstats"))?.[1] ?? 0)))

describe("Redis batch renewal", () => {
  // A server of its own: no other test's script calls in the count.
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("renewAll: 300 holds in one script call, answered in order; a deleted entry answers false alone", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const redis = yield* Redis.RedisService
        const prefix = RedisTest.uniquePrefix("batch")
        const request = (jid: string) => ({ jid, limit: 1, ttlMs: 0, leaseMs: 5_000, info: "", fenced: true })
        const holds = yield* Effect.forEach(Array.from({ length: 300 }, (_, i) => i), (i) => {
          const lock: Redis.LockKey = { prefix, name: `${prefix}:d${i}:RUN` }
          return Effect.map(redis.lock(lock, request(`j${i}`)), (result) => {
            assert.strictEqual(result._tag, "Acquired")
            return { lock, jid: `j${i}`, fence: result._tag === "Acquired" ? result.fence : 0 }
          })
        })
        const keyOf = (i: number) => Redis.keysOf(holds[i]!.lock).locked
        const leaseOf = (i: number) =>
          Effect.promise(async () => JSON.parse((await raw.hget(keyOf(i), `j${i}`))!).l as number)
        const before = [yield* leaseOf(0), yield* leaseOf(299)]
        // Gone: one entry deleted; another acquisition's: one renewal with a token it never had.
        yield* Effect.promise(() => raw.hdel(keyOf(137), "j137"))
        const renewals = holds.map((hold, i) => ({
          ...hold,
          leaseMs: 60_000,
          fence: i === 42 ? hold.fence + 1 : hold.fence
        }))
        const calls = yield* evalshaCalls
        const renewed = yield* redis.renewAll(renewals)
        assert.strictEqual((yield* evalshaCalls) - calls, 1)
        assert.deepStrictEqual(renewed, holds.map((_, i) => i !== 137 && i !== 42))
        // The renewed leases moved by about the minute asked for, the refused one did not move, the deleted is gone.
        assert.isAbove(yield* leaseOf(0), before[0]! + 50_000)
        assert.isAbove(yield* leaseOf(299), before[1]! + 50_000)
        assert.isBelow(yield* leaseOf(42), before[0]! + 50_000)
        assert.isNull(yield* Effect.promise(() => raw.hget(keyOf(137), "j137")))
        assert.isAbove(yield* Effect.promise(() => raw.pttl(keyOf(299))), 50_000)
        // An empty batch makes no call.
        assert.deepStrictEqual(yield* redis.renewAll([]), [])
        assert.strictEqual((yield* evalshaCalls) - calls, 1)
      }))
  })
})

describe("Redis failures", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("a dead server fails calls with RedisError within the timeout, and they work after a restart", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const server = source.server
        if (server === undefined) return // REDIS_URL fallback: the server is not ours to kill
        const { definition, digest } = yield* setup({ lock: "until_executed" })
        yield* Effect.gen(function*() {
          yield* Lock.lock(definition, { digest, jid: "a" })
          yield* server.kill
          const error = yield* Effect.flip(Lock.lock(definition, { digest, jid: "b" }))
          assert.strictEqual(error._tag, "RedisError")
          yield* server.restart
          // ioredis reconnects on its own; the empty server takes the lock again.
          yield* Effect.retry(Lock.lock(definition, { digest, jid: "b" }), { schedule: Schedule.spaced(100), times: 100 })
        }).pipe(Effect.provide(Layer.fresh(Redis.layer({ url: source.url, timeout: 500 }))), Effect.timeout("20 seconds"))
      }))

    it.effect("a layer pointed at nothing fails to build with a RedisError", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(
          Effect.scoped(Layer.build(Redis.layer({ url: "redis://127.0.0.1:1", timeout: 300 })))
        )
        assert.strictEqual(error._tag, "RedisError")
        assert.strictEqual(error.operation, "connect")
      }))
  })
})

describe("a client that reads integers as text (ioredis' stringNumbers)", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("takes, re-enters, refuses, fences and releases as any client does", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const queue = yield* setup({ lock: "until_executed", lockTtl: "30 seconds" })
        const run = yield* setup({ lock: "while_executing" })
        yield* Effect.gen(function*() {
          const taken = yield* Lock.lock(queue.definition, { digest: queue.digest, jid: "-1" })
          assert.deepStrictEqual([taken.reentrant, taken.fence], [false, 0])
          const again = yield* Lock.lock(queue.definition, { digest: queue.digest, jid: "-1" })
          assert.deepStrictEqual([again.reentrant, again.fence], [true, 0])
          // A holder whose jid reads as a number is named as it is.
          const refused = yield* Effect.flip(Lock.lock(queue.definition, { digest: queue.digest, jid: "2" }))
          assert.strictEqual(refused._tag, "LockConflict")
          assert.deepStrictEqual(refused._tag === "LockConflict" ? refused.holders : [], ["-1"])
          const first = yield* Lock.lock(run.definition, { digest: run.digest, jid: "a", phase: "run" })
          assert.isAbove(first.fence, 0)
          assert.isTrue(yield* Lock.unlock(run.definition, { digest: run.digest, jid: "a", phase: "run", fence: first.fence }))
          const second = yield* Lock.lock(run.definition, { digest: run.digest, jid: "b", phase: "run" })
          assert.isAbove(second.fence, first.fence)
          assert.isTrue(yield* Lock.unlock(run.definition, { digest: run.digest, jid: "b", phase: "run", fence: second.fence }))
          assert.isTrue(yield* Lock.unlock(queue.definition, { digest: queue.digest, jid: "-1" }))
          assert.isFalse(yield* Lock.unlock(queue.definition, { digest: queue.digest, jid: "-1" }))
        }).pipe(Effect.provide(Layer.fresh(Redis.layer({ url: source.url, client: { stringNumbers: true } }))))
      }))
  })
})
