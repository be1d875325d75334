/**
 * The reaper on a real Redis: it removes what no live holder needs (index members whose lock is gone, holders past
 * their expiry or lease, no-TTL holders whose job the queue no longer knows), never a live holder, and runs one at a
 * time across runners. Real time (the live clock): Redis' TTLs and leases run on it.
 */
import { assert, describe, layer } from "@effect/vitest"
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as TestClock from "effect/testing/TestClock"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Reaper from "../src/Reaper.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as RedisTest from "./support/redis.js"
import * as VirtualRedis from "./support/virtualRedis.js"

/** The index's members as Redis holds them: every shard's, in shard order (one shard on one Redis). */
const index = (prefix: string) =>
  Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
    Effect.promise(async () => {
      const shards = Array.from({ length: RedisTest.layout.shards }, (_, i) => RedisTest.layout.index(prefix, i))
      return (await Promise.all(shards.map((key) => raw.zrange(key, "0", "-1")))).flat()
    }))

/** Waits (real time, up to 30 s) until `done` holds. */
const until = (done: Effect.Effect<boolean, unknown, Redis.RedisService | RedisTest.TestRedis>) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 30_000
    while (!(yield* done) && Date.now() < deadline) {
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 20)))
    }
  })

const queueLock = (jid: string, ttlMs = 0): Redis.HolderRequest => ({
  jid,
  limit: 1,
  ttlMs,
  leaseMs: 0,
  info: "",
  queue: "default",
  fenced: false
})
const runLock = (jid: string, leaseMs: number): Redis.HolderRequest => ({
  jid,
  limit: 1,
  ttlMs: 0,
  leaseMs,
  info: "",
  fenced: true
})

/** The index's members, on any store. */
const members = (prefix: string) =>
  Effect.flatMap(Redis.RedisService, (redis) =>
    Effect.map(redis.scan(prefix, "0", "*", 1000), (page) => page.members.map((m) => m.name).sort()))

const badOptions: ReadonlyArray<readonly [keyof Reaper.Options, ReadonlyArray<unknown>]> = [
  ["interval", [0, -1, Number.NaN, "abc", 9, 10.5, Number.POSITIVE_INFINITY, 1e20, "-1 seconds", "2 days"]],
  ["lease", [0, -1, Number.NaN, "abc", 99, 150.5, Number.POSITIVE_INFINITY, 1e20, "-1 seconds", "2 days"]],
  ["grace", [0, -1, Number.NaN, "abc", 0.5, 1.5, Number.POSITIVE_INFINITY, 1e20, "-1 seconds"]],
  ["batch", [0, -1, Number.NaN, "abc", 1.5, 1001, 1e20]]
]

/** The scripted boundaries, on the memory store (TestClock) and on the scripts over a virtual clock. */
const boundaries = (
  name: string,
  store: Effect.Effect<Redis.RedisService["Service"], unknown, RedisTest.TestRedis>,
  setTime: (ms: number) => Effect.Effect<void, never, RedisTest.TestRedis>,
  skip = false
) =>
  describe.skipIf(skip)(`Reaper boundaries: ${name}`, () => {
    layer(RedisTest.layerServer)((it) => {
      it.effect("a holder goes the millisecond its lease or expiry ends, never 1 ms before", () =>
        Effect.gen(function*() {
          const redis = yield* store
          const prefix = RedisTest.uniquePrefix("edge")
          const program = Effect.gen(function*() {
            yield* setTime(1_000_000)
            yield* redis.lock({ prefix, name: `${prefix}:run` }, runLock("r", 1000))
            yield* redis.lock({ prefix, name: `${prefix}:ttl` }, queueLock("x", 1000))
            yield* setTime(1_000_999)
            const early = yield* Reaper.runOnce({ prefix })
            assert.strictEqual(early.holders + early.members, 0, "1 ms before: both live")
            assert.deepStrictEqual((yield* redis.fetch({ prefix, name: `${prefix}:run` })).holders.map((h) => h.jid), ["r"])
            assert.deepStrictEqual((yield* redis.fetch({ prefix, name: `${prefix}:ttl` })).holders.map((h) => h.jid), ["x"])
            yield* setTime(1_001_000)
            const onTime = yield* Reaper.runOnce({ prefix })
            // Their keys end with them (the key's TTL is its last holder's horizon): the members go.
            assert.strictEqual(onTime.holders + onTime.members, 2, "the millisecond they end: both go")
            assert.deepStrictEqual(yield* members(prefix), [])
          })
          yield* Effect.provideService(program, Redis.RedisService, redis)
        }))

      it.effect("a pass steps back over the members its released orphans took with them: none after them is skipped", () =>
        Effect.gen(function*() {
          const redis = yield* store
          const prefix = RedisTest.uniquePrefix("back")
          const queue = yield* MemoryQueue.make()
          const program = Effect.gen(function*() {
            yield* setTime(2_000_000)
            // Oldest first: two orphans (no TTL, jobs gone) fill the first step; two expired locks follow them.
            yield* redis.lock({ prefix, name: `${prefix}:o1` }, queueLock("o1"))
            yield* redis.lock({ prefix, name: `${prefix}:o2` }, queueLock("o2"))
            yield* setTime(2_000_001)
            yield* redis.lock({ prefix, name: `${prefix}:x1` }, queueLock("x1", 10))
            yield* redis.lock({ prefix, name: `${prefix}:x2` }, queueLock("x2", 10))
            yield* setTime(2_000_100)
            const pass = yield* Reaper.runOnce({ prefix, grace: 50, batch: 2 })
            assert.strictEqual(pass.orphans, 2)
            assert.strictEqual(pass.members, 2, "the members after the orphans were walked in the same pass")
            assert.deepStrictEqual(yield* members(prefix), [])
          })
          yield* Effect.provideService(Effect.provideService(program, Redis.RedisService, redis), JobQueue, queue)
        }).pipe(Effect.scoped))

      it.effect("a candidate whose queue answers unknown, or that names no queue, is kept; gone is removed (any queue name)", () =>
        Effect.gen(function*() {
          const redis = yield* store
          const prefix = RedisTest.uniquePrefix("unknown")
          const odd = "we\"ird\\q:é,\"i\":{"
          const queue = yield* MemoryQueue.make({ queues: ["default", odd] })
          const program = Effect.gen(function*() {
            yield* setTime(3_000_000)
            yield* redis.lock({ prefix, name: `${prefix}:mine` }, queueLock("mine"))
            // A queue name with quotes, a backslash and what looks like the next field: read back whole.
            yield* redis.lock({ prefix, name: `${prefix}:odd` }, { ...queueLock("odd"), queue: odd, info: `{"w":1}` })
            assert.strictEqual((yield* redis.fetch({ prefix, name: `${prefix}:odd` })).holders[0]?.queue, odd)
            yield* redis.lock({ prefix, name: `${prefix}:theirs` }, { ...queueLock("theirs"), queue: "elsewhere" })
            yield* redis.lock({ prefix, name: `${prefix}:old` }, { ...queueLock("old"), queue: undefined })
            yield* setTime(3_000_100)
            const pass = yield* Reaper.runOnce({ prefix, grace: 50 })
            assert.strictEqual(pass.orphans, 2)
            assert.deepStrictEqual(yield* members(prefix), [`${prefix}:old`, `${prefix}:theirs`])
          })
          yield* Effect.provideService(Effect.provideService(program, Redis.RedisService, redis), JobQueue, queue)
        }).pipe(Effect.scoped))
    })
  })

boundaries(
  "memory store",
  Effect.map(Effect.provide(Redis.RedisService, Redis.layerMemory), (store) => store),
  (ms) => Effect.flatMap(Clock.currentTimeMillis, (now) => TestClock.adjust(ms - now))
)
const namespaces = new Map<string, VirtualRedis.VirtualRedis>()
const virtualOf = Effect.map(RedisTest.TestRedis, ({ raw }) => {
  const key = "reaper-virtual"
  let virtual = namespaces.get(key)
  if (virtual === undefined) {
    virtual = VirtualRedis.make(raw, RedisTest.uniquePrefix("vclock"))
    namespaces.set(key, virtual)
  }
  return virtual
})
boundaries(
  "the scripts on a virtual clock",
  Effect.flatMap(virtualOf, (virtual) => virtual.store),
  (ms) =>
    Effect.andThen(
      Effect.flatMap(virtualOf, (virtual) => Effect.promise(() => virtual.setTime(ms))),
      // The reaper reads the grace's "now" from the Clock: keep it on the virtual time too.
      Effect.flatMap(Clock.currentTimeMillis, (now) => TestClock.adjust(ms - now))
    ),
  // The virtual clock shims one Redis' scripts: no cluster variant.
  RedisTest.clusterMode
)

describe("Reaper", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("removes members whose lock ended and holders past their lease; keeps live holders through 100 passes", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("reap")
        const queue = yield* MemoryQueue.make()
        const expiring = LockOptions.unsafeMake({ lock: "until_expired", lockTtl: 100, lockPrefix: prefix })
        const leased = LockOptions.unsafeMake({ lock: "while_executing", lockLease: 200, lockPrefix: prefix })
        const live = LockOptions.unsafeMake({ lock: "while_executing", lockLease: 60_000, lockPrefix: prefix })
        const queued = UniqueJob.unsafeMake({ worker: "QueuedJob", lock: "until_executed", lockPrefix: prefix })
        for (let i = 0; i < 50; i++) yield* Lock.lock(expiring, { digest: `${prefix}:e${i}`, jid: `e${i}` })
        // A crashed worker's run lock: taken, never renewed, never released.
        yield* Lock.lock(leased, { digest: `${prefix}:crashed`, jid: "crashed", phase: "run" })
        yield* Lock.lock(live, { digest: `${prefix}:live`, jid: "live", phase: "run" })
        const waiting = yield* Effect.provideService(queued.enqueue([1]), JobQueue, queue)
        assert.strictEqual(waiting._tag, "Enqueued")
        const redis = yield* Redis.RedisService
        yield* until(Effect.map(redis.fetch({ prefix, name: `${prefix}:crashed:RUN` }), (f) =>
          f.holders.every((h) => (h.leaseUntil ?? 0) <= f.now)))
        yield* until(Effect.map(index(prefix), (members) => members.length > 0))

        const runner = yield* Reaper.make({ prefix, grace: 1, batch: 7 })
        const first = yield* Effect.provideService(runner.pass(), JobQueue, queue)
        assert.isTrue(first.ran)
        assert.isAtLeast(first.steps, 8, "bounded steps of 7 members")
        assert.deepStrictEqual(
          (yield* index(prefix)).sort(),
          [`${prefix}:live:RUN`, waiting.digest].sort(),
          "the expired locks and the crashed worker's lease are gone; the live lease and the waiting job stay"
        )
        for (let i = 0; i < 100; i++) {
          const pass = yield* Effect.provideService(runner.pass(), JobQueue, queue)
          assert.strictEqual(pass.members + pass.holders + pass.orphans, 0)
        }
        assert.strictEqual((yield* redis.fetch({ prefix, name: `${prefix}:live:RUN` })).holders[0]?.jid, "live")
        assert.strictEqual((yield* redis.fetch({ prefix, name: waiting.digest })).holders[0]?.jid, waiting.job.jid)
        yield* runner.release
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix, [waiting.digest]), [])
      }).pipe(Effect.scoped, TestClock.withLive), { timeout: 60_000 })

    it.effect("an orphaned no-TTL lock (its job removed) is reaped after the grace: the next enqueue is Enqueued", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("orphan")
        const queue = yield* MemoryQueue.make()
        const job = UniqueJob.unsafeMake({ worker: "OrphanJob", lock: "until_executed", lockPrefix: prefix })
        const program = Effect.gen(function*() {
          const first = yield* job.enqueue([1])
          assert.strictEqual(first._tag, "Enqueued")
          // An operator removes the waiting job: its lock (no TTL) would block the digest for good.
          assert.isTrue(yield* queue.remove(first.job.jid))
          assert.strictEqual((yield* job.enqueue([1]))._tag, "Skipped")
          // Within the grace nothing is touched.
          const early = yield* Reaper.runOnce({ prefix, grace: "1 hour" })
          assert.strictEqual(early.orphans, 0)
          yield* Effect.sleep(20)
          const dry = yield* Reaper.runOnce({ prefix, grace: 10, dryRun: true })
          assert.strictEqual(dry.orphans, 1)
          assert.strictEqual((yield* job.enqueue([1]))._tag, "Skipped", "a dry run removes nothing")
          const pass = yield* Reaper.runOnce({ prefix, grace: 10 })
          assert.strictEqual(pass.orphans, 1)
          assert.strictEqual((yield* job.enqueue([1]))._tag, "Enqueued")
        })
        yield* Effect.provideService(program, JobQueue, queue)
      }).pipe(Effect.scoped, TestClock.withLive), { timeout: 30_000 })

    it.effect("Reaper.layer passes on its interval and gives its lease up when it closes; a bad batch is refused", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("layer")
        const expiring = LockOptions.unsafeMake({ lock: "until_expired", lockTtl: 50, lockPrefix: prefix })
        for (let i = 0; i < 10; i++) yield* Lock.lock(expiring, { digest: `${prefix}:e${i}`, jid: `e${i}` })
        const { raw } = yield* RedisTest.TestRedis
        yield* Effect.scoped(Effect.gen(function*() {
          yield* Layer.build(Reaper.layer({ prefix, interval: 50 }))
          yield* until(Effect.map(index(prefix), (members) => members.length === 0))
          assert.deepStrictEqual(yield* index(prefix), [])
        }))
        assert.strictEqual(yield* Effect.promise(() => raw.exists(`${prefix}:reaper`)), 0, "the lease was given up")
        const error = yield* Effect.flip(Reaper.make({ prefix, batch: 0 }))
        assert.strictEqual(error._tag, "InvalidLockOptions")
        assert.strictEqual(error.field, "batch")
      }).pipe(TestClock.withLive), { timeout: 30_000 })

    it.effect("every option is decoded once, at make and at layer: 0, -1, NaN, text, fractions and huge values are refused naming the field and what to write", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("options")
        for (const [field, values] of badOptions) {
          for (const value of values) {
            const options = { prefix, [field]: value } as Reaper.Options
            const error = yield* Effect.flip(Reaper.make(options))
            assert.strictEqual(error._tag, "InvalidLockOptions", `${field}: ${String(value)}`)
            assert.strictEqual(error.field, field, `${field}: ${String(value)}`)
            assert.match(error.reason, /such as|whole milliseconds/, `${field}: ${String(value)}: ${error.reason}`)
            const built = yield* Effect.flip(Effect.scoped(Layer.build(Reaper.layer(options))))
            assert.strictEqual((built as LockOptions.InvalidLockOptions).field, field, `layer, ${field}: ${String(value)}`)
            assert.strictEqual(yield* Effect.flip(Reaper.runOnce(options)).pipe(Effect.map((e) => e._tag)), "InvalidLockOptions")
          }
        }
        // Every bad field is named at once.
        const several = yield* Effect.flip(Reaper.make({ prefix, interval: 0, lease: -1, grace: Number.NaN }))
        assert.deepStrictEqual(several.issues.map((i) => i.field), ["interval", "lease", "grace"])
        // interval 0 never starts a pass: no script ran for this prefix.
        const { raw } = yield* RedisTest.TestRedis
        assert.strictEqual(yield* Effect.promise(() => raw.exists(`${prefix}:reaper`)), 0)
        // The edges that are fine.
        for (
          const options of [
            { interval: 10, lease: 100, grace: 1, batch: 1 },
            { interval: "1 day", lease: "1 day", grace: LockOptions.maxDurationMs, batch: 1000 },
            { interval: "1.5 seconds", lease: "2.5 seconds", grace: "0.5 seconds" }
          ]
        ) {
          const runner = yield* Reaper.make({ prefix, ...options } as Reaper.Options)
          assert.isTrue((yield* runner.pass()).ran)
          yield* runner.release
        }
      }).pipe(TestClock.withLive), { timeout: 30_000 })

    it.effect("two processes: only one reaps at a time; the other takes over once the killed one's lease ends", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("procs")
        const { options, raw } = yield* RedisTest.TestRedis
        // 200 members whose lock is gone (the reaper removes them all), walked 10 per step; one pipeline per shard (a
        // cluster's pipeline keeps to one node).
        yield* Effect.promise(async () => {
          const pipelines = new Map<string, ReturnType<typeof raw.pipeline>>()
          for (let i = 0; i < 200; i++) {
            const name = `${prefix}:gone${i}`
            const key = RedisTest.keysOf(prefix, name).index
            const pipeline = pipelines.get(key) ?? raw.pipeline()
            pipelines.set(key, pipeline.zadd(key, i, name))
          }
          await Promise.all(Array.from(pipelines.values(), (pipeline) => pipeline.exec()))
        })
        const leaseMs = 5000
        const child = spawn(process.execPath, [
          "--import",
          "tsx",
          fileURLToPath(new URL("./support/reaper-process.ts", import.meta.url)),
          JSON.stringify(options),
          prefix,
          String(leaseMs),
          "10",
          "200"
        ], { stdio: ["ignore", "pipe", "inherit"] })
        // Once it has walked 3 steps (of 20).
        yield* Effect.callback<void>((resume) => {
          let out = ""
          child.stdout!.on("data", (chunk: Buffer) => {
            out += chunk.toString()
            if (/STEP 3\n/.test(out)) resume(Effect.void)
          })
        })
        // The other process is mid-pass: this runner is refused.
        const here = yield* Reaper.make({ prefix, lease: leaseMs, batch: 10 })
        assert.isFalse((yield* here.pass()).ran)
        child.kill("SIGKILL")
        yield* Effect.callback<void>((resume) => {
          if (child.exitCode !== null || child.signalCode !== null) resume(Effect.void)
          else child.on("exit", () => resume(Effect.void))
        })
        // Its lease ends on its own, within one lease: then this runner walks the rest.
        const left = yield* Effect.promise(() => raw.pttl(`${prefix}:reaper`))
        assert.isTrue(left > 0 && left <= leaseMs, `the killed runner's lease: ${left} ms`)
        assert.isAbove((yield* index(prefix)).length, 0, "the killed runner left members to walk")
        let pass = yield* here.pass()
        while (!pass.ran) {
          yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 20)))
          pass = yield* here.pass()
        }
        assert.deepStrictEqual(yield* index(prefix), [])
        yield* here.release
      }).pipe(TestClock.withLive), { timeout: 60_000 })

    it.effect("one runner at a time: a second runner waits; when the first stops renewing, it takes over within one lease", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("runners")
        // Long enough that a busy machine cannot let it lapse between a's pass and b's (300 ms once did, in CI with
        // four suites beside it); b's takeover waits it out, a fixed amount of real time.
        const lease = 3_000
        const a = yield* Reaper.make({ prefix, lease })
        const b = yield* Reaper.make({ prefix, lease })
        assert.isTrue((yield* a.pass()).ran)
        // a holds the lease (it renewed it after its last step) and then dies without giving it up.
        assert.isFalse((yield* b.pass()).ran, "only one runner at a time")
        const { raw } = yield* RedisTest.TestRedis
        const left = yield* Effect.promise(() => raw.pttl(`${prefix}:reaper`))
        assert.isTrue(left > 0 && left <= lease, `a's lease: ${left} ms`)
        yield* until(Effect.map(b.pass(), (pass) => pass.ran))
        assert.isTrue((yield* b.pass()).ran, "b took over once a's lease ended")
        assert.isFalse((yield* a.pass()).ran, "and a, back, waits")
        yield* b.release
        assert.isTrue((yield* a.pass()).ran)
        yield* a.release
      }).pipe(TestClock.withLive), { timeout: 30_000 })
  })
})
