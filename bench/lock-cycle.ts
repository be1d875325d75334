/**
 * Lock + unlock cycles per second at concurrency 64, on one private redis-server, in alternating rounds:
 *   - ours: Lock.lock + Lock.unlock (one EVALSHA each) from 64 Effect fibers;
 *   - raw ioredis SET NX PX + a compare-and-delete script, from 64 plain async loops;
 *   - the same raw pair from 64 Effect fibers (what an Effect program calling ioredis itself pays).
 *
 *   npm run bench            (5 rounds of 2 s per contender)
 *   npm run bench -- --quick (3 rounds of 0.5 s)
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Lock from "../src/Lock.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/RedisServer.js"

const quick = process.argv.includes("--quick")
const rounds = quick ? 3 : 5
const roundMs = quick ? 500 : 2000
const concurrency = 64

const compareAndDelete = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

const median = (xs: ReadonlyArray<number>): number => {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

/** Cycles per second of `concurrency` plain async loops. */
const measurePromises = async (cycle: (worker: number, i: number) => Promise<unknown>): Promise<number> => {
  const deadline = Date.now() + roundMs
  let count = 0
  const start = performance.now()
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      for (let i = 0; Date.now() < deadline; i++) {
        await cycle(worker, i)
        count++
      }
    })
  )
  return count / ((performance.now() - start) / 1000)
}

/** Cycles per second of `concurrency` Effect fibers. */
const measureFibers = <E, R>(cycle: (worker: number, i: number) => Effect.Effect<unknown, E, R>) =>
  Effect.suspend(() => {
    const deadline = Date.now() + roundMs
    let count = 0
    const start = performance.now()
    const loop = (worker: number, i: number): Effect.Effect<void, E, R> =>
      Date.now() >= deadline ? Effect.void : Effect.flatMap(cycle(worker, i), () => {
        count++
        return loop(worker, i + 1)
      })
    return Effect.as(
      Effect.forEach(Array.from({ length: concurrency }, (_, w) => w), (w) => loop(w, 0), {
        concurrency: "unbounded",
        discard: true
      }),
      undefined
    ).pipe(Effect.map(() => count / ((performance.now() - start) / 1000)))
  })

const program = Effect.gen(function*() {
  const source = yield* RedisServer.acquire
  const redis = yield* Redis.make({ url: source.url })
  const definition = yield* Lock.make({ lock: "until_executed", lockTtl: "30 seconds", lockPrefix: "bench" })
  const raw = yield* Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new IORedis(source.url, { lazyConnect: true })
      await client.connect()
      return client
    }),
    (client) => Effect.promise(() => client.quit())
  )
  const cadSha = yield* Effect.promise(() => raw.script("LOAD", compareAndDelete) as Promise<string>)
  const rawPair = async (worker: number, i: number) => {
    const key = `raw:${worker}`
    const jid = `jid-${worker}-${i}`
    await raw.set(key, jid, "PX", 30_000, "NX")
    await raw.evalsha(cadSha, 1, key, jid)
  }

  const contenders: Record<string, Effect.Effect<number, unknown>> = {
    ours: measureFibers((worker, i) => {
      const target = { digest: `bench:${worker}`, jid: `jid-${worker}-${i}` }
      return Effect.zipRight(Lock.lock(definition, target), Lock.unlock(definition, target))
    }).pipe(Effect.provideService(Redis.RedisService, redis)),
    rawPromises: Effect.promise(() => measurePromises(rawPair)),
    rawFibers: measureFibers((worker, i) => {
      const key = `raw:${worker}`
      const jid = `jid-${worker}-${i}`
      return Effect.zipRight(
        Effect.tryPromise(() => raw.set(key, jid, "PX", 30_000, "NX")),
        Effect.tryPromise(() => raw.evalsha(cadSha, 1, key, jid))
      )
    })
  }

  const samples: Record<string, Array<number>> = {}
  for (let round = 0; round < rounds; round++) {
    for (const [name, measure] of Object.entries(contenders)) {
      ;(samples[name] ??= []).push(yield* measure)
    }
  }
  const rate = (name: string) => Math.round(median(samples[name]!))
  const result = {
    date: new Date().toISOString(),
    redis: source.source,
    concurrency,
    rounds,
    roundMs,
    cyclesPerSecond: {
      ours: rate("ours"),
      rawPromises: rate("rawPromises"),
      rawFibers: rate("rawFibers")
    },
    ratio: {
      oursVsRawPromises: Number((rate("ours") / rate("rawPromises")).toFixed(3)),
      oursVsRawFibers: Number((rate("ours") / rate("rawFibers")).toFixed(3))
    },
    target: 0.8
  }
  mkdirSync(new URL("./results/", import.meta.url), { recursive: true })
  writeFileSync(new URL("./results/lock-cycle.json", import.meta.url), JSON.stringify(result, null, 2) + "\n")
  const lines = [
    `lock+unlock cycles/s, concurrency ${concurrency}, median of ${rounds} rounds of ${roundMs} ms (Redis: ${source.source})`,
    `  effect-unique-jobs (Effect fibers)                 ${result.cyclesPerSecond.ours}`,
    `  raw SET NX PX + compare-and-delete (async loops)   ${result.cyclesPerSecond.rawPromises}`,
    `  raw SET NX PX + compare-and-delete (Effect fibers) ${result.cyclesPerSecond.rawFibers}`,
    `  ratio ours / raw (async loops):   ${result.ratio.oursVsRawPromises}`,
    `  ratio ours / raw (Effect fibers): ${result.ratio.oursVsRawFibers}   (target >= ${result.target})`
  ]
  yield* Effect.sync(() => process.stdout.write(lines.join("\n") + "\n"))
})

Effect.runPromise(Effect.scoped(program)).catch((error) => {
  process.exitCode = 1
  process.stderr.write(`${String(error)}\n`)
})
