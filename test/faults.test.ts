/**
 * Faults, each injected on a private redis-server this file controls, each ending with a count of the locks left
 * behind (`<prefix>:*:LOCKED` keys and `<prefix>:digests` members), which must be zero:
 * - the server killed and restarted mid-run, and a server that stops answering without closing the socket
 *   (SIGSTOP / SIGCONT): calls fail with RedisError within the configured timeout, never hang, and work again;
 * - SCRIPT FLUSH over and over mid-run: the scripts reload and nothing fails;
 * - a worker process SIGKILLed mid-perform: its execution lock frees within one lease (not before) and the job runs
 *   elsewhere;
 * - client and server middleware interrupted at random points: no lock outlives its job.
 * Timeouts and leases are short (hundreds of milliseconds) so the whole file runs in seconds; where they must be met,
 * the bound adds how late this process ran meanwhile, and waits are for what Redis shows, not for a fixed time, so a
 * busy machine makes the file slower, never red.
 */
import { readdirSync, readFileSync } from "node:fs"
import { assert, describe, layer } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as References from "effect/References"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import type * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as LockType from "../src/LockType.js"
import * as Redis from "../src/Redis.js"
import type * as RedisServer from "../src/testing/RedisServer.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as RedisTest from "./support/redis.js"
import * as Workers from "./support/workers.js"

/** The per-call timeout of the stores under fault. */
const TIMEOUT = 400
/** Slack for timers and scheduling on an idle machine; bounds add the lag measured meanwhile (see `lagMonitor`). */
const MARGIN = 400
/** The call timeout where no outage is injected: a busy machine's slow call is no fault there. */
const CALM_TIMEOUT = 10_000
/** A call or a wait that takes longer than this hangs, however busy the machine. */
const HANG = 30_000
/** The lease of the workload's execution locks. */
const WORKLOAD_LEASE = 1_500

// ---------------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------------

/** A small deterministic PRNG (xorshift32), so a failure can be replayed from its seed. */
const prng = (seed: number) => {
  let state = (seed >>> 0) || 1
  const next = () => {
    state ^= state << 13
    state ^= state >>> 17
    state ^= state << 5
    return (state >>> 0) / 4294967296
  }
  return { next, int: (n: number) => Math.floor(next() * n) }
}

interface Left {
  readonly locked: number
  readonly indexed: number
  readonly keys: ReadonlyArray<string>
}

/** The locks left under a prefix: `*:LOCKED` keys and index members. */
const locksLeft = (prefix: string) =>
  Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
    Effect.promise(async (): Promise<Left> => {
      const keys = await raw.keys(`${prefix}:*:LOCKED`)
      const detail = await Promise.all(
        keys.map(async (key) => `${key} ${JSON.stringify(await raw.hgetall(key))} pttl=${await raw.pttl(key)}`)
      )
      const members = await raw.zrange(`${prefix}:digests`, "0", "-1")
      return { locked: keys.length, indexed: members.length, keys: [...detail, ...members.map((m) => `index ${m}`)] }
    }))

const assertNoLocksLeft = (prefix: string) =>
  Effect.map(locksLeft(prefix), (left) => {
    assert.deepStrictEqual(
      { locked: left.locked, indexed: left.indexed },
      { locked: 0, indexed: 0 },
      `locks left behind:\n${left.keys.join("\n")}`
    )
    return left
  })

/**
 * Waits until nothing is left under `prefix`, however long a busy machine takes to see it; each key left at first must
 * end by itself within `within` ms (its PTTL, on Redis' clock), so the wait proves what a timed one would.
 */
const awaitNoLocksLeft = (prefix: string, within: number) =>
  Effect.gen(function*() {
    const { raw } = yield* RedisTest.TestRedis
    for (const key of yield* Effect.promise(() => raw.keys(`${prefix}:*:LOCKED`))) {
      const pttl = yield* Effect.promise(() => raw.pttl(key))
      assert.notStrictEqual(pttl, -1, `${key} has no TTL`)
      assert.isAtMost(pttl, within, `${key} lives longer than ${within} ms`)
    }
    const began = Date.now()
    for (;;) {
      const left = yield* locksLeft(prefix)
      if (left.locked + left.indexed === 0 || Date.now() - began > HANG) break
      yield* Effect.sleep(50)
    }
    return yield* assertNoLocksLeft(prefix)
  })

const redisTime = Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
  Effect.promise(async () => {
    const [s, us] = await raw.time()
    return Number(s) * 1000 + Math.floor(Number(us) / 1000)
  }))

/**
 * The pid of the private redis-server on `port`: a child of this process whose command line (which redis-server
 * rewrites to `redis-server 127.0.0.1:<port>`) names the port. RedisServer.Server does not expose it.
 */
const redisPid = (port: number): number | undefined => {
  const portPattern = new RegExp(`(:${port}|--port ${port})(\\s|$)`)
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").replace(/\0+/g, " ").trim()
      if (!/^\S*redis-server\b/.test(cmdline) || !portPattern.test(cmdline)) continue
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      if (ppid === process.pid) return Number(entry)
    } catch {
      // the process ended while we looked
    }
  }
  return undefined
}

/** The pid of this file's redis-server, to stop and continue it. */
const pidOf = (server: RedisServer.Server): number => {
  const pid = redisPid(server.port)
  assert.isDefined(pid, `no redis-server child of ${process.pid} on port ${server.port} in /proc`)
  return pid!
}

/** Runs `self` while the server is stopped (SIGSTOP): its socket stays open, it answers nothing. SIGCONT after. */
const whileStopped = <A, E, R>(pid: number, self: Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => process.kill(pid, "SIGSTOP")),
    () => self,
    () =>
      Effect.sync(() => {
        try {
          process.kill(pid, "SIGCONT")
        } catch {
          // killed meanwhile
        }
      })
  )

/** The store under test: its own connection with a short timeout, quiet (the faults make it warn a lot). */
const faultyStore = (url: string, timeout = TIMEOUT) => Layer.fresh(Redis.layer({ url, timeout }))

const quiet = Effect.provideService(References.MinimumLogLevel, "None")

/** Runs `self` on a fresh store (by default the faulty one) with a MemoryQueue as the JobQueue, in a scope. */
const withStore = <A, E, R>(url: string, self: Effect.Effect<A, E, R>, timeout = TIMEOUT) =>
  self.pipe(Effect.scoped, Effect.provide(Layer.merge(faultyStore(url, timeout), MemoryQueue.layer())), quiet)

/**
 * How late this process ran while its scope was open: the most a 10 ms timer fired late. A busy machine delays every
 * timer and reply here by about as much, so a bound on how long a call took allows for it: tight on an idle machine,
 * never red on a loaded one.
 */
const lagMonitor = Effect.gen(function*() {
  const lag = { max: 0 }
  const tick = Effect.suspend(() => {
    const due = Date.now() + 10
    return Effect.map(Effect.sleep(10), () => {
      lag.max = Math.max(lag.max, Date.now() - due)
    })
  })
  yield* Effect.forkScoped(Effect.forever(tick))
  return lag
})

// ---------------------------------------------------------------------------------------------------------------
// A workload that keeps going through faults
// ---------------------------------------------------------------------------------------------------------------

interface Tally {
  ok: number
  lastOkAt: number
  /** The slowest call that succeeded: how slow the server answered (a lag the event loop does not show). */
  slowestOk: number
  /** Failures by tag; anything but RedisError fails the test. */
  readonly failures: Map<string, number>
  /** The slowest failed call, per side. */
  readonly slowestFailure: { client: number; server: number }
  /** Calls that did not end within their bound (plus a generous slack): must stay 0. */
  hangs: number
  /** The first few failures other than RedisError, for the assertion message. */
  readonly unexpected: Array<string>
  readonly stopped: { value: boolean }
}

const makeTally = (): Tally => ({
  ok: 0,
  lastOkAt: 0,
  slowestOk: 0,
  failures: new Map(),
  slowestFailure: { client: 0, server: 0 },
  hangs: 0,
  unexpected: [],
  stopped: { value: false }
})

const workloadJobs = (prefix: string) =>
  Effect.all({
    whileExecuting: UniqueJob.make({
      worker: "FaultWhileJob",
      lock: "while_executing",
      lockLease: WORKLOAD_LEASE,
      lockPrefix: prefix
    }),
    untilExecuted: UniqueJob.make({ worker: "FaultUntilJob", lock: "until_executed", lockPrefix: prefix }),
    untilAndWhile: UniqueJob.make({
      worker: "FaultBothJob",
      lock: "until_and_while_executing",
      lockLease: WORKLOAD_LEASE,
      lockPrefix: prefix
    })
  })

/**
 * `fibers` loops of enqueue + perform over three lock types and four digests until `tally.stopped`. A perform that
 * failed is retried with the same jid, as a queue would (so an execution lock taken by a call that timed out is
 * re-entered and released); an enqueue that failed is given up, as a producer would. Every call is timed.
 */
const workload = (prefix: string, tally: Tally, fibers: number, seed: number) =>
  Effect.gen(function*() {
    const jobs = yield* workloadJobs(prefix)
    const rnd = prng(seed)
    const timed = <A, E, R>(side: "client" | "server", self: Effect.Effect<A, E, R>) =>
      Effect.gen(function*() {
        const began = Date.now()
        const exit = yield* Effect.exit(Effect.timeout(self, HANG))
        const elapsed = Date.now() - began
        if (Exit.isSuccess(exit)) {
          tally.ok++
          tally.lastOkAt = Date.now()
          tally.slowestOk = Math.max(tally.slowestOk, elapsed)
          return exit.value
        }
        const reasons = exit.cause.reasons
        const error = reasons.length === 1 && Cause.isFailReason(reasons[0]!) ? reasons[0].error : undefined
        const tag = error !== null && typeof error === "object" && "_tag" in error ? String(error._tag) : "defect"
        if (tag === "TimeoutError") tally.hangs++
        if (tag !== "RedisError" && tally.unexpected.length < 3) tally.unexpected.push(Cause.pretty(exit.cause))
        tally.failures.set(tag, (tally.failures.get(tag) ?? 0) + 1)
        tally.slowestFailure[side] = Math.max(tally.slowestFailure[side], elapsed)
        return undefined
      })
    const perform = Effect.suspend(() => Effect.sleep(rnd.int(3)))
    /** Runs `job` until it has an outcome (Performed or Skipped), as a queue's retries would. */
    const serve = (uj: UniqueJob.UniqueJob, job: Job.Job) =>
      Effect.gen(function*() {
        for (let attempt = 0;; attempt++) {
          const outcome = yield* timed("server", uj.server({ ...job, retryCount: attempt }, perform))
          if (outcome !== undefined) return
          yield* Effect.sleep(20)
        }
      })
    const loop = Effect.gen(function*() {
      while (!tally.stopped.value) {
        const arg = rnd.int(4)
        switch (rnd.int(3)) {
          case 0:
            yield* serve(jobs.whileExecuting, jobs.whileExecuting.job([arg]))
            break
          case 1:
          case 2: {
            const uj = rnd.next() < 0.5 ? jobs.untilExecuted : jobs.untilAndWhile
            const enqueued = yield* timed("client", uj.client(uj.job([arg]), () => Effect.void))
            if (enqueued?._tag === "Enqueued") yield* serve(uj, enqueued.job)
            else if (enqueued === undefined) yield* Effect.sleep(5)
          }
        }
        yield* Effect.yieldNow
      }
    })
    return yield* Effect.forkScoped(
      Effect.all(Array.from({ length: fibers }, () => loop), { concurrency: "unbounded", discard: true })
    )
  })

const waitUntil = (condition: () => boolean, timeoutMs: number, what: string) =>
  Effect.gen(function*() {
    const began = Date.now()
    while (!condition()) {
      if (Date.now() - began > timeoutMs) return yield* Effect.die(new Error(`${what}: not within ${timeoutMs} ms`))
      yield* Effect.sleep(10)
    }
    return Date.now() - began
  })

/** Runs the workload around `fault`, then stops it and lets it finish; `lag` is how late this process ran meanwhile. */
const throughFault = <A, E, R>(
  url: string,
  prefix: string,
  fault: (tally: Tally) => Effect.Effect<A, E, R>,
  seed: number,
  timeout = TIMEOUT
) =>
  Effect.gen(function*() {
    const lag = yield* lagMonitor
    const tally = makeTally()
    const fiber = yield* workload(prefix, tally, 6, seed)
    yield* waitUntil(() => tally.ok >= 50, HANG, "the workload before the fault")
    const result = yield* fault(tally)
    const okBefore = tally.ok
    yield* waitUntil(() => tally.ok >= okBefore + 50, HANG, "the workload after the fault")
    tally.stopped.value = true
    yield* Fiber.join(fiber).pipe(
      Effect.timeoutOrElse({ duration: 2 * HANG, orElse: () => Effect.fail("the workload did not stop") })
    )
    return { tally, result, lag: lag.max }
  }).pipe((self) => withStore(url, self, timeout))

const failuresText = (tally: Tally) =>
  `${JSON.stringify(Object.fromEntries(tally.failures))}\n${tally.unexpected.join("\n")}`

/**
 * Failures other than those a fault may cause (`allowed`). LockLost is correct only for a holder stalled past its
 * lease, so it counts only after this process ran late, or Redis answered late, by half a lease.
 */
const unexpectedFailures = (tally: Tally, lag: number, allowed: ReadonlyArray<string>) => {
  const stalled = Math.max(lag, tally.slowestOk) >= WORKLOAD_LEASE / 2
  return [...tally.failures.keys()].filter((tag) => !allowed.includes(tag) && !(stalled && tag === "LockLost"))
}

/** Every failure was a RedisError, within its bound (plus the lag measured meanwhile), and nothing hung. */
const assertFailedWell = (tally: Tally, lag: number) => {
  assert.strictEqual(tally.hangs, 0, "calls that hung")
  assert.include([...tally.failures.keys()], "RedisError", failuresText(tally))
  assert.deepStrictEqual(unexpectedFailures(tally, lag, ["RedisError"]), [], failuresText(tally))
  // A failed call waits for its timers and then its fiber: twice the lag covers both being late.
  const late = MARGIN + 2 * lag
  assert.isAtMost(tally.slowestFailure.client, TIMEOUT + late, `the slowest failed enqueue (one call), lag ${lag}`)
  assert.isAtMost(tally.slowestFailure.server, 2 * TIMEOUT + late + 10, `the slowest failed perform, lag ${lag}`)
}

const serverOf = (source: RedisServer.Source): RedisServer.Server | undefined => source.server

// ---------------------------------------------------------------------------------------------------------------
// Interruption at random points
// ---------------------------------------------------------------------------------------------------------------

const interruptedTypes: ReadonlyArray<LockType.LockType> = [
  "until_executing",
  "until_executed",
  "while_executing",
  "while_executing_reject",
  "until_and_while_executing"
]

const serverStrategies = (type: LockType.LockType): ReadonlyArray<"log" | "raise" | "reject" | "reschedule"> =>
  type === "while_executing_reject"
    ? ["reject"]
    : type === "while_executing" || type === "until_and_while_executing"
    ? ["log", "raise", "reject", "reschedule"]
    : ["log"]

/**
 * Each iteration: three enqueues of one digest, each interrupted at a random point; then workers that are interrupted
 * (their scope closed) at a random point while two more enqueues are interrupted too; then new workers drain the
 * queue. After each interruption every holder of the digest's locks must be a job the queue still has (waiting,
 * scheduled or running): a lock whose job is gone is a leak. After the drain nothing may be held.
 */
const interruptions = (prefix: string, seed: number, iterations: number) =>
  Effect.gen(function*() {
    const rnd = prng(seed)
    const stats = { clients: 0, clientsCut: 0, workerCuts: 0, performsCut: 0, drained: 0, queuedWithoutLock: 0 }
    const pause = (maxMs: number) =>
      Effect.suspend(() =>
        rnd.next() < 0.5
          ? Effect.repeat(Effect.yieldNow, { times: rnd.int(40) })
          : Effect.sleep(rnd.int(maxMs + 1))
      )
    const cut = <A, E>(fiber: Fiber.Fiber<A, E>) =>
      Effect.map(Effect.andThen(Fiber.interrupt(fiber), Fiber.await(fiber)), (exit) => {
        stats.clients++
        if (Exit.hasInterrupts(exit)) stats.clientsCut++
      })

    const iteration = (i: number, queue: MemoryQueue.MemoryQueue) =>
      Effect.gen(function*() {
        const type = interruptedTypes[i % interruptedTypes.length]!
        const strategies = serverStrategies(type)
        const client = (["log", "raise", "reject", "replace"] as const)[rnd.int(4)]!
        const server = strategies[rnd.int(strategies.length)]!
        // Only the options the type reads: the others are refused.
        const { queue: queued, run } = LockType.phases(type)
        const uj = yield* UniqueJob.make({
          worker: "InterruptedJob",
          lock: type,
          lockPrefix: prefix,
          lockLease: run ? 5_000 : undefined,
          rescheduleDelay: server === "reschedule" ? 3 : undefined,
          onConflict: { client: queued ? client : "log", server }
        })
        const args = [i]
        const digest = yield* uj.digest(args)
        const held = (phase: LockType.Phase) =>
          Effect.flatMap(Redis.RedisService, (redis) =>
            Effect.map(redis.holders(Lock.keyOf(uj.definition, digest, phase)), (hs) => hs.map((h) => h.jid).sort()))
        const where = `iteration ${i} (${type}, ${JSON.stringify(uj.definition.onConflict)}, seed ${seed})`
        const handler = (job: Job.Job) => uj.server(job, Effect.suspend(() => Effect.sleep(rnd.int(3))))
        const onDeath = (job: Job.Job) => uj.died(job)
        const started = Effect.map(queue.events, (es) => es.filter((e) => e.type === "started").length)

        /** Every holder is a job the queue still has (waiting, scheduled or running); no execution lock is left. */
        const check = (moment: string) =>
          Effect.gen(function*() {
            const snapshot = yield* queue.snapshot
            const known = new Set([
              ...snapshot.ready.map((j) => j.jid),
              ...snapshot.scheduled.map((s) => s.job.jid),
              ...snapshot.running.map((j) => j.jid)
            ])
            const queueHolders = yield* held("queue")
            for (const jid of queueHolders) {
              assert.isTrue(known.has(jid), `${where}, ${moment}: the queue lock of ${jid}, a job the queue lost`)
            }
            assert.deepStrictEqual(yield* held("run"), [], `${where}, ${moment}: an execution lock with no worker`)
            if (LockType.phases(type).queue) {
              // A job that waits without its queue lock must be one that had started (and released it) before its
              // worker was interrupted: a redelivery. A job that never started has its lock, or it was never pushed.
              const events = yield* queue.events
              for (const job of snapshot.ready.filter((j) => !queueHolders.includes(j.jid))) {
                const hadStarted = events.some((e) => e.type === "started" && e.job.jid === job.jid)
                assert.isTrue(hadStarted, `${where}, ${moment}: ${job.jid} waits in the queue without its lock`)
                stats.queuedWithoutLock++
              }
            }
          })

        // 1. Enqueues interrupted at random points.
        const enqueues = yield* Effect.forEach([0, 1, 2], () => Effect.forkChild(uj.enqueue(args)))
        for (const fiber of enqueues) yield* Effect.andThen(pause(3), cut(fiber))
        yield* check("after interrupted enqueues")

        // 2. Workers interrupted at a random point (their scope closed), with two more interrupted enqueues meanwhile.
        const startedBefore = yield* started
        const workers = yield* Scope.make()
        yield* queue.work(handler, { concurrency: 2, onDeath }).pipe(Scope.provide(workers))
        const more = yield* Effect.forEach([0, 1], () => Effect.forkChild(uj.enqueue(args)))
        for (const fiber of more) yield* Effect.andThen(pause(4), cut(fiber))
        yield* pause(6)
        const running = (yield* queue.snapshot).running.length
        yield* Scope.close(workers, Exit.void)
        stats.workerCuts++
        stats.performsCut += running
        yield* check("after interrupted workers")
        const startedCut = yield* started

        // 3. Workers that run to the end drain the queue: then nothing of the digest is held.
        yield* queue.work(handler, { concurrency: 2, onDeath })
        yield* queue.awaitIdle.pipe(
          Effect.timeoutOrElse({ duration: HANG, orElse: () => Effect.fail(new Error(`${where}: the queue did not drain`)) })
        )
        stats.drained += (yield* started) - startedCut
        assert.isAtLeast(startedCut, startedBefore)
        assert.deepStrictEqual(yield* held("queue"), [], `${where}: a queue lock held after the drain`)
        assert.deepStrictEqual(yield* held("run"), [], `${where}: an execution lock held after the drain`)
      })

    for (let i = 0; i < iterations; i++) {
      yield* Effect.scoped(
        Effect.flatMap(MemoryQueue.make({ maxRetries: 2, backoff: () => 2 }), (queue) =>
          Effect.provideService(iteration(i, queue), JobQueue, queue))
      )
    }
    return stats
  })

// ---------------------------------------------------------------------------------------------------------------
// A worker process killed mid-perform
// ---------------------------------------------------------------------------------------------------------------

const LEASE = 2_000

/**
 * A worker process takes the execution lock of a job (lease 2 s, renewed every lease/3) and is SIGKILLed in the
 * middle of perform, just after a renewal. This process then asks for the same digest with a duplicate every 10 ms:
 * refused while the dead worker's lease runs, taken once it has passed, each judged on Redis' clock (read before the
 * attempt, and inside the perform that got the lock); and the killed job itself, redelivered here, runs to the end.
 * Answers why the round shows nothing, when a busy machine stalled a process for about a lease at the wrong moment.
 */
const killOnce = (lock: "while_executing" | "until_and_while_executing", url: string) =>
  Effect.gen(function*() {
    const { raw } = yield* RedisTest.TestRedis
    const prefix = RedisTest.uniquePrefix("sigkill")
    const worker = "CrashJob"
    const proc = yield* Workers.spawnProcess
    const run = yield* Workers.prepare(proc, {
      mode: "hold",
      holdLock: lock,
      url,
      prefix,
      worker,
      digests: 1,
      lockLease: LEASE,
      fibers: 1,
      concurrency: 1,
      target: 1,
      maxMs: 120_000,
      timeout: 2_000,
      seed: 1
    })
    yield* run.go
    const started = yield* run.started
    const runKey = `${started.digest}:RUN:LOCKED`
    // Redis' time and the worker's entry, in one step.
    const look = Effect.promise(async () => {
      const [[, time], [, entry]] = (await raw.multi().time().hget(runKey, started.job.jid).exec()) as [
        [unknown, [string, string]],
        [unknown, string | null]
      ]
      return {
        now: Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000),
        entry: entry === null ? undefined : (JSON.parse(entry) as { readonly t: number; readonly l: number })
      }
    })
    assert.deepStrictEqual(Object.keys(yield* Effect.promise(() => raw.hgetall(runKey))), [started.job.jid])
    // Kill it mid-perform once it has renewed its lease (every lease/3), so the lease it leaves is a renewed one.
    let renewed = yield* look
    for (let polls = 0; renewed.entry !== undefined && renewed.entry.l - renewed.entry.t <= LEASE; polls++) {
      if (polls * 20 > HANG) assert.fail("the worker did not renew its lease")
      yield* Effect.sleep(20)
      renewed = yield* look
    }
    if (renewed.entry === undefined) return "the worker lost its lock before it was killed (it stalled)"
    yield* proc.kill("SIGKILL")
    assert.strictEqual((yield* proc.exited).signal, "SIGKILL")
    const { entry, now: killedAt } = yield* look
    if (entry === undefined) {
      assert.isAtLeast(killedAt, renewed.entry.l, "the dead worker's execution lock vanished before its lease ended")
      return "its lease ended before this process looked (it stalled)"
    }
    const { l: leaseUntil, t: lockedAt } = entry
    assert.isAbove(leaseUntil - lockedAt, LEASE, "the worker renewed its lease before it died")
    assert.isAtMost(leaseUntil, killedAt + LEASE, "a lease runs at most one lease ahead")

    // Another process (this one) wants the same digest: refused until the lease passes, then it runs.
    const uj = yield* UniqueJob.make({
      worker,
      lock,
      lockLease: LEASE,
      lockPrefix: prefix,
      onConflict: { client: "log", server: "raise" }
    })
    const duplicate = uj.job(["crash"])
    if (lock === "until_and_while_executing") {
      // The dead job handed its queue lock over when it started: a duplicate may be enqueued.
      assert.strictEqual((yield* uj.client(duplicate, () => Effect.void))._tag, "Enqueued")
    }
    let refused = 0
    let acquiredAt = 0
    while (acquiredAt === 0) {
      const askedAt = yield* redisTime
      const attempt = yield* Effect.result(
        uj.server(duplicate, Effect.flatMap(redisTime, (at) => Effect.sync(() => (acquiredAt = at))))
      )
      if (attempt._tag === "Failure") {
        assert.strictEqual(attempt.failure._tag, "ExecutionConflict")
        // Redis refused before the lease ended, so it was asked before then: the lock frees when the lease ends.
        assert.isAtMost(askedAt, leaseUntil, "refused after the dead worker's lease had ended")
        refused++
        yield* Effect.sleep(10)
      }
    }
    assert.isAtLeast(acquiredAt, leaseUntil, "not before the lease ended")
    if (refused === 0) return "this process first asked after the lease had ended (it stalled)"

    // The killed job itself, redelivered to this process (same jid, a retry), runs to the end.
    const redelivered = yield* uj.server({ ...started.job, retryCount: 1 }, Effect.succeed("ran"))
    assert.strictEqual(redelivered._tag, "Performed")
    yield* assertNoLocksLeft(prefix)
    console.info(
      `fault SIGKILL worker (${lock}, lease ${LEASE} ms): lease renewed to ${leaseUntil - lockedAt} ms ` +
        `after locking, ` +
        `lock held ${leaseUntil - killedAt} ms more after the kill, ${refused} refusals, taken by another process ` +
        `${acquiredAt - killedAt} ms after the kill, the killed job redelivered and performed, locks left 0`
    )
    return undefined
  }).pipe(Effect.scoped)

/** `killOnce` until a round shows the whole story: a busy machine may spoil a round, not three. */
const killedMidPerform = (lock: "while_executing" | "until_and_while_executing", url: string) =>
  Effect.gen(function*() {
    const spoiled: Array<string> = []
    while (spoiled.length < 3) {
      const why = yield* killOnce(lock, url)
      if (why === undefined) return
      spoiled.push(why)
      console.info(`fault SIGKILL worker (${lock}): round ${spoiled.length} shows nothing: ${why}`)
    }
    assert.fail(`three rounds showed nothing: ${spoiled.join("; ")}`)
  })


// ---------------------------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------------------------

describe("faults", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("redis-server killed and restarted mid-run: RedisError within the timeout, no hang, works again, 0 left", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const server = serverOf(source)
        if (server === undefined) return // REDIS_URL fallback: the server is not ours to kill
        const prefix = RedisTest.uniquePrefix("kill")
        const { lag, result, tally } = yield* throughFault(source.url, prefix, (tally) =>
          Effect.gen(function*() {
            const failed = () => tally.failures.get("RedisError") ?? 0
            const before = failed()
            yield* server.kill
            // Down for a second, and until calls have failed: however long a busy machine takes to show it.
            yield* Effect.sleep(1_000)
            yield* waitUntil(() => failed() > before, HANG, "a RedisError while the server is down")
            const duringFailed = failed() - before
            const restartedAt = Date.now()
            yield* server.restart
            const recovery = yield* waitUntil(() => tally.lastOkAt > restartedAt, HANG, "a success after the restart")
            return { duringFailed, recovery }
          }), 11)
        assertFailedWell(tally, lag)
        assert.isAbove(result.duringFailed, 0)
        yield* assertNoLocksLeft(prefix)
        console.info(
          `fault kill+restart: ${tally.ok} calls ok, ${result.duringFailed} RedisErrors while down ` +
            `(slowest ${tally.slowestFailure.client} / ${tally.slowestFailure.server} ms), ` +
            `working again ${result.recovery} ms after the restart, 0 hangs, lag ${lag} ms, locks left 0`
        )
      }), 120_000)

    it.effect("redis-server stops answering (SIGSTOP) with the socket open: RedisError after the timeout, no hang, 0 left", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const server = serverOf(source)
        if (server === undefined) return
        const pid = pidOf(server)
        const prefix = RedisTest.uniquePrefix("stop")
        const { lag, result, tally } = yield* throughFault(source.url, prefix, (tally) =>
          Effect.gen(function*() {
            const failed = () => tally.failures.get("RedisError") ?? 0
            const before = failed()
            const stoppedAt = Date.now()
            // Stopped for 1.2 s, and until calls have failed: however long a busy machine takes to show it.
            yield* whileStopped(
              pid,
              Effect.andThen(
                Effect.sleep(1_200),
                waitUntil(() => failed() > before, HANG, "a RedisError while the server is stopped")
              )
            )
            const duringFailed = failed() - before
            const continuedAt = Date.now()
            const recovery = yield* waitUntil(() => tally.lastOkAt > continuedAt, HANG, "a success after SIGCONT")
            return { duringFailed, stoppedFor: continuedAt - stoppedAt, recovery }
          }), 23)
        assertFailedWell(tally, lag)
        assert.isAbove(result.duringFailed, 0)
        // A stalled server answers nothing: the calls end by the timeout, not sooner.
        assert.isAtLeast(Math.max(tally.slowestFailure.client, tally.slowestFailure.server), TIMEOUT - 5)
        // Execution locks whose release timed out are left, each to end with its lease; then nothing may be left.
        const left = yield* locksLeft(prefix)
        yield* awaitNoLocksLeft(prefix, WORKLOAD_LEASE)
        console.info(
          `fault SIGSTOP ${result.stoppedFor} ms: ${tally.ok} calls ok, ${result.duringFailed} RedisErrors ` +
            `while stopped (slowest ${tally.slowestFailure.client} / ${tally.slowestFailure.server} ms), working ` +
            `again ${result.recovery} ms after SIGCONT, 0 hangs, lag ${lag} ms, ${left.locked} keys + ` +
            `${left.indexed} index members left, gone within their leases`
        )
      }), 120_000)

    // The three tests below pin down how a lock call that failed with RedisError (timed out) can still take a lock
    // later, one that nothing releases (an until_executed queue lock has no TTL): the command was sent and the stalled
    // server runs it when it continues; the reply to a command sent again after a reconnect is NOSCRIPT, answered by
    // a fresh EVAL; or the command sent again after a reconnect finds the scripts loaded by another worker.
    it.effect("an enqueue whose lock call timed out on a stalled server leaves no lock once the server answers again", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const server = serverOf(source)
        if (server === undefined) return
        const pid = pidOf(server)
        const prefix = RedisTest.uniquePrefix("stall")
        yield* withStore(source.url, Effect.gen(function*() {
          const uj = yield* UniqueJob.make({ worker: "StalledJob", lock: "until_executed", lockPrefix: prefix })
          const job = uj.job([1])
          const digest = yield* uj.digest([1])
          const redis = yield* Redis.RedisService
          const error = yield* whileStopped(pid, Effect.flip(uj.client(job, () => Effect.void)))
          assert.strictEqual(error._tag, "RedisError")
          // The enqueue failed, so the job was never pushed and nothing will ever release a lock it holds. This call
          // goes down the same connection, so Redis answers it after the timed-out lock call.
          const holders = yield* redis.holders(Lock.keyOf(uj.definition, digest, "queue"))
          assert.deepStrictEqual(holders.map((h) => h.jid), [], "a lock held by a job that was never enqueued")
        }))
        yield* assertNoLocksLeft(prefix)
      }), 20_000)

    it.effect("a lock call that timed out is not run again as EVAL when its late answer is NOSCRIPT", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const server = serverOf(source)
        if (server === undefined) return
        const pid = pidOf(server)
        const prefix = RedisTest.uniquePrefix("late")
        yield* withStore(source.url, Effect.gen(function*() {
          const uj = yield* UniqueJob.make({ worker: "LateJob", lock: "until_executed", lockPrefix: prefix })
          const digest = yield* uj.digest([1])
          const redis = yield* Redis.RedisService
          // The stalled server dies with the call unanswered and comes back empty, without the scripts: if the call
          // is sent again, its answer is NOSCRIPT, which must not start a new EVAL for a caller long gone.
          const error = yield* whileStopped(
            pid,
            Effect.flip(uj.client(uj.job([1]), () => Effect.void)).pipe(Effect.tap(() => server.kill))
          )
          assert.strictEqual(error._tag, "RedisError")
          yield* server.restart
          // Back connected; then give a late answer time to arrive and be acted on.
          const key = Lock.keyOf(uj.definition, digest, "queue")
          yield* redis.holders(key).pipe(Effect.retry({ schedule: Schedule.spaced(50), times: HANG / 50 }))
          yield* Effect.sleep(100)
          const holders = yield* redis.holders(key)
          assert.deepStrictEqual(holders.map((h) => h.jid), [], "a lock taken by a call that had already failed")
        }))
        yield* assertNoLocksLeft(prefix)
      }), 20_000)

    it.effect("a lock call that timed out is not replayed after the connection comes back", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const server = serverOf(source)
        if (server === undefined) return
        const pid = pidOf(server)
        const prefix = RedisTest.uniquePrefix("replay")
        // Reconnect after a second, so that another worker surely loads the scripts on the new server first.
        const store = Layer.fresh(
          Redis.layer({ url: source.url, timeout: TIMEOUT, client: { retryStrategy: () => 1_000 } })
        )
        yield* Effect.gen(function*() {
          const uj = yield* UniqueJob.make({ worker: "ReplayedJob", lock: "until_executed", lockPrefix: prefix })
          const digest = yield* uj.digest([1])
          const redis = yield* Redis.RedisService
          // The stalled server dies with the call unanswered, and comes back empty.
          const error = yield* whileStopped(
            pid,
            Effect.flip(uj.client(uj.job([1]), () => Effect.void)).pipe(Effect.tap(() => server.kill))
          )
          assert.strictEqual(error._tag, "RedisError")
          yield* server.restart
          // Another worker starts: building its store loads the scripts.
          yield* Effect.scoped(Layer.build(faultyStore(source.url)))
          // This connection comes back; its first answer comes after anything it sent again on reconnecting.
          const holders = yield* redis.holders(Lock.keyOf(uj.definition, digest, "queue")).pipe(
            Effect.retry({ schedule: Schedule.spaced(50), times: HANG / 50 })
          )
          assert.deepStrictEqual(holders.map((h) => h.jid), [], "a lock taken by a call that had already failed")
        }).pipe(Effect.scoped, Effect.provide(Layer.merge(store, MemoryQueue.layer())), quiet)
        yield* assertNoLocksLeft(prefix)
      }), 20_000)

    it.effect("SCRIPT FLUSH over and over mid-run: scripts reload transparently, nothing fails, 0 left", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("flush")
        const evals = Effect.promise(async () => {
          const info = await raw.info("commandstats")
          return Number(/cmdstat_eval:calls=(\d+)/.exec(info)?.[1] ?? 0)
        })
        const evalsBefore = yield* evals
        // No outage here: the store's timeout is a calm one, so a slow call on a busy machine is no failure.
        const { lag, result, tally } = yield* throughFault(source.url, prefix, (tally) =>
          Effect.gen(function*() {
            const rnd = prng(5)
            const okBefore = tally.ok
            const flushes = 100
            for (let i = 0; i < flushes; i++) {
              // A few calls between two flushes, at a random moment: the cache is gone under calls in flight.
              const ok = tally.ok
              yield* waitUntil(() => tally.ok >= ok + 3, HANG, "calls between two flushes")
              yield* Effect.sleep(rnd.int(6))
              yield* Effect.promise(() => raw.script("FLUSH"))
            }
            return { flushes, okDuring: tally.ok - okBefore }
          }), 37, CALM_TIMEOUT)
        const reloads = (yield* evals) - evalsBefore
        assert.strictEqual(tally.hangs, 0, "calls that hung")
        assert.deepStrictEqual(unexpectedFailures(tally, lag, []), [], failuresText(tally))
        assert.isAtLeast(result.okDuring, 3 * result.flushes)
        assert.isAbove(reloads, 0, "EVAL after NOSCRIPT")
        yield* assertNoLocksLeft(prefix)
        console.info(
          `fault SCRIPT FLUSH: ${result.flushes} flushes, ${result.okDuring} calls ok meanwhile, ` +
            `${reloads} reloads by EVAL, 0 failures, lag ${lag} ms, locks left 0`
        )
      }), 120_000)

    it.effect("client and server middleware interrupted at random points: no lock outlives its job", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const seed = Number(process.env.FAULTS_SEED ?? 4242)
        const iterations = Number(process.env.FAULTS_ITERATIONS ?? 300)
        const prefix = RedisTest.uniquePrefix("interrupt")
        // Interruptions, not outages: a calm timeout, so a slow call on a busy machine cannot leave a lock behind.
        const stats = yield* withStore(source.url, interruptions(prefix, seed, iterations), CALM_TIMEOUT)
        yield* assertNoLocksLeft(prefix)
        console.info(
          `fault interruption (seed ${seed}): ${iterations} iterations, ${stats.clients} enqueues interrupted ` +
            `(${stats.clientsCut} mid-way), ${stats.workerCuts} worker pools interrupted with ${stats.performsCut} ` +
            `jobs cut mid-run, ${stats.drained} jobs drained afterwards, ${stats.queuedWithoutLock} redelivered ` +
            `without their queue lock (they had started), locks left 0`
        )
      }), 300_000)

    for (const lock of ["while_executing", "until_and_while_executing"] as const) {
      it.effect(`${lock}: a worker process SIGKILLed mid-perform frees its lock within one lease; the job runs elsewhere`, () =>
        Effect.flatMap(
          RedisTest.TestRedis,
          // A calm timeout: a slow call here would be a RedisError where a conflict is expected.
          ({ source }) => withStore(source.url, killedMidPerform(lock, source.url), CALM_TIMEOUT)
        ),
        180_000)
    }
  })
})
