/**
 * The targets' verdicts from measured results, shared by the full run (`bench/index.ts`), `--foundation` and
 * `--targets`, so that each target is computed one way: our figure, the peer's from the same run, their ratio and
 * whether the goal is met.
 */
import type * as Growth from "./growth.js"
import type * as Memory from "./memory.js"
import type * as Throughput from "./throughput.js"

export interface Verdict {
  readonly goal: string
  /** Our figure and the peer's, with units. */
  readonly ours: string
  readonly peer: string
  /** Ours over the peer's, oriented as the goal is (a cost or a rate). */
  readonly ratio: number
  readonly met: boolean
  /** The full run's one-line account (the ratio and what beside it). */
  readonly measured: string
}

export interface Goal {
  readonly text: string
  readonly met: (ratio: number) => boolean
}

export const atLeast = (min: number): Goal => ({ text: `≥ ${min.toFixed(1)}×`, met: (r) => r >= min })
export const atMost = (max: number): Goal => ({ text: `≤ ${max.toFixed(1)}×`, met: (r) => r <= max })

const r2 = (x: number) => x.toFixed(2)
const int = (x: number) => Math.round(x).toLocaleString("en-US")

/** A throughput row at c=64 without auto-pipelining, where the targets are set. */
export const at64 = (rows: ReadonlyArray<Throughput.Row>, id: string): Throughput.Row => {
  const row = rows.find((r) => r.contender === id && !r.pipelining && r.concurrency === 64)
  if (row === undefined) throw new Error(`no throughput row for ${id} at c=64 without pipelining`)
  return row
}

/** Node CPU per lifecycle of contender `id` against the raw pair from async loops. */
export const nodeCpu = (rows: ReadonlyArray<Throughput.Row>, id: string, goal: Goal): Verdict => {
  const ours = at64(rows, id)
  const raw = at64(rows, "raw-promises")
  const fibers = at64(rows, "raw-fibers")
  const ratio = ours.nodeCpuUsPerCycle / raw.nodeCpuUsPerCycle
  return {
    goal: goal.text,
    ours: `${r2(ours.nodeCpuUsPerCycle)} µs`,
    peer: `${r2(raw.nodeCpuUsPerCycle)} µs`,
    ratio,
    met: goal.met(ratio),
    measured: `${r2(ratio)}x (${ours.nodeCpuUsPerCycle} / ${raw.nodeCpuUsPerCycle} µs); vs Effect fibers ${
      r2(ours.nodeCpuUsPerCycle / fibers.nodeCpuUsPerCycle)
    }x`
  }
}

/** Lock.lock + Lock.unlock lifecycles per second against the raw pair from async loops. */
export const lockThroughput = (rows: ReadonlyArray<Throughput.Row>, goal: Goal): Verdict => {
  const ours = at64(rows, "ours")
  const raw = at64(rows, "raw-promises")
  const fibers = at64(rows, "raw-fibers")
  const ratio = ours.cyclesPerSecond / raw.cyclesPerSecond
  return {
    goal: goal.text,
    ours: `${int(ours.cyclesPerSecond)}/s`,
    peer: `${int(raw.cyclesPerSecond)}/s`,
    ratio,
    met: goal.met(ratio),
    measured: `${r2(ratio)} (${ours.cyclesPerSecond} / ${raw.cyclesPerSecond}); vs the raw pair from Effect fibers ${
      r2(ours.cyclesPerSecond / fibers.cyclesPerSecond)
    }`
  }
}

/** Redis time of the commands sent per lifecycle (a script's includes its `redis.call`s), ours over the raw pair. */
export const scriptTime = (rows: ReadonlyArray<Throughput.Row>): Verdict => {
  const ours = at64(rows, "ours")
  const raw = at64(rows, "raw-promises")
  const ratio = ours.redisUsecPerCycle / raw.redisUsecPerCycle
  const goal = atMost(3)
  return {
    goal: goal.text,
    ours: `${r2(ours.redisUsecPerCycle)} µs`,
    peer: `${r2(raw.redisUsecPerCycle)} µs`,
    ratio,
    met: goal.met(ratio),
    measured: `${r2(ratio)}x (${ours.redisUsecPerCycle} / ${raw.redisUsecPerCycle} µs); Redis CPU ${
      r2(ours.redisCpuUsPerCycle / raw.redisCpuUsPerCycle)
    }x`
  }
}

/** Bytes per held lock, ours without lockInfo over a plain `SET` lock. */
export const memory = (result: Memory.Result): Verdict => {
  const bytes = result.bytesPerLock
  const vs = (variant: string) => r2(bytes[variant]! / bytes.plain!)
  const goal = atMost(2)
  return {
    goal: goal.text,
    ours: `${bytes.ours} B`,
    peer: `${bytes.plain} B`,
    ratio: result.ratio,
    met: goal.met(result.ratio),
    measured: `${vs("ours")}x (${bytes.ours} / ${bytes.plain} B); lockInfo ${vs("oursInfo")}x; a compact \`t,x,l\` ` +
      `holder would give ${vs("compact")}x (${bytes.compact} B)`
  }
}

/** Acquire cost at the largest size against the smallest: the worst of throughput cost, latency and Redis time. */
export const growth = (result: Growth.Result): Verdict => {
  const { ratio } = result
  const worst = Math.max(ratio.throughputCost, ratio.latency, ratio.redisUsec)
  const figures = (s: Growth.SizeResult) =>
    `${int(s.acquiresPerSecond)}/s, ${s.latencyUs} µs at c=1, ${s.redisUsecPerAcquire} Redis µs`
  const goal = atMost(1.2)
  return {
    goal: goal.text,
    ours: figures(result.sizes[result.sizes.length - 1]!),
    peer: figures(result.sizes[0]!),
    ratio: worst,
    met: goal.met(worst),
    measured: `throughput ${r2(ratio.throughputCost)}x, latency ${r2(ratio.latency)}x, Redis µs ${
      r2(ratio.redisUsec)
    }x (raw SET ${r2(ratio.rawSetCost)}x)`
  }
}
