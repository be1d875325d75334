/**
 * Properties of the store's connection. The first connect (issue 18, item 13): a store built while its Redis is down
 * connects once Redis is up again, whenever that is within the connect timeout, and takes a lock; one whose Redis
 * never comes back fails with a `RedisError` naming the timeout, not earlier on the first refusal. Real redis-server
 * processes, killed and restarted. The client's options: a client that reads integers as text (ioredis'
 * `stringNumbers`) answers any sequence of lock calls as the default client does. The layout: stores of any layouts
 * on one prefix, one after the other: a lock is taken exactly by those configured as the first was, and the CLI reads
 * the layout recorded. The release signals: releases published while their connection was away are made up for once
 * it is back, and every job waiting on them runs.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=40 npx vitest run test/connection.properties.test.ts
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as fc from "fast-check"
import { Redis as IORedis } from "ioredis"
import * as Fiber from "effect/Fiber"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import { LayoutMismatch } from "../src/Errors.js"
import * as Layout from "../src/store/Layout.js"
import * as Waits from "../src/store/ReleaseWaits.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as UniqueJob from "../src/UniqueJob.js"
import { gated } from "./support/gated.js"
import * as Model from "./support/model.js"
import { runCli } from "./support/layout.js"
import * as RedisTest from "./support/redis.js"

/** Real-time polling of the test's own view, bounded. */
const until = (check: () => boolean | Promise<boolean>, what: string) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 20_000
    while (!(yield* Effect.promise(async () => await check()))) {
      if (Date.now() > deadline) assert.fail(`never: ${what}`)
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
    }
  })

describe("connect properties", () => {
  it.live("down for any time within the timeout: connected and locked once Redis is back; never back: the timeout", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(fc.integer({ min: 0, max: 1500 }), fc.boolean(), (downMs, comesBack) =>
          Effect.runPromise(Effect.scoped(Effect.gen(function*() {
            const server = yield* RedisServer.start
            yield* server.kill
            const timeout = comesBack ? "20 seconds" : "1 second"
            const store = yield* Effect.forkChild(Effect.result(Redis.make({ url: server.url, timeout })))
            yield* Effect.sleep(downMs)
            if (comesBack) yield* server.restart
            const built = yield* Fiber.join(store)
            if (!comesBack) {
              assert.isTrue(Result.isFailure(built), "no Redis, no store")
              if (Result.isFailure(built)) assert.include(built.failure.message, "no connection within 1s")
              return
            }
            assert.isTrue(Result.isSuccess(built), JSON.stringify(built))
            if (Result.isFailure(built)) return
            const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: RedisTest.uniquePrefix("conn") })
            const digest = yield* Lock.digest(definition, { worker: "W", queue: "q", args: [downMs] })
            const taken = yield* Lock.lock(definition, { digest, jid: "j1" }).pipe(
              Effect.provideService(Redis.RedisService, built.success)
            )
            assert.strictEqual(taken.jid, "j1")
          })))),
        { numRuns: Model.runs(6), examples: [[0, true], [1, true], [1500, true], [0, false]] }
      )
    ), 120_000)

  // Two stores on one server, the default client and a `stringNumbers` one, each under its own prefix, given the
  // same calls: queue and run locks of any limit, jids that read as numbers, unlocks of held and unheld jids. Every
  // answer must be the same (a fencing token: above 0 and above the store's previous one).
  it.live("a client that reads integers as text answers every lock call as the default client does", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* RedisServer.start
      const plain = yield* Redis.make({ url: server.url })
      const text = yield* Redis.make({ url: server.url, client: { stringNumbers: true } })
      const jid = fc.constantFrom("-1", "2", "007", "1e3", "a")
      const call = fc.record({ unlock: fc.boolean(), run: fc.boolean(), jid })
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.integer({ min: 1, max: 3 }), fc.array(call, { minLength: 1, maxLength: 25 }), (limit, calls) =>
            Effect.runPromise(Effect.gen(function*() {
              const side = (store: Redis.Store) =>
                Effect.gen(function*() {
                  const lockPrefix = RedisTest.uniquePrefix("text")
                  const queue = LockOptions.unsafeMake({ lock: "until_executed", lockLimit: limit, lockPrefix })
                  const run = LockOptions.unsafeMake({ lock: "while_executing", lockLimit: limit, lockPrefix })
                  const digest = yield* Lock.digest(queue, { worker: "W", queue: "q", args: [limit] })
                  return { store, queue, run, digest, fences: new Map<string, number>(), last: 0 }
                })
              const sides = [yield* side(plain), yield* side(text)]
              for (const [step, c] of calls.entries()) {
                const answers: Array<unknown> = []
                for (const s of sides) {
                  const definition = c.run ? s.run : s.queue
                  const phase = c.run ? "run" as const : "queue" as const
                  const target = { digest: s.digest, jid: c.jid, phase, fence: c.run ? s.fences.get(c.jid) ?? 1 : 0 }
                  const answer: Effect.Effect<unknown, Redis.RedisError, Redis.RedisService> = c.unlock
                    ? Effect.map(Lock.unlock(definition, target), (released) => ({ released }))
                    : Effect.match(Lock.lock(definition, target), {
                      onFailure: (error) => ({
                        refused: error._tag,
                        holders: error._tag === "LockConflict" ? [...error.holders].sort() : []
                      }),
                      onSuccess: (taken) => {
                        if (!c.run) return { reentrant: taken.reentrant, fence: taken.fence }
                        const rising = taken.fence > s.last
                        s.last = taken.fence
                        s.fences.set(c.jid, taken.fence)
                        return { reentrant: taken.reentrant, fenced: rising }
                      }
                    })
                  answers.push(yield* Effect.provideService(answer, Redis.RedisService, s.store))
                }
                assert.deepStrictEqual(answers[1], answers[0], `call ${step}: ${JSON.stringify(c)}`)
              }
            }))
          ),
          {
            numRuns: Model.runs(40),
            examples: [[1, [{ unlock: false, run: false, jid: "-1" }, { unlock: false, run: false, jid: "2" }]]]
          }
        )
      )
    })), 120_000)

  // A prefix's layout (issue 35): the first store to lock under a prefix records its layout; every store checks it
  // before its first call there. Processes one after the other, each on one Redis or configured for a cluster (one
  // Redis whose client says it is a Cluster: the keys a cluster layout names, which one Redis serves as any keys),
  // each taking a lock of its own: exactly those configured as the first was lock; each other is refused with
  // LayoutMismatch naming both layouts, and takes nothing.
  it.live("stores of any layouts on one prefix: a lock is taken exactly by those of the layout the first recorded", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* RedisServer.start
      const raw = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const c = new IORedis(server.url, { lazyConnect: true })
          await c.connect()
          return c
        }),
        (c) => Effect.promise(() => c.quit().catch(() => undefined))
      )
      const asCluster = new Proxy(raw, {
        get: (target, key) => {
          if (key === "isCluster") return true
          if (key === "nodes") return () => [target]
          const value: unknown = Reflect.get(target, key, target)
          return typeof value === "function" ? (value as (...args: Array<unknown>) => unknown).bind(target) : value
        }
      }) as unknown as Redis.Client
      const describeLayout = (shards: number | undefined) =>
        shards === undefined ? "one Redis (standalone)" : `Redis Cluster with ${shards} shards`
      let n = 0
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.array(fc.constantFrom<number | undefined>(undefined, 2, 4, 24), { minLength: 2, maxLength: 5 }), (layouts) =>
            Effect.runPromise(Effect.scoped(Effect.gen(function*() {
              const prefix = RedisTest.uniquePrefix(`layout${++n}`)
              for (const [i, shards] of layouts.entries()) {
                // A process of its own: a store that has read no layout yet.
                const store = yield* (shards === undefined ? Redis.makeFromClient(raw) : Redis.makeFromClient(asCluster, { shards }))
                const lock = { prefix, name: `${prefix}:p${i}` }
                const taken = yield* Effect.result(
                  store.lock(lock, { jid: `j${i}`, limit: 1, ttlMs: 60_000, leaseMs: 0, info: "", fenced: false })
                )
                const trace = `process ${i} of ${JSON.stringify(layouts)}`
                if (shards === layouts[0]) {
                  assert.isTrue(Result.isSuccess(taken), `${trace}: ${JSON.stringify(taken)}`)
                  continue
                }
                assert.isTrue(Result.isFailure(taken), `${trace} locked beside the first's layout`)
                if (Result.isSuccess(taken)) continue
                assert.strictEqual(taken.failure.operation, "layout", trace)
                assert.instanceOf(taken.failure.cause, LayoutMismatch, trace)
                const mismatch = taken.failure.cause as LayoutMismatch
                assert.deepStrictEqual([mismatch.recorded, mismatch.configured], [describeLayout(layouts[0]), describeLayout(shards)], trace)
                // Nothing taken: no key of the lock's, in either layout (`<prefix>:p<i>:…`, `<prefix>:{<tag>}:p<i>:…`).
                const keys = yield* Effect.promise(() => raw.keys(`${prefix}:*`))
                assert.deepStrictEqual(keys.filter((key) => key.endsWith(`:p${i}:LOCKED`)), [], trace)
              }
              // The CLI, with no layout flag, reads the layout Redis records: its stats count every lock taken.
              const stats = yield* runCli(["stats", "--redis-url", server.url, "--prefix", prefix, "--json"])
              const taken = layouts.filter((shards) => shards === layouts[0]).length
              assert.isTrue(stats.exit._tag === "Success", `${JSON.stringify(layouts)}: ${String(stats.exit)}`)
              assert.strictEqual((JSON.parse(stats.stdout) as { indexSize: number }).indexSize, taken, JSON.stringify(layouts))
            })))
          ),
          { numRuns: Model.runs(20), examples: [[[24, 4]], [[undefined, 24]], [[24, undefined]]] }
        )
      )
    })), 120_000)
})

describe("release signals properties", () => {
  // The release signals' connection (the store client's duplicate) is wrapped: while "away" it drops what Redis
  // publishes, as a connection that is down hears nothing; "back" is its ready event again (a reconnect). Jobs wait
  // on 1 to 3 locks; the holders of some end while it is away, the others after it is back. Every waiting job runs:
  // one whose release was missed by the signal made up on reconnect, long before its lockTimeout.
  it.live("releases published while the release connection was away are made up for once back: every waiting job runs", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* RedisServer.start
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.array(fc.boolean(), { minLength: 1, maxLength: 3 }), (whileAway) =>
            Effect.runPromise(Effect.scoped(Effect.gen(function*() {
              const client = yield* Effect.acquireRelease(
                Effect.sync(() => new IORedis(server.url)),
                (c) => Effect.promise(() => c.quit().catch(() => undefined))
              )
              const line = { away: false, dropped: 0, readies: [] as Array<() => void>, subscribers: [] as Array<IORedis> }
              yield* Effect.addFinalizer(() => Effect.sync(() => line.subscribers.forEach((s) => s.disconnect())))
              const wrap = (real: IORedis) => {
                line.subscribers.push(real)
                const subscriber = {
                  subscribe: (...channels: Array<string>) => real.subscribe(...channels),
                  unsubscribe: (channel: string) => real.unsubscribe(channel),
                  on: (event: string, listener: (...args: Array<any>) => void) => {
                    if (event === "message") {
                      real.on("message", (channel: string, message: string) => {
                        if (line.away) line.dropped++
                        else listener(channel, message)
                      })
                    } else {
                      if (event === "ready") line.readies.push(listener)
                      real.on(event, listener)
                    }
                    return subscriber
                  },
                  get status() {
                    return real.status
                  },
                  disconnect: () => real.disconnect()
                }
                return subscriber
              }
              const proxied = new Proxy(client, {
                get: (target, key) => {
                  if (key === "duplicate") return (options: object) => wrap(target.duplicate(options))
                  const value: unknown = Reflect.get(target, key, target)
                  return typeof value === "function" ? (value as (...args: Array<unknown>) => unknown).bind(target) : value
                }
              }) as unknown as Redis.Client
              const store = yield* Redis.makeFromClient(proxied)
              const prefix = RedisTest.uniquePrefix("away")
              const jobs = yield* Effect.provideService(Effect.forEach(whileAway, (away, i) =>
                Effect.gen(function*() {
                  const uj = yield* UniqueJob.make({
                    worker: `Away${i}`,
                    lock: "while_executing",
                    // Far beyond what the test takes unbroken: a missed release shows as a wait that runs out.
                    lockTimeout: "4 seconds",
                    lockLease: "60 seconds",
                    lockPrefix: prefix
                  })
                  const key = Lock.keyOf(uj.definition, yield* uj.digest([i]), "run")
                  const holder = yield* gated(uj.server, uj.job([i]))
                  const waiter = yield* Effect.forkChild(uj.server(uj.job([i]), Effect.succeed("ran")))
                  yield* until(() => Waits.waiting(store, key) === 1, "the job waits")
                  const channel = store.releases!.channelOf(key)
                  yield* until(async () => (await client.pubsub("NUMSUB", channel))[1] === 1, "its channel is subscribed")
                  return { away, holder, waiter }
                })), Redis.RedisService, store)
              line.away = true
              const missed = jobs.filter((job) => job.away)
              for (const job of missed) assert.strictEqual((yield* job.holder.finish)._tag, "Performed")
              yield* until(() => line.dropped === missed.length, "the releases were published, and dropped")
              line.away = false
              for (const ready of line.readies) ready()
              for (const job of jobs) if (!job.away) assert.strictEqual((yield* job.holder.finish)._tag, "Performed")
              const outcomes = yield* Effect.forEach(jobs, (job) => Fiber.join(job.waiter))
              assert.deepStrictEqual(outcomes.map((o) => o._tag), jobs.map(() => "Performed"), JSON.stringify(whileAway))
            }).pipe(Effect.provide(MemoryQueue.layer()))))
          ),
          { numRuns: Model.runs(5), examples: [[[true]], [[true, false, true]]] }
        )
      )
    })), 120_000)
})

describe("release signals properties: the release's own signal", () => {
  // lockTimeout's waiters hear of a release from the release itself (one PUBLISH in its script call): a release asked
  // to signal publishes on its lock's channel exactly when it ended a live hold; one not asked, or ending nothing, is
  // silent. Counted by a subscriber of its own, up to a marker published after the last step.
  it.live("a release publishes on its lock's channel exactly when asked to and it released a live hold", () =>
    Effect.scoped(Effect.gen(function*() {
      const server = yield* RedisServer.start
      const store = yield* Redis.make({ url: server.url })
      const connect = Effect.acquireRelease(
        Effect.sync(() => new IORedis(server.url)),
        (c) => Effect.sync(() => c.disconnect())
      )
      const subscriber = yield* connect
      const publisher = yield* connect
      const step = fc.record({
        unlock: fc.boolean(),
        lock: fc.integer({ min: 0, max: 1 }),
        jid: fc.constantFrom("a", "b"),
        signal: fc.boolean()
      })
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), async (steps) => {
            const prefix = RedisTest.uniquePrefix("signal")
            const locks = [0, 1].map((i) => ({ prefix, name: `${prefix}:d${i}:RUN` }))
            const channels = locks.map((lock) => store.releases!.channelOf(lock))
            const heard = channels.map(() => 0)
            const expected = channels.map(() => 0)
            let markers = 0
            const listener = (channel: string, message: string) => {
              if (message === "marker") markers++
              else heard[channels.indexOf(channel)]!++
            }
            subscriber.on("message", listener)
            await subscriber.subscribe(...channels)
            try {
              for (const s of steps) {
                const lock = locks[s.lock]!
                if (!s.unlock) {
                  await Effect.runPromise(store.lock(lock, { jid: s.jid, limit: 2, ttlMs: 0, leaseMs: 30_000, info: "", fenced: true }))
                  continue
                }
                const released = await Effect.runPromise(store.unlock(lock, s.jid, 0, false, s.signal))
                if (released && s.signal) expected[s.lock]!++
              }
              for (const channel of channels) await publisher.publish(channel, "marker")
              for (let i = 0; i < 2000 && markers < channels.length; i++) await new Promise((resolve) => setTimeout(resolve, 5))
              assert.strictEqual(markers, channels.length, "the markers came back")
              assert.deepStrictEqual(heard, expected, JSON.stringify(steps))
            } finally {
              subscriber.off("message", listener)
              await subscriber.unsubscribe(...channels)
            }
          }),
          { numRuns: Model.runs(20), examples: [[[{ unlock: false, lock: 0, jid: "a", signal: false }, { unlock: true, lock: 0, jid: "a", signal: true }]]] }
        )
      )
    })), 120_000)
})

describe("layout record properties", () => {
  // What a store writes is what every store reads back: a cluster of any shard count a store can be configured with
  // (1 to 1024, one shard included) is a layout, never a foreign record; any other count is foreign.
  it("a recorded cluster of n shards reads back exactly when n is a whole number from 1 to 1024", () =>
    fc.assert(
      fc.property(
        fc.oneof(fc.integer({ min: 1, max: 1024 }), fc.integer({ min: -5, max: 2000 }), fc.double(), fc.constantFrom(0, 1, 1024, 1025)),
        fc.stringMatching(/^[0-9a-f]{0,8}$/),
        (shards, epoch) => {
          const read = Layout.decodeRecord(JSON.stringify({ layout: "cluster", shards, epoch }))
          const configurable = Number.isSafeInteger(shards) && shards >= 1 && shards <= 1024
          assert.strictEqual(read !== undefined, configurable, `${shards} shards`)
          if (read === undefined) return
          assert.deepStrictEqual([read.layout.cluster, read.layout.shards, read.epoch], [true, shards, epoch])
          assert.isTrue(Layout.same(Layout.decode(Layout.encode(read.layout, epoch))!, read.layout), "encode reads back")
        }
      ),
      { numRuns: 200, examples: [[1, ""], [1024, "ab"], [0, ""], [1025, ""]] }
    ))
})
