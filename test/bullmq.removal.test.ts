/**
 * Jobs an operator takes out of BullMQ, and their locks: `queue.drain()`, `queue.obliterate()` and `job.remove()`
 * by hand leave queue locks that only a BullMQ-aware reap frees — `unique-jobs reap --bullmq-queue NAME` (run here
 * in-process, as the executable runs it) — and `UniqueQueue`'s own `remove`, `drain` and `obliterate` let the locks
 * go with the jobs. Real BullMQ queues on a private redis-server; counts, never timings.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Queue as BullQueue, type Queue } from "bullmq"
import { Cluster as IOCluster } from "ioredis"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Cli from "../src/Cli.js"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as Redis from "../src/Redis.js"
import * as RedisCluster from "../src/testing/RedisCluster.js"
import * as Bull from "./support/bullmq.js"
import { capturedConsole, closedPort } from "./support/cli.js"
import * as RedisTest from "./support/redis.js"
import { type Data, lockProxiedUniqueQueue } from "./support/uniquequeue.js"

/** The jids holding `digest`'s queue lock. */
const holdersOf = (prefix: string, digest: string) =>
  Effect.flatMap(Redis.RedisService, (redis) =>
    Effect.map(redis.fetch({ prefix, name: digest }), (fetched) => fetched.holders.map((h) => h.jid)))

/** The command in-process: its answer lines, and its error's message when it failed. */
const cli = (...args: Array<string>) =>
  Effect.gen(function*() {
    const { capture, lines } = yield* capturedConsole
    const ran = yield* Cli.run(["node", "unique-jobs", ...args]).pipe(
      Effect.provideService(Console.Console, capture),
      Effect.provide(Cli.platform),
      Effect.result
    )
    // The default logger writes to the console too: the answer is the JSON line.
    const answer = lines.find((line) => line.startsWith("{"))
    return { lines, answer, error: Result.isFailure(ran) ? (ran.failure as { message: string }).message : undefined }
  })

/** A UniqueQueue over `queue` with the locks on the test server under `lockPrefix`, closed with the scope. */
const uniqueOver = (queue: Queue, lockPrefix: string, lock: "until_executed" | "until_and_while_executing" = "until_executed") =>
  Effect.flatMap(RedisTest.TestRedis, ({ source }) =>
    Effect.acquireRelease(
      Effect.sync(() => UniqueQueue.make<Data>(queue, { lock, lockPrefix, redis: { url: source.url }, defaults: {} })),
      (u) => Effect.promise(() => u.close())
    ))

const added = (unique: UniqueQueue.UniqueQueue<Data>, n: number) =>
  Effect.promise(async () => {
    const outcome = await unique.add("Work", { n })
    assert.strictEqual(outcome._tag, "Enqueued", `add ${n}`)
    return { digest: outcome.digest, jid: outcome.job.jid }
  })

describe("observation 7: unique-jobs reap --bullmq-queue frees the locks of jobs removed from BullMQ by hand", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect(
      "drained, removed and obliterated by hand: the reap frees exactly those locks; another queue's, a live job's, a running job's and foreign keys stay; the next add is Enqueued",
      () =>
        Effect.gen(function*() {
          const { raw, source } = yield* RedisTest.TestRedis
          const prefix = RedisTest.uniquePrefix("reap-bull")
          const [drained, removed, obliterated, other] = yield* Effect.forEach(
            ["drained", "removed", "oblit", "other"],
            (name) => Bull.queue(Bull.uniqueName(name))
          )
          const uniques = yield* Effect.forEach([drained!, removed!, obliterated!, other!], (q) => uniqueOver(q, prefix))
          const [uDrained, uRemoved, uObliterated, uOther] = uniques as [
            UniqueQueue.UniqueQueue<Data>,
            UniqueQueue.UniqueQueue<Data>,
            UniqueQueue.UniqueQueue<Data>,
            UniqueQueue.UniqueQueue<Data>
          ]
          const d = yield* Effect.forEach([1, 2, 3], (n) => added(uDrained, n))
          const r = yield* Effect.forEach([1, 2, 3], (n) => added(uRemoved, n))
          const o = yield* Effect.forEach([1, 2], (n) => added(uObliterated, n))
          const x = yield* Effect.forEach([1, 2], (n) => added(uOther, n))
          // r[2] runs: a worker took it and holds it (its until_executed lock is kept while it runs).
          const taker = yield* Bull.manualWorker(removed!.name)
          const running = yield* Effect.promise(() => taker.getNextJob("taker"))
          assert.strictEqual(running?.id, r[0]!.jid)
          // A key under the prefix that is not one of ours, and a lock of another prefix.
          yield* Effect.promise(() => raw.set(`${prefix}:foreign`, "x"))
          const otherPrefix = RedisTest.uniquePrefix("reap-bull-other")
          const elsewhere = yield* uniqueOver(drained!, otherPrefix)
          const kept = yield* added(elsewhere, 9)

          // The operator, through BullMQ directly.
          yield* Effect.promise(() => drained!.drain())
          yield* Effect.promise(async () => (await removed!.getJob(r[1]!.jid))!.remove())
          yield* Effect.promise(() => obliterated!.obliterate())
          yield* Effect.promise(() => other!.drain())
          yield* Effect.sleep("50 millis") // past the grace below

          const where = ["--redis-url", source.url, "--prefix", prefix, "--grace", "20 millis"]
          const queues = ["--bullmq-queue", drained!.name, "--bullmq-queue", removed!.name]
          // The obliterated queue has no keys left: told it, the reap refuses until told that is expected.
          const refused = yield* cli("reap", ...where, ...queues, "--bullmq-queue", obliterated!.name, "--json")
          assert.match(refused.error ?? "", new RegExp(`BullMQ has no queue "${obliterated!.name}" under prefix "bull"`))
          assert.include(refused.error ?? "", "--bullmq-allow-missing")
          const allQueues = [...queues, "--bullmq-queue", obliterated!.name, "--bullmq-allow-missing"]

          const dry = yield* cli("reap", ...where, ...allQueues, "--dry-run", "--json")
          assert.isUndefined(dry.error, dry.error)
          const dryPass = JSON.parse(dry.answer ?? "") as { orphans: number; freed: Array<{ lock: string; jid: string }> }
          const expected = [...d, r[1]!, ...o].map((l) => `${l.digest} ${l.jid}`).sort()
          assert.deepStrictEqual(dryPass.freed.map((f) => `${f.lock} ${f.jid}`).sort(), expected)
          assert.strictEqual(dryPass.orphans, expected.length)
          for (const lock of [...d, r[1]!, ...o]) assert.deepStrictEqual(yield* holdersOf(prefix, lock.digest), [lock.jid])

          const real = yield* cli("reap", ...where, ...allQueues, "--json")
          assert.isUndefined(real.error, real.error)
          const pass = JSON.parse(real.answer ?? "") as { orphans: number; freed: Array<{ lock: string; jid: string }> }
          assert.strictEqual(pass.orphans, expected.length)
          assert.deepStrictEqual(pass.freed.map((f) => `${f.lock} ${f.jid}`).sort(), expected)
          for (const lock of [...d, r[1]!, ...o]) assert.deepStrictEqual(yield* holdersOf(prefix, lock.digest), [])
          // Kept: the running job's, the waiting job's, the queue it was not told about, another prefix's.
          for (const lock of [r[0]!, r[2]!, ...x]) assert.deepStrictEqual(yield* holdersOf(prefix, lock.digest), [lock.jid])
          assert.deepStrictEqual(yield* holdersOf(otherPrefix, kept.digest), [kept.jid])
          assert.strictEqual(yield* Effect.promise(() => raw.get(`${prefix}:foreign`)), "x")
          // The obliterated queue was read, never written: no keys of it came back.
          assert.deepStrictEqual(yield* Effect.promise(() => raw.keys(`bull:${obliterated!.name}:*`)), [])

          // The same data again: Enqueued.
          for (const [unique, n] of [[uDrained, 1], [uRemoved, 2], [uObliterated, 1]] as const) {
            const again = yield* Effect.promise(() => unique.add("Work", { n }))
            assert.strictEqual(again._tag, "Enqueued")
          }
          const stillHeld = yield* Effect.promise(() => uOther.add("Work", { n: 1 }))
          assert.strictEqual(stillHeld._tag, "Skipped", "the queue the reap was not told about keeps its locks")
        }),
      { timeout: 180_000 }
    )
  })
})

/** A new queue, a lock prefix of its own and a UniqueQueue over them. */
const fresh = (label: string, lock: "until_executed" | "until_and_while_executing" = "until_executed") =>
  Effect.gen(function*() {
    const prefix = RedisTest.uniquePrefix(`uq-${label}`)
    const queue = yield* Bull.queue(Bull.uniqueName(label))
    return { prefix, queue, unique: yield* uniqueOver(queue, prefix, lock) }
  })

const rejected = (f: () => Promise<unknown>) =>
  Effect.promise(() => f().then(() => undefined, (error: unknown) => error as { _tag?: string; message: string }))

describe("unique-jobs reap --bullmq-queue: mistakes and an unreachable BullMQ free nothing, and say why in one line", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("a wrong prefix, a BullMQ Redis that is not there, --grace without a queue, a bad --grace or name: exit 1, every lock kept", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const { prefix, queue, unique } = yield* fresh("reap-mistakes")
        const locks = yield* Effect.forEach([1, 2], (n) => added(unique, n))
        yield* Effect.promise(() => queue.drain())
        yield* Effect.sleep("50 millis")
        const where = ["--redis-url", source.url, "--prefix", prefix]
        const asked = ["--bullmq-queue", queue.name, "--grace", "20ms"]
        const port = yield* closedPort
        const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string | RegExp]> = [
          [[...asked, "--bullmq-prefix", "bullx"], `BullMQ has no queue "${queue.name}" under prefix "bullx" (the locks' Redis)`],
          [[...asked, "--bullmq-url", `redis://:secret@127.0.0.1:${port}`], /^cannot reach BullMQ's Redis \(--bullmq-url\)/],
          [["--grace", "20"], "--grace asks about BullMQ's jobs: name the queues with --bullmq-queue"],
          [["--bullmq-url", source.url], "--bullmq-url asks about BullMQ's jobs: name the queues with --bullmq-queue"],
          [["--bullmq-queue", queue.name, "--grace", "soon"], /^--grace: expected a duration/],
          [["--bullmq-queue", queue.name, "--grace", "0s"], /^--grace: expected a duration of at least 1 ms/],
          // A bare number could mean seconds or minutes: a unit is asked for.
          [["--bullmq-queue", queue.name, "--grace", "5"], "--grace 5 has no unit: write it with one, e.g. --grace 5s or 10m"],
          [["--bullmq-queue", "-x"], `--bullmq-queue "-x" is not a queue name`],
          [["--bullmq-queue", "a:b"], `--bullmq-queue "a:b": Queue name cannot contain :`]
        ]
        for (const [args, said] of cases) {
          const ran = yield* cli("reap", ...where, ...args, "--json")
          if (typeof said === "string") assert.include(ran.error ?? "", said, args.join(" "))
          else assert.match(ran.error ?? "", said, args.join(" "))
          assert.notInclude(ran.error ?? "", "secret")
          assert.isUndefined(ran.answer)
        }
        for (const lock of locks) assert.deepStrictEqual(yield* holdersOf(prefix, lock.digest), [lock.jid])
        // "20" is 20 ms; "1m" a minute, so the locks taken just now are not asked about.
        const young = yield* cli("reap", ...where, "--bullmq-queue", queue.name, "--grace", "1m", "--json")
        assert.strictEqual((JSON.parse(young.answer ?? "") as { orphans: number }).orphans, 0)
        const freed = yield* cli("reap", ...where, ...asked, "--json")
        assert.strictEqual((JSON.parse(freed.answer ?? "") as { orphans: number }).orphans, 2)
      }), { timeout: 120_000 })
  })
})

describe("observation 7: UniqueQueue's remove, drain and obliterate let the jobs' locks go with them", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("remove: a waiting job goes with its queue lock; a running job, a missing id and a bad id change nothing", () =>
      Effect.gen(function*() {
        const { prefix, queue, unique } = yield* fresh("remove")
        const [first, second] = yield* Effect.forEach([1, 2], (n) => added(unique, n))
        const taker = yield* Bull.manualWorker(queue.name)
        const running = yield* Effect.promise(() => taker.getNextJob("taker"))
        assert.strictEqual(running?.id, first!.jid)

        assert.strictEqual(yield* Effect.promise(() => unique.remove(second!.jid)), 1)
        assert.isUndefined(yield* Effect.promise(() => queue.getJob(second!.jid)))
        assert.deepStrictEqual(yield* holdersOf(prefix, second!.digest), [], "its lock went with it")
        assert.strictEqual((yield* Effect.promise(() => unique.add("Work", { n: 2 })))._tag, "Enqueued")

        assert.strictEqual(yield* Effect.promise(() => unique.remove(first!.jid)), 0, "BullMQ keeps a running job")
        assert.deepStrictEqual(yield* holdersOf(prefix, first!.digest), [first!.jid])
        assert.strictEqual(yield* Effect.promise(() => unique.remove("no-such-job")), 0)
        const bad = yield* rejected(() => unique.remove("" as string))
        assert.strictEqual(bad?._tag, "InvalidLockOptions")
        assert.include(bad?.message, "jobId: expected the id of a job")
      }), { timeout: 120_000 })

    it.effect("remove with the lock Redis stalled: the job is gone, and the error says its lock may be left and what frees it", () =>
      Effect.gen(function*() {
        const { proxy, queue, unique } = yield* lockProxiedUniqueQueue("uq-remove-stalled", "1 second")
        const first = yield* added(unique, 1)
        yield* proxy.stall
        const failed = yield* rejected(() => unique.remove(first.jid))
        yield* proxy.resume
        assert.strictEqual(failed?._tag, "RedisError")
        assert.include(failed?.message, `job ${first.jid} was removed from queue "${queue.name}" but its lock may be left`)
        assert.include(failed?.message, `unique-jobs reap --bullmq-queue ${queue.name} frees it`)
        assert.isUndefined(yield* Effect.promise(() => queue.getJob(first.jid)))
      }), { timeout: 120_000 })

    it.effect("drain: waiting and prioritized jobs go with their locks; delayed ones only with drain(true); a running job keeps its lock", () =>
      Effect.gen(function*() {
        const { prefix, queue, unique } = yield* fresh("drain", "until_and_while_executing")
        const waiting = yield* Effect.forEach([1, 2, 3], (n) => added(unique, n))
        const taker = yield* Bull.manualWorker(queue.name)
        const running = yield* Effect.promise(() => taker.getNextJob("taker"))
        assert.strictEqual(running?.id, waiting[0]!.jid)
        const prioritized = yield* Effect.promise(() => unique.add("Work", { n: 4 }, { priority: 2 }))
        const delayed = yield* Effect.promise(() => unique.add("Work", { n: 5 }, { delay: 600_000 }))
        assert.deepStrictEqual([prioritized._tag, delayed._tag], ["Enqueued", "Enqueued"])

        assert.strictEqual(yield* Effect.promise(() => unique.drain()), 3)
        for (const lock of [waiting[1]!, waiting[2]!, { digest: prioritized.digest }]) {
          assert.deepStrictEqual(yield* holdersOf(prefix, lock.digest), [])
        }
        assert.deepStrictEqual(yield* holdersOf(prefix, delayed.digest), [delayed.job.jid], "delayed: kept by drain()")
        assert.deepStrictEqual(yield* holdersOf(prefix, waiting[0]!.digest), [waiting[0]!.jid], "running: kept")
        assert.strictEqual(yield* Effect.promise(() => unique.drain(true)), 1)
        assert.deepStrictEqual(yield* holdersOf(prefix, delayed.digest), [])
        for (const n of [2, 3, 4, 5]) assert.strictEqual((yield* Effect.promise(() => unique.add("Work", { n })))._tag, "Enqueued")
        assert.strictEqual((yield* Effect.promise(() => unique.add("Work", { n: 1 })))._tag, "Skipped", "the running job's")
        const bad = yield* rejected(() => unique.drain("yes" as unknown as boolean))
        assert.include(bad?.message, "delayed: expected true")
      }), { timeout: 120_000 })

    it.effect("drain frees the locks of every page of jobs, not only the first: 250 waiting jobs, no worker", () =>
      Effect.gen(function*() {
        const { prefix, queue, unique } = yield* fresh("drain-pages")
        // More than two of drain's pages (100 jobs each), and nothing else takes them.
        const n = 250
        const jobs = yield* Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) => added(unique, i), { concurrency: 16 })
        assert.strictEqual(yield* Effect.promise(() => unique.drain()), n)
        assert.strictEqual(yield* Effect.promise(() => queue.getJobCountByTypes("waiting", "prioritized")), 0)
        const left = yield* Effect.filter(jobs, (job) => Effect.map(holdersOf(prefix, job.digest), (held) => held.length > 0))
        assert.strictEqual(left.length, 0, "every drained job's lock is gone")
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
        assert.strictEqual((yield* Effect.promise(() => unique.add("Work", { n: n - 1 })))._tag, "Enqueued")
      }), { timeout: 120_000 })

    it.effect("drain while a worker runs 300 jobs: every job ran or was removed, none ran twice, and no lock is left", () =>
      Effect.gen(function*() {
        const { prefix, queue, unique } = yield* fresh("drain-live")
        const n = 300
        yield* Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) => added(unique, i), { concurrency: 16, discard: true })
        const ran: Array<number> = []
        yield* Bull.worker<Data>(queue.name, unique.processor(async (job) => {
          ran.push(job.data.n)
          await new Promise((resolve) => setTimeout(resolve, 2))
        }), { concurrency: 4 })
        assert.isTrue(yield* Bull.until(Effect.sync(() => ran.length >= 5)), "the worker started")
        const removed = yield* Effect.promise(() => unique.drain())
        assert.isTrue(
          yield* Bull.until(Effect.promise(async () => (await queue.getJobCountByTypes("waiting", "active")) === 0), 120_000)
        )
        // Every job ran or was removed (one a worker finished just as it was removed may count twice).
        assert.isTrue(yield* Bull.until(Effect.sync(() => ran.length + removed >= n), 120_000), `${ran.length} + ${removed}`)
        assert.isAbove(removed, 0)
        assert.strictEqual(new Set(ran).size, ran.length, "no job ran twice")
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [], "no lock left")
      }), { timeout: 240_000 })

    it.effect("obliterate: refused while a job runs (nothing removed); with force every lock but the running job's goes, and that one at its end", () =>
      Effect.gen(function*() {
        const { prefix, queue, unique } = yield* fresh("oblit", "until_and_while_executing")
        let release: () => void = () => {}
        const held = new Promise<void>((resolve) => {
          release = resolve
        })
        yield* Effect.addFinalizer(() => Effect.sync(() => release()))
        const first = yield* added(unique, 1)
        yield* Bull.worker<Data>(queue.name, unique.processor(async () => {
          await held
        }), { concurrency: 1 })
        const runLock = `${first.digest}:RUN`
        assert.isTrue(yield* Bull.until(Effect.map(holdersOf(prefix, runLock), (jids) => jids.length === 1)))
        const rest = yield* Effect.forEach([2, 3], (n) => added(unique, n))
        const delayed = yield* Effect.promise(() => unique.add("Work", { n: 4 }, { delay: 600_000 }))

        const refused = yield* rejected(() => unique.obliterate())
        assert.strictEqual(refused?._tag, "QueueError")
        assert.include(refused?.message, "1 job(s) of queue")
        for (const lock of rest) assert.deepStrictEqual(yield* holdersOf(prefix, lock.digest), [lock.jid])
        assert.strictEqual(yield* Effect.promise(() => queue.count()), 3, "nothing removed")

        assert.strictEqual(yield* Effect.promise(() => unique.obliterate({ force: true })), 3)
        for (const lock of [...rest, { digest: delayed.digest }]) assert.deepStrictEqual(yield* holdersOf(prefix, lock.digest), [])
        assert.deepStrictEqual(yield* holdersOf(prefix, runLock), [first.jid], "the running job keeps its run lock")
        release()
        assert.isTrue(yield* Bull.until(Effect.map(holdersOf(prefix, runLock), (jids) => jids.length === 0)), "at its end")
        for (const n of [1, 2, 3, 4]) assert.strictEqual((yield* Effect.promise(() => unique.add("Work", { n })))._tag, "Enqueued")
        const bad = yield* rejected(() => unique.obliterate({ count: 0 }))
        assert.include(bad?.message, "opts.count: expected a whole number")
      }), { timeout: 120_000 })
  })
})

describe("unique-jobs reap --cluster --bullmq-queue: BullMQ on the locks' cluster", () => {
  it.live("a prefix with no {hashtag} is refused before any call, naming what to pass; with BullMQ's {bull} the drained jobs' locks are freed", () =>
    Effect.gen(function*() {
      const cluster = yield* RedisCluster.start({ masters: 1, replicas: 0 })
      const nodes = cluster.startupNodes.map((n) => `${n.host}:${n.port}`)
      const connection = yield* Effect.acquireRelease(
        Effect.sync(() => new IOCluster([...cluster.startupNodes], { redisOptions: { maxRetriesPerRequest: null } })),
        (client) => Effect.sync(() => client.disconnect())
      )
      const queue = yield* Effect.acquireRelease(
        Effect.sync(() => new BullQueue(Bull.uniqueName("cq"), { connection, prefix: "{bull}" })),
        (q) => Effect.promise(() => q.close())
      )
      const prefix = RedisTest.uniquePrefix("cluster-reap")
      const unique = yield* Effect.acquireRelease(
        Effect.sync(() => UniqueQueue.make<Data>(queue, { lock: "until_executed", lockPrefix: prefix, redis: { nodes }, defaults: {} })),
        (u) => Effect.promise(() => u.close())
      )
      yield* Effect.forEach([1, 2, 3], (n) => added(unique, n), { discard: true })
      yield* Effect.promise(() => queue.drain())
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
      const where = ["--cluster", nodes.join(","), "--prefix", prefix, "--bullmq-queue", queue.name, "--grace", "20ms"]
      const untagged = yield* cli("reap", ...where, "--json")
      assert.include(untagged.error ?? "", `on a Redis Cluster: BullMQ there needs a {hashtag} in its prefix`)
      assert.include(untagged.error ?? "", `--bullmq-prefix "{bull}"`)
      const reaped = yield* cli("reap", ...where, "--bullmq-prefix", "{bull}", "--json")
      assert.isUndefined(reaped.error, reaped.error)
      assert.strictEqual((JSON.parse(reaped.answer ?? "") as { orphans: number }).orphans, 3)
      assert.strictEqual((yield* Effect.promise(() => unique.add("Work", { n: 1 })))._tag, "Enqueued")
    }), { timeout: 180_000 })
})
