/**
 * Property of the first connect (issue 18, item 13): a store built while its Redis is down connects once Redis is up
 * again, whenever that is within the connect timeout, and takes a lock; one whose Redis never comes back fails with a
 * `RedisError` naming the timeout, not earlier on the first refusal. Real redis-server processes, killed and restarted.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=40 npx vitest run test/connection.properties.test.ts
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fc from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/RedisServer.js"
import * as Model from "./support/model.js"
import * as RedisTest from "./support/redis.js"

describe("connect properties", () => {
  it.live("down for any time within the timeout: connected and locked once Redis is back; never back: the timeout", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(fc.integer({ min: 0, max: 1500 }), fc.boolean(), (downMs, comesBack) =>
          Effect.runPromise(Effect.scoped(Effect.gen(function*() {
            const server = yield* RedisServer.start
            yield* server.kill
            const timeout = comesBack ? "20 seconds" : "1 second"
            const store = yield* Effect.fork(Effect.either(Redis.make({ url: server.url, timeout })))
            yield* Effect.sleep(downMs)
            if (comesBack) yield* server.restart
            const built = yield* Fiber.join(store)
            if (!comesBack) {
              assert.isTrue(Either.isLeft(built), "no Redis, no store")
              if (Either.isLeft(built)) assert.include(built.left.message, "no connection within 1s")
              return
            }
            assert.isTrue(Either.isRight(built), JSON.stringify(built))
            if (Either.isLeft(built)) return
            const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: RedisTest.uniquePrefix("conn") })
            const digest = yield* Lock.digest(definition, { worker: "W", queue: "q", args: [downMs] })
            const taken = yield* Lock.lock(definition, { digest, jid: "j1" }).pipe(
              Effect.provideService(Redis.RedisService, built.right)
            )
            assert.strictEqual(taken.jid, "j1")
          })))),
        { numRuns: Model.runs(6), examples: [[0, true], [1, true], [1500, true], [0, false]] }
      )
    ), 120_000)
})
