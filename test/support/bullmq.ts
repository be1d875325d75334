/**
 * BullMQ on the test's private redis-server: a connection, and queues and workers closed with the scope. In cluster
 * mode (`UNIQUE_JOBS_TEST_CLUSTER=1`) each queue and worker gets an ioredis `Cluster` of its own, and BullMQ's
 * `{bull}` prefix (BullMQ keeps a queue in one slot only under a hash tag).
 */
import { type ConnectionOptions, type Processor, Queue, type QueueOptions, Worker, type WorkerOptions } from "bullmq"
import { Cluster as IOCluster } from "ioredis"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as RedisTest from "./redis.js"

/** What BullMQ's `connection` takes to reach the test's Redis: options, or (cluster mode) a new `Cluster`. */
export const connection: Effect.Effect<ConnectionOptions, never, RedisTest.TestRedis | Scope.Scope> = Effect.flatMap(
  RedisTest.TestRedis,
  ({ cluster, source }) => {
    if (cluster !== undefined) {
      return Effect.acquireRelease(
        Effect.sync(() => {
          // BullMQ's workers block on their connection: maxRetriesPerRequest null, as BullMQ asks.
          const client = new IOCluster([...cluster.startupNodes], { redisOptions: { maxRetriesPerRequest: null } })
          client.on("error", () => {})
          return client as ConnectionOptions
        }),
        (client) => Effect.sync(() => (client as IOCluster).disconnect())
      )
    }
    const url = new URL(source.url)
    return Effect.succeed({ host: url.hostname, port: Number(url.port), db: Number(url.pathname.slice(1) || 0) })
  }
)

/** BullMQ's key prefix for the test's queues: the default, or one hash tag on a cluster. */
export const prefix: { readonly prefix?: string } = RedisTest.clusterMode ? { prefix: "{bull}" } : {}

let counter = 0
/** A queue name no other test in this process uses. */
export const uniqueName = (name = "q"): string => `${name}-${process.pid}-${++counter}`

export const queue = (
  name: string,
  options: Omit<QueueOptions, "connection"> = {}
): Effect.Effect<Queue, never, RedisTest.TestRedis | Scope.Scope> =>
  Effect.flatMap(connection, (connection) =>
    Effect.acquireRelease(
      Effect.sync(() => new Queue(name, { ...prefix, ...options, connection })),
      (q) => Effect.promise(() => q.close())
    ))

/** A worker closed with the scope; force-closed, so a test's held job does not keep the scope open. */
export const worker = <Data = unknown>(
  name: string,
  processor: Processor<Data>,
  options: Omit<WorkerOptions, "connection"> = {}
): Effect.Effect<Worker<Data>, never, RedisTest.TestRedis | Scope.Scope> =>
  Effect.flatMap(connection, (connection) =>
    Effect.acquireRelease(
      Effect.promise(async () => {
        const w = new Worker<Data>(name, processor, { ...prefix, ...options, connection })
        w.on("error", () => {}) // a closing test server, a force close: the test judges by outcomes
        await w.waitUntilReady()
        return w
      }),
      (w) => Effect.promise(() => w.close(true))
    ))

/** A Worker that takes jobs only when asked (`getNextJob`, a processor of the test's own), closed with the scope. */
export const manualWorker = (name: string): Effect.Effect<Worker, never, RedisTest.TestRedis | Scope.Scope> =>
  Effect.flatMap(connection, (connection) =>
    Effect.acquireRelease(
      Effect.sync(() => new Worker(name, null, { ...prefix, connection, autorun: false })),
      (w) => Effect.promise(() => w.close())
    ))

/** Waits (real time, up to `limitMs`) until `done` holds; answers whether it did. */
export const until = <E, R>(done: Effect.Effect<boolean, E, R>, limitMs = 60_000): Effect.Effect<boolean, E, R> =>
  Effect.gen(function*() {
    const deadline = Date.now() + limitMs
    while (Date.now() < deadline) {
      if (yield* done) return true
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 20)))
    }
    return yield* done
  })

/** Redis's count of calls per command (INFO commandstats): what a step cost, as the difference of two reads. */
export const commandstats = (raw: { info: (section: string) => Promise<string> }) =>
  Effect.promise(async () => {
    const stats = new Map<string, number>()
    for (const match of (await raw.info("commandstats")).matchAll(/cmdstat_(\w+(?:\|\w+)?):calls=(\d+)/g)) {
      stats.set(match[1]!, Number(match[2]))
    }
    return stats
  })
