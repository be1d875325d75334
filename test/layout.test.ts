/**
 * The layout is data (issue 35): where a prefix's keys live is recorded in Redis the first time it is used, every
 * store checks it, and a process configured otherwise is refused. Also the cluster layout's slot rule, by example,
 * with no cluster: a lock's queue and run phases, its index shard and its fencing counter share one hash slot.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import { Redis as IORedis } from "ioredis"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import { LayoutMismatch } from "../src/Errors.js"
import * as Layout from "../src/internal/layout.js"
import type * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as RedisTest from "./support/redis.js"

// Digests as the library writes them (legacy MD5, modern SHA3-256) and a few odd names a user's lockPrefix allows.
const hexes = (count: number, width: number): Array<string> =>
  Array.from({ length: count }, (_, i) => {
    let hex = ""
    for (let n = i * 2654435761 + 1; hex.length < width; n = Math.imul(n ^ (n >>> 13), 0x5bd1e995) >>> 0) {
      hex += (n >>> 0).toString(16).padStart(8, "0")
    }
    return hex.slice(0, width)
  })

describe("the cluster layout keeps a lock in one slot (observation 9, needs no cluster)", () => {
  const shardCounts = [1, 2, 3, 4, 7, 24, 48, 100, 1024]
  const prefixes = ["uniquejobs", "app:jobs", "x"]
  const digests = [...hexes(200, 32), ...hexes(50, 64), "a", "LOCKED", "x:y"]

  it("queue lock, run lock, index shard and fencing counter share one hash slot, for every shard count", () => {
    let checked = 0
    for (const shards of shardCounts) {
      const layout = Layout.cluster(shards)
      for (const prefix of prefixes) {
        for (const hex of digests) {
          const queue = { prefix, name: `${prefix}:${hex}` }
          const run = { prefix, name: `${prefix}:${hex}:RUN` }
          const q = layout.keysOf(queue)
          const r = layout.keysOf(run)
          const slot = Layout.slotOf(q.locked)
          assert.strictEqual(Layout.slotOf(r.locked), slot, `${run.name} (shards ${shards}) is not in ${queue.name}'s slot`)
          assert.strictEqual(Layout.slotOf(q.index), slot, `${queue.name}'s index shard (shards ${shards})`)
          assert.strictEqual(Layout.slotOf(q.fence), slot, `${queue.name}'s fencing counter (shards ${shards})`)
          assert.strictEqual(layout.shardOf(run), layout.shardOf(queue), `${run.name}'s shard (shards ${shards})`)
          assert.strictEqual(q.index, layout.index(prefix, layout.shardOf(queue)))
          assert.strictEqual(r.locked, q.locked.replace(/:LOCKED$/, ":RUN:LOCKED"))
          checked++
        }
      }
    }
    assert.strictEqual(checked, shardCounts.length * prefixes.length * digests.length)
  })

  it("the phases of many digests spread over the shards (a run lock is not pinned to one shard)", () => {
    const layout = Layout.cluster(24)
    const shards = new Set(hexes(500, 32).map((hex) => layout.shardOf({ prefix: "p", name: `p:${hex}:RUN` })))
    assert.strictEqual(shards.size, 24)
  })
})

/**
 * An ioredis client to one Redis that says it is a Cluster: the store takes the cluster layout (hash-tagged keys, the
 * index in shards), which one Redis serves as it serves any keys. Two processes on one Redis disagreeing on the layout
 * is thus caught with no cluster.
 */
const asCluster = (client: IORedis): Redis.Client =>
  new Proxy(client, {
    get: (target, key) => {
      if (key === "isCluster") return true
      if (key === "nodes") return () => [target]
      const value: unknown = Reflect.get(target, key, target)
      return typeof value === "function" ? (value as (...args: Array<unknown>) => unknown).bind(target) : value
    }
  }) as unknown as Redis.Client

const client = Effect.flatMap(RedisTest.TestRedis, ({ source }) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const c = new IORedis(source.url, { lazyConnect: true })
      await c.connect()
      return c
    }),
    (c) => Effect.promise(() => c.quit().catch(() => undefined))
  ))

/** A store as a process configured with `shards` on a cluster would make it (undefined: one Redis). */
const storeOf = (shards: number | undefined) =>
  Effect.flatMap(client, (c) =>
    shards === undefined ? Redis.makeFromClient(c) : Redis.makeFromClient(asCluster(c), { shards }))

const job = (jid: string, args: ReadonlyArray<unknown>): Job.Job => ({ worker: "Report", queue: "default", args, jid })

/**
 * Two processes running the same while_executing job at once, each with its own store: the first holds its run lock
 * while the second tries. The second's answer (or its failure) is returned, and whether the first was still running.
 */
const twoRuns = (first: Redis.Store, second: Redis.Store, prefix: string) =>
  Effect.gen(function*() {
    const unique = yield* UniqueJob.make({ worker: "Report", lock: "while_executing", lockPrefix: prefix, lockLease: "30 seconds" })
    const queue = yield* MemoryQueue.make()
    const started = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const one = yield* unique.perform(job("j1", [7]), () => Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(release))).pipe(
      Effect.provideService(Redis.RedisService, first),
      Effect.provideService(JobQueue, queue),
      Effect.fork
    )
    yield* Deferred.await(started)
    const two = yield* unique.perform(job("j2", [7]), () => Effect.succeed("ran")).pipe(
      Effect.provideService(Redis.RedisService, second),
      Effect.provideService(JobQueue, queue),
      Effect.either
    )
    yield* Deferred.succeed(release, undefined)
    const firstOutcome = yield* Fiber.join(one)
    return { two, first: firstOutcome._tag }
  })

describe("a prefix's layout is recorded and checked (observation 1, one Redis)", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.scoped("a process on a cluster layout with other shards never runs a job beside the first: it is refused", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("shards")
        const wide = yield* storeOf(24)
        const narrow = yield* storeOf(4)
        const { two, first } = yield* twoRuns(wide, narrow, prefix)
        assert.strictEqual(first, "Performed")
        assert.strictEqual(two._tag, "Left", `the second process ran the job beside the first: ${JSON.stringify(two)}`)
        if (two._tag !== "Left") return
        const error = two.left as Redis.RedisError
        assert.strictEqual(error._tag, "RedisError")
        assert.strictEqual(error.operation, "layout")
        assert.instanceOf(error.cause, LayoutMismatch)
        const mismatch = error.cause as LayoutMismatch
        assert.strictEqual(mismatch.recorded, "Redis Cluster with 24 shards")
        assert.strictEqual(mismatch.configured, "Redis Cluster with 4 shards")
        assert.strictEqual(mismatch.key, `${prefix}:layout`)
        assert.include(error.message, "24 shards")
        assert.include(error.message, "4 shards")
      }))

    it.scoped("a standalone process and a cluster-layout process on one prefix: the second is refused, either way round", () =>
      Effect.gen(function*() {
        for (const [a, b] of [[undefined, 24], [24, undefined]] as const) {
          const prefix = RedisTest.uniquePrefix("standalone")
          const { two, first } = yield* twoRuns(yield* storeOf(a), yield* storeOf(b), prefix)
          assert.strictEqual(first, "Performed")
          assert.strictEqual(two._tag, "Left", `${a} then ${b}: the second process ran the job beside the first`)
          if (two._tag === "Left") assert.instanceOf((two.left as Redis.RedisError).cause, LayoutMismatch)
        }
      }))
  })
})
