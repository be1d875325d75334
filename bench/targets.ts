/**
 * Every target of issues 20 and 50 in one run on one private redis-server, in under 3 minutes on a 2-core machine:
 * each row with its goal, our figure, the peer's figure measured in the same run, their ratio and a verdict; beside
 * each Worker ratio, per job, Node CPU, script calls and Redis commands, ours and the bare Worker's. Issue 50's goals
 * replace issue 20's where it names them (the Worker's, `add` at c=1, the Middleware, the lock pair, memory, growth,
 * the Redis commands of a `while_executing` job); the Worker rows cover both faces. Sections run one
 * after another (never two at once), each on its own databases: BullMQ adds and the Worker on 0 (flushed after every
 * round), the lifecycle matrix on 0 and 1, memory on 2, growth on 3 and 4 (last: its million held locks stay until
 * it ends). Ratios only: a missed target fails nothing; a failed correctness check (a BullMQ-add or Worker round that
 * did not end as it must) is printed and makes the run exit non-zero.
 *
 *   npm run bench -- --targets     writes bench/results/targets.md
 */
import { writeFileSync } from "node:fs"
import * as os from "node:os"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as RedisServer from "../dist/testing/RedisServer.js"
import * as BullMQ from "./bullmq.js"
import * as Foundation from "./foundation.js"
import * as Growth from "./growth.js"
import { Probe, revision, round } from "./harness.js"
import * as Memory from "./memory.js"
import * as Verdicts from "./verdicts.js"
import * as Worker from "./worker.js"

// Chosen for the 3-minute budget on 2 cores, with room for a slower day (about 2 minutes here: 20 s BullMQ adds,
// 45 s Worker, 30 s lifecycles, 5 s memory, 30 s growth, a quarter of it filling the million locks). The Worker has
// five contenders since issue 50 (both faces): 5 rounds each instead of 7 keep its time.
const settings = {
  bullmqRounds: 15,
  workerRounds: 5,
  workerJobs: 3_000,
  lifecycleRounds: 5,
  lifecycleRoundMs: 1_000,
  lifecycleWarmupMs: 1_000,
  memoryLocks: 10_000,
  memoryRounds: 5,
  growthSizes: [1_000, 1_000_000],
  growthRounds: 5,
  growthRoundMs: 700,
  growthLatencySamples: 500
}

interface Row extends Verdicts.Verdict {
  readonly target: string
  /** A Worker row's costs per job, ours; the bare Worker's. */
  readonly perJob?: string | undefined
}

// The goals of issue 50 for the Worker through our processor, by lock type (issue 20's were 0.9× for both).
const workerGoals = { until_executed: Verdicts.atLeast(0.9), while_executing: Verdicts.atLeast(0.8) } as const
// Issue 50: Redis commands per `while_executing` job (inside the scripts, BullMQ's and ours), at most.
const commandsGoal = 30

const fmtRatio = (x: number) => `${x.toFixed(2)}×`
const perSecond = (x: number, unit: string) => `${Math.round(x).toLocaleString("en-US")} ${unit}/s`

export const main = async (log: (line: string) => void): Promise<void> => {
  const started = performance.now()
  const loadAverage = os.loadavg().map((x) => round(x, 2))
  const seconds: Record<string, number> = {}
  const timed = async <A>(section: string, f: () => Promise<A>): Promise<A> => {
    const t0 = performance.now()
    try {
      return await f()
    } finally {
      seconds[section] = Math.round((performance.now() - t0) / 100) / 10
    }
  }
  const scope = Effect.runSync(Scope.make())
  try {
    // Always a private server: never a shared Redis (REDIS_URL or port 6379), whose other clients would skew it.
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const probe = await Probe.connect(server.url)
    const redisVersion = (await probe.info("server")).redis_version ?? "unknown"
    log(`effect-unique-jobs targets (issues 20 and 50): Redis ${redisVersion} on port ${server.port}\n`)

    const adds = await timed("BullMQ adds", () =>
      BullMQ.run({ url: server.url, port: server.port, rounds: settings.bullmqRounds, log }))
    log("")
    const worker = await timed("Worker", () =>
      Worker.run({
        url: server.url,
        port: server.port,
        rounds: settings.workerRounds,
        jobs: settings.workerJobs,
        log
      }))
    log("\nlifecycles at c=64, alternating rounds")
    const lifecycles = await timed("lifecycles", () =>
      Foundation.run({
        url: server.url,
        probe,
        rounds: settings.lifecycleRounds,
        roundMs: settings.lifecycleRoundMs,
        warmupMs: settings.lifecycleWarmupMs,
        log
      }))
    log(`\nmemory per held lock (${settings.memoryLocks} locks)`)
    const memory = await timed("memory", () =>
      Memory.run({
        url: server.url,
        db: 2,
        probe,
        locks: settings.memoryLocks,
        rounds: settings.memoryRounds,
        log
      }))
    log("\nacquire cost against held locks")
    const growth = await timed("growth", () =>
      Growth.run({
        url: server.url,
        probe,
        sizes: settings.growthSizes,
        firstDb: 3,
        rounds: settings.growthRounds,
        roundMs: settings.growthRoundMs,
        latencySamples: settings.growthLatencySamples,
        log
      }))
    await probe.close()

    const addRow = (ours: string, theirs: string, name: string, c: number): Row => {
      const pair = adds.pairs.find((p) => p.ours === ours && p.theirs === theirs && p.concurrency === c)!
      const goal = Verdicts.atLeast(1)
      return {
        target: `${name}, c=${c}`,
        goal: goal.text,
        ours: perSecond(pair.oursRate, "adds"),
        peer: perSecond(pair.theirsRate, "adds"),
        ratio: pair.ratio,
        met: goal.met(pair.ratio),
        measured: `paired rounds ${pair.paired.median.toFixed(2)}; Node CPU per add ${fmtRatio(pair.nodeCpu)}`
      }
    }
    const ratioOf = (face: "promise" | "effect", lock: "until_executed" | "while_executing", c: number) =>
      worker.ratios.find((x) => x.face === face && x.lock === lock && x.concurrency === c)!
    const perJob = (r: Worker.Ratio) =>
      `Node CPU ${r.nodeCpuUs.ours.toFixed(1)} µs, ${r.evalsha.ours.toFixed(2)} EVALSHA, ${
        r.commands.ours.toFixed(1)
      } commands; ${r.nodeCpuUs.bare.toFixed(1)} µs, ${r.evalsha.bare.toFixed(2)}, ${r.commands.bare.toFixed(1)}`
    const workerRow = (face: "promise" | "effect", lock: "until_executed" | "while_executing", c: number): Row => {
      const r = ratioOf(face, lock, c)
      const goal = workerGoals[lock]
      const through = face === "promise" ? "`unique.processor`" : "`BullMQ.processor` (Effect face)"
      return {
        target: `BullMQ \`Worker\` jobs/s through ${through} (\`${lock}\`) vs without, concurrency ${c}`,
        goal: goal.text,
        ours: perSecond(r.ours, "jobs"),
        peer: perSecond(r.bare, "jobs"),
        ratio: r.jobsPerSecond,
        met: goal.met(r.jobsPerSecond),
        perJob: perJob(r),
        measured: `paired rounds ${r.paired.median.toFixed(2)}; per job, ours / bare: Node CPU ${
          Worker.perJobText(r.nodeCpuUs, 1)
        } µs (${fmtRatio(r.nodeCpu)}), EVALSHA ${Worker.perJobText(r.evalsha)}, Redis commands ${
          Worker.perJobText(r.commands, 1)
        }`
      }
    }
    // An absolute goal: the ratio column shows ours over the bare Worker's, the verdict is on ours.
    const commandsRow = (face: "promise" | "effect", c: number): Row => {
      const r = ratioOf(face, "while_executing", c)
      const other = worker.ratios.find((x) => x.face === face && x.lock === "while_executing" && x.concurrency !== c)
      const through = face === "promise" ? "`unique.processor`" : "`BullMQ.processor` (Effect face)"
      return {
        target: `Redis commands per job inside the scripts, Worker \`while_executing\` through ${through}, c=${c}`,
        goal: `≤ ${commandsGoal}`,
        ours: `${r.commands.ours.toFixed(1)} commands`,
        peer: `${r.commands.bare.toFixed(1)} (bare Worker)`,
        ratio: r.commands.ours / r.commands.bare,
        met: r.commands.ours <= commandsGoal,
        perJob: perJob(r),
        measured: `${r.commands.ours.toFixed(1)} commands per job against ${r.commands.bare.toFixed(1)} for the bare ` +
          `Worker (INFO commandstats: every command but EVALSHA and the probe's), ${r.evalsha.ours.toFixed(2)} / ` +
          `${r.evalsha.bare.toFixed(2)} script calls${
            other === undefined
              ? ""
              : `; at c=${other.concurrency}: ${other.commands.ours.toFixed(1)} against ${other.commands.bare.toFixed(1)}`
          }`
      }
    }
    const [middlewareCpu, uaweCpu, lockThroughput] = Foundation.targets(lifecycles)
    const rows: Array<Row> = [
      ...[1, 32].map((c) =>
        addRow("unique-executed", "bullmq-dedup", "`UniqueQueue.add` (`until_executed`) vs BullMQ `deduplication` adds/s", c)
      ),
      ...[1, 32].map((c) =>
        addRow(
          "unique-expired",
          "bullmq-dedup-ttl",
          "`UniqueQueue.add` (`until_expired`) vs BullMQ `deduplication: { ttl }` adds/s",
          c
        )
      ),
      ...(["promise", "effect"] as const).flatMap((face) =>
        (["until_executed", "while_executing"] as const).flatMap((lock) => [1, 32].map((c) => workerRow(face, lock, c)))
      ),
      commandsRow("promise", 32),
      commandsRow("effect", 32),
      { target: "Middleware `until_executed` client + server, Node CPU vs raw pair", ...middlewareCpu! },
      { target: "Middleware `until_and_while_executing`, Node CPU vs raw pair", ...uaweCpu! },
      { target: "`Lock.lock` + `Lock.unlock` throughput vs raw pair (async loops)", ...lockThroughput! },
      { target: "Redis script time per lifecycle vs raw pair", ...Verdicts.scriptTime(lifecycles) },
      { target: "Redis memory per held lock vs plain `SET`", ...Verdicts.memory(memory) },
      {
        target: `acquire cost at ${settings.growthSizes[1]!.toLocaleString("en-US")} held locks vs ${
          settings.growthSizes[0]!.toLocaleString("en-US")
        }`,
        ...Verdicts.growth(growth)
      }
    ]
    const failures = [...adds.failures.map((f) => `BullMQ adds: ${f}`), ...worker.failures.map((f) => `Worker: ${f}`)]
    const totalSeconds = Math.round((performance.now() - started) / 1000)

    log(`\ntargets (${totalSeconds} s)`)
    for (const r of rows) {
      log(`  ${r.met ? "met   " : "MISSED"} ${r.target}: ${fmtRatio(r.ratio)} (ours ${r.ours}, peer ${r.peer}; goal ${r.goal})`)
    }

    const cpu = os.cpus()
    const lines = [
      `Run ${new Date().toISOString()} (${totalSeconds} s in all: ${
        Object.entries(seconds).map(([k, v]) => `${k} ${v} s`).join(", ")
      }), code ${revision()}: ${cpu.length} × ${cpu[0]?.model ?? "unknown"}, Node ${process.version}, Redis ${redisVersion} (one private ` +
      `redis-server for every section), BullMQ ${BullMQ.bullmqVersion()}, load average before the run ` +
      `${loadAverage.join(" / ")}.`,
      "",
      "Every ratio is ours over the peer measured in the same run, in alternating rounds (medians); a cost ratio (CPU, " +
      "Redis time, memory, acquire cost) is better below 1, a rate ratio (adds/s, jobs/s, lifecycles/s) above 1.",
      "",
      "Beside each Worker ratio, per job (medians of the same rounds): Node CPU, script calls (EVALSHA, BullMQ's and " +
      "ours) and Redis commands (INFO commandstats: every other command, i.e. the ones run inside the scripts and the " +
      "few sent alone), ours; then the bare Worker's.",
      "",
      "| target | goal | ours | peer | ratio | verdict | per job: ours; bare Worker |",
      "| --- | --- | ---: | ---: | ---: | --- | --- |",
      ...rows.map((r) =>
        `| ${r.target} | ${r.goal} | ${r.ours} | ${r.peer} | ${fmtRatio(r.ratio)} | ${r.met ? "met" : "**missed**"} | ` +
        `${r.perJob ?? ""} |`
      ),
      "",
      "Not in this run: Redis instructions per lifecycle against sidekiq-unique-jobs v9's scripts (goal ≤ 1.0×) come " +
      "from `npm run bench -- --scripts --gem=<sidekiq-unique-jobs checkout>` (callgrind), in " +
      "`bench/results/scripts-gem.md`.",
      "",
      "Beside each ratio:",
      "",
      ...rows.map((r) => `- ${r.target}: ${r.measured}`),
      "",
      "Settings:",
      "",
      `- BullMQ adds (\`bench/bullmq.ts\`): ${BullMQ.settingsLine(settings.bullmqRounds).replace(/^Settings: /, "")}`,
      `- Worker (\`bench/worker.ts\`): ${Worker.settingsLines(worker).join(" ").replace(/^Settings: /, "")}`,
      `- Lifecycles (\`bench/foundation.ts\`): ${Foundation.contenders.join(", ")} at c=64 without auto-pipelining, ` +
      `median of ${settings.lifecycleRounds} alternating rounds of ${settings.lifecycleRoundMs} ms after ` +
      `${settings.lifecycleWarmupMs} ms of warm-up each; the raw pair is ioredis \`SET NX PX\` + a compare-and-delete ` +
      "script from async loops.",
      `- Memory (\`bench/memory.ts\`): ${settings.memoryLocks.toLocaleString("en-US")} locks in an empty database, ` +
      `INFO \`used_memory\` before and after, median of ${settings.memoryRounds} alternating rounds; ours is ` +
      "`until_executed` with a `lockTtl` and no `lockInfo`.",
      `- Growth (\`bench/growth.ts\`): ${settings.growthSizes.map((n) => n.toLocaleString("en-US")).join(" and ")} ` +
      `held locks (one database each), ${settings.growthRounds} alternating rounds of ${settings.growthRoundMs} ms ` +
      `(Lock.lock on fresh digests at c=64) and ${settings.growthLatencySamples} acquires at c=1; the ratio is the ` +
      "worst of throughput cost, latency and Redis time.",
      "",
      failures.length === 0
        ? `Checks: ${BullMQ.checksLine(adds).replace(/^Checks: /, "BullMQ adds: ")} Worker: ${
          Worker.checksLine(worker).replace(/^Checks: /, "")
        }`
        : `**CHECKS FAILED** (${failures.length}):\n\n${failures.map((f) => `- ${f}`).join("\n")}`
    ]
    writeFileSync(
      new URL("./results/targets.md", import.meta.url),
      `# Targets (issues 20 and 50)\n\n\`npm run bench -- --targets\`\n\n${lines.join("\n")}\n`
    )
    log(`\nwrote bench/results/targets.md (${totalSeconds} s)`)
    if (failures.length > 0) {
      log(`\nCHECKS FAILED (${failures.length}):`)
      for (const f of failures) log(`  ${f}`)
      process.exitCode = 1
    }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
