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
import * as RedisServer from "../dist/testing/RedisServer.js"
import { type Probe as ProbeType, Probe, round } from "./harness.js"
import * as Throughput from "./throughput.js"
import * as Verdicts from "./verdicts.js"

export const contenders = ["raw-promises", "raw-fibers", "ours", "ours-middleware", "uawe-middleware"]

/** The foundation's targets, from rows of one run. */
export const targets = (rows: ReadonlyArray<Throughput.Row>) => [
  {
    what: "until_executed through Middleware client + server: Node CPU vs raw pair",
    ...Verdicts.nodeCpu(rows, "ours-middleware", Verdicts.atMost(2))
  },
  {
    what: "until_and_while_executing through the Middleware: Node CPU vs raw pair",
    ...Verdicts.nodeCpu(rows, "uawe-middleware", Verdicts.atMost(3))
  },
  { what: "Lock.lock + Lock.unlock throughput vs raw pair", ...Verdicts.lockThroughput(rows, Verdicts.atLeast(0.8)) }
]

/** The five contenders at c=64, no pipelining, in alternating rounds. */
export const run = async (options: {
  readonly url: string
  readonly probe: ProbeType
  readonly rounds: number
  readonly roundMs: number
  readonly warmupMs: number
  readonly log: (line: string) => void
}): Promise<Array<Throughput.Row>> =>
  (await Throughput.run({
    ...options,
    concurrencies: [64],
    only: contenders,
    pipelining: [false]
  })).rows

export const main = async (log: (line: string) => void): Promise<void> => {
  const scope = Effect.runSync(Scope.make())
  try {
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const probe = await Probe.connect(server.url)
    const load = os.loadavg().map((x) => round(x, 2))
    const rows = await run({ url: server.url, probe, rounds: 5, roundMs: 1000, warmupMs: 1000, log })
    const row = (id: string) => Verdicts.at64(rows, id)
    const raw = row("raw-promises")
    const lines = [
      `Run ${new Date().toISOString()}: c=64, no pipelining, median of 5 alternating rounds of 1000 ms; ` +
      `Node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? "cpu"}, load before ${load.join(" / ")}.`,
      "",
      "| contender | lifecycles/s | Node CPU µs per lifecycle | vs raw pair (async loops) |",
      "| --- | --- | --- | --- |",
      ...contenders.map((id) => {
        const r = row(id)
        return `| ${r.label} | ${Math.round(r.cyclesPerSecond)} | ${round(r.nodeCpuUsPerCycle, 2)} | CPU ${
          round(r.nodeCpuUsPerCycle / raw.nodeCpuUsPerCycle, 2)
        }×, throughput ${round(r.cyclesPerSecond / raw.cyclesPerSecond, 2)}× |`
      }),
      "",
      "| target | goal | measured | verdict |",
      "| --- | --- | --- | --- |",
      ...targets(rows).map((t) =>
        `| ${t.what} | ${t.goal} | ${t.ratio.toFixed(2)}× (${t.ours} / ${t.peer}) | ${t.met ? "met" : "**missed**"} |`
      )
    ]
    for (const line of lines) log(line)
    writeFileSync(new URL("./results/foundation.md", import.meta.url), `# Foundation targets\n\n${lines.join("\n")}\n`)
    await probe.close()
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
