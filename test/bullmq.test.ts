/**
 * Real BullMQ `Worker`s on a private redis-server, through the Promise face (`UniqueQueue`): every lock type under
 * two workers with concurrency 5, each strategy, and a worker that is cut off or killed mid-job. Real time: BullMQ
 * runs on it. Tests count a fixed amount of work and wait for it to end; none judges by how long it took.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Queue, Worker } from "bullmq"
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as Job from "../src/Job.js"
import type * as LockType from "../src/LockType.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as Bull from "./support/bullmq.js"
import * as Proxy from "./support/proxy.js"
import * as RedisTest from "./support/redis.js"
import { consoleLines } from "./support/uniquequeue.js"

interface Data {
  readonly n: number
}

/** A UniqueQueue on a new BullMQ queue of the test server, with its own lock prefix; closed with the scope. */
const uniqueQueue = (options: LockOptions.Options) =>
  Effect.gen(function*() {
    const { options: redis } = yield* RedisTest.TestRedis
    const name = Bull.uniqueName("bull")
    const queue = yield* Bull.queue(name)
    const lockPrefix = RedisTest.uniquePrefix("bull")
    const unique = yield* Effect.acquireRelease(
      Effect.sync(() => UniqueQueue.make<Data>(queue, { ...options, lockPrefix, redis })),
      // Bounded: a test that fails while a perform waits on a gate must end, not wait for the gate forever.
      (u) => Effect.promise(() => u.close({ timeout: "5 seconds" }))
    )
    return { name, queue, unique, lockPrefix }
  })

const settled = (queue: Queue) =>
  Effect.promise(async () => {
    const counts = await queue.getJobCounts("waiting", "active", "delayed", "prioritized", "waiting-children")
    return Object.values(counts).every((n) => n === 0)
  })

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Counts of runs per argument list, and the most runs of one list at a time. */
const tracker = () => {
  const running = new Map<number, number>()
  const runs = new Map<number, number>()
  let overlap = 0
  return {
    enter: (n: number) => {
      const now = (running.get(n) ?? 0) + 1
      running.set(n, now)
      overlap = Math.max(overlap, now)
      runs.set(n, (runs.get(n) ?? 0) + 1)
    },
    leave: (n: number) => running.set(n, (running.get(n) ?? 1) - 1),
    get executed() {
      let total = 0
      for (const count of runs.values()) total += count
      return total
    },
    get maxOverlap() {
      return overlap
    }
  }
}

type Options = LockOptions.Options

const lockTypes: ReadonlyArray<{ readonly lock: LockType.LockType; readonly options: Partial<Options> }> = [
  { lock: "until_executing", options: {} },
  { lock: "until_executed", options: {} },
  { lock: "until_expired", options: { lockTtl: "1 hour" } },
  { lock: "while_executing", options: {} },
  { lock: "while_executing_reject", options: {} },
  { lock: "until_and_while_executing", options: {} }
]

const exclusive = new Set<LockType.LockType>(["while_executing", "while_executing_reject", "until_and_while_executing"])

describe("BullMQ", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    for (const { lock, options } of lockTypes) {
      it.effect(`${lock}: 1,000 jobs (100 argument lists × 10, in bursts), two workers × 5: the type's promise holds`, () =>
        Effect.gen(function*() {
          const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock, ...options } as Options)
          const track = tracker()
          let turnedAway = 0
          const fn = unique.processor(async (job) => {
            track.enter(job.data.n)
            await sleep(15)
            track.leave(job.data.n)
            return "done"
          })
          for (let i = 0; i < 2; i++) {
            const w = yield* Bull.worker(name, fn, { concurrency: 5 })
            w.on("completed", (_, result) => {
              if (result === undefined) turnedAway++
            })
          }
          const tags: Record<string, number> = {}
          for (let burst = 0; burst < 10; burst++) {
            const outcomes = yield* Effect.promise(() =>
              Promise.all(Array.from({ length: 100 }, (_, n) => unique.add("Work", { n })))
            )
            for (const o of outcomes) tags[o._tag] = (tags[o._tag] ?? 0) + 1
          }
          const enqueued = tags.Enqueued ?? 0
          assert.isTrue(yield* Bull.until(settled(queue), 120_000), "every job ended")
          const counts = yield* Effect.promise(() => queue.getJobCounts("completed", "failed"))
          assert.strictEqual(counts.failed, 0, "no job failed")
          assert.strictEqual(counts.completed, enqueued, "every enqueued job completed once")
          assert.strictEqual(track.executed + turnedAway, enqueued, "each ran or was turned away as a duplicate")
          assert.strictEqual((tags.Enqueued ?? 0) + (tags.Skipped ?? 0), 1000, JSON.stringify(tags))
          switch (lock) {
            case "until_expired":
              assert.strictEqual(enqueued, 100, "one job per argument list for the TTL")
              assert.strictEqual(track.executed, 100)
              break
            case "until_executing":
            case "until_executed":
              assert.isAtLeast(enqueued, 100)
              assert.strictEqual(track.executed, enqueued, "no run lock: every enqueued job runs")
              break
            case "while_executing":
            case "while_executing_reject":
              assert.strictEqual(enqueued, 1000, "no queue lock: every push is enqueued")
              break
            case "until_and_while_executing":
              assert.isAtLeast(enqueued, 100)
              break
          }
          if (exclusive.has(lock)) assert.strictEqual(track.maxOverlap, 1, "no two runs of one digest at once")
          if (lock === "while_executing_reject") {
            const rejected = yield* Effect.promise(() => countDead(queue))
            assert.strictEqual(rejected, turnedAway, "every turned-away duplicate is in the dead-letter queue")
          }
          assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix), [], "no lock left without a TTL")
        }))
    }
  })
})

const deadLetters = async (queue: Queue): Promise<ReadonlyArray<{ readonly id: string; readonly letter: BullMQ.DeadLetter }>> => {
  const dead = new Queue(`${queue.name}-dead`, queue.opts)
  try {
    const jobs = await dead.getJobs(["waiting"])
    return jobs.map((job) => ({ id: job.id ?? "", letter: job.data as BullMQ.DeadLetter }))
  } finally {
    await dead.close()
  }
}

const countDead = async (queue: Queue): Promise<number> => (await deadLetters(queue)).length

/** A gate a perform waits on, opened by the test. */
const gate = () => {
  let open: () => void = () => {}
  const opened = new Promise<void>((resolve) => {
    open = resolve
  })
  return { opened, open: () => open() }
}

const stateOf = (queue: Queue, jid: string) => Effect.promise(() => queue.getJobState(jid))

/** Two workers' worth of slots on `name`; the first run is held until `hold.open()`, every run is listed. */
const firstHeld = (name: string, unique: UniqueQueue.UniqueQueue<Data>) =>
  Effect.gen(function*() {
    const hold = gate()
    const started = gate()
    const runs: Array<string> = []
    yield* Bull.worker(name, unique.processor(async (job) => {
      runs.push(job.id ?? "")
      if (runs.length === 1) {
        started.open()
        await hold.opened
      }
      return "done"
    }), { concurrency: 2 })
    const first = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
    yield* Effect.promise(() => started.opened)
    return { first, hold, runs }
  })

describe("BullMQ strategies", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("replace: the delayed duplicate is removed, the new job runs, the old never does", () =>
      Effect.gen(function*() {
        const { name, queue, unique } = yield* uniqueQueue({ lock: "until_executed", onConflict: { client: "replace" } })
        const first = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { delay: 60_000 }))
        assert.strictEqual(first._tag, "Enqueued")
        const second = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        assert.strictEqual(second._tag, "Replaced")
        const firstJid = first.job.jid
        assert.deepStrictEqual(second._tag === "Replaced" ? second.replaced : [], [firstJid])
        assert.strictEqual(yield* stateOf(queue, firstJid), "unknown", "the delayed duplicate is gone")
        const ran: Array<string> = []
        yield* Bull.worker(name, unique.processor(async (job) => {
          ran.push(job.id ?? "")
        }))
        assert.isTrue(yield* Bull.until(settled(queue)))
        assert.deepStrictEqual(ran, [second.job.jid])
      }))

    it.effect("reject: the duplicate lands in the dead-letter queue with its reason", () =>
      Effect.gen(function*() {
        const { queue, unique } = yield* uniqueQueue({ lock: "until_executed", onConflict: { client: "reject" } })
        const first = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        const second = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        assert.strictEqual(first._tag, "Enqueued")
        assert.strictEqual(second._tag, "Rejected")
        const letters = yield* Effect.promise(() => deadLetters(queue))
        assert.deepStrictEqual(letters.map((l) => l.id), [second.job.jid])
        assert.include(letters[0]!.letter.reason, first.job.jid, "the reason names the holder")
        assert.deepStrictEqual(letters[0]!.letter.job.args, [{ n: 1 }])
        assert.strictEqual(yield* stateOf(queue, second.job.jid), "unknown", "never pushed")
      }))

    it.effect("reschedule: the running duplicate is moved to delayed and runs later, once", () =>
      Effect.gen(function*() {
        const { name, queue, unique } = yield* uniqueQueue({
          lock: "while_executing",
          onConflict: { server: "reschedule" },
          rescheduleDelay: 200
        })
        const { first, hold, runs } = yield* firstHeld(name, unique)
        const second = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        assert.isTrue(yield* Bull.until(Effect.map(stateOf(queue, second.job.jid), (s) => s === "delayed")))
        assert.deepStrictEqual(runs, [first.job.jid], "the duplicate did not run beside the first")
        hold.open()
        assert.isTrue(yield* Bull.until(Effect.map(stateOf(queue, second.job.jid), (s) => s === "completed")))
        assert.deepStrictEqual(runs, [first.job.jid, second.job.jid])
        const done = yield* Effect.promise(() => queue.getJob(second.job.jid))
        assert.strictEqual(done?.returnvalue, "done")
        // BullMQ counts the completed attempt; a move to delayed skips the count.
        assert.strictEqual(done?.attemptsMade, 1, "a reschedule is not an attempt")
      }))

    it.effect("raise: the running duplicate fails its attempt and BullMQ retries it, once the first has finished", () =>
      Effect.gen(function*() {
        const { name, queue, unique } = yield* uniqueQueue({ lock: "while_executing", onConflict: { server: "raise" } })
        const { first, hold, runs } = yield* firstHeld(name, unique)
        const second = yield* Effect.promise(() =>
          unique.add("Work", { n: 1 }, { attempts: 20, backoff: { type: "fixed", delay: 100 } })
        )
        const retried = Effect.promise(async () => ((await queue.getJob(second.job.jid))?.attemptsMade ?? 0) >= 1)
        assert.isTrue(yield* Bull.until(retried))
        const failed = yield* Effect.promise(() => queue.getJob(second.job.jid))
        assert.include(failed?.failedReason ?? "", "cannot run while")
        hold.open()
        assert.isTrue(yield* Bull.until(Effect.map(stateOf(queue, second.job.jid), (s) => s === "completed")))
        assert.deepStrictEqual(runs, [first.job.jid, second.job.jid], "the duplicate ran once, after the first")
      }))
  })
})

describe("BullMQ workers that fail", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("a job that fails its last attempt is dead: its until_executed lock goes, the next add is Enqueued", () =>
      Effect.gen(function*() {
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
        const attempts: Array<number> = []
        yield* Bull.worker(name, unique.processor(async (job) => {
          attempts.push(job.attemptsMade)
          throw new Error("always fails")
        }))
        const first = yield* Effect.promise(() => unique.add("Work", { n: 3 }, { attempts: 2 }))
        assert.strictEqual(first._tag, "Enqueued")
        assert.isTrue(yield* Bull.until(Effect.map(stateOf(queue, first.job.jid), (s) => s === "failed")))
        assert.deepStrictEqual(attempts, [0, 1], "BullMQ retried it once, under its jid")
        // After the last attempt the lock is gone (a lock that stayed would have no TTL: until_executed sets none).
        assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix), [])
        const again = yield* Effect.promise(() => unique.add("Work", { n: 3 }))
        assert.strictEqual(again._tag, "Enqueued")
      }))

    it.effect("a job BullMQ will not retry although attempts remain (maxStartedAttempts, a backoff of -1) is dead too", () =>
      Effect.gen(function*() {
        for (
          const workerOptions of [
            { maxStartedAttempts: 1 },
            { settings: { backoffStrategy: () => -1 } }
          ]
        ) {
          const { name, queue, unique, lockPrefix } = yield* uniqueQueue({ lock: "until_executed" })
          yield* Bull.worker(name, unique.processor(async () => {
            throw new Error("always fails")
          }), workerOptions)
          const first = yield* Effect.promise(() =>
            unique.add("Work", { n: 4 }, { attempts: 5, backoff: { type: "custom" } })
          )
          assert.strictEqual(first._tag, "Enqueued")
          assert.isTrue(yield* Bull.until(Effect.map(stateOf(queue, first.job.jid), (s) => s === "failed")))
          // BullMQ failed it for good after one attempt: its lock (no TTL) must go with it.
          assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(lockPrefix), [], JSON.stringify(Object.keys(workerOptions)))
          const again = yield* Effect.promise(() => unique.add("Work", { n: 4 }))
          assert.strictEqual(again._tag, "Enqueued")
        }
      }))

    // Both cut a worker off one Redis (a TCP proxy in front of it; a child process given its url): one Redis only.
    it.effect.skipIf(RedisTest.clusterMode)("a stalled job redelivered while its first copy runs waits for it: never two runs at once", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const { name, queue, unique } = yield* uniqueQueue({
          lock: "while_executing",
          lockLease: 2000
        })
        const proxy = yield* Proxy.start(source.url)
        const hold = gate()
        const started = gate()
        const track = tracker()
        const runs: Array<string> = []
        const fn = unique.processor(async (job) => {
          runs.push(job.id ?? "")
          track.enter(job.data.n)
          if (runs.length === 1) started.open()
          if (runs.length === 1) await hold.opened
          track.leave(job.data.n)
          return "done"
        })
        // Worker A reaches BullMQ through the proxy; cut, its BullMQ lock lapses and BullMQ redelivers the job to B.
        // A's run lock stays live: its lease is kept on the lock store's own connection.
        const proxied = new URL(proxy.url)
        yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const w = new Worker(name, fn, {
              connection: { host: proxied.hostname, port: Number(proxied.port), maxRetriesPerRequest: null },
              lockDuration: 1000,
              stalledInterval: 300
            })
            w.on("error", () => {})
            await w.waitUntilReady()
            return w
          }),
          (w) => Effect.sync(() => void w.close(true))
        )
        const job = yield* Effect.promise(() => unique.add("Work", { n: 7 }))
        yield* Effect.promise(() => started.opened)
        yield* proxy.cut
        let redelivered = false
        const b = yield* Bull.worker(name, fn, { lockDuration: 1000, stalledInterval: 300 })
        b.on("active", () => {
          redelivered = true
        })
        assert.isTrue(yield* Bull.until(Effect.sync(() => redelivered)), "BullMQ redelivered the job to B")
        // The copy meets its first copy's run lock: it is put off, again and again, while the first runs.
        assert.isTrue(yield* Bull.until(Effect.map(stateOf(queue, job.job.jid), (s) => s === "delayed")))
        assert.deepStrictEqual(runs, [job.job.jid], "the copy did not run beside its first copy")
        hold.open()
        assert.isTrue(yield* Bull.until(Effect.map(stateOf(queue, job.job.jid), (s) => s === "completed")))
        assert.deepStrictEqual(runs, [job.job.jid, job.job.jid], "it ran again once the first copy had finished")
        assert.strictEqual(track.maxOverlap, 1)
      }))

    it.effect.skipIf(RedisTest.clusterMode)("a worker killed mid-job: its run lock ends within one lease, and the job completes on the other", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const leaseMs = 2000
        const { name, queue, unique, lockPrefix } = yield* uniqueQueue({
          lock: "while_executing",
          lockLease: leaseMs
        })
        const child = spawn(process.execPath, [
          "--import",
          "tsx",
          fileURLToPath(new URL("./support/bullmq-worker-process.ts", import.meta.url)),
          source.url,
          name,
          lockPrefix,
          String(leaseMs),
          "1000"
        ], { stdio: ["ignore", "pipe", "inherit"] })
        yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
        let output = ""
        child.stdout.on("data", (chunk) => {
          output += String(chunk)
        })
        const job = yield* Effect.promise(() => unique.add("Work", { n: 9 }))
        assert.isTrue(yield* Bull.until(Effect.sync(() => output.includes(`STARTED ${job.job.jid}`))))
        child.kill("SIGKILL")
        yield* Effect.promise(() => new Promise((resolve) => child.once("exit", resolve)))
        // Judged by what Redis holds, not by a stopwatch: the dead worker's hold ends at its stored lease, at most
        // one lease after the kill (its last renewal came before it).
        const [seconds, micros] = yield* Effect.promise(() => raw.time())
        const killedAt = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
        const holders = yield* Effect.promise(() => raw.hgetall(RedisTest.keysOf(lockPrefix, `${job.digest}:RUN`).locked))
        const leases = Object.entries(holders).map(([jid, entry]) => Redis.parseHolder(jid, entry).leaseUntil ?? Infinity)
        assert.strictEqual(leases.length, 1, JSON.stringify(holders))
        assert.isAtMost(leases[0]! - killedAt, leaseMs, "the hold ends within one lease of the kill")
        const ran: Array<string> = []
        yield* Bull.worker(name, unique.processor(async (job) => {
          ran.push(job.id ?? "")
          return "done"
        }), { lockDuration: 1000, stalledInterval: 300 })
        assert.isTrue(yield* Bull.until(Effect.map(stateOf(queue, job.job.jid), (s) => s === "completed")))
        assert.deepStrictEqual(ran, [job.job.jid], "the job completed on the other worker, once")
      }))
  })
})

describe("UniqueQueue", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    // A `{ url }` connection is one Redis; a Cluster connection's case is test/cluster.bullmq.test.ts.
    it.effect.skipIf(RedisTest.clusterMode)("keeps its locks on the queue's own Redis, a `{ url }` connection included", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const queue = yield* Effect.acquireRelease(
          Effect.sync(() => new Queue(Bull.uniqueName("url"), { connection: { url: source.url } })),
          (q) => Effect.promise(() => q.close())
        )
        const lockPrefix = RedisTest.uniquePrefix("url")
        const unique = yield* Effect.acquireRelease(
          Effect.sync(() => UniqueQueue.make(queue, { lock: "until_executed", lockPrefix })),
          (u) => Effect.promise(() => u.close())
        )
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }))
        assert.strictEqual(added._tag, "Enqueued")
        assert.deepStrictEqual(yield* Effect.promise(() => raw.keys(`${added.digest}:*`)), [`${added.digest}:LOCKED`])
      }))

    it.effect("options for one job name are checked with the name: the error names jobs.<name>.<field>", () =>
      Effect.gen(function*() {
        const queue = yield* Bull.queue(Bull.uniqueName("opts"))
        const error = (() => {
          try {
            UniqueQueue.make(queue, { lock: "until_executed", jobs: { rebuild: { lock: "while_executing", lockTtl: 5 } } })
          } catch (e) {
            return e
          }
        })()
        assert.instanceOf(error, LockOptions.InvalidLockOptions)
        assert.strictEqual((error as LockOptions.InvalidLockOptions).field, "jobs.rebuild.lockTtl")
      }))

    it.effect("jobs of another name follow their own lock type", () =>
      Effect.gen(function*() {
        const { unique } = yield* uniqueQueue({
          lock: "until_executed",
          jobs: { ping: { lock: "while_executing" } }
        } as Options)
        const pings = yield* Effect.promise(() => Promise.all([unique.add("ping", { n: 1 }), unique.add("ping", { n: 1 })]))
        const works = yield* Effect.promise(() => Promise.all([unique.add("Work", { n: 1 }), unique.add("Work", { n: 1 })]))
        assert.deepStrictEqual(pings.map((o) => o._tag), ["Enqueued", "Enqueued"], "while_executing: no queue lock")
        assert.deepStrictEqual(works.map((o) => o._tag).sort(), ["Enqueued", "Skipped"])
      }))
  })
})

describe("BullMQ adapter options", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("a processor of while_executing under log says once, at its start, that it drops running duplicates", () =>
      Effect.gen(function*() {
        const { options: where } = yield* RedisTest.TestRedis
        const warnings: Array<string> = []
        const capture = Logger.layer([
          Logger.make(({ logLevel, message }) => {
            if (logLevel === "Warn") warnings.push(String(message))
          })
        ])
        const cases: ReadonlyArray<[LockOptions.Options, number]> = [
          [{ lock: "while_executing" }, 1],
          [{ lock: "while_executing", onConflict: { server: "reschedule" } }, 0],
          [{ lock: "until_executed" }, 0]
        ]
        for (const [options, expected] of cases) {
          warnings.length = 0
          const definition = LockOptions.unsafeMake(options)
          yield* BullMQ.processor({ definition }, () => Effect.void).pipe(
            Effect.provide(Redis.layerMemory),
            Effect.provide(MemoryQueue.layer()),
            Effect.provide(capture)
          )
          assert.strictEqual(warnings.length, expected, JSON.stringify(options))
          if (expected > 0) assert.include(warnings[0], "reschedule")
        }
        // UniqueQueue says it too, once per processor, for the job names it serves.
        const queue = yield* Bull.queue(Bull.uniqueName("drops"))
        const unique = UniqueQueue.make(queue, { lock: "while_executing", redis: where, defaults: {} })
        yield* Effect.addFinalizer(() => Effect.promise(() => unique.close()))
        const logged = yield* consoleLines
        unique.processor(async () => "done")
        // The warning comes once the queue's runtime is built (on a cluster, after its connections): wait for it
        // (bounded), then a little more for a second one that must not come.
        const drops = () => logged.filter((line) => line.includes("drops a job that arrives")).length
        for (let waited = 0; drops() === 0 && waited < 15_000; waited += 50) {
          yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
        }
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 200)))
        assert.strictEqual(logged.filter((line) => line.includes("drops a job that arrives")).length, 1, logged.join("\n"))
      }))

    it.effect("make refuses jobOptions that cannot work with the locks and a deadLetter that is not a queue", () =>
      Effect.gen(function*() {
        const queue = yield* Bull.queue(Bull.uniqueName("opts"))
        const error = yield* Effect.flip(BullMQ.make(queue, {
          jobOptions: { deduplication: { id: "x" }, jobId: "same", delay: -5 } as never,
          deadLetter: {} as never
        }))
        assert.strictEqual(error._tag, "InvalidLockOptions")
        assert.deepStrictEqual(
          error.issues.map((issue) => issue.field).sort(),
          ["deadLetter", "jobOptions.deduplication", "jobOptions.delay", "jobOptions.jobId"]
        )
      }))

    it.effect("add refuses options under which BullMQ would not store the job under its jid; nothing is added", () =>
      Effect.gen(function*() {
        const name = Bull.uniqueName("add")
        const queue = yield* Bull.queue(name)
        const adapter = yield* BullMQ.make(queue)
        for (const opts of [{ deduplication: { id: "x" } }, { repeat: { every: 1000 } }, { delay: 1.5 }]) {
          const job = Job.make({ worker: "Work", queue: name, args: [{ n: 1 }] })
          const error = yield* Effect.flip(adapter.add(job, opts as never))
          assert.strictEqual(error._tag, "QueueError")
          assert.include(error.reason, `options.${Object.keys(opts)[0]}`)
        }
        assert.strictEqual(yield* Effect.promise(() => queue.count()), 0)
      }))

    it.effect("UniqueQueue.add ignoring opts.delay would end a delayed job's lock before it runs", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const { lockPrefix, unique } = yield* uniqueQueue({ lock: "until_and_while_executing", lockTtl: 60_000 })
        const added = yield* Effect.promise(() => unique.add("Work", { n: 1 }, { delay: 3_600_000 }))
        const ttl = yield* Effect.promise(() => raw.pttl(RedisTest.keysOf(lockPrefix, added.digest).locked))
        assert.isAbove(ttl, 3_600_000, "the TTL counts from when the job runs, an hour from now")
      }))
  })
})
