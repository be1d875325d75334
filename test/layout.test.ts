/**
 * The layout is data (issue 35): where a prefix's keys live is recorded in Redis the first time it is used, every
 * store checks it, and a process configured otherwise is refused. Also the cluster layout's slot rule, by example,
 * with no cluster: a lock's queue and run phases, its index shard and its fencing counter share one hash slot.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Fiber from "effect/Fiber"
import { Redis as IORedis } from "ioredis"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import { LayoutMismatch } from "../src/Errors.js"
import * as Direct from "../src/store/Direct.js"
import * as Layout from "../src/store/Layout.js"
import * as RedisOptions from "../src/store/RedisOptions.js"
import type * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Locks from "../src/Locks.js"
import * as Reaper from "../src/Reaper.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as Bull from "./support/bullmq.js"
import { closedPort, runCli, thirtyLocks } from "./support/layout.js"
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
          assert.strictEqual(Layout.slotOf(q.resets), slot, `${queue.name}'s retired layouts (shards ${shards})`)
          assert.strictEqual(q.resets, layout.resets(prefix, layout.shardOf(queue)))
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

/** The layout `<prefix>:layout` records, its epoch left out (JSON as records were written before epochs); null for none. */
const recordOf = (raw: IORedis, prefix: string) =>
  Effect.promise(async () => {
    const text = await raw.get(`${prefix}:layout`)
    if (text === null) return null
    const { epoch: _epoch, ...rest } = JSON.parse(text) as { readonly epoch?: string }
    return JSON.stringify(rest)
  })

/** `store`'s process running job `jid` of `unique` (digest of [7]) until `release`, once it has started. */
const holding = (unique: UniqueJob.UniqueJob, store: Redis.Store, queue: JobQueue["Service"], jid: string) =>
  Effect.gen(function*() {
    const started = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const one = yield* unique.perform(job(jid, [7]), () => Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(release))).pipe(
      Effect.provideService(Redis.RedisService, store),
      Effect.provideService(JobQueue, queue),
      Effect.forkChild
    )
    yield* Deferred.await(started)
    return { one, release }
  })

/**
 * Two processes running the same while_executing job at once, each with its own store: the first holds its run lock
 * while the second tries. The second's answer (or its failure) is returned, and whether the first was still running.
 */
const twoRuns = (first: Redis.Store, second: Redis.Store, prefix: string) =>
  Effect.gen(function*() {
    const unique = yield* UniqueJob.make({ worker: "Report", lock: "while_executing", lockPrefix: prefix, lockLease: "30 seconds" })
    const queue = yield* MemoryQueue.make()
    const { one, release } = yield* holding(unique, first, queue, "j1")
    const two = yield* unique.perform(job("j2", [7]), () => Effect.succeed("ran")).pipe(
      Effect.provideService(Redis.RedisService, second),
      Effect.provideService(JobQueue, queue),
      Effect.result
    )
    yield* Deferred.succeed(release, undefined)
    const firstOutcome = yield* Fiber.join(one)
    return { two, first: firstOutcome._tag }
  })

describe("a prefix's layout is recorded and checked (observation 1, one Redis)", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("a process on a cluster layout with other shards never runs a job beside the first: it is refused", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("shards")
        const wide = yield* storeOf(24)
        const narrow = yield* storeOf(4)
        const { two, first } = yield* twoRuns(wide, narrow, prefix)
        assert.strictEqual(first, "Performed")
        assert.strictEqual(two._tag, "Failure", `the second process ran the job beside the first: ${JSON.stringify(two)}`)
        if (two._tag !== "Failure") return
        const error = two.failure as Redis.RedisError
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

    it.effect("a standalone process and a cluster-layout process on one prefix: the second is refused, either way round", () =>
      Effect.gen(function*() {
        for (const [a, b] of [[undefined, 24], [24, undefined]] as const) {
          const prefix = RedisTest.uniquePrefix("standalone")
          const { two, first } = yield* twoRuns(yield* storeOf(a), yield* storeOf(b), prefix)
          assert.strictEqual(first, "Performed")
          assert.strictEqual(two._tag, "Failure", `${a} then ${b}: the second process ran the job beside the first`)
          if (two._tag === "Failure") assert.instanceOf((two.failure as Redis.RedisError).cause, LayoutMismatch)
        }
      }))
  })
})

describe("a prefix's layout: refused at build, foreign records, never a lock", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("UniqueQueue on one Redis, where the prefix is recorded as a cluster's: its first add fails with LayoutMismatch, nothing added", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const lockPrefix = RedisTest.uniquePrefix("uq")
        // A process on the cluster layout took the prefix first.
        const clustered = yield* storeOf(4)
        yield* Redis.checkLayout(lockPrefix).pipe(Effect.provideService(Redis.RedisService, clustered))
        const queue = yield* Bull.queue(Bull.uniqueName("layout"))
        const unique = yield* Effect.acquireRelease(
          Effect.sync(() =>
            UniqueQueue.make(queue, { lock: "until_executed", lockPrefix, redis: { url: source.url }, defaults: {}, history: false })
          ),
          (u) => Effect.promise(() => u.close())
        )
        for (let attempt = 0; attempt < 2; attempt++) {
          const refused = yield* Effect.promise(() => unique.add("Work", { n: 1 }).then(() => undefined, (error: unknown) => error))
          assert.instanceOf(refused, LayoutMismatch, `attempt ${attempt}`)
          const mismatch = refused as LayoutMismatch
          assert.strictEqual(mismatch.recorded, "Redis Cluster with 4 shards")
          assert.strictEqual(mismatch.configured, "one Redis (standalone)")
          assert.strictEqual(mismatch.prefix, lockPrefix)
        }
        assert.strictEqual(yield* Effect.promise(() => queue.count()), 0, "nothing was added")
        assert.deepStrictEqual(yield* Effect.promise(() => raw.keys(`${lockPrefix}:*`)), [`${lockPrefix}:layout`])
        assert.strictEqual(yield* recordOf(raw, lockPrefix), JSON.stringify({ layout: "cluster", shards: 4 }))
      }))

    it.effect("checkLayout records the layout once; a store of the same layout agrees; the record has no TTL", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("check")
        for (const store of [yield* storeOf(undefined), yield* storeOf(undefined)]) {
          yield* Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, store))
          const seen = yield* store.layout!(prefix)
          assert.deepStrictEqual(seen, { cluster: false, shards: 1, recorded: true })
        }
        assert.strictEqual(yield* recordOf(raw, prefix), JSON.stringify({ layout: "standalone" }))
        assert.strictEqual(yield* Effect.promise(() => raw.pttl(`${prefix}:layout`)), -1)
        const other = yield* Effect.flip(Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, yield* storeOf(48))))
        assert.strictEqual(other._tag, "LayoutMismatch")
        assert.include(other.message, "configured for Redis Cluster with 48 shards")
        assert.include(other.message, "as one Redis (standalone)")
      }))

    it.effect("a key of that name this library did not write (a string, a hash) refuses the prefix, naming the key; nothing is written", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const writes: Array<(key: string) => Promise<unknown>> = [(key) => raw.set(key, "blue"), (key) => raw.hset(key, "a", "1")]
        for (const write of writes) {
          const prefix = RedisTest.uniquePrefix("foreign")
          const key = `${prefix}:layout`
          yield* Effect.promise(() => write(key))
          const store = yield* storeOf(undefined)
          const built = yield* Effect.flip(Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, store)))
          assert.strictEqual(built._tag, "LayoutMismatch")
          assert.isTrue((built as LayoutMismatch).foreign)
          assert.include(built.message, key)
          const locked = yield* Effect.flip(store.lock({ prefix, name: `${prefix}:abc` }, {
            jid: "j",
            limit: 1,
            ttlMs: 0,
            leaseMs: 0,
            info: "",
            fenced: false
          }))
          assert.strictEqual(locked.operation, "layout")
          assert.deepStrictEqual((yield* Effect.promise(() => raw.keys(`${prefix}:*`))).sort(), [key])
          yield* Effect.promise(() => raw.del(key))
          // Once the key is gone, the prefix is recorded and locks.
          const after = yield* store.lock({ prefix, name: `${prefix}:abc` }, {
            jid: "j",
            limit: 1,
            ttlMs: 60_000,
            leaseMs: 0,
            info: "",
            fenced: false
          })
          assert.strictEqual(after._tag, "Acquired")
        }
      }))

    it.effect("the record is never listed, counted, reaped or deleted as a lock", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        for (const shards of [undefined, 4] as const) {
          const prefix = RedisTest.uniquePrefix("admin")
          const store = yield* storeOf(shards)
          const unique = yield* UniqueJob.make({ worker: "Report", lock: "until_executed", lockPrefix: prefix })
          const queue = yield* MemoryQueue.make()
          const program = Effect.gen(function*() {
            for (let n = 0; n < 5; n++) yield* unique.enqueue([n])
            const locks = yield* Locks.make({ prefix })
            // Every page (a cluster layout's scan goes a shard at a time).
            const names: Array<string> = []
            let cursor = "0"
            do {
              const page = yield* locks.list({ count: 1000, cursor })
              names.push(...page.items.map((entry) => entry.name))
              cursor = page.cursor
            } while (cursor !== "0")
            assert.strictEqual(names.length, 5)
            assert.notInclude(names, `${prefix}:layout`)
            assert.strictEqual((yield* locks.stats).indexSize, 5)
            let deleted = 0
            do {
              const page = yield* locks.deleteByPattern(`${prefix}:*`, { count: 1000, cursor })
              deleted += page.deleted
              cursor = page.cursor
            } while (cursor !== "0")
            assert.strictEqual(deleted, 5)
            const reaper = yield* Reaper.make({ prefix })
            yield* reaper.pass()
            yield* reaper.release
          }).pipe(Effect.provideService(Redis.RedisService, store), Effect.provideService(JobQueue, queue))
          yield* program
          assert.strictEqual(
            yield* recordOf(raw, prefix),
            shards === undefined ? JSON.stringify({ layout: "standalone" }) : JSON.stringify({ layout: "cluster", shards })
          )
        }
      }))
  })
})

describe("the CLI reads the layout Redis records (observation 1, one Redis)", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("an app on shards 48 or 4 holding 30 until_executed locks: locks list, stats and reap see all 30 with no flag", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        for (const shards of [48, 4]) {
          const prefix = RedisTest.uniquePrefix(`cli${shards}`)
          yield* thirtyLocks(yield* storeOf(shards), prefix)
          const where = ["--redis-url", source.url, "--prefix", prefix, "--json"]
          const list = yield* runCli(["locks", "list", "--limit", "1000", ...where])
          assert.isTrue(list.exit._tag === "Success", String(list.exit))
          assert.strictEqual((JSON.parse(list.stdout) as { items: Array<unknown> }).items.length, 30, `shards ${shards}: locks list`)
          const stats = yield* runCli(["stats", ...where])
          assert.strictEqual((JSON.parse(stats.stdout) as { indexSize: number }).indexSize, 30, `shards ${shards}: stats`)
          const reap = yield* runCli(["reap", ...where])
          assert.strictEqual((JSON.parse(reap.stdout) as { scanned: number }).scanned, 30, `shards ${shards}: reap`)
        }
      }))

    it.effect("unique-jobs --cluster that reaches no node names the nodes it tried, not a url (observation 3)", () =>
      Effect.gen(function*() {
        const ports = [yield* closedPort, yield* closedPort]
        const nodes = ports.map((port) => `127.0.0.1:${port}`)
        const ran = yield* runCli(["stats", "--cluster", nodes.join(","), "--json"])
        assert.strictEqual(ran.exit._tag, "Failure")
        const message = ran.exit._tag === "Failure" ? String(Cause.squash(ran.exit.cause)) : ""
        assert.include(message, `the Redis Cluster at ${nodes.join(", ")}`)
        assert.notInclude(message, "configured url")
      }))

    it.effect("where nothing is recorded the CLI keeps today's default and records nothing", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("cli-none")
        const stats = yield* runCli(["stats", "--redis-url", source.url, "--prefix", prefix, "--json"])
        assert.strictEqual((JSON.parse(stats.stdout) as { indexSize: number }).indexSize, 0)
        assert.deepStrictEqual(yield* Effect.promise(() => raw.keys(`${prefix}:*`)), [])
      }))
  })
})

describe("moving a prefix to another layout: drain, then unique-jobs layout reset", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("refused while any lock is held; once drained, the record goes and the next process records its own", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("move")
        const where = ["--redis-url", source.url, "--prefix", prefix]
        const old = yield* storeOf(24)
        yield* thirtyLocks(old, prefix)
        const shown = yield* runCli(["layout", "show", ...where, "--json"])
        assert.deepStrictEqual(JSON.parse(shown.stdout), { cluster: true, shards: 24, recorded: true })
        // Locks held: refused, nothing changed.
        const refused = yield* runCli(["layout", "reset", ...where])
        assert.strictEqual(refused.exit._tag, "Failure")
        assert.include(refused.exit._tag === "Failure" ? String(Cause.squash(refused.exit.cause)) : "", "still holds locks")
        assert.strictEqual(yield* recordOf(raw, prefix), JSON.stringify({ layout: "cluster", shards: 24 }))
        // Drained (here, every lock deleted), the reset goes through.
        const deleted = yield* runCli(["locks", "del", `${prefix}:*`, ...where, "--json"])
        assert.strictEqual((JSON.parse(deleted.stdout) as { deleted: number }).deleted, 30)
        const reset = yield* runCli(["layout", "reset", ...where, "--json"])
        assert.deepStrictEqual(JSON.parse(reset.stdout), { reset: true })
        assert.isNull(yield* Effect.promise(() => raw.get(`${prefix}:layout`)))
        const again = yield* runCli(["layout", "reset", ...where, "--json"])
        assert.deepStrictEqual(JSON.parse(again.stdout), { reset: false })
        // A process on the new layout records it and locks; one on the old is now refused.
        const moved = yield* storeOf(4)
        yield* thirtyLocks(moved, prefix)
        assert.strictEqual(yield* recordOf(raw, prefix), JSON.stringify({ layout: "cluster", shards: 4 }))
        const stale = yield* Effect.flip(Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, yield* storeOf(24))))
        assert.strictEqual(stale._tag, "LayoutMismatch")
        const stats = yield* runCli(["stats", ...where, "--json"])
        assert.strictEqual((JSON.parse(stats.stdout) as { indexSize: number }).indexSize, 30)
      }))
  })
})

describe("a process that read the layout before a layout reset (issue 47, observation 4)", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    const request = (jid: string) => ({ jid, limit: 1, ttlMs: 0, leaseMs: 30_000, info: "", fenced: true })

    it.effect("A (shards 24) read the layout, a reset passed between its runs, B (shards 4) holds the digest: A's next run is refused, typed, and never runs beside B", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("stale")
        const where = ["--redis-url", source.url, "--prefix", prefix]
        const a = yield* storeOf(24)
        const unique = yield* UniqueJob.make({ worker: "Report", lock: "while_executing", lockPrefix: prefix, lockLease: "30 seconds" })
        const queue = yield* MemoryQueue.make()
        const onA = <X, E>(self: Effect.Effect<X, E, Redis.RedisService | JobQueue>) =>
          self.pipe(Effect.provideService(Redis.RedisService, a), Effect.provideService(JobQueue, queue))
        // A runs once (its layout recorded and read), and its index is empty between runs.
        assert.strictEqual((yield* onA(unique.perform(job("a1", [7]), () => Effect.void)))._tag, "Performed")
        const reset = yield* runCli(["layout", "reset", ...where, "--json"])
        assert.deepStrictEqual(JSON.parse(reset.stdout), { reset: true })
        // B, started on the new layout, holds the digest's run lock while A tries again.
        const { one: onB, release } = yield* holding(unique, yield* storeOf(4), queue, "b1")
        let ranBeside = 0
        for (const jid of ["a2", "a3"]) {
          const again = yield* Effect.result(onA(unique.perform(job(jid, [7]), () => Effect.sync(() => ranBeside++))))
          assert.strictEqual(again._tag, "Failure", `${jid} ran beside B: ${JSON.stringify(again)}`)
          if (again._tag !== "Failure") continue
          const error = again.failure as Redis.RedisError
          assert.strictEqual(error._tag, "RedisError")
          assert.instanceOf(error.cause, LayoutMismatch)
          const refusal = error.cause as LayoutMismatch
          assert.isTrue(refusal.reset)
          assert.strictEqual(refusal.prefix, prefix)
          assert.strictEqual(refusal.recorded, "Redis Cluster with 24 shards")
          assert.include(error.message, "layout reset")
          assert.include(error.message, "locks nothing more")
        }
        // The Promise face's direct call (no fiber) is refused the same way, and a queue lock too.
        const direct = yield* Effect.promise(() =>
          Direct.directOf(a)!.lock({ prefix, name: `${prefix}:beef` }, request("d1")).then(() => undefined, (error: unknown) => error)
        )
        assert.instanceOf((direct as Redis.RedisError).cause, LayoutMismatch)
        const queued = yield* Effect.flip(a.lock({ prefix, name: `${prefix}:cafe` }, { ...request("q1"), fenced: false, leaseMs: 0, ttlMs: 60_000 }))
        assert.instanceOf(queued.cause, LayoutMismatch)
        assert.strictEqual(ranBeside, 0)
        yield* Deferred.succeed(release, undefined)
        assert.strictEqual((yield* Fiber.join(onB))._tag, "Performed")
        // A handoff (until_and_while_executing) of A's is refused too.
        const both = yield* UniqueJob.make({ worker: "Both", lock: "until_and_while_executing", lockPrefix: prefix, lockLease: "30 seconds" })
        const handed = yield* Effect.result(onA(both.perform(job("h1", [1]), () => Effect.sync(() => ranBeside++))))
        assert.strictEqual(handed._tag, "Failure")
        assert.strictEqual(ranBeside, 0)
        // A store built now, on the old layout, is refused as any process configured otherwise is.
        const late = yield* Effect.flip(Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, yield* storeOf(24))))
        assert.strictEqual(late._tag, "LayoutMismatch")
        assert.include(late.message, "Redis Cluster with 4 shards")
      }))

    it.effect("the same layout recorded again after the reset is another epoch: a process that read the old one stays refused; a record written before epochs is retired too", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        for (const legacy of [false, true]) {
          const prefix = RedisTest.uniquePrefix(legacy ? "legacy" : "again")
          if (legacy) yield* Effect.promise(() => raw.set(`${prefix}:layout`, JSON.stringify({ layout: "standalone" })))
          const old = yield* storeOf(undefined)
          const lock = { prefix, name: `${prefix}:abc` }
          const taken = yield* old.lock(lock, request("j1"))
          assert.strictEqual(taken._tag, "Acquired")
          yield* old.unlock(lock, "j1", taken._tag === "Acquired" ? taken.fence : 0)
          assert.isTrue(yield* Redis.resetLayout(prefix).pipe(Effect.provideService(Redis.RedisService, yield* storeOf(undefined))))
          // A new process records the same layout (standalone) and locks.
          const fresh = yield* storeOf(undefined)
          assert.strictEqual((yield* fresh.lock(lock, request("j2")))._tag, "Acquired")
          const refused = yield* Effect.flip(old.lock(lock, request("j3")))
          assert.isTrue((refused.cause as LayoutMismatch).reset, `legacy ${legacy}`)
          assert.strictEqual((refused.cause as LayoutMismatch).recorded, "one Redis (standalone)")
        }
      }))

    it.effect("a lock taken after the reset's scan refuses the reset: nothing retired, the record kept, the process goes on", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("midreset")
        const a = yield* storeOf(24)
        const lock = { prefix, name: `${prefix}:${hexes(1, 32)[0]}` }
        assert.strictEqual((yield* a.lock(lock, request("j1")))._tag, "Acquired")
        const before = yield* Effect.promise(() => raw.get(`${prefix}:layout`))
        // The store's own step, as if the lock came after Redis.resetLayout's scan found the prefix empty.
        const operator = yield* storeOf(24)
        const refused = yield* Effect.flip(operator.resetLayout!(prefix))
        assert.strictEqual(refused._tag, "RedisError")
        assert.include(refused.message, "still runs")
        assert.strictEqual(yield* Effect.promise(() => raw.get(`${prefix}:layout`)), before)
        const resets = Array.from({ length: 24 }, (_, shard) => Layout.cluster(24).resets(prefix, shard))
        assert.deepStrictEqual(yield* Effect.promise(() => Promise.all(resets.map((key) => raw.exists(key)))), resets.map(() => 0))
        assert.strictEqual((yield* a.lock({ prefix, name: `${prefix}:${hexes(2, 32)[1]}` }, request("j2")))._tag, "Acquired")
      }))
  })
})

describe("which layouts a record may name (issue 47, item 8)", () => {
  // Every shard count a store can be configured with, and the ones around them.
  const counts: ReadonlyArray<unknown> = [-1, 0, 0.5, 1, 1.5, 2, 3, 24, 1023, 1024, 1025, 4096, "4", null, true, 2 ** 53]

  it("a recorded cluster is read back exactly when Redis.makeFromClient takes its shards: 1 to 1024, one shard included", () => {
    for (const shards of counts) {
      const configurable = Result.isSuccess(RedisOptions.decodeFromClient({ shards }))
      const read = Layout.decodeRecord(JSON.stringify({ layout: "cluster", shards }))
      assert.strictEqual(read !== undefined, configurable, `a record of a cluster of ${JSON.stringify(shards)} shards`)
      if (read !== undefined) {
        assert.isTrue(read.layout.cluster)
        assert.strictEqual(read.layout.shards, shards)
        assert.strictEqual(Layout.decode(Layout.encode(read.layout, "ab12")), read.layout, "encode reads back")
      }
    }
    // The one standalone shape, with or without an epoch; nothing else.
    assert.strictEqual(Layout.decode(JSON.stringify({ layout: "standalone" })), Layout.standalone)
    assert.strictEqual(Layout.decodeRecord(JSON.stringify({ layout: "standalone", epoch: "0f" }))?.epoch, "0f")
    for (const other of [{ layout: "standalone", shards: 1 }, { layout: "cluster" }, { layout: "Cluster", shards: 4 }, { shards: 4 }, { layout: "cluster", shards: 4, epoch: 7 }]) {
      assert.isUndefined(Layout.decodeRecord(JSON.stringify(other)), JSON.stringify(other))
    }
  })

  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("a process on a cluster of one shard records it, a second one agrees, and the CLI reads it; a record of 0 or 1025 shards is foreign", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("one-shard")
        for (const store of [yield* storeOf(1), yield* storeOf(1)]) {
          yield* Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, store))
          assert.deepStrictEqual(yield* store.layout!(prefix), { cluster: true, shards: 1, recorded: true })
        }
        assert.strictEqual(yield* recordOf(raw, prefix), JSON.stringify({ layout: "cluster", shards: 1 }))
        const shown = yield* runCli(["layout", "show", "--redis-url", source.url, "--prefix", prefix])
        assert.strictEqual(shown.stdout, `${prefix}: Redis Cluster, 1 shard`)
        // A standalone store is refused beside it, not taken for the same layout.
        const standalone = yield* Effect.flip(Redis.checkLayout(prefix).pipe(Effect.provideService(Redis.RedisService, yield* storeOf(undefined))))
        assert.strictEqual(standalone._tag, "LayoutMismatch")
        assert.isFalse((standalone as LayoutMismatch).foreign)
        for (const shards of [0, 1025]) {
          const odd = RedisTest.uniquePrefix("odd-shards")
          yield* Effect.promise(() => raw.set(`${odd}:layout`, JSON.stringify({ layout: "cluster", shards })))
          const refused = yield* Effect.flip(Redis.checkLayout(odd).pipe(Effect.provideService(Redis.RedisService, yield* storeOf(24))))
          assert.strictEqual(refused._tag, "LayoutMismatch")
          assert.isTrue((refused as LayoutMismatch).foreign, `${shards} shards`)
        }
      }))
  })
})
