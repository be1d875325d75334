/**
 * The benchmark suite (issue 5): one private redis-server, every measurement in one run, ratios against the peers
 * measured in the same run. Prints ratios and verdicts; never asserts timings.
 *
 *   npm run bench              the full run (about 10 minutes): bench/results/latest.{json,md}, throughput.svg,
 *                              and the table in bench/README.md
 *   npm run bench -- --quick   a short run (under 2 minutes): bench/results/quick.{json,md,svg}
 *   --sections=roundtrips,throughput,memory,growth   a subset (results not written)
 *   --from=bench/results/latest.json                  rewrites the report, plot and README table from saved results
 *   --foundation                                      the foundation targets alone (about a minute): results/foundation.md
 *   --reaper [--members=N]                            one reaper pass over N index members, 1% stale: results/reaper.md
 *   --reaper-bullmq [--jobs=N] [--no-before]          one reaper pass over N waiting BullMQ jobs, batched exists against
 *                                                     the old getJobState path: results/reaper-bullmq.md
 *   --bullmq [--rounds=N]                             UniqueQueue.add against BullMQ's own deduplication, N alternating
 *                                                     rounds (25; about a minute): results/bullmq.md
 *   --lock-events [--lifecycles=N] [--rounds=N]       Redis time and round trips per lifecycle with the activity log
 *                                                     (lockEvents) off and on, in one run: results/lock-events.md
 *   --keeper-burst [--locks=N] [--lease=ms]           N run locks taken in one burst (10,000), lease ms (1,000), each
 *                                                     held three leases: outcomes, loop delay: results/keeper-burst.md
 *   --persisted-queue [--rounds=N]                    offers through UniquePersistedQueue (until_executed) against a
 *                                                     bare PersistedQueue.offer with deduplicate "untilExecuted", Redis
 *                                                     store, N alternating rounds (25): results/persisted-queue.md
 *   --worker [--rounds=N] [--jobs=N]                  a BullMQ Worker through our processor on both faces
 *                                                     (unique.processor, BullMQ.processor; until_executed,
 *                                                     while_executing) against the bare Worker, N no-op jobs per round
 *                                                     (3,000), N alternating rounds (5): results/worker.md;
 *                                                     --floors adds raw-1 and raw-2, the bare Worker awaiting one
 *                                                     and two EVALSHAs of `return 1` per job (no library)
 *   --alloc [--root=<dir>] [--out=<file>] [--jobs=N]  what the Worker's per-job path allocates at c=32 (bare, both
 *                                                     faces, until_executed and while_executing): bytes by where,
 *                                                     the top functions, promises and Effect fibers per job, Node CPU,
 *                                                     on a checkout's dist/ (default this one): results/alloc.md
 *   --profile [--root=<dir>] [--out=<file>]           CPU profiles of UniqueQueue.add and the Worker through
 *                                                     unique.processor, grouped by where the time goes, on a checkout's
 *                                                     dist/ (default this one): results/profile.md
 *   --cluster [--lifecycles=N] [--rounds=N]          the same lifecycles on a 1-master and a 3-master cluster: Redis
 *                                                     time per master (INFO commandstats): results/cluster.md
 *   --web [--locks=N]                                 the admin UI's pages with N locks in the index (100,000), the
 *                                                     metrics panel's Redis cost per job, the cost of tracing:
 *                                                     results/web.md
 *   --web-load [--locks=N] [--holders=N] [--out=name] one page and ten at once over N locks (100) of N holders (2,000)
 *                                                     each, beside a worker's 50 run locks on a 1 s lease: Redis time
 *                                                     (SLOWLOG), longest call, statuses, PING wait: results/web-load.md
 *   --targets                                         every target of issues 20 and 50 in one run (fixed work: 2.5 min on an
 *                                                     EPYC VM, 4-5 on a slower Xeon one), each with
 *                                                     our figure, the peer's, the ratio and a verdict: results/targets.md
 *   --scripts [--root=<dir>] [--gem=<dir>] [--calls=N] Redis instructions per script call (callgrind: the same count on
 *                                                     a busy machine) and bytes per held lock, beside the raw pair;
 *                                                     with --root, another checkout's scripts first; with --gem, a
 *                                                     sidekiq-unique-jobs checkout's lock and unlock first:
 *                                                     results/scripts-gem.md
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as RedisServer from "../dist/testing/RedisServer.js"
import * as BullMQ from "./bullmq.js"
import * as Cluster from "./cluster.js"
import * as Alloc from "./alloc.js"
import * as Foundation from "./foundation.js"
import * as Growth from "./growth.js"
import * as KeeperBurst from "./keeperBurst.js"
import * as LockEvents from "./lockEvents.js"
import * as Reaper from "./reaper.js"
import * as ReaperBullMQ from "./reaperBullmq.js"
import { Probe, round } from "./harness.js"
import * as Memory from "./memory.js"
import * as PersistedQueueBench from "./persistedQueue.js"
import * as Profile from "./profile.js"
import * as Report from "./report.js"
import * as RoundTrips from "./roundtrips.js"
import * as Scripts from "./scripts.js"
import * as Targets from "./targets.js"
import * as Throughput from "./throughput.js"
import * as Verdicts from "./verdicts.js"
import * as Web from "./web.js"
import * as WebLoad from "./webLoad.js"
import * as Worker from "./worker.js"

const args = process.argv.slice(2)
const quick = args.includes("--quick")
const sectionsArg = args.find((a) => a.startsWith("--sections="))
const sections = new Set(
  sectionsArg === undefined ? ["roundtrips", "throughput", "memory", "growth"] : sectionsArg.slice(11).split(",")
)
const complete = sections.size === 4

const settings = quick
  ? {
    rounds: 3,
    roundMs: 250,
    warmupMs: 200,
    concurrencies: [1, 16, 64, 256],
    lifecycles: 300,
    memoryLocks: 10_000,
    memoryRounds: 2,
    growthSizes: [1_000, 10_000, 100_000, 1_000_000],
    growthRounds: 2,
    growthRoundMs: 250,
    latencySamples: 200
  }
  : {
    rounds: 5,
    roundMs: 1000,
    warmupMs: 500,
    concurrencies: [1, 16, 64, 256],
    lifecycles: 2000,
    memoryLocks: 10_000,
    memoryRounds: 5,
    growthSizes: [1_000, 10_000, 100_000, 1_000_000],
    growthRounds: 5,
    growthRoundMs: 1000,
    latencySamples: 1000
  }

const log = (line: string) => process.stdout.write(`${line}\n`)

const write = (results: Report.Results) => {
  const dir = new URL("./results/", import.meta.url)
  mkdirSync(dir, { recursive: true })
  const isQuick = results.mode === "quick"
  const base = isQuick ? "quick" : "latest"
  const plot = isQuick ? "quick.svg" : "throughput.svg"
  writeFileSync(new URL(`${base}.json`, dir), JSON.stringify(results, null, 2) + "\n")
  writeFileSync(new URL(plot, dir), Report.svg(results.throughput, results.settings.concurrencies))
  writeFileSync(new URL(`${base}.md`, dir), `# Benchmark results\n\n${Report.markdown(results, plot)}`)
  if (!isQuick) updateReadme(Report.markdown(results, `results/${plot}`))
  log(`\nwrote bench/results/${base}.json, ${base}.md, ${plot}${isQuick ? "" : " and the table in bench/README.md"}`)
}

const main = async () => {
  if (args.includes("--foundation")) return Foundation.main(log)
  if (args.includes("--reaper-bullmq")) {
    const jobs = args.find((a) => a.startsWith("--jobs="))
    return ReaperBullMQ.main(log, jobs === undefined ? 50_000 : Number(jobs.slice(7)), !args.includes("--no-before"))
  }
  if (args.includes("--reaper")) {
    const members = args.find((a) => a.startsWith("--members="))
    return Reaper.main(log, members === undefined ? 1_000_000 : Number(members.slice(10)))
  }
  if (args.includes("--lock-events")) {
    const lifecycles = args.find((a) => a.startsWith("--lifecycles="))
    const rounds = args.find((a) => a.startsWith("--rounds="))
    return LockEvents.main(
      log,
      lifecycles === undefined ? 5_000 : Number(lifecycles.slice(13)),
      rounds === undefined ? 5 : Number(rounds.slice(9))
    )
  }
  if (args.includes("--keeper-burst")) {
    const locks = args.find((a) => a.startsWith("--locks="))
    const lease = args.find((a) => a.startsWith("--lease="))
    return KeeperBurst.main(
      log,
      locks === undefined ? 10_000 : Number(locks.slice(8)),
      lease === undefined ? 1_000 : Number(lease.slice(8))
    )
  }
  if (args.includes("--cluster")) {
    const lifecycles = args.find((a) => a.startsWith("--lifecycles="))
    const shardsArg = args.find((a) => a.startsWith("--shards="))
    const concurrencyArg = args.find((a) => a.startsWith("--concurrency="))
    const rounds = args.find((a) => a.startsWith("--rounds="))
    return Cluster.main(
      log,
      lifecycles === undefined ? 20_000 : Number(lifecycles.slice(13)),
      rounds === undefined ? 5 : Number(rounds.slice(9)),
      shardsArg === undefined ? undefined : Number(shardsArg.slice(9)),
      args.includes("--pipelining"),
      concurrencyArg === undefined ? 64 : Number(concurrencyArg.slice(14)),
      args.includes("--phased")
    )
  }
  if (args.includes("--web-load")) {
    const value = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3)
    return WebLoad.main(
      log,
      Number(value("locks") ?? 100),
      Number(value("holders") ?? 2_000),
      value("out") ?? "web-load"
    )
  }
  if (args.includes("--web")) {
    const locks = args.find((a) => a.startsWith("--locks="))
    return Web.main(log, locks === undefined ? 100_000 : Number(locks.slice(8)))
  }
  if (args.includes("--bullmq")) {
    const rounds = args.find((a) => a.startsWith("--rounds="))
    return BullMQ.main(log, rounds === undefined ? 25 : Number(rounds.slice(9)))
  }
  if (args.includes("--persisted-queue")) {
    const rounds = args.find((a) => a.startsWith("--rounds="))
    return PersistedQueueBench.main(log, rounds === undefined ? 25 : Number(rounds.slice(9)))
  }
  if (args.includes("--worker")) {
    const rounds = args.find((a) => a.startsWith("--rounds="))
    const jobs = args.find((a) => a.startsWith("--jobs="))
    return Worker.main(
      log,
      rounds === undefined ? 5 : Number(rounds.slice(9)),
      jobs === undefined ? 3_000 : Number(jobs.slice(7)),
      args.includes("--floors")
    )
  }
  if (args.includes("--targets")) return Targets.main(log)
  if (args.includes("--scripts")) {
    const root = args.find((a) => a.startsWith("--root="))
    const calls = args.find((a) => a.startsWith("--calls="))
    const gem = args.find((a) => a.startsWith("--gem="))
    return Scripts.main(
      log,
      [...(root === undefined ? [] : [root.slice(7)]), new URL("..", import.meta.url).pathname],
      calls === undefined ? 3_000 : Number(calls.slice(8)),
      new URL(gem === undefined ? "./results/scripts.md" : "./results/scripts-gem.md", import.meta.url).pathname,
      gem?.slice(6)
    )
  }
  if (args.includes("--alloc")) {
    const root = args.find((a) => a.startsWith("--root="))
    const out = args.find((a) => a.startsWith("--out="))
    const jobs = args.find((a) => a.startsWith("--jobs="))
    return Alloc.main(
      log,
      root === undefined ? new URL("..", import.meta.url).pathname : root.slice(7),
      out === undefined ? new URL("./results/alloc.md", import.meta.url).pathname : out.slice(6),
      jobs === undefined ? 6_000 : Number(jobs.slice(7))
    )
  }
  if (args.includes("--profile")) {
    const root = args.find((a) => a.startsWith("--root="))
    const out = args.find((a) => a.startsWith("--out="))
    return Profile.main(
      log,
      root === undefined ? new URL("..", import.meta.url).pathname : root.slice(7),
      out === undefined ? new URL("./results/profile.md", import.meta.url).pathname : out.slice(6)
    )
  }
  const from = args.find((a) => a.startsWith("--from="))
  if (from !== undefined) {
    const saved = JSON.parse(readFileSync(from.slice(7), "utf8")) as Report.Results
    write({ ...saved, targets: verdicts(saved.throughput, saved.roundTrips, saved.memory, saved.growth) })
    return
  }
  const started = performance.now()
  const loadAverage = os.loadavg().map((x) => round(x, 2))
  const scope = Effect.runSync(Scope.make())
  try {
    // Always a private server: never a shared Redis (REDIS_URL or port 6379), whose other clients would skew it.
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const probe = await Probe.connect(server.url)
    const serverInfo = await probe.info("server")
    log(`effect-unique-jobs bench (${quick ? "quick" : "full"}): Redis ${serverInfo.redis_version} on port ${server.port}`)

    let roundTrips: Array<RoundTrips.Row> = []
    if (sections.has("roundtrips")) {
      log("\nround trips per lifecycle, every lock type (Middleware, one job at a time)")
      roundTrips = await RoundTrips.run({ url: server.url, probe, lifecycles: settings.lifecycles, log })
    }
    let throughput: Array<Throughput.Row> = []
    if (sections.has("throughput")) {
      log("\nlifecycle throughput, alternating rounds")
      throughput = (await Throughput.run({
        url: server.url,
        probe,
        rounds: settings.rounds,
        roundMs: settings.roundMs,
        warmupMs: settings.warmupMs,
        concurrencies: settings.concurrencies,
        pipelining: [false, true],
        log
      })).rows
    }
    let memory: Memory.Result | undefined
    if (sections.has("memory")) {
      log(`\nmemory per held lock (${settings.memoryLocks} locks)`)
      memory = await Memory.run({
        url: server.url,
        db: 2,
        probe,
        locks: settings.memoryLocks,
        rounds: settings.memoryRounds,
        log
      })
    }
    let growth: Growth.Result | undefined
    if (sections.has("growth")) {
      log("\nacquire cost against held locks")
      growth = await Growth.run({
        url: server.url,
        probe,
        sizes: settings.growthSizes,
        firstDb: 3,
        rounds: settings.growthRounds,
        roundMs: settings.growthRoundMs,
        latencySamples: settings.latencySamples,
        log
      })
    }
    await probe.close()
    if (!complete || memory === undefined || growth === undefined) return

    const targets = verdicts(throughput, roundTrips, memory, growth)
    log("\ntargets")
    for (const t of targets) log(`  ${t.met ? "met   " : "MISSED"} ${t.name}: ${t.measured} (goal ${t.goal})`)

    const results: Report.Results = {
      date: new Date().toISOString(),
      mode: quick ? "quick" : "full",
      machine: {
        cpus: os.cpus().length,
        cpuModel: os.cpus()[0]?.model ?? "unknown",
        node: process.version,
        redis: serverInfo.redis_version ?? "unknown",
        loadAverage
      },
      settings: { rounds: settings.rounds, roundMs: settings.roundMs, concurrencies: settings.concurrencies },
      durationSeconds: Math.round((performance.now() - started) / 1000),
      targets,
      throughput,
      roundTrips,
      memory,
      growth
    }
    write(results)
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

const verdicts = (
  rows: ReadonlyArray<Throughput.Row>,
  roundTrips: ReadonlyArray<RoundTrips.Row>,
  memory: Memory.Result,
  growth: Growth.Result
): Array<Report.Target> => {
  const at = (id: string, pipelining = false, c = 64) =>
    rows.find((r) => r.contender === id && r.pipelining === pipelining && r.concurrency === c)!
  const r2 = (x: number) => x.toFixed(2)
  const ours = at("ours")
  const raw = at("raw-promises")
  const rawFibers = at("raw-fibers")
  const oursP = at("ours", true)
  const vs = (id: string, pipelining = false) => ours.cyclesPerSecond / at(id, pipelining).cyclesPerSecond
  const peers = ["semaphore", "bullmq-unique", "bullmq-duplicate"]
  const oursIds = new Set(["ours", "ours-middleware", "uawe", "uawe-middleware"])
  const tripsOk = roundTrips.every((r) =>
    r.serverRoundTripsPerLifecycle === r.phases.length && r.clientCommandsPerLifecycle === r.phases.length
  ) && rows.filter((r) => oursIds.has(r.contender)).every((r) => Math.abs(r.roundTripsPerCycle - r.phases) < 0.005)
  const sizes = growth.sizes
  return [
    {
      name: "lifecycle throughput, c=64, vs raw pair (async loops)",
      goal: ">= 0.9",
      measured: `${r2(vs("raw-promises"))} (${ours.cyclesPerSecond} / ${raw.cyclesPerSecond}); pipelined ${
        r2(oursP.cyclesPerSecond / at("raw-promises", true).cyclesPerSecond)
      }`,
      met: vs("raw-promises") >= 0.9
    },
    {
      name: "lifecycle throughput, c=64, vs raw pair (Effect fibers)",
      goal: ">= 0.9",
      measured: `${r2(vs("raw-fibers"))} (${ours.cyclesPerSecond} / ${rawFibers.cyclesPerSecond}); pipelined ${
        r2(oursP.cyclesPerSecond / at("raw-fibers", true).cyclesPerSecond)
      }`,
      met: vs("raw-fibers") >= 0.9
    },
    {
      name: "lifecycle throughput, c=64, vs redis-semaphore and BullMQ dedup add",
      goal: "> 1 each",
      measured: peers.map((p) => `${p} ${r2(vs(p))}`).join(", ") + "; pipelined " +
        peers.map((p) => `${r2(oursP.cyclesPerSecond / at(p, true).cyclesPerSecond)}`).join(", "),
      met: peers.every((p) => vs(p) > 1)
    },
    {
      name: "round trips per phase, every lock type",
      goal: "exactly 1",
      measured: roundTrips.map((r) => `${r.lockType} ${r.serverRoundTripsPerLifecycle}/${r.phases.length}`).join(", "),
      met: tripsOk
    },
    { name: "Redis script time per lifecycle vs raw pair", ...target(Verdicts.scriptTime(rows)) },
    { name: "Redis memory per held lock (no lockInfo) vs plain SET", ...target(Verdicts.memory(memory)) },
    {
      name: `acquire cost at ${sizes[sizes.length - 1]!.held} held locks vs ${sizes[0]!.held}`,
      ...target(Verdicts.growth(growth))
    },
    {
      name: "Node CPU per lifecycle vs raw ioredis (async loops)",
      ...target(Verdicts.nodeCpu(rows, "ours", Verdicts.atMost(2)))
    }
  ]
}

const target = (v: Verdicts.Verdict) => ({ goal: v.goal, measured: v.measured, met: v.met })

const readmeStart = "<!-- results:start -->"
const readmeEnd = "<!-- results:end -->"

const updateReadme = (md: string) => {
  const file = new URL("./README.md", import.meta.url)
  const text = existsSync(file) ? readFileSync(file, "utf8") : `${readmeStart}\n${readmeEnd}\n`
  const from = text.indexOf(readmeStart)
  const to = text.indexOf(readmeEnd)
  if (from < 0 || to < from) throw new Error(`bench/README.md lacks the ${readmeStart} ... ${readmeEnd} markers`)
  writeFileSync(file, `${text.slice(0, from + readmeStart.length)}\n${md}\n${text.slice(to)}`)
}

main().catch((error) => {
  process.exitCode = 1
  process.stderr.write(`${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
})
