/**
 * Two taker processes (test/support/persistedQueueWorker.ts) on Effect's `PersistedQueue` Redis store, one private
 * redis-server, 1,000 offers of 50 digests (slow tier):
 *
 * - through the adapter under `while_executing` (`log`): never two runs of one digest at once, in Redis' own order
 *   across both processes; none lost (every offered job ran, or was refused as a duplicate at its run, counted); no
 *   lock left;
 * - the same workload with `PersistedQueue`'s own `deduplicate: "untilExecuted"` alone, keyed as the adapter keys its
 *   offers (by job): overlapping runs of one digest, counted; and keyed by the digest: no overlap, and the offers that
 *   met an element of their digest still to run were ignored, counted (the offer says nothing: it answers the id).
 *
 * The numbers are printed; the bare variants' counts are what they are, asserted only where they cannot be otherwise.
 *
 * And a taker process SIGKILLed mid-job: the store gives the element to another taker once its lock lapses, which
 * meets the run lock its first copy still holds (its lease outlives the store's lock): the copy is not dropped as a
 * duplicate (`log`) but retried, and runs once the lease has ended; nothing is left.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as PersistedQueue from "effect/persistence/PersistedQueue"
import type * as Scope from "effect/Scope"
import * as UniquePersistedQueue from "../src/adapters/PersistedQueue.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as Redis from "../src/Redis.js"
import { until } from "./support/bullmq.js"
import * as PQ from "./support/persistedQueue.js"
import { type Config, defineJob, storeOptions, Work } from "./support/persistedQueueWorker.js"
import * as RedisTest from "./support/redis.js"

const OFFERS = 1_000
const DIGESTS = 50
const PROCESSES = 2
const CONCURRENCY = 4
const PERFORM_MS = 20

const script = fileURLToPath(new URL("./support/persistedQueueWorker.ts", import.meta.url))

/** A taker process, once it said `ready` (READY by default); stopped (STOP, then SIGKILL after 30 s) with the scope. */
const startTaker = (config: Config, ready = "READY"): Effect.Effect<ChildProcess, Error, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.callback<ChildProcess, Error>((resume) => {
      const child = spawn(process.execPath, ["--import", "tsx", script, JSON.stringify(config)], {
        stdio: ["pipe", "pipe", "inherit"]
      })
      let out = ""
      child.stdout!.on("data", (data) => {
        out += String(data)
        if (out.includes(ready)) resume(Effect.succeed(child))
      })
      child.on("exit", (code) => resume(Effect.fail(new Error(`taker exited with ${code} before it was ready`))))
    }),
    (child) =>
      Effect.callback<void>((resume) => {
        if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
        const killer = setTimeout(() => child.kill("SIGKILL"), 30_000)
        child.on("exit", () => {
          clearTimeout(killer)
          resume(Effect.void)
        })
        child.stdin!.end("STOP\n")
      })
  )

// The digest of each offer: drawn from 50 by a seeded xorshift32, so that one digest's jobs often sit side by side in
// the queue and meet on the two takers (eight runs at once: two of one digest among them about half the time).
const digests: ReadonlyArray<number> = (() => {
  let state = 20261207
  return Array.from({ length: OFFERS }, () => {
    state ^= state << 13
    state ^= state >>> 17
    state ^= state << 5
    return (state >>> 0) % DIGESTS
  })
})()
const digestOf = (i: number) => digests[i]!

interface Counted {
  readonly runs: number
  readonly overlaps: number
  readonly digestsOverlapping: number
  readonly ran: number
  readonly skipped: number
}

const countRuns = (prefix: string) =>
  Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
    Effect.promise(async () => {
      const lines = await raw.lrange(`${prefix}:runs`, 0, -1)
      const byDigest = new Map<number, Array<readonly [number, number]>>()
      for (const line of lines) {
        const [digest, start, end] = line.split(" ").map(Number) as [number, number, number]
        const runs = byDigest.get(digest) ?? []
        runs.push([start, end])
        byDigest.set(digest, runs)
      }
      let overlaps = 0
      let digestsOverlapping = 0
      for (const runs of byDigest.values()) {
        runs.sort((a, b) => a[0] - b[0])
        let end = -Infinity
        let here = 0
        for (const [s, e] of runs) {
          if (s < end) here++
          end = Math.max(end, e)
        }
        overlaps += here
        if (here > 0) digestsOverlapping++
      }
      const [ran, skipped] = await Promise.all([raw.get(`${prefix}:ran`), raw.get(`${prefix}:skipped`)])
      return { runs: lines.length, overlaps, digestsOverlapping, ran: Number(ran ?? 0), skipped: Number(skipped ?? 0) } satisfies Counted
    }))

const counter = (prefix: string, what: "ran" | "skipped") =>
  Effect.flatMap(RedisTest.TestRedis, ({ raw }) => Effect.promise(async () => Number((await raw.get(`${prefix}:${what}`)) ?? 0)))

// The store's ids still to run (score 1e15): 0 once every stored element ended.
const inFlight = (storePrefix: string, name: string) =>
  Effect.flatMap(RedisTest.TestRedis, ({ raw }) => Effect.promise(() => raw.zcount(`${storePrefix}${name}:ids`, 1e15, 1e15)))

const services = Layer.merge(RedisTest.layer(), PQ.layerEffectRedis.pipe(Layer.provide(RedisTest.layerServer)))

describe("PersistedQueue race: two taker processes, 1,000 offers of 50 digests", () => {
  layer(services, { excludeTestServices: true })((it) => {
    const configOf = (mode: Config["mode"]) =>
      Effect.map(RedisTest.TestRedis, ({ source }): Config => ({
        mode,
        url: source.url,
        prefix: RedisTest.uniquePrefix(`race-${mode}`),
        storePrefix: `${RedisTest.uniquePrefix("raceq")}:`,
        lockPrefix: RedisTest.uniquePrefix("racelock"),
        name: "race",
        concurrency: CONCURRENCY,
        performMs: PERFORM_MS
      }))

    // The producer: this process, on the same store and (for the adapter) the same lock prefix.
    const factoryOf = (config: Config) =>
      Effect.flatMap(Effect.scope, (scope) =>
        Layer.buildWithScope(
          PersistedQueue.layer.pipe(Layer.provide(PersistedQueue.layerStoreRedis(storeOptions(config)))),
          scope
        ))

    it.effect("through the adapter, while_executing: never two runs of a digest at once, none lost, no lock left", () =>
      Effect.gen(function*() {
        const config = yield* configOf("adapter")
        const factory = yield* factoryOf(config)
        const adapter = yield* UniquePersistedQueue.make({
          name: config.name,
          presence: UniquePersistedQueue.presenceRedis({ prefix: config.storePrefix })
        }).pipe(Effect.provideContext(factory))
        const job = defineJob(config)
        yield* Effect.forEach(Array.from({ length: PROCESSES }), () => startTaker(config), { concurrency: "unbounded" })
        const outcomes = yield* Effect.forEach(
          Array.from({ length: OFFERS }, (_, i) => digestOf(i)),
          (digest) => job.enqueue([digest]).pipe(Effect.provideService(JobQueue, adapter)),
          { concurrency: 8 }
        )
        assert.isTrue(outcomes.every((o) => o._tag === "Enqueued"), "while_executing locks nothing at enqueue")
        const done = yield* until(
          Effect.map(
            Effect.all([counter(config.prefix, "ran"), counter(config.prefix, "skipped")]),
            ([ran, skipped]) => ran + skipped >= OFFERS
          ),
          600_000
        )
        assert.isTrue(done, "every offer ended")
        const counted = yield* countRuns(config.prefix)
        console.log(`PersistedQueue race, adapter (while_executing, log): ${JSON.stringify(counted)}`)
        assert.strictEqual(counted.overlaps, 0, "never two runs of one digest at once")
        assert.strictEqual(counted.ran + counted.skipped, OFFERS, "none lost: every offer ran or was refused")
        assert.strictEqual(counted.runs, counted.ran)
        assert.isAtLeast(counted.ran, new Set(digests).size, "every digest ran")
        assert.isAbove(counted.skipped, 0, "runs of one digest met: the later one was refused")
        // Nothing left: no run lock held, no key without a TTL, every element ended.
        const lockDigests = yield* Effect.forEach(Array.from({ length: DIGESTS }, (_, d) => d), (d) => job.digest([d]))
        const held = yield* Effect.flatMap(Redis.RedisService, (redis) =>
          Effect.forEach(lockDigests, (digest) => redis.holders(Lock.keyOf(job.definition, digest, "run"))))
        assert.deepStrictEqual(held.flat(), [])
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(config.lockPrefix), [])
        assert.strictEqual(yield* inFlight(config.storePrefix, config.name), 0)
        assert.deepStrictEqual(
          yield* adapter.exists(outcomes.map((o) => o.job)),
          outcomes.map(() => "gone")
        )
      }), 900_000)

    for (const keyed of ["job", "digest"] as const) {
      it.effect(`PersistedQueue alone, deduplicate "untilExecuted" keyed by ${keyed}: counted`, () =>
        Effect.gen(function*() {
          const config = yield* configOf("bare")
          const factory = yield* factoryOf(config)
          const queue = yield* PersistedQueue.make({ name: config.name, schema: Work }).pipe(Effect.provideContext(factory))
          yield* Effect.forEach(Array.from({ length: PROCESSES }), () => startTaker(config), { concurrency: "unbounded" })
          yield* Effect.forEach(
            Array.from({ length: OFFERS }, (_, n) => n),
            (n) =>
              queue.offer({ digest: digestOf(n), n }, {
                id: keyed === "job" ? `job-${n}` : `digest-${digestOf(n)}`,
                deduplicate: "untilExecuted"
              }),
            { concurrency: 8 }
          )
          // Drained: nothing stored is still to run, and the count has stopped moving.
          let last = -1
          const drained = yield* until(
            Effect.gen(function*() {
              const ran = yield* counter(config.prefix, "ran")
              const left = yield* inFlight(config.storePrefix, config.name)
              const settled = left === 0 && ran === last
              last = ran
              return settled
            }),
            600_000
          )
          assert.isTrue(drained)
          const counted = yield* countRuns(config.prefix)
          const ignored = OFFERS - counted.ran
          console.log(
            `PersistedQueue race, bare untilExecuted keyed by ${keyed}: ${JSON.stringify({ ...counted, ignored })}`
          )
          if (keyed === "job") {
            // Every offer is its own id: nothing is deduplicated, and one digest's work runs on both takers at once.
            assert.strictEqual(counted.ran, OFFERS)
            assert.isAbove(counted.overlaps, 0, "without a run lock, runs of one digest overlap")
          } else {
            // One element per digest at a time: no overlap, and the offers meeting one still to run were dropped.
            assert.strictEqual(counted.overlaps, 0)
            assert.isAbove(ignored, 0, "offers of a digest still to run were ignored, and the offer did not say")
          }
        }), 900_000)
    }
  })
})

describe("PersistedQueue: a taker process killed mid-job", () => {
  layer(services, { excludeTestServices: true })((it) => {
    it.effect("the element comes back once the store's lock lapses, waits out its first copy's run lock, runs once", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const config: Config = {
          mode: "hold",
          url: source.url,
          prefix: RedisTest.uniquePrefix("killed"),
          storePrefix: `${RedisTest.uniquePrefix("killedq")}:`,
          lockPrefix: RedisTest.uniquePrefix("killedlock"),
          name: "killed",
          concurrency: 1,
          performMs: 0,
          lockLease: 4_000,
          storeLock: { expiration: 1_000, refresh: 250 }
        }
        const factory = yield* Effect.flatMap(Effect.scope, (scope) =>
          Layer.buildWithScope(
            PersistedQueue.layer.pipe(Layer.provide(PersistedQueue.layerStoreRedis(storeOptions(config)))),
            scope
          ))
        const adapter = yield* UniquePersistedQueue.make({
          name: config.name,
          presence: UniquePersistedQueue.presenceRedis({ prefix: config.storePrefix }),
          maxAttempts: 20,
          retrySchedule: Schedule.spaced("1 second")
        }).pipe(Effect.provideContext(factory))
        const job = defineJob(config)
        const enqueued = yield* job.enqueue([1]).pipe(Effect.provideService(JobQueue, adapter))
        const first = yield* startTaker(config, "STARTED")
        first.kill("SIGKILL")
        const digest = enqueued.job.lockDigest!
        assert.deepStrictEqual(
          yield* Effect.flatMap(Redis.RedisService, (redis) => redis.holders(Lock.keyOf(job.definition, digest, "run"))).pipe(
            Effect.map((hs) => hs.map((h) => h.jid))
          ),
          [enqueued.job.jid],
          "the killed copy still holds the run lock"
        )
        const runs = yield* Ref.make<ReadonlyArray<number>>([])
        yield* UniquePersistedQueue.worker(job, (_, __, j) => Ref.update(runs, (xs) => [...xs, j.retryCount ?? -1])).pipe(
          Effect.provideService(JobQueue, adapter),
          Effect.provideService(UniquePersistedQueue.UniquePersistedQueue, adapter)
        )
        assert.isTrue(
          yield* until(Effect.map(adapter.exists([enqueued.job]), ([p]) => p === "gone"), 120_000),
          "it ran, and is gone"
        )
        const stats = yield* adapter.stats
        console.log(`PersistedQueue, a taker killed mid-job: ${JSON.stringify({ runs: yield* Ref.get(runs), ...stats })}`)
        assert.strictEqual((yield* Ref.get(runs)).length, 1, "ran once, after the first copy's lease")
        assert.strictEqual(stats.skipped, 0, "never dropped as a duplicate of itself")
        assert.deepStrictEqual(
          yield* Effect.flatMap(Redis.RedisService, (redis) => redis.holders(Lock.keyOf(job.definition, digest, "run"))),
          []
        )
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(config.lockPrefix), [])
      }), 300_000)
  })
})
