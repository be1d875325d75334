/**
 * `unique-jobs stats --cluster` while a master is down (issue 47): the CLI's store is built from the nodes that
 * answer (the scripts load on the masters that answer, the calls reload them on NOSCRIPT), the stats are those of the
 * shards that reply, naming the others and their node, with a non-zero exit; and once the cluster reports itself down
 * the connect error says so, not that no node answered. No replica here: the cluster stays down, so each phase is
 * reached for sure however busy the machine is.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { execFileSync } from "node:child_process"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as Layout from "../src/store/Layout.js"
import * as Redis from "../src/Redis.js"
import * as RedisCluster from "../src/testing/RedisCluster.js"
import * as Cli from "./support/cli.js"

let scope: Scope.Closeable
let cluster: RedisCluster.Cluster
let nodes: ReadonlyArray<string>
beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  // A node timeout of 4 s: a master killed is not marked failed before the first stats has connected.
  cluster = await Effect.runPromise(Scope.provide(RedisCluster.start({ replicas: 0, nodeTimeoutMs: 4000 }), scope))
  nodes = cluster.startupNodes.map((node) => `${node.host}:${node.port}`)
}, 60_000)
afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

// The command as the executable runs it: its exit code, stdout (the answer) and stderr (the one-line error).
const stats = (prefix: string) =>
  Effect.runPromise(Cli.cli("stats", "--prefix", prefix, "--cluster", nodes.join(","), "--json"))

const redisCli = (port: number, ...args: Array<string>) =>
  execFileSync(process.env.REDIS_CLI_BIN ?? "redis-cli", ["-p", String(port), ...args]).toString()

// The port of the master serving `slot`, read from CLUSTER NODES on `port`.
const ownerOf = (port: number, slot: number): number => {
  for (const line of redisCli(port, "cluster", "nodes").split("\n")) {
    const [, address, flags, , , , , , ...ranges] = line.split(" ")
    if (flags === undefined || !flags.includes("master")) continue
    for (const range of ranges) {
      const [from, to] = range.split("-").map(Number)
      if (from !== undefined && slot >= from && slot <= (to ?? from)) return Number(address!.split("@")[0]!.split(":")[1])
    }
  }
  throw new Error(`no master serves slot ${slot}`)
}

describe("unique-jobs stats --cluster with a master down", () => {
  it("answers from the shards that reply, naming the others and their node, exit non-zero; then says the cluster reported itself down", async () => {
    const prefix = "statsdown"
    const names = Array.from({ length: 60 }, (_, i) => `${prefix}:d${i}`)
    await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const store = yield* Redis.makeCluster({ nodes })
      yield* Effect.forEach(names, (name) =>
        store.lock({ prefix, name }, { jid: `j-${name}`, limit: 1, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false }), {
        concurrency: 16
      })
    })))
    const whole = await stats(prefix)
    assert.strictEqual(whole.code, 0, whole.stderr)
    assert.deepInclude(JSON.parse(whole.stdout), { indexSize: 60 })
    assert.notProperty(JSON.parse(whole.stdout), "partial")

    // The victim: a master that does not hold the prefix's layout record (without it no shard count is known).
    const masters = await Effect.runPromise(cluster.masters)
    const recordOwner = ownerOf(masters[0]!, Layout.slotOf(Layout.recordKey(prefix)))
    const victimPort = masters.find((port) => port !== recordOwner)!
    const layout = Layout.cluster()
    const downShards = Layout.tagsOf(Layout.defaultShards).flatMap((tag, shard) =>
      ownerOf(masters[0]!, Layout.slotOf(`{${tag}}`)) === victimPort ? [shard] : [])
    const downLocks = names.filter((name) => downShards.includes(layout.shardOf({ prefix, name }))).length
    assert.isAbove(downShards.length, 0)
    await Effect.runPromise(cluster.nodes.find((node) => node.port === victimPort)!.kill)

    const partial = await stats(prefix)
    assert.strictEqual(partial.code, 1, "a partial answer exits non-zero")
    assert.include(partial.stderr, "partial answer")
    assert.include(partial.stderr, `127.0.0.1:${victimPort}`)
    const answer = JSON.parse(partial.stdout) as {
      indexSize: number
      partial?: boolean
      unanswered?: Array<{ shard: number; reason: string }>
    }
    assert.strictEqual(answer.partial, true)
    assert.deepStrictEqual(answer.unanswered?.map((u) => u.shard), downShards)
    for (const u of answer.unanswered ?? []) assert.include(u.reason, `127.0.0.1:${victimPort}`)
    assert.strictEqual(answer.indexSize, names.length - downLocks, "every lock of the shards that answered, no other")

    // Once the others mark it failed, the cluster says it is down: the connect error says that, within its bound.
    const survivor = masters.find((port) => port !== victimPort)!
    for (let i = 0; i < 300 && !redisCli(survivor, "cluster", "info").includes("cluster_state:fail"); i++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    const down = await stats(prefix)
    assert.strictEqual(down.code, 1)
    assert.include(down.stderr, "reported itself down")
    assert.notInclude(down.stderr, "none answered")
  }, 60_000)
})
