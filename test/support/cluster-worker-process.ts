/**
 * A worker process on Redis Cluster for the failover test (test/cluster.failover.test.ts). `argv[2]` is its JSON
 * `Config`. It performs `target` executions over `digests` digests from `fibers` concurrent loops, each under the lock
 * type's steps: `while_executing` takes the run lock (with a lease) around the perform; `until_executed` takes the
 * queue lock (with a TTL), performs, and releases it. Every perform is recorded (digest, start and end in µs of the
 * machine's clock, shared by every process); every failed lock step with its error's tag and how long it took.
 * It prints `PROGRESS <n>` as it goes and one `RESULT <json>` line at the end, then exits.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as References from "effect/References"
import * as Schedule from "effect/Schedule"
import * as Lock from "../../src/Lock.js"
import * as LockOptions from "../../src/Options.js"
import * as Redis from "../../src/Redis.js"

export interface Config {
  readonly nodes: ReadonlyArray<string>
  readonly prefix: string
  readonly mode: "while_executing" | "until_executed"
  readonly digests: number
  readonly fibers: number
  readonly target: number
  readonly timeoutMs: number
  readonly leaseMs: number
}

export interface Execution {
  readonly digest: string
  readonly start: number
  readonly end: number
}

export interface Result {
  readonly executions: ReadonlyArray<Execution>
  readonly conflicts: number
  /** Failed lock steps: the error's tag (and, for RedisError, its operation), and when and how long. */
  readonly failures: ReadonlyArray<{ readonly tag: string; readonly at: number; readonly tookMs: number }>
}

const micros = () => Math.round((performance.timeOrigin + performance.now()) * 1000)

const config = JSON.parse(process.argv[2]!) as Config
const executions: Array<Execution> = []
const failures: Array<{ tag: string; at: number; tookMs: number }> = []
let conflicts = 0
let done = 0

const definition = LockOptions.unsafeMake(
  config.mode === "while_executing"
    ? { lock: "while_executing", lockPrefix: config.prefix, lockLease: config.leaseMs }
    : { lock: "until_executed", lockPrefix: config.prefix, lockTtl: 30_000 }
)

const perform = (digest: string) =>
  Effect.gen(function*() {
    const start = micros()
    yield* Effect.sleep(3)
    executions.push({ digest, start, end: micros() })
  })

const attempt = (loop: number, n: number) => {
  const digest = `${config.prefix}:${config.mode}-${(loop * 7 + n) % config.digests}`
  const jid = `${process.pid}-${loop}-${n}`
  const began = performance.now()
  const step = config.mode === "while_executing"
    ? Lock.withLock(perform(digest), definition, { digest, jid })
    : Effect.flatMap(Lock.lock(definition, { digest, jid }), () =>
      Effect.andThen(perform(digest), Lock.unlock(definition, { digest, jid })))
  return step.pipe(
    Effect.map(() => {
      done++
    }),
    Effect.catch((error) =>
      Effect.sync(() => {
        if (error._tag === "LockConflict") conflicts++
        else failures.push({ tag: error._tag, at: micros(), tookMs: performance.now() - began })
      })
    ),
    // A defect is reported as a failure too: the test then fails on its tag.
    Effect.catchDefect((defect) =>
      Effect.sync(() => failures.push({ tag: `defect: ${String(defect)}`, at: micros(), tookMs: performance.now() - began }))
    )
  )
}

const loop = (index: number) =>
  Effect.gen(function*() {
    for (let n = 0; done < config.target; n++) {
      yield* attempt(index, n)
      if (n % 50 === 0) process.stdout.write(`PROGRESS ${done}\n`)
      // A failed step (Redis away) waits a little before the next, as a worker's retry would.
      yield* Effect.sleep(1)
    }
  })

const program = Effect.gen(function*() {
  yield* Effect.forEach(Array.from({ length: config.fibers }, (_, i) => i), loop, { concurrency: "unbounded" })
  const result: Result = { executions, conflicts, failures }
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`)
}).pipe(
  // The store's build waits out only its call timeout (1 s here); a process started on a busy machine tries again for
  // up to 30 s: what the test measures is the failover mid-run, not how fast a process first connects.
  Effect.provide(
    Layer.effect(
      Redis.RedisService,
      Redis.makeCluster({ nodes: config.nodes, timeout: config.timeoutMs }).pipe(
        Effect.retry(Schedule.spaced("250 millis").pipe(Schedule.upTo({ duration: "30 seconds" })))
      )
    )
  ),
  Effect.provideService(References.MinimumLogLevel, "Error")
)

Effect.runPromise(program).then(
  () => process.exit(0),
  (error) => {
    process.stdout.write(`ERROR ${String(error)}\n`)
    process.exit(1)
  }
)
