/**
 * The foundation targets (issue 10), measured alone so a run takes about a minute: Node CPU per lifecycle at c=64,
 * no pipelining, for the lock steps, the Middleware (until_executed) and until_and_while_executing through the
 * Middleware, each against the raw ioredis pair from async loops, in alternating rounds of the same run.
 *
 *   npm run bench -- --foundation     prints the table and writes bench/results/foundation.md
 */
import { writeFileSync } from "node:fs"
import * as os from "node:os"
import * as Effect from "effect/Effect"
import * as Scope from "effect/Scope"
import * as Exit from "effect/Exit"
import * as RedisServer from "../src/RedisServer.js"
import { Probe, round } from "./harness.js"
import * as Throughput from "./throughput.js"

const targets = [
  { id: "ours-middleware", what: "until_executed through Middleware client + server: Node CPU", max: 2.0 },
  { id: "uawe-middleware", what: "until_and_while_executing through the Middleware: Node CPU", max: 3.0 }
] as const

export const main = async (log: (line: string) => void): Promise<void> => {
  const scope = Effect.runSync(Scope.make())
  try {
    const server = await Effect.runPromise(Scope.extend(RedisServer.start, scope))
    const probe = await Probe.connect(server.url)
    const load = os.loadavg().map((x) => round(x, 2))
    const { rows } = await Throughput.run({
      url: server.url,
      probe,
      rounds: 5,
      roundMs: 1000,
      warmupMs: 1000,
      concurrencies: [64],
      only: ["raw-promises", "raw-fibers", "ours", "ours-middleware", "uawe-middleware"],
      pipelining: [false],
      log
    })
    const row = (id: string) => rows.find((r) => r.contender === id)!
    const raw = row("raw-promises")
    const lines = [
      `Run ${new Date().toISOString()}: c=64, no pipelining, median of 5 alternating rounds of 1000 ms; ` +
      `Node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? "cpu"}, load before ${load.join(" / ")}.`,
      "",
      "| contender | lifecycles/s | Node CPU µs per lifecycle | vs raw pair (async loops) |",
      "| --- | --- | --- | --- |",
      ...["raw-promises", "raw-fibers", "ours", "ours-middleware", "uawe-middleware"].map((id) => {
        const r = row(id)
        return `| ${r.label} | ${Math.round(r.cyclesPerSecond)} | ${round(r.nodeCpuUsPerCycle, 2)} | CPU ${
          round(r.nodeCpuUsPerCycle / raw.nodeCpuUsPerCycle, 2)
        }×, throughput ${round(r.cyclesPerSecond / raw.cyclesPerSecond, 2)}× |`
      }),
      "",
      "| target | goal | measured | verdict |",
      "| --- | --- | --- | --- |",
      ...targets.map((t) => {
        const ratio = round(row(t.id).nodeCpuUsPerCycle / raw.nodeCpuUsPerCycle, 2)
        return `| ${t.what} vs raw pair | <= ${t.max.toFixed(1)}× | ${ratio}× | ${ratio <= t.max ? "met" : "**missed**"} |`
      }),
      (() => {
        const ratio = round(row("ours").cyclesPerSecond / raw.cyclesPerSecond, 2)
        const fibers = round(row("ours").cyclesPerSecond / row("raw-fibers").cyclesPerSecond, 2)
        return `| Lock.lock + Lock.unlock throughput vs raw pair | >= 0.8× | ${ratio}× (vs the raw pair from Effect ` +
          `fibers: ${fibers}×) | ${ratio >= 0.8 ? "met" : "**missed**"} |`
      })()
    ]
    for (const line of lines) log(line)
    writeFileSync(new URL("./results/foundation.md", import.meta.url), `# Foundation targets\n\n${lines.join("\n")}\n`)
    await probe.close()
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
