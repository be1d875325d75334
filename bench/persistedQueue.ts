/**
 * Offers through the `PersistedQueue` adapter against a bare `PersistedQueue.offer` with `deduplicate:
 * "untilExecuted"` (issue 49), same run, Redis store, as a ratio. One workload for both: 2,000 offers over 200
 * distinct argument lists (10 of each, in one shuffled order fixed for the run), from 1 or 32 fibers, no takers
 * (enqueue-side dedup only). Both sides run on ONE ioredis connection, the way a user wires them
 * (`Redis.layerWithEffectRedis`: the locks and Effect's `Redis` service for `PersistedQueue.layerStoreRedis`).
 * Each round has a fresh store prefix, queue name and lock prefix, and the database is flushed after it; the
 * contenders alternate round by round, the starting one rotated.
 *
 *   bare-offer    `queue.offer(data, { id, deduplicate: "untilExecuted" })`, id = the argument list as JSON
 *                 (Effect's own dedup: one element per id until it has been taken to its end)
 *   unique-offer  `Job.enqueue([data])` of a `UniqueJob` with `lock: "until_executed"`, `onConflict: "log"`, on
 *                 `UniquePersistedQueue` (the lock, then for the 10% that get it the adapter's offer under the jid)
 *
 * Every round is checked: exactly 200 ids in the store's id set (`<prefix><name>:ids`), and ours answered 200
 * `Enqueued` and 1,800 `Skipped`. A failed check is printed and the run exits non-zero. Costs per offer from the
 * same rounds: Node CPU (`process.cpuUsage`), round trips (INFO commandstats `calls` of EVALSHA/EVAL), the
 * `redis.call`s inside scripts, Redis time.
 *
 *   npm run bench -- --persisted-queue [--rounds=25]     writes bench/results/persisted-queue.md
 */
import { writeFileSync } from "node:fs"
import * as os from "node:os"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as PersistedQueue from "effect/persistence/PersistedQueue"
import type * as EffectRedis from "effect/persistence/Redis"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as UniquePersistedQueue from "../dist/adapters/PersistedQueue.js"
import { JobQueue } from "../dist/JobQueue.js"
import * as Redis from "../dist/Redis.js"
import * as RedisServer from "../dist/testing/RedisServer.js"
import * as UniqueJob from "../dist/UniqueJob.js"
import {
  delta,
  interleave,
  median,
  Probe,
  quantile,
  reportData,
  round,
  shuffledWorkload,
  split,
  withCpu
} from "./harness.js"

const offers = 2_000
const distinct = 200
const concurrencies = [1, 32]

const topLevel = new Set(["evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"])

const Data = Schema.Struct({ account: Schema.Number, report: Schema.String, period: Schema.String })
type Data = typeof Data.Type

const dataFor = reportData

/** The offers: argument list i % distinct, in an order shuffled once (seeded: the same every run). */
const workload = () => shuffledWorkload(offers, distinct, 49)

type Base = Redis.RedisService | EffectRedis.Redis

/** One contender's round, set up in `scope` (untimed): `offer` is the timed call, `tally` what its answers said. */
interface Prepared {
  readonly offer: (data: Data) => Effect.Effect<void, unknown>
  readonly tally: () => { readonly added: number; readonly turnedAway: number } | undefined
}

interface Contender {
  readonly id: string
  readonly label: string
  readonly prepare: (prefix: string, name: string) => Effect.Effect<Prepared, unknown, Base | Scope.Scope>
}

const factoryOn = (prefix: string) =>
  Effect.flatMap(Effect.scope, (scope) =>
    Layer.buildWithScope(PersistedQueue.layer.pipe(Layer.provide(PersistedQueue.layerStoreRedis({ prefix }))), scope))

const contenders: ReadonlyArray<Contender> = [
  {
    id: "bare-offer",
    label: "`PersistedQueue.offer`, `deduplicate: \"untilExecuted\"` (bare)",
    prepare: (prefix, name) =>
      Effect.gen(function*() {
        const factory = yield* factoryOn(prefix)
        const queue = yield* Effect.provideContext(PersistedQueue.make({ name, schema: Data }), factory)
        // Warm-up: the offer script loaded, the connection used (an id outside the workload).
        yield* queue.offer(dataFor(-1), { id: "warmup", deduplicate: "untilExecuted" })
        return {
          offer: (data) => Effect.asVoid(queue.offer(data, { id: JSON.stringify([data]), deduplicate: "untilExecuted" })),
          tally: () => undefined
        }
      })
  },
  {
    id: "unique-offer",
    label: "`UniqueJob.enqueue` on `UniquePersistedQueue`, `until_executed`",
    prepare: (prefix, name) =>
      Effect.gen(function*() {
        const factory = yield* factoryOn(prefix)
        const adapter = yield* UniquePersistedQueue.make({
          name,
          presence: UniquePersistedQueue.presenceRedis({ prefix })
        }).pipe(Effect.provideContext(Context.merge(factory, yield* Effect.context<Base>())))
        const job = UniqueJob.unsafeMake({
          worker: "rebuild",
          queue: name,
          lock: "until_executed",
          onConflict: "log",
          lockPrefix: `${prefix}locks`
        })
        const services = Context.add(yield* Effect.context<Redis.RedisService>(), JobQueue, adapter)
        const tags = { added: 0, turnedAway: 0, other: 0 }
        const offer = (data: Data) =>
          Effect.map(Effect.provideContext(job.enqueue([data]), services), (outcome) => {
            if (outcome._tag === "Enqueued") tags.added++
            else if (outcome._tag === "Skipped") tags.turnedAway++
            else tags.other++
          })
        // Warm-up as the bare side's: one offer outside the workload (its scripts loaded).
        yield* Effect.provideContext(job.enqueue([dataFor(-1)]), services)
        return { offer, tally: () => ({ added: tags.added, turnedAway: tags.turnedAway }) }
      })
  }
]

interface Sample {
  readonly offersPerSecond: number
  readonly nodeCpuUs: number
  readonly roundTrips: number
  readonly innerCalls: number
  readonly redisUs: number
}

export interface Pair {
  readonly concurrency: number
  readonly oursRate: number
  readonly theirsRate: number
  readonly ratio: number
  readonly paired: { readonly median: number; readonly q1: number; readonly q3: number }
  readonly nodeCpu: number
}

export const run = async (options: {
  readonly url: string
  readonly port: number
  readonly rounds: number
  readonly log: (line: string) => void
}) => {
  const { log, rounds } = options
  const failures: Array<string> = []
  const probe = await Probe.connect(options.url)
  const scope = Effect.runSync(Scope.make())
  try {
    const redisVersion = (await probe.info("server")).redis_version ?? "unknown"
    log(`PersistedQueue offers: the adapter against a bare offer, Redis ${redisVersion} on port ${options.port}`)
    log(`${offers} offers over ${distinct} argument lists, concurrency ${concurrencies.join(" and ")}, ${rounds} rounds each`)
    const base = await Effect.runPromise(Layer.buildWithScope(Redis.layerWithEffectRedis({ url: options.url }), scope))
    const items = workload()
    let made = 0

    const once = async (contender: Contender, concurrency: number, timed: boolean): Promise<Sample> => {
      const n = ++made
      const prefix = `pq49r${n}:`
      const name = `offers-${contender.id}`
      const roundScope = Effect.runSync(Scope.make())
      try {
        const prepared = await Effect.runPromise(
          contender.prepare(prefix, name).pipe(Effect.provideContext(base), Scope.provide(roundScope))
        )
        await new Promise((resolve) => setTimeout(resolve, 20))
        const before = await probe.snapshot()
        const { cpuUs, value: ms } = await withCpu(() =>
          Effect.runPromise(Effect.gen(function*() {
            const t0 = performance.now()
            yield* Effect.forEach(items, prepared.offer, { concurrency, discard: true })
            return performance.now() - t0
          }))
        )
        const after = await probe.snapshot()
        // The warm-up's id is in the set too.
        const ids = Number(await probe.client.zcard(`${prefix}${name}:ids`)) - 1
        const tally = prepared.tally()
        if (ids !== distinct || (tally !== undefined && (tally.added !== distinct || tally.turnedAway !== offers - distinct))) {
          const failure = `${contender.id} c=${concurrency}${timed ? "" : " (warm-up)"}: ${ids} ids stored` +
            (tally === undefined ? "" : `, ${tally.added} Enqueued, ${tally.turnedAway} Skipped`) +
            ` (expected ${distinct}${tally === undefined ? "" : `, ${distinct}, ${offers - distinct}`})`
          failures.push(failure)
          log(`  CHECK FAILED: ${failure}`)
        }
        const d = delta(before, after)
        const { inner, tripUsec, trips } = split(d, topLevel)
        return {
          offersPerSecond: offers / (ms / 1000),
          nodeCpuUs: cpuUs / offers,
          roundTrips: trips / offers,
          innerCalls: inner / offers,
          redisUs: tripUsec / offers
        }
      } finally {
        await Effect.runPromise(Scope.close(roundScope, Exit.void))
        await probe.client.flushdb()
      }
    }

    for (const contender of contenders) await once(contender, 32, false)
    const samples = new Map<string, Array<Sample>>()
    for (const concurrency of concurrencies) {
      log(`\nconcurrency ${concurrency}`)
      await interleave(contenders, rounds, async (contender, r) => {
        const sample = await once(contender, concurrency, true)
        const key = `${contender.id}@${concurrency}`
        samples.set(key, [...(samples.get(key) ?? []), sample])
        log(`  round ${r + 1} ${contender.id.padEnd(13)} ${Math.round(sample.offersPerSecond).toString().padStart(6)} offers/s`)
      })
    }
    const med = (id: string, c: number, f: (s: Sample) => number) => median((samples.get(`${id}@${c}`) ?? []).map(f))
    const pairs = concurrencies.map((c): Pair => {
      const paired = (samples.get(`unique-offer@${c}`) ?? []).map((s, i) =>
        s.offersPerSecond / (samples.get(`bare-offer@${c}`)?.[i]?.offersPerSecond ?? Number.NaN)
      )
      const oursRate = med("unique-offer", c, (s) => s.offersPerSecond)
      const theirsRate = med("bare-offer", c, (s) => s.offersPerSecond)
      return {
        concurrency: c,
        oursRate,
        theirsRate,
        ratio: oursRate / theirsRate,
        paired: { median: median(paired), q1: quantile(paired, 0.25), q3: quantile(paired, 0.75) },
        nodeCpu: med("unique-offer", c, (s) => s.nodeCpuUs) / med("bare-offer", c, (s) => s.nodeCpuUs)
      }
    })
    return { redisVersion, samples, pairs, failures, med }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
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
    const { failures, med, pairs, redisVersion, samples } = result
    const range = (id: string, c: number) => {
      const xs = (samples.get(`${id}@${c}`) ?? []).map((s) => Math.round(s.offersPerSecond))
      return `${Math.min(...xs).toLocaleString("en-US")}–${Math.max(...xs).toLocaleString("en-US")}`
    }
    const r2 = (x: number) => x.toFixed(2)
    const cpu = os.cpus()
    const lines = [
      `Run ${new Date().toISOString()} (${Math.round((performance.now() - started) / 1000)} s): ${cpu.length} × ` +
      `${cpu[0]?.model ?? "unknown"}, Node ${process.version}, Redis ${redisVersion} (a private redis-server), ` +
      `load average before the run ${loadAverage.join(" / ")}.`,
      "",
      `Settings: ${offers.toLocaleString("en-US")} offers per round over ${distinct} distinct argument lists ` +
      `(${offers / distinct} of each, one shuffled order for every round), no takers; concurrency ` +
      `${concurrencies.join(" and ")} (Effect fibers over the list); median of ${rounds} alternating rounds per ` +
      "contender and concurrency, after one untimed round each; the locks and the store on one ioredis connection " +
      "(`Redis.layerWithEffectRedis`); a fresh store prefix per round, the database flushed after it.",
      "",
      "### Ratio (the adapter over the bare offer, same run)",
      "",
      "| c | offers/s | paired rounds (IQR) | Node CPU per offer |",
      "| ---: | ---: | ---: | ---: |",
      ...pairs.map((p) =>
        `| ${p.concurrency} | **${r2(p.ratio)}** | ${r2(p.paired.median)} (${r2(p.paired.q1)}–${r2(p.paired.q3)}) | ` +
        `${r2(p.nodeCpu)}× |`
      ),
      "",
      "### Offers per second and cost per offer",
      "",
      "Round trips: commandstats `calls` of EVALSHA/EVAL per offer; inside: the `redis.call`s the scripts made; Redis " +
      "µs: commandstats `usec` of those round trips.",
      "",
      "| contender | c | offers/s (median) | range | round trips | inside | Node CPU µs | Redis µs |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
      ...concurrencies.flatMap((c) =>
        contenders.map((k) =>
          `| ${k.label} | ${c} | ${Math.round(med(k.id, c, (s) => s.offersPerSecond)).toLocaleString("en-US")} | ` +
          `${range(k.id, c)} | ${r2(med(k.id, c, (s) => s.roundTrips))} | ${r2(med(k.id, c, (s) => s.innerCalls))} | ` +
          `${r2(med(k.id, c, (s) => s.nodeCpuUs))} | ${r2(med(k.id, c, (s) => s.redisUs))} |`
        )
      ),
      "",
      failures.length === 0
        ? `Checks: every round (timed and warm-up) stored exactly ${distinct} ids; the adapter answered ${distinct} ` +
          `Enqueued and ${offers - distinct} Skipped.`
        : `**CHECKS FAILED** (${failures.length}):\n\n${failures.map((f) => `- ${f}`).join("\n")}`
    ]
    log("")
    for (const line of lines) log(line)
    writeFileSync(
      new URL("./results/persisted-queue.md", import.meta.url),
      `# PersistedQueue offers: the adapter against a bare offer\n\n${lines.join("\n")}\n`
    )
    log("\nwrote bench/results/persisted-queue.md")
    if (failures.length > 0) {
      log(`\nCHECKS FAILED: ${failures.length} round(s) (see above)`)
      process.exitCode = 1
    }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
