/**
 * `describe` of the BullMQ adapter (issue 38, the job behind a lock), on real BullMQ queues on a private
 * redis-server: each state a job can be in (waiting, prioritized, delayed with when it is due, active, paused,
 * completed, failed with its reason, gone), its attempts, times and data, data cut at the preview's size, another
 * queue's job not told, and what it costs Redis: one script call per queue, whatever the batch, no walk of a list.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as BullMQ from "../src/adapters/BullMQ.js"
import { dataCut, type JobDetails, previewBytes } from "../src/JobQueue.js"
import * as Bull from "./support/bullmq.js"
import * as RedisTest from "./support/redis.js"

const commandstats = Bull.commandstats

describe("BullMQ describe", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("answers each job's state, attempts, times and data (cut), in one script call per queue, with no list walked", () =>
      Effect.gen(function*() {
        const name = Bull.uniqueName("describe")
        const q = yield* Bull.queue(name)
        const other = yield* Bull.queue(Bull.uniqueName("describe-paused"))
        const adapter = yield* BullMQ.make([q, other])
        const describe = adapter.describe!

        // completed and failed first, by a worker taking jobs by hand; then active (held), waiting, prioritized, delayed.
        const taker = yield* Bull.manualWorker(name)
        yield* Effect.promise(() => q.add("Done", { n: 1 }, { jobId: "done-1" }))
        const done = yield* Effect.promise(() => taker.getNextJob("t1"))
        yield* Effect.promise(() => done!.moveToCompleted("ok", "t1", false))
        yield* Effect.promise(() => q.add("Fails", { n: 2 }, { jobId: "failed-1", attempts: 1 }))
        const failing = yield* Effect.promise(() => taker.getNextJob("t2"))
        yield* Effect.promise(() => failing!.moveToFailed(new Error("card declined <b>"), "t2", false))
        yield* Effect.promise(() => q.add("Runs", { n: 3 }, { jobId: "active-1" }))
        yield* Effect.promise(() => taker.getNextJob("t3"))
        const big = "x".repeat(previewBytes * 3)
        yield* Effect.promise(() => q.add("Waits", { big }, { jobId: "waiting-1" }))
        yield* Effect.promise(() => q.add("Urgent", { n: 5 }, { jobId: "prioritized-1", priority: 3 }))
        const due = Date.now() + 3_600_000
        yield* Effect.promise(() => q.add("Later", { n: 6 }, { jobId: "delayed-1", delay: 3_600_000 }))
        yield* Effect.promise(() => other.pause())
        yield* Effect.promise(() => other.add("Held", { n: 7 }, { jobId: "paused-1" }))

        const asked = [
          { jid: "waiting-1", queue: name },
          { jid: "prioritized-1", queue: name },
          { jid: "delayed-1", queue: name },
          { jid: "active-1", queue: name },
          { jid: "done-1", queue: name },
          { jid: "failed-1", queue: name },
          { jid: "never-added", queue: name },
          { jid: "paused-1", queue: other.name },
          { jid: "waiting-1", queue: "not-a-queue-of-it" }
        ]
        const answers = yield* describe(asked)
        assert.deepStrictEqual(
          answers.map((a) => a?.state),
          ["waiting", "prioritized", "delayed", "active", "completed", "failed", "gone", "paused", undefined]
        )
        const byJid = new Map(answers.filter((a): a is JobDetails => a !== undefined).map((a) => [`${a.queue}/${a.jid}`, a]))
        const waiting = byJid.get(`${name}/waiting-1`)!
        assert.strictEqual(waiting.name, "Waits")
        assert.isTrue(dataCut(waiting))
        assert.strictEqual(Buffer.byteLength(waiting.data!), previewBytes)
        assert.strictEqual(waiting.dataBytes, JSON.stringify({ big }).length)
        assert.isAbove(waiting.addedAt!, 0)
        const delayed = byJid.get(`${name}/delayed-1`)!
        assert.isAtLeast(delayed.runsAt!, due - 60_000)
        assert.isAtMost(delayed.runsAt!, due + 60_000)
        const active = byJid.get(`${name}/active-1`)!
        assert.isAbove(active.processedOn!, 0)
        assert.deepStrictEqual(JSON.parse(active.data!), { n: 3 })
        assert.isFalse(dataCut(active))
        const completed = byJid.get(`${name}/done-1`)!
        assert.isAbove(completed.finishedOn!, 0)
        assert.strictEqual(completed.attemptsMade, 1)
        const failed = byJid.get(`${name}/failed-1`)!
        assert.strictEqual(failed.failedReason, "card declined <b>")
        assert.strictEqual(failed.attemptsMade, 1)
        assert.deepStrictEqual(byJid.get(`${name}/never-added`), { jid: "never-added", queue: name, state: "gone" })

        // What a batch costs: one script call per queue asked (the first batch loaded the script), whatever its size;
        // no walk of a list (LPOS, LRANGE) and no getState.
        const { raw } = yield* RedisTest.TestRedis
        const batch = Array.from({ length: 150 }, (_, i) => ({ jid: `j${i}`, queue: name }))
          .concat(Array.from({ length: 50 }, (_, i) => ({ jid: `p${i}`, queue: other.name })))
        const before = yield* commandstats(raw)
        const many = yield* describe(batch)
        const after = yield* commandstats(raw)
        const delta = (command: string) => (after.get(command) ?? 0) - (before.get(command) ?? 0)
        assert.strictEqual(many.length, 200)
        assert.isTrue(many.every((a) => a?.state === "gone"))
        assert.strictEqual(delta("evalsha") + delta("eval"), 2, "one script call per queue")
        for (const walk of ["lpos", "lrange", "lindex", "llen", "zrank", "scan"]) {
          assert.strictEqual(delta(walk), 0, `no ${walk}`)
        }
      }))
  })
})
