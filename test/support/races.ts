/**
 * The multi-process race (test/multiprocess.test.ts at full size, test/multiprocess.race.test.ts one small race in the
 * fast tier): four Node processes, each with its own Redis connection and its own queue, hammer the same few digests
 * on one private redis-server. Every execution is recorded in Redis' own order and time (one script of TIME, INCR and
 * HLEN at perform start and end, see `worker-process.ts`); `race` then checks across processes: no two executions of a
 * digest overlap (lockLimit 1), never more than the limit at once and the limit reached, no duplicate waits in the
 * queue (until_* types), never more holders than the limit (seen from inside each perform and by a sampler in this
 * process), and nothing left in Redis afterwards. Each process performs a fixed number of executions, however long
 * that takes on a busy machine; only a process that stops having outcomes fails on time.
 */
import { assert } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as UniqueJob from "../../src/UniqueJob.js"
import * as RedisTest from "./redis.js"
import * as Workers from "./workers.js"

export const PROCESSES = 4
/** A process with no outcome for this long hangs; a slow one still has outcomes, so this is no budget for the work. */
const STALL_MS = 60_000
/** The last resort for a whole run, should a process hang where its own watchdog cannot see. */
export const RUN_CAP_MS = 900_000

export interface Scenario {
  readonly name: string
  readonly mode: "while_executing" | "until_executed" | "until_and_while_executing"
  readonly lockLimit: number
  readonly digests: number
  readonly fibers: number
  readonly concurrency: number
  /** Executions per process: each performs this many, then stops. */
  readonly target: number
}

export interface Summary {
  readonly executions: number
  readonly skipped: number
  readonly rescheduled: number
  readonly maxConcurrent: number
  readonly handovers: number
  readonly samples: number
  readonly ms: number
}

type Tagged = { readonly process: number; readonly x: Workers.Execution }

const byDigest = (xs: ReadonlyArray<Tagged>) => {
  const groups = new Map<number, Array<Tagged>>()
  for (const t of xs) {
    const group = groups.get(t.x[0]) ?? []
    group.push(t)
    groups.set(t.x[0], group)
  }
  return groups
}

/** The most executions of one digest in progress at once, in Redis' total order (INCR sequence numbers). */
const maxConcurrent = (xs: ReadonlyArray<Tagged>): number => {
  const events = xs.flatMap(({ x }) => [[x[1], 1], [x[2], -1]] as const).sort((a, b) => a[0] - b[0])
  let current = 0
  let max = 0
  for (const [, delta] of events) {
    current += delta
    max = Math.max(max, current)
  }
  return max
}

/** Executions of one digest that started before an earlier one ended; with Redis time, non-strict. */
const overlaps = (xs: ReadonlyArray<Tagged>) => {
  const sorted = [...xs].sort((a, b) => a.x[1] - b.x[1])
  let bySeq = 0
  let byTime = 0
  let endSeq = -Infinity
  let endUs = -Infinity
  for (const { x } of sorted) {
    if (x[1] < endSeq) bySeq++
    if (x[3] < endUs) byTime++
    endSeq = Math.max(endSeq, x[2])
    endUs = Math.max(endUs, x[4])
  }
  return { bySeq, byTime }
}

/** Consecutive executions of a digest (in Redis order) that ran in different processes. */
const handovers = (xs: ReadonlyArray<Tagged>) => {
  const sorted = [...xs].sort((a, b) => a.x[1] - b.x[1])
  let n = 0
  for (let i = 1; i < sorted.length; i++) if (sorted[i]!.process !== sorted[i - 1]!.process) n++
  return n
}

const locksLeft = (prefix: string) =>
  Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
    Effect.promise(async () => ({
      locked: (await raw.keys(`${prefix}:*:LOCKED`)).length,
      indexed: await raw.zcard(`${prefix}:digests`)
    })))

export const race = (scenario: Scenario) =>
  Effect.gen(function*() {
    const { raw, source } = yield* RedisTest.TestRedis
    const prefix = RedisTest.uniquePrefix(`mp-${scenario.mode}`)
    const worker = `Race${scenario.mode}Job`
    const uj = yield* UniqueJob.make({ worker, lock: scenario.mode, lockPrefix: prefix })
    const digests = yield* Effect.forEach(Array.from({ length: scenario.digests }, (_, d) => d), (d) => uj.digest([d]))
    const runKeys = digests.map((d) => `${d}:RUN:LOCKED`)
    const queueKeys = digests.map((d) => `${d}:LOCKED`)

    // A sampler in this process: the holders of every lock, as often as it can, while the workers run.
    const sampled = { run: 0, queue: 0, samples: 0 }
    const sampler = yield* Effect.promise(async () => {
      const pipeline = raw.pipeline()
      for (const key of [...runKeys, ...queueKeys]) pipeline.hlen(key)
      const replies = (await pipeline.exec()) ?? []
      const counts = replies.map(([, n]) => Number(n))
      sampled.run = Math.max(sampled.run, ...counts.slice(0, runKeys.length))
      sampled.queue = Math.max(sampled.queue, ...counts.slice(runKeys.length))
      sampled.samples++
    }).pipe(Effect.andThen(Effect.sleep(2)), Effect.forever, Effect.forkChild)

    const pool = yield* Workers.Pool
    const began = Date.now()
    const results = yield* pool.run(
      Array.from({ length: PROCESSES }, (_, p): Workers.Config => ({
        mode: scenario.mode,
        url: source.url,
        prefix,
        worker,
        digests: scenario.digests,
        lockLimit: scenario.lockLimit,
        fibers: scenario.fibers,
        concurrency: scenario.concurrency,
        target: scenario.target,
        maxMs: STALL_MS,
        // A call slowed by a busy machine is no fault here: only a dead server would hit this.
        timeout: 10_000,
        seed: 1 + p * 7919 + scenario.lockLimit
      })),
      RUN_CAP_MS
    )
    const ms = Date.now() - began
    yield* Fiber.interrupt(sampler)

    for (const r of results) {
      assert.deepStrictEqual(r.unexpected, [], `process ${r.pid}`)
      assert.isAtLeast(r.performed, scenario.target, `process ${r.pid}`)
      assert.strictEqual(r.runs.length, r.performed)
    }
    const runs = results.flatMap((r, process) => r.runs.map((x) => ({ process, x })))
    const queued = results.flatMap((r, process) => r.queued.map((x) => ({ process, x })))

    // Redis' sequence numbers are unique and each execution starts before it ends.
    const seqs = new Set([...runs, ...queued].flatMap(({ x }) => [x[1], x[2]]))
    assert.isTrue(runs.every(({ x }) => x[1] < x[2] && x[3] <= x[4]))

    // Never more holders than the limit: seen from inside every perform (HLEN at start and end), and by the sampler.
    for (const { x } of runs) {
      assert.isAtLeast(x[5], 1)
      assert.isAtMost(x[5], scenario.lockLimit)
      assert.isAtLeast(x[6], 1)
      assert.isAtMost(x[6], scenario.lockLimit)
    }
    assert.isAtMost(sampled.run, scenario.lockLimit)
    assert.isAtMost(sampled.queue, 1)

    // Executions of a digest: at most lockLimit at once, in Redis order; with lockLimit 1, none overlap.
    let max = 0
    let totalHandovers = 0
    for (const [d, xs] of byDigest(runs)) {
      const m = maxConcurrent(xs)
      assert.isAtMost(m, scenario.lockLimit, `digest ${d}`)
      max = Math.max(max, m)
      if (scenario.lockLimit === 1) assert.deepStrictEqual(overlaps(xs), { bySeq: 0, byTime: 0 }, `digest ${d}`)
      // The race was real: every process ran every digest, and consecutive runs often changed process.
      assert.strictEqual(new Set(xs.map((t) => t.process)).size, PROCESSES, `digest ${d}`)
      totalHandovers += handovers(xs)
    }
    assert.strictEqual(max, scenario.lockLimit)
    assert.isAbove(totalHandovers, 0)

    // until_* types: from enqueue to the last moment the queue lock is surely held, no two jobs of a digest overlap
    // (never a duplicate in any process' queue).
    if (scenario.mode !== "while_executing") {
      assert.strictEqual(queued.length, runs.length)
      for (const [d, xs] of byDigest(queued)) {
        assert.deepStrictEqual(overlaps(xs), { bySeq: 0, byTime: 0 }, `digest ${d}: a duplicate was queued`)
        for (const { x } of xs) assert.deepStrictEqual([x[5], x[6]], [1, 1], `digest ${d}: queue lock holders`)
      }
    }
    const skipped = results.reduce((n, r) => n + r.skipped, 0)
    assert.isAbove(skipped, 0)

    // Every process exited by itself, and left nothing behind.
    assert.deepStrictEqual(yield* locksLeft(prefix), { locked: 0, indexed: 0 })

    const summary: Summary = {
      executions: runs.length,
      skipped,
      rescheduled: results.reduce((n, r) => n + r.rescheduled, 0),
      maxConcurrent: max,
      handovers: totalHandovers,
      samples: sampled.samples,
      ms
    }
    console.info(
      `multi-process ${scenario.name}: ${summary.executions} executions in ${PROCESSES} processes, ` +
        `${summary.skipped} conflicts skipped, ${summary.rescheduled} rescheduled, max ${max} at once, ` +
        `${summary.handovers} cross-process handovers, ${seqs.size} Redis-ordered records, ` +
        `${summary.samples} holder samples, ${ms} ms, locks left 0`
    )
    return summary
  }).pipe(Effect.scoped)
