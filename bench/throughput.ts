/**
 * The throughput matrix: every contender at every concurrency, with and without ioredis enableAutoPipelining, in
 * alternating rounds. Each round records cycles, Node CPU and the Redis server's counters, so Node CPU, Redis script
 * time, Redis CPU and round trips per cycle all come from the same rounds as the throughput.
 */
import * as Contenders from "./contenders.js"
import { addDeltas, type Delta, delta, interleave, median, type Probe, round, split, withCpu } from "./harness.js"

export interface Sample {
  readonly contender: string
  readonly pipelining: boolean
  readonly concurrency: number
  readonly round: number
  readonly cycles: number
  readonly ms: number
  readonly nodeCpuUs: number
  readonly redis: Delta
}

export interface Row {
  readonly contender: string
  readonly label: string
  readonly peer: boolean
  readonly phases: number
  readonly pipelining: boolean
  readonly concurrency: number
  /** Median over rounds. */
  readonly cyclesPerSecond: number
  readonly rounds: ReadonlyArray<number>
  /** Median over rounds, microseconds of Node CPU per cycle. */
  readonly nodeCpuUsPerCycle: number
  /** Over all rounds: commands the client sent per cycle (round trips). */
  readonly roundTripsPerCycle: number
  /** Commands run inside scripts (`redis.call`) per cycle. */
  readonly scriptCallsPerCycle: number
  /** Server time of the round-trip commands per cycle (commandstats usec; a script's includes its redis.calls). */
  readonly redisUsecPerCycle: number
  /** Redis main-thread CPU per cycle (INFO cpu), network handling included. */
  readonly redisCpuUsPerCycle: number
  readonly commands: Readonly<Record<string, { readonly calls: number; readonly usec: number }>>
}

export interface Options {
  readonly url: string
  readonly probe: Probe
  readonly rounds: number
  readonly roundMs: number
  readonly warmupMs: number
  readonly concurrencies: ReadonlyArray<number>
  readonly only?: ReadonlyArray<string> | undefined
  readonly pipelining: ReadonlyArray<boolean>
  readonly log: (line: string) => void
}

export const run = async (options: Options): Promise<{ samples: Array<Sample>; rows: Array<Row> }> => {
  const samples: Array<Sample> = []
  const rows: Array<Row> = []
  for (const pipelining of options.pipelining) {
    const connections = await Contenders.make(options.url, { enableAutoPipelining: pipelining, bullDb: 1 })
    const contenders = connections.contenders.filter((c) => options.only === undefined || options.only.includes(c.id))
    try {
      for (const contender of contenders) {
        await contender.run(64, options.warmupMs)
        await contender.after?.()
      }
      for (const concurrency of options.concurrencies) {
        await interleave(contenders, options.rounds, async (contender, r) => {
          const before = await options.probe.snapshot()
          const { cpuUs, value } = await withCpu(() => contender.run(concurrency, options.roundMs))
          const after = await options.probe.snapshot()
          await contender.after?.()
          samples.push({
            contender: contender.id,
            pipelining,
            concurrency,
            round: r,
            cycles: value.cycles,
            ms: value.ms,
            nodeCpuUs: cpuUs,
            redis: delta(before, after)
          })
        })
        for (const contender of contenders) {
          const mine = samples.filter((s) =>
            s.contender === contender.id && s.pipelining === pipelining && s.concurrency === concurrency
          )
          const cycles = mine.reduce((a, s) => a + s.cycles, 0)
          const redis = addDeltas(mine.map((s) => s.redis))
          const parts = split(redis, contender.topLevel)
          const row: Row = {
            contender: contender.id,
            label: contender.label,
            peer: contender.peer,
            phases: contender.phases,
            pipelining,
            concurrency,
            cyclesPerSecond: Math.round(median(mine.map((s) => s.cycles / (s.ms / 1000)))),
            rounds: mine.map((s) => Math.round(s.cycles / (s.ms / 1000))),
            nodeCpuUsPerCycle: round(median(mine.map((s) => s.nodeCpuUs / s.cycles)), 2),
            roundTripsPerCycle: round(parts.trips / cycles, 3),
            scriptCallsPerCycle: round(parts.inner / cycles, 2),
            redisUsecPerCycle: round(parts.tripUsec / cycles, 2),
            redisCpuUsPerCycle: round(redis.cpuUs / cycles, 2),
            commands: redis.commands
          }
          rows.push(row)
          options.log(
            `  ${pipelining ? "pipelined" : "plain    "} c=${String(concurrency).padStart(3)} ${
              contender.id.padEnd(17)
            } ${String(row.cyclesPerSecond).padStart(7)}/s  node ${row.nodeCpuUsPerCycle} us  redis ${row.redisUsecPerCycle} us (cpu ${row.redisCpuUsPerCycle})  trips ${row.roundTripsPerCycle}`
          )
        }
      }
    } finally {
      await connections.close()
    }
  }
  return { samples, rows }
}
