/**
 * UniqueQueues on the test's private redis-server, and what the UniqueQueue tests read back.
 */
import { Queue, type QueueOptions, type Worker } from "bullmq"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as UniqueQueue from "../../src/adapters/UniqueQueue.js"
import type * as LockOptions from "../../src/Options.js"
import * as RedisServer from "../../src/testing/RedisServer.js"
import * as Bull from "./bullmq.js"
import * as Proxy from "./proxy.js"
import * as RedisTest from "./redis.js"

export interface Data {
  readonly n: number
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A UniqueQueue on a new queue of the test server, with its own lock prefix and no UNIQUE_JOBS_* reading. */
export const uniqueQueue = (options: LockOptions.Options & Pick<UniqueQueue.Options, "history">, queueOptions: Omit<QueueOptions, "connection"> = {}) =>
  Effect.gen(function*() {
    const { source } = yield* RedisTest.TestRedis
    const name = Bull.uniqueName("uq")
    const queue = yield* Bull.queue(name, queueOptions)
    const lockPrefix = RedisTest.uniquePrefix("uq")
    const unique = yield* Effect.acquireRelease(
      Effect.sync(() =>
        UniqueQueue.make<Data>(queue, { ...options, lockPrefix, redis: { url: source.url }, defaults: {} })
      ),
      (u) => Effect.promise(() => u.close())
    )
    return { name, queue, unique, lockPrefix }
  })

/**
 * An until_executed UniqueQueue whose queue reaches the test server through a TCP proxy (to cut or stall), its locks
 * on a direct connection; ready when answered. Closing `unique` is the caller's (the test may be about it).
 */
export const proxiedUniqueQueue = (label: string) =>
  Effect.gen(function*() {
    const { source } = yield* RedisTest.TestRedis
    const proxy = yield* Proxy.start(source.url)
    const url = new URL(proxy.url)
    const name = Bull.uniqueName(label)
    const queue = yield* Effect.acquireRelease(
      Effect.sync(() => new Queue(name, { connection: { host: url.hostname, port: Number(url.port) } })),
      (q) => Effect.promise(() => q.disconnect())
    )
    queue.on("error", () => {})
    const lockPrefix = RedisTest.uniquePrefix(label)
    const unique = UniqueQueue.make<Data>(queue, {
      lock: "until_executed",
      lockPrefix,
      redis: { url: source.url },
      defaults: {}
    })
    yield* Effect.promise(() => queue.waitUntilReady())
    return { proxy, name, queue, unique, lockPrefix }
  })

/**
 * An until_executed UniqueQueue (or as `options` say) whose locks reach the test server through a TCP proxy (to stall,
 * or lose a call), its queue direct; by default a store timeout longer than any test, so that an outcome waiting for a
 * release's answer would wait for the proxy. `unlocked` collects the jids `afterUnlock` was called for. Closed with the
 * scope.
 */
export const lockProxiedUniqueQueue = (
  label: string,
  timeout: Duration.Input = "5 minutes",
  options: Partial<Omit<UniqueQueue.Options, "lockPrefix" | "redis">> = {}
) =>
  Effect.gen(function*() {
    const { source } = yield* RedisTest.TestRedis
    const proxy = yield* Proxy.start(source.url)
    const name = Bull.uniqueName(label)
    const queue = yield* Bull.queue(name)
    const lockPrefix = RedisTest.uniquePrefix(label)
    const unlocked: Array<string> = []
    const unique = UniqueQueue.make<Data>(queue, {
      lockPrefix,
      redis: { url: proxy.url, timeout },
      defaults: {},
      afterUnlock: (released) => Effect.sync(() => unlocked.push(released.jid)),
      ...options,
      lock: options.lock ?? "until_executed"
    })
    yield* Effect.addFinalizer(() => Effect.promise(() => unique.close().catch(() => undefined)))
    return { proxy, name, queue, unique, lockPrefix, unlocked }
  })

/** What a promise rejected with (undefined when it resolved). */
export const rejection = (f: () => Promise<unknown>) =>
  Effect.promise(() => f().then(() => undefined, (error: unknown) => error))

export const thrown = (f: () => unknown): unknown => {
  try {
    f()
  } catch (error) {
    return error
  }
  return undefined
}

export const lockKeys = (prefix: string) =>
  Effect.flatMap(RedisTest.TestRedis, ({ raw }) =>
    Effect.promise(async () => (await raw.keys(`${prefix}:*`)).filter((key) => key.endsWith(":LOCKED")).sort()))

/** Runs the next waiting job by hand (BullMQ's manual fetch) through `processor`, and completes it. */
export const runNext = (worker: Worker, processor: (job: never, token?: string) => Promise<unknown>, token: string) =>
  Effect.promise(async () => {
    const job = await worker.getNextJob(token, { block: false })
    if (job === undefined) return undefined
    const value = await processor(job as never, token)
    await job.moveToCompleted(value, token, false)
    return job.id
  })

/**
 * A while_executing UniqueQueue whose lock Redis (a server of its own, `server`) is down before its first call; its
 * queue is on the test server. Closed with the scope, within a second.
 */
export const downLockRedisQueue = (label: string) =>
  Effect.gen(function*() {
    const server = yield* RedisServer.start
    const name = Bull.uniqueName(label)
    const queue = yield* Bull.queue(name)
    yield* server.kill
    const unique = yield* Effect.acquireRelease(
      Effect.sync(() =>
        UniqueQueue.make<Data>(queue, {
          lock: "while_executing",
          redis: { url: server.url, timeout: "1 second" },
          defaults: {},
          history: false
        })
      ),
      (u) => Effect.promise(() => u.close({ timeout: 1000 }).catch(() => undefined))
    )
    return { server, name, queue, unique }
  })

/** The lines `console.log` prints while the scope is open (a UniqueQueue's runtime logs there), kept instead. */
export const consoleLines = Effect.acquireRelease(
  Effect.sync(() => {
    const lines: Array<string> = []
    const original = console.log
    console.log = (...args: Array<unknown>) => void lines.push(args.join(" "))
    return { lines, original }
  }),
  ({ original }) => Effect.sync(() => (console.log = original))
).pipe(Effect.map(({ lines }) => lines))
