/**
 * Everything measured in the throughput matrix, each as "run `concurrency` closed loops for `ms`". One cycle:
 *
 *   ours                Lock.lock then Lock.unlock (until_executed, lockTtl 30 s): the client lock at enqueue and the
 *                       server release after perform, as lock steps (one EVALSHA each), from Effect fibers
 *   ours-middleware     Middleware.client (no-op enqueue) then Middleware.server (no-op perform), until_executed:
 *                       what a queue adapter runs, digest (MD5) and span included
 *   uawe                until_and_while_executing as lock steps: Lock.lock, Lock.handoff, Lock.unlock (run phase)
 *   uawe-middleware     until_and_while_executing through the middleware: client lock, handoff, lease fiber, release
 *   raw-promises        ioredis SET key jid PX 30000 NX + a compare-and-delete EVALSHA, from plain async loops
 *   raw-fibers          the same raw pair from Effect fibers (Effect.tryPromise): what an Effect program calling
 *                       ioredis itself pays
 *   semaphore           redis-semaphore Mutex acquire + release (lockTimeout 30 s, its default refresh timer)
 *   bullmq-unique       BullMQ Queue.add with `deduplication` (a new id every add: each add enqueues a job)
 *   bullmq-duplicate    BullMQ Queue.add with `deduplication` (one id per loop: every add after the first is
 *                       deduplicated)
 *
 * Every loop uses its own key, so nothing conflicts; the key is a realistic digest (`<prefix>:<32 hex>`) and the
 * jid a realistic 24-hex string, the same for every contender.
 */
import { createHash } from "node:crypto"
import { Queue } from "bullmq"
import { Redis as IORedis } from "ioredis"
import { Mutex } from "redis-semaphore"
import * as Effect from "effect/Effect"
import type { Job } from "../dist/Job.js"
import { JobQueue } from "../dist/JobQueue.js"
import * as Lock from "../dist/Lock.js"
import * as LockOptions from "../dist/Options.js"
import * as Middleware from "../dist/Middleware.js"
import * as Redis from "../dist/Redis.js"
import { loopFibers, loopPromises, spyCommands, type Window } from "./harness.js"

export interface Contender {
  readonly id: string
  readonly label: string
  /** The commands its client sends (round trips); every other command in its deltas ran inside a script. */
  readonly topLevel: ReadonlySet<string>
  /** Lock phases per cycle (each should be one round trip). */
  readonly phases: number
  /** In the comparison with the peers (the plot). */
  readonly peer: boolean
  readonly run: (concurrency: number, ms: number) => Promise<Window>
  /** Untimed cleanup after a round. */
  readonly after?: (() => Promise<void>) | undefined
  /** Commands its clients sent so far (a client-side count, MONITOR-free), when made with `spy`. */
  readonly sent: () => number
}

export const hex32 = (seed: string): string => createHash("md5").update(seed).digest("hex")

/** One realistic digest per loop (a loop holds at most one lock at a time). */
export const digestFor = (prefix: string, worker: number): string => `${prefix}:${hex32(`${prefix}/${worker}`)}`

/** A 24-hex jid, unique per (loop, cycle, run). */
export const jidFor = (run: number, worker: number, i: number): string =>
  `${run.toString(16).padStart(4, "0")}${worker.toString(16).padStart(4, "0")}${i.toString(16).padStart(16, "0")}`

export const compareAndDelete =
  `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

const evalTrips = ["evalsha", "eval"]

let runs = 0

/** The JobQueue the middleware strategies would use; no conflicts happen here, so it is never called. */
export const noQueue = JobQueue.of({
  push: () => Effect.void,
  schedule: () => Effect.void,
  remove: () => Effect.succeed(false),
  kill: () => Effect.void,
  exists: (jobs) => Effect.succeed(jobs.map(() => "gone" as const))
})

export interface Connections {
  readonly contenders: ReadonlyArray<Contender>
  readonly close: () => Promise<void>
}

export const connectIORedis = async (url: string, options: { readonly enableAutoPipelining: boolean }) => {
  const client = new IORedis(url, { lazyConnect: true, enableAutoPipelining: options.enableAutoPipelining })
  await client.connect()
  return client
}

/** The lock definitions the bench uses. */
export const definitions = {
  untilExecuted: LockOptions.unsafeMake({ lock: "until_executed", lockTtl: "30 seconds" }),
  untilAndWhile: LockOptions.unsafeMake({ lock: "until_and_while_executing", lockTtl: "30 seconds" })
}

/**
 * Every contender on its own connections to `url` (BullMQ on database `bullDb`, flushed after each of its rounds).
 */
export const make = async (
  url: string,
  options: { readonly enableAutoPipelining: boolean; readonly bullDb: number; readonly spy?: boolean | undefined }
): Promise<Connections> => {
  const { enableAutoPipelining } = options
  const counts = new Map<IORedis, Map<string, number>>()
  const spied = (client: IORedis) => {
    if (options.spy === true) counts.set(client, spyCommands(client))
    return client
  }
  const sentBy = (...clients: Array<IORedis>) => () =>
    clients.reduce((n, c) => n + Array.from(counts.get(c)?.values() ?? []).reduce((a, b) => a + b, 0), 0)
  // Ours over a client made as Redis.make makes it (no offline queue), so the bench can count what it sends.
  const oursClient = spied(
    new IORedis(url, { lazyConnect: true, enableOfflineQueue: false, enableAutoPipelining })
  )
  await oursClient.connect()
  const redis = await Effect.runPromise(Redis.makeFromClient(oursClient))
  const provide = <A, E>(effect: Effect.Effect<A, E, Redis.RedisService | JobQueue>) =>
    effect.pipe(Effect.provideService(Redis.RedisService, redis), Effect.provideService(JobQueue, noQueue))

  const raw = await connectIORedis(url, { enableAutoPipelining })
  const cadSha = String(await raw.script("LOAD", compareAndDelete))
  spied(raw)
  const semaphoreClient = spied(await connectIORedis(url, { enableAutoPipelining }))
  const bullUrl = `${url}/${options.bullDb}`
  const bullClient = await connectIORedis(bullUrl, { enableAutoPipelining })
  const bullAdmin = await connectIORedis(bullUrl, { enableAutoPipelining: false })
  const queue = new Queue("bench", { connection: bullClient })
  await queue.waitUntilReady()
  spied(bullClient)
  const ours = sentBy(oursClient)

  const digests = (prefix: string) => Array.from({ length: 1024 }, (_, w) => digestFor(prefix, w))
  const oursDigests = digests("uniquejobs")
  const rawKeys = digests("raw")
  const semaphoreKeys = digests("sem")

  const fibers = (cycle: (run: number) => (worker: number, i: number) => Effect.Effect<unknown, unknown, Redis.RedisService | JobQueue>) =>
  (concurrency: number, ms: number) => Effect.runPromise(provide(loopFibers(concurrency, ms, cycle(++runs))))
  const promises = (cycle: (run: number) => (worker: number, i: number) => Promise<unknown>) =>
  (concurrency: number, ms: number) => loopPromises(concurrency, ms, cycle(++runs))

  const jobOf = (run: number, worker: number, i: number): Job => ({
    jid: jidFor(run, worker, i),
    worker: "BenchJob",
    queue: "default",
    args: [worker]
  })

  const contenders: Array<Contender> = [
    {
      id: "ours",
      label: "effect-unique-jobs: Lock.lock + Lock.unlock (Effect fibers)",
      topLevel: new Set(evalTrips),
      phases: 2,
      peer: true,
      sent: ours,
      run: fibers((run) => (worker, i) => {
        const target = { digest: oursDigests[worker]!, jid: jidFor(run, worker, i) }
        return Effect.andThen(Lock.lock(definitions.untilExecuted, target), Lock.unlock(definitions.untilExecuted, target))
      })
    },
    {
      id: "ours-middleware",
      label: "effect-unique-jobs: Middleware client + server, no-op enqueue/perform (until_executed)",
      topLevel: new Set(evalTrips),
      phases: 2,
      peer: false,
      sent: ours,
      run: fibers((run) => (worker, i) => {
        const client = Middleware.client(definitions.untilExecuted)
        const server = Middleware.server(definitions.untilExecuted)
        return Effect.flatMap(client(jobOf(run, worker, i), () => Effect.void), (outcome) =>
          server(outcome.job, Effect.void))
      })
    },
    {
      id: "uawe",
      label: "effect-unique-jobs: until_and_while_executing as lock steps (lock, handoff, release)",
      topLevel: new Set(evalTrips),
      phases: 3,
      peer: false,
      sent: ours,
      run: fibers((run) => (worker, i) => {
        const target = { digest: oursDigests[worker]!, jid: jidFor(run, worker, i) }
        const d = definitions.untilAndWhile
        return Lock.lock(d, target).pipe(
          Effect.andThen(Lock.handoff(d, target, { keepQueueLock: false })),
          Effect.andThen(Lock.unlock(d, { ...target, phase: "run" }))
        )
      })
    },
    {
      id: "uawe-middleware",
      label: "effect-unique-jobs: until_and_while_executing through the Middleware (no-op perform)",
      topLevel: new Set(evalTrips),
      phases: 3,
      peer: false,
      sent: ours,
      run: fibers((run) => (worker, i) => {
        const client = Middleware.client(definitions.untilAndWhile)
        const server = Middleware.server(definitions.untilAndWhile)
        return Effect.flatMap(client(jobOf(run, worker, i), () => Effect.void), (outcome) =>
          server(outcome.job, Effect.void))
      })
    },
    {
      id: "raw-promises",
      label: "raw ioredis SET NX PX + compare-and-delete (async loops)",
      topLevel: new Set(["set", ...evalTrips]),
      phases: 2,
      peer: true,
      sent: sentBy(raw),
      run: promises((run) => async (worker, i) => {
        const key = rawKeys[worker]!
        const jid = jidFor(run, worker, i)
        await raw.set(key, jid, "PX", 30_000, "NX")
        await raw.evalsha(cadSha, 1, key, jid)
      })
    },
    {
      id: "raw-fibers",
      label: "raw ioredis SET NX PX + compare-and-delete (Effect fibers)",
      topLevel: new Set(["set", ...evalTrips]),
      phases: 2,
      peer: true,
      sent: sentBy(raw),
      run: fibers((run) => (worker, i) => {
        const key = rawKeys[worker]!
        const jid = jidFor(run, worker, i)
        return Effect.andThen(
          Effect.tryPromise(() => raw.set(key, jid, "PX", 30_000, "NX")),
          Effect.tryPromise(() => raw.evalsha(cadSha, 1, key, jid))
        )
      })
    },
    {
      id: "semaphore",
      label: "redis-semaphore Mutex acquire + release",
      topLevel: new Set(["set", ...evalTrips]),
      phases: 2,
      peer: true,
      sent: sentBy(semaphoreClient),
      run: promises(() => async (worker) => {
        const mutex = new Mutex(semaphoreClient, semaphoreKeys[worker]!, { lockTimeout: 30_000 })
        await mutex.acquire()
        await mutex.release()
      })
    },
    {
      id: "bullmq-unique",
      label: "BullMQ Queue.add with deduplication, every id new (enqueues)",
      topLevel: new Set(evalTrips),
      phases: 1,
      peer: true,
      sent: sentBy(bullClient),
      run: promises((run) => (worker, i) =>
        queue.add("bench", { worker }, { deduplication: { id: jidFor(run, worker, i) } })
      ),
      after: async () => {
        await bullAdmin.flushdb()
      }
    },
    {
      id: "bullmq-duplicate",
      label: "BullMQ Queue.add with deduplication, one id per loop (deduplicated)",
      topLevel: new Set(evalTrips),
      phases: 1,
      peer: true,
      sent: sentBy(bullClient),
      run: promises(() => (worker) => queue.add("bench", { worker }, { deduplication: { id: `dup-${worker}` } })),
      after: async () => {
        await bullAdmin.flushdb()
      }
    }
  ]

  return {
    contenders,
    close: async () => {
      await queue.close()
      await Promise.all([raw.quit(), semaphoreClient.quit(), bullClient.quit(), bullAdmin.quit(), oursClient.quit()])
    }
  }
}
