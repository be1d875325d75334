/**
 * Issue 47, observation 2, at size on real processes (slow tier): adds at concurrency 200 through a `UniqueQueue`
 * (until_and_while_executing) to a BullMQ Worker in a process of its own (concurrency 200), the locks on a Redis of
 * their own; `CLIENT PAUSE 2000 ALL` on the lock Redis at a third of the adds, then `CLIENT KILL` of every client of
 * the library (the producer's store and the worker's) at two thirds: lock steps caught in batches, their answers
 * lost. Before the fix, run locks of completed jobs stayed held for their lease (their release failed with "the call
 * may have run" and was dropped), and a job of such a digest added next completed without running.
 *
 * Every perform is recorded on the queue's Redis by the worker process. Asserted: every job added ends, none failed,
 * 0 completed unrun; no run lock is left once the jobs have ended (the lease is 30 s, so none ended by its lease); 0
 * performs of one digest at once; and a second job of every digest, added once the first ended, runs. Counts only;
 * no timing is asserted.
 */
import { assert, describe, layer } from "@effect/vitest"
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as References from "effect/References"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as Bull from "./support/bullmq.js"
import * as RedisTest from "./support/redis.js"
import type { Data } from "./support/uniquequeue.js"

const adds = 2_400
const concurrency = 200

interface Performed {
  readonly jid: string
  readonly n: number
  readonly start: number
  readonly end: number
}

/** The worker process, ready; killed with the scope if it is still up. */
const workerProcess = (queueUrl: string, lockUrl: string, name: string, lockPrefix: string) =>
  Effect.gen(function*() {
    const child = spawn(process.execPath, [
      "--import",
      "tsx",
      fileURLToPath(new URL("./support/release-faults-worker.ts", import.meta.url)),
      queueUrl,
      lockUrl,
      name,
      lockPrefix,
      String(concurrency)
    ], { stdio: ["ignore", "pipe", "ignore"] })
    yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
    yield* Effect.promise(() =>
      new Promise<void>((resolve, reject) => {
        let output = ""
        child.stdout.on("data", (chunk) => {
          output += String(chunk)
          if (output.includes("READY\n")) resolve()
        })
        child.once("exit", (code) => reject(new Error(`the worker process exited (${code}) before it was ready`)))
      })
    )
    return child
  })

/** Adds `{ n }` for every n, `concurrency` at a time; `at(i)` runs before the i-th add. Answers the jids Enqueued. */
const addAll = (
  unique: UniqueQueue.UniqueQueue<Data>,
  ns: ReadonlyArray<number>,
  at: (i: number) => void = () => undefined
) =>
  Effect.promise(async () => {
    const enqueued: Array<string> = []
    let next = 0
    const one = async () => {
      for (let i = next++; i < ns.length; i = next++) {
        at(i)
        const outcome = await unique.add("Work", { n: ns[i]! }, { attempts: 3 }).catch(() => undefined)
        if (outcome?._tag === "Enqueued") enqueued.push(outcome.job.jid)
      }
    }
    await Promise.all(Array.from({ length: concurrency }, one))
    return enqueued
  })

describe("a pause, then a connection kill, inside batched lock steps (issue 47, observation 2)", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect(`${adds} adds at concurrency ${concurrency}, a worker process: 0 completed unrun, no run lock left once the jobs ended, 0 overlaps`, () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const locks = yield* RedisServer.start
        const admin = yield* Effect.acquireRelease(
          Effect.sync(() => {
            const client = new IORedis(locks.url, { maxRetriesPerRequest: null })
            client.on("error", () => {})
            return client
          }),
          (client) => Effect.sync(() => client.disconnect())
        )
        const name = Bull.uniqueName("pausekill")
        const lockPrefix = RedisTest.uniquePrefix("pausekill")
        const queue = yield* Bull.queue(name)
        const unique = yield* Effect.acquireRelease(
          Effect.sync(() =>
            UniqueQueue.make<Data>(queue, {
              lock: "until_and_while_executing",
              lockLease: "30 seconds",
              lockPrefix,
              redis: { url: locks.url },
              defaults: {},
              history: false
            })
          ),
          (u) => Effect.promise(() => u.close({ timeout: 10_000 }).catch(() => undefined))
        )
        yield* workerProcess(source.url, locks.url, name, lockPrefix)
        const ended = (jids: number) =>
          Bull.until(
            Effect.promise(async () => {
              const counts = await queue.getJobCounts("completed", "failed")
              return (counts.completed ?? 0) + (counts.failed ?? 0) >= jids
            }),
            240_000
          )
        const performed = Effect.promise(async () =>
          (await raw.lrange(`${name}:performed`, 0, -1)).map((line) => JSON.parse(line) as Performed)
        )
        const runLocks = Effect.promise(() => admin.keys(`${lockPrefix}:*:RUN:LOCKED`))

        // The faults go to the lock Redis from a connection of the test's own, which CLIENT KILL skips.
        const faults: Array<Promise<unknown>> = []
        const first = yield* addAll(unique, Array.from({ length: adds }, (_, n) => n), (i) => {
          if (i === Math.floor(adds / 3)) faults.push(admin.call("CLIENT", "PAUSE", "2000", "ALL"))
          if (i === Math.floor((2 * adds) / 3)) faults.push(admin.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"))
        })
        const killed = Number(yield* Effect.promise(() => Promise.all(faults).then((answers) => answers[1])))
        assert.isAtLeast(killed, 2, "the kill closed the producer's and the worker's connections")
        assert.isAbove(first.length, adds / 3, "most adds were enqueued")
        assert.isTrue(yield* ended(first.length), "every job ended")
        // A job ends only once its run lock is known gone: none is left, though a lease would keep one for 30 s.
        const left = (yield* runLocks).length
        const failed = yield* Effect.promise(() => queue.getFailed(0, -1))
        const records = yield* performed
        const ran = new Set(records.map((record) => record.jid))

        // A second job of every digest, added once the first ended: each runs (a digest whose run lock was left
        // held would turn it away as a duplicate, and BullMQ would complete it unrun).
        const ns = [...new Set(records.map((record) => record.n))]
        const second = yield* addAll(unique, ns)
        assert.strictEqual(second.length, ns.length, "each digest's second job was enqueued")
        assert.isTrue(yield* ended(first.length + second.length), "every second job ended")
        const all = yield* performed
        const secondRan = new Set(all.map((record) => record.jid))

        // No two performs of one digest at once.
        const byDigest = new Map<number, Array<Performed>>()
        for (const record of all) byDigest.set(record.n, [...(byDigest.get(record.n) ?? []), record])
        let overlaps = 0
        for (const runs of byDigest.values()) {
          const sorted = runs.sort((a, b) => a.start - b.start)
          for (let i = 1; i < sorted.length; i++) if (sorted[i]!.start < sorted[i - 1]!.end) overlaps++
        }
        assert.deepStrictEqual(
          {
            runLocksLeftOnceEnded: left,
            failed: failed.map((job) => `${job.id}: ${job.failedReason}`).slice(0, 5),
            completedUnrun: first.filter((jid) => !ran.has(jid)).length,
            performedTwice: records.length - ran.size,
            secondJobsCompletedUnrun: second.filter((jid) => !secondRan.has(jid)).length,
            runLocksLeftAtTheEnd: (yield* runLocks).length,
            overlaps
          },
          {
            runLocksLeftOnceEnded: 0,
            failed: [],
            completedUnrun: 0,
            performedTwice: 0,
            secondJobsCompletedUnrun: 0,
            runLocksLeftAtTheEnd: 0,
            overlaps: 0
          }
        )
      }).pipe(Effect.provideService(References.MinimumLogLevel, "None")), 300_000)
  })
})
