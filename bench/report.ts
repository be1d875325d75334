/**
 * The bench's results as a Markdown report and an SVG plot of throughput against concurrency (written by hand).
 */
import type * as Growth from "./growth.js"
import type * as Memory from "./memory.js"
import type * as RoundTrips from "./roundtrips.js"
import type * as Throughput from "./throughput.js"

export interface Target {
  readonly name: string
  readonly goal: string
  readonly measured: string
  readonly met: boolean
}

export interface Results {
  readonly date: string
  readonly mode: "quick" | "full"
  readonly machine: {
    readonly cpus: number
    readonly cpuModel: string
    readonly node: string
    readonly redis: string
    readonly loadAverage: ReadonlyArray<number>
  }
  readonly settings: {
    readonly rounds: number
    readonly roundMs: number
    readonly concurrencies: ReadonlyArray<number>
  }
  readonly durationSeconds: number
  readonly targets: ReadonlyArray<Target>
  readonly throughput: ReadonlyArray<Throughput.Row>
  readonly roundTrips: ReadonlyArray<RoundTrips.Row>
  readonly memory: Memory.Result
  readonly growth: Growth.Result
}

const fmt = (n: number): string =>
  !Number.isFinite(n) ? "n/a" : Math.abs(n) >= 1000 ? Math.round(n).toLocaleString("en-US") : String(n)

const table = (
  head: ReadonlyArray<string>,
  rows: ReadonlyArray<ReadonlyArray<string | number>>,
  align: "numbers" | "text" = "numbers"
): string =>
  [
    `| ${head.join(" | ")} |`,
    `| ${head.map((_, i) => (i === 0 || align === "text" ? "---" : "---:")).join(" | ")} |`,
    ...rows.map((r) => `| ${r.map((c) => (typeof c === "number" ? fmt(c) : c)).join(" | ")} |`)
  ].join("\n")

/** The display order and short names of the contenders. */
export const names: Record<string, string> = {
  "ours": "ours: Lock.lock + Lock.unlock",
  "ours-middleware": "ours: Middleware client + server",
  "uawe": "ours: until_and_while_executing steps",
  "uawe-middleware": "ours: until_and_while_executing Middleware",
  "raw-promises": "raw SET NX PX + CAD (async loops)",
  "raw-fibers": "raw SET NX PX + CAD (Effect fibers)",
  "semaphore": "redis-semaphore Mutex",
  "bullmq-unique": "BullMQ add + dedup (new ids)",
  "bullmq-duplicate": "BullMQ add + dedup (duplicates)"
}

export const markdown = (results: Results, plotFile: string): string => {
  const { machine, settings } = results
  const rows = results.throughput
  const concurrencies = settings.concurrencies
  const ids = Object.keys(names).filter((id) => rows.some((r) => r.contender === id))
  const rate = (id: string, pipelining: boolean, c: number) =>
    rows.find((r) => r.contender === id && r.pipelining === pipelining && r.concurrency === c)?.cyclesPerSecond ??
      Number.NaN
  const at64 = (pipelining: boolean) => rows.filter((r) => r.concurrency === 64 && r.pipelining === pipelining)
  const out: Array<string> = []
  out.push(
    `Run ${results.date} (${results.mode}, ${Math.round(results.durationSeconds)} s): ${machine.cpus} × ${machine.cpuModel}, ` +
      `Node ${machine.node}, Redis ${machine.redis} (a private redis-server), load average before the run ` +
      `${machine.loadAverage.map((x) => x.toFixed(2)).join(" / ")}. Throughput: median of ${settings.rounds} ` +
      `alternating rounds of ${settings.roundMs} ms per contender and setting.`,
    "",
    "### Targets (ratios from the same run)",
    "",
    table(
      ["target", "goal", "measured", "verdict"],
      results.targets.map((t) => [t.name, t.goal, t.measured, t.met ? "met" : "**missed**"]),
      "text"
    ),
    "",
    `![throughput against concurrency](${plotFile})`,
    "",
    "### Lifecycle throughput (cycles per second)",
    "",
    "One cycle is one lock lifecycle: ours takes the lock at enqueue and releases it after perform (`until_executed`, " +
      "`lockTtl` 30 s); the raw pair is `SET key jid NX PX 30000` + a compare-and-delete script; redis-semaphore is " +
      "`Mutex` acquire + release; BullMQ's is one `Queue.add` with `deduplication` (an enqueue, not a lock and a " +
      "release). Every loop has its own key: no conflicts.",
    ""
  )
  for (const pipelining of [false, true]) {
    if (!rows.some((r) => r.pipelining === pipelining)) continue
    out.push(
      `${pipelining ? "With" : "Without"} ioredis \`enableAutoPipelining\`:`,
      "",
      table(
        ["contender", ...concurrencies.map((c) => `c=${c}`)],
        ids.map((id) => [names[id]!, ...concurrencies.map((c) => rate(id, pipelining, c))])
      ),
      ""
    )
  }
  out.push(
    "### Cost per cycle at concurrency 64",
    "",
    "Node CPU from `process.cpuUsage`; Redis time is the commandstats `usec` of the commands the client sent (a " +
      "script's includes its `redis.call`s); Redis CPU is INFO cpu (main thread, network included); round trips are " +
      "commandstats `calls` of the commands the client sent, script calls those of the commands run inside scripts.",
    ""
  )
  for (const pipelining of [false, true]) {
    const r = at64(pipelining)
    if (r.length === 0) continue
    out.push(
      `${pipelining ? "With" : "Without"} autopipelining:`,
      "",
      table(
        ["contender", "Node CPU µs", "Redis time µs", "Redis CPU µs", "round trips", "lock phases", "script calls"],
        ids.flatMap((id) => {
          const x = r.find((row) => row.contender === id)
          return x === undefined ? [] : [[
            names[id]!,
            x.nodeCpuUsPerCycle,
            x.redisUsecPerCycle,
            x.redisCpuUsPerCycle,
            x.roundTripsPerCycle,
            x.phases,
            x.scriptCallsPerCycle
          ]]
        })
      ),
      ""
    )
  }
  out.push(
    "### Round trips per lifecycle, every lock type",
    "",
    "The Middleware's client (no-op enqueue) and server (no-op perform), one job at a time. `sent`: commands our " +
      "ioredis client sent (counted on the client); `round trips`: EVALSHA/EVAL calls Redis counted.",
    "",
    table(
      ["lock type", "phases", "sent", "round trips", "redis.calls inside", "Redis time µs"],
      results.roundTrips.map((r) => [
        `\`${r.lockType}\``,
        `${r.phases.length}: ${r.phases.join(", ")}`,
        r.clientCommandsPerLifecycle,
        r.serverRoundTripsPerLifecycle,
        r.scriptCallsPerLifecycle,
        r.redisUsecPerLifecycle
      ]),
      "text"
    ),
    "",
    "### Redis memory per held lock",
    "",
    `${fmt(results.memory.locks)} locks in an empty database, INFO memory \`used_memory\` before and after, median of ` +
      `${results.memory.rounds} alternating rounds. A holder entry as stored: \`${results.memory.example.value}\`.`,
    "",
    table(
      ["lock", "bytes per lock", "vs plain SET"],
      Object.entries(results.memory.bytesPerLock).map(([k, v]) => [
        variantNames[k] ?? k,
        v,
        (v / results.memory.bytesPerLock.plain!).toFixed(2)
      ])
    ),
    "",
    "### Acquire cost against held locks",
    "",
    "One database per size, filled by a Lua loader that calls the scripts' own `acquire`; Lock.lock on fresh digests " +
      "(released after each round, untimed), sizes in alternating rounds.",
    "",
    table(
      ["held locks", "acquires/s (c=64)", "latency µs (c=1)", "Redis µs/acquire", "Node CPU µs/acquire", "raw SET/s (c=64)", "fill s"],
      results.growth.sizes.map((s) => [
        s.held,
        s.acquiresPerSecond,
        s.latencyUs,
        s.redisUsecPerAcquire,
        s.nodeCpuUsPerAcquire,
        s.rawSetsPerSecond,
        s.fillSeconds
      ])
    ),
    ""
  )
  return out.join("\n")
}

const variantNames: Record<string, string> = {
  plain: "plain `SET digest jid PX ttl`",
  ours: "ours, `lockTtl`, no `lockInfo`",
  oursNoTtl: "ours, no `lockTtl`, no `lockInfo`",
  oursInfo: "ours, `lockTtl` and `lockInfo`",
  compact: "what-if: ours with the holder stored as `t,x,l` (not shipped)"
}

// ---------------------------------------------------------------------------------------------------------------
// SVG
// ---------------------------------------------------------------------------------------------------------------

const colors: Record<string, string> = {
  "ours": "#d62728",
  "ours-middleware": "#ff9896",
  "uawe": "#8c564b",
  "raw-promises": "#1f77b4",
  "raw-fibers": "#17becf",
  "semaphore": "#2ca02c",
  "bullmq-unique": "#9467bd",
  "bullmq-duplicate": "#bcbd22"
}

const escape = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

/** Two panels (without / with autopipelining), cycles per second against concurrency on a log axis. */
export const svg = (rows: ReadonlyArray<Throughput.Row>, concurrencies: ReadonlyArray<number>): string => {
  const ids = Object.keys(colors).filter((id) => rows.some((r) => r.contender === id))
  const max = Math.max(...rows.filter((r) => ids.includes(r.contender)).map((r) => r.cyclesPerSecond), 1)
  const step = niceStep(max / 5)
  const top = Math.ceil(max / step) * step
  const panelW = 360
  const panelH = 260
  const left = 70
  const gap = 60
  const topPad = 40
  const legendH = 18 * Math.ceil(ids.length / 2) + 20
  const width = left + 2 * panelW + gap + 20
  const height = topPad + panelH + 50 + legendH
  const lo = Math.log2(Math.min(...concurrencies))
  const hi = Math.log2(Math.max(...concurrencies))
  const x = (panel: number, c: number) =>
    left + panel * (panelW + gap) + (hi === lo ? panelW / 2 : ((Math.log2(c) - lo) / (hi - lo)) * panelW)
  const y = (v: number) => topPad + panelH - (v / top) * panelH
  const parts: Array<string> = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`
  ]
  ;[false, true].forEach((pipelining, panel) => {
    const x0 = left + panel * (panelW + gap)
    parts.push(
      `<text x="${x0 + panelW / 2}" y="${topPad - 16}" text-anchor="middle" font-weight="bold">${
        pipelining ? "with" : "without"
      } enableAutoPipelining</text>`,
      `<rect x="${x0}" y="${topPad}" width="${panelW}" height="${panelH}" fill="none" stroke="#999"/>`
    )
    for (let v = 0; v <= top; v += step) {
      parts.push(
        `<line x1="${x0}" x2="${x0 + panelW}" y1="${y(v)}" y2="${y(v)}" stroke="#eee"/>`,
        `<text x="${x0 - 6}" y="${y(v) + 4}" text-anchor="end">${v >= 1000 ? `${v / 1000}k` : v}</text>`
      )
    }
    for (const c of concurrencies) {
      parts.push(`<text x="${x(panel, c)}" y="${topPad + panelH + 16}" text-anchor="middle">${c}</text>`)
    }
    parts.push(
      `<text x="${x0 + panelW / 2}" y="${topPad + panelH + 34}" text-anchor="middle">concurrency (log scale)</text>`
    )
    for (const id of ids) {
      const points = concurrencies.flatMap((c) => {
        const r = rows.find((row) => row.contender === id && row.pipelining === pipelining && row.concurrency === c)
        return r === undefined ? [] : [[x(panel, c), y(r.cyclesPerSecond)] as const]
      })
      if (points.length === 0) continue
      const width = id === "ours" ? 3 : 1.5
      parts.push(
        `<polyline fill="none" stroke="${colors[id]}" stroke-width="${width}" points="${
          points.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(" ")
        }"/>`,
        ...points.map(([px, py]) => `<circle cx="${px.toFixed(1)}" cy="${py.toFixed(1)}" r="3" fill="${colors[id]}"/>`)
      )
    }
  })
  parts.push(
    `<text transform="translate(16 ${topPad + panelH / 2}) rotate(-90)" text-anchor="middle">cycles per second</text>`
  )
  ids.forEach((id, k) => {
    const lx = left + (k % 2) * (panelW + gap)
    const ly = topPad + panelH + 56 + 18 * Math.floor(k / 2)
    parts.push(
      `<line x1="${lx}" x2="${lx + 24}" y1="${ly - 4}" y2="${ly - 4}" stroke="${colors[id]}" stroke-width="3"/>`,
      `<text x="${lx + 30}" y="${ly}">${escape(names[id] ?? id)}</text>`
    )
  })
  parts.push("</svg>")
  return parts.join("\n") + "\n"
}

const niceStep = (raw: number): number => {
  const p = 10 ** Math.floor(Math.log10(raw))
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p
  return 10 * p
}
