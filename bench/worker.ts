/**
 * BullMQ `Worker` throughput through our processor against the same Worker without it (issues 20 and 50), same run,
 * as a ratio, on both faces. Each round: a fresh queue holding N waiting jobs (distinct data, added beforehand,
 * untimed), then one `Worker` at concurrency 1 or 32 with a no-op job; timed from `worker.run()` until the Nth
 * `completed` event. Contenders alternate round by round, the starting one rotated:
 *
 *   bare                      `new Worker(name, async () => undefined, …)`
 *   until-executed            the Promise face: `UniqueQueue.make(queue, { lock: "until_executed" })`, the worker's
 *                             processor `unique.processor(async () => undefined)`: each job holds its queue lock,
 *                             released after it ran
 *   while-executing           the same with `lock: "while_executing"`: a run lock around each perform (leased, renewed
 *                             by the store's lease keeper), no queue lock; `onConflict: { server: "reschedule" }`, as
 *                             the library's warning advises for this type (no job conflicts here: it changes nothing)
 *   effect-until-executed     the Effect face: the worker's processor `BullMQ.processor({ definition }, perform)` with
 *                             `perform = () => Effect.sync(() => performed++)`, run on a `ManagedRuntime` of
 *                             `Redis.layer({ url })` (the bench's private Redis) and `BullMQ.layer(queue)`
 *   effect-while-executing    the same with `while_executing`, `onConflict: { server: "reschedule" }`
 *
 * With `--floors`, two contenders that are not this library, to show what a Worker's extra round trips cost alone:
 *
 *   raw-1                     the bare Worker whose processor awaits one EVALSHA of `return 1` (loaded once per round,
 *                             untimed) on a separate ioredis connection to the same Redis, then returns
 *   raw-2                     the same with two such EVALSHAs one after the other: while_executing's lock and unlock,
 *                             two awaited round trips per job, with no work in Node or Redis around them
 *
 * Their ratios against the bare Worker are the floors: at c=1, where each awaited round trip is in series with the
 * Worker's own, a lock type that awaits that many per job cannot be above them, whatever its Node CPU; at c=32 the
 * jobs' round trips overlap, and a store that batches its steps (fewer calls than jobs) can pass them.
 *
 * Every contender's jobs are added the same way: `queue.add(name, data, { jobId })` with a 24-hex id from 32 async
 * loops; for ours through `unique.add`, which makes exactly that call after its lock step (so the until_executed
 * jobs hold their locks), for the bare worker directly. The Effect face's jobs are added by a `UniqueQueue` of the
 * same options and lock prefix (`history: false`; it only adds): the digests and locks are the ones the Effect face's
 * client would take, and the adds stay out of the timed window for every contender alike. The queue has
 * `removeOnComplete: true`, as production setups usually do (BullMQ keeps every completed job otherwise).
 *
 * Every round is checked: N `completed` events and N performs, none failed, no job left in any state, and for ours
 * no key left under the round's own `lockPrefix` (SCAN; but `<prefix>:fence`, the prefix's fencing-token counter, and
 * `<prefix>:layout`, its recorded layout, which outlive every lock by design). A failed check is printed and the run
 * exits non-zero.
 * Costs per job from the same rounds (INFO commandstats and cpu around the timed window): Node CPU
 * (`process.cpuUsage`); script calls (EVALSHA `calls`, BullMQ's and ours) and their Redis time; Redis commands (the
 * `calls` of every other command but the probe's own INFO, SCAN and FLUSHDB: the commands run inside the scripts,
 * BullMQ's and ours, and the few sent alone, such as the Worker's blocking wait); Redis CPU.
 *
 *   npm run bench -- --worker [--floors] [--rounds=5] [--jobs=3000]     writes bench/results/worker.md
 */
import { randomBytes } from "node:crypto"
import { writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { type Processor, Queue, Worker } from "bullmq"
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Scope from "effect/Scope"
import type * as BullMQModule from "../dist/adapters/BullMQ.js"
import type * as UniqueQueueModule from "../dist/adapters/UniqueQueue.js"
import type * as OptionsModule from "../dist/Options.js"
import type * as RedisModule from "../dist/Redis.js"
import * as RedisServer from "../dist/testing/RedisServer.js"
import { bullmqVersion } from "./bullmq.js"
import { type Delta, delta, interleave, median, Probe, quantile, revision, round, withCpu } from "./harness.js"

const jobName = "rebuild"
const addConcurrency = 32
// A round that has not finished by then has lost jobs: it fails its check instead of hanging the run.
const roundTimeoutMs = 60_000

interface Data {
  readonly account: number
  readonly report: string
  readonly period: string
}

const dataFor = (k: number): Data => ({ account: 1000 + k, report: "daily-summary", period: "2026-11" })

/** The library's modules a round uses, from the `dist/` of this checkout or of another one (a "before"). */
export interface Library {
  readonly root: string
  readonly UniqueQueue: typeof UniqueQueueModule
  readonly BullMQ: typeof BullMQModule
  readonly Options: typeof OptionsModule
  readonly Redis: typeof RedisModule
}

/** This checkout: the directory above bench/. */
export const thisCheckout = fileURLToPath(new URL("..", import.meta.url))

/** The built library of the checkout at `root` (its `dist/`, built there). */
export const load = async (root: string = thisCheckout): Promise<Library> => {
  const from = <M>(file: string): Promise<M> => import(pathToFileURL(path.resolve(root, "dist", file)).href) as Promise<M>
  const [UniqueQueue, BullMQ, Options, Redis] = await Promise.all([
    from<typeof UniqueQueueModule>("adapters/UniqueQueue.js"),
    from<typeof BullMQModule>("adapters/BullMQ.js"),
    from<typeof OptionsModule>("Options.js"),
    from<typeof RedisModule>("Redis.js")
  ])
  return { root: path.resolve(root), UniqueQueue, BullMQ, Options, Redis }
}

export interface Contender {
  readonly id: string
  readonly label: string
  /** Which face runs the processor; undefined for the bare Worker and the floors. */
  readonly face: "promise" | "effect" | undefined
  readonly lock: "until_executed" | "while_executing" | undefined
  /** A floor's awaited EVALSHAs of `return 1` per job, not this library; undefined for the others. */
  readonly roundTrips?: number | undefined
}

export const contenders: ReadonlyArray<Contender> = [
  { id: "bare", label: "BullMQ `Worker`, processor `async () => undefined`", face: undefined, lock: undefined },
  {
    id: "until-executed",
    label: "the same Worker, processor `unique.processor(async () => undefined)`, `until_executed`",
    face: "promise",
    lock: "until_executed"
  },
  {
    id: "while-executing",
    label: "the same Worker, processor `unique.processor(async () => undefined)`, `while_executing`",
    face: "promise",
    lock: "while_executing"
  },
  {
    id: "effect-until-executed",
    label: "the same Worker, processor `BullMQ.processor(…, () => Effect.sync(…))`, `until_executed`",
    face: "effect",
    lock: "until_executed"
  },
  {
    id: "effect-while-executing",
    label: "the same Worker, processor `BullMQ.processor(…, () => Effect.sync(…))`, `while_executing`",
    face: "effect",
    lock: "while_executing"
  }
]

/** The floors (`--floors`): the bare Worker plus one or two awaited round trips per job, no library. */
export const floors: ReadonlyArray<Contender> = [1, 2].map((n) => ({
  id: `raw-${n}`,
  label: `the same Worker, processor awaiting ${
    n === 1 ? "one EVALSHA of \`return 1\`" : "two EVALSHAs of \`return 1\`, one after the other"
  } (no library)`,
  face: undefined,
  lock: undefined,
  roundTrips: n
}))

// The floors' script: a round trip through the scripting engine with no work in it.
const trivialScript = "return 1"

/** What the round's setup shares: the library, the server, a probe of its counters, and where checks go. */
export interface Env {
  readonly lib: Library
  readonly url: string
  readonly port: number
  readonly probe: Probe
  readonly log: (line: string) => void
  /** A failed check of the round `where`. */
  readonly fail: (where: string, reason: string) => void
}

let queues = 0

/**
 * One round: a fresh queue with `jobs` waiting jobs added as the contender's are, a `Worker` on it, and `window`
 * given the timed part to run (from `worker.run()` to the last `completed` event) and to wrap with its measurements;
 * then the round's checks (each failure to `env.fail`), and everything closed and flushed.
 */
export const runRound = async <A>(
  env: Env,
  contender: Contender,
  concurrency: number,
  jobs: number,
  where: string,
  window: (timed: () => Promise<void>) => Promise<A>
): Promise<A> => {
  const { lib, log } = env
  const fail = (reason: string) => env.fail(where, reason)
  const n = ++queues
  const connection = { host: "127.0.0.1", port: env.port }
  const queue = new Queue(`w20-${n}-${contender.id}`, { connection, defaultJobOptions: { removeOnComplete: true } })
  await queue.waitUntilReady()
  const lockPrefix = `w20r${n}`
  const options = contender.lock === undefined ? undefined : {
    lock: contender.lock,
    lockPrefix,
    ...(contender.lock === "while_executing" ? { onConflict: { server: "reschedule" as const } } : {})
  }
  const unique = options === undefined
    ? undefined
    : lib.UniqueQueue.make<Data>(queue, contender.face === "effect" ? { ...options, history: false } : options)
  let enqueued = 0
  let next = 0
  await Promise.all(Array.from({ length: addConcurrency }, async () => {
    while (next < jobs) {
      const i = next++
      if (unique === undefined) {
        await queue.add(jobName, dataFor(i), { jobId: randomBytes(12).toString("hex") })
        enqueued++
      } else if ((await unique.add(jobName, dataFor(i)))._tag === "Enqueued") enqueued++
    }
  }))
  if (enqueued !== jobs) fail(`${enqueued} of ${jobs} adds enqueued`)

  let performed = 0
  const noop = async () => {
    performed++
    return undefined
  }
  // The Effect face: its own runtime over the lock store and the queue port, as an Effect application builds it.
  const runtime = contender.face === "effect"
    ? ManagedRuntime.make(Layer.merge(lib.Redis.layer({ url: env.url }), lib.BullMQ.layer(queue)))
    : undefined
  // A floor: its own connection, as a lock store has, and the script loaded before the timed window.
  const raw = contender.roundTrips === undefined ? undefined : new IORedis({ host: "127.0.0.1", port: env.port })
  let wrongReplies = 0
  const sha = raw === undefined ? undefined : String(await raw.script("LOAD", trivialScript))
  const floor: Processor | undefined = raw === undefined || sha === undefined ? undefined : async () => {
    for (let i = 0; i < (contender.roundTrips ?? 0); i++) if ((await raw.evalsha(sha, 0)) !== 1) wrongReplies++
    performed++
    return undefined
  }
  const processor: Processor = runtime !== undefined && options !== undefined
    ? await runtime.runPromise(
      lib.BullMQ.processor({ definition: lib.Options.unsafeMake(options) }, () => Effect.sync(() => performed++))
    )
    : floor !== undefined
    ? floor
    : unique === undefined
    ? noop
    : unique.processor(noop)
  const worker = new Worker(queue.name, processor, { connection, concurrency, autorun: false })
  let completed = 0
  let failed = 0
  const done = new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), roundTimeoutMs)
    const settled = () => {
      if (completed + failed === jobs) {
        clearTimeout(timer)
        resolve(true)
      }
    }
    worker.on("completed", () => {
      completed++
      settled()
    })
    worker.on("failed", () => {
      failed++
      settled()
    })
  })
  worker.on("error", (error) => log(`  worker error (${where}): ${error.message}`))
  await worker.waitUntilReady()
  await new Promise((resolve) => setTimeout(resolve, 20))

  const measured = await window(async () => {
    worker.run().catch((error: unknown) => log(`  worker run failed (${where}): ${String(error)}`))
    if (!(await done)) fail(`not finished within ${roundTimeoutMs / 1000} s`)
  })
  await worker.close()

  if (completed !== jobs || failed !== 0 || performed !== jobs) {
    fail(`${completed} completed, ${failed} failed, ${performed} performed (expected ${jobs}, 0, ${jobs})`)
  }
  if (wrongReplies > 0) fail(`${wrongReplies} EVALSHA replies other than 1`)
  if (raw !== undefined) await raw.quit()
  const counts = await queue.getJobCounts()
  const left = Object.entries(counts).filter(([, count]) => count > 0)
  if (left.length > 0) fail(`jobs left: ${left.map(([state, count]) => `${count} ${state}`).join(", ")}`)
  const probe = env.probe.client
  if (unique !== undefined) {
    let cursor = "0"
    const keys: Array<string> = []
    do {
      const [following, found] = await probe.scan(cursor, "MATCH", `${lockPrefix}:*`, "COUNT", 1000)
      cursor = following
      // `<prefix>:fence` keeps the last fencing token handed out under the prefix, and `<prefix>:layout` the
      // prefix's recorded key layout, by design: no lock.
      keys.push(...found.filter((key) => key !== `${lockPrefix}:fence` && key !== `${lockPrefix}:layout`))
    } while (cursor !== "0")
    if (keys.length > 0) {
      const shown = await Promise.all(keys.slice(0, 3).map(async (key) => {
        const [type, ttl] = await Promise.all([probe.type(key), probe.pttl(key)])
        return `${key} (${type}, pttl ${ttl})`
      }))
      fail(`${keys.length} lock key(s) left under ${lockPrefix}: ${shown.join(", ")}`)
    }
    if (runtime !== undefined) await runtime.dispose()
    await unique.close()
  } else {
    await queue.close()
  }
  await probe.flushdb()
  return measured
}

/** What one round measured, per job. */
export interface Sample {
  readonly jobsPerSecond: number
  readonly nodeCpuUs: number
  readonly evalsha: number
  readonly evalshaUs: number
  readonly commands: number
  readonly redisCpuUs: number
}

// Script calls, and the probe's own commands: every other command of a window is one a script ran (or a client sent).
const notCommands = new Set(["evalsha", "evalsha_ro", "eval", "eval_ro", "info", "scan", "flushdb"])

/** Redis commands in `d` but script calls and the probe's: the commands run inside the scripts, and the few sent alone. */
export const commandsOf = (d: Delta): number =>
  Object.entries(d.commands).reduce((total, [name, stat]) => (notCommands.has(name) ? total : total + stat.calls), 0)

export interface Row {
  readonly contender: string
  readonly label: string
  readonly concurrency: number
  /** Medians over rounds. */
  readonly jobsPerSecond: number
  readonly nodeCpuUsPerJob: number
  readonly evalshaPerJob: number
  readonly evalshaUsPerJob: number
  readonly commandsPerJob: number
  readonly redisCpuUsPerJob: number
  readonly rounds: ReadonlyArray<number>
}

/** A cost per job, ours beside the bare Worker's (medians). */
export interface PerJob {
  readonly ours: number
  readonly bare: number
}

/** A contender over the bare Worker, same run. */
export interface Versus {
  readonly contender: string
  readonly concurrency: number
  /** Ours over the bare worker: medians, and the ratio within each pass (the same round). */
  readonly jobsPerSecond: number
  readonly paired: { readonly median: number; readonly q1: number; readonly q3: number }
  /** Node CPU per job, ours over the bare worker's. */
  readonly nodeCpu: number
  readonly ours: number
  readonly bare: number
  /** Per job, beside the ratio: Node CPU µs, EVALSHA calls, Redis commands. */
  readonly nodeCpuUs: PerJob
  readonly evalsha: PerJob
  readonly commands: PerJob
}

/** Our processor over the bare Worker. */
export interface Ratio extends Versus {
  readonly face: "promise" | "effect"
  readonly lock: "until_executed" | "while_executing"
}

/** A floor over the bare Worker: what `roundTrips` awaited round trips per job cost alone. */
export interface Floor extends Versus {
  readonly roundTrips: number
}

export interface Result {
  readonly jobs: number
  readonly rounds: number
  readonly concurrencies: ReadonlyArray<number>
  readonly redisVersion: string
  readonly rows: ReadonlyArray<Row>
  readonly ratios: ReadonlyArray<Ratio>
  /** Empty unless the run had the floors. */
  readonly floors: ReadonlyArray<Floor>
  readonly failures: ReadonlyArray<string>
}

export const run = async (options: {
  readonly url: string
  readonly port: number
  readonly rounds: number
  readonly jobs: number
  readonly concurrencies?: ReadonlyArray<number> | undefined
  /** Some contenders only (to profile one); the ratios need `bare`. */
  readonly only?: ReadonlyArray<string> | undefined
  /** The floors too (`raw-1`, `raw-2`). */
  readonly floors?: boolean | undefined
  /** The library to run: default this checkout's `dist/`. */
  readonly lib?: Library | undefined
  readonly log: (line: string) => void
}): Promise<Result> => {
  const { jobs, log } = options
  const concurrencies = options.concurrencies ?? [1, 32]
  const all = [...contenders, ...(options.floors === true ? floors : [])]
    .filter((k) => options.only === undefined || options.only.includes(k.id))
  const probe = await Probe.connect(options.url)
  const redisVersion = (await probe.info("server")).redis_version ?? "unknown"
  const failures: Array<string> = []
  const env: Env = {
    lib: options.lib ?? await load(),
    url: options.url,
    port: options.port,
    probe,
    log,
    fail: (where, reason) => {
      failures.push(`${where}: ${reason}`)
      log(`  CHECK FAILED: ${where}: ${reason}`)
    }
  }

  const once = (contender: Contender, concurrency: number, timed: boolean): Promise<Sample> =>
    runRound(env, contender, concurrency, jobs, `${contender.id} c=${concurrency}${timed ? "" : " (warm-up)"}`, async (timedPart) => {
      const before = await probe.snapshot()
      const { cpuUs, value: ms } = await withCpu(async () => {
        const t0 = performance.now()
        await timedPart()
        return performance.now() - t0
      })
      const after = await probe.snapshot()
      const d = delta(before, after)
      const evalsha = d.commands.evalsha ?? { calls: 0, usec: 0 }
      return {
        jobsPerSecond: jobs / (ms / 1000),
        nodeCpuUs: cpuUs / jobs,
        evalsha: evalsha.calls / jobs,
        evalshaUs: evalsha.usec / jobs,
        commands: commandsOf(d) / jobs,
        redisCpuUs: d.cpuUs / jobs
      }
    })

  try {
    log(`BullMQ Worker: our processor (both faces) against the bare processor, Redis ${redisVersion} on port ${options.port}`)
    log(`${jobs} no-op jobs per round, worker concurrency ${concurrencies.join(" and ")}, ${options.rounds} rounds each`)
    // One untimed round per contender first (JIT, script cache), then the timed rounds, alternating.
    for (const contender of all) await once(contender, Math.max(...concurrencies), false)
    const samples = new Map<string, Array<Sample>>()
    for (const concurrency of concurrencies) {
      log(`\nworker concurrency ${concurrency}`)
      await interleave(all, options.rounds, async (contender, r) => {
        const sample = await once(contender, concurrency, true)
        const key = `${contender.id}@${concurrency}`
        samples.set(key, [...(samples.get(key) ?? []), sample])
        log(`  round ${r + 1} ${contender.id.padEnd(22)} ${Math.round(sample.jobsPerSecond).toString().padStart(6)} jobs/s`)
      })
    }
    const of = (id: string, c: number) => samples.get(`${id}@${c}`) ?? []
    const med = (id: string, c: number, f: (s: Sample) => number) => median(of(id, c).map(f))
    const rows = concurrencies.flatMap((c) =>
      all.map((k): Row => ({
        contender: k.id,
        label: k.label,
        concurrency: c,
        jobsPerSecond: Math.round(med(k.id, c, (s) => s.jobsPerSecond)),
        nodeCpuUsPerJob: round(med(k.id, c, (s) => s.nodeCpuUs), 2),
        evalshaPerJob: round(med(k.id, c, (s) => s.evalsha), 2),
        evalshaUsPerJob: round(med(k.id, c, (s) => s.evalshaUs), 2),
        commandsPerJob: round(med(k.id, c, (s) => s.commands), 2),
        redisCpuUsPerJob: round(med(k.id, c, (s) => s.redisCpuUs), 2),
        rounds: of(k.id, c).map((s) => Math.round(s.jobsPerSecond))
      }))
    )
    const versus = (id: string, c: number): Versus => {
      const paired = of(id, c).map((s, i) => s.jobsPerSecond / (of("bare", c)[i]?.jobsPerSecond ?? Number.NaN))
      const ours = med(id, c, (s) => s.jobsPerSecond)
      const bare = med("bare", c, (s) => s.jobsPerSecond)
      const perJob = (f: (s: Sample) => number): PerJob => ({ ours: round(med(id, c, f), 2), bare: round(med("bare", c, f), 2) })
      return {
        contender: id,
        concurrency: c,
        jobsPerSecond: round(ours / bare, 3),
        paired: { median: round(median(paired), 3), q1: round(quantile(paired, 0.25), 3), q3: round(quantile(paired, 0.75), 3) },
        nodeCpu: round(med(id, c, (s) => s.nodeCpuUs) / med("bare", c, (s) => s.nodeCpuUs), 3),
        ours: Math.round(ours),
        bare: Math.round(bare),
        nodeCpuUs: perJob((s) => s.nodeCpuUs),
        evalsha: perJob((s) => s.evalsha),
        commands: perJob((s) => s.commands)
      }
    }
    const ratios = concurrencies.flatMap((c) =>
      all.flatMap((k): Array<Ratio> =>
        k.face === undefined || k.lock === undefined ? [] : [{ ...versus(k.id, c), face: k.face, lock: k.lock }]
      )
    )
    const floorRatios = concurrencies.flatMap((c) =>
      all.flatMap((k): Array<Floor> =>
        k.roundTrips === undefined ? [] : [{ ...versus(k.id, c), roundTrips: k.roundTrips }]
      )
    )
    return { jobs, rounds: options.rounds, concurrencies, redisVersion, rows, ratios, floors: floorRatios, failures }
  } finally {
    await probe.close()
  }
}

/** A ratio's face as a table shows it. */
export const faceName = (face: "promise" | "effect"): string =>
  face === "promise" ? "Promise (`unique.processor`)" : "Effect (`BullMQ.processor`)"

/** Ours / the bare Worker's, per job, with `digits`. */
export const perJobText = (x: PerJob, digits = 2): string => `${x.ours.toFixed(digits)} / ${x.bare.toFixed(digits)}`

export const main = async (
  log: (line: string) => void,
  rounds: number,
  jobs: number,
  withFloors = false
): Promise<void> => {
  const started = performance.now()
  const loadAverage = os.loadavg().map((x) => round(x, 2))
  const scope = Effect.runSync(Scope.make())
  try {
    // Always a private server: never a shared Redis (REDIS_URL or port 6379), whose other clients would skew it.
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const result = await run({ url: server.url, port: server.port, rounds, jobs, floors: withFloors, log })
    const r2 = (x: number) => x.toFixed(2)
    const range = (xs: ReadonlyArray<number>) =>
      `${Math.min(...xs).toLocaleString("en-US")}–${Math.max(...xs).toLocaleString("en-US")}`
    const cpu = os.cpus()
    const lines = [
      `Run ${new Date().toISOString()} (${Math.round((performance.now() - started) / 1000)} s), code ${revision()}: ` +
      `${cpu.length} × ` +
      `${cpu[0]?.model ?? "unknown"}, Node ${process.version}, Redis ${result.redisVersion} (a private redis-server), ` +
      `BullMQ ${bullmqVersion()}, load average before the run ${loadAverage.join(" / ")}.`,
      "",
      ...settingsLines(result),
      "",
      "### Ratios (our processor over the bare Worker, same run)",
      "",
      "jobs/s: the ratio of the two medians; paired rounds: the ratio within each pass over the contenders, median " +
      "and interquartile range; per job, ours / the bare Worker's (medians): Node CPU µs, script calls (EVALSHA) and " +
      "Redis commands (every other command: the ones run inside the scripts, BullMQ's and ours).",
      "",
      "| face | lock | c | jobs/s | paired rounds (IQR) | Node CPU µs per job | EVALSHA per job | Redis commands per job |",
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
      ...result.ratios.map((r) =>
        `| ${faceName(r.face)} | \`${r.lock}\` | ${r.concurrency} | **${r2(r.jobsPerSecond)}** | ${r2(r.paired.median)} ` +
        `(${r2(r.paired.q1)}–${r2(r.paired.q3)}) | ${perJobText(r.nodeCpuUs, 1)} (${r2(r.nodeCpu)}×) | ` +
        `${perJobText(r.evalsha)} | ${perJobText(r.commands, 1)} |`
      ),
      ...floorLines(result),
      "",
      "### Jobs per second and cost per job",
      "",
      "EVALSHA: commandstats `calls` per job (BullMQ's scripts and ours); Redis µs: their `usec`; commands: the `calls` " +
      "of every other command (inside the scripts, and the few sent alone); Redis CPU: INFO cpu of the main thread " +
      "(network included).",
      "",
      "| contender | c | jobs/s (median) | range | Node CPU µs | EVALSHA | Redis µs | commands | Redis CPU µs |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
      ...result.rows.map((row) =>
        `| ${row.label} | ${row.concurrency} | ${row.jobsPerSecond.toLocaleString("en-US")} | ${range(row.rounds)} | ` +
        `${r2(row.nodeCpuUsPerJob)} | ${r2(row.evalshaPerJob)} | ${r2(row.evalshaUsPerJob)} | ${r2(row.commandsPerJob)} | ` +
        `${r2(row.redisCpuUsPerJob)} |`
      ),
      "",
      checksLine(result)
    ]
    log("")
    for (const line of lines) log(line)
    const title = "BullMQ Worker: our processor (both faces) against the bare processor" +
      (result.floors.length > 0 ? ", and the floors of one and two awaited round trips" : "")
    writeFileSync(new URL("./results/worker.md", import.meta.url), `# ${title}\n\n${lines.join("\n")}\n`)
    log("\nwrote bench/results/worker.md")
    if (result.failures.length > 0) {
      log(`\nCHECKS FAILED: ${result.failures.length} round(s) (see above)`)
      process.exitCode = 1
    }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

/** The floors' table, when the run had them. */
const floorLines = (result: Result): Array<string> => {
  if (result.floors.length === 0) return []
  const r2 = (x: number) => x.toFixed(2)
  return [
    "",
    "### Floors (no library: the bare Worker plus awaited round trips, same run)",
    "",
    "The processor awaits one (`raw-1`) or two (`raw-2`, as `while_executing`'s lock and unlock) EVALSHAs of " +
    "`return 1`, in turn, on its own ioredis connection to the same Redis, then returns. At c=1 its ratio to the " +
    "bare Worker is the most a processor awaiting that many round trips per job can reach; at c=32 the jobs' round " +
    "trips overlap, and batched steps (fewer calls than jobs) can pass it. Per job, the floor's / the bare " +
    "Worker's, as above.",
    "",
    "| contender | round trips per job | c | jobs/s | paired rounds (IQR) | Node CPU µs per job | EVALSHA per job | " +
    "Redis commands per job |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...result.floors.map((f) =>
      `| \`${f.contender}\` | ${f.roundTrips} | ${f.concurrency} | **${r2(f.jobsPerSecond)}** | ${r2(f.paired.median)} ` +
      `(${r2(f.paired.q1)}–${r2(f.paired.q3)}) | ${perJobText(f.nodeCpuUs, 1)} (${r2(f.nodeCpu)}×) | ` +
      `${perJobText(f.evalsha)} | ${perJobText(f.commands, 1)} |`
    )
  ]
}

export const settingsLines = (result: Result): Array<string> => [
  `Settings: ${result.jobs.toLocaleString("en-US")} no-op jobs per round with distinct data, added beforehand ` +
  `(untimed) by \`queue.add\` with a 24-hex \`jobId\` from ${addConcurrency} async loops (ours through ` +
  "`unique.add`; the Effect face's by a `UniqueQueue` of the same options and lock prefix), `removeOnComplete: true`; " +
  "one `Worker` per round at concurrency " +
  `${result.concurrencies.join(" and ")}, timed from \`worker.run()\` to the last \`completed\` event; median of ` +
  `${result.rounds} alternating rounds per contender and concurrency, after one untimed round each; a fresh queue ` +
  "and lock prefix per round, the database flushed after it."
]

export const checksLine = (result: Result): string =>
  result.failures.length === 0
    ? `Checks: every round (timed and warm-up) completed all ${result.jobs.toLocaleString("en-US")} jobs, each ` +
      "performed once, none failed or left in the queue, and no key left under the round's lock prefix (but " +
      "`<prefix>:fence`, the fencing-token counter, and `<prefix>:layout`, the recorded layout, kept by design)."
    : `**CHECKS FAILED** (${result.failures.length}):\n\n${result.failures.map((f) => `- ${f}`).join("\n")}`
