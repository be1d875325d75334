/**
 * The admin surfaces on Redis Cluster (issue 22): the web UI's JSON API (`Web.nodeHandler` over `Redis.layerCluster`)
 * and the CLI (`--cluster`) list every lock of every shard, show one, and delete one (the web UI through its CSRF
 * token), and two reaper runners on the cluster take turns: one pass at a time across the cluster, cleaning every
 * shard. Locks spread over every master here, so each surface must read every shard to see them all.
 */
import { createServer, request as httpRequest } from "node:http"
import type { AddressInfo } from "node:net"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Result from "effect/Result"
import * as Scope from "effect/Scope"
import { Cluster as IOCluster, Redis as IORedis } from "ioredis"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as Cli from "../src/Cli.js"
import * as Layout from "../src/store/Layout.js"
import * as Reaper from "../src/Reaper.js"
import * as Redis from "../src/Redis.js"
import * as RedisCluster from "../src/testing/RedisCluster.js"
import * as Web from "../src/Web.js"

let scope: Scope.Closeable
let cluster: RedisCluster.Cluster
let nodes: ReadonlyArray<string>
let store: Redis.Store
beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  cluster = await Effect.runPromise(Scope.provide(RedisCluster.start(), scope))
  nodes = cluster.startupNodes.map((node) => `${node.host}:${node.port}`)
  store = await Effect.runPromise(Scope.provide(Redis.makeCluster({ nodes }), scope))
})
afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

const run = <A, E>(effect: Effect.Effect<A, E, Redis.RedisService>) =>
  Effect.runPromise(Effect.provideService(effect, Redis.RedisService, store))

/** `count` queue locks and one leased run lock under `prefix`; their names. */
const seed = (prefix: string, count: number) =>
  run(Effect.forEach(Array.from({ length: count }, (_, i) => `${prefix}:d${i}`), (name) =>
    Effect.as(
      Effect.flatMap(Redis.RedisService, (redis) =>
        redis.lock({ prefix, name }, { jid: `j-${name}`, limit: 1, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false })),
      name
    ), { concurrency: 32 }))

const send = (url: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}) =>
  new Promise<{ status: number; headers: Record<string, string | Array<string> | undefined>; body: string }>(
    (resolve, reject) => {
      const req = httpRequest(url, { method: options.method ?? "GET", headers: options.headers ?? {} }, (res) => {
        let body = ""
        res.on("data", (chunk: Buffer) => (body += chunk.toString()))
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }))
      })
      req.on("error", reject)
      req.end(options.body)
    }
  )

const cli = async (...args: Array<string>) => {
  const lines: Array<string> = []
  await Effect.runPromise(Effect.gen(function*() {
    const console = yield* Console.Console
    const capture: Console.Console = {
      ...console,
      log: (...parts: ReadonlyArray<unknown>) => void lines.push(parts.join(" "))
    }
    yield* Cli.run(["node", "unique-jobs", ...args, "--cluster", nodes.join(","), "--json"]).pipe(
      Effect.provideService(Console.Console, capture),
      Effect.provide(Cli.platform)
    )
  }))
  return JSON.parse(lines.join("\n")) as unknown
}

describe("Redis.makeCluster's options", () => {
  it("are decoded before any connection, naming the field; an unreachable cluster is a RedisError within the timeout", async () => {
    const refused = async (options: unknown) => {
      const exit = await Effect.runPromiseExit(Effect.scoped(Redis.makeCluster(options as Redis.ClusterOptions)))
      assert.isTrue(Exit.isFailure(exit))
      // The cause is exactly one failure (v3's `cause._tag === "Fail"`).
      const only = Exit.isFailure(exit) && exit.cause.reasons.length === 1 ? exit.cause.reasons[0]! : undefined
      const error = only !== undefined && Cause.isFailReason(only) ? only.error : undefined
      assert.strictEqual(error?._tag, "RedisError")
      return error!
    }
    for (const [options, words] of [
      [{ nodes: [] }, "nodes: expected at least one node"],
      [{ nodes: ["nohostport"] }, "expected a node as \"host:port\" or { host, port }"],
      [{ nodes: ["127.0.0.1:1"], shards: 0 }, "shards: expected a shard count (a whole number from 1 to 1024)"],
      [{ nodes: ["127.0.0.1:1"], shards: 1.5 }, "shards: expected a shard count"],
      [{ nodes: ["127.0.0.1:1"], shards: 1e9 }, "shards: expected a shard count"],
      [{ nodes: ["127.0.0.1:1"], timeout: -1 }, "timeout: expected a positive duration"],
      [{ nodes: ["127.0.0.1:1"], host: "x" }, "host: is not a Redis option here; ioredis options go under client"],
      [5, "expected Redis Cluster options like { nodes"]
    ] as const) {
      const error = await refused(options)
      assert.strictEqual(error.operation, "options", JSON.stringify(options))
      assert.include(error.reason, words)
    }
    const unreachable = await refused({ nodes: ["127.0.0.1:1"], timeout: "1 second" })
    assert.strictEqual(unreachable.operation, "connect")
    assert.include(unreachable.reason, "no connection within 1s")
  })

  it("makeFromClient: shards are decoded as makeCluster's are, and only a Cluster client takes them", async () => {
    const fromClient = (client: Redis.Client, options: Redis.FromClientOptions) =>
      Effect.runPromise(Effect.flip(Redis.makeFromClient(client, options)))
    const cluster = new IOCluster(nodes.map((node) => ({ host: "127.0.0.1", port: Number(node.split(":")[1]) })))
    cluster.on("error", () => {})
    const single = new IORedis(Number(nodes[0]!.split(":")[1]), "127.0.0.1", { lazyConnect: true })
    try {
      for (const shards of [0, -1, Number.NaN, 1.5, 1e9]) {
        const error = await fromClient(cluster, { shards })
        assert.strictEqual(error.operation, "options")
        assert.include(error.reason, "shards: expected a shard count (a whole number from 1 to 1024)", String(shards))
      }
      const excess = await fromClient(cluster, { shards: 4, nodes: [] } as unknown as Redis.FromClientOptions)
      assert.include(excess.reason, "nodes")
      assert.include((await fromClient(single, { shards: 4 })).reason, "shards: only a Redis Cluster client is sharded")
    } finally {
      cluster.disconnect()
      single.disconnect()
    }
  })
})

describe("a master that stalls", () => {
  it("calls to its shards fail with RedisError within the timeout, the others succeed; once it answers, no failed call's lock is held", async () => {
    const prefix = `stall${process.pid}`
    const masters = await Effect.runPromise(cluster.masters)
    const victim = new IORedis(masters[0]!, "127.0.0.1")
    const results = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const short = yield* Redis.makeCluster({ nodes, timeout: 500 })
      // The prefix's layout read before the stall, as a running process has it (its record is in one slot).
      yield* Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, short))
      yield* Effect.promise(() => victim.ping())
      // Every client of that master waits 3 s (its replica-less shard answers nothing meanwhile).
      const paused = victim.call("CLIENT", "PAUSE", "3000", "ALL")
      const names = Array.from({ length: 60 }, (_, i) => `${prefix}:d${i}`)
      const answers = yield* Effect.forEach(names, (name) =>
        Effect.result(
          short.lock({ prefix, name }, { jid: "j", limit: 1, ttlMs: 0, leaseMs: 60_000, info: "", fenced: true })
        ), { concurrency: "unbounded" })
      yield* Effect.promise(() => paused)
      return names.map((name, i) => ({ name, answer: answers[i]! }))
    })))
    victim.disconnect()
    const failed = results.filter((r) => Result.isFailure(r.answer))
    assert.isAbove(failed.length, 0, "some digests are on the stalled master")
    assert.isBelow(failed.length, results.length, "the other masters answered")
    // The 60 asked in one turn went as one batch per shard (issue 39): a stalled shard's batch fails only its steps.
    for (const { answer } of results) if (Result.isSuccess(answer)) assert.strictEqual(answer.success._tag, "Acquired")
    for (const { answer } of failed) {
      assert.strictEqual(Result.isFailure(answer) && answer.failure._tag, "RedisError")
      // Our deadline or ioredis' commandTimeout, both set to the timeout: whichever fires first.
      assert.match(Result.isFailure(answer) ? answer.failure.reason : "", /no answer within 500ms|Command timed out/)
    }
    // The late locks ran once the master answered; each was undone after it, on the same connection.
    const heldOf = () =>
      run(Effect.forEach(failed, ({ name }) =>
        Effect.map(Effect.flatMap(Redis.RedisService, (redis) => redis.fetch({ prefix, name })), (f) => f.holders.length)))
    let held = await heldOf()
    for (let i = 0; i < 100 && held.some((n) => n > 0); i++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
      held = await heldOf()
    }
    assert.deepStrictEqual(held.filter((n) => n > 0), [], "no lock is left for a call that failed")
  })
})

describe("the admin surfaces on Redis Cluster", () => {
  it("the web UI's API lists every shard's locks page by page, shows one, and deletes one", async () => {
    const prefix = `web${process.pid}`
    const names = await seed(prefix, 300)
    const shards = new Set(names.map((name) => Layout.cluster().shardOf({ prefix, name })))
    assert.strictEqual(shards.size, Layout.defaultShards, "the locks fall in every shard")
    const admin = Web.nodeHandler({ redis: Redis.layerCluster({ nodes }), prefix })
    const http = createServer(admin.handle)
    await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))
    const base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`
    try {
      const seen: Array<string> = []
      let cursor = "0"
      do {
        const page = await send(`${base}/api/locks?count=40&cursor=${cursor}`)
        assert.strictEqual(page.status, 200, page.body)
        const body = JSON.parse(page.body) as { next: string; items: ReadonlyArray<{ digest: string }> }
        seen.push(...body.items.map((item) => item.digest))
        cursor = body.next
      } while (cursor !== "0")
      assert.deepStrictEqual([...seen].sort(), [...names].sort(), "every lock of every shard, once")

      const shown = await send(`${base}/api/lock?digest=${encodeURIComponent(names[7]!)}`)
      assert.strictEqual(shown.status, 200, shown.body)
      assert.include(shown.body, `j-${names[7]}`)

      const session = await send(`${base}/api/session`)
      const cookie = String(session.headers["set-cookie"] ?? "").split(";")[0]!
      const { csrf } = JSON.parse(session.body) as { csrf: string }
      const deleted = await send(`${base}/api/lock/delete`, {
        method: "POST",
        headers: { cookie, "x-csrf-token": csrf, "content-type": "application/json" },
        body: JSON.stringify({ digest: names[7] })
      })
      assert.strictEqual(deleted.status, 200, deleted.body)
      assert.deepStrictEqual((await run(Effect.flatMap(Redis.RedisService, (r) => r.fetch({ prefix, name: names[7]! })))).holders, [])
    } finally {
      http.close()
      http.closeAllConnections()
      await admin.dispose()
    }
  })

  it("the CLI with --cluster lists, shows and deletes on every shard", async () => {
    const prefix = `cli${process.pid}`
    const names = await seed(prefix, 120)
    const listed = ((await cli("locks", "list", "--limit", "1000", "--prefix", prefix)) as {
      readonly items: ReadonlyArray<{ readonly digest: string }>
    }).items
    assert.deepStrictEqual(listed.map((lock) => lock.digest).sort(), [...names].sort())
    const shown = JSON.stringify(await cli("locks", "show", names[3]!, "--prefix", prefix))
    assert.include(shown, `j-${names[3]}`)
    const deleted = (await cli("locks", "del", `${prefix}:d1*`, "--prefix", prefix)) as { matched: number; deleted: number }
    // d1, d10..d19, d100..d119
    assert.deepStrictEqual([deleted.matched, deleted.deleted], [31, 31])
    const left = ((await cli("locks", "list", "--limit", "1000", "--prefix", prefix)) as {
      readonly items: ReadonlyArray<{ readonly digest: string }>
    }).items
    assert.strictEqual(left.length, 120 - 31)
  })

  it("two reaper runners: one pass at a time across the cluster, and a pass cleans every shard", async () => {
    const prefix = `reaper${process.pid}`
    const names = await seed(prefix, 200)
    // Each lock's holder ends (expired by hand: its entry's expiry set in the past), leaving work in every shard.
    await run(Effect.flatMap(Redis.RedisService, (redis) =>
      Effect.forEach(names, (name) =>
        Effect.flatMap(redis.lock({ prefix, name }, { jid: "short", limit: 2, ttlMs: 1, leaseMs: 0, info: "", fenced: false }), () =>
          redis.unlock({ prefix, name }, `j-${name}`)), { concurrency: 32, discard: true })))
    await new Promise((resolve) => setTimeout(resolve, 20))
    const [first, second] = await run(Effect.all([Reaper.make({ prefix, batch: 50 }), Reaper.make({ prefix, batch: 50 })]))
    // The first holds the lease while it walks; the second is refused at its first step.
    let refusedMidway = false
    const pass = await run(first!.pass(() =>
      Effect.map(Effect.provideService(second!.pass(), Redis.RedisService, store), (other) => {
        if (!other.ran) refusedMidway = true
      }).pipe(Effect.orDie)))
    assert.isTrue(pass.ran)
    assert.isTrue(refusedMidway, "the other runner did nothing while the first walked")
    assert.strictEqual(pass.holders, 200, "every shard's ended holders")
    assert.strictEqual(pass.members, 200)
    const page = await run(Effect.flatMap(Redis.RedisService, (redis) => redis.scan(prefix, "0", "*", 1000)))
    assert.deepStrictEqual(page.members, [])
    await run(first!.release)
    assert.isTrue((await run(second!.pass())).ran, "once given up, the other runner passes")
  })
})
