/**
 * BullMQ `add` through `UniqueQueue` against BullMQ's own `deduplication` (issue 12), same run, as a ratio. One
 * workload for every contender: 2,000 adds over 200 distinct argument lists (10 of each, in one shuffled order fixed
 * for the run), issued by 1 or 32 async loops, no workers (enqueue-side dedup only). Each round has a fresh queue (and
 * lock prefix) and the database is flushed after it; contenders alternate round by round, the starting one rotated.
 *
 *   bullmq-dedup       `queue.add(name, data, { deduplication: { id } })`, id = the argument list as JSON
 *                      (BullMQ's simple mode: one job per id until it completes or fails)
 *   unique-executed    `unique.add(name, data)`, `lock: "until_executed"`, `onConflict: "log"` (one job per digest
 *                      until it has run)
 *   bullmq-dedup-ttl   the same add with `deduplication: { id, ttl }` (BullMQ's throttle mode, 1 hour)
 *   unique-expired     `unique.add(name, data)`, `lock: "until_expired"`, `lockTtl` 1 hour
 *
 * Every round is checked: exactly 200 waiting jobs, and 200 added / 1,800 turned away (BullMQ: 200 distinct job ids
 * among the 2,000 adds; ours: 200 `Enqueued`, 1,800 `Skipped`). A failed check is printed and the run exits non-zero.
 * Costs per add come from the same rounds: Node CPU (`process.cpuUsage`), round trips and the `redis.call`s inside
 * scripts (INFO commandstats deltas), the calls BullMQ's own connection sent (counted on the client), Redis time.
 *
 *   npm run bench -- --bullmq [--rounds=25]     writes bench/results/bullmq.md
 */
import { readFileSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import { type Job as BullJob, Queue } from "bullmq"
import type { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as UniqueQueue from "../dist/adapters/UniqueQueue.js"
import * as RedisServer from "../dist/testing/RedisServer.js"
import {
  delta,
  interleave,
  median,
  Probe,
  quantile,
  type ReportData,
  reportData,
  round,
  shuffledWorkload,
  split,
  spyCommands,
  withCpu
} from "./harness.js"

const adds = 2_000
const distinct = 200
const concurrencies = [1, 32]
const ttlMs = 3_600_000
const jobName = "rebuild"

/** The commands a client sends; every other command in a delta ran inside a script. */
const topLevel = new Set(["evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"])

type Data = ReportData

const dataFor = reportData

/** The adds: argument list i % distinct, in an order shuffled once (seeded: the same every run). */
const workload = () => shuffledWorkload(adds, distinct, 12)

/** One contender's round, set up (untimed): `add` is the timed call, `tally` what its answers said. */
interface Prepared {
  readonly queue: Queue
  readonly add: (data: Data) => Promise<void>
  /** Added and turned away, by the contender's own answers. */
  readonly tally: () => { readonly added: number; readonly turnedAway: number }
  readonly close: () => Promise<void>
}

interface Contender {
  readonly id: string
  readonly label: string
  readonly prepare: (queueName: string, round: number) => Promise<Prepared>
}

// Both sides warm their connections the same way before the timed window: one add of a job outside the workload,
// then that job is removed.
const warm = async (queue: Queue, add: () => Promise<BullJob | undefined>) => {
  const job = await add()
  if (job?.id !== undefined) await queue.remove(job.id)
}

const contenders = (connection: { readonly host: string; readonly port: number }): Array<Contender> => {
  const bullmq = (id: string, label: string, ttl: number | undefined): Contender => ({
    id,
    label,
    prepare: async (queueName) => {
      const queue = new Queue(queueName, { connection })
      await queue.waitUntilReady()
      await warm(queue, () => queue.add("warmup", dataFor(-1)))
      const ids = new Set<string>()
      return {
        queue,
        add: async (data) => {
          const dedupId = JSON.stringify([data])
          const job = await queue.add(jobName, data, {
            deduplication: ttl === undefined ? { id: dedupId } : { id: dedupId, ttl }
          })
          ids.add(job.id ?? "")
        },
        tally: () => ({ added: ids.size, turnedAway: adds - ids.size }),
        close: () => queue.close()
      }
    }
  })
  const ours = (id: string, label: string, lock: UniqueQueue.Options): Contender => ({
    id,
    label,
    prepare: async (queueName, round) => {
      const queue = new Queue(queueName, { connection })
      await queue.waitUntilReady()
      const unique = UniqueQueue.make<Data>(queue, { ...lock, onConflict: "log", lockPrefix: `b12r${round}` })
      await warm(queue, async () => {
        const outcome = await unique.add("warmup", dataFor(-1))
        return outcome._tag === "Enqueued" ? outcome.value : undefined
      })
      const tags = { added: 0, turnedAway: 0, other: 0 }
      return {
        queue,
        add: async (data) => {
          const outcome = await unique.add(jobName, data)
          if (outcome._tag === "Enqueued") tags.added++
          else if (outcome._tag === "Skipped") tags.turnedAway++
          else tags.other++
        },
        // Replaced or Rejected would be wrong here: they count as neither.
        tally: () => ({ added: tags.added, turnedAway: tags.turnedAway }),
        close: () => unique.close()
      }
    }
  })
  return [
    bullmq("bullmq-dedup", "BullMQ `queue.add` with `deduplication: { id }` (simple mode)", undefined),
    ours("unique-executed", "`UniqueQueue.add`, `until_executed`", { lock: "until_executed" }),
    bullmq("bullmq-dedup-ttl", "BullMQ `queue.add` with `deduplication: { id, ttl: 1 h }` (throttle mode)", ttlMs),
    ours("unique-expired", "`UniqueQueue.add`, `until_expired`, `lockTtl` 1 h", { lock: "until_expired", lockTtl: "1 hour" })
  ]
}

/** What one round measured, per add. */
export interface Sample {
  readonly addsPerSecond: number
  readonly nodeCpuUs: number
  readonly roundTrips: number
  /** Round trips BullMQ's own connection sent (client-side count). */
  readonly bullmqCalls: number
  readonly innerCalls: number
  readonly redisUs: number
  readonly redisCpuUs: number
}

/** `concurrency` async loops taking the next add from one shared list until it is done. */
const drive = async (concurrency: number, items: ReadonlyArray<Data>, add: (data: Data) => Promise<void>) => {
  let next = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < items.length) await add(items[next++]!)
  }))
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export interface Pair {
  readonly ours: string
  readonly theirs: string
  readonly name: string
  readonly concurrency: number
  /** Medians over rounds, adds per second. */
  readonly oursRate: number
  readonly theirsRate: number
  /** oursRate / theirsRate. */
  readonly ratio: number
  /** The ratio within each pass over the contenders (the same round): median and interquartile range. */
  readonly paired: { readonly median: number; readonly q1: number; readonly q3: number }
  /** Node CPU per add, ours over BullMQ's (medians). */
  readonly nodeCpu: number
}

export interface Result {
  readonly rounds: number
  readonly redisVersion: string
  readonly contenders: ReadonlyArray<{ readonly id: string; readonly label: string }>
  readonly samples: ReadonlyMap<string, ReadonlyArray<Sample>>
  readonly pairs: ReadonlyArray<Pair>
  readonly failures: ReadonlyArray<string>
}

/** Every contender in alternating rounds on the Redis at `url` (database 0, flushed after each round). */
export const run = async (options: {
  readonly url: string
  readonly port: number
  readonly rounds: number
  readonly log: (line: string) => void
}): Promise<Result> => {
  const { log, rounds } = options
  const failures: Array<string> = []
  const probe = await Probe.connect(options.url)
  try {
    const redisVersion = (await probe.info("server")).redis_version ?? "unknown"
    log(`BullMQ add: UniqueQueue against BullMQ deduplication, Redis ${redisVersion} on port ${options.port}`)
    log(`${adds} adds over ${distinct} argument lists, concurrency ${concurrencies.join(" and ")}, ${rounds} rounds each`)
    const items = workload()
    const all = contenders({ host: "127.0.0.1", port: options.port })
    let queues = 0

    const once = async (contender: Contender, concurrency: number, timed: boolean): Promise<Sample> => {
      const n = ++queues
      const prepared = await contender.prepare(`b12-${n}-${contender.id}`, n)
      const client = (await prepared.queue.getBackend().client) as unknown as IORedis
      const sent = spyCommands(client)
      await pause(20)
      const before = await probe.snapshot()
      const { cpuUs, value: ms } = await withCpu(async () => {
        const t0 = performance.now()
        await drive(concurrency, items, prepared.add)
        return performance.now() - t0
      })
      const after = await probe.snapshot()
      const waiting = await prepared.queue.getWaitingCount()
      const { added, turnedAway } = prepared.tally()
      const bullmqCalls = Array.from(sent.values()).reduce((a, b) => a + b, 0)
      await prepared.close()
      await probe.client.flushdb()
      if (waiting !== distinct || added !== distinct || turnedAway !== adds - distinct) {
        const failure = `${contender.id} c=${concurrency}${timed ? "" : " (warm-up)"}: ${waiting} waiting jobs, ` +
          `${added} added, ${turnedAway} turned away (expected ${distinct}, ${distinct}, ${adds - distinct})`
        failures.push(failure)
        log(`  CHECK FAILED: ${failure}`)
      }
      const d = delta(before, after)
      const { inner, tripUsec, trips } = split(d, topLevel)
      return {
        addsPerSecond: adds / (ms / 1000),
        nodeCpuUs: cpuUs / adds,
        roundTrips: trips / adds,
        bullmqCalls: bullmqCalls / adds,
        innerCalls: inner / adds,
        redisUs: tripUsec / adds,
        redisCpuUs: d.cpuUs / adds
      }
    }

    // One untimed round per contender first (JIT, script cache), then the timed rounds, alternating.
    for (const contender of all) await once(contender, 32, false)
    const samples = new Map<string, Array<Sample>>()
    for (const concurrency of concurrencies) {
      log(`\nconcurrency ${concurrency}`)
      await interleave(all, rounds, async (contender, r) => {
        const sample = await once(contender, concurrency, true)
        const key = `${contender.id}@${concurrency}`
        samples.set(key, [...(samples.get(key) ?? []), sample])
        log(`  round ${r + 1} ${contender.id.padEnd(17)} ${Math.round(sample.addsPerSecond).toString().padStart(6)} adds/s`)
      })
    }

    const med = (id: string, c: number, f: (s: Sample) => number) => median((samples.get(`${id}@${c}`) ?? []).map(f))
    const rate = (id: string, c: number) => med(id, c, (s) => s.addsPerSecond)
    const pairs = [
      { ours: "unique-executed", theirs: "bullmq-dedup", name: "`until_executed` / simple mode" },
      { ours: "unique-expired", theirs: "bullmq-dedup-ttl", name: "`until_expired` / throttle mode" }
    ].flatMap((p) =>
      concurrencies.map((c): Pair => {
        const paired = (samples.get(`${p.ours}@${c}`) ?? []).map((s, i) =>
          s.addsPerSecond / (samples.get(`${p.theirs}@${c}`)?.[i]?.addsPerSecond ?? Number.NaN)
        )
        return {
          ...p,
          concurrency: c,
          oursRate: rate(p.ours, c),
          theirsRate: rate(p.theirs, c),
          ratio: rate(p.ours, c) / rate(p.theirs, c),
          paired: { median: median(paired), q1: quantile(paired, 0.25), q3: quantile(paired, 0.75) },
          nodeCpu: med(p.ours, c, (s) => s.nodeCpuUs) / med(p.theirs, c, (s) => s.nodeCpuUs)
        }
      })
    )
    return {
      rounds,
      redisVersion,
      contenders: all.map(({ id, label }) => ({ id, label })),
      samples,
      pairs,
      failures
    }
  } finally {
    await probe.close()
  }
}

export const main = async (log: (line: string) => void, rounds: number): Promise<void> => {
  const started = performance.now()
  const loadAverage = os.loadavg().map((x) => round(x, 2))
  const scope = Effect.runSync(Scope.make())
  try {
    // Always a private server: never a shared Redis (REDIS_URL or port 6379), whose other clients would skew it.
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const result = await run({ url: server.url, port: server.port, rounds, log })
    const { failures, redisVersion, samples } = result
    const med = (id: string, c: number, f: (s: Sample) => number) => median((samples.get(`${id}@${c}`) ?? []).map(f))
    const rate = (id: string, c: number) => med(id, c, (s) => s.addsPerSecond)
    const range = (id: string, c: number) => {
      const xs = (samples.get(`${id}@${c}`) ?? []).map((s) => Math.round(s.addsPerSecond))
      return `${Math.min(...xs).toLocaleString("en-US")}–${Math.max(...xs).toLocaleString("en-US")}`
    }
    const r2 = (x: number) => x.toFixed(2)
    const cpu = os.cpus()
    const lines = [
      `Run ${new Date().toISOString()} (${Math.round((performance.now() - started) / 1000)} s): ${cpu.length} × ` +
      `${cpu[0]?.model ?? "unknown"}, Node ${process.version}, Redis ${redisVersion} (a private redis-server), ` +
      `BullMQ ${bullmqVersion()}, load average before the run ${loadAverage.join(" / ")}.`,
      "",
      settingsLine(rounds),
      "",
      "### Ratios (UniqueQueue over BullMQ, same run)",
      "",
      "adds/s: the ratio of the two medians; paired rounds: the ratio within each round (both ran in the same pass over " +
      "the four contenders), median and interquartile range; Node CPU: per add, ours over BullMQ's (medians).",
      "",
      "| pair | c | adds/s | paired rounds (IQR) | Node CPU per add |",
      "| --- | ---: | ---: | ---: | ---: |",
      ...result.pairs.map((p) =>
        `| ${p.name} | ${p.concurrency} | **${r2(p.ratio)}** | ${r2(p.paired.median)} ` +
        `(${r2(p.paired.q1)}–${r2(p.paired.q3)}) | ${r2(p.nodeCpu)}× |`
      ),
      "",
      "### Adds per second and cost per add",
      "",
      "Round trips: commandstats `calls` of EVALSHA/EVAL per add; BullMQ's: the calls BullMQ's own connection sent per " +
      "add (counted on the client; the rest of ours are lock calls); inside: the `redis.call`s the scripts made; Redis " +
      "µs: commandstats `usec` of those round trips; Redis CPU: INFO cpu of the main thread.",
      "",
      "| contender | c | adds/s (median) | range | round trips | BullMQ's | inside | Node CPU µs | Redis µs | Redis CPU µs |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
      ...concurrencies.flatMap((c) =>
        result.contenders.map((k) =>
          `| ${k.label} | ${c} | ${Math.round(rate(k.id, c)).toLocaleString("en-US")} | ${range(k.id, c)} | ` +
          `${r2(med(k.id, c, (s) => s.roundTrips))} | ${r2(med(k.id, c, (s) => s.bullmqCalls))} | ` +
          `${r2(med(k.id, c, (s) => s.innerCalls))} | ${r2(med(k.id, c, (s) => s.nodeCpuUs))} | ` +
          `${r2(med(k.id, c, (s) => s.redisUs))} | ${r2(med(k.id, c, (s) => s.redisCpuUs))} |`
        )
      ),
      "",
      checksLine(result)
    ]
    log("")
    for (const line of lines) log(line)
    writeFileSync(
      new URL("./results/bullmq.md", import.meta.url),
      `# BullMQ add: UniqueQueue against BullMQ deduplication\n\n${lines.join("\n")}\n`
    )
    log("\nwrote bench/results/bullmq.md")
    if (failures.length > 0) {
      log(`\nCHECKS FAILED: ${failures.length} round(s) did not end with ${distinct} waiting jobs (see above)`)
      process.exitCode = 1
    }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

export const settingsLine = (rounds: number): string =>
  `Settings: ${adds.toLocaleString("en-US")} adds per round over ${distinct} distinct argument lists ` +
  `(${adds / distinct} adds of each, one shuffled order for every round), no workers; concurrency ` +
  `${concurrencies.join(" and ")} (async loops sharing the list); median of ${rounds} alternating rounds per ` +
  "contender and concurrency, after one untimed round each; a fresh queue per round, the database flushed after it."

export const checksLine = (result: Result): string =>
  result.failures.length === 0
    ? `Checks: every round (timed and warm-up) ended with exactly ${distinct} waiting jobs, ${distinct} added and ` +
      `${adds - distinct} turned away.`
    : `**CHECKS FAILED** (${result.failures.length}):\n\n${result.failures.map((f) => `- ${f}`).join("\n")}`

// The installed BullMQ, as the bench ran it.
export const bullmqVersion = (): string => {
  try {
    const pkg = JSON.parse(readFileSync(new URL("../node_modules/bullmq/package.json", import.meta.url), "utf8"))
    return String((pkg as { readonly version?: unknown }).version ?? "unknown")
  } catch {
    return "unknown"
  }
}
