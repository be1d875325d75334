/**
 * A taker process for test/persistedqueue.race.test.ts: Effect's `PersistedQueue` on its Redis store, taking until
 * its stdin closes (or says STOP). Started as `node --import tsx test/support/persistedQueueWorker.ts <json Config>`;
 * says `READY` on stdout once it takes.
 *
 * - `adapter`: jobs through the library's adapter and the server middleware (`while_executing`, `log`).
 * - `bare`: `PersistedQueue.take` alone, the element `{ digest, n }`.
 * - `hold`: as `adapter`, but the perform says `STARTED <jid>` and never ends (the test kills the process).
 *
 * Each run is recorded in Redis, in Redis' own order: `INCR <prefix>:seq` as it starts and as it ends, then `RPUSH
 * <prefix>:runs "<digest> <start> <end>"`; each take's outcome is counted (`INCR <prefix>:ran` / `:skipped`).
 */
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as PersistedQueue from "effect/persistence/PersistedQueue"
import * as EffectRedis from "effect/persistence/Redis"
import * as Schema from "effect/Schema"
import * as UniquePersistedQueue from "../../src/adapters/PersistedQueue.js"
import { JobQueue } from "../../src/JobQueue.js"
import * as Redis from "../../src/Redis.js"
import * as UniqueJob from "../../src/UniqueJob.js"
import { makeEffectRedis } from "./persistedQueue.js"

export interface Config {
  readonly mode: "adapter" | "bare" | "hold"
  readonly url: string
  /** Where runs and counters are recorded. */
  readonly prefix: string
  /** The store's prefix (`layerStoreRedis({ prefix })`). */
  readonly storePrefix: string
  /** The lock prefix (adapter). */
  readonly lockPrefix: string
  readonly name: string
  readonly concurrency: number
  readonly performMs: number
  /** The run lock's lease (default the library's). */
  readonly lockLease?: number | undefined
  /** The store's lock expiration and refresh (default 30 s and 2 s). */
  readonly storeLock?: { readonly expiration: number; readonly refresh: number } | undefined
}

/** The element of the bare queue. */
export const Work = Schema.Struct({ digest: Schema.Number, n: Schema.Number })

/** The race's worker definition: the same in the test process (producer) and here. */
export const defineJob = (config: Pick<Config, "name" | "lockPrefix" | "lockLease">) =>
  UniqueJob.unsafeMake({
    worker: "RaceJob",
    queue: config.name,
    lock: "while_executing",
    onConflict: "log",
    lockPrefix: config.lockPrefix,
    ...(config.lockLease === undefined ? {} : { lockLease: config.lockLease })
  })

/** The store's settings, the same in both processes. */
export const storeOptions = (config: Pick<Config, "storePrefix" | "storeLock">) => ({
  prefix: config.storePrefix,
  pollInterval: 20,
  lockRefreshInterval: config.storeLock?.refresh ?? 2_000,
  lockExpiration: config.storeLock?.expiration ?? 30_000
})

const main = (config: Config) =>
  Effect.gen(function*() {
    const record = yield* Effect.acquireRelease(
      Effect.sync(() => new IORedis(config.url)),
      (client) => Effect.promise(() => client.quit().then(() => undefined, () => undefined))
    )
    const run = (digest: number) =>
      Effect.gen(function*() {
        const start = yield* Effect.promise(() => record.incr(`${config.prefix}:seq`))
        yield* Effect.sleep(config.performMs)
        const end = yield* Effect.promise(() => record.incr(`${config.prefix}:seq`))
        yield* Effect.promise(() => record.rpush(`${config.prefix}:runs`, `${digest} ${start} ${end}`))
      })
    const count = (what: "ran" | "skipped") => Effect.promise(() => record.incr(`${config.prefix}:${what}`))
    const factory = PersistedQueue.layer.pipe(Layer.provide(PersistedQueue.layerStoreRedis(storeOptions(config))))
    const effectRedis = Layer.effect(EffectRedis.Redis, makeEffectRedis(config.url))
    const services = yield* Layer.build(
      Layer.mergeAll(factory, Redis.layer({ url: config.url })).pipe(Layer.provideMerge(effectRedis))
    )
    if (config.mode === "bare") {
      const queue = yield* PersistedQueue.make({ name: config.name, schema: Work }).pipe(Effect.provideContext(services))
      yield* Effect.forEach(
        Array.from({ length: config.concurrency }),
        () => Effect.forkScoped(Effect.forever(queue.take((work) => Effect.andThen(run(work.digest), count("ran"))))),
        { discard: true }
      )
    } else {
      const adapter = yield* UniquePersistedQueue.make({
        name: config.name,
        presence: UniquePersistedQueue.presenceRedis({ prefix: config.storePrefix })
      }).pipe(Effect.provideContext(services))
      const job = defineJob(config)
      const handle = yield* UniquePersistedQueue.processor(job, (args, _, j) =>
        config.mode === "hold"
          ? Effect.andThen(Effect.sync(() => process.stdout.write(`STARTED ${j.jid}\n`)), Effect.never)
          : run(Number(args[0])))
      yield* adapter.work(
        (j) =>
          Effect.flatMap(
            handle(j).pipe(Effect.provideService(JobQueue, adapter), Effect.provideContext(services)),
            (outcome) => count(outcome._tag === "Performed" ? "ran" : "skipped")
          ),
        { concurrency: config.concurrency }
      )
    }
    process.stdout.write("READY\n")
    // Until the test says STOP or goes away; then the scope closes: takers interrupted, elements given back.
    yield* Effect.callback<void>((resume) => {
      process.stdin.on("data", (data) => {
        if (String(data).includes("STOP")) resume(Effect.void)
      })
      process.stdin.on("end", () => resume(Effect.void))
    })
  })

if (process.argv[2] !== undefined) {
  const config = JSON.parse(process.argv[2]) as Config
  Effect.runPromise(Effect.scoped(main(config))).then(
    () => process.exit(0),
    (error) => {
      process.stderr.write(`persistedQueueWorker: ${String(error)}\n`)
      process.exit(1)
    }
  )
}
