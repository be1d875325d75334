/**
 * The reaper over real BullMQ queues on a private redis-server: it asks each holder's job of the queue it belongs to,
 * keeps every lock whose job waits, is delayed, prioritized, paused, active or waiting for children (in any queue,
 * given to the adapter or not), removes the locks of completed, failed and removed jobs of the queues it was given,
 * asks in O(1) Redis work per job, and ends a pass with a typed error, keeping the locks, while the queue's Redis is
 * down. Real time: BullMQ and the grace run on it. Counts, never timings.
 */
import { assert, describe, layer } from "@effect/vitest"
import { FlowProducer, Queue } from "bullmq"
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/testing/TestClock"
import * as BullMQ from "../src/adapters/BullMQ.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Reaper from "../src/Reaper.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as Bull from "./support/bullmq.js"
import * as RedisTest from "./support/redis.js"

const sleep = (ms: number) => Effect.promise(() => new Promise((resolve) => setTimeout(resolve, ms)))

/** The jids holding `digest`'s queue lock. */
const holdersOf = (prefix: string, digest: string) =>
  Effect.flatMap(Redis.RedisService, (redis) =>
    Effect.map(redis.fetch({ prefix, name: digest }), (fetched) => fetched.holders.map((h) => h.jid)))

const commandstats = Bull.commandstats

describe("Reaper over BullMQ", () => {
  layer(RedisTest.layer())((it) => {
    it.effect(
      "observation 1: queues q2a, q2b and a paused q2p; a layer over q2a keeps q2b's and q2p's locks, one over all three keeps every live job's and removes the completed, failed and removed jobs' locks after the grace",
      () =>
        Effect.gen(function*() {
          const prefix = RedisTest.uniquePrefix("obs1")
          // The names, under BullMQ's default prefix; this file's server is its own.
          const q2a = yield* Bull.queue("q2a")
          const q2b = yield* Bull.queue("q2b")
          const q2p = yield* Bull.queue("q2p")
          yield* Effect.promise(() => q2p.pause())
          const connection = yield* Bull.connection
          const executed = UniqueJob.unsafeMake({ worker: "Obs", queue: "q2a", lock: "until_executed", lockPrefix: prefix })
          const handoff = (queue: string) =>
            UniqueJob.unsafeMake({ worker: "Obs", queue, lock: "until_and_while_executing", lockPrefix: prefix })
          const all = BullMQ.layer([q2a, q2b, q2p])
          const add = (unique: UniqueJob.UniqueJob, n: number, opts: Parameters<BullMQ.BullMQ["add"]>[1] = {}) =>
            Effect.gen(function*() {
              const outcome = yield* unique.client(
                unique.job([{ n }]),
                (stamped) => Effect.flatMap(BullMQ.BullMQ, (bull) => bull.add(stamped, opts))
              )
              assert.strictEqual(outcome._tag, "Enqueued")
              return { digest: outcome.digest, jid: outcome.job.jid }
            }).pipe(Effect.provide(all))

          // q2a: one worker, concurrency 1: the completed and failed jobs first, then the active one it holds.
          const completed = yield* add(executed, 1)
          const failed = yield* add(executed, 2, { attempts: 1 })
          let release: () => void = () => {}
          const held = new Promise<void>((resolve) => {
            release = resolve
          })
          yield* Bull.worker("q2a", async (job) => {
            if ((job.data as { n: number }).n === 2) throw new Error("fails for good")
            if ((job.data as { n: number }).n === 3) await held
          }, { concurrency: 1 })
          yield* Effect.addFinalizer(() => Effect.sync(() => release()))
          assert.isTrue(yield* Bull.until(Effect.promise(async () =>
            (await q2a.getJobState(completed.jid)) === "completed" && (await q2a.getJobState(failed.jid)) === "failed"
          )))
          const active = yield* add(executed, 3)
          assert.isTrue(yield* Bull.until(Effect.promise(async () => (await q2a.getJobState(active.jid)) === "active")))
          const waiting = yield* add(executed, 4)
          const delayed = yield* add(executed, 5, { delay: 600_000 })
          const prioritized = yield* add(executed, 6, { priority: 3 })
          const removed = yield* add(executed, 7)
          assert.strictEqual(yield* Effect.promise(() => q2a.remove(removed.jid)), 1)
          // A parent waiting for a child in a queue no worker serves: the lock taken by hand, the flow under its jid.
          const parentJid = "parent-obs1"
          const parentDigest = `${prefix}:parent`
          yield* Lock.lock(executed.definition, { digest: parentDigest, jid: parentJid, info: { queue: "q2a" } })
          yield* Effect.acquireRelease(Effect.sync(() => new FlowProducer({ connection })), (f) =>
            Effect.promise(() => f.close())).pipe(
              Effect.flatMap((flow) =>
                Effect.promise(() =>
                  flow.add({
                    name: "Obs",
                    queueName: "q2a",
                    data: { n: 8 },
                    opts: { jobId: parentJid },
                    children: [{ name: "child", queueName: "q2c", data: {} }]
                  })
                )
              )
            )
          assert.strictEqual(yield* Effect.promise(() => q2a.getJobState(parentJid)), "waiting-children")
          // q2b: waiting and completed (its completion by hand: no worker); q2p: waiting in a paused queue.
          const q2bWaiting = yield* add(handoff("q2b"), 9)
          const q2bDone = yield* add(handoff("q2b"), 10)
          yield* Effect.promise(async () => {
            const job = await q2b.getJob(q2bDone.jid)
            await job!.remove()
          })
          const q2pWaiting = yield* add(handoff("q2p"), 11)
          assert.strictEqual(yield* Effect.promise(() => q2p.getJobState(q2pWaiting.jid)), "waiting")
          assert.isTrue(yield* Effect.promise(() => q2p.isPaused()))

          const live = { active, waiting, delayed, prioritized, parent: { digest: parentDigest, jid: parentJid } }
          const others = { q2bWaiting, q2pWaiting }
          const ended = { completed, failed, removed }
          const kept = (locks: Record<string, { digest: string; jid: string }>) =>
            Effect.forEach(Object.entries(locks), ([name, lock]) =>
              Effect.map(holdersOf(prefix, lock.digest), (jids) => {
                assert.deepStrictEqual(jids, [lock.jid], `${name}: its lock is kept`)
              }))
          const goneAll = (locks: Record<string, { digest: string; jid: string }>) =>
            Effect.forEach(Object.entries(locks), ([name, lock]) =>
              Effect.map(holdersOf(prefix, lock.digest), (jids) => {
                assert.deepStrictEqual(jids, [], `${name}: its lock is gone`)
              }))

          yield* sleep(1100) // past the grace
          // A layer over q2a alone: it answers for q2a's jobs only.
          const one = yield* Reaper.runOnce({ prefix, grace: "1 second" }).pipe(Effect.provide(BullMQ.layer(q2a)))
          assert.strictEqual(one.orphans, 3)
          yield* kept(live)
          yield* kept(others)
          yield* kept({ q2bDone })
          yield* goneAll(ended)
          // The same data again on q2b: its lock is still held by the waiting job.
          const again = yield* handoff("q2b").client(
            handoff("q2b").job([{ n: 9 }]),
            (stamped) => Effect.flatMap(BullMQ.BullMQ, (bull) => bull.add(stamped))
          ).pipe(Effect.provide(all))
          assert.strictEqual(again._tag, "Skipped")
          assert.strictEqual(yield* Effect.promise(() => q2b.count()), 1, "one copy waits")

          // A layer over all three: q2b's removed job is asked of q2b, and goes; every live lock stays.
          const three = yield* Reaper.runOnce({ prefix, grace: "1 second" }).pipe(Effect.provide(all))
          assert.strictEqual(three.orphans, 1)
          yield* kept(live)
          yield* kept(others)
          yield* goneAll({ q2bDone })
          for (let i = 0; i < 5; i++) {
            const pass = yield* Reaper.runOnce({ prefix, grace: "1 second" }).pipe(Effect.provide(all))
            assert.strictEqual(pass.orphans, 0)
          }
          yield* kept(live)
          yield* kept(others)
          release()
        }).pipe(Effect.scoped, TestClock.withLive),
      { timeout: 90_000 }
    )

    it.effect("a holder's queue lock names its queue; one written without it (an older version) is kept", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("noq")
        const q = yield* Bull.queue(Bull.uniqueName("noq"))
        const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
        // Neither job exists in q: one lock names q, the other names no queue.
        yield* Lock.lock(definition, { digest: `${prefix}:named`, jid: "named", info: { queue: q.name } })
        yield* Lock.lock(definition, { digest: `${prefix}:old`, jid: "old" })
        const redis = yield* Redis.RedisService
        const fetched = yield* redis.fetch({ prefix, name: `${prefix}:named` })
        assert.strictEqual(fetched.holders[0]?.queue, q.name)
        assert.isUndefined((yield* redis.fetch({ prefix, name: `${prefix}:old` })).holders[0]?.queue)
        yield* sleep(20)
        const pass = yield* Reaper.runOnce({ prefix, grace: 10 }).pipe(Effect.provide(BullMQ.layer(q)))
        assert.strictEqual(pass.orphans, 1)
        assert.deepStrictEqual(yield* holdersOf(prefix, `${prefix}:named`), [])
        assert.deepStrictEqual(yield* holdersOf(prefix, `${prefix}:old`), ["old"])
      }).pipe(Effect.scoped, TestClock.withLive), { timeout: 30_000 })

    it.effect("a pass over 2,000 waiting jobs past the grace: O(1) Redis commands per job, in a few calls, none scanning a list", () =>
      Effect.gen(function*() {
        const prefix = RedisTest.uniquePrefix("cost")
        const name = Bull.uniqueName("cost")
        const q = yield* Bull.queue(name)
        const unique = UniqueJob.unsafeMake({ worker: "Cost", queue: name, lock: "until_executed", lockPrefix: prefix })
        const n = 2000
        yield* Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) =>
          Effect.flatMap(unique.enqueue([i]), (outcome) => {
            assert.strictEqual(outcome._tag, "Enqueued")
            return Effect.void
          }), { concurrency: 16, discard: true }).pipe(Effect.provide(BullMQ.layer(q)))
        yield* sleep(20)
        const { raw } = yield* RedisTest.TestRedis
        const before = yield* commandstats(raw)
        const pass = yield* Reaper.runOnce({ prefix, grace: 10 }).pipe(Effect.provide(BullMQ.layer(q)))
        const after = yield* commandstats(raw)
        const delta = (command: string) => (after.get(command) ?? 0) - (before.get(command) ?? 0)
        assert.strictEqual(pass.orphans, 0)
        assert.strictEqual(pass.scanned, n)
        assert.strictEqual(delta("exists"), n, "one EXISTS of each job's hash")
        assert.isAtMost(delta("zscore"), 2 * n, "at most its two scores")
        for (const scan of ["lpos", "lrange", "lindex", "zrank", "llen"]) {
          assert.strictEqual(delta(scan), 0, `no ${scan} over the queue`)
        }
        // The reaper's 20 steps of 100, and the queue asked in at most one call per step.
        assert.isAtMost(delta("evalsha") + delta("eval"), 2 * Math.ceil(n / 100) + 4)
      }).pipe(Effect.scoped, TestClock.withLive), { timeout: 120_000 })

    it.effect("one adapter over several queues routes each job to its queue; two queues of one name are refused", () =>
      Effect.gen(function*() {
        const a = yield* Bull.queue(Bull.uniqueName("route"))
        const b = yield* Bull.queue(Bull.uniqueName("route"))
        const prefix = RedisTest.uniquePrefix("route")
        const ja = UniqueJob.unsafeMake({ worker: "R", queue: a.name, lock: "until_executed", lockPrefix: prefix })
        const jb = UniqueJob.unsafeMake({ worker: "R", queue: b.name, lock: "until_executed", lockPrefix: prefix })
        const both = BullMQ.layer([a, b])
        const [ea, eb] = yield* Effect.all([ja.enqueue([1]), jb.enqueue([1])]).pipe(Effect.provide(both))
        assert.strictEqual(yield* Effect.promise(() => a.getJobState(ea.job.jid)), "waiting")
        assert.strictEqual(yield* Effect.promise(() => b.getJobState(eb.job.jid)), "waiting")
        const port = yield* Effect.provide(JobQueue, both)
        assert.deepStrictEqual(
          yield* port.exists([ea.job, eb.job, { jid: ea.job.jid, queue: b.name }, { jid: "x", queue: "elsewhere" }]),
          ["exists", "exists", "gone", "unknown"]
        )
        assert.isTrue(yield* port.remove(eb.job.jid))
        assert.deepStrictEqual(yield* port.exists([eb.job]), ["gone"])
        const stranger = UniqueJob.unsafeMake({ worker: "R", queue: "elsewhere", lock: "until_executed", lockPrefix: prefix })
        const refused = yield* Effect.exit(stranger.enqueue([1]).pipe(Effect.provide(both)))
        assert.isTrue(Exit.isFailure(refused), "a job of a queue the adapter was not given")
        // A queue under its own key prefix: its jobs are found under it.
        const custom = yield* Bull.queue(Bull.uniqueName("route"), { prefix: "custom" })
        const jc = UniqueJob.unsafeMake({ worker: "R", queue: custom.name, lock: "until_executed", lockPrefix: prefix })
        const ec = yield* jc.enqueue([1]).pipe(Effect.provide(BullMQ.layer(custom)))
        const customPort = yield* Effect.provide(JobQueue, BullMQ.layer(custom))
        assert.deepStrictEqual(yield* customPort.exists([ec.job, { jid: "never", queue: custom.name }]), ["exists", "gone"])
        assert.strictEqual(yield* Effect.promise(() => custom.remove(ec.job.jid)), 1)
        assert.deepStrictEqual(yield* customPort.exists([ec.job]), ["gone"])
        const twin = new Queue(a.name, { connection: yield* Bull.connection, prefix: "other" })
        yield* Effect.addFinalizer(() => Effect.promise(() => twin.close()))
        const error = yield* Effect.flip(Layer.build(BullMQ.layer([a, twin])))
        assert.strictEqual(error._tag, "InvalidLockOptions")
        assert.strictEqual(error.field, "queues[1]")
        for (const timeout of [0, -1, Number.NaN, "abc", 1.5, 1e12]) {
          const bad = yield* Effect.flip(Layer.build(BullMQ.layer(a, { timeout: timeout as number })))
          assert.strictEqual(bad.field, "timeout", String(timeout))
          assert.include(bad.reason, "such as \"5 seconds\"")
        }
      }).pipe(Effect.scoped, TestClock.withLive), { timeout: 30_000 })
  })

  // The queue's Redis is its own server here, so it can be stopped while the locks' Redis runs on.
  layer(RedisTest.layer())((it) => {
    it.effect("while the queue's Redis is down a pass ends with a QueueError within the timeout and keeps every lock; the next pass after it is back reaps", () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.start
        const url = new URL(server.url)
        const connection = { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null }
        const name = Bull.uniqueName("down")
        const q = yield* Effect.acquireRelease(
          Effect.sync(() => new Queue(name, { connection })),
          (queue) => Effect.promise(() => queue.close().catch(() => undefined))
        )
        q.on("error", () => {})
        const prefix = RedisTest.uniquePrefix("down")
        const unique = UniqueJob.unsafeMake({ worker: "Down", queue: name, lock: "until_executed", lockPrefix: prefix })
        const adapter = BullMQ.layer(q, { timeout: 300 })
        const first = yield* unique.enqueue([1]).pipe(Effect.provide(adapter))
        const second = yield* unique.enqueue([2]).pipe(Effect.provide(adapter))
        assert.strictEqual(first._tag, "Enqueued")
        // The first job is removed (its lock an orphan once the queue can be asked); the second waits.
        assert.strictEqual(yield* Effect.promise(() => q.remove(first.job.jid)), 1)
        yield* sleep(20)
        yield* server.kill

        const failed = yield* Effect.flip(Reaper.runOnce({ prefix, grace: 10 }).pipe(Effect.provide(adapter)))
        assert.strictEqual(failed._tag, "QueueError")
        assert.deepStrictEqual(yield* holdersOf(prefix, first.digest), [first.job.jid], "undecided: kept")
        assert.deepStrictEqual(yield* holdersOf(prefix, second.digest), [second.job.jid])

        // Reaper.layer logs the failed pass and goes on.
        const logs = yield* Ref.make<ReadonlyArray<string>>([])
        const logger = Logger.make(({ message }) => {
          Effect.runSync(Ref.update(logs, (ls) => [...ls, String(Array.isArray(message) ? message[0] : message)]))
        })
        yield* Effect.scoped(Effect.gen(function*() {
          yield* Layer.build(
            Reaper.layer({ prefix, grace: 10, interval: 50 }).pipe(
              Layer.provide(adapter),
              Layer.provide(Logger.layer([logger]))
            )
          )
          assert.isTrue(yield* Bull.until(Effect.map(Ref.get(logs), (ls) =>
            ls.filter((l) => l.includes("reaper pass failed")).length >= 2)))
          assert.deepStrictEqual(yield* holdersOf(prefix, first.digest), [first.job.jid])
          // Back, empty (nothing was persisted): both jobs are gone now, and so are their locks.
          yield* server.restart
          assert.isTrue(yield* Bull.until(Effect.map(holdersOf(prefix, first.digest), (jids) => jids.length === 0)))
          assert.isTrue(yield* Bull.until(Effect.map(holdersOf(prefix, second.digest), (jids) => jids.length === 0)))
        }))

        // Stalled rather than down (CLIENT PAUSE): the pass ends with a QueueError; once it answers, only the
        // orphan goes.
        const third = yield* unique.enqueue([3]).pipe(Effect.provide(adapter))
        const fourth = yield* unique.enqueue([4]).pipe(Effect.provide(adapter))
        assert.strictEqual(yield* Effect.promise(() => q.remove(third.job.jid)), 1)
        yield* sleep(20)
        const control = yield* Effect.acquireRelease(
          Effect.sync(() => new IORedis(server.url)),
          (client) => Effect.sync(() => client.disconnect())
        )
        yield* Effect.promise(() => control.call("CLIENT", "PAUSE", "1500", "ALL"))
        const stalled = yield* Effect.flip(Reaper.runOnce({ prefix, grace: 10 }).pipe(Effect.provide(adapter)))
        assert.strictEqual(stalled._tag, "QueueError")
        assert.deepStrictEqual(yield* holdersOf(prefix, third.digest), [third.job.jid], "undecided: kept")
        yield* sleep(1600)
        const after = yield* Reaper.runOnce({ prefix, grace: 10 }).pipe(Effect.provide(adapter))
        assert.strictEqual(after.orphans, 1)
        assert.deepStrictEqual(yield* holdersOf(prefix, third.digest), [])
        assert.deepStrictEqual(yield* holdersOf(prefix, fourth.digest), [fourth.job.jid], "its job waits: kept")
      }).pipe(Effect.scoped, TestClock.withLive), { timeout: 90_000 })
  })
})
