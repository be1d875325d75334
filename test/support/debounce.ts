/**
 * A debounced worker on MemoryQueue and TestClock against the test Redis, and waiting for its queue to settle: for
 * the debounce tests and properties (issue 40).
 */
import type { Job as BullJob } from "bullmq"
import * as Clock from "effect/Clock"
import type * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import { assert } from "vitest"
import * as MemoryQueue from "../../src/adapters/MemoryQueue.js"
import * as UniqueQueue from "../../src/adapters/UniqueQueue.js"
import { JobQueue } from "../../src/JobQueue.js"
import * as Lock from "../../src/Lock.js"
import * as Redis from "../../src/Redis.js"
import * as UniqueJob from "../../src/UniqueJob.js"
import * as Bull from "./bullmq.js"
import * as RedisTest from "./redis.js"

// Real time for Redis' replies while TestClock stands still.
export const tick = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 2)))

// Until the jobs due by now have run: nothing due on the schedule, ready or running.
export const settle = (queue: MemoryQueue.MemoryQueue) =>
  Effect.gen(function*() {
    for (let i = 0; i < 5_000; i++) {
      const now = yield* Clock.currentTimeMillis
      const snapshot = yield* queue.snapshot
      if (snapshot.ready.length === 0 && snapshot.running.length === 0 && snapshot.scheduled.every((s) => s.at > now)) {
        return
      }
      yield* tick
    }
    assert.fail("the queue did not settle")
  })

export type DebouncedLock = "until_executing" | "until_executed" | "until_and_while_executing"

// A debounced worker on a fresh prefix whose runs are recorded with the time they started and their arguments; every
// enqueue has the same digest (lockArgs), whatever its arguments.
export const debouncedWorker = (lock: DebouncedLock, delay: number, maxWait: number | undefined) =>
  Effect.gen(function*() {
    const prefix = RedisTest.uniquePrefix("debounce")
    const queue = yield* MemoryQueue.make()
    const worker = UniqueJob.unsafeMake({
      worker: "Report",
      lock,
      lockPrefix: prefix,
      lockArgs: () => ["one"],
      debounce: { delay, maxWait }
    })
    const runs = yield* Ref.make<Array<{ readonly at: number; readonly args: ReadonlyArray<unknown> }>>([])
    // A run is recorded at the time it was due (the job's `at`: the clock has moved on by the time it runs, as
    // TestClock.adjust wakes each sleeper at its time but the job's Redis calls end after the adjust), from the
    // worker's start (a layer's TestClock runs on from the test before).
    const start = yield* Clock.currentTimeMillis
    yield* queue.work((job) =>
      worker.server(
        job,
        Ref.update(runs, (r) => [...r, { at: (job.at ?? Number.NaN) - start, args: job.args }])
      ).pipe(Effect.provideService(JobQueue, queue))
    )
    const trigger = (n: number) => Effect.provideService(worker.enqueue([n]), JobQueue, queue)
    return { queue, runs, start, trigger }
  })

// Until a worker has taken `jid` from `queue` (an event past scheduled and pushed), or a bounded wait has passed.
export const untilStarted = (queue: MemoryQueue.MemoryQueue) => (jid: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 2_000; i++) {
      if ((yield* queue.events).some((e) => e.type !== "scheduled" && e.type !== "pushed" && e.job.jid === jid)) return
      yield* tick
    }
  })

// A trigger whose job is held on its way to the queue: a producer of `digest`'s window (same prefix and lockArgs,
// `delay` and `maxWait`) enqueues `args` through `queue` with the push held until `landing` is done (and then `after`
// the job's jid, when given: e.g. until a worker has it), once its lock is taken. `held` reads the lock's holders.
export const onItsWay = (
  queue: MemoryQueue.MemoryQueue,
  lock: DebouncedLock,
  digest: string,
  debounce: { readonly delay: number; readonly maxWait: number },
  args: ReadonlyArray<unknown>,
  after?: (jid: string) => Effect.Effect<void>
) =>
  Effect.gen(function*() {
    const landing = yield* Deferred.make<void>()
    const land = <A, E>(jid: string, push: Effect.Effect<A, E>) =>
      Effect.andThen(Deferred.await(landing), after === undefined ? push : Effect.tap(push, () => after(jid)))
    const slow: Context.Service.Shape<typeof JobQueue> = {
      ...queue,
      push: (job) => land(job.jid, queue.push(job)),
      schedule: (job, at) => land(job.jid, queue.schedule(job, at))
    }
    const producer = UniqueJob.unsafeMake({
      worker: "Report",
      lock,
      lockPrefix: digest.slice(0, digest.lastIndexOf(":")),
      lockArgs: () => ["one"],
      debounce
    })
    const redis = yield* Redis.RedisService
    const held = redis.holders(Lock.keyOf(producer.definition, digest, "queue"))
    const fiber = yield* Effect.forkChild(Effect.provideService(producer.enqueue(args), JobQueue, slow))
    for (let i = 0; i < 500 && (yield* held).length === 0; i++) yield* tick
    return { fiber, landing, held, producer }
  })

/** One trigger of a multi-producer stream: its number, when its add was made and answered (ms), and its outcome. */
export interface Trigger {
  readonly n: number
  readonly producer: number
  readonly start: number
  readonly end: number
  readonly tag: string
}

/** One run of a debounced digest: its trigger's number, when a worker took it (BullMQ's processedOn), when it was due. */
export interface Run {
  readonly n: number
  readonly pickedAt: number
  readonly due: number
}

/**
 * Producers adding one digest each `everyMs` for `forMs` (real time), numbered in one sequence: the record of every
 * trigger. `add` answers the outcome's tag.
 */
export const stream = async (
  adds: ReadonlyArray<(n: number) => Promise<string>>,
  forMs: number,
  everyMs = 10
): Promise<Array<Trigger>> => {
  const triggers: Array<Trigger> = []
  const t0 = Date.now()
  let next = 0
  await Promise.all(adds.map(async (add, producer) => {
    while (Date.now() - t0 < forMs) {
      const n = next++
      const start = Date.now()
      const tag = await add(n)
      triggers.push({ n, producer, start, end: Date.now(), tag })
      await new Promise((resolve) => setTimeout(resolve, everyMs))
    }
  }))
  return triggers
}

/**
 * The multi-producer debounce's promise (issue 47) over a record of triggers and runs, as what breaks it: each run due
 * no later than maxWait (+ `slackMs`, a trigger's own time to reach its lock) after its window's first trigger (the
 * first add made after the run before it was taken); no trigger made after a run's own was answered and answered
 * before that run was taken (it would have taken the run's place: the run is the last trigger's data); and the last
 * run's trigger is one of the last (none was made after it was answered).
 */
export const violations = (
  triggers: ReadonlyArray<Trigger>,
  runs: ReadonlyArray<Run>,
  maxWait: number,
  slackMs: number
): Array<string> => {
  const out: Array<string> = []
  const taken = triggers.filter((t) => t.tag === "Enqueued" || t.tag === "Replaced")
  const byN = new Map(triggers.map((t) => [t.n, t]))
  const ordered = [...runs].sort((a, b) => a.pickedAt - b.pickedAt)
  let previous = -Infinity
  for (const run of ordered) {
    const first = Math.min(...taken.filter((t) => t.start > previous).map((t) => t.start))
    if (Number.isFinite(first) && run.due > first + maxWait + slackMs) {
      out.push(`the run of ${run.n} was due ${run.due - first} ms after its window's first trigger`)
    }
    const own = byN.get(run.n)
    if (own === undefined) {
      out.push(`a run of ${run.n}, no trigger's`)
    } else {
      const later = taken.find((t) => t.start > own.end && t.end < run.pickedAt)
      if (later !== undefined) out.push(`the run of ${run.n} ran, though ${later.n} came after it and before the run`)
    }
    previous = run.pickedAt
  }
  const last = ordered[ordered.length - 1]
  const lastOwn = last === undefined ? undefined : byN.get(last.n)
  const after = lastOwn === undefined ? undefined : taken.find((t) => t.start > lastOwn.end)
  if (taken.length > 0 && (lastOwn === undefined || after !== undefined)) {
    out.push(`the last run (${last?.n}) is not of the last trigger (${after?.n})`)
  }
  return out
}

/** A job's data in the multi-producer tests: the digest's key (its lock arguments) and the trigger's number. */
export interface Keyed {
  readonly key: string
  readonly n: number
}

/**
 * `count` producers of one debounced digest on real BullMQ: UniqueQueue instances of their own on one queue and lock
 * prefix, each warmed up by an add of another digest (its first builds its runtime), and one worker recording the
 * runs of the digest `one` with BullMQ's own times. Closed with the scope.
 */
export const uniqueProducers = (count: number, lock: DebouncedLock, delay: number, maxWait: number) =>
  Effect.gen(function*() {
    const { source } = yield* RedisTest.TestRedis
    const name = Bull.uniqueName("debounce-many")
    const lockPrefix = RedisTest.uniquePrefix("debounce-many")
    const options = {
      lock,
      lockArgs: (args: ReadonlyArray<unknown>) => [(args[0] as Keyed).key],
      debounce: { delay, maxWait },
      lockPrefix,
      redis: { url: source.url },
      defaults: {}
    }
    const uniques = yield* Effect.forEach(Array.from({ length: count }), () =>
      Effect.flatMap(Bull.queue(name), (queue) =>
        Effect.acquireRelease(
          Effect.sync(() => UniqueQueue.make<Keyed>(queue, options)),
          (unique) => Effect.promise(() => unique.close())
        )))
    const runs: Array<Run> = []
    yield* Bull.worker(name, uniques[0]!.processor(async (job: BullJob<Keyed>) => {
      if (job.data.key === "one") {
        runs.push({ n: job.data.n, pickedAt: job.processedOn!, due: job.timestamp + (job.opts.delay ?? 0) })
      }
    }))
    for (const [i, unique] of uniques.entries()) {
      yield* Effect.promise(() => unique.add("Sync", { key: `warm-${i}`, n: -1 }))
    }
    const queue = uniques[0]!.queue
    const drained = Effect.promise(async () =>
      (await queue.getDelayedCount()) + (await queue.getWaitingCount()) + (await queue.getActiveCount()) === 0
    )
    const adds = uniques.map((unique) => (n: number) => unique.add("Sync", { key: "one", n }).then((o) => o._tag))
    return { uniques, queue, runs, lockPrefix, drained, adds }
  })
