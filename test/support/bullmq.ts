/**
 * BullMQ on the test's private redis-server: a connection, and queues and workers closed with the scope.
 */
import { type Processor, Queue, type QueueOptions, Worker, type WorkerOptions } from "bullmq"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as RedisTest from "./redis.js"

export const connection = Effect.map(RedisTest.TestRedis, ({ source }) => {
  const url = new URL(source.url)
  return { host: url.hostname, port: Number(url.port), db: Number(url.pathname.slice(1) || 0) }
})

let counter = 0
/** A queue name no other test in this process uses. */
export const uniqueName = (name = "q"): string => `${name}-${process.pid}-${++counter}`

export const queue = (
  name: string,
  options: Omit<QueueOptions, "connection"> = {}
): Effect.Effect<Queue, never, RedisTest.TestRedis | Scope.Scope> =>
  Effect.flatMap(connection, (connection) =>
    Effect.acquireRelease(
      Effect.sync(() => new Queue(name, { ...options, connection })),
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
        const w = new Worker<Data>(name, processor, { ...options, connection })
        w.on("error", () => {}) // a closing test server, a force close: the test judges by outcomes
        await w.waitUntilReady()
        return w
      }),
      (w) => Effect.promise(() => w.close(true))
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
