/**
 * The five lock types of the README's "Lock types", then debounce, one more run after the active one and a wait for
 * the running copy (`lockTimeout`), each as a short burst of enqueues through `UniqueJob` onto the in-process
 * `MemoryQueue`, on the real clock; then, given a Redis server, one more on real BullMQ workers through
 * `UniqueQueue`. Prints a timeline per scenario, checks each scenario's invariants as it goes, and ends with a
 * summary table; exits non-zero when an invariant does not hold. What a check says "while it runs" is held so: such a
 * scenario's runs wait for its script to release them, so a busy machine does not turn a check red.
 *
 *   npm start                                  a private redis-server, else the in-process memory store
 *   REDIS_URL=redis://127.0.0.1:6379 npm start  a Redis you run (keys under a prefix of this run, removed after)
 *   REDIS_SERVER_BIN=/nonexistent npm start     forces the memory-store fallback
 */
import { setTimeout as sleep } from "node:timers/promises"
import { DelayedError, type Job as BullJob, Queue, Worker } from "bullmq"
import { Redis as IORedis } from "ioredis"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import * as Latch from "effect/Latch"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as References from "effect/References"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as Cli from "effect-unique-jobs/Cli"
import {
  type Digest,
  type Job,
  type JobQueue,
  Locks,
  MemoryQueue,
  type Middleware,
  Options as LockOptions,
  Reaper,
  Redis,
  type Strategy,
  UniqueJob
} from "effect-unique-jobs"
import { BullMQ, UniqueQueue } from "effect-unique-jobs/bullmq"
import { RedisServer } from "effect-unique-jobs/testing"

// ---------------------------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------------------------

/** The demo itself went wrong: an invariant failed, or something it waited for never happened. */
class DemoError extends Data.TaggedError("DemoError")<{ readonly message: string }> {}

/** One execution of a perform, in milliseconds since the scenario started (sub-millisecond precision). */
interface Run {
  readonly job: Job.Job
  readonly start: number
  end: number | undefined
}

interface Stats {
  pushed: number
  skipped: number
  replaced: number
  rejected: number
  rescheduled: number
  performed: number
  failed: number
}

/** What a scenario's script can do. Enqueues and workers already have the scenario's queue. */
interface Scenario {
  readonly runs: ReadonlyArray<Run>
  readonly stats: Readonly<Stats>
  /** Pushes one job through the client wrapper and prints its outcome (unless `quiet`). */
  readonly enqueue: (
    args: ReadonlyArray<unknown>,
    quiet?: boolean
  ) => Effect.Effect<Strategy.ClientOutcome<void>, Middleware.ClientError, Redis.RedisService | JobQueue.JobQueue>
  /** `count` enqueues of the same arguments, one after the other. */
  readonly burst: (
    count: number,
    args: ReadonlyArray<unknown>
  ) => Effect.Effect<
    ReadonlyArray<Strategy.ClientOutcome<void>>,
    Middleware.ClientError,
    Redis.RedisService | JobQueue.JobQueue
  >
  /** Starts the workers (until the scenario ends); each job runs through the server wrapper. */
  readonly work: (
    concurrency: number
  ) => Effect.Effect<void, never, Redis.RedisService | JobQueue.JobQueue | Scope.Scope>
  readonly awaitIdle: Effect.Effect<void, DemoError>
  readonly waitFor: (what: string, done: () => boolean) => Effect.Effect<void, DemoError>
  /** Milliseconds since the scenario started. */
  readonly now: Effect.Effect<number>
  readonly sleepUntil: (ms: number) => Effect.Effect<void>
  readonly note: (text: string) => Effect.Effect<void>
  /** Prints the invariant as `ok` or `FAIL`; a failure fails the demo at the end. */
  readonly check: (holds: boolean, text: string) => Effect.Effect<void>
  /** A `held` scenario's runs wait, once started, until this (once for the scenario). */
  readonly release: Effect.Effect<void>
}

interface Spec {
  readonly name: string
  readonly title: string
  readonly about: string
  readonly options: UniqueJob.Options
  readonly performMs: number
  /** Each run, once started, waits for the script's `release` before its `performMs`. */
  readonly held?: boolean
  readonly script: (
    scenario: Scenario
  ) => Effect.Effect<void, DemoError | Middleware.ClientError, Redis.RedisService | JobQueue.JobQueue | Scope.Scope>
}

interface Result {
  readonly name: string
  readonly lock: string
  readonly stats: Stats
  readonly checks: number
  readonly failures: ReadonlyArray<string>
}

// ---------------------------------------------------------------------------------------------------------------
// Formatting
// ---------------------------------------------------------------------------------------------------------------

const shortJid = (jid: string): string => `${jid.slice(0, 6)}..`

const who = (job: Job.Job): string =>
  `${job.worker}(${job.args.map((a) => JSON.stringify(a)).join(", ")}) jid=${shortJid(job.jid)}`

const holdersText = (holders: ReadonlyArray<string>): string => holders.map(shortJid).join(", ")

const clientText = (outcome: Strategy.ClientOutcome<unknown>): string => {
  switch (outcome._tag) {
    case "Enqueued":
      return "-> Enqueued"
    case "Skipped":
      return `-> Skipped (held by ${holdersText(outcome.holders)})`
    case "Replaced":
      return `-> Replaced (${holdersText(outcome.replaced)})`
    case "Rejected":
      return `-> Rejected (${outcome.reason})`
  }
}

const serverText = (outcome: Strategy.ServerOutcome<unknown>, relative: (epochMs: number) => number): string => {
  switch (outcome._tag) {
    case "Performed":
      return "finished -> Performed"
    case "Skipped":
      return `-> Skipped (running: ${holdersText(outcome.holders)})`
    case "Rescheduled":
      return `-> Rescheduled (at +${relative(outcome.at)}ms; running: ${holdersText(outcome.holders)})`
    case "Rejected":
      return `-> Rejected (${outcome.reason})`
  }
}

const stamp = (ms: number): string => `+${String(Math.round(ms)).padStart(5)}ms`

const causeText = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error)
}

/** Plain-text table: the first column left-aligned, the others right-aligned. */
const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? "").length)))
  const format = (row: ReadonlyArray<string>) =>
    row.map((cell, i) => (i <= 1 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0))).join("  ").trimEnd()
  return [format(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(format)].join("\n")
}

/** The first pair of runs that overlap, described, or undefined when they ran one at a time. */
const overlap = (runs: ReadonlyArray<Run>): string | undefined => {
  const sorted = [...runs].sort((a, b) => a.start - b.start)
  for (let i = 1; i < sorted.length; i++) {
    const previous = sorted[i - 1]!
    const next = sorted[i]!
    if (previous.end === undefined || next.start < previous.end) {
      return `${who(next.job)} started at ${stamp(next.start)} while ${who(previous.job)} ran`
    }
  }
  return undefined
}

const count = (outcomes: ReadonlyArray<{ readonly _tag: string }>, tag: string): number =>
  outcomes.filter((o) => o._tag === tag).length

// ---------------------------------------------------------------------------------------------------------------
// A scenario: its own MemoryQueue and workers, one UniqueJob, a timeline
// ---------------------------------------------------------------------------------------------------------------

const run = (
  prefix: string,
  index: number,
  spec: Spec
): Effect.Effect<Result, DemoError | Middleware.ClientError | LockOptions.InvalidLockOptions, Redis.RedisService> =>
  Effect.gen(function*() {
    const unique = yield* UniqueJob.make({ ...spec.options, lockPrefix: prefix })
    const queue = yield* MemoryQueue.MemoryQueue
    const lockName = spec.options.lock
    yield* Console.log(`\n== ${index}. ${spec.title}: ${lockName} (${spec.options.worker}) ==`)
    yield* Console.log(`   ${spec.about}`)

    const startNanos = yield* Clock.currentTimeNanos
    const startMillis = yield* Clock.currentTimeMillis
    const now = Effect.map(Clock.currentTimeNanos, (nanos) => Number(nanos - startNanos) / 1e6)
    const relative = (epochMs: number) => epochMs - startMillis
    const stats: Stats = { pushed: 0, skipped: 0, replaced: 0, rejected: 0, rescheduled: 0, performed: 0, failed: 0 }
    const runs: Array<Run> = []
    const failures: Array<string> = []
    let checks = 0
    const released = yield* Latch.make(spec.held !== true)

    const line = (verb: string, text: string) =>
      Effect.flatMap(now, (ms) => Console.log(`${stamp(ms)}  ${verb.padEnd(7)} ${text}`))

    const enqueue: Scenario["enqueue"] = (args, quiet = false) =>
      Effect.tap(unique.enqueue(args), (outcome) => {
        switch (outcome._tag) {
          case "Enqueued":
            stats.pushed++
            break
          case "Replaced":
            stats.pushed++
            stats.replaced++
            break
          case "Skipped":
            stats.skipped++
            break
          case "Rejected":
            stats.rejected++
            break
        }
        return quiet ? Effect.void : line("enqueue", `${who(outcome.job)} ${clientText(outcome)}`)
      })

    const perform = (current: Job.Job) =>
      Effect.gen(function*() {
        const entry: Run = { job: current, start: yield* now, end: undefined }
        runs.push(entry)
        yield* line("run", `${who(current)} started`)
        yield* released.await
        yield* Effect.sleep(spec.performMs)
        entry.end = yield* now
      })

    const handler = (current: Job.Job) =>
      unique.server(current, perform(current)).pipe(
        Effect.tap((outcome) => {
          switch (outcome._tag) {
            case "Performed":
              stats.performed++
              break
            case "Skipped":
              stats.skipped++
              break
            case "Rescheduled":
              stats.rescheduled++
              break
            case "Rejected":
              stats.rejected++
              break
          }
          return line("run", `${who(current)} ${serverText(outcome, relative)}`)
        }),
        Effect.tapCause((cause) => {
          stats.failed++
          return line("run", `${who(current)} failed: ${causeText(cause)}`)
        })
      )

    const scenario: Scenario = {
      runs,
      stats,
      enqueue,
      burst: (times, args) => Effect.forEach(Array.from({ length: times }), () => enqueue(args)),
      work: (concurrency) =>
        Effect.andThen(
          line("--", `workers start (concurrency ${concurrency})`),
          queue.work(handler, { concurrency, onDeath: (dead) => unique.died(dead) })
        ),
      awaitIdle: queue.awaitIdle.pipe(
        Effect.timeoutOrElse({
          duration: "10 seconds",
          orElse: () =>
            Effect.fail(new DemoError({ message: `${spec.name}: the queue did not drain within 10 seconds` }))
        })
      ),
      waitFor: (what, done) =>
        Effect.sync(done).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (ok) => ok }),
          Effect.timeoutOrElse({
            duration: "5 seconds",
            orElse: () => Effect.fail(new DemoError({ message: `${spec.name}: gave up waiting for ${what}` }))
          }),
          Effect.asVoid
        ),
      now,
      sleepUntil: (ms) => Effect.flatMap(now, (current) => Effect.sleep(Math.max(0, ms - current))),
      note: (text) => line("--", text),
      check: (holds, text) =>
        Effect.suspend(() => {
          checks++
          if (!holds) failures.push(`${spec.name}: ${text}`)
          return line("check", `${holds ? "ok  " : "FAIL"}  ${text}`)
        }),
      release: Effect.andThen(line("--", "the held runs are released"), released.open)
    }

    yield* spec.script(scenario)
    return { name: spec.name, lock: spec.options.lock, stats: { ...stats }, checks, failures }
  }).pipe(Effect.scoped, Effect.provide(MemoryQueue.layer()))

// ---------------------------------------------------------------------------------------------------------------
// The five use cases
// ---------------------------------------------------------------------------------------------------------------

const enqueueOnce: Spec = {
  name: "enqueue once",
  title: "Enqueue once (throttle): the first job is kept",
  about: "locked at enqueue, unlocked just before perform: a burst collapses into its FIRST job " +
    "(BullMQ's simple deduplication); for the last one, see debounce",
  options: { worker: "SyncContactJob", lock: "until_executing", lockArgs: ([contact]) => [contact] },
  performMs: 200,
  script: (s) =>
    Effect.gen(function*() {
      const burst = yield* Effect.forEach([1, 2, 3, 4, 5], (edit) => s.enqueue([7, `edit ${edit}`]))
      yield* s.check(
        count(burst, "Enqueued") === 1 && count(burst, "Skipped") === 4,
        "a burst of 5 edits while queued: the first pushed, 4 skipped"
      )
      yield* s.work(2)
      yield* s.waitFor("the run to start", () => s.runs.length >= 1)
      const during = yield* s.enqueue([7, "edit 6"])
      yield* s.check(
        during._tag === "Enqueued",
        "an enqueue while it runs is accepted: the lock ended as the run began"
      )
      yield* s.awaitIdle
      yield* s.check(
        s.stats.performed === 2 && s.runs[0]?.job.args[1] === "edit 1",
        "2 runs: the burst's first job (edit 1), then the one enqueued during its run"
      )
    })
}

const exactlyOnce: Spec = {
  name: "exactly once",
  title: "Process exactly once",
  about: "locked at enqueue, unlocked after perform: no duplicate is queued or run while one is in flight",
  options: { worker: "ChargeCustomerJob", lock: "until_executed" },
  performMs: 200,
  held: true,
  script: (s) =>
    Effect.gen(function*() {
      const burst = yield* s.burst(5, [1])
      yield* s.check(
        count(burst, "Enqueued") === 1 && count(burst, "Skipped") === 4,
        "a burst of 5 for customer 1: 1 charge queued, 4 skipped"
      )
      yield* s.work(2)
      yield* s.waitFor("the charge to start", () => s.runs.length >= 1)
      const during = yield* s.enqueue([1])
      yield* s.check(during._tag === "Skipped", "an enqueue while the charge runs is refused")
      yield* s.release
      yield* s.awaitIdle
      const after = yield* s.enqueue([1])
      yield* s.check(after._tag === "Enqueued", "once the charge finished, a new one is accepted")
      yield* s.awaitIdle
      const clash = overlap(s.runs)
      yield* s.check(
        s.stats.performed === 2 && clash === undefined,
        `2 charges in all, never two at once${clash === undefined ? "" : ` (${clash})`}`
      )
    })
}

const ttlMs = 1_500

const onePerPeriod: Spec = {
  name: "one per period",
  title: "One per period",
  about: `locked at enqueue until lockTtl (${ttlMs} ms) passes, whatever the job does`,
  options: { worker: "SendDailyDigestJob", lock: "until_expired", lockTtl: ttlMs },
  performMs: 200,
  script: (s) =>
    Effect.gen(function*() {
      const burst = yield* s.burst(3, ["ann"])
      const lockedBy = yield* s.now
      yield* s.check(
        count(burst, "Enqueued") === 1 && count(burst, "Skipped") === 2,
        "a burst of 3: 1 digest queued, 2 skipped"
      )
      yield* s.work(1)
      yield* s.awaitIdle
      const after = yield* s.enqueue(["ann"])
      yield* s.check(after._tag === "Skipped", "after the digest was sent, still inside the window: skipped")
      yield* s.note(`waiting for the lock's TTL (${ttlMs} ms from the first enqueue) to pass`)
      yield* s.sleepUntil(lockedBy + ttlMs + 100)
      const next = yield* s.enqueue(["ann"])
      yield* s.check(next._tag === "Enqueued", "after the TTL: accepted")
      yield* s.awaitIdle
      yield* s.check(s.stats.performed === 2, "2 digests in all, one per window")
    })
}

const serialize: Spec = {
  name: "serialize",
  title: "Serialize per resource",
  about: "locked just before perform, unlocked after: duplicates queue freely but never run at the same time",
  options: {
    worker: "RebuildIndexJob",
    lock: "while_executing",
    onConflict: { server: "reschedule" },
    rescheduleDelay: 200
  },
  performMs: 150,
  held: true,
  script: (s) =>
    Effect.gen(function*() {
      yield* s.work(4)
      const burst = yield* s.burst(4, ["products"])
      yield* s.check(count(burst, "Enqueued") === 4, "4 duplicates all enter the queue (no lock at enqueue)")
      yield* s.waitFor("the 3 copies to meet the running one", () => s.stats.rescheduled >= 3)
      yield* s.release
      yield* s.awaitIdle
      const clash = overlap(s.runs)
      yield* s.check(
        s.stats.performed === 4 && new Set(s.runs.map((r) => r.job.jid)).size === 4,
        "each of the 4 ran once in the end"
      )
      yield* s.check(s.stats.rescheduled >= 3, "the 3 that met a running copy were rescheduled")
      yield* s.check(clash === undefined, `the runs never overlapped${clash === undefined ? "" : ` (${clash})`}`)
    })
}

const enqueueOnceRunSerialized: Spec = {
  name: "enqueue once, run serialized",
  title: "Enqueue once, run serialized",
  about: "queue lock from enqueue, handed over to a run lock at perform: unique in the queue and serialized",
  options: {
    worker: "RebuildReportJob",
    lock: "until_and_while_executing",
    onConflict: { client: "log", server: "reschedule" },
    rescheduleDelay: 200
  },
  performMs: 200,
  held: true,
  script: (s) =>
    Effect.gen(function*() {
      const first = yield* s.enqueue([42])
      const second = yield* s.enqueue([42])
      const other = yield* s.enqueue([43])
      yield* s.check(
        first._tag === "Enqueued" && second._tag === "Skipped" && other._tag === "Enqueued",
        "a second 42 while the first is queued: skipped; 43 is independent"
      )
      yield* s.work(4)
      yield* s.waitFor("report 42 to start", () => s.runs.some((r) => r.job.args[0] === 42))
      const during = yield* s.enqueue([42])
      yield* s.check(during._tag === "Enqueued", "42 while 42 runs: accepted (its queue lock became the run lock)")
      yield* s.waitFor("the new 42 to be rescheduled", () => s.stats.rescheduled >= 1)
      const waiting = yield* s.enqueue([42])
      yield* s.check(
        waiting._tag === "Skipped",
        "42 while the new copy waits to run again: skipped (it kept its queue lock)"
      )
      yield* s.release
      yield* s.awaitIdle
      const runs42 = s.runs.filter((r) => r.job.args[0] === 42)
      const runs43 = s.runs.filter((r) => r.job.args[0] === 43)
      const clash = overlap(runs42)
      yield* s.check(
        runs42.length === 2 && clash === undefined,
        `42 ran twice, one after the other${clash === undefined ? "" : ` (${clash})`}`
      )
      const first42 = runs42[0]
      yield* s.check(
        runs43.length === 1 && first42?.end !== undefined && runs43[0]!.start < first42.end,
        "43 ran once, alongside the first 42"
      )
    })
}

const debounceDelayMs = 400
const debounceMaxWaitMs = 1_000

const debounce: Spec = {
  name: "debounce",
  title: "Debounce: the LAST job of a burst runs, once",
  about: `debounce: { delay: ${debounceDelayMs} ms, maxWait: ${debounceMaxWaitMs} ms }: each enqueue replaces the ` +
    "waiting job and puts it off, never later than maxWait after the window's first enqueue",
  options: {
    worker: "ReindexAccountJob",
    lock: "until_executing",
    lockArgs: ([account]) => [account],
    debounce: { delay: debounceDelayMs, maxWait: debounceMaxWaitMs }
  },
  performMs: 50,
  script: (s) =>
    Effect.gen(function*() {
      yield* s.work(2)
      const burst = yield* Effect.forEach([1, 2, 3, 4, 5], (edit) => s.enqueue([9, `edit ${edit}`]))
      const last = yield* s.now
      yield* s.check(
        burst[0]?._tag === "Enqueued" && count(burst, "Replaced") === 4,
        "a burst of 5 edits: the first enqueued, each later one replaced the waiting job"
      )
      yield* s.awaitIdle
      const first = s.runs[0]
      yield* s.check(
        s.runs.length === 1 && first?.job.args[1] === "edit 5",
        "one run, with the last enqueue's data (edit 5)"
      )
      if (first !== undefined) {
        const after = Math.round(first.start - last)
        yield* s.note(`it started ${after} ms after the last enqueue (delay ${debounceDelayMs})`)
      }
      yield* s.note(`a steady stream: an edit every 100 ms for ${(2 * debounceMaxWaitMs) / 1000} s (not printed)`)
      const from = yield* s.now
      const stream: Array<Strategy.ClientOutcome<void>> = []
      let edit = 5
      while ((yield* s.now) - from < 2 * debounceMaxWaitMs) {
        stream.push(yield* s.enqueue([9, `edit ${++edit}`], true))
        yield* Effect.sleep(100)
      }
      const to = yield* s.now
      yield* s.note(
        `the stream's ${stream.length} edits: ${count(stream, "Enqueued")} Enqueued (each opened a window), ` +
          `${count(stream, "Replaced")} Replaced`
      )
      yield* s.check(
        s.runs.some((r) => r.start > from && r.start < to),
        "it ran during the stream: maxWait bounded the window, which delay alone would have put off to its end"
      )
      yield* s.awaitIdle
      yield* s.check(s.runs.at(-1)?.job.args[1] === `edit ${edit}`, `the last run had the last edit (edit ${edit})`)
    })
}

const oneMoreRun: Spec = {
  name: "one more run",
  title: "One more run after the active one (BullMQ's keepLastIfActive)",
  about: "until_and_while_executing, onConflict { client: replace, server: reschedule }: changes while it runs " +
    "give exactly one more run, after it, with the newest data",
  options: {
    worker: "SyncMailboxJob",
    lock: "until_and_while_executing",
    lockArgs: ([mailbox]) => [mailbox],
    onConflict: { client: "replace", server: "reschedule" },
    rescheduleDelay: 150
  },
  performMs: 100,
  held: true,
  script: (s) =>
    Effect.gen(function*() {
      yield* s.work(2)
      const first = yield* s.enqueue([3, "change 1"])
      yield* s.waitFor("the first sync to start", () => s.runs.length >= 1)
      const changes = yield* Effect.forEach([2, 3, 4], (change) => s.enqueue([3, `change ${change}`]))
      yield* s.check(
        first._tag === "Enqueued" && changes[0]?._tag === "Enqueued" && count(changes, "Replaced") === 2,
        "3 changes while it runs: the first is the follow-up (Enqueued), each later one replaces it (Replaced)"
      )
      yield* s.release
      yield* s.awaitIdle
      const clash = overlap(s.runs)
      yield* s.check(
        s.runs.length === 2 && s.runs[1]?.job.args[1] === "change 4" && clash === undefined,
        `2 runs: the active one, then one more with the newest data (change 4), never at once${
          clash === undefined ? "" : ` (${clash})`
        }`
      )
    })
}

const waitForTurn: Spec = {
  name: "wait for the running copy",
  title: "Wait for the running copy (lockTimeout)",
  about: "while_executing with lockTimeout 10 s: a copy that finds the run lock held waits for its release " +
    "(woken by it, no polling) and then runs, where it would be skipped (onConflict log)",
  options: { worker: "ExportLedgerJob", lock: "while_executing", lockTimeout: "10 seconds" },
  performMs: 150,
  script: (s) =>
    Effect.gen(function*() {
      yield* s.work(3)
      const burst = yield* s.burst(3, ["ledger"])
      yield* s.check(count(burst, "Enqueued") === 3, "3 copies enter the queue (no lock at enqueue)")
      yield* s.awaitIdle
      const clash = overlap(s.runs)
      yield* s.check(
        s.stats.performed === 3 && s.stats.skipped === 0 && s.stats.rescheduled === 0 && clash === undefined,
        `all 3 ran, one at a time, and none was skipped${clash === undefined ? "" : ` (${clash})`}`
      )
      const sorted = [...s.runs].sort((a, b) => a.start - b.start)
      const gaps = sorted.slice(1).map((r, i) => Math.round(r.start - (sorted[i]?.end ?? r.start)))
      yield* s.note(`each waiting copy started ${gaps.join(" and ")} ms after the one before it ended`)
    })
}

const specs: ReadonlyArray<Spec> = [
  enqueueOnce,
  exactlyOnce,
  onePerPeriod,
  serialize,
  enqueueOnceRunSerialized,
  debounce,
  oneMoreRun,
  waitForTurn
]

// ---------------------------------------------------------------------------------------------------------------
// On BullMQ: the same locks under real BullMQ workers, through the Promise face (`UniqueQueue`)
// ---------------------------------------------------------------------------------------------------------------

const feedCount = 20
const feedPerformMs = 80
const feedWorker = "RefreshFeedJob"
const feedQueue = "feeds"

const feedOptions = {
  lock: "until_and_while_executing",
  onConflict: { client: "log", server: "reschedule" },
  rescheduleDelay: 100
} satisfies LockOptions.Options

interface Feed {
  readonly feed: number
}

/**
 * 100 adds of 20 feeds through `UniqueQueue` onto a BullMQ queue in the demo's Redis, run by two BullMQ Workers
 * (concurrency 5) in this process: 40 before the workers start, then 60 feed by feed while they run. BullMQ's keys
 * go under this run's prefix, so a shared Redis is cleaned up with the rest.
 */
const onBullMQ = (
  prefix: string,
  index: number,
  url: string
): Effect.Effect<
  Result,
  DemoError | LockOptions.InvalidLockOptions | Digest.DigestError | Redis.RedisError,
  Redis.RedisService
> =>
  Effect.gen(function*() {
    const name = "on BullMQ"
    yield* Console.log(`\n== ${index}. On real BullMQ workers: ${feedOptions.lock} (${feedWorker}) ==`)
    yield* Console.log(
      `   100 adds of ${feedCount} feeds through UniqueQueue, run by 2 BullMQ Workers (concurrency 5); ` +
        "a copy that meets the running one is moved to delayed"
    )

    const base = performance.now()
    const now = () => performance.now() - base
    const line = (verb: string, text: string) => Console.log(`${stamp(now())}  ${verb.padEnd(7)} ${text}`)
    const stats: Stats = { pushed: 0, skipped: 0, replaced: 0, rejected: 0, rescheduled: 0, performed: 0, failed: 0 }
    const runs: Array<Run> = []
    const errors: Array<string> = []
    const failures: Array<string> = []
    let checks = 0
    const check = (holds: boolean, text: string) =>
      Effect.suspend(() => {
        checks++
        if (!holds) failures.push(`${name}: ${text}`)
        return line("check", `${holds ? "ok  " : "FAIL"}  ${text}`)
      })
    const failWith = (what: string) => (cause: unknown) =>
      new DemoError({ message: `${name}: ${what}: ${cause instanceof Error ? cause.message : String(cause)}` })

    // The worker computes each job's digest from its name, queue and data: a UniqueJob with the same options
    // computes the same one, to look the locks up by.
    const feeds = Array.from({ length: feedCount }, (_, feed) => feed)
    const digests = yield* Effect.flatMap(
      UniqueJob.make({ ...feedOptions, lockPrefix: prefix, worker: feedWorker, queue: feedQueue }),
      (job) => Effect.forEach(feeds, (feed) => job.digest([{ feed }]))
    )
    const locks = yield* Locks.make({ prefix })
    const shown = Effect.forEach(digests, (digest) => locks.show(digest))

    const connection = { url }
    const bullPrefix = `${prefix}:bull`
    const unique = yield* Effect.acquireRelease(
      Effect.try({
        try: () =>
          UniqueQueue.make<Feed>(new Queue(feedQueue, { connection, prefix: bullPrefix }), {
            ...feedOptions,
            lockPrefix: prefix,
            redis: { url }
          }),
        catch: failWith("UniqueQueue.make failed")
      }),
      (unique) => Effect.promise(() => unique.close())
    )

    const add = (feed: number) =>
      Effect.tryPromise({ try: () => unique.add(feedWorker, { feed }), catch: failWith("an add failed") }).pipe(
        Effect.tap((outcome) =>
          Effect.sync(() => {
            if (outcome._tag === "Enqueued" || outcome._tag === "Replaced") stats.pushed++
            if (outcome._tag === "Skipped") stats.skipped++
            if (outcome._tag === "Replaced") stats.replaced++
            if (outcome._tag === "Rejected") stats.rejected++
          })
        )
      )
    const tally = (outcomes: ReadonlyArray<{ readonly _tag: string }>) =>
      `${count(outcomes, "Enqueued")} Enqueued, ${count(outcomes, "Skipped")} Skipped`
    const pending = Effect.map(
      Effect.tryPromise({
        try: () => unique.queue.getJobCounts("active", "wait", "delayed", "prioritized", "waiting-children"),
        catch: failWith("reading the queue's counts failed")
      }),
      (counts) => Object.values(counts).reduce((n, c) => n + c, 0)
    )
    const drained = pending.pipe(
      Effect.repeat({ schedule: Schedule.spaced("10 millis"), until: (n) => n === 0 }),
      Effect.timeoutOrElse({
        duration: "10 seconds",
        orElse: () => Effect.fail(new DemoError({ message: `${name}: the queue did not drain within 10 seconds` }))
      })
    )
    const started = (jid: string) =>
      Effect.sync(() => runs.some((r) => r.job.jid === jid)).pipe(
        Effect.repeat({ schedule: Schedule.spaced("2 millis"), until: (ok) => ok }),
        Effect.timeoutOrElse({
          duration: "5 seconds",
          orElse: () => Effect.fail(new DemoError({ message: `${name}: gave up waiting for job ${jid} to run` }))
        })
      )

    // A feed's gate holds its runs (once started) until the script opens it: "while it runs" is then so however
    // busy the machine is.
    const gates = new Map<number, { readonly opened: Promise<void>; readonly open: () => void }>()
    const hold = (feed: number) => {
      let open = () => {}
      const opened = new Promise<void>((resolve) => (open = resolve))
      gates.set(feed, { opened, open })
    }
    const perform = unique.processor(async (job) => {
      const entry: Run = { job: BullMQ.toJob(job), start: now(), end: undefined }
      runs.push(entry)
      await gates.get(job.data.feed)?.opened
      await sleep(feedPerformMs)
      entry.end = now()
      stats.performed++
    })
    // A rescheduled attempt ends with BullMQ's DelayedError: the job is back in delayed, under its id.
    const processor = async (job: BullJob<Feed>, token?: string, signal?: AbortSignal) => {
      try {
        return await perform(job, token, signal)
      } catch (error) {
        if (error instanceof DelayedError) {
          stats.rescheduled++
        } else {
          stats.failed++
          errors.push(`job ${job.id}: ${String(error)}`)
        }
        throw error
      }
    }

    const before = yield* Effect.forEach([...feeds, ...feeds], add)
    yield* line("add", `40 adds, 2 per feed, before the workers start: ${tally(before)}`)
    const queued = yield* shown
    yield* check(
      count(before, "Enqueued") === feedCount && queued.every((lock) => lock.queue.holders.length === 1),
      "one job per feed queued, holding its feed's queue lock in this Redis; the second add of each skipped"
    )

    yield* Effect.forEach([1, 2], () =>
      Effect.acquireRelease(
        Effect.sync(() =>
          new Worker<Feed>(feedQueue, processor, { connection, prefix: bullPrefix, concurrency: 5 }).on(
            "error",
            (error) => errors.push(`worker: ${error.message}`)
          )
        ),
        (worker) =>
          Effect.promise(() => {
            // A script that stopped early left a gate shut: its job must end for the worker to close.
            for (const gate of gates.values()) gate.open()
            return worker.close()
          })
      ))
    yield* line("--", "2 BullMQ workers start (concurrency 5 each)")
    yield* drained
    yield* line("--", `the ${runs.length} queued jobs ran, 10 at a time`)

    // Feed by feed: an add while it is idle, one once that job runs (held by its gate), one while the copy waits.
    const byFeed = yield* Effect.forEach(feeds, (feed) =>
      Effect.gen(function*() {
        hold(feed)
        const idle = yield* add(feed)
        yield* started(idle.job.jid)
        const adds = [idle, yield* add(feed), yield* add(feed)] as const
        gates.get(feed)?.open()
        return adds
      }))
    yield* line("add", `60 adds, 3 per feed (idle, running, its copy waiting): ${tally(byFeed.flat())}`)
    yield* check(
      byFeed.every(([idle, running, waiting]) =>
        idle._tag === "Enqueued" && running._tag === "Enqueued" && waiting._tag === "Skipped"
      ),
      "each feed: accepted when idle, accepted while it runs (its queue lock became the run lock), " +
        "skipped while that copy waits"
    )
    yield* drained
    const bull = yield* Effect.tryPromise({
      try: () => unique.queue.getJobCounts("completed", "failed"),
      catch: failWith("reading the queue's counts failed")
    })
    yield* line(
      "--",
      `the queue drained: ${stats.performed} runs, ${stats.rescheduled} copies rescheduled, ${stats.failed} failed; ` +
        `BullMQ counts ${bull.completed} completed, ${bull.failed} failed`
    )

    const enqueued = [...before, ...byFeed.flat()].flatMap((o) => (o._tag === "Enqueued" ? [o.job.jid] : []))
    const ran = runs.map((r) => r.job.jid)
    yield* check(
      ran.length === enqueued.length && new Set(ran).size === ran.length &&
        enqueued.every((jid) => ran.includes(jid)) && bull.completed === enqueued.length,
      `each Enqueued job ran exactly once: ${ran.length} runs of ${enqueued.length} jobs, ` +
        `${bull.completed} completed in BullMQ`
    )
    const clashes = feeds.flatMap((feed) => {
      const clash = overlap(runs.filter((r) => (r.job.args[0] as Feed).feed === feed))
      return clash === undefined ? [] : [clash]
    })
    yield* check(
      clashes.length === 0,
      `no two runs of one feed overlapped, across both workers${clashes.length === 0 ? "" : ` (${clashes[0]})`}`
    )
    const left = (yield* shown).flatMap(({ queue, run }) => [queue, run]).filter((lock) =>
      lock.holders.length > 0 || lock.ttlMs !== undefined || lock.indexScore !== undefined
    )
    yield* check(
      left.length === 0,
      `no lock left behind: no queue or run lock key, nor index entry, for any of the ${feedCount} feeds`
    )
    yield* check(
      stats.failed === 0 && bull.failed === 0 && errors.length === 0,
      `no job failed and no worker reported an error${errors.length === 0 ? "" : ` (${errors.join("; ")})`}`
    )
    return { name, lock: feedOptions.lock, stats: { ...stats }, checks, failures }
  }).pipe(Effect.scoped)

// ---------------------------------------------------------------------------------------------------------------
// Redis: REDIS_URL, else a private redis-server, else the memory store
// ---------------------------------------------------------------------------------------------------------------

interface Choice {
  readonly description: string
  /** The url the command line can reach it at; undefined for the in-process store. */
  readonly url: string | undefined
  readonly layer: Layer.Layer<Redis.RedisService, Redis.RedisError>
  /** Set for a Redis that outlives the demo: its keys are removed at the end. */
  readonly shared: Redacted.Redacted<string> | undefined
}

const displayUrl = (url: string): string => {
  try {
    const parsed = new URL(url)
    if (parsed.password !== "") parsed.password = "***"
    return parsed.toString()
  } catch {
    return "(an unparseable URL)"
  }
}

const chooseRedis: Effect.Effect<Choice, never, Scope.Scope> = Effect.gen(function*() {
  const url = yield* Config.option(Config.Redacted("REDIS_URL")).pipe(
    Effect.map(Option.filter((u) => Redacted.value(u) !== "")),
    Effect.orElseSucceed(() => Option.none<Redacted.Redacted<string>>())
  )
  if (Option.isSome(url)) {
    return {
      description: `REDIS_URL ${displayUrl(Redacted.value(url.value))}`,
      url: Redacted.value(url.value),
      layer: Redis.layer({ url: url.value }),
      shared: url.value
    }
  }
  return yield* RedisServer.start.pipe(
    Effect.map((server): Choice => ({
      description: `private redis-server on 127.0.0.1:${server.port}`,
      url: server.url,
      layer: Redis.layer({ url: server.url }),
      shared: undefined
    })),
    Effect.catch((error) =>
      Effect.succeed<Choice>({
        description: error.reason === "redis-server is not installed"
          ? "in-process memory store (no redis-server found, REDIS_URL unset)"
          : `in-process memory store (${error.reason}; REDIS_URL unset)`,
        url: undefined,
        layer: Redis.layerMemory,
        shared: undefined
      })
    )
  )
})

/** Deletes this run's keys from a shared Redis (an `until_expired` lock and the digests index outlive the demo). */
const cleanup = (url: Redacted.Redacted<string>, prefix: string) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const client = new IORedis(Redacted.value(url), { lazyConnect: true, maxRetriesPerRequest: 1 })
      client.on("error", () => {})
      return client
    }),
    (client) =>
      Effect.tryPromise(async () => {
        await client.connect()
        const keys: Array<string> = []
        let cursor = "0"
        do {
          const [next, batch] = await client.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 500)
          cursor = next
          keys.push(...batch)
        } while (cursor !== "0")
        if (keys.length > 0) await client.del(...keys)
        return keys.length
      }),
    (client) => Effect.sync(() => client.disconnect())
  ).pipe(
    Effect.flatMap((removed) => Console.log(`Cleanup: removed ${removed} key(s) under ${prefix}: from REDIS_URL`)),
    Effect.catch((error) => Console.log(`Cleanup: could not remove the keys under ${prefix}: (${String(error)})`))
  )

// ---------------------------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------------------------

const summary = (results: ReadonlyArray<Result>): string =>
  table(
    ["scenario", "lock type", "pushed", "skipped", "replaced", "rejected", "rescheduled", "run", "failed"],
    results.map(({ lock, name, stats }, i) => [
      `${i + 1}. ${name}`,
      lock,
      ...[stats.pushed, stats.skipped, stats.replaced, stats.rejected, stats.rescheduled, stats.performed, stats.failed]
        .map(String)
    ])
  )

// One line per scenario, for the end: what a newcomer should take away.
const showed: Record<string, string> = {
  "enqueue once": "until_executing: a burst of enqueues became its first job; a new one is accepted once it runs",
  "exactly once": "until_executed: no second copy was queued or run until the first had finished",
  "one per period": "until_expired: one job per lockTtl window, however fast the first one finished",
  "serialize": "while_executing: duplicates all queued, each ran once, never two at a time (reschedule)",
  "enqueue once, run serialized": "until_and_while_executing: one copy waiting, one running, never two of either",
  "debounce": "debounce: a burst became one run of its last job; maxWait bounded a steady stream",
  "one more run": "replace + reschedule: changes during a run became one more run, with the newest data",
  "wait for the running copy": "lockTimeout: copies waited for the running one's release instead of being skipped",
  "on BullMQ": "the same on real BullMQ workers: every accepted job ran once, no overlap, no lock left behind"
}

const lessons = (results: ReadonlyArray<Result>): string =>
  ["What it showed:", ...results.map((r, i) => `  ${i + 1}. ${showed[r.name] ?? r.name}`)].join("\n")

const statsLine = (stats: Locks.Stats) =>
  `index ${stats.indexSize} (queue ${stats.byPhase.queue}, run ${stats.byPhase.run}), stale ${stats.stale}` +
  (stats.oldest === undefined ? "" : `, oldest ${stats.oldest.name}`)

// What an operator sees after the scenarios: the admin API's stats, a reaper pass (it removes what no live holder
// needs: here the until_expired locks whose TTL has passed), and the stats again.
const operate = (prefix: string, url: string | undefined) =>
  Effect.gen(function*() {
    const locks = yield* Locks.make({ prefix })
    yield* Console.log(`\nOperations (${prefix}):`)
    yield* Console.log(`  stats        ${statsLine(yield* locks.stats)}`)
    yield* Console.log(
      "               stale: index members whose holders have all ended (scenario 3's lock, its TTL passed); " +
        "the reaper removes them"
    )
    const pass = yield* Reaper.runOnce({ prefix })
    yield* Console.log(
      `  reaper pass  ${pass.scanned} members walked in ${pass.steps} step(s): removed ${pass.members} members, ` +
        `${pass.holders} ended holders, ${pass.orphans} orphans`
    )
    yield* Console.log(`  stats        ${statsLine(yield* locks.stats)}`)
    if (url === undefined) return
    // The same, from the command line (what `npx unique-jobs stats --prefix …` prints).
    yield* Console.log(`\n$ unique-jobs stats --prefix ${prefix}`)
    yield* Cli.run(["node", "unique-jobs", "stats", "--prefix", prefix, "--redis-url", url]).pipe(
      Effect.provide(Cli.platform),
      Effect.catch((error) => Console.log(`  (the command failed: ${String(error)})`))
    )
  })

const program = Effect.gen(function*() {
  const prefix = `demo-${process.pid}-${Date.now().toString(36)}`
  const redis = yield* chooseRedis
  yield* Console.log(`Redis: ${redis.description}`)
  yield* Console.log(`Lock prefix: ${prefix}`)

  const results = yield* Effect.forEach(specs, (spec, i) => run(prefix, i + 1, spec)).pipe(
    Effect.flatMap((results) =>
      redis.url === undefined
        ? Effect.as(
          Console.log(`\n== ${specs.length + 1}. On real BullMQ workers: skipped (BullMQ needs a Redis server) ==`),
          results
        )
        : Effect.map(onBullMQ(prefix, specs.length + 1, redis.url), (result) => [...results, result])
    ),
    Effect.tap(() => operate(prefix, redis.url)),
    Effect.provide(redis.layer)
  )
  if (redis.shared !== undefined) yield* cleanup(redis.shared, prefix)

  yield* Console.log(`\n${summary(results)}\n`)
  yield* Console.log(`${lessons(results)}\n`)
  const checks = results.reduce((n, r) => n + r.checks, 0)
  const failures = results.flatMap((r) => r.failures)
  const failed = results.filter((r) => r.stats.failed > 0).map((r) => `${r.name}: ${r.stats.failed} job(s) failed`)
  if (failures.length > 0 || failed.length > 0) {
    const lines = [...failures, ...failed].map((f) => `  - ${f}`).join("\n")
    const head = `${failures.length} of ${checks} invariants failed, ${failed.length} scenario(s) had failed jobs`
    return yield* new DemoError({ message: `${head}:\n${lines}` })
  }
  yield* Console.log(`All ${checks} invariants held.`)
}).pipe(Effect.scoped)

const main = program.pipe(
  Effect.catchCause((cause) =>
    Effect.andThen(
      Console.error(
        Option.match(Cause.findErrorOption(cause), {
          onNone: () => `\nFAILED: the demo stopped on a defect\n${Cause.pretty(cause)}`,
          onSome: (error) =>
            error instanceof DemoError
              ? `\nFAILED: ${error.message}`
              : `\nFAILED: the demo stopped on an error: ${causeText(cause)}`
        })
      ),
      Effect.sync(() => {
        process.exitCode = 1
      })
    )
  ),
  Effect.provideService(References.MinimumLogLevel, "Warn")
)

Effect.runPromise(main).catch((defect: unknown) => {
  process.exitCode = 1
  return Promise.reject(defect)
})
