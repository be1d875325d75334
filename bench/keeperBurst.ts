/**
 * Run locks taken in one burst (issue 18, item 10): N `while_executing` jobs (10,000 by default) started at once in
 * one process, each holding its run lock for three leases of `lease` ms (1,000 by default), on a private
 * redis-server. A 1 s lease is kept only by a process that turns its loop every few hundred ms, so this is measured
 * here, on a machine as quiet as the bench's, and not asserted in a test (test/keeper.test.ts holds the same burst
 * to a 3 s lease and excuses bursts the machine starved). Reports the outcomes, the event loop's longest delay
 * (perf_hooks), the CPU the process used, and the load average before the run.
 *
 *   npm run bench -- --keeper-burst [--locks=10000] [--lease=1000]     writes bench/results/keeper-burst.md
 */
import { writeFileSync } from "node:fs"
import * as os from "node:os"
import { monitorEventLoopDelay } from "node:perf_hooks"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as References from "effect/References"
import * as Scope from "effect/Scope"
import * as MemoryQueue from "../dist/adapters/MemoryQueue.js"
import * as Middleware from "../dist/Middleware.js"
import * as LockOptions from "../dist/Options.js"
import * as Redis from "../dist/Redis.js"
import * as RedisServer from "../dist/testing/RedisServer.js"

export const main = async (log: (line: string) => void, locks: number, leaseMs: number): Promise<void> => {
  const loadAverage = os.loadavg().map((x) => x.toFixed(2)).join(", ")
  const scope = Effect.runSync(Scope.make())
  try {
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const definition = LockOptions.unsafeMake({ lock: "while_executing", lockLease: leaseMs, lockPrefix: "burst" })
    const burst = Effect.forEach(
      Array.from({ length: locks }, (_, i) => i),
      (i) =>
        Middleware.server(definition, { worker: "BurstJob", queue: "q", args: [i], jid: `j${i}` }, Effect.sleep(3 * leaseMs))
          .pipe(
            Effect.map((outcome) => outcome._tag as string),
            Effect.catch((error) => Effect.succeed(error._tag))
          ),
      { concurrency: "unbounded" }
    ).pipe(
      Effect.provide(MemoryQueue.layer()),
      Effect.provide(Redis.layer({ url: server.url })),
      Effect.provideService(References.MinimumLogLevel, "Error")
    )
    const delay = monitorEventLoopDelay({ resolution: 10 })
    delay.enable()
    const cpu = process.cpuUsage()
    const started = performance.now()
    const outcomes = await Effect.runPromise(burst)
    const wallMs = performance.now() - started
    const used = process.cpuUsage(cpu)
    delay.disable()
    const counts: Record<string, number> = {}
    for (const outcome of outcomes) counts[outcome] = (counts[outcome] ?? 0) + 1
    const rows = [
      ["locks taken in one burst", String(locks)],
      ["lease", `${leaseMs} ms (each held for three)`],
      ["outcomes", Object.entries(counts).map(([tag, n]) => `${tag} ${n}`).join(", ")],
      ["event loop delay, longest", `${(delay.max / 1e6).toFixed(0)} ms`],
      ["event loop delay, p99", `${(delay.percentile(99) / 1e6).toFixed(0)} ms`],
      ["wall time", `${(wallMs / 1000).toFixed(1)} s`],
      ["CPU (user + system)", `${((used.user + used.system) / 1e6).toFixed(1)} s`],
      ["load average before (1, 5, 15 min)", loadAverage]
    ]
    const table = ["| | |", "| --- | --- |", ...rows.map(([k, v]) => `| ${k} | ${v} |`)].join("\n")
    for (const [k, v] of rows) log(`${k}: ${v}`)
    writeFileSync(
      new URL("./results/keeper-burst.md", import.meta.url),
      `# Run locks taken in one burst\n\n\`npm run bench -- --keeper-burst --locks=${locks} --lease=${leaseMs}\`, ` +
        `${new Date().toISOString()}, Node ${process.version}, ${os.cpus().length} cores.\n\n${table}\n`
    )
    log("wrote bench/results/keeper-burst.md")
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
