/**
 * lockTimeout: a job whose run lock is held waits for its release (woken by the release's PUBLISH, never by polling),
 * then runs; first come, first served within a process; across processes they race, one at a time. A wait that
 * ends without the lock (its deadline) goes to the server strategy; an interrupted waiter leaves nothing behind; a
 * holder that died (no release, no publish) is followed once its lease ends; a stalled Redis never makes it hang.
 * Every test counts a fixed amount of work: none asserts a duration.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Redis as IORedis } from "ioredis"
import { type AddressInfo, createServer } from "node:net"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as References from "effect/References"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as HotPath from "../src/adapters/bullmq/HotPath.js"
import * as Keeper from "../src/store/LeaseKeeper.js"
import * as Waits from "../src/store/ReleaseWaits.js"
import type * as Job from "../src/Job.js"
import type { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as Metrics from "../src/Metrics.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import type * as Strategy from "../src/Strategy.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as Bull from "./support/bullmq.js"
import { scriptCallsOn } from "./support/foundation.js"
import { gated } from "./support/gated.js"
import * as RedisTest from "./support/redis.js"
import { stores } from "./support/stores.js"

/** Real time, whatever the Clock. */
const realSleep = (ms: number) =>
  Effect.callback<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), ms)
    return Effect.sync(() => clearTimeout(timer))
  })

/** Real-time polling of the test's own view (never of the code under test), bounded. */
const until = (check: () => boolean | Promise<boolean>, what: string) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 20_000
    while (!(yield* Effect.promise(async () => await check()))) {
      if (Date.now() > deadline) assert.fail(`never: ${what}`)
      yield* realSleep(5)
    }
  })


/** The store's calls, counted (lock, unlock, fetch), kept by a lease keeper and a waiters' registry of its own. */
const counting = (redis: Redis.Store) => {
  const calls = { lock: 0, unlock: 0, fetch: 0 }
  const store: Redis.Store = {
    ...redis,
    lock: (...args) => Effect.suspend(() => (calls.lock++, redis.lock(...args))),
    unlock: (...args) => Effect.suspend(() => (calls.unlock++, redis.unlock(...args))),
    fetch: (...args) => Effect.suspend(() => (calls.fetch++, redis.fetch(...args)))
  }
  return { calls, store }
}

/** A store of its own on the test Redis (a process of its own, as far as the locks can tell). */
const processStore: Effect.Effect<Redis.Store, unknown, RedisTest.TestRedis | Scope.Scope> = Effect.flatMap(
  RedisTest.TestRedis,
  ({ options }) => "nodes" in options ? Redis.makeCluster(options) : Redis.make(options)
)

type Raw = RedisTest.TestRedis["Service"]["raw"]

/** Each Redis behind `raw`: itself, or every node of the cluster (subscriptions and counts are per node). */
const nodesOf = (raw: Raw, role: "all" | "master" = "all"): ReadonlyArray<Raw> =>
  RedisTest.clusterMode ? (raw as unknown as { nodes(role: string): Array<Raw> }).nodes(role) : [raw]

const sum = async (raw: Raw, role: "all" | "master", f: (node: Raw) => Promise<number>) =>
  (await Promise.all(nodesOf(raw, role).map(f))).reduce((a, b) => a + b, 0)

const numsub = (raw: Raw, channel: string) =>
  Effect.promise(() =>
    sum(raw, "all", async (node) => Number(((await node.call("PUBSUB", "NUMSUB", channel)) as Array<unknown>)[1]))
  )

const publishes = (raw: Raw): Promise<number> =>
  sum(raw, "master", async (node) => {
    const info = await node.info("commandstats")
    return Number(/^cmdstat_publish:calls=(\d+)/m.exec(info)?.[1] ?? 0)
  })

const scriptCalls = (raw: Raw): Promise<number> => sum(raw, "master", scriptCallsOn)

const everyMaster = (raw: Raw, ...command: [string, ...Array<string>]) =>
  Effect.promise(() => Promise.all(nodesOf(raw, "master").map((node) => node.call(...command))))

const withQueue = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.provide(self, MemoryQueue.layer())

const tagOf = (outcome: { readonly _tag: string }) => outcome._tag

/**
 * A while_executing job of `worker` holding its run lock (gated: `holder.finish` ends it) and a second copy waiting for
 * it (`waiter`), with the lock's key and release channel.
 */
const heldAndWaited = (
  worker: string,
  options: { readonly lockTimeout: Duration.Input; readonly lockLease?: Duration.Input }
) =>
  Effect.gen(function*() {
    const uj = yield* UniqueJob.make({
      worker,
      lock: "while_executing",
      ...options,
      lockPrefix: RedisTest.uniquePrefix(worker)
    })
    const redis = yield* Redis.RedisService
    const key = Lock.keyOf(uj.definition, yield* uj.digest([1]), "run")
    const holder = yield* gated(uj.server, uj.job([1]))
    const waiter = yield* Effect.forkChild(uj.server(uj.job([1]), Effect.succeed("ran")))
    yield* until(() => Waits.waiting(redis, key) === 1, "the job waits")
    return { redis, key, channel: redis.releases!.channelOf(key), holder, waiter }
  })

describe("lockTimeout on Redis", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect(
      "4 processes x 5 jobs on one digest: every job runs, one at a time, and no call goes out while they wait",
      () =>
        withQueue(Effect.gen(function*() {
          const { raw } = yield* RedisTest.TestRedis
          const prefix = RedisTest.uniquePrefix("wait")
          // A lease far beyond the test: no renewal goes out during the window.
          const uj = yield* UniqueJob.make({
            worker: "WaitJob",
            lock: "while_executing",
            lockTimeout: "30 seconds",
            lockLease: "120 seconds",
            lockPrefix: prefix
          })
          const processes = yield* Effect.forEach([0, 1, 2, 3], () =>
            Effect.gen(function*() {
              const { calls, store } = counting(yield* processStore)
              yield* Keeper.scoped(store)
              return { calls, store }
            }))
          const key = Lock.keyOf(uj.definition, yield* uj.digest(["one"]), "run")
          const channel = RedisTest.keysOf(key.prefix, key.name).locked
          let inside = 0
          let most = 0
          const ran: Array<string> = []
          const perform = (jid: string) =>
            Effect.gen(function*() {
              inside++
              most = Math.max(most, inside)
              yield* realSleep(2)
              ran.push(jid)
              inside--
              return jid
            })
          // The first job holds the lock until the others all wait.
          const holder = yield* gated(
            (job, perform) => Effect.provideService(uj.server(job, perform), Redis.RedisService, processes[0]!.store),
            uj.job(["one"])
          )
          const waiters = yield* Effect.forEach(
            processes.flatMap((p, i) => Array.from({ length: i === 0 ? 4 : 5 }, () => p.store)),
            (store) => {
              const job = uj.job(["one"])
              return Effect.forkChild(Effect.provideService(uj.server(job, perform(job.jid)), Redis.RedisService, store))
            }
          )
          yield* until(
            () => processes.reduce((n, p) => n + Waits.waiting(p.store, key), 0) === 19,
            "19 jobs wait"
          )
          yield* until(async () => (await Effect.runPromise(numsub(raw, channel))) === 4, "4 subscribers")
          // Each waiter's first conflict, then the one read that times a crashed holder's end: nothing after.
          yield* until(
            () => processes.every((p) => p.calls.fetch === p.calls.lock - (p === processes[0] ? 1 : 0)),
            "each waiter read the holders once"
          )
          assert.strictEqual(processes.reduce((n, p) => n + p.calls.lock, 0), 20)
          const before = yield* Effect.promise(() => scriptCalls(raw))
          yield* realSleep(300)
          assert.strictEqual((yield* Effect.promise(() => scriptCalls(raw))) - before, 0, "no call while they wait")

          assert.strictEqual(yield* holder.finish.pipe(Effect.map(tagOf)), "Performed")
          const outcomes = yield* Effect.forEach(waiters, Fiber.join)
          assert.deepStrictEqual(outcomes.map(tagOf), Array(19).fill("Performed"))
          assert.strictEqual(ran.length, 19)
          assert.strictEqual(most, 1, "never two at once")
          // Every take after a job's first is a try after a wake, and each lost try read the holders once: the
          // calls are the jobs' takes and releases, plus one try per process per release at most.
          const total = { lock: 0, unlock: 0, fetch: 0 }
          for (const p of processes) {
            total.lock += p.calls.lock
            total.unlock += p.calls.unlock
            total.fetch += p.calls.fetch
          }
          assert.strictEqual(total.unlock, 20)
          assert.strictEqual(total.fetch, total.lock - 20, "one read per conflict")
          assert.isAtLeast(total.lock, 20 + 19)
          assert.isAtMost(total.lock, 20 + 19 * 4)
          const scripts = (yield* Effect.promise(() => scriptCalls(raw))) - before
          assert.isAtMost(scripts, total.lock + total.unlock + total.fetch - 20 - 19)
          yield* until(async () => (await Effect.runPromise(numsub(raw, channel))) === 0, "unsubscribed")
          for (const p of processes) assert.strictEqual(Waits.waiting(p.store, key), 0)
          assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
        }).pipe(Effect.scoped)),
      { timeout: 60_000 }
    )

    it.effect("the hot path leaves a run-lock job with a lockTimeout to server, whose wait it is", () =>
      withQueue(Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("hot")
        const waits = yield* UniqueJob.make({ worker: "HotJob", lock: "while_executing", lockTimeout: 1000, lockPrefix: prefix })
        const plain = yield* UniqueJob.make({ worker: "HotJob", lock: "while_executing", lockPrefix: prefix })
        const runtime = yield* Effect.context<Redis.RedisService | JobQueue>()
        const run: HotPath.Run<Redis.RedisService | JobQueue> = (effect) => Effect.runPromiseWith(runtime)(effect)
        const fastWaits = yield* HotPath.fast(waits.definition)
        const fastPlain = yield* HotPath.fast(plain.definition)
        assert.isDefined(fastWaits)
        assert.isDefined(fastPlain)
        assert.isUndefined(HotPath.serverFast(fastWaits!, waits.job([1]), () => Promise.resolve("ran"), run))
        const started = HotPath.serverFast(fastPlain!, plain.job([1]), () => Promise.resolve("ran"), run)
        assert.isDefined(started)
        assert.strictEqual((yield* Effect.promise(() => started!.outcome))._tag, "Performed")
        yield* Effect.promise(() => started!.after() ?? Promise.resolve())
      })))

    it.effect("an interrupted waiter leaves nothing behind: no line, no subscription, no lock", () =>
      withQueue(Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("interrupt")
        const store = yield* processStore
        const uj = yield* UniqueJob.make({
          worker: "InterruptJob",
          lock: "while_executing",
          lockTimeout: "30 seconds",
          lockPrefix: prefix
        })
        const key = Lock.keyOf(uj.definition, yield* uj.digest([1]), "run")
        const channel = RedisTest.keysOf(key.prefix, key.name).locked
        const run = <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.provideService(self, Redis.RedisService, store)
        const holder = yield* gated((job, perform) => run(uj.server(job, perform)), uj.job([1]))
        let performed = 0
        const waiter = yield* Effect.forkChild(run(uj.server(uj.job([1]), Effect.sync(() => performed++))))
        yield* until(() => Waits.waiting(store, key) === 1, "the job waits")
        yield* until(async () => (await Effect.runPromise(numsub(raw, channel))) === 1, "subscribed")
        yield* Fiber.interrupt(waiter)
        const exit = yield* Fiber.await(waiter)
        assert.isTrue(Exit.hasInterrupts(exit))
        assert.strictEqual(Waits.waiting(store, key), 0)
        yield* until(async () => (await Effect.runPromise(numsub(raw, channel))) === 0, "unsubscribed")
        const holders = yield* run(Effect.flatMap(Redis.RedisService, (redis) => redis.holders(key)))
        assert.deepStrictEqual(holders.length, 1)
        // The holder's release wakes no one, and the next job takes the lock at once.
        assert.strictEqual(tagOf(yield* holder.finish), "Performed")
        assert.strictEqual(performed, 0)
        assert.strictEqual(tagOf(yield* run(uj.server(uj.job([1]), Effect.sync(() => performed++)))), "Performed")
        assert.strictEqual(performed, 1)
        assert.strictEqual(Waits.waiting(store, key), 0)
      }).pipe(Effect.scoped)), { timeout: 30_000 })

    it.effect("a holder that died publishes nothing: the waiter follows once its lease has passed", () =>
      withQueue(Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("dead")
        const uj = yield* UniqueJob.make({
          worker: "DeadJob",
          lock: "while_executing",
          lockTimeout: "20 seconds",
          lockPrefix: prefix
        })
        const key = Lock.keyOf(uj.definition, yield* uj.digest([1]), "run")
        // A holder whose renewals stopped: its entry has a lease of 800 ms, and no one releases it.
        const redis = yield* Redis.RedisService
        yield* redis.lock(key, { jid: "crashed", limit: 1, ttlMs: 0, leaseMs: 800, info: "", fenced: true })
        const published = yield* Effect.promise(() => publishes(raw))
        const outcome = yield* uj.server(uj.job([1]), Effect.succeed("ran"))
        assert.strictEqual(tagOf(outcome), "Performed")
        // The only PUBLISH is the job's own release.
        assert.strictEqual((yield* Effect.promise(() => publishes(raw))) - published, 1)
      }).pipe(Effect.scoped)), { timeout: 30_000 })

    // Found by a review: the channel is open to any client of the Redis, and a message's count was looped over as
    // given, so a foreign PUBLISH of "999999999999" held the process' event loop for good.
    it.effect("foreign messages on a lock's channel (a huge count, text, a negative) wake at most the line; the job runs", () =>
      withQueue(Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { channel, holder, key, redis, waiter } = yield* heldAndWaited("ForeignJob", { lockTimeout: "20 seconds" })
        for (const message of ["999999999999", "not a number", "-5", ""]) {
          yield* Effect.promise(() => raw.publish(channel, message))
        }
        // Each woke the job, which found the lock held and lined up again: still waiting, the loop free.
        yield* realSleep(100)
        assert.strictEqual(Waits.waiting(redis, key), 1)
        assert.strictEqual(tagOf(yield* holder.finish), "Performed")
        assert.strictEqual(tagOf(yield* Fiber.join(waiter)), "Performed")
        assert.strictEqual(Waits.waiting(redis, key), 0)
      }).pipe(Effect.scoped)), { timeout: 30_000 })

    it.effect("lockTimeout 0 costs nothing: its release publishes nothing; a worker with one publishes once", () =>
      withQueue(Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("free")
        const plain = yield* UniqueJob.make({ worker: "FreeJob", lock: "while_executing", lockPrefix: prefix })
        const waits = yield* UniqueJob.make({ worker: "WaitsJob", lock: "while_executing", lockTimeout: 5000, lockPrefix: prefix })
        const before = yield* Effect.promise(() => publishes(raw))
        for (let i = 0; i < 3; i++) assert.strictEqual(tagOf(yield* plain.server(plain.job([i]), Effect.void)), "Performed")
        assert.strictEqual((yield* Effect.promise(() => publishes(raw))) - before, 0)
        assert.strictEqual(tagOf(yield* waits.server(waits.job([1]), Effect.void)), "Performed")
        assert.strictEqual((yield* Effect.promise(() => publishes(raw))) - before, 1)
      })))

    it.effect("Redis stalled while a job waits (CLIENT PAUSE WRITE): the wait ends by its deadline, no hang", () =>
      withQueue(Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("stall")
        const uj = yield* UniqueJob.make({
          worker: "StallJob",
          lock: "while_executing",
          lockTimeout: "1500 millis",
          lockPrefix: prefix
        })
        const key = Lock.keyOf(uj.definition, yield* uj.digest([1]), "run")
        const redis = yield* Redis.RedisService
        const holder = yield* gated(uj.server, uj.job([1]))
        const waiter = yield* Effect.forkChild(Effect.result(uj.server(uj.job([1]), Effect.succeed("ran"))))
        yield* until(() => Waits.waiting(redis, key) === 1, "the job waits")
        yield* everyMaster(raw, "CLIENT", "PAUSE", "20000", "WRITE")
        // The holder's release is stalled with Redis: no signal comes, and the deadline ends the wait.
        const finishing = yield* Effect.forkChild(holder.finish)
        const ended = yield* Fiber.join(waiter)
        yield* everyMaster(raw, "CLIENT", "UNPAUSE")
        if (ended._tag === "Success") assert.strictEqual(tagOf(ended.success), "Skipped")
        else assert.strictEqual(ended.failure._tag, "RedisError")
        yield* Fiber.await(finishing)
        assert.strictEqual(Waits.waiting(redis, key), 0)
      }).pipe(Effect.scoped)), { timeout: 40_000 })

    // The release connection dropped, and kept from coming back (maxclients) while the holder ends: its release's
    // PUBLISH reaches no one. Before, the job then waited out its lockTimeout (its holder's lease, 60 s, ends later)
    // and went to its strategy, Skipped; once back, the connection makes up for what it may have missed.
    it.effect("a release published while the release connection was away: once back, the waiting job tries and runs", () =>
      withQueue(Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { channel, holder, key, redis, waiter } = yield* heldAndWaited("AwayJob", {
          lockTimeout: "15 seconds",
          lockLease: "60 seconds"
        })
        yield* until(async () => Effect.runPromise(numsub(raw, channel)).then((n) => n === 1), "its lock's channel is subscribed")
        const clients = Number(/^connected_clients:(\d+)/m.exec(yield* Effect.promise(() => raw.info("clients")))![1])
        const published = yield* Effect.promise(() => publishes(raw))
        yield* Effect.acquireRelease(
          Effect.promise(() => raw.config("SET", "maxclients", String(clients - 1))),
          () => Effect.promise(() => raw.config("SET", "maxclients", "10000"))
        )
        yield* Effect.promise(() => raw.call("CLIENT", "KILL", "TYPE", "pubsub"))
        assert.strictEqual(tagOf(yield* holder.finish), "Performed")
        assert.strictEqual((yield* Effect.promise(() => publishes(raw))) - published, 1, "the holder's release published")
        assert.strictEqual(yield* numsub(raw, channel), 0, "with no one subscribed")
        yield* Effect.promise(() => raw.config("SET", "maxclients", "10000"))
        assert.strictEqual(tagOf(yield* Fiber.join(waiter)), "Performed")
        assert.strictEqual(Waits.waiting(redis, key), 0)
      }).pipe(Effect.scoped)), { timeout: 40_000 })
  })
})

describe("lockTimeout through BullMQ", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("while_executing, 2 workers x 5: 10 duplicates all run, one at a time, none turned away", () =>
      Effect.gen(function*() {
        const { options: redis } = yield* RedisTest.TestRedis
        const name = Bull.uniqueName("wait")
        const queue = yield* Bull.queue(name)
        const unique = yield* Effect.acquireRelease(
          Effect.sync(() =>
            UniqueQueue.make<{ readonly n: number }>(queue, {
              lock: "while_executing",
              lockTimeout: "30 seconds",
              lockPrefix: RedisTest.uniquePrefix("bullwait"),
              redis
            })
          ),
          (u) => Effect.promise(() => u.close({ timeout: "5 seconds" }))
        )
        let inside = 0
        let most = 0
        let ran = 0
        let turnedAway = 0
        const fn = unique.processor(async () => {
          inside++
          most = Math.max(most, inside)
          await new Promise((resolve) => setTimeout(resolve, 10))
          inside--
          ran++
          return "done"
        })
        for (let i = 0; i < 2; i++) {
          const w = yield* Bull.worker(name, fn, { concurrency: 5 })
          w.on("completed", (_, result) => {
            if (result === undefined) turnedAway++
          })
        }
        yield* Effect.promise(() => Promise.all(Array.from({ length: 10 }, () => unique.add("Work", { n: 1 }))))
        assert.isTrue(
          yield* Bull.until(Effect.sync(() => ran + turnedAway === 10), 60_000),
          "every job ended"
        )
        assert.strictEqual(turnedAway, 0)
        assert.strictEqual(ran, 10)
        assert.strictEqual(most, 1)
      }), { timeout: 90_000 })

    // Found by an outsider probe: close() waited for the waiting jobs' lockTimeout (30 s), and jobs took the lock and
    // ran after close began. close ends the waits at once (each job goes to its strategy), then waits for the job
    // that runs.
    it.effect("close() ends the waits at once: the waiting jobs go to their strategy, the running one ends as it will", () =>
      Effect.gen(function*() {
        const { options: redis } = yield* RedisTest.TestRedis
        const name = Bull.uniqueName("closewait")
        const queue = yield* Bull.queue(name)
        const unique = UniqueQueue.make<{ readonly n: number }>(queue, {
          lock: "while_executing",
          lockTimeout: "1 minute",
          lockArgs: () => ["one"],
          lockPrefix: RedisTest.uniquePrefix("closewait"),
          redis
        })
        let release: () => void = () => {}
        const held = new Promise<void>((resolve) => (release = resolve))
        yield* Effect.addFinalizer(() => Effect.promise(() => (release(), unique.close({ timeout: "5 seconds" }))))
        const performed: Array<number> = []
        let turnedAway = 0
        const w = yield* Bull.worker(name, unique.processor(async (job) => {
          performed.push(job.data.n)
          if (job.data.n === 0) await held
          return "done"
        }), { concurrency: 4 })
        w.on("completed", (_, result) => {
          if (result === undefined) turnedAway++
        })
        yield* Effect.promise(() => unique.add("Work", { n: 0 }))
        assert.isTrue(yield* Bull.until(Effect.sync(() => performed.length === 1)))
        yield* Effect.promise(() => Promise.all([1, 2, 3].map((n) => unique.add("Work", { n }))))
        assert.isTrue(yield* Bull.until(Effect.promise(async () => (await queue.getActiveCount()) === 4)), "3 wait")
        // Give them their turn in the line: each has read the holders and subscribed.
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 200)))
        const closed = unique.close()
        assert.isTrue(yield* Bull.until(Effect.sync(() => turnedAway === 3), 20_000), "the waits ended with close, not at 1 minute")
        assert.deepStrictEqual(performed, [0], "no job took the lock after close began")
        release()
        yield* Effect.promise(() => closed)
        assert.deepStrictEqual(performed, [0])
      }), { timeout: 60_000 })
  })
})

describe("lockTimeout: Redis down, store closed", () => {
  it.live("Redis killed while a job waits: the wait ends by its deadline (strategy or RedisError), nothing hangs", () =>
    withQueue(Effect.gen(function*() {
      const server = yield* RedisServer.start
      const store = yield* Redis.make({ url: server.url, timeout: "500 millis" })
      const uj = yield* UniqueJob.make({
        worker: "DownJob",
        lock: "while_executing",
        lockTimeout: "1500 millis",
        // Far longer than the test's timeout: the holder's release on interruption must not wait its lease out.
        lockLease: "2 minutes",
        lockPrefix: RedisTest.uniquePrefix("down")
      })
      const run = <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.provideService(self, Redis.RedisService, store)
      const key = Lock.keyOf(uj.definition, yield* run(uj.digest([1])), "run")
      const holder = yield* gated((job, perform) => run(uj.server(job, perform)), uj.job([1]))
      const waiter = yield* Effect.forkChild(Effect.result(run(uj.server(uj.job([1]), Effect.succeed("ran")))))
      yield* until(() => Waits.waiting(store, key) === 1, "the job waits")
      yield* server.kill
      const ended = yield* Fiber.join(waiter)
      if (ended._tag === "Success") assert.strictEqual(tagOf(ended.success), "Skipped")
      else assert.strictEqual(ended.failure._tag, "RedisError")
      assert.strictEqual(Waits.waiting(store, key), 0)
      yield* Fiber.interrupt(holder.fiber)
    }).pipe(Effect.scoped)), { timeout: 30_000 })

  it.live("the store closed while a job waits: the job goes to its strategy, and no wait is left", () =>
    withQueue(Effect.gen(function*() {
      const server = yield* RedisServer.start
      const scope = yield* Scope.make()
      const store = yield* Scope.provide(Redis.make({ url: server.url }), scope)
      const uj = yield* UniqueJob.make({
        worker: "CloseJob",
        lock: "while_executing",
        lockTimeout: "30 seconds",
        lockPrefix: RedisTest.uniquePrefix("close")
      })
      const run = <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.provideService(self, Redis.RedisService, store)
      const key = Lock.keyOf(uj.definition, yield* run(uj.digest([1])), "run")
      const holder = yield* gated((job, perform) => run(uj.server(job, perform)), uj.job([1]))
      const waiter = yield* Effect.forkChild(run(uj.server(uj.job([1]), Effect.succeed("ran"))))
      yield* until(() => Waits.waiting(store, key) === 1, "the job waits")
      assert.isTrue(Waits.connected(store))
      const before = yield* waitCounts("while_executing")
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual(tagOf(yield* Fiber.join(waiter)), "Skipped")
      assert.deepStrictEqual(yield* waitsSince(before, "while_executing"), { closed: 1, timed: 1 })
      assert.strictEqual(Waits.waiting(store, key), 0)
      assert.isFalse(Waits.connected(store))
      yield* Fiber.interrupt(holder.fiber)
    }).pipe(Effect.scoped)), { timeout: 30_000 })
})

/** The waits counted so far under `lock_type` (a test reads the change over its own jobs; a file's tests run one by one). */
const waitCounts = (lockType: string) =>
  Effect.gen(function*() {
    const counts: Record<string, number> = {}
    for (const outcome of ["taken", "timed_out", "full", "closed", "interrupted", "failed"]) {
      counts[outcome] = (yield* Metric.value(Metrics.lockWaits.of(lockType, outcome))).count
    }
    counts.timed = (yield* Metric.value(Metrics.waitTime)).count
    return counts
  })

/** How each count moved since `before`, the unmoved left out. */
const waitsSince = (before: Record<string, number>, lockType: string) =>
  Effect.map(waitCounts(lockType), (after) =>
    Object.fromEntries(
      Object.entries(after).flatMap(([outcome, n]) => n === before[outcome] ? [] : [[outcome, n - before[outcome]!]])
    ))

/** A store of its own on the test Redis with waiter caps. */
const cappedStore = (caps: { readonly maxLockWaiters?: number; readonly maxProcessWaiters?: number }) =>
  Effect.flatMap(
    RedisTest.TestRedis,
    ({ options }) => "nodes" in options ? Redis.makeCluster({ ...options, ...caps }) : Redis.make({ ...options, ...caps })
  )

const settled = (fibers: ReadonlyArray<Fiber.Fiber<unknown, unknown>>) =>
  fibers.filter((fiber) => fiber.pollUnsafe() !== undefined).length

describe("lockTimeout: caps and metrics on Redis", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("maxProcessWaiters 3: of 5 jobs on a held lock 3 wait and run, 2 go to the strategy at once (full)", () =>
      withQueue(Effect.gen(function*() {
        const store = yield* cappedStore({ maxProcessWaiters: 3 })
        const uj = yield* UniqueJob.make({
          worker: "ProcessCapJob",
          lock: "while_executing",
          lockTimeout: "30 seconds",
          lockPrefix: RedisTest.uniquePrefix("pcap")
        })
        const run = <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.provideService(self, Redis.RedisService, store)
        const key = Lock.keyOf(uj.definition, yield* uj.digest([1]), "run")
        const before = yield* waitCounts("while_executing")
        const holder = yield* gated((job, perform) => run(uj.server(job, perform)), uj.job([1]))
        // The first try took the lock: nothing counted.
        assert.deepStrictEqual(yield* waitsSince(before, "while_executing"), {})
        const fibers = yield* Effect.forEach(
          Array.from({ length: 5 }, () => uj.job([1])),
          (job) => Effect.forkChild(run(uj.server(job, Effect.void)))
        )
        yield* until(() => Waits.waiting(store, key) === 3 && settled(fibers) === 2, "3 wait, 2 refused")
        assert.deepStrictEqual(yield* waitsSince(before, "while_executing"), { full: 2 })
        assert.strictEqual(tagOf(yield* holder.finish), "Performed")
        const outcomes = (yield* Effect.forEach(fibers, Fiber.join)).map(tagOf).sort()
        assert.deepStrictEqual(outcomes, ["Performed", "Performed", "Performed", "Skipped", "Skipped"])
        // The refused are counted, not timed; each wait that lined up is timed once.
        assert.deepStrictEqual(yield* waitsSince(before, "while_executing"), { full: 2, taken: 3, timed: 3 })
        assert.strictEqual(Waits.waiting(store, key), 0)
      }).pipe(Effect.scoped, Effect.provideService(References.MinimumLogLevel, "None"))), { timeout: 30_000 })

    it.effect("maxLockWaiters 2: a third job on one lock goes to its strategy; another lock still has its 2", () =>
      withQueue(Effect.gen(function*() {
        const store = yield* cappedStore({ maxLockWaiters: 2 })
        const uj = yield* UniqueJob.make({
          worker: "LockCapJob",
          lock: "while_executing",
          lockTimeout: "30 seconds",
          lockPrefix: RedisTest.uniquePrefix("lcap")
        })
        const run = <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.provideService(self, Redis.RedisService, store)
        const keyA = Lock.keyOf(uj.definition, yield* uj.digest(["a"]), "run")
        const keyB = Lock.keyOf(uj.definition, yield* uj.digest(["b"]), "run")
        const before = yield* waitCounts("while_executing")
        const holderA = yield* gated((job, perform) => run(uj.server(job, perform)), uj.job(["a"]))
        const holderB = yield* gated((job, perform) => run(uj.server(job, perform)), uj.job(["b"]))
        const onA = yield* Effect.forEach(
          Array.from({ length: 3 }, () => uj.job(["a"])),
          (job) => Effect.forkChild(run(uj.server(job, Effect.void)))
        )
        yield* until(() => Waits.waiting(store, keyA) === 2 && settled(onA) === 1, "2 wait on a, 1 refused")
        const onB = yield* Effect.forEach(
          Array.from({ length: 2 }, () => uj.job(["b"])),
          (job) => Effect.forkChild(run(uj.server(job, Effect.void)))
        )
        yield* until(() => Waits.waiting(store, keyB) === 2, "2 wait on b")
        assert.strictEqual(settled(onB), 0)
        assert.deepStrictEqual(yield* waitsSince(before, "while_executing"), { full: 1 })
        assert.strictEqual(tagOf(yield* holderA.finish), "Performed")
        assert.strictEqual(tagOf(yield* holderB.finish), "Performed")
        const outcomes = (yield* Effect.forEach([...onA, ...onB], Fiber.join)).map(tagOf).sort()
        assert.deepStrictEqual(outcomes, ["Performed", "Performed", "Performed", "Performed", "Skipped"])
        assert.deepStrictEqual(yield* waitsSince(before, "while_executing"), { full: 1, taken: 4, timed: 4 })
      }).pipe(Effect.scoped, Effect.provideService(References.MinimumLogLevel, "None"))), { timeout: 30_000 })

    it.effect("a wait that runs out is counted timed_out, an interrupted one interrupted", () =>
      withQueue(Effect.gen(function*() {
        const store = yield* processStore
        const uj = yield* UniqueJob.make({
          worker: "WaitEndJob",
          lock: "while_executing_reject",
          lockTimeout: "300 millis",
          lockPrefix: RedisTest.uniquePrefix("ends")
        })
        const patient = yield* UniqueJob.make({
          worker: "WaitEndJob",
          lock: "while_executing_reject",
          lockTimeout: "30 seconds",
          lockPrefix: uj.definition.lockPrefix
        })
        const run = <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.provideService(self, Redis.RedisService, store)
        const key = Lock.keyOf(uj.definition, yield* uj.digest([1]), "run")
        const before = yield* waitCounts("while_executing_reject")
        // Held until the test lets it go: the short wait always runs out first.
        const holder = yield* gated((job, perform) => run(uj.server(job, perform)), uj.job([1]))
        assert.strictEqual(tagOf(yield* run(uj.server(uj.job([1]), Effect.void))), "Rejected")
        assert.deepStrictEqual(yield* waitsSince(before, "while_executing_reject"), { timed_out: 1, timed: 1 })
        const waiter = yield* Effect.forkChild(run(patient.server(patient.job([1]), Effect.void)))
        yield* until(() => Waits.waiting(store, key) === 1, "the job waits")
        yield* Fiber.interrupt(waiter)
        assert.isTrue(Exit.hasInterrupts(yield* Fiber.await(waiter)))
        assert.deepStrictEqual(
          yield* waitsSince(before, "while_executing_reject"),
          { timed_out: 1, interrupted: 1, timed: 2 }
        )
        assert.strictEqual(tagOf(yield* holder.finish), "Performed")
      }).pipe(Effect.scoped)), { timeout: 30_000 })
  })
})

/** A store that has only release signals, driven by hand: what the waiters' registry is told and asks. */
const signalling = () => {
  const subscribed: Array<string> = []
  const unsubscribed: Array<string> = []
  let deliver: ((channel: string, freed: number) => void) | undefined
  let opened = 0
  const releases: Redis.ReleaseSignals = {
    channelOf: (lock) => `${lock.name}:LOCKED`,
    open: (onSignal) => {
      opened++
      deliver = onSignal
      return {
        subscribe: (channel) => Promise.resolve(void subscribed.push(channel)),
        unsubscribe: (channel) => Promise.resolve(void unsubscribed.push(channel)),
        close: () => Promise.resolve()
      }
    }
  }
  const store = { releases } as unknown as Redis.Store
  return { store, subscribed, unsubscribed, opened: () => opened, signal: (freed = 1) => deliver!("L:RUN:LOCKED", freed) }
}

// The release connection is opened by the first wait, and another lock's wait can join while it shakes hands. A
// SUBSCRIBE written then (ioredis writes it between connect and ready) puts the connection in subscriber mode before
// ioredis' own ready check (INFO), which ioredis then refuses: it drops the connection and fails every command in its
// queues with "Connection in subscriber mode" (redis/ioredis#2037). The first wait's subscription failed so, every
// time, and its job went to its strategy as if Redis had failed.
describe("lockTimeout: the release connection", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("a wait that joins while the release connection shakes hands subscribes, and so does the first", () =>
      Effect.gen(function*() {
        const { options, source } = yield* RedisTest.TestRedis
        if ("nodes" in options) return
        const prefix = RedisTest.uniquePrefix("handshake")
        const client = new IORedis(source.url)
        yield* Effect.addFinalizer(() => Effect.sync(() => client.disconnect()))
        let onConnect: () => void = () => undefined
        // The client as the store sees it, but the test hears when the release connection connects.
        const watched = Object.assign(Object.create(client) as IORedis, {
          duplicate: (...args: Parameters<IORedis["duplicate"]>) => {
            const made = client.duplicate(...args)
            made.once("connect", () => onConnect())
            return made
          }
        })
        const store = yield* Redis.makeFromClient(watched)
        yield* Effect.addFinalizer(() => Waits.close(store))
        const lockOf = (name: string) => ({ prefix, name: `${prefix}:${name}:RUN` })
        const joined: Array<Waits.Member> = []
        onConnect = () => joined.push(Effect.runSync(Waits.join(store, lockOf("b"))) as Waits.Member)
        joined.unshift((yield* Waits.join(store, lockOf("a"))) as Waits.Member)
        yield* until(() => joined.length === 2, "a second wait joined at the connect")
        const ready = yield* Effect.promise(() => Promise.all(joined.map((member) => member.ready)))
        assert.deepStrictEqual(ready, [true, true])
        for (const member of joined) yield* member.leave
      }).pipe(Effect.scoped), { timeout: 30_000 })

    it.effect("a release connection that never gets ready: closing the store ends the subscription at once", () =>
      Effect.gen(function*() {
        const { options, source } = yield* RedisTest.TestRedis
        if ("nodes" in options) return
        // A server that accepts and never answers: the release connection stays in its handshake.
        const silent = createServer(() => undefined)
        yield* Effect.promise(() => new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve)))
        yield* Effect.addFinalizer(() => Effect.sync(() => silent.close()))
        const port = (silent.address() as AddressInfo).port
        const client = new IORedis(source.url)
        yield* Effect.addFinalizer(() => Effect.sync(() => client.disconnect()))
        const watched = Object.assign(Object.create(client) as IORedis, {
          duplicate: () => new IORedis(port, "127.0.0.1", { enableOfflineQueue: true, lazyConnect: false })
        })
        const store = yield* Redis.makeFromClient(watched)
        const member = (yield* Waits.join(store, { prefix: "p", name: "p:x:RUN" })) as Waits.Member
        yield* realSleep(100)
        yield* Waits.close(store)
        const ready = yield* Effect.promise(() => member.ready).pipe(Effect.timeoutOption(5_000))
        assert.strictEqual(Option.getOrUndefined(ready), false, "the subscription ended with the store")
        yield* member.leave
      }).pipe(Effect.scoped), { timeout: 30_000 })
  })
})

describe("lockTimeout: the waiters' registry", () => {
  const lock = { prefix: "p", name: "L:RUN" }
  const joined = (store: Redis.Store) =>
    Effect.map(Waits.join(store, lock), (member) => {
      assert.notStrictEqual(typeof member, "string")
      return member as Waits.Member
    })

  it.effect("one connection, one subscription per lock; a signal wakes the first in line; the last leaves it", () =>
    Effect.gen(function*() {
      const fake = signalling()
      const a = yield* joined(fake.store)
      const b = yield* joined(fake.store)
      assert.strictEqual(fake.opened(), 1)
      assert.deepStrictEqual(fake.subscribed, ["L:RUN:LOCKED"])
      const turnA = yield* Effect.forkChild(a.turn(false))
      const turnB = yield* Effect.forkChild(b.turn(false))
      yield* Effect.yieldNow
      fake.signal()
      assert.strictEqual(yield* Fiber.join(turnA), "signal")
      a.spend()
      assert.isUndefined(turnB.pollUnsafe())
      yield* a.leave
      assert.deepStrictEqual(fake.unsubscribed, [])
      fake.signal()
      assert.strictEqual(yield* Fiber.join(turnB), "signal")
      yield* b.leave
      assert.deepStrictEqual(fake.unsubscribed, ["L:RUN:LOCKED"])
      assert.strictEqual(Waits.waiting(fake.store, lock), 0)
    }))

  it.effect("a signal's count wakes at most the jobs in line and keeps at most one per member: a huge count returns at once", () =>
    Effect.gen(function*() {
      const fake = signalling()
      const a = yield* joined(fake.store)
      const b = yield* joined(fake.store)
      const turnA = yield* Effect.forkChild(a.turn(false))
      yield* Effect.yieldNow
      fake.signal(1e15)
      assert.strictEqual(yield* Fiber.join(turnA), "signal")
      // b was not in line: one signal kept for it (never more than the members), so its turn comes at once.
      assert.strictEqual(yield* b.turn(false), "signal")
      a.spend()
      b.spend()
      yield* a.leave
      yield* b.leave
    }))

  it.effect("a woken job that leaves without trying hands its place on; a signal with no one in line is kept", () =>
    Effect.gen(function*() {
      const fake = signalling()
      const a = yield* joined(fake.store)
      const b = yield* joined(fake.store)
      const turnA = yield* Effect.forkChild(a.turn(false))
      const turnB = yield* Effect.forkChild(b.turn(false))
      yield* Effect.yieldNow
      fake.signal()
      assert.strictEqual(yield* Fiber.join(turnA), "signal")
      // Interrupted before its try: the place goes to b.
      yield* a.leave
      assert.strictEqual(yield* Fiber.join(turnB), "signal")
      b.spend()
      // b tries (not in line) while a release comes: the signal waits for b's return to the line.
      fake.signal()
      assert.strictEqual(yield* b.turn(true), "signal")
      yield* b.leave
    }))

  it.effect("the store's close ends every wait as closed, and no job waits after it", () =>
    Effect.gen(function*() {
      const fake = signalling()
      const a = yield* joined(fake.store)
      const turnA = yield* Effect.forkChild(a.turn(false))
      yield* Effect.yieldNow
      yield* Waits.close(fake.store)
      assert.strictEqual(yield* Fiber.join(turnA), "closed")
      yield* a.leave
      assert.strictEqual(yield* Waits.join(fake.store, lock), "closed")
    }))
})

describe("lockTimeout: bounded", () => {
  layer(Redis.layerMemory)((it) => {
    it.effect("a job over the waiters' cap per lock goes to its strategy at once; the others wait and run", () =>
      withQueue(Effect.gen(function*() {
        const uj = yield* UniqueJob.make({
          worker: "CapJob",
          lock: "while_executing",
          lockTimeout: "10 seconds",
          lockPrefix: RedisTest.uniquePrefix("cap")
        })
        const redis = yield* Redis.RedisService
        const key = Lock.keyOf(uj.definition, yield* uj.digest([1]), "run")
        const holder = yield* gated(uj.server, uj.job([1]))
        const fibers = yield* Effect.forEach(
          Array.from({ length: Waits.maxWaitersPerLock }, () => uj.job([1])),
          (job) => Effect.forkChild(uj.server(job, Effect.void))
        )
        yield* until(() => Waits.waiting(redis, key) === Waits.maxWaitersPerLock, "the cap waits")
        assert.strictEqual(tagOf(yield* uj.server(uj.job([1]), Effect.void)), "Skipped")
        assert.strictEqual(Waits.waiting(redis, key), Waits.maxWaitersPerLock)
        // The holder's release starts the line: each job runs in its turn.
        assert.strictEqual(tagOf(yield* holder.finish), "Performed")
        const outcomes = yield* Effect.forEach(fibers, Fiber.join)
        assert.isTrue(outcomes.every((outcome) => outcome._tag === "Performed"))
        assert.strictEqual(Waits.waiting(redis, key), 0)
      }).pipe(Effect.provideService(References.MinimumLogLevel, "None"))), { timeout: 30_000 })
  })
})

for (const store of stores) {
  describe(`lockTimeout: ${store.name}`, () => {
    layer(store.layer, { excludeTestServices: store.live })((it) => {
      it.effect("waiters of one process run first come, first served", () =>
        withQueue(Effect.gen(function*() {
          const uj = yield* UniqueJob.make({
            worker: "OrderJob",
            lock: "while_executing",
            lockTimeout: "30 seconds",
            lockPrefix: RedisTest.uniquePrefix("order")
          })
          const redis = yield* Redis.RedisService
          const key = Lock.keyOf(uj.definition, yield* uj.digest([1]), "run")
          const holder = yield* gated(uj.server, uj.job([1]))
          const ran: Array<number> = []
          const fibers: Array<Fiber.Fiber<Strategy.ServerOutcome<void>, unknown>> = []
          for (let i = 0; i < 5; i++) {
            fibers.push(yield* Effect.forkChild(uj.server(uj.job([1]), Effect.sync(() => void ran.push(i)))))
            yield* until(() => Waits.waiting(redis, key) === i + 1, `${i + 1} wait`)
          }
          assert.strictEqual(tagOf(yield* holder.finish), "Performed")
          const outcomes = yield* Effect.forEach(fibers, Fiber.join)
          assert.deepStrictEqual(outcomes.map(tagOf), Array(5).fill("Performed"))
          assert.deepStrictEqual(ran, [0, 1, 2, 3, 4])
          assert.strictEqual(Waits.waiting(redis, key), 0)
        })), { timeout: 30_000 })

      it.effect("a wait that ends without the lock goes to the strategy: reschedule, log", () =>
        withQueue(Effect.gen(function*() {
          const prefix = RedisTest.uniquePrefix("deadline")
          const log = yield* UniqueJob.make({
            worker: "DeadlineJob",
            lock: "while_executing",
            lockTimeout: "400 millis",
            lockPrefix: prefix
          })
          const reschedule = yield* UniqueJob.make({
            worker: "DeadlineJob",
            lock: "while_executing",
            lockTimeout: "400 millis",
            lockPrefix: prefix,
            onConflict: { server: "reschedule" }
          })
          const redis = yield* Redis.RedisService
          const key = Lock.keyOf(log.definition, yield* log.digest([1]), "run")
          const holder = yield* gated(log.server, log.job([1]))
          for (const [uj, expected] of [[log, "Skipped"], [reschedule, "Rescheduled"]] as const) {
            const waiter = yield* Effect.forkChild(uj.server(uj.job([1]), Effect.succeed("ran")))
            yield* until(() => Waits.waiting(redis, key) === 1, "the job waits")
            yield* store.advance(400)
            assert.strictEqual(tagOf(yield* Fiber.join(waiter)), expected)
            assert.strictEqual(Waits.waiting(redis, key), 0)
          }
          assert.strictEqual(tagOf(yield* holder.finish), "Performed")
        })), { timeout: 30_000 })

      it.effect("until_and_while_executing: a job waits for the run lock and keeps its queue lock meanwhile", () =>
        withQueue(Effect.gen(function*() {
          const uj = yield* UniqueJob.make({
            worker: "HandoffJob",
            lock: "until_and_while_executing",
            lockTimeout: "30 seconds",
            lockPrefix: RedisTest.uniquePrefix("handoff")
          })
          const redis = yield* Redis.RedisService
          const first = yield* uj.enqueue([1])
          assert.strictEqual(first._tag, "Enqueued")
          const key = Lock.keyOf(uj.definition, first.digest, "run")
          const holder = yield* gated(uj.server, (first as Strategy.ClientOutcome<unknown> & { job: Job.Job }).job)
          const second = yield* uj.enqueue([1])
          assert.strictEqual(second._tag, "Enqueued")
          const secondJob = (second as Strategy.ClientOutcome<unknown> & { job: Job.Job }).job
          const waiter = yield* Effect.forkChild(uj.server(secondJob, Effect.succeed("ran")))
          yield* until(() => Waits.waiting(redis, key) === 1, "the job waits")
          const queued = yield* redis.holders(Lock.keyOf(uj.definition, first.digest, "queue"))
          assert.deepStrictEqual(queued.map((h) => h.jid), [secondJob.jid])
          assert.strictEqual(tagOf(yield* holder.finish), "Performed")
          assert.strictEqual(tagOf(yield* Fiber.join(waiter)), "Performed")
          assert.deepStrictEqual(yield* redis.holders(Lock.keyOf(uj.definition, first.digest, "queue")), [])
        })), { timeout: 30_000 })

      it.effect("a redelivered copy under lockLimit 2 waits for its original (its own place is none), no loop of calls", () =>
        withQueue(Effect.gen(function*() {
          const uj = yield* UniqueJob.make({
            worker: "CopyJob",
            lock: "while_executing",
            lockLimit: 2,
            lockTimeout: "30 seconds",
            lockPrefix: RedisTest.uniquePrefix("copy")
          })
          const { calls, store: redis } = counting(yield* Redis.RedisService)
          yield* Keeper.scoped(redis)
          const run = <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.provideService(self, Redis.RedisService, redis)
          const key = Lock.keyOf(uj.definition, yield* uj.digest([1]), "run")
          const job = uj.job([1])
          const original = yield* gated((job, perform) => run(uj.server(job, perform)), job)
          const copy = yield* Effect.forkChild(run(uj.server(job, Effect.succeed("copy"))))
          yield* until(() => Waits.waiting(redis, key) === 1 && calls.fetch === 1, "the copy waits")
          assert.strictEqual(calls.lock, 2)
          assert.strictEqual(tagOf(yield* original.finish), "Performed")
          assert.strictEqual(tagOf(yield* Fiber.join(copy)), "Performed")
          assert.strictEqual(calls.lock, 3)
        }).pipe(Effect.scoped)), { timeout: 30_000 })

      it.effect("a holder that died (its lease passes, no release) is followed within the deadline", () =>
        withQueue(Effect.gen(function*() {
          const uj = yield* UniqueJob.make({
            worker: "CrashJob",
            lock: "while_executing",
            lockTimeout: "20 seconds",
            lockPrefix: RedisTest.uniquePrefix("crash")
          })
          const redis = yield* Redis.RedisService
          const key = Lock.keyOf(uj.definition, yield* uj.digest([1]), "run")
          yield* redis.lock(key, { jid: "crashed", limit: 1, ttlMs: 0, leaseMs: 500, info: "", fenced: true })
          const waiter = yield* Effect.forkChild(uj.server(uj.job([1]), Effect.succeed("ran")))
          yield* until(() => Waits.waiting(redis, key) === 1, "the job waits")
          yield* store.advance(501)
          assert.strictEqual(tagOf(yield* Fiber.join(waiter)), "Performed")
        })), { timeout: 30_000 })
    })
  })
}
