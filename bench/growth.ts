/**
 * How acquire cost grows with the number of held locks. One database per size (1k, 10k, 100k, 1M held locks, filled
 * by a Lua bulk loader that calls the lock scripts' own `acquire`, so the entries are exactly what Lock.lock
 * writes), then, in alternating rounds over the sizes: Lock.lock on fresh digests at concurrency 64 (throughput)
 * and 1 (latency), and raw `SET NX PX` on fresh keys at concurrency 64 (what Redis' own keyspace growth costs).
 * The locks a round took are released after it, untimed, so every size stays put.
 */
import { readFileSync } from "node:fs"
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as Lock from "../dist/Lock.js"
import * as LockOptions from "../dist/Options.js"
import * as Redis from "../dist/Redis.js"
import { hex32, jidFor } from "./contenders.js"
import { delta, interleave, loopFibers, loopPromises, median, type Probe, round, withCpu } from "./harness.js"

const ttlMs = 60 * 60 * 1000
const definition = LockOptions.unsafeMake({ lock: "until_executed", lockTtl: ttlMs })

/** Takes locks from..to (inclusive) with acquire() itself; digests and jids from sha1 of the number. */
const loader = () => {
  const prelude = readFileSync(new URL("../lua/lib/prelude.lua", import.meta.url), "utf8")
  // Since issue 50 acquire takes the time as text too and checks the layout itself (a resets key and an epoch): a
  // checkout from before is called as it was.
  const call = prelude.includes("micros, stamp, queue")
    ? "acquire(digest .. ':LOCKED', KEYS[1], digest, jid, 1, ttl, 0, '', '', ms, micros, stamp, nil, nil, nil, nil, " +
      "ARGV[1] .. ':resets', '')"
    : "acquire(digest .. ':LOCKED', KEYS[1], digest, jid, 1, ttl, 0, '', '', ms, micros)"
  return `${prelude}
-- KEYS[1] <prefix>:digests   ARGV prefix, from, to, ttl ms
local ms, micros = now()
local stamp = string.format('%d', ms)
local ttl = tonumber(ARGV[4])
for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  local digest = ARGV[1] .. ':' .. string.sub(redis.sha1hex('d' .. i), 1, 32)
  local jid = string.sub(redis.sha1hex('j' .. i), 1, 24)
  ${call}
end
return 1`
}

export interface SizeResult {
  readonly held: number
  readonly db: number
  readonly fillSeconds: number
  /** Lock.lock on fresh digests, concurrency 64: median acquires per second. */
  readonly acquiresPerSecond: number
  /** Concurrency 1: median microseconds per acquire. */
  readonly latencyUs: number
  /** Redis time per acquire (EVALSHA usec from commandstats), over all rounds at concurrency 64. */
  readonly redisUsecPerAcquire: number
  readonly nodeCpuUsPerAcquire: number
  /** raw SET NX PX on fresh keys, concurrency 64. */
  readonly rawSetsPerSecond: number
  readonly rawUsecPerSet: number
}

export interface Result {
  readonly sizes: ReadonlyArray<SizeResult>
  /** Cost at the largest size over cost at the smallest (cost = 1 / throughput, latency, Redis usec). */
  readonly ratio: {
    readonly throughputCost: number
    readonly latency: number
    readonly redisUsec: number
    readonly rawSetCost: number
  }
}

export const run = async (options: {
  readonly url: string
  readonly probe: Probe
  readonly sizes: ReadonlyArray<number>
  readonly firstDb: number
  readonly rounds: number
  readonly roundMs: number
  readonly latencySamples: number
  readonly log: (line: string) => void
}): Promise<Result> => {
  const prefix = "uniquejobs"
  const script = loader()
  const scope = Effect.runSync(Scope.make())
  const dbs = options.sizes.map((held, k) => ({ held, db: options.firstDb + k }))
  const state = new Map<
    number,
    {
      admin: IORedis
      redis: Redis.RedisService["Service"]
      fillSeconds: number
      tput: Array<number>
      cpu: Array<number>
      latency: Array<number>
      raw: Array<number>
      evalsha: { calls: number; usec: number }
      set: { calls: number; usec: number }
    }
  >()
  let run = 0
  try {
    for (const { held, db } of dbs) {
      const url = `${options.url}/${db}`
      const admin = new IORedis(url, { lazyConnect: true })
      await admin.connect()
      await admin.flushdb()
      const sha = String(await admin.script("LOAD", script))
      const started = performance.now()
      const chunk = 20_000
      for (let from = 1; from <= held; from += chunk) {
        await admin.evalsha(sha, 1, `${prefix}:digests`, prefix, from, Math.min(held, from + chunk - 1), ttlMs)
      }
      const fillSeconds = (performance.now() - started) / 1000
      const keys = await admin.dbsize()
      if (keys !== held + 1) throw new Error(`growth: db ${db} holds ${keys} keys, expected ${held + 1}`)
      const redis = await Effect.runPromise(Scope.provide(Redis.make({ url }), scope))
      state.set(held, {
        admin,
        redis,
        fillSeconds,
        tput: [],
        cpu: [],
        latency: [],
        raw: [],
        evalsha: { calls: 0, usec: 0 },
        set: { calls: 0, usec: 0 }
      })
      options.log(`  filled ${held} held locks in ${fillSeconds.toFixed(1)} s (db ${db})`)
    }

    const fresh = (r: number, w: number, i: number) => `${prefix}:${hex32(`growth/${r}/${w}/${i}`)}`
    const release = async (held: number, digests: ReadonlyArray<{ digest: string; jid: string }>) => {
      const s = state.get(held)!
      await Effect.runPromise(
        Effect.forEach(digests, (target) => Lock.unlock(definition, target), { concurrency: 64, discard: true })
          .pipe(Effect.provideService(Redis.RedisService, s.redis))
      )
    }
    const acquireRound = async (held: number, concurrency: number, ms: number) => {
      const s = state.get(held)!
      const r = ++run
      const taken: Array<{ digest: string; jid: string }> = []
      const before = await options.probe.snapshot()
      const { cpuUs, value } = await withCpu(() =>
        Effect.runPromise(
          loopFibers(concurrency, ms, (w, i) => {
            const target = { digest: fresh(r, w, i), jid: jidFor(r, w, i) }
            taken.push(target)
            return Lock.lock(definition, target)
          }).pipe(Effect.provideService(Redis.RedisService, s.redis))
        )
      )
      const after = await options.probe.snapshot()
      await release(held, taken)
      return { window: value, cpuUs, redis: delta(before, after) }
    }

    const items = dbs.flatMap(({ held }) => [
      { held, kind: "tput" as const },
      { held, kind: "latency" as const },
      { held, kind: "raw" as const }
    ])
    await interleave(items, options.rounds, async ({ held, kind }) => {
      const s = state.get(held)!
      if (kind === "tput") {
        const { cpuUs, redis, window } = await acquireRound(held, 64, options.roundMs)
        s.tput.push(window.cycles / (window.ms / 1000))
        s.cpu.push(cpuUs / window.cycles)
        const e = redis.commands.evalsha
        if (e !== undefined) {
          s.evalsha.calls += e.calls
          s.evalsha.usec += e.usec
        }
      } else if (kind === "latency") {
        const r = ++run
        const taken: Array<{ digest: string; jid: string }> = []
        const times: Array<number> = []
        await Effect.runPromise(
          Effect.forEach(
            Array.from({ length: options.latencySamples }, (_, i) => i),
            (i) =>
              Effect.suspend(() => {
                const target = { digest: fresh(r, 0, i), jid: jidFor(r, 0, i) }
                taken.push(target)
                const started = performance.now()
                return Effect.map(Lock.lock(definition, target), () => times.push(performance.now() - started))
              }),
            { discard: true }
          ).pipe(Effect.provideService(Redis.RedisService, s.redis))
        )
        await release(held, taken)
        s.latency.push(median(times) * 1000)
      } else {
        const r = ++run
        const keys: Array<string> = []
        const before = await options.probe.snapshot()
        const window = await loopPromises(64, options.roundMs, async (w, i) => {
          const key = fresh(r, w, i)
          keys.push(key)
          await s.admin.set(key, jidFor(r, w, i), "PX", ttlMs, "NX")
        })
        const after = await options.probe.snapshot()
        for (let k = 0; k < keys.length; k += 1000) await s.admin.del(...keys.slice(k, k + 1000))
        s.raw.push(window.cycles / (window.ms / 1000))
        const set = delta(before, after).commands.set
        if (set !== undefined) {
          s.set.calls += set.calls
          s.set.usec += set.usec
        }
      }
    })

    const sizes: Array<SizeResult> = dbs.map(({ db, held }) => {
      const s = state.get(held)!
      return {
        held,
        db,
        fillSeconds: round(s.fillSeconds, 1),
        acquiresPerSecond: Math.round(median(s.tput)),
        latencyUs: round(median(s.latency), 1),
        redisUsecPerAcquire: round(s.evalsha.usec / s.evalsha.calls, 2),
        nodeCpuUsPerAcquire: round(median(s.cpu), 2),
        rawSetsPerSecond: Math.round(median(s.raw)),
        rawUsecPerSet: round(s.set.usec / s.set.calls, 2)
      }
    })
    for (const s of sizes) {
      options.log(
        `  ${String(s.held).padStart(8)} held: ${s.acquiresPerSecond} acquires/s, ${s.latencyUs} us at c=1, redis ${s.redisUsecPerAcquire} us/acquire; raw SET ${s.rawSetsPerSecond}/s (${s.rawUsecPerSet} us)`
      )
    }
    const first = sizes[0]!
    const last = sizes[sizes.length - 1]!
    const ratio = {
      throughputCost: round(first.acquiresPerSecond / last.acquiresPerSecond, 3),
      latency: round(last.latencyUs / first.latencyUs, 3),
      redisUsec: round(last.redisUsecPerAcquire / first.redisUsecPerAcquire, 3),
      rawSetCost: round(first.rawSetsPerSecond / last.rawSetsPerSecond, 3)
    }
    options.log(
      `  ${last.held} vs ${first.held}: acquire cost x${ratio.throughputCost} (throughput), x${ratio.latency} (latency), x${ratio.redisUsec} (Redis us); raw SET x${ratio.rawSetCost}`
    )
    return { sizes, ratio }
  } finally {
    for (const s of state.values()) {
      await s.admin.flushdb()
      await s.admin.quit()
    }
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
