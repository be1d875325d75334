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

// A named queue BullMQ has no key of (meta, events or id counter) is a wrong name, prefix or url, or an obliterated
// queue: every job of it would look gone. Refused by its name, unless --bullmq-allow-missing; a queue with any one of
// those keys is known. Dry runs: no lock is freed either way.
describe("unique-jobs reap --bullmq-queue: a queue BullMQ has no keys for", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("refused, naming the first missing queue, exactly when one is missing and no --bullmq-allow-missing", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("cli-missing")
        const queued = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
        yield* Lock.lock(queued, { digest: `${prefix}:abc`, jid: "j1" })
        let round = 0
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.array(fc.option(fc.constantFrom("meta", "events", "id"), { nil: undefined }), { minLength: 1, maxLength: 3 }),
              fc.boolean(),
              async (keys, allowMissing) => {
                round++
                const names = keys.map((_, i) => `${prefix}-r${round}-q${i}`)
                for (let i = 0; i < keys.length; i++) {
                  if (keys[i] !== undefined) await raw.set(`bull:${names[i]}:${keys[i]}`, "1")
                }
                const ran = await Effect.runPromise(
                  cli(
                    "reap",
                    "--redis-url",
                    source.url,
                    "--prefix",
                    prefix,
                    "--dry-run",
                    ...names.flatMap((q) => ["--bullmq-queue", q]),
                    ...(allowMissing ? ["--bullmq-allow-missing"] : [])
                  )
                )
                const missing = names.find((_, i) => keys[i] === undefined)
                const run = JSON.stringify({ keys, allowMissing, stderr: ran.stderr })
                if (missing !== undefined && !allowMissing) {
                  assert.strictEqual(ran.code, 1, run)
                  assert.include(ran.stderr, `BullMQ has no queue ${JSON.stringify(missing)} under prefix "bull"`, run)
                } else {
                  assert.strictEqual(ran.code, 0, run)
                  assert.notInclude(ran.stderr, "BullMQ has no queue", run)
                }
              }
            ),
            { numRuns: Math.min(runs, 12), examples: [[["id", undefined], false], [[undefined], true]] }
          )
        )
        assert.strictEqual(yield* Effect.promise(() => raw.exists(`${prefix}:abc:LOCKED`)), 1)
      }), { timeout: 120_000 })
  })
})
