/**
 * A worker in a process of its own, for the multi-process race tests and the crash tests: each run has its own Redis
 * connection (`Redis.layer({ url })`) and its own in-process queue, and hammers a few digests of one worker. Started
 * by `test/support/workers.ts` as `node --import tsx test/support/worker-process.ts [idle ms]`; one process serves
 * several runs, one after another, so the tests pay for Node's start once.
 *
 * Every execution is recorded with Redis' own order and time: one script of `TIME`, `INCR <prefix>:seq` and `HLEN` of
 * the lock's holders hash, at perform start and at perform end, on a second connection. The INCR gives a total order
 * of the records of all processes (Redis runs one command at a time) without making any worker wait for another.
 *
 * Protocol: `UP` on stdout once loaded. `RUN <id> <json Config>` on stdin: it connects and says `READY <id>`, waits
 * for `GO <id>` (so that every process starts at once), and ends with `RESULT <id> <json Result>`, or `ERROR <id> ...`
 * and exit 1. A `hold` run says `STARTED <id> <json>` once its perform holds the execution lock. A run performs a fixed
 * number of executions, however long they take; only a run with no outcome for `maxMs` ends early, as a hang (an
 * error, never a partial result). The process exits when its stdin closes (the test process died) and after idling.
 */
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as References from "effect/References"
import * as MemoryQueue from "../../src/adapters/MemoryQueue.js"
import type * as Job from "../../src/Job.js"
import { JobQueue } from "../../src/JobQueue.js"
import * as Redis from "../../src/Redis.js"
import * as UniqueJob from "../../src/UniqueJob.js"

export type Mode = "while_executing" | "until_executed" | "until_and_while_executing" | "hold"

export interface Config {
  readonly mode: Mode
  readonly url: string
  readonly prefix: string
  readonly worker: string
  /** The digests hammered: the job arguments `[0]` .. `[digests - 1]`. */
  readonly digests: number
  readonly lockLimit?: number | undefined
  readonly lockLease?: number | undefined
  /** Concurrent contenders (`while_executing`) or producers (queue modes). */
  readonly fibers: number
  /** Queue workers (queue modes). */
  readonly concurrency: number
  /** Executions this process performs before it stops (a few more at most: fibers already under way finish). */
  readonly target: number
  /** A run with no outcome for this long hangs: it ends with ERROR (a `hold` run, which has none, after this long). */
  readonly maxMs: number
  /** `Redis.layer({ timeout })`. */
  readonly timeout: number
  /** `hold` mode: the lock type of the job that is held (and killed) mid-perform. */
  readonly holdLock?: "while_executing" | "until_and_while_executing" | undefined
  /** `hold` mode: the jid of the held job. */
  readonly jid?: string | undefined
  readonly seed: number
}

/** `[digest index, start seq, end seq, start µs, end µs, holders at start, holders at end]`, Redis' numbers. */
export type Execution = readonly [number, number, number, number, number, number, number]

export interface Result {
  readonly pid: number
  readonly performed: number
  readonly skipped: number
  readonly rescheduled: number
  /** Failures and outcomes that should not happen; the test asserts there are none. */
  readonly unexpected: ReadonlyArray<string>
  /** Performs (run lock, or the whole perform for `until_executed`). */
  readonly runs: ReadonlyArray<Execution>
  /** Queue phases: from inside the enqueue to the dequeue that ran (`until_and_while_executing`) or the perform end. */
  readonly queued: ReadonlyArray<Execution>
  readonly elapsedMs: number
}

// A small deterministic PRNG (xorshift32), seeded per run.
const prng = (seed: number) => {
  let state = (seed >>> 0) || 1
  return () => {
    state ^= state << 13
    state ^= state >>> 17
    state ^= state << 5
    return (state >>> 0) / 4294967296
  }
}

const say = (line: string) => process.stdout.write(`${line}\n`)

// Commands on stdin, one a line: `RUN <id> <json Config>`, `GO <id>`. The process lives until its stdin closes (the
// test process ended or died), or until it has had nothing to do for IDLE_MS.
const IDLE_MS = Number(process.argv[2] ?? 120_000)
const goes = new Map<string, () => void>()
const gone = new Set<string>()
const waitForGo = (id: string) =>
  new Promise<void>((resolve) => {
    if (gone.has(id)) resolve()
    else goes.set(id, resolve)
  })
let idle: NodeJS.Timeout | undefined
let running = 0
const touch = () => {
  if (idle !== undefined) clearTimeout(idle)
  idle = running > 0 ? undefined : setTimeout(() => process.exit(4), IDLE_MS)
}
let buffer = ""
process.stdin.setEncoding("utf8")
process.stdin.on("data", (chunk: string) => {
  buffer += chunk
  let newline = buffer.indexOf("\n")
  while (newline >= 0) {
    const line = buffer.slice(0, newline)
    buffer = buffer.slice(newline + 1)
    newline = buffer.indexOf("\n")
    const [command, id = "", ...rest] = line.split(" ")
    if (command === "GO") {
      gone.add(id)
      goes.get(id)?.()
    } else if (command === "RUN") {
      start(id, JSON.parse(rest.join(" ")) as Config)
    }
  }
})
process.stdin.on("end", () => process.exit(2))
touch()
say("UP")

interface Stamp {
  readonly seq: number
  readonly us: number
  readonly holders: number
}

/** What a run has done so far, for the message of a run that hangs. */
interface Progress {
  performed: number
  skipped: number
  rescheduled: number
}

const program = (id: string, config: Config, queue: MemoryQueue.MemoryQueue, done: Progress) => Effect.gen(function*() {
  const random = prng(config.seed)
  const pick = (n: number) => Math.floor(random() * n)
  const raw = yield* Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new IORedis(config.url, { lazyConnect: true, maxRetriesPerRequest: 0 })
      client.on("error", () => {})
      await client.connect()
      return client
    }),
    (client) => Effect.sync(() => client.disconnect())
  )
  const seqKey = `${config.prefix}:seq`
  // One command, so the record is atomic and cheap: Redis time, the next number of the shared sequence, the holders.
  const stampScript = "local t = redis.call('TIME') " +
    "return {t[1], t[2], redis.call('INCR', KEYS[1]), redis.call('HLEN', KEYS[2])}"
  raw.defineCommand("stamp", { numberOfKeys: 2, lua: stampScript })
  const stampClient = raw as unknown as {
    stamp(seqKey: string, holdersKey: string): Promise<[string, string, number, number]>
  }
  const stamp = (holdersKey: string): Effect.Effect<Stamp> =>
    Effect.promise(async () => {
      const [s, us, seq, holders] = await stampClient.stamp(seqKey, holdersKey)
      return { seq, us: Number(s) * 1_000_000 + Number(us), holders }
    })
  const execution = (d: number, start: Stamp, end: Stamp): Execution => [
    d,
    start.seq,
    end.seq,
    start.us,
    end.us,
    start.holders,
    end.holders
  ]

  const lock = config.mode === "hold" ? config.holdLock ?? "while_executing" : config.mode
  const uj = yield* UniqueJob.make({
    worker: config.worker,
    lock,
    lockLimit: config.lockLimit,
    lockLease: config.lockLease,
    lockPrefix: config.prefix,
    onConflict: lock === "until_and_while_executing" && config.mode !== "hold"
      ? { client: "log", server: "reschedule" }
      : "log",
    // Only the reschedule strategy reads it (the options refuse it otherwise).
    rescheduleDelay: lock === "until_and_while_executing" && config.mode !== "hold" ? 5 : undefined
  })
  const digests = yield* Effect.forEach(Array.from({ length: config.digests }, (_, d) => d), (d) => uj.digest([d]))
  const queueKey = (d: number) => `${digests[d]}:LOCKED`
  const runKey = (d: number) => `${digests[d]}:RUN:LOCKED`

  const runs: Array<Execution> = []
  const queued: Array<Execution> = []
  const unexpected: Array<string> = []

  say(`READY ${id}`)
  yield* Effect.promise(() => waitForGo(id))
  const began = Date.now()
  // A fixed amount of work, never a time budget: a slow or busy machine takes longer, it does not do less.
  const more = () => done.performed < config.target

  /** A tiny perform between two stamps; now and then it yields or sleeps a little to vary the interleavings. */
  const perform = (key: string) =>
    Effect.gen(function*() {
      const start = yield* stamp(key)
      const r = random()
      if (r < 0.1) yield* Effect.sleep(1)
      else if (r < 0.5) yield* Effect.yieldNow
      const end = yield* stamp(key)
      return [start, end] as const
    })

  // After a conflict: try again at once or a moment later, so the spinning leaves the CPU to the lock holders.
  const backoff = Effect.suspend(() => (random() < 0.5 ? Effect.yieldNow : Effect.sleep(1)))

  const result = (): Result => ({
    pid: process.pid,
    ...done,
    unexpected,
    runs,
    queued,
    elapsedMs: Date.now() - began
  })

  if (config.mode === "hold") {
    // One job takes its execution lock and stays in perform until the test kills the process (or maxMs ends it).
    const job = uj.job(["crash"], { jid: config.jid })
    const enqueued = yield* uj.client(job, (stamped) => queue.push(stamped))
    const outcome = yield* uj.server(
      enqueued.job,
      Effect.andThen(
        Effect.sync(() => say(`STARTED ${id} ${JSON.stringify({ job: enqueued.job, digest: enqueued.digest })}`)),
        // When the perform is interrupted (a lost lock), by this process' clock: the run itself ends later.
        Effect.onInterrupt(Effect.never, () => Effect.sync(() => say(`STOPPED ${id} ${Date.now()}`)))
      )
    )
    if (outcome._tag === "Performed") done.performed++
    else done.skipped++
    return result()
  }

  if (config.mode === "while_executing") {
    const contender = Effect.whileLoop({
      while: more,
      body: () =>
        Effect.gen(function*() {
          const d = pick(config.digests)
          const outcome = yield* uj.server(uj.job([d]), perform(runKey(d)))
          if (outcome._tag === "Performed") {
            done.performed++
            runs.push(execution(d, outcome.value[0], outcome.value[1]))
          } else {
            done.skipped++
            yield* backoff
          }
        }),
      step: () => {}
    })
    yield* Effect.all(Array.from({ length: config.fibers }, () => contender), {
      concurrency: "unbounded",
      discard: true
    })
    return result()
  }

  // Queue modes: producers push duplicates of a few digests through the client; workers run them through the server.
  const untilExecuted = config.mode === "until_executed"
  const enqueuedAt = new Map<string, Stamp>()
  const dequeuedAt = new Map<string, Stamp>()
  const handler = (job: Job.Job) =>
    Effect.gen(function*() {
      const d = job.args[0] as number
      if (!untilExecuted) dequeuedAt.set(job.jid, yield* stamp(queueKey(d)))
      const outcome = yield* uj.server(job, perform(untilExecuted ? queueKey(d) : runKey(d)))
      if (outcome._tag === "Performed") {
        done.performed++
        const [start, end] = outcome.value
        runs.push(execution(d, start, end))
        // until_executed holds its one lock from enqueue to the end of perform; until_and_while_executing holds
        // the queue lock from enqueue to the handoff, which comes after the last dequeue.
        queued.push(execution(d, enqueuedAt.get(job.jid)!, untilExecuted ? end : dequeuedAt.get(job.jid)!))
        enqueuedAt.delete(job.jid)
        dequeuedAt.delete(job.jid)
      } else if (outcome._tag === "Rescheduled") {
        done.rescheduled++
      } else {
        unexpected.push(`server outcome ${outcome._tag} for ${job.jid}`)
      }
    }).pipe(Effect.tapCause((cause) => Effect.sync(() => unexpected.push(String(cause)))))
  yield* queue.work(handler, { concurrency: config.concurrency })
  const producer = Effect.whileLoop({
    while: more,
    body: () =>
      Effect.gen(function*() {
        const d = pick(config.digests)
        const outcome = yield* uj.client(
          uj.job([d]),
          (stamped) =>
            Effect.flatMap(stamp(queueKey(d)), (at) => {
              enqueuedAt.set(stamped.jid, at)
              return queue.push(stamped)
            })
        )
        if (outcome._tag === "Skipped") {
          done.skipped++
          yield* backoff
        }
      }),
    step: () => {}
  })
  yield* Effect.all(Array.from({ length: config.fibers }, () => producer), { concurrency: "unbounded", discard: true })
  // No time limit of its own: a queue that stops draining is a run that hangs, ended after maxMs with no outcome.
  yield* queue.awaitIdle
  const left = yield* queue.snapshot
  if (left.dead.length > 0) unexpected.push(`dead jobs: ${left.dead.map((d) => d.reason).join("; ")}`)
  return result()
}).pipe(Effect.provideService(JobQueue, queue))

/** Runs one command; a failed run ends the process (its runner respawns it), so nothing of it lingers. */
const start = (id: string, config: Config) => {
  running++
  touch()
  const progress: Progress = { performed: 0, skipped: 0, rescheduled: 0 }
  // Whatever happens, the run ends: one that has had no outcome for maxMs hangs. A slow run still has outcomes, so
  // this is no time budget for the work.
  let seen = ""
  let seenAt = Date.now()
  const watchdog = setInterval(() => {
    const now = JSON.stringify(progress)
    if (now !== seen) {
      seen = now
      seenAt = Date.now()
    } else if (Date.now() - seenAt >= config.maxMs) {
      say(`ERROR ${id} hung: no outcome for ${config.maxMs} ms, ${now} of ${config.target} executions`)
      process.exit(3)
    }
  }, 1_000)
  const main = MemoryQueue.make({ maxRetries: 0 }).pipe(
    Effect.flatMap((queue) => program(id, config, queue, progress)),
    Effect.scoped,
    Effect.provide(Redis.layer({ url: config.url, timeout: config.timeout })),
    Effect.provideService(References.MinimumLogLevel, "Error")
  )
  Effect.runPromiseExit(main).then((exit) => {
    clearInterval(watchdog)
    running--
    touch()
    if (exit._tag === "Success") {
      say(`RESULT ${id} ${JSON.stringify(exit.value)}`)
    } else {
      say(`ERROR ${id} ${JSON.stringify(String(exit.cause))}`)
      process.exit(1)
    }
  })
}
