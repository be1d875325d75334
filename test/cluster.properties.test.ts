/**
 * Properties on a real local Redis Cluster (3 masters): whatever locks it holds, spread by the layout's shards, a scan
 * pages through every shard and answers each lock once, whatever the page size; a reaper pass removes exactly the
 * locks whose holders have ended, on every shard; and every master holds some of them (the shards spread over the
 * masters). `unique-jobs stats` with any shards unanswered prints the others' counts, names those shards and fails;
 * a lock call during an outage of its shard (CLUSTERDOWN) shorter than its timeout rides it out. The examples are in
 * cluster.admin.test.ts, cluster.failover.test.ts, cluster.stats.test.ts and cluster.handoff.test.ts.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=30 npx vitest run test/cluster.properties.test.ts
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "fast-check"
import * as Scope from "effect/Scope"
import { Cluster as IOCluster } from "ioredis"
import { execFileSync } from "node:child_process"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as Cli from "../src/Cli.js"
import * as Reaper from "../src/Reaper.js"
import * as Redis from "../src/Redis.js"
import * as Layout from "../src/store/Layout.js"
import * as RedisCluster from "../src/testing/RedisCluster.js"
import { capturedConsole, cli } from "./support/cli.js"

const runs = (ci: number): number => Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? ci)

let scope: Scope.Closeable
let store: Redis.Store
let raw: IOCluster
let nodes: ReadonlyArray<string>
beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  const cluster = await Effect.runPromise(Scope.provide(RedisCluster.start(), scope))
  nodes = cluster.startupNodes.map((node) => `${node.host}:${node.port}`)
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
  // A shard whose walk fails (here its index made unreadable: a wrong type, which every call on it meets, as a master
  // down fails every call of its shards) leaves a partial answer: `unique-jobs stats` prints the other shards' counts,
  // names those that did not answer, and exits non-zero, so that no script takes it for the whole index.
  it("property: stats with any shards unanswered prints the others' counts, names those shards, and fails; none: the whole, and succeeds", async () => {
    const layout = Layout.cluster()
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 10, max: 80 }),
        fc.uniqueArray(fc.integer({ min: 0, max: Layout.defaultShards - 1 }), { maxLength: 4 }),
        async (count, unanswered) => {
          const prefix = `cs${process.pid}x${++seeded}`
          const names = Array.from({ length: count }, (_, i) => `${prefix}:d${i}`)
          await run(Effect.flatMap(Redis.RedisService, (redis) =>
            Effect.forEach(names, (name) =>
              redis.lock({ prefix, name }, { jid: "j", limit: 1, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false }), {
              concurrency: 32,
              discard: true
            })))
          for (const shard of unanswered) {
            const index = layout.index(prefix, shard)
            await raw.del(index)
            await raw.set(index, "not an index", "PX", 600_000)
          }
          const ran = await Effect.runPromise(Effect.gen(function*() {
            const { capture, lines } = yield* capturedConsole
            const exit = yield* Cli.run(["node", "unique-jobs", "stats", "--prefix", prefix, "--cluster", nodes.join(","), "--json"])
              .pipe(Effect.provideService(Console.Console, capture), Effect.provide(Cli.platform), Effect.exit)
            return { exit, lines }
          }))
          const trace = JSON.stringify({ count, unanswered, exit: ran.exit._tag })
          const answer = JSON.parse(ran.lines.join("\n")) as {
            indexSize: number
            partial?: boolean
            unanswered?: Array<{ shard: number; reason: string }>
          }
          const counted = names.filter((name) => !unanswered.includes(layout.shardOf({ prefix, name })))
          assert.strictEqual(answer.indexSize, counted.length, trace)
          assert.strictEqual(Exit.isFailure(ran.exit), unanswered.length > 0, trace)
          if (unanswered.length === 0) assert.notProperty(answer, "partial", trace)
          else {
            assert.strictEqual(answer.partial, true, trace)
            assert.deepStrictEqual(answer.unanswered?.map((u) => u.shard), [...unanswered].sort((a, b) => a - b), trace)
          }
          // Clean up for the next run.
          for (const shard of unanswered) await raw.del(layout.index(prefix, shard))
          await run(Effect.flatMap(Redis.RedisService, (redis) =>
            Effect.forEach(counted, (name) => redis.unlock({ prefix, name }, "j"), { concurrency: 32, discard: true })))
        }
      ),
      { numRuns: runs(6), examples: [[20, []], [40, [0, 23]]] }
    )
  }, 300_000)
  // A master whose slot is taken from it (CLUSTER DELSLOTS) reports the cluster down (CLUSTERDOWN) until the slot is
  // given back: an outage of one shard, as a failover makes it, with no failover. ioredis tries a call again every
  // 100 ms, each try a redirection; its default 16 gave up after about 1.6 s. A store's call rides out any such
  // outage shorter than its timeout, and answers once the slot is served again.
  it("property: a lock call during an outage of its shard shorter than the timeout rides it out and locks", async () => {
    const layout = Layout.cluster()
    const timeoutMs = 8000
    const outages = Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const own = yield* Redis.makeCluster({ nodes, timeout: timeoutMs })
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.integer({ min: 0, max: Layout.defaultShards - 1 }), fc.integer({ min: 2000, max: 4000 }), async (shard, outageMs) => {
            const prefix = `cr${process.pid}x${++seeded}`
            // A lock of the shard: its layout read and its scripts loaded before the outage.
            const first = Array.from({ length: 500 }, (_, i) => ({ prefix, name: `${prefix}:d${i}` }))
              .filter((lock) => layout.shardOf(lock) === shard)
            const [before, during] = first
            assert.isDefined(during, `two names of shard ${shard}`)
            const request = (jid: string) => ({ jid, limit: 1, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false })
            assert.strictEqual((await Effect.runPromise(own.lock(before!, request("a"))))._tag, "Acquired")
            const slot = Layout.slotOf(layout.keysOf(during!).locked)
            const owner = raw.nodes("master").find((node) => `${node.options.host}:${node.options.port}` === raw.slots[slot]?.[0])
            assert.isDefined(owner, `the master of slot ${slot}`)
            await owner!.call("CLUSTER", "DELSLOTS", String(slot))
            const started = Date.now()
            let given = 0
            const giveBack = new Promise<void>((resolve) =>
              setTimeout(() => {
                given = Date.now()
                owner!.call("CLUSTER", "ADDSLOTS", String(slot)).then(() => resolve(), () => resolve())
              }, outageMs)
            )
            try {
              const taken = await Effect.runPromise(Effect.result(own.lock(during!, request("b"))))
              const trace = JSON.stringify({ shard, slot, outageMs, after: Date.now() - started })
              assert.isTrue(taken._tag === "Success" && taken.success._tag === "Acquired", `${trace} ${JSON.stringify(taken)}`)
              // Answered once the slot was served again, not before: the outage was met, and ridden out.
              assert.isAbove(given, 0, trace)
            } finally {
              await giveBack
            }
            await Effect.runPromise(own.unlock(before!, "a"))
            await Effect.runPromise(own.unlock(during!, "b"))
          }),
          { numRuns: runs(3), examples: [[0, 3000]] }
        )
      )
    })))
    await outages
  }, 300_000)
})

// `unique-jobs stats --cluster` with any one master down (no replica: the cluster stays down, each phase reached for
// sure however busy the machine): while the others still serve their slots the CLI's store builds (the scripts load on
// the masters that answer; the calls reload them on NOSCRIPT) and answers from the shards that reply, naming the down
// master; once the cluster reports itself down, the connect error says so, not that no node answered. The master is
// restarted after each run. The example is cluster.stats.test.ts.
describe("cluster properties: a master down", () => {
  let downScope: Scope.Closeable
  let cluster: RedisCluster.Cluster
  let downNodes: ReadonlyArray<string>
  beforeAll(async () => {
    downScope = Effect.runSync(Scope.make())
    // A node timeout of 4 s: a master killed is not marked failed before the partial stats has connected.
    cluster = await Effect.runPromise(Scope.provide(RedisCluster.start({ replicas: 0, nodeTimeoutMs: 4000 }), downScope))
    downNodes = cluster.startupNodes.map((node) => `${node.host}:${node.port}`)
  }, 120_000)
  afterAll(() => Effect.runPromise(Scope.close(downScope, Exit.void)))

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
  const stats = (prefix: string) => Effect.runPromise(cli("stats", "--prefix", prefix, "--cluster", downNodes.join(","), "--json"))

  it("property: whichever master is down, stats answers from the others naming it; once the cluster fails, it says the cluster reported itself down", async () => {
    const layout = Layout.cluster()
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 10, max: 60 }), fc.nat(1), async (count, pick) => {
        const prefix = `md${process.pid}x${++seeded}`
        const names = Array.from({ length: count }, (_, i) => `${prefix}:d${i}`)
        await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
          const own = yield* Redis.makeCluster({ nodes: downNodes })
          yield* Effect.forEach(names, (name) =>
            own.lock({ prefix, name }, { jid: `j-${name}`, limit: 1, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false }), {
            concurrency: 16,
            discard: true
          })
        })))
        // The victim: either master that does not hold the prefix's layout record (without it no shard count is known).
        const masters = await Effect.runPromise(cluster.masters)
        const recordOwner = ownerOf(masters[0]!, Layout.slotOf(Layout.recordKey(prefix)))
        const victimPort = masters.filter((port) => port !== recordOwner)[pick]!
        const downShards = Layout.tagsOf(Layout.defaultShards).flatMap((tag, shard) =>
          ownerOf(masters[0]!, Layout.slotOf(`{${tag}}`)) === victimPort ? [shard] : [])
        const downLocks = names.filter((name) => downShards.includes(layout.shardOf({ prefix, name }))).length
        const victim = cluster.nodes.find((node) => node.port === victimPort)!
        await Effect.runPromise(victim.kill)
        try {
          const partial = await stats(prefix)
          const trace = JSON.stringify({ count, victimPort, downShards, code: partial.code, stderr: partial.stderr })
          assert.strictEqual(partial.code, 1, trace)
          assert.include(partial.stderr, "partial answer", trace)
          assert.include(partial.stderr, `127.0.0.1:${victimPort}`, trace)
          const answer = JSON.parse(partial.stdout) as { indexSize: number; unanswered?: Array<{ shard: number }> }
          assert.deepStrictEqual(answer.unanswered?.map((u) => u.shard), downShards, trace)
          assert.strictEqual(answer.indexSize, count - downLocks, trace)

          const survivor = masters.find((port) => port !== victimPort)!
          for (let i = 0; i < 300 && !redisCli(survivor, "cluster", "info").includes("cluster_state:fail"); i++) {
            await new Promise((resolve) => setTimeout(resolve, 100))
          }
          const down = await stats(prefix)
          const downTrace = JSON.stringify({ count, victimPort, code: down.code, stderr: down.stderr })
          assert.strictEqual(down.code, 1, downTrace)
          assert.include(down.stderr, "reported itself down", downTrace)
          assert.notInclude(down.stderr, "none answered", downTrace)
        } finally {
          await Effect.runPromise(victim.restart)
          await Effect.runPromise(cluster.ready)
        }
      }),
      { numRuns: runs(2) }
    )
  }, 300_000)
})
