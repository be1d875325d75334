/**
 * What the batching tests (issue 39) compare, and where they run: a store call's answer as comparable between a step
 * sent alone and one sent in a batch, and a private Redis with a store and a probe on it.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import { Redis as IORedis } from "ioredis"
import * as Redis from "../../src/Redis.js"
import * as RedisServer from "../../src/testing/RedisServer.js"

/**
 * An answer as compared: a fencing token is a clock reading, the same only in its place (taken or not); a failure by
 * its operation and reason (a step's error in a batch names no line of lua/).
 */
export const comparable = (exit: Exit.Exit<unknown, Redis.RedisError>): unknown =>
  Exit.match(exit, {
    onFailure: (cause) =>
      Option.match(Cause.findErrorOption(cause), {
        onNone: () => ({ defect: String(cause) }),
        onSome: (error) => ({ failed: `${error.operation}: ${error.reason}` })
      }),
    onSuccess: (value) => JSON.parse(JSON.stringify(value, (key, v) => (key === "fence" ? typeof v : v)))
  })

/** A settled promise of a store's promise call as an Exit (it rejects with the RedisError itself). */
export const settledExit = (result: PromiseSettledResult<unknown>): Exit.Exit<unknown, Redis.RedisError> =>
  result.status === "fulfilled" ? Exit.succeed(result.value) : Exit.fail(result.reason as Redis.RedisError)

/** A private redis-server, a store on it (with `options`) and a probe connection, all ended with the scope. */
export const privateStore = (options: Omit<Redis.Options, "url"> = {}) =>
  Effect.gen(function*() {
    const server = yield* RedisServer.start
    const store = yield* Redis.make({ url: server.url, ...options })
    const probe = yield* Effect.acquireRelease(
      Effect.sync(() => new IORedis(server.url)),
      (p) => Effect.promise(() => p.quit())
    )
    return { server, store, probe }
  })
