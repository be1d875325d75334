/**
 * Issue 40, must show 1, on MemoryQueue and TestClock against Redis: under any interleaving of triggers and runs,
 * debounce runs exactly once per window, never later than maxWait after its first trigger, with the last trigger's
 * arguments; "latest after the active one" never loses the last trigger and never runs two at once; a trigger after
 * a waiting job removed by hand, once that job was due, opens a window of its own.
 * Issue 47, must show 3, on real BullMQ in real time: the same promise with 1 to 4 producers (UniqueQueue instances of
 * their own) adding one digest at once: one window at a time whichever producer adds, one job of the digest that runs
 * at any time, each run due within maxWait of its window's first trigger, the last trigger's data.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as fc from "fast-check"
import * as Ref from "effect/Ref"
import * as TestClock from "effect/testing/TestClock"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as Bull from "./support/bullmq.js"
import { type DebouncedLock, debouncedWorker, onItsWay, settle, stream, tick, uniqueProducers, violations } from "./support/debounce.js"
import * as RedisTest from "./support/redis.js"
import { lockKeys } from "./support/uniquequeue.js"


describe("debounce properties", () => {
  layer(RedisTest.layer())((it) => {
    // Issue 40, must show 1: under any interleaving of triggers and runs (the virtual clock decides which runs come
    // between two triggers), one run per window, at min(last trigger + delay, first + maxWait), with the last
    // trigger's arguments, and no trigger lost: each is in exactly one window.
    it.effect("property: one run per window, never later than maxWait after its first trigger, with the last's arguments", () =>
      Effect.flatMap(Effect.context<Redis.RedisService | RedisTest.TestRedis>(), (context) =>
        Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(
            fc.constantFrom<DebouncedLock>("until_executing", "until_executed", "until_and_while_executing"),
            fc.integer({ min: 100, max: 2_000 }),
            fc.option(fc.integer({ min: 0, max: 4_000 }), { nil: undefined }),
            fc.array(fc.integer({ min: 0, max: 3_000 }), { minLength: 1, maxLength: 12 }),
            (lock, delay, extra, gaps) =>
              Effect.runPromise(
                Effect.gen(function*() {
                  const maxWait = extra === undefined ? undefined : delay + extra
                  const { queue, runs, trigger } = yield* debouncedWorker(lock, delay, maxWait)
                  // The model: windows of triggers, each ending in its run.
                  const expected: Array<{ at: number; args: Array<unknown> }> = []
                  let open: { first: number; last: number; args: number } | undefined
                  const dueOf = (w: { first: number; last: number }) =>
                    Math.min(w.last + delay, maxWait === undefined ? Infinity : w.first + maxWait)
                  let now = 0
                  for (const [n, gap] of gaps.entries()) {
                    now += gap
                    yield* TestClock.adjust(gap)
                    yield* settle(queue)
                    if (open !== undefined && dueOf(open) <= now) {
                      expected.push({ at: dueOf(open), args: [open.args] })
                      open = undefined
                    }
                    open = open === undefined ? { first: now, last: now, args: n } : { ...open, last: now, args: n }
                    const outcome = yield* trigger(n)
                    assert.include(["Enqueued", "Replaced"], outcome._tag, `trigger ${n} at ${now}`)
                  }
                  if (open !== undefined) expected.push({ at: dueOf(open), args: [open.args] })
                  yield* TestClock.adjust(delay + (maxWait ?? delay))
                  yield* settle(queue)
                  const ran = yield* Ref.get(runs)
                  assert.deepStrictEqual(ran, expected, JSON.stringify({ ran, expected }))
                }).pipe(Effect.scoped, Effect.provide(context), Effect.provide(TestClock.layer()))
              )
          ),
          { numRuns: 100 }
        )
      )), { timeout: 120_000 })
  })

  // Issue 47, observation 1, stated generally: a trigger whose job is still on its way to the queue when later triggers
  // take its place removes its job once it lands. Whatever the delay, maxWait and the later triggers' timing (within
  // its window or past it: the job may land long after it was due, a next window open): one job of the digest waits
  // (the last trigger's), each window runs once with its last trigger's arguments, and the job on its way never runs.
  layer(RedisTest.layer())((it) => {
    it.effect("property: a job still on its way when later triggers take its place never runs; one job waits, each window runs once", () =>
      Effect.flatMap(Effect.context<Redis.RedisService | RedisTest.TestRedis>(), (context) =>
        Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.constantFrom<DebouncedLock>("until_executing", "until_executed", "until_and_while_executing"),
              fc.integer({ min: 200, max: 1_000 }),
              fc.integer({ min: 0, max: 1_000 }),
              // The first later trigger comes within the window (the delay is at least 200), the others up to 450 ms
              // after the job set out: past its due time and maxWait when the delay is short.
              fc.array(fc.integer({ min: 1, max: 150 }), { minLength: 1, maxLength: 3 }),
              (lock, delay, extra, gaps) =>
                Effect.runPromise(
                  Effect.gen(function*() {
                    const maxWait = delay + extra
                    const { queue, runs, start, trigger } = yield* debouncedWorker(lock, delay, maxWait)
                    // A first window, run: its lock is gone, so the enqueue on its way takes the place anew.
                    const digest = (yield* trigger(0)).digest
                    yield* TestClock.adjust(delay + maxWait)
                    yield* settle(queue)
                    const setOut = (yield* Clock.currentTimeMillis) - start
                    const { fiber: pushing, landing } = yield* onItsWay(queue, lock, digest, { delay, maxWait }, [1])
                    const trace = JSON.stringify({ lock, delay, maxWait, gaps })
                    // The model: windows of triggers, each ending in its run; the first opened by the job on its way.
                    const expected: Array<{ at: number; args: Array<unknown> }> = []
                    const dueOf = (w: { first: number; last: number }) => Math.min(w.last + delay, w.first + maxWait)
                    let open = { first: setOut, last: setOut, args: 1 }
                    let now = setOut
                    for (const [k, gap] of gaps.entries()) {
                      now += gap
                      yield* TestClock.adjust(gap)
                      yield* settle(queue)
                      if (dueOf(open) <= now) {
                        expected.push({ at: dueOf(open), args: [open.args] })
                        open = { first: now, last: now, args: 2 + k }
                      } else {
                        open = { ...open, last: now, args: 2 + k }
                      }
                      const later = yield* trigger(2 + k)
                      assert.include(["Replaced", "Enqueued"], later._tag, trace)
                    }
                    expected.push({ at: dueOf(open), args: [open.args] })
                    yield* Deferred.succeed(landing, undefined)
                    const first = yield* Fiber.join(pushing)
                    assert.strictEqual(first._tag, "Enqueued", trace)
                    const snapshot = yield* queue.snapshot
                    const waiting = [...snapshot.ready, ...snapshot.scheduled.map((s) => s.job)].map((job) => job.args)
                    assert.deepStrictEqual(waiting, [[open.args]], `one job waits, the last trigger's: ${trace}`)
                    yield* TestClock.adjust(delay + maxWait)
                    yield* settle(queue)
                    const ran = (yield* Ref.get(runs)).slice(1)
                    assert.deepStrictEqual(ran, expected, `each window runs once; the job on its way never: ${trace}`)
                  }).pipe(Effect.scoped, Effect.provide(context), Effect.provide(TestClock.layer()))
                )
            ),
            { numRuns: 100, examples: [["until_executing", 200, 0, [42, 84, 74]]] }
          )
        )), { timeout: 120_000 })
  })

  // A waiting job removed by hand (an operator, not another producer's swap): once it would have been due, the next
  // trigger, however long after, opens a window of its own (delay after itself), not the gone job's (at once). The
  // trigger first waits a moment for a swap that may be under way (10 ms doubling): the clock is driven meanwhile.
  layer(RedisTest.layer())((it) => {
    it.effect("property: after a waiting job removed by hand and its due time, the next trigger opens a window of its own", () =>
      Effect.flatMap(Effect.context<Redis.RedisService | RedisTest.TestRedis>(), (context) =>
        Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.constantFrom<DebouncedLock>("until_executing", "until_executed", "until_and_while_executing"),
              fc.integer({ min: 100, max: 2_000 }),
              fc.option(fc.integer({ min: 0, max: 4_000 }), { nil: undefined }),
              fc.array(fc.integer({ min: 0, max: 1_500 }), { minLength: 1, maxLength: 3 }),
              fc.integer({ min: 0, max: 3_000 }),
              (lock, delay, extra, gaps, after) =>
                Effect.runPromise(
                  Effect.gen(function*() {
                    const maxWait = extra === undefined ? undefined : delay + extra
                    const { queue, runs, start, trigger } = yield* debouncedWorker(lock, delay, maxWait)
                    let last: { readonly jid: string; readonly at: number } | undefined
                    for (const [n, gap] of gaps.entries()) {
                      yield* TestClock.adjust(gap)
                      yield* settle(queue)
                      const outcome = yield* trigger(n)
                      last = { jid: outcome.job.jid, at: outcome.job.at! }
                    }
                    assert.isTrue(yield* queue.remove(last!.jid), "the waiting job is removed by hand")
                    // On to its due time, or after.
                    const now = yield* Clock.currentTimeMillis
                    yield* TestClock.adjust(Math.max(0, last!.at - now) + after)
                    yield* settle(queue)
                    const triggeredAt = yield* Clock.currentTimeMillis
                    const pending = yield* Effect.forkChild(trigger(gaps.length))
                    for (let waited = 0; (yield* Effect.sync(() => pending.pollUnsafe())) === undefined && waited < 5_000; waited += 10) {
                      yield* tick
                      yield* TestClock.adjust(10)
                    }
                    const next = yield* Fiber.join(pending)
                    const answeredAt = yield* Clock.currentTimeMillis
                    const trace = JSON.stringify({ lock, delay, maxWait, gaps, after, removedDue: last!.at - start, triggeredAt: triggeredAt - start })
                    assert.include(["Enqueued", "Replaced"], next._tag, trace)
                    assert.isAtLeast(next.job.at!, triggeredAt + delay, `delay after itself, not the gone job's window: ${trace}`)
                    assert.isAtMost(next.job.at!, answeredAt + delay, trace)
                    yield* TestClock.adjust(delay + (maxWait ?? delay))
                    yield* settle(queue)
                    const ran = yield* Ref.get(runs)
                    // The removed job never runs; the new window runs once, when due, with its trigger's arguments.
                    assert.deepStrictEqual(ran.filter((r) => r.args[0] === gaps.length - 1), [], `the removed job ran: ${trace}`)
                    assert.deepStrictEqual(ran[ran.length - 1], { at: next.job.at! - start, args: [gaps.length] }, trace)
                  }).pipe(Effect.scoped, Effect.provide(context), Effect.provide(TestClock.layer()))
                )
            ),
            { numRuns: 25 }
          )
        )), { timeout: 120_000 })
  })

  // "Latest after the active one" (BullMQ's keepLastIfActive): until_and_while_executing with replace on the client
  // and reschedule on the server. Two workers, so that the follow-up is picked up while the first still runs, meets
  // its run lock and is rescheduled: the triggers meet it waiting, starting, and rescheduled.
  layer(RedisTest.layer())((it) => {
    it.effect("property: latest after the active one: never two at once, at most one waiting, the last trigger always runs", () =>
      Effect.flatMap(Effect.context<Redis.RedisService | RedisTest.TestRedis>(), (context) =>
        Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.integer({ min: 1, max: 3_000 }),
              fc.array(fc.record({ gap: fc.integer({ min: 0, max: 1_500 }), work: fc.integer({ min: 0, max: 2_000 }) }), {
                minLength: 1,
                maxLength: 10
              }),
              (rescheduleDelay, triggers) =>
                Effect.runPromise(
                  Effect.gen(function*() {
                    const prefix = RedisTest.uniquePrefix("latest")
                    const queue = yield* MemoryQueue.make()
                    const worker = UniqueJob.unsafeMake({
                      worker: "Sync",
                      lock: "until_and_while_executing",
                      onConflict: { client: "replace", server: "reschedule" },
                      rescheduleDelay,
                      lockPrefix: prefix,
                      lockArgs: () => ["account-1"]
                    })
                    const work = new Map(triggers.map((t, n) => [n, t.work]))
                    let performing = 0
                    let most = 0
                    const performed: Array<number> = []
                    yield* queue.work((job) =>
                      worker.server(
                        job,
                        Effect.suspend(() => {
                          performing++
                          most = Math.max(most, performing)
                          const n = job.args[0] as number
                          performed.push(n)
                          return Effect.ensuring(Effect.sleep(work.get(n)!), Effect.sync(() => performing--))
                        })
                      ).pipe(Effect.provideService(JobQueue, queue)), { concurrency: 2 })
                    // Settled: every job the queue runs is inside its perform (sleeping on TestClock), none on its way
                    // in or out, and nothing due waits.
                    const steady = Effect.gen(function*() {
                      for (let i = 0; i < 5_000; i++) {
                        const now = yield* Clock.currentTimeMillis
                        const snapshot = yield* queue.snapshot
                        if (
                          snapshot.ready.length === 0 && snapshot.running.length === performing &&
                          snapshot.scheduled.every((s) => s.at > now)
                        ) return snapshot
                        yield* tick
                      }
                      return assert.fail("the queue did not settle")
                    })
                    for (const [n, { gap }] of triggers.entries()) {
                      yield* TestClock.adjust(gap)
                      yield* steady
                      const outcome = yield* Effect.provideService(worker.enqueue([n]), JobQueue, queue)
                      assert.include(["Enqueued", "Replaced"], outcome._tag, `trigger ${n}`)
                      const snapshot = yield* steady
                      assert.isAtMost(snapshot.ready.length + snapshot.scheduled.length, 1, "one waiting at most")
                    }
                    for (let i = 0; i < 200 && (performing > 0 || (yield* queue.snapshot).scheduled.length > 0); i++) {
                      yield* TestClock.adjust(1_000)
                      yield* steady
                    }
                    assert.strictEqual(performing, 0)
                    assert.strictEqual(most, 1, "never two at once")
                    assert.strictEqual(performed[performed.length - 1], triggers.length - 1, "the last trigger ran, last")
                    assert.deepStrictEqual([...performed].sort((a, b) => a - b), performed, "in trigger order")
                    assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(prefix), [])
                  }).pipe(Effect.scoped, Effect.provide(context), Effect.provide(TestClock.layer()))
                )
            ),
            { numRuns: 100 }
          )
        )), { timeout: 120_000 })
  })

  // Issue 47, must show 3: 1 to 4 producers, each a UniqueQueue of its own on the same queue and lock prefix, adding
  // one digest every few ms for 2 s, one BullMQ worker. The queue's jobs of the digest are read every 25 ms: of the
  // jobs seen waiting at once, at most one ever runs (a job superseded on its way to the queue is removed once it
  // lands, and may be seen for that moment). Times are BullMQ's own (a job's timestamp and delay, its processedOn);
  // the bound allows each trigger 1 s to reach its lock on a busy machine.
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("property: 1 to 4 producers of one digest: one window at a time, each run within maxWait of its first trigger, the last's data", () =>
      Effect.flatMap(Effect.context<RedisTest.TestRedis>(), (context) =>
        Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.integer({ min: 1, max: 4 }),
              fc.constantFrom<DebouncedLock>("until_executing", "until_and_while_executing", "until_executed"),
              fc.integer({ min: 50, max: 300 }),
              fc.integer({ min: 0, max: 700 }),
              fc.integer({ min: 2, max: 30 }),
              (producers, lock, delay, extra, everyMs) =>
                Effect.runPromise(
                  Effect.gen(function*() {
                    const maxWait = delay + extra
                    const { adds, drained, lockPrefix, queue, runs } = yield* uniqueProducers(producers, lock, delay, maxWait)
                    // The jobs of the digest seen waiting at once, every 25 ms while the producers add.
                    const seen: Array<ReadonlyArray<number>> = []
                    let adding = true
                    const sampler = (async () => {
                      while (adding) {
                        const jobs = await queue.getJobs(["delayed", "waiting", "prioritized"])
                        const ns = jobs.flatMap((job) => (job?.data.key === "one" ? [job.data.n] : []))
                        if (ns.length > 1) seen.push(ns)
                        await new Promise((resolve) => setTimeout(resolve, 25))
                      }
                    })()
                    const triggers = yield* Effect.promise(() => stream(adds, 2_000, everyMs))
                    adding = false
                    yield* Effect.promise(() => sampler)
                    assert.isTrue(yield* Bull.until(drained))
                    const ran = new Set(runs.map((run) => run.n))
                    const summary = JSON.stringify({ producers, lock, delay, maxWait, everyMs, adds: triggers.length, runs: runs.map((r) => r.n) })
                    assert.deepStrictEqual(seen.filter((ns) => ns.filter((n) => ran.has(n)).length > 1), [], `two waiting jobs ran: ${summary}`)
                    assert.strictEqual(new Set(runs.map((r) => r.n)).size, runs.length, `a job ran twice: ${summary}`)
                    const enqueued = triggers.filter((t) => t.tag === "Enqueued").length
                    assert.isAtMost(enqueued, runs.length, `each Enqueued opens a window, which ends in a run: ${summary}`)
                    assert.deepStrictEqual(violations(triggers, runs, maxWait, 1_000), [], summary)
                    assert.deepStrictEqual(yield* lockKeys(lockPrefix), [], summary)
                  }).pipe(Effect.scoped, Effect.provide(context))
                )
            ),
            { numRuns: 8 }
          )
        )), { timeout: 600_000 })
  })
})

describe("debounce properties: the window an enqueue keeps", () => {
  // However many holders of the digest carry windows, in whatever order Redis lists them, the one the replacing
  // enqueue keeps is the earliest of those it keeps: the window's first trigger bounds maxWait, never a later one.
  it("property: the window kept is the earliest among the holders kept, whatever their order; none when none keeps one", () =>
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            window: fc.option(fc.integer({ min: 0, max: 10_000_000 }), { nil: undefined }),
            due: fc.option(fc.integer({ min: 0, max: 10_000_000 }), { nil: undefined }),
            kept: fc.boolean()
          }),
          { maxLength: 6 }
        ),
        (specs) => {
          const holders: Array<Lock.WindowHolder> = specs.map((spec, i) => ({
            jid: `j${i}`,
            lockedAt: i,
            window: spec.window,
            due: spec.due
          }))
          const keep = new Set(specs.flatMap((spec, i) => spec.kept ? [`j${i}`] : []))
          const windows = specs.flatMap((spec) => spec.kept && spec.window !== undefined ? [spec.window] : [])
          const expected = windows.length === 0 ? undefined : Math.min(...windows)
          assert.strictEqual(Lock.windowOf(holders, (holder) => keep.has(holder.jid)), expected, JSON.stringify(specs))
        }
      ),
      { numRuns: 200, examples: [[[{ window: 5, due: 9, kept: true }, { window: 1, due: 9, kept: true }]]] }
    ))
})

// Issue 47: a debounced enqueue takes a holder's place (the store's swap) only as it read it. An entry written again
// since (its producer confirmed its job in the queue: a swap of itself, which moves its t on) or read wrong refuses
// the swap, and nothing is written: the job is not taken for gone. On Redis (lock.lua's swap).
describe("debounce properties: the swap takes a place only as it was read", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("property: a swap is taken exactly when it names the holder's entry as it is now; else Conflict naming it, the holder kept", () =>
      Effect.gen(function*() {
        const redis = yield* Redis.RedisService
        const request = { limit: 1, ttlMs: 0, leaseMs: 0, info: "", fenced: false }
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.nat(3), fc.constantFrom(0, 0, -1, 1, 1000), async (rewrites, off) => {
              const prefix = RedisTest.uniquePrefix("swapread")
              const key = { prefix, name: `${prefix}:d` }
              const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
              assert.strictEqual((await run(redis.lock(key, { ...request, jid: "a" })))._tag, "Acquired")
              const [read] = await run(redis.holders(key))
              // Written again since it was read: each a swap of itself, its t moved on.
              for (let i = 0; i < rewrites; i++) {
                assert.strictEqual((await run(redis.lock(key, { ...request, jid: "a", swap: [{ jid: "a" }] })))._tag, "Acquired")
              }
              // Each rewrite moves the entry's t on (by 1 ms at least): the swap names what it read, off by `off`.
              const [current] = await run(redis.holders(key))
              const named = read!.lockedAt + off
              const answer = await run(redis.lock(key, { ...request, jid: "b", swap: [{ jid: "a", lockedAt: named }] }))
              const trace = JSON.stringify({ rewrites, off, read: read!.lockedAt, current: current!.lockedAt, answer })
              if (rewrites > 0) assert.isAbove(current!.lockedAt, read!.lockedAt, trace)
              const asRead = named === current!.lockedAt
              if (asRead) assert.strictEqual(answer._tag, "Acquired", trace)
              else assert.deepStrictEqual(answer, { _tag: "Conflict", holders: ["a"] }, trace)
              assert.deepStrictEqual((await run(redis.holders(key))).map((h) => h.jid), [asRead ? "b" : "a"], trace)
            }),
            { numRuns: 40, examples: [[1, 0], [0, 0], [0, 1]] }
          )
        )
      }))
  })
})
