/**
 * Run locks across processes, with real Redis: a redelivered jid meets its still-running original as a conflict; a
 * holder SIGSTOPped past its lease, or cut off from Redis by a partition, ends `LockLost` (never `Performed`) and is
 * interrupted before another process can take the lock (overlap 0, with the default lease and with a 60 s one);
 * the later holder's fencing token is greater. After each, no key is left without a TTL but the documented ones.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Lock from "../src/Lock.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as Proxy from "./support/proxy.js"
import * as RedisTest from "./support/redis.js"
import * as Workers from "./support/workers.js"

const WORKER = "LeaseJob"

/** A worker process holding `jid`'s run lock in a perform that never ends by itself. */
const holder = (options: {
  readonly url: string
  readonly prefix: string
  readonly jid: string
  readonly lockLease?: number | undefined
}) =>
  Effect.gen(function*() {
    const proc = yield* Workers.spawnProcess
    const run = yield* Workers.prepare(proc, {
      mode: "hold",
      holdLock: "while_executing",
      url: options.url,
      prefix: options.prefix,
      worker: WORKER,
      digests: 1,
      lockLease: options.lockLease,
      fibers: 1,
      concurrency: 1,
      target: 1,
      maxMs: 240_000,
      timeout: 2_000,
      jid: options.jid,
      seed: 1
    })
    yield* run.go
    const started = yield* run.started
    const uj = yield* UniqueJob.make({
      worker: WORKER,
      lock: "while_executing",
      lockLease: options.lockLease,
      lockPrefix: options.prefix
    })
    const [entry] = yield* Effect.flatMap(Redis.RedisService, (redis) =>
      redis.holders(Lock.keyOf(uj.definition, started.digest, "run")))
    assert.strictEqual(entry?.jid, options.jid)
    return { proc, run, started, uj, fence: entry!.fence }
  })

/** How the held run ended: the server failure's text, and when its perform was interrupted (the worker's clock). */
const ending = (run: Effect.Success<ReturnType<typeof holder>>["run"]) =>
  Effect.zipWith(run.stopped, Effect.result(run.result), (at, result) => ({
    at,
    text: result._tag === "Failure" ? result.failure.message : `RESULT ${JSON.stringify(result.success)}`
  }))

/** Polls for the digest's run lock from this process until it is taken; the send time of the call that took it. */
const takeOver = (uj: UniqueJob.UniqueJob, digest: string, jid: string, everyMs: number) =>
  Effect.gen(function*() {
    for (;;) {
      const sentAt = Date.now()
      const attempt = yield* Effect.result(Lock.lock(uj.definition, { digest, jid, phase: "run" }))
      if (attempt._tag === "Success") return { sentAt, fence: attempt.success.fence }
      assert.strictEqual(attempt.failure._tag, "LockConflict")
      yield* Effect.sleep(everyMs)
    }
  })

describe("run locks across processes", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("a redelivered jid conflicts while its original runs in another process; runs after the original dies", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("redeliver")
        // Leases of seconds: the holder process must keep its lock through a stall of a busy machine.
        const original = yield* holder({ url: source.url, prefix, jid: "redelivered-jid", lockLease: 4_000 })
        const copy = original.started.job
        // log: the copy is skipped, not run beside its original.
        assert.strictEqual((yield* original.uj.server(copy, Effect.succeed("ran")))._tag, "Skipped")
        const raising = yield* UniqueJob.make({
          worker: WORKER,
          lock: "while_executing",
          lockLease: 4_000,
          lockPrefix: prefix,
          onConflict: "raise"
        })
        const conflict = yield* Effect.flip(raising.server(copy, Effect.succeed("ran")))
        assert.strictEqual(conflict._tag, "ExecutionConflict")
        // The skipped copy's release freed nothing: the original still holds its lock.
        assert.strictEqual(
          (yield* Effect.flip(Lock.lock(original.uj.definition, {
            digest: original.started.digest,
            jid: "other",
            phase: "run"
          })))._tag,
          "LockConflict"
        )
        // The original dies; once its lease has passed the copy runs, with a greater fencing token.
        yield* original.proc.kill("SIGKILL")
        let performed: { fence: number | undefined } | undefined
        while (performed === undefined) {
          const attempt = yield* Effect.result(
            raising.server(copy, (running) => Effect.succeed({ fence: running.fence }))
          )
          if (attempt._tag === "Success" && attempt.success._tag === "Performed") performed = attempt.success.value
          else yield* Effect.sleep(50)
        }
        assert.isAbove(performed.fence ?? 0, original.fence)
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
      }).pipe(Effect.provide(MemoryQueue.layer()), Effect.scoped), { timeout: 60_000 })

    it.effect("a holder SIGSTOPped past its lease ends LockLost, never Performed; the next holder's token is greater", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("sigstop")
        const stalled = yield* holder({ url: source.url, prefix, jid: "stalled", lockLease: 3_000 })
        yield* stalled.proc.kill("SIGSTOP")
        const taken = yield* takeOver(stalled.uj, stalled.started.digest, "next", 50)
        assert.isAbove(taken.fence, stalled.fence)
        yield* stalled.proc.kill("SIGCONT")
        const end = yield* ending(stalled.run)
        assert.match(end.text, /LockLost/, "the stalled holder learns it lost its lock")
        // Its release must not have freed the new holder's lock.
        const [entry] = yield* Effect.flatMap(Redis.RedisService, (redis) =>
          redis.holders(Lock.keyOf(stalled.uj.definition, stalled.started.digest, "run")))
        assert.strictEqual(entry?.jid, "next")
        assert.strictEqual(entry?.fence, taken.fence)
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
      }).pipe(Effect.scoped), { timeout: 60_000 })

    it.effect("a holder cut off by a partition is interrupted with LockLost before another process takes the lock " +
      "(default lease and 60 s): overlap 0, greater token", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const partitioned = (lockLease: number | undefined) =>
          Effect.gen(function*() {
            const prefix = RedisTest.uniquePrefix("partition")
            const proxy = yield* Proxy.start(source.url)
            const cutOff = yield* holder({ url: proxy.url, prefix, jid: "cut-off", lockLease })
            yield* proxy.cut
            const [end, taken] = yield* Effect.all([
              ending(cutOff.run),
              takeOver(cutOff.uj, cutOff.started.digest, "next", 100)
            ], { concurrency: "unbounded" })
            assert.match(end.text, /LockLost/)
            assert.match(end.text, /no renewal was confirmed before its lease ended/)
            const overlapMs = Math.max(0, end.at - taken.sentAt)
            assert.strictEqual(overlapMs, 0, `the cut-off holder still ran ${overlapMs} ms after the lock was taken`)
            assert.isAbove(taken.fence, cutOff.fence)
            assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
            return { lockLease: lockLease ?? 30_000, marginMs: taken.sentAt - end.at }
          })
        const results = yield* Effect.all([partitioned(undefined), partitioned(60_000)], { concurrency: "unbounded" })
        for (const r of results) {
          console.info(`partition, lease ${r.lockLease} ms: holder interrupted ${r.marginMs} ms before the takeover`)
        }
      }).pipe(Effect.scoped), { timeout: 180_000 })
  })
})
