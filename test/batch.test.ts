/**
 * Lock steps batched per event-loop turn (issue 39): the steps one process asks for in one turn go to Redis as one
 * batch.lua call (after a first step that found nothing in flight and went alone), and each is answered as if it had
 * gone alone: the same answers as the same steps one after another, a refused step (a conflict, an argument out of
 * range) and a failed one (a wrong-typed key) beside steps that succeed, on both faces (the Effect calls and the
 * promise calls of the hot path), and when Redis lost the scripts. Counted by Redis (INFO commandstats).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Direct from "../src/store/Direct.js"
import * as Layout from "../src/store/Layout.js"
import * as Redis from "../src/Redis.js"
import { flushAt } from "../src/store/IORedis.js"
import { comparable, privateStore, settledExit } from "./support/batch.js"
import { scriptCallsOn } from "./support/foundation.js"

const request = (jid: string, over: Partial<Redis.HolderRequest> = {}): Redis.HolderRequest => ({
  jid,
  limit: 1,
  ttlMs: 60_000,
  leaseMs: 0,
  info: "",
  fenced: false,
  ...over
})

/** One step of a job, on the store's Effect calls and on its promise calls. */
interface Step {
  readonly effect: (store: Redis.Store, prefix: string) => Effect.Effect<unknown, Redis.RedisError>
  readonly promise: (direct: Direct.Direct, prefix: string) => Promise<unknown>
}
const lockStep = (name: string, r: Redis.HolderRequest): Step => ({
  effect: (store, prefix) => store.lock({ prefix, name: `${prefix}:${name}` }, r),
  promise: (direct, prefix) => direct.lock({ prefix, name: `${prefix}:${name}` }, r)
})
const unlockStep = (name: string, jid: string): Step => ({
  effect: (store, prefix) => store.unlock({ prefix, name: `${prefix}:${name}` }, jid, 0),
  promise: (direct, prefix) => direct.unlock({ prefix, name: `${prefix}:${name}` }, jid, 0)
})
const handoffStep = (from: string, jid: string): Step => ({
  effect: (store, prefix) =>
    store.handoff({ prefix, name: `${prefix}:${from}` }, { prefix, name: `${prefix}:${from}:RUN` }, request(jid, { ttlMs: 0, leaseMs: 5_000 }), {
      keepOnConflict: false
    }),
  // The promise calls are lock and unlock only (the hot path hands off on the Effect path).
  promise: () => Promise.resolve("no handoff on the promise calls")
})

// A job's steps, in the order they are asked: taken, refused by a holder, failed on a wrong-typed key, refused for an
// argument out of range, released, missed, run locks fenced, a handoff, and more taken after the failures.
const steps: ReadonlyArray<Step> = [
  lockStep("free-1", request("j1")),
  lockStep("held", request("j2")),
  lockStep("wrong", request("j3")),
  lockStep("free-2:RUN", request("j4", { ttlMs: 0, leaseMs: 5_000, fenced: true })),
  lockStep("free-3", request("j5", { limit: 0 })),
  unlockStep("free-1", "j1"),
  unlockStep("wrong", "j3"),
  unlockStep("never", "j6"),
  handoffStep("handed", "j7"),
  lockStep("free-2:RUN", request("j8", { ttlMs: 0, leaseMs: 5_000, fenced: true, limit: 2 })),
  lockStep("held", request("other")),
  lockStep("free-4", request("j9"))
]



describe("lock steps batched per event-loop turn", () => {
  it.effect("a turn's steps go as one call after the first, each answered as if alone: refused, failed and taken side by side", () =>
    Effect.gen(function*() {
      const { probe, store } = yield* privateStore()
      const direct = Direct.directOf(store)!
      // Each run on a prefix of its own, set up alike: "held" held by "other", "wrong" a string, "handed" queued.
      let n = 0
      const setUp = Effect.gen(function*() {
        const prefix = `batch-${++n}`
        yield* store.lock({ prefix, name: `${prefix}:held` }, request("other"))
        yield* store.lock({ prefix, name: `${prefix}:handed` }, request("j7"))
        yield* Effect.promise(() => probe.set(Layout.standalone.keysOf({ prefix, name: `${prefix}:wrong` }).locked, "x"))
        return prefix
      })
      const calls = () => Effect.promise(() => scriptCallsOn(probe))

      // Alone: one after another.
      const alonePrefix = yield* setUp
      const before = yield* calls()
      const alone: Array<unknown> = []
      for (const step of steps) alone.push(comparable(yield* Effect.exit(step.effect(store, alonePrefix))))
      assert.strictEqual((yield* calls()) - before, steps.length)
      // What each answers alone: refused by a holder (1), a wrong-typed key (2, 6), a limit out of range (4).
      const failed = alone.flatMap((a, i) => (typeof a === "object" && a !== null && "failed" in a ? [i] : []))
      assert.deepStrictEqual(failed, [2, 4, 6], JSON.stringify(alone))
      assert.include(JSON.stringify(alone[2]), "WRONGTYPE")
      assert.include(JSON.stringify(alone[4]), "limit must be a whole number")
      assert.include(JSON.stringify(alone[1]), "Conflict")

      // In one turn, on the Effect face: the first goes alone, the rest in one batch.
      const effectPrefix = yield* setUp
      const beforeEffect = yield* calls()
      const together = yield* Effect.all(steps.map((step) => Effect.exit(step.effect(store, effectPrefix))), {
        concurrency: "unbounded"
      })
      assert.strictEqual((yield* calls()) - beforeEffect, 2, "two calls for the turn")
      assert.deepStrictEqual(together.map(comparable), alone)

      // In one turn, on the promise face (lock and unlock).
      const promisePrefix = yield* setUp
      const beforePromise = yield* calls()
      const settled = yield* Effect.promise(() => Promise.allSettled(steps.map((step) => step.promise(direct, promisePrefix))))
      assert.isAtMost((yield* calls()) - beforePromise, 2)
      // Every step answered as the Effect face's, alone (the handoff aside).
      settled.forEach((result, i) => {
        if (i === 8) return
        assert.deepStrictEqual(comparable(settledExit(result)), alone[i], `step ${i}`)
      })
    }))

  it.effect("Redis lost its scripts (SCRIPT FLUSH): the lone step and the batch go again by EVAL, each answered as alone", () =>
    Effect.gen(function*() {
      const { probe, store } = yield* privateStore()
      const prefix = "flushed"
      const names = Array.from({ length: 20 }, (_, i) => `${prefix}:d${i % 10}`)
      yield* store.lock({ prefix, name: names[0]! }, request("first"))
      yield* Effect.promise(() => probe.script("FLUSH"))
      const answers = yield* Effect.all(names.map((name, i) => store.lock({ prefix, name }, request(`j${i}`))), {
        concurrency: "unbounded"
      })
      // Each digest's first asker took it (but d0's, held by "first"), its second was refused by the first.
      answers.forEach((answer, i) => {
        const taken = i >= 1 && i < 10
        assert.strictEqual(answer._tag, taken ? "Acquired" : "Conflict", `${names[i]} for j${i}`)
        if (answer._tag === "Conflict") assert.deepStrictEqual(answer.holders, [i % 10 === 0 ? "first" : `j${i - 10}`])
      })
    }))

  it.live("a stalled Redis: each step of a turn fails at its own deadline, and nothing is left held once it resumes", () =>
    Effect.gen(function*() {
      const { probe, store } = yield* privateStore({ timeout: "300 millis" })
      const prefix = "stalled"
      yield* store.lock({ prefix, name: `${prefix}:warm` }, request("w"))
      const names = Array.from({ length: 10 }, (_, i) => `${prefix}:d${i}`)
      // The server answers no client for 1 s; the steps sent meanwhile are run after, when their callers gave up.
      yield* Effect.promise(() => probe.call("CLIENT", "PAUSE", "1000", "ALL"))
      const answers = yield* Effect.all(names.map((name, i) => Effect.result(store.lock({ prefix, name }, request(`j${i}`)))), {
        concurrency: "unbounded"
      })
      for (const answer of answers) {
        assert.strictEqual(answer._tag, "Failure")
        if (answer._tag === "Failure") assert.match(answer.failure.reason, /timed out|no answer within/)
      }
      // Each late lock is undone by its compensation, sent after it on the same connection (bounded wait).
      const held = () => Effect.promise(() => probe.keys(`${prefix}:d[0-9]*`))
      for (let waited = 0; (yield* held()).length > 0 && waited < 10_000; waited += 50) yield* Effect.sleep("50 millis")
      assert.deepStrictEqual(yield* held(), [])
      assert.deepStrictEqual(yield* Effect.promise(() => probe.zrange(`${prefix}:digests`, 0, -1)), [`${prefix}:warm`])
    }))

  // Found by an outsider probe: a step that timed out while it waited was still sent when the 16th step of its shard
  // came, after its own undo, and Redis ran the lock after the unlock: held by a caller told it had failed.
  it.live("a step that timed out while it waited is never sent, even when its batch fills before the turn ends", () =>
    Effect.gen(function*() {
      const { probe, store } = yield* privateStore({ timeout: "500 millis" })
      const direct = Direct.directOf(store)!
      const prefix = "late"
      const name = (n: string) => ({ prefix, name: `${prefix}:${n}` })
      yield* Effect.promise(() => direct.lock(name("warm"), request("w")))
      // The loop is held (a busy callback) so that deadlines pass while steps wait: real time, not a race.
      const block = (ms: number) => {
        const end = Date.now() + ms
        while (Date.now() < end) {
          // busy: what a long synchronous callback of the user's does to every timer
        }
      }
      const answers = new Map<string, string>()
      const ask = (n: string) =>
        direct.lock(name(n), request(n, { ttlMs: 0 })).then(
          (result) => void answers.set(n, result._tag),
          (error: Redis.RedisError) => void answers.set(n, `failed: ${error.reason}`)
        )
      const asked: Array<Promise<void>> = []
      // Redis holds every script call until the fillers are asked (CLIENT PAUSE WRITE; UNPAUSE still runs): "first"
      // is in flight whichever phase of the loop this test starts in, so "waiting" must wait for a batch.
      yield* Effect.promise(() => probe.call("CLIENT", "PAUSE", "60000", "WRITE"))
      yield* Effect.addFinalizer(() => Effect.promise(() => probe.call("CLIENT", "UNPAUSE")).pipe(Effect.ignore))
      yield* Effect.promise(() =>
        new Promise<void>((resolve) => {
          // All in one check-phase callback (setImmediate), so that the loop's next timers phase comes before its
          // next check phase whichever phase the test runs in. "first" goes alone and stays in flight (Redis
          // paused); "waiting" asks behind it, so it waits for the turn's end (the next check phase); the loop is
          // held past both deadlines; the next timers phase runs the deadline sweep (500 ms: both time out, their
          // undos go) before the fillers (550 ms) fill the batch "waiting" is in, before the turn's end would send it.
          setImmediate(() => {
            asked.push(ask("first"))
            asked.push(ask("waiting"))
            setTimeout(() => {
              for (let i = 0; i < flushAt - 1; i++) asked.push(ask(`filler-${i}`))
              probe.call("CLIENT", "UNPAUSE").then(() => resolve(), () => resolve())
            }, 550)
            block(700)
          })
        })
      )
      yield* Effect.promise(() => Promise.all(asked))
      assert.match(answers.get("waiting")!, /^failed: .*(no answer within|timed out)/, JSON.stringify([...answers]))
      // Everything sent has run once the fillers are answered (one connection, answered in order): the step that
      // failed holds nothing, and neither does "first".
      assert.strictEqual(answers.get("filler-0"), "Acquired")
      assert.deepStrictEqual(yield* Effect.promise(() => probe.hkeys(`${prefix}:waiting:LOCKED`)), [])
      assert.deepStrictEqual(yield* Effect.promise(() => probe.hkeys(`${prefix}:first:LOCKED`)), [])
    }))
})
