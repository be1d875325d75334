/**
 * The layout is data, on a private Redis Cluster (3 masters, 1 replica each; issue 35): two processes with different
 * `shards` never run one job at once (the second is refused), the CLI with `--cluster` sees what an app on 48 or 4
 * shards wrote with no flag, and a cluster store built right after a master was killed waits out its timeout and is
 * built once the replica has taken over (observation 3).
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as Exit from "effect/Exit"
import * as Result from "effect/Result"
import * as Scope from "effect/Scope"
import { Redis as IORedis } from "ioredis"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import { LayoutMismatch } from "../src/Errors.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Redis from "../src/Redis.js"
import * as RedisCluster from "../src/testing/RedisCluster.js"
import * as UniqueJob from "../src/UniqueJob.js"
import { runCli, thirtyLocks } from "./support/layout.js"

// One cluster for the file, stopped with it.
const scope = Effect.runSync(Scope.make())
afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))
let cluster: RedisCluster.Cluster
let nodes: ReadonlyArray<string> = []
beforeAll(() =>
  Effect.runPromise(Effect.map(Scope.provide(RedisCluster.start(), scope), (started) => {
    cluster = started
    nodes = started.startupNodes.map((node) => `${node.host}:${node.port}`)
  })))

/** Waits until a replica of the master at `port` reports its link up (a replica that never synced is never promoted). */
const replicaInSync = async (port: number, masters: ReadonlyArray<number>) => {
  for (let tries = 0; tries < 600; tries++) {
    for (const node of cluster.nodes.filter((n) => !masters.includes(n.port))) {
      const client = new IORedis(node.port, "127.0.0.1", { lazyConnect: true })
      try {
        await client.connect()
        const info = await client.info("replication")
        if (info.includes(`master_port:${port}`) && info.includes("master_link_status:up")) return
      } finally {
        client.disconnect()
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error(`no replica of ${port} in sync`)
}

let counter = 0
const uniquePrefix = (name: string) => `lc${process.pid}-${name}-${++counter}`

const run = <A, E>(self: Effect.Effect<A, E, Scope.Scope>) => Effect.runPromise(Effect.scoped(self))

describe("the layout on a Redis Cluster", () => {
  it("shards 24 and shards 4 running the same while_executing job at once: the second is refused at build, and never runs", () =>
    run(Effect.gen(function*() {
      const prefix = uniquePrefix("shards")
      const wide = yield* Redis.makeCluster({ nodes, shards: 24, timeout: "20 seconds" })
      const narrow = yield* Redis.makeCluster({ nodes, shards: 4, timeout: "20 seconds" })
      const unique = yield* UniqueJob.make({ worker: "Report", lock: "while_executing", lockPrefix: prefix, lockLease: "30 seconds" })
      const queue = yield* MemoryQueue.make()
      // The first process is built (and records the prefix's layout), and runs the job.
      yield* Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, wide))
      const started = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const first = yield* unique.perform(
        { worker: "Report", queue: "default", args: [1], jid: "j1" },
        () => Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(release))
      ).pipe(Effect.provideService(Redis.RedisService, wide), Effect.provideService(JobQueue, queue), Effect.forkChild)
      yield* Deferred.await(started)
      // The second is refused when built, naming both layouts.
      const built = yield* Effect.flip(Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, narrow)))
      assert.instanceOf(built, LayoutMismatch)
      assert.strictEqual((built as LayoutMismatch).recorded, "Redis Cluster with 24 shards")
      assert.strictEqual((built as LayoutMismatch).configured, "Redis Cluster with 4 shards")
      // And had it not been checked at build, its first call is refused: the job does not run beside the first.
      const second = yield* Effect.result(
        unique.perform({ worker: "Report", queue: "default", args: [1], jid: "j2" }, () => Effect.succeed("ran")).pipe(
          Effect.provideService(Redis.RedisService, narrow),
          Effect.provideService(JobQueue, queue)
        )
      )
      yield* Deferred.succeed(release, undefined)
      assert.strictEqual((yield* Fiber.join(first))._tag, "Performed")
      assert.strictEqual(second._tag, "Failure", `the second process ran the job: ${JSON.stringify(second)}`)
      if (Result.isFailure(second)) assert.instanceOf((second.failure as Redis.RedisError).cause, LayoutMismatch)
    })), 120_000)

  it("unique-jobs --cluster against an app on shards 48 or 4 with 30 until_executed locks: locks list, stats, reap see all 30", () =>
    run(Effect.gen(function*() {
      for (const shards of [48, 4]) {
        const prefix = uniquePrefix(`cli${shards}`)
        yield* thirtyLocks(yield* Redis.makeCluster({ nodes, shards, timeout: "20 seconds" }), prefix)
        const where = ["--cluster", nodes.join(","), "--prefix", prefix, "--json"]
        const list = yield* runCli(["locks", "list", "--limit", "1000", ...where])
        assert.strictEqual((JSON.parse(list.stdout) as { items: Array<unknown> }).items.length, 30, `shards ${shards}: locks list`)
        const stats = yield* runCli(["stats", ...where])
        assert.strictEqual((JSON.parse(stats.stdout) as { indexSize: number }).indexSize, 30, `shards ${shards}: stats`)
        const reap = yield* runCli(["reap", ...where])
        assert.strictEqual((JSON.parse(reap.stdout) as { scanned: number }).scanned, 30, `shards ${shards}: reap`)
      }
    })), 120_000)

  // Last: it kills a master (its replica takes over).
  it("Redis.makeCluster built right after a master is killed waits out its timeout and is built once the replica took over (observation 3)", () =>
    run(Effect.gen(function*() {
      const masters = yield* cluster.masters
      const victim = cluster.nodes.find((node) => node.port === masters[0])!
      // A replica takes over only with a recent copy: wait until the victim's replica is in sync.
      yield* Effect.promise(() => replicaInSync(victim.port, masters))
      yield* victim.kill
      const store = yield* Effect.result(Redis.makeCluster({ nodes, timeout: "30 seconds" }))
      assert.strictEqual(store._tag, "Success", Result.isFailure(store) ? store.failure.message : "")
      if (!Result.isSuccess(store)) return
      // It works in every shard: a lock taken and released in each.
      const prefix = uniquePrefix("failover")
      for (let n = 0; n < 200; n++) {
        const lock = { prefix, name: `${prefix}:${n.toString(16).padStart(32, "0")}` }
        const taken = yield* store.success.lock(lock, { jid: "j", limit: 1, ttlMs: 60_000, leaseMs: 0, info: "", fenced: false }).pipe(
          Effect.retry({ schedule: Schedule.spaced("200 millis"), times: 50 })
        )
        assert.strictEqual(taken._tag, "Acquired")
        assert.isTrue(yield* store.success.unlock(lock, "j"))
      }
    })), 180_000)
})
