/**
 * Measuring tools shared by the bench sections: closed loops (plain async functions or Effect fibers), a probe of
 * the Redis server's own counters (INFO commandstats, cpu, memory), statistics.
 */
import { execFileSync } from "node:child_process"
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"

// ---------------------------------------------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------------------------------------------

export const median = (xs: ReadonlyArray<number>): number => quantile(xs, 0.5)

export const quantile = (xs: ReadonlyArray<number>, q: number): number => {
  if (xs.length === 0) return Number.NaN
  const sorted = [...xs].sort((a, b) => a - b)
  const at = (sorted.length - 1) * q
  const lo = Math.floor(at)
  const hi = Math.ceil(at)
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (at - lo)
}

export const round = (x: number, digits = 3): number => {
  if (!Number.isFinite(x)) return x
  const f = 10 ** digits
  return Math.round(x * f) / f
}

export const sum = (xs: ReadonlyArray<number>): number => xs.reduce((a, b) => a + b, 0)

/** Runs `rounds` rounds, each visiting every item once, the starting item rotated per round (no order bias). */
export const interleave = async <T>(
  items: ReadonlyArray<T>,
  rounds: number,
  visit: (item: T, round: number) => Promise<void>
): Promise<void> => {
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < items.length; k++) await visit(items[(k + r) % items.length]!, r)
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Closed loops
// ---------------------------------------------------------------------------------------------------------------

/** What a loop did in one timed window. */
export interface Window {
  readonly cycles: number
  readonly ms: number
}

/** `concurrency` plain async loops calling `cycle` until `ms` have passed. */
export const loopPromises = async (
  concurrency: number,
  ms: number,
  cycle: (worker: number, i: number) => Promise<unknown>
): Promise<Window> => {
  const start = performance.now()
  const deadline = start + ms
  let cycles = 0
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      for (let i = 0; performance.now() < deadline; i++) {
        await cycle(worker, i)
        cycles++
      }
    })
  )
  return { cycles, ms: performance.now() - start }
}

/** `concurrency` Effect fibers running `cycle` until `ms` have passed. */
export const loopFibers = <E, R>(
  concurrency: number,
  ms: number,
  cycle: (worker: number, i: number) => Effect.Effect<unknown, E, R>
): Effect.Effect<Window, E, R> =>
  Effect.suspend(() => {
    const start = performance.now()
    const deadline = start + ms
    let cycles = 0
    const loop = (worker: number, i: number): Effect.Effect<void, E, R> =>
      performance.now() >= deadline
        ? Effect.void
        : Effect.flatMap(cycle(worker, i), () => {
          cycles++
          return loop(worker, i + 1)
        })
    return Effect.map(
      Effect.forEach(Array.from({ length: concurrency }, (_, w) => w), (w) => loop(w, 0), {
        concurrency: "unbounded",
        discard: true
      }),
      (): Window => ({ cycles, ms: performance.now() - start })
    )
  })

/** Node CPU (user + system) in microseconds used while `f` ran. */
export const withCpu = async <A>(f: () => Promise<A>): Promise<{ readonly value: A; readonly cpuUs: number }> => {
  const before = process.cpuUsage()
  const value = await f()
  const used = process.cpuUsage(before)
  return { value, cpuUs: used.user + used.system }
}

// ---------------------------------------------------------------------------------------------------------------
// The Redis server's own counters
// ---------------------------------------------------------------------------------------------------------------

export interface CommandStat {
  readonly calls: number
  readonly usec: number
}

export interface Snapshot {
  readonly commands: Readonly<Record<string, CommandStat>>
  /** Main thread CPU, user + system, microseconds. */
  readonly cpuUs: number
  readonly usedMemory: number
}

export const parseInfo = (text: string): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const line of text.split("\r\n")) {
    const at = line.indexOf(":")
    if (at > 0 && !line.startsWith("#")) out[line.slice(0, at)] = line.slice(at + 1)
  }
  return out
}

const parseSnapshot = (text: string): Snapshot => {
  const info = parseInfo(text)
  const commands: Record<string, CommandStat> = {}
  for (const [key, value] of Object.entries(info)) {
    if (!key.startsWith("cmdstat_")) continue
    const fields = Object.fromEntries(value.split(",").map((kv) => kv.split("=") as [string, string]))
    commands[key.slice("cmdstat_".length)] = { calls: Number(fields.calls), usec: Number(fields.usec) }
  }
  const cpu = (name: string) => Number(info[name] ?? info[name.replace("_main_thread", "")] ?? 0)
  return {
    commands,
    cpuUs: Math.round((cpu("used_cpu_user_main_thread") + cpu("used_cpu_sys_main_thread")) * 1e6),
    usedMemory: Number(info.used_memory ?? 0)
  }
}

/** Commands the probe itself sends: left out of every delta. */
const probeCommands = new Set(["info", "select", "flushdb", "flushall", "memory", "config", "dbsize", "client"])

export interface Delta {
  readonly commands: Readonly<Record<string, CommandStat>>
  readonly cpuUs: number
  readonly usedMemory: number
}

export const delta = (before: Snapshot, after: Snapshot): Delta => {
  const commands: Record<string, CommandStat> = {}
  for (const [name, stat] of Object.entries(after.commands)) {
    if (probeCommands.has(name)) continue
    const was = before.commands[name] ?? { calls: 0, usec: 0 }
    const calls = stat.calls - was.calls
    if (calls > 0) commands[name] = { calls, usec: stat.usec - was.usec }
  }
  return { commands, cpuUs: after.cpuUs - before.cpuUs, usedMemory: after.usedMemory - before.usedMemory }
}

/** Adds deltas command by command. */
export const addDeltas = (deltas: ReadonlyArray<Delta>): Delta => {
  const commands: Record<string, { calls: number; usec: number }> = {}
  for (const d of deltas) {
    for (const [name, stat] of Object.entries(d.commands)) {
      const acc = (commands[name] ??= { calls: 0, usec: 0 })
      acc.calls += stat.calls
      acc.usec += stat.usec
    }
  }
  return {
    commands,
    cpuUs: sum(deltas.map((d) => d.cpuUs)),
    usedMemory: sum(deltas.map((d) => d.usedMemory))
  }
}

/** A separate connection that reads the server's counters. */
export class Probe {
  private constructor(readonly client: IORedis) {}

  static async connect(url: string): Promise<Probe> {
    const client = new IORedis(url, { lazyConnect: true })
    await client.connect()
    return new Probe(client)
  }

  async snapshot(): Promise<Snapshot> {
    return parseSnapshot(String(await this.client.call("INFO", "commandstats", "cpu", "memory")))
  }

  async usedMemory(): Promise<number> {
    return Number(parseInfo(String(await this.client.call("INFO", "memory"))).used_memory)
  }

  async info(section: string): Promise<Record<string, string>> {
    return parseInfo(String(await this.client.call("INFO", section)))
  }

  close(): Promise<unknown> {
    return this.client.quit()
  }
}

/**
 * Which of a contender's commands are round trips: the ones its client sends. Every other command in a delta ran
 * inside a script (`redis.call`), and its time is already inside the script's.
 */
export const split = (d: Delta, topLevel: ReadonlySet<string>) => {
  let trips = 0
  let tripUsec = 0
  let inner = 0
  for (const [name, stat] of Object.entries(d.commands)) {
    if (topLevel.has(name)) {
      trips += stat.calls
      tripUsec += stat.usec
    } else {
      inner += stat.calls
    }
  }
  return { trips, tripUsec, inner }
}

/** Counts the commands an ioredis client sends, by name (a MONITOR-free check of the round trips). */
export const spyCommands = (client: IORedis): Map<string, number> => {
  const counts = new Map<string, number>()
  const original = client.sendCommand.bind(client)
  client.sendCommand = ((command: { name: string }, ...rest: Array<unknown>) => {
    counts.set(command.name, (counts.get(command.name) ?? 0) + 1)
    return (original as (...args: Array<unknown>) => unknown)(command, ...rest)
  }) as typeof client.sendCommand
  return counts
}

/**
 * The code measured: HEAD, and whether src/ or lua/ had uncommitted changes (the bench runs the working tree); of
 * the checkout at `dir` when given (a `--root`), else of the current directory's.
 */
export const revision = (dir?: string): string => {
  const git = (...args: Array<string>) =>
    execFileSync("git", dir === undefined ? args : ["-C", dir, ...args], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"]
    }).trim()
  try {
    const changed = git("status", "--porcelain", "--", "src", "lua").split("\n").filter((line) => line !== "").length
    const head = git("rev-parse", "--short", "HEAD")
    return changed === 0 ? head : `${head} + uncommitted changes to ${changed} file(s) under src/ and lua/`
  } catch {
    return "unknown"
  }
}

/** A report's lines, kept as they are logged: `out` logs a line and keeps it for the results file. */
export const recorder = (log: (line: string) => void) => {
  const lines: Array<string> = []
  const out = (line: string) => {
    lines.push(line)
    log(line)
  }
  return { lines, out }
}

/** The argument list of the enqueue benches (BullMQ, PersistedQueue): a report of an account. */
export interface ReportData {
  readonly account: number
  readonly report: string
  readonly period: string
}

/** Argument list `k`: the same for every contender of a run. */
export const reportData = (k: number): ReportData => ({ account: 1000 + k, report: "daily-summary", period: "2026-11" })

/** `count` argument lists, list i % `distinct`, in an order shuffled once by `seed` (mulberry32: the same every run). */
export const shuffledWorkload = (count: number, distinct: number, seed: number): ReadonlyArray<ReportData> => {
  const order = Array.from({ length: count }, (_, i) => i % distinct)
  let state = seed
  const random = () => {
    state = (state + 0x6d2b79f5) | 0
    let t = Math.imul(state ^ (state >>> 15), 1 | state)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1))
    ;[order[i], order[j]] = [order[j]!, order[i]!]
  }
  return order.map(reportData)
}
