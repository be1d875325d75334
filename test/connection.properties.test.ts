/**
 * Properties of the store's connection. The first connect (issue 18, item 13): a store built while its Redis is down
 * connects once Redis is up again, whenever that is within the connect timeout, and takes a lock; one whose Redis
 * never comes back fails with a `RedisError` naming the timeout, not earlier on the first refusal. Real redis-server
 * processes, killed and restarted. The client's options: a client that reads integers as text (ioredis'
 * `stringNumbers`) answers any sequence of lock calls as the default client does. The layout: stores of any layouts
 * on one prefix, one after the other: a lock is taken exactly by those configured as the first was, and the CLI reads
 * the layout recorded.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=40 npx vitest run test/connection.properties.test.ts
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as fc from "fast-check"
import { Redis as IORedis } from "ioredis"
import * as Fiber from "effect/Fiber"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import { LayoutMismatch } from "../src/Errors.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as Model from "./support/model.js"
import { runCli } from "./support/layout.js"
import * as RedisTest from "./support/redis.js"

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
