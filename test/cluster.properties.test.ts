/**
 * Properties on a real local Redis Cluster (3 masters): whatever locks it holds, spread by the layout's shards, a scan
 * pages through every shard and answers each lock once, whatever the page size; a reaper pass removes exactly the
 * locks whose holders have ended, on every shard; and every master holds some of them (the shards spread over the
 * masters). The examples are in cluster.admin.test.ts and cluster.failover.test.ts.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=30 npx vitest run test/cluster.properties.test.ts
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "fast-check"
import * as Scope from "effect/Scope"
import { Cluster as IOCluster } from "ioredis"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as Reaper from "../src/Reaper.js"
import * as Redis from "../src/Redis.js"
import * as RedisCluster from "../src/testing/RedisCluster.js"

const runs = (ci: number): number => Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? ci)

let scope: Scope.Closeable
let store: Redis.Store
let raw: IOCluster
beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  const cluster = await Effect.runPromise(Scope.provide(RedisCluster.start(), scope))
  const nodes = cluster.startupNodes.map((node) => `${node.host}:${node.port}`)
  store = await Effect.runPromise(Scope.provide(Redis.makeCluster({ nodes }), scope))
  raw = new IOCluster(cluster.startupNodes.map((node) => ({ host: node.host, port: node.port })))
  await new Promise<void>((resolve, reject) => {
    raw.once("ready", () => resolve())
    raw.once("error", reject)
  })
}, 120_000)
afterAll(async () => {
  await raw?.quit()
  await Effect.runPromise(Scope.close(scope, Exit.void))
})

const run = <A, E>(effect: Effect.Effect<A, E, Redis.RedisService>) =>
  Effect.runPromise(Effect.provideService(effect, Redis.RedisService, store))

let seeded = 0

describe("cluster properties", () => {
  it("property: a scan pages every shard once, a reaper pass ends exactly the ended holders, and every master holds some", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 60, max: 200 }),
        fc.integer({ min: 1, max: 5 }),
        fc.integer({ min: 1, max: 60 }),
        fc.integer({ min: 10, max: 100 }),
        async (count, endedEvery, pageSize, batch) => {
          const prefix = `cp${process.pid}x${++seeded}`
          const names = Array.from({ length: count }, (_, i) => `${prefix}:d${i}`)
          const ended = names.filter((_, i) => i % endedEvery === 0)
          await run(Effect.flatMap(Redis.RedisService, (redis) =>
            Effect.forEach(names, (name) =>
              redis.lock({ prefix, name }, { jid: `j-${name}`, limit: 2, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false }), {
              concurrency: 32,
              discard: true
            })))
          // An ended holder: the lock keeps only an entry whose expiry has passed (1 ms), its live holder gone.
          await run(Effect.flatMap(Redis.RedisService, (redis) =>
            Effect.forEach(ended, (name) =>
              Effect.flatMap(
                redis.lock({ prefix, name }, { jid: "short", limit: 2, ttlMs: 1, leaseMs: 0, info: "", fenced: false }),
                () => redis.unlock({ prefix, name }, `j-${name}`)
              ), { concurrency: 32, discard: true })))
          await new Promise((resolve) => setTimeout(resolve, 20))

          const scanned = async () => {
            const seen: Array<string> = []
            let cursor = "0"
            do {
              const page = await run(Effect.flatMap(Redis.RedisService, (redis) => redis.scan(prefix, cursor, "*", pageSize)))
              seen.push(...page.members.map((member) => member.name))
              cursor = page.cursor
            } while (cursor !== "0")
            return seen.sort()
          }
          assert.deepStrictEqual(await scanned(), [...names].sort(), "every lock of every shard, once")

          const masters = raw.nodes("master")
          assert.strictEqual(masters.length, 3)
          for (const master of masters) {
            const keys = await master.keys(`*${prefix}:*`)
            assert.isAbove(keys.length, 0, `master ${master.options.port} holds none of ${count} locks`)
          }

          const runner = await run(Reaper.make({ prefix, batch }))
          const pass = await run(runner.pass())
          await run(runner.release)
          assert.isTrue(pass.ran)
          assert.strictEqual(pass.holders, ended.length, "every shard's ended holders, and no other")
          assert.strictEqual(pass.members, ended.length)
          const live = names.filter((_, i) => i % endedEvery !== 0)
          assert.deepStrictEqual(await scanned(), [...live].sort(), "the live locks stay")
          // Clean up for the next run.
          await run(Effect.flatMap(Redis.RedisService, (redis) =>
            Effect.forEach(live, (name) => redis.unlock({ prefix, name }, `j-${name}`), { concurrency: 32, discard: true })))
        }
      ),
      { numRuns: runs(6) }
    )
  }, 300_000)
})
