/**
 * BullMQ on Redis Cluster (issue 22): queues whose connection is an ioredis `Cluster` (BullMQ keeps each queue in one
 * slot with a `{hashtag}` prefix; the locks spread over every master in their own layout). `UniqueQueue` builds its
 * lock store from the queue's Cluster connection; `BullMQ.layer` over such a queue answers the reaper; the reaper,
 * on the cluster store, removes an orphan's lock and keeps a waiting job's. Real BullMQ, real time; counts only.
 */
import { Queue, Worker } from "bullmq"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import { Cluster as IOCluster } from "ioredis"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as Reaper from "../src/Reaper.js"
import * as Redis from "../src/Redis.js"
import * as RedisCluster from "../src/testing/RedisCluster.js"
import * as UniqueJob from "../src/UniqueJob.js"

let scope: Scope.Closeable
let cluster: RedisCluster.Cluster
let connection: IOCluster
let nodes: ReadonlyArray<string>
beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  cluster = await Effect.runPromise(Scope.provide(RedisCluster.start(), scope))
  nodes = cluster.startupNodes.map((node) => `${node.host}:${node.port}`)
  // BullMQ's workers block on their connection: maxRetriesPerRequest null, as BullMQ asks.
  connection = new IOCluster([...cluster.startupNodes], { redisOptions: { maxRetriesPerRequest: null } })
  connection.on("error", () => {})
})
afterAll(async () => {
  connection.disconnect()
  await Effect.runPromise(Scope.close(scope, Exit.void))
})

const until = async (done: () => Promise<boolean>) => {
  for (let i = 0; i < 600; i++) {
    if (await done()) return true
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return false
}

/** Every key matching `pattern`, from every master. */
const keys = async (pattern: string) =>
  (await Promise.all(connection.nodes("master").map((node) => node.keys(pattern)))).flat()

describe("BullMQ on Redis Cluster", () => {
  it("UniqueQueue over a queue on a Cluster connection: a duplicate is turned away, the Worker runs the job, its lock goes, and the locks are in the cluster layout", async () => {
    const lockPrefix = `uq${process.pid}`
    const queue = new Queue(`reports-${process.pid}`, { connection, prefix: "{bull}" })
    const unique = UniqueQueue.make<{ account: number }>(queue, { lock: "until_executed", lockPrefix, defaults: {} })
    let runs = 0
    const worker = new Worker(queue.name, unique.processor(async () => {
      runs++
      return "done"
    }), { connection, prefix: "{bull}", autorun: false })
    worker.on("error", () => {})
    try {
      const first = await unique.add("rebuild", { account: 1 })
      assert.strictEqual(first._tag, "Enqueued")
      const second = await unique.add("rebuild", { account: 1 })
      assert.notStrictEqual(second._tag, "Enqueued", "the duplicate is turned away")
      assert.strictEqual(await queue.count(), 1)
      const held = await keys(`${lockPrefix}:*:LOCKED`)
      assert.strictEqual(held.length, 1)
      assert.match(held[0]!, new RegExp(`^${lockPrefix}:\\{[^}]+\\}:[0-9a-f]+:LOCKED$`), "a lock key carries its shard's tag")

      void worker.run()
      assert.isTrue(await until(async () => runs === 1 && (await keys(`${lockPrefix}:*:LOCKED`)).length === 0))
      const again = await unique.add("rebuild", { account: 1 })
      assert.strictEqual(again._tag, "Enqueued", "once it ran, the same job is unique again")
      assert.isTrue(await until(async () => runs === 2))
    } finally {
      await worker.close(true)
      await unique.close()
    }
  })

  it("the reaper over BullMQ.layer of a Cluster queue, on the cluster store: an orphan's lock goes, a waiting job's stays", async () => {
    const prefix = `reap${process.pid}`
    const queue = new Queue(`orders-${process.pid}`, { connection, prefix: "{bull}" })
    const unique = UniqueJob.unsafeMake({ worker: "Orders", queue: queue.name, lock: "until_executed", lockPrefix: prefix })
    const redis = Redis.layerCluster({ nodes })
    const bull = BullMQ.layer([queue])
    try {
      const program = Effect.gen(function*() {
        const add = (n: number) =>
          Effect.flatMap(
            unique.client(unique.job([{ n }]), (stamped) => Effect.flatMap(BullMQ.BullMQ, (b) => b.add(stamped))),
            (outcome) => outcome._tag === "Enqueued" ? Effect.succeed(outcome) : Effect.die(new Error(outcome._tag))
          )
        const waiting = yield* add(1)
        const orphan = yield* add(2)
        // The orphan's job goes without its lock (removed by hand): only the reaper can free it.
        yield* Effect.promise(() => queue.remove(orphan.job.jid))
        // The grace is counted from each lock's taking: past it, a lock whose job is gone is an orphan.
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
        const runner = yield* Reaper.make({ prefix, grace: "10 millis" })
        const pass = yield* runner.pass()
        const redisStore = yield* Redis.RedisService
        const kept = yield* redisStore.fetch({ prefix, name: waiting.digest })
        const reaped = yield* redisStore.fetch({ prefix, name: orphan.digest })
        return { pass, kept: kept.holders.length, reaped: reaped.holders.length }
      }).pipe(Effect.provide(Layer.merge(redis, bull)))
      const { kept, pass, reaped } = await Effect.runPromise(program)
      assert.strictEqual(pass.orphans, 1)
      assert.strictEqual(kept, 1, "the waiting job keeps its lock")
      assert.strictEqual(reaped, 0, "the orphan's lock is gone")
    } finally {
      await queue.close()
    }
  })
})
