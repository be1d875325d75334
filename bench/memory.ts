/**
 * Redis memory per held lock: INFO memory `used_memory` before and after taking N locks in an empty database, in
 * alternating rounds, for a plain `SET digest jid PX ttl` lock and for ours with and without `lockInfo`.
 */
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as Lock from "../dist/Lock.js"
import * as LockOptions from "../dist/Options.js"
import * as Redis from "../dist/Redis.js"
import { hex32 } from "./contenders.js"
import { interleave, median, type Probe, round } from "./harness.js"

export interface Result {
  readonly locks: number
  readonly rounds: number
  /** Bytes per held lock, median over rounds. */
  readonly bytesPerLock: Readonly<Record<string, number>>
  readonly samples: Readonly<Record<string, ReadonlyArray<number>>>
  /** Ours without lockInfo / the plain SET lock. */
  readonly ratio: number
  readonly ratioWithInfo: number
  /** What a compact holder entry (`t,x,l`) would give: the same two keys, no JSON. */
  readonly ratioCompact: number
  /** One lock as Redis shows it, for the README. */
  readonly example: { readonly key: string; readonly field: string; readonly value: string }
}

const ttlMs = 30 * 60 * 1000

export const variants = {
  plain: "plain SET digest jid PX ttl",
  ours: "ours, until_executed with lockTtl (no lockInfo)",
  oursNoTtl: "ours, until_executed without lockTtl (no lockInfo)",
  oursInfo: "ours, until_executed with lockTtl and lockInfo",
  compact: "what-if: ours' two keys, holder as `t,x,l` (not shipped)"
} as const

type Variant = keyof typeof variants

export const run = async (options: {
  readonly url: string
  readonly db: number
  readonly probe: Probe
  readonly locks: number
  readonly rounds: number
  readonly log: (line: string) => void
}): Promise<Result> => {
  const url = `${options.url}/${options.db}`
  const admin = new IORedis(url, { lazyConnect: true })
  await admin.connect()
  const scope = Effect.runSync(Scope.make())
  const redis = await Effect.runPromise(Scope.provide(Redis.make({ url }), scope))
  const definitions = {
    ours: LockOptions.unsafeMake({ lock: "until_executed", lockTtl: ttlMs }),
    oursNoTtl: LockOptions.unsafeMake({ lock: "until_executed" }),
    oursInfo: LockOptions.unsafeMake({ lock: "until_executed", lockTtl: ttlMs, lockInfo: true })
  }
  const digest = (i: number) => `uniquejobs:${hex32(`memory/${i}`)}`
  const jid = (i: number) => hex32(`jid/${i}`).slice(0, 24)

  const fill = async (variant: Variant): Promise<void> => {
    if (variant === "compact") {
      // The same keys, TTL and index as Lock.lock writes, with the holder entry as "t,x,l" instead of JSON.
      const now = Date.now()
      for (let b = 0; b < options.locks; b += 1000) {
        const pipeline = admin.pipeline()
        for (let i = b; i < Math.min(b + 1000, options.locks); i++) {
          pipeline.hset(`${digest(i)}:LOCKED`, jid(i), `${now},${now + ttlMs},0`)
          pipeline.pexpire(`${digest(i)}:LOCKED`, ttlMs)
          pipeline.zadd("uniquejobs:digests", now + ttlMs, digest(i))
        }
        await pipeline.exec()
      }
      return
    }
    if (variant === "plain") {
      for (let b = 0; b < options.locks; b += 1000) {
        const pipeline = admin.pipeline()
        for (let i = b; i < Math.min(b + 1000, options.locks); i++) pipeline.set(digest(i), jid(i), "PX", ttlMs, "NX")
        await pipeline.exec()
      }
      return
    }
    const definition = definitions[variant]
    await Effect.runPromise(
      Effect.forEach(
        Array.from({ length: options.locks }, (_, i) => i),
        (i) =>
          Lock.lock(definition, {
            digest: digest(i),
            jid: jid(i),
            info: { worker: "ChargeCustomerJob", queue: "default", args: [i] }
          }),
        { concurrency: 64, discard: true }
      ).pipe(Effect.provideService(Redis.RedisService, redis))
    )
  }

  const usedMemory = async () => {
    // Let the allocator settle: two reads a moment apart that agree.
    let last = await options.probe.usedMemory()
    for (let i = 0; i < 10; i++) {
      await new Promise((r) => setTimeout(r, 20))
      const now = await options.probe.usedMemory()
      if (now === last) return now
      last = now
    }
    return last
  }

  const samples: Record<string, Array<number>> = {}
  try {
    await interleave(Object.keys(variants) as Array<Variant>, options.rounds, async (variant) => {
      await admin.flushdb()
      const before = await usedMemory()
      await fill(variant)
      // The prefix's layout record (one key whatever the count, written by the first variant to run) aside.
      const size = (await admin.dbsize()) - (await admin.exists("uniquejobs:layout"))
      const after = await usedMemory()
      const expected = variant === "plain" ? options.locks : options.locks + 1 // + the index
      if (size !== expected) throw new Error(`memory: ${variant} left ${size} keys, expected ${expected}`)
      ;(samples[variant] ??= []).push((after - before) / options.locks)
    })
    const example = { key: `${digest(0)}:LOCKED`, field: jid(0), value: "" }
    await admin.flushdb()
    await fill("ours")
    const value = (await admin.hget(example.key, example.field)) ?? ""
    await admin.flushdb()
    const bytesPerLock = Object.fromEntries(
      Object.entries(samples).map(([k, xs]) => [k, Math.round(median(xs))])
    )
    const result: Result = {
      locks: options.locks,
      rounds: options.rounds,
      bytesPerLock,
      samples: Object.fromEntries(Object.entries(samples).map(([k, xs]) => [k, xs.map(Math.round)])),
      ratio: round(bytesPerLock.ours! / bytesPerLock.plain!, 3),
      ratioWithInfo: round(bytesPerLock.oursInfo! / bytesPerLock.plain!, 3),
      ratioCompact: round(bytesPerLock.compact! / bytesPerLock.plain!, 3),
      example: { ...example, value }
    }
    for (const [k, v] of Object.entries(bytesPerLock)) {
      options.log(`  ${variants[k as Variant].padEnd(52)} ${v} B/lock`)
    }
    options.log(
      `  ours / plain: ${result.ratio}   with lockInfo: ${result.ratioWithInfo}   compact holder: ${result.ratioCompact}   (holder: ${value})`
    )
    return result
  } finally {
    await admin.quit()
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
