/**
 * Properties of the `unique-jobs` command's arguments, run in this process as the executable runs them.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fc from "fast-check"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import { cli } from "./support/cli.js"
import * as RedisTest from "./support/redis.js"

const runs = Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? 25)

describe("unique-jobs reap --bullmq-queue: what names a queue", () => {
  layer(RedisTest.layer())((it) => {
    // A blank name is no queue: a reap asked about it would free none of the locks it was asked to. Refused by name.
    it.effect("a blank name among any others is refused by name before Redis is asked; every lock stays", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("cli-blank")
        const queued = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
        yield* Lock.lock(queued, { digest: `${prefix}:abc`, jid: "j1" })
        const blank = fc.constantFrom("", " ", "\t", "  ", " \n ")
        const name = fc.stringMatching(/^[a-z][a-z0-9-]{0,11}$/)
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.array(name, { maxLength: 3 }), blank, fc.nat(3), async (names, empty, at) => {
              const queues = [...names.slice(0, at), empty, ...names.slice(at)]
              const ran = await Effect.runPromise(
                cli("reap", "--redis-url", source.url, "--prefix", prefix, ...queues.flatMap((q) => ["--bullmq-queue", q]))
              )
              assert.strictEqual(ran.code, 1, ran.stdout)
              assert.strictEqual(ran.stderr.trim(), `unique-jobs: --bullmq-queue ${JSON.stringify(empty)} is not a queue name`)
            }),
            { numRuns: runs }
          )
        )
        assert.strictEqual(yield* Effect.promise(() => raw.exists(`${prefix}:abc:LOCKED`)), 1)
      }), { timeout: 120_000 })
  })
})
