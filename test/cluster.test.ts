/**
 * The private Redis Cluster of `effect-unique-jobs/testing` (issue 22's harness): 3 masters and 3 replicas on loopback
 * ports, every slot owned, keys spread over every master, and a master killed mid-run replaced by its replica (what
 * was acknowledged by a replica before the kill is still there), then back as a replica when restarted.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { Cluster as IOCluster, Redis as IORedis } from "ioredis"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as RedisCluster from "../src/testing/RedisCluster.js"

let scope: Scope.Closeable
let cluster: RedisCluster.Cluster
beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  cluster = await Effect.runPromise(Scope.provide(RedisCluster.start(), scope))
})
afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

describe("RedisCluster (the test harness)", () => {
  it("3 masters own every slot; 3,000 keys spread over all three; a killed master's replica takes over", async () => {
    const masters = await Effect.runPromise(cluster.masters)
    assert.strictEqual(masters.length, 3)
    assert.strictEqual(cluster.nodes.length, 6)
    const client = new IOCluster([...cluster.startupNodes], { clusterRetryStrategy: (n) => (n > 50 ? null : 100) })
    client.on("error", () => {})
    try {
      const keys = Array.from({ length: 3000 }, (_, i) => `k${i}`)
      for (let i = 0; i < keys.length; i += 100) await Promise.all(keys.slice(i, i + 100).map((k) => client.set(k, k)))
      const sizes = await Promise.all(masters.map(async (port) => {
        const node = new IORedis(port, "127.0.0.1")
        const size = await node.dbsize()
        // Every write acknowledged by a replica too, before anything is killed.
        await node.call("WAIT", "1", "5000")
        node.disconnect()
        return size
      }))
      assert.strictEqual(sizes.reduce((a, b) => a + b, 0), 3000)
      for (const size of sizes) assert.isAtLeast(size, 600, `each master holds at least 20%: ${sizes}`)

      const victim = cluster.nodes.find((n) => n.port === masters[0])!
      await Effect.runPromise(victim.kill)
      await Effect.runPromise(cluster.ready)
      const after = await Effect.runPromise(cluster.masters)
      assert.strictEqual(after.length, 3)
      assert.notInclude(after, victim.port)
      const read = await Promise.all(keys.slice(0, 300).map((k) => client.get(k)))
      assert.deepStrictEqual(read, keys.slice(0, 300))

      await Effect.runPromise(victim.restart)
      await Effect.runPromise(cluster.ready)
      assert.notInclude(await Effect.runPromise(cluster.masters), victim.port, "it comes back as a replica")
    } finally {
      client.disconnect()
    }
  })
})
