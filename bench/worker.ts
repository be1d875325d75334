/**
 * BullMQ `Worker` throughput through `unique.processor` against the same Worker without it (issue 20), same run, as
 * a ratio. Each round: a fresh queue holding N waiting jobs (distinct data, added beforehand, untimed), then one
 * `Worker` at concurrency 1 or 32 with a no-op job; timed from `worker.run()` until the Nth `completed` event.
 * Contenders alternate round by round, the starting one rotated:
 *
 *   bare               `new Worker(name, async () => undefined, …)`
 *   until-executed     `UniqueQueue.make(queue, { lock: "until_executed" })`, the worker's processor
 *                      `unique.processor(async () => undefined)`: each job holds its queue lock, released after it ran
 *   while-executing    the same with `lock: "while_executing"`: a run lock around each perform (leased, renewed by the
 *                      store's lease keeper), no queue lock; `onConflict: { server: "reschedule" }`, as the library's
 *                      warning advises for this type (no job conflicts here, so it changes nothing measured)
 *
 * Every contender's jobs are added the same way: `queue.add(name, data, { jobId })` with a 24-hex id from 32 async
 * loops; for ours through `unique.add`, which makes exactly that call after its lock step (so the until_executed
 * jobs hold their locks), for the bare worker directly. The queue has `removeOnComplete: true`, as production
 * setups usually do (BullMQ keeps every completed job otherwise); the same for all contenders.
 *
 * Every round is checked: N `completed` events and N performs, none failed, no job left in any state, and for ours
 * no key left under the round's own `lockPrefix` (SCAN; but `<prefix>:fence`, the prefix's fencing-token counter, and
 * `<prefix>:layout`, its recorded layout, which outlive every lock by design). A failed check is printed and the run
 * exits non-zero.
 * Costs per job from the same rounds: Node CPU (`process.cpuUsage`), EVALSHA calls and their Redis time, Redis CPU.
 *
 *   npm run bench -- --worker [--rounds=7] [--jobs=3000]     writes bench/results/worker.md
 */
import { randomBytes } from "node:crypto"
import { writeFileSync } from "node:fs"
import * as os from "node:os"
import { Queue, Worker } from "bullmq"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as UniqueQueue from "../dist/adapters/UniqueQueue.js"
import * as RedisServer from "../dist/testing/RedisServer.js"
import { bullmqVersion } from "./bullmq.js"
import { delta, interleave, median, Probe, quantile, revision, round, withCpu } from "./harness.js"

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

export interface Contender {
  readonly id: string
  readonly label: string
  readonly lock: "until_executed" | "while_executing" | undefined
}

export const contenders: ReadonlyArray<Contender> = [
  { id: "bare", label: "BullMQ `Worker`, processor `async () => undefined`", lock: undefined },
  {
    id: "until-executed",
    label: "the same Worker, processor `unique.processor(async () => undefined)`, `until_executed`",
    lock: "until_executed"
  },
  {
    id: "while-executing",
    label: "the same Worker, processor `unique.processor(async () => undefined)`, `while_executing`",
    lock: "while_executing"
  }
]

/** What one round measured, per job. */
export interface Sample {
  readonly jobsPerSecond: number
  readonly nodeCpuUs: number
  readonly evalsha: number
  readonly evalshaUs: number
  readonly redisCpuUs: number
}

export interface Row {
  readonly contender: string
  readonly label: string
  readonly concurrency: number
  /** Medians over rounds. */
  readonly jobsPerSecond: number
  readonly nodeCpuUsPerJob: number
  readonly evalshaPerJob: number
  readonly evalshaUsPerJob: number
  readonly redisCpuUsPerJob: number
  readonly rounds: ReadonlyArray<number>
}

export interface Ratio {
  readonly contender: string
  readonly concurrency: number
  /** Ours over the bare worker: medians, and the ratio within each pass (the same round). */
  readonly jobsPerSecond: number
  readonly paired: { readonly median: number; readonly q1: number; readonly q3: number }
  readonly nodeCpu: number
  readonly ours: number
  readonly bare: number
}

export interface Result {
  readonly jobs: number
  readonly rounds: number
  readonly concurrencies: ReadonlyArray<number>
  readonly redisVersion: string
  readonly rows: ReadonlyArray<Row>
  readonly ratios: ReadonlyArray<Ratio>
  readonly failures: ReadonlyArray<string>
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** `concurrency` async loops taking the next index from 0..n-1 until it is done. */
const drive = async (concurrency: number, n: number, f: (i: number) => Promise<void>) => {
  let next = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < n) await f(next++)
  }))
}

export const run = async (options: {
  readonly url: string
  readonly port: number
  readonly rounds: number
  readonly jobs: number
  readonly concurrencies?: ReadonlyArray<number> | undefined
  /** Some contenders only (to profile one); the ratios need `bare`. */
  readonly only?: ReadonlyArray<string> | undefined
  readonly log: (line: string) => void
}): Promise<Result> => {
  const { jobs, log } = options
  const concurrencies = options.concurrencies ?? [1, 32]
  const all = contenders.filter((k) => options.only === undefined || options.only.includes(k.id))
  const connection = { host: "127.0.0.1", port: options.port }
  const probe = await Probe.connect(options.url)
  const redisVersion = (await probe.info("server")).redis_version ?? "unknown"
  const failures: Array<string> = []
  let queues = 0

  const once = async (contender: Contender, concurrency: number, timed: boolean): Promise<Sample> => {
    const n = ++queues
    const where = `${contender.id} c=${concurrency}${timed ? "" : " (warm-up)"}`
    const fail = (reason: string) => {
      failures.push(`${where}: ${reason}`)
      log(`  CHECK FAILED: ${where}: ${reason}`)
    }
    const queue = new Queue(`w20-${n}-${contender.id}`, { connection, defaultJobOptions: { removeOnComplete: true } })
    await queue.waitUntilReady()
    const lockPrefix = `w20r${n}`
    const unique = contender.lock === undefined ? undefined : UniqueQueue.make<Data>(queue, {
      lock: contender.lock,
      lockPrefix,
      ...(contender.lock === "while_executing" ? { onConflict: { server: "reschedule" } } : {})
    })
    let enqueued = 0
    await drive(addConcurrency, jobs, async (i) => {
      if (unique === undefined) {
        await queue.add(jobName, dataFor(i), { jobId: randomBytes(12).toString("hex") })
        enqueued++
      } else if ((await unique.add(jobName, dataFor(i)))._tag === "Enqueued") enqueued++
    })
    if (enqueued !== jobs) fail(`${enqueued} of ${jobs} adds enqueued`)

    let performed = 0
    const noop = async () => {
      performed++
      return undefined
    }
    const worker = new Worker(queue.name, unique === undefined ? noop : unique.processor(noop), {
      connection,
      concurrency,
      autorun: false
    })
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
    await pause(20)

    const before = await probe.snapshot()
    const { cpuUs, value: ms } = await withCpu(async () => {
      const t0 = performance.now()
      worker.run().catch((error: unknown) => log(`  worker run failed (${where}): ${String(error)}`))
      const finished = await done
      if (!finished) fail(`not finished within ${roundTimeoutMs / 1000} s`)
      return performance.now() - t0
    })
    const after = await probe.snapshot()
    await worker.close()

    if (completed !== jobs || failed !== 0 || performed !== jobs) {
      fail(`${completed} completed, ${failed} failed, ${performed} performed (expected ${jobs}, 0, ${jobs})`)
    }
    const counts = await queue.getJobCounts()
    const left = Object.entries(counts).filter(([, count]) => count > 0)
    if (left.length > 0) fail(`jobs left: ${left.map(([state, count]) => `${count} ${state}`).join(", ")}`)
    if (unique !== undefined) {
      let cursor = "0"
      const keys: Array<string> = []
      do {
        const [next, found] = await probe.client.scan(cursor, "MATCH", `${lockPrefix}:*`, "COUNT", 1000)
        cursor = next
        // `<prefix>:fence` keeps the last fencing token handed out under the prefix, and `<prefix>:layout` the
        // prefix's recorded key layout, by design: no lock.
        keys.push(...found.filter((key) => key !== `${lockPrefix}:fence` && key !== `${lockPrefix}:layout`))
      } while (cursor !== "0")
      if (keys.length > 0) {
        const shown = await Promise.all(keys.slice(0, 3).map(async (key) => {
          const [type, ttl] = await Promise.all([probe.client.type(key), probe.client.pttl(key)])
          return `${key} (${type}, pttl ${ttl})`
        }))
        fail(`${keys.length} lock key(s) left under ${lockPrefix}: ${shown.join(", ")}`)
      }
      await unique.close()
    } else {
      await queue.close()
    }
    await probe.client.flushdb()

    const d = delta(before, after)
    const evalsha = d.commands.evalsha ?? { calls: 0, usec: 0 }
    return {
      jobsPerSecond: jobs / (ms / 1000),
      nodeCpuUs: cpuUs / jobs,
      evalsha: evalsha.calls / jobs,
      evalshaUs: evalsha.usec / jobs,
      redisCpuUs: d.cpuUs / jobs
    }
  }

  try {
    log(`BullMQ Worker: unique.processor against the bare processor, Redis ${redisVersion} on port ${options.port}`)
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
        log(`  round ${r + 1} ${contender.id.padEnd(16)} ${Math.round(sample.jobsPerSecond).toString().padStart(6)} jobs/s`)
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
        redisCpuUsPerJob: round(med(k.id, c, (s) => s.redisCpuUs), 2),
        rounds: of(k.id, c).map((s) => Math.round(s.jobsPerSecond))
      }))
    )
    const ratios = concurrencies.flatMap((c) =>
      all.filter((k) => k.lock !== undefined).map((k): Ratio => {
        const paired = of(k.id, c).map((s, i) => s.jobsPerSecond / (of("bare", c)[i]?.jobsPerSecond ?? Number.NaN))
        const ours = med(k.id, c, (s) => s.jobsPerSecond)
        const bare = med("bare", c, (s) => s.jobsPerSecond)
        return {
          contender: k.id,
          concurrency: c,
          jobsPerSecond: round(ours / bare, 3),
          paired: { median: round(median(paired), 3), q1: round(quantile(paired, 0.25), 3), q3: round(quantile(paired, 0.75), 3) },
          nodeCpu: round(med(k.id, c, (s) => s.nodeCpuUs) / med("bare", c, (s) => s.nodeCpuUs), 3),
          ours: Math.round(ours),
          bare: Math.round(bare)
        }
      })
    )
    return { jobs, rounds: options.rounds, concurrencies, redisVersion, rows, ratios, failures }
  } finally {
    await probe.close()
  }
}

export const main = async (log: (line: string) => void, rounds: number, jobs: number): Promise<void> => {
  const started = performance.now()
  const loadAverage = os.loadavg().map((x) => round(x, 2))
  const scope = Effect.runSync(Scope.make())
  try {
    // Always a private server: never a shared Redis (REDIS_URL or port 6379), whose other clients would skew it.
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const result = await run({ url: server.url, port: server.port, rounds, jobs, log })
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
      "### Ratios (through `unique.processor` over the bare Worker, same run)",
      "",
      "jobs/s: the ratio of the two medians; paired rounds: the ratio within each pass over the three contenders, " +
      "median and interquartile range; Node CPU: per job, ours over the bare worker's (medians).",
      "",
      "| lock | c | jobs/s | paired rounds (IQR) | Node CPU per job |",
      "| --- | ---: | ---: | ---: | ---: |",
      ...result.ratios.map((r) =>
        `| \`${r.contender.replace("-", "_")}\` | ${r.concurrency} | **${r2(r.jobsPerSecond)}** | ${r2(r.paired.median)} ` +
        `(${r2(r.paired.q1)}–${r2(r.paired.q3)}) | ${r2(r.nodeCpu)}× |`
      ),
      "",
      "### Jobs per second and cost per job",
      "",
      "EVALSHA: commandstats `calls` per job (BullMQ's scripts and ours); Redis µs: their `usec`; Redis CPU: INFO cpu " +
      "of the main thread (network included).",
      "",
      "| contender | c | jobs/s (median) | range | Node CPU µs | EVALSHA | Redis µs | Redis CPU µs |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
      ...result.rows.map((row) =>
        `| ${row.label} | ${row.concurrency} | ${row.jobsPerSecond.toLocaleString("en-US")} | ${range(row.rounds)} | ` +
        `${r2(row.nodeCpuUsPerJob)} | ${r2(row.evalshaPerJob)} | ${r2(row.evalshaUsPerJob)} | ${r2(row.redisCpuUsPerJob)} |`
      ),
      "",
      checksLine(result)
    ]
    log("")
    for (const line of lines) log(line)
    writeFileSync(
      new URL("./results/worker.md", import.meta.url),
      `# BullMQ Worker: unique.processor against the bare processor\n\n${lines.join("\n")}\n`
    )
    log("\nwrote bench/results/worker.md")
    if (result.failures.length > 0) {
      log(`\nCHECKS FAILED: ${result.failures.length} round(s) (see above)`)
      process.exitCode = 1
    }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

export const settingsLines = (result: Result): Array<string> => [
  `Settings: ${result.jobs.toLocaleString("en-US")} no-op jobs per round with distinct data, added beforehand ` +
  `(untimed) by \`queue.add\` with a 24-hex \`jobId\` from ${addConcurrency} async loops (ours through ` +
  "`unique.add`), `removeOnComplete: true`; one `Worker` per round at concurrency " +
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
