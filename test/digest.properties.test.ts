/**
 * Every digest option reaches the lock through the middleware: random options (uniqueAcrossQueues,
 * uniqueAcrossWorkers, lockArgs, lockPrefix, digestAlgorithm) and random jobs, pushed through the client onto a real
 * Redis. The digest the client stamps on the job, and the key Redis holds, must be the one the gem's rule gives
 * (computed here from scratch: the hash of the JSON of the sorted pairs { class, lock_args, queue }, object keys
 * sorted, the left-out parts left out), and a second job must conflict exactly when the rule gives both the same
 * digest.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=2000 npx vitest run test/digest.properties.test.ts
 */
import { createHash } from "node:crypto"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "fast-check"
import * as Scope from "effect/Scope"
import * as Digest from "../src/Digest.js"
import type * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as UniqueJob from "../src/UniqueJob.js"
import * as Model from "./support/model.js"
import { uniquePrefix } from "./support/redis.js"

interface Options {
  readonly uniqueAcrossQueues: boolean
  readonly uniqueAcrossWorkers: boolean
  /** The one argument that counts, or all of them. */
  readonly lockArg: 0 | 1 | undefined
  readonly prefix: string
  readonly algorithm: Digest.Algorithm
}

interface JobSpec {
  readonly worker: string
  readonly queue: string
  readonly args: ReadonlyArray<unknown>
}

/** Objects' keys in the order written: the digest must not depend on it. */
const arg = fc.oneof(
  fc.integer({ min: 0, max: 2 }),
  fc.dictionary(fc.constantFrom("a", "b", "c"), fc.integer({ min: 0, max: 1 }), { maxKeys: 3 })
)

const jobSpec: fc.Arbitrary<JobSpec> = fc.record({
  worker: fc.constantFrom("ChargeJob", "MailJob"),
  queue: fc.constantFrom("default", "critical"),
  args: fc.tuple(arg, arg)
})

const optionsArbitrary: fc.Arbitrary<Options> = fc.record({
  uniqueAcrossQueues: fc.boolean(),
  uniqueAcrossWorkers: fc.boolean(),
  lockArg: fc.constantFrom<0 | 1 | undefined>(undefined, 0, 1),
  prefix: fc.constantFrom("uniquejobs", "app:locks", "x"),
  algorithm: fc.constantFrom<Digest.Algorithm>("legacy", "modern")
})

const sortKeys = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(sortKeys)
  if (typeof value !== "object" || value === null) return value
  return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]))
}

/** The gem's digest, from its definition. */
const expectedDigest = (spec: JobSpec, options: Options, prefix: string): string => {
  const selected = options.lockArg === undefined ? spec.args : [spec.args[options.lockArg]]
  const pairs: Array<[string, unknown]> = [
    ...(options.uniqueAcrossWorkers ? [] : [["class", spec.worker] as [string, unknown]]),
    ["lock_args", sortKeys(selected)],
    ...(options.uniqueAcrossQueues ? [] : [["queue", spec.queue] as [string, unknown]])
  ]
  const hex = createHash(options.algorithm === "legacy" ? "md5" : "sha3-256").update(JSON.stringify(pairs)).digest("hex")
  return `${prefix}:${hex}`
}

const queue: JobQueue["Service"] = {
  push: () => Effect.void,
  schedule: () => Effect.void,
  remove: () => Effect.succeed(false),
  kill: () => Effect.void,
  exists: (jobs) => Effect.succeed(jobs.map(() => "exists" as const))
}

describe("digest options through the middleware, on Redis", () => {
  let store: Redis.RedisService["Service"]
  let close: () => Promise<void>
  beforeAll(async () => {
    const scope = Effect.runSync(Scope.make())
    const source = await Effect.runPromise(Scope.provide(RedisServer.acquire, scope))
    store = await Effect.runPromise(Scope.provide(Redis.make({ url: source.url }), scope))
    close = () => Effect.runPromise(Scope.close(scope, Exit.void))
  })
  afterAll(() => close())

  it.live("the stamped digest and the lock are the rule's; a second job conflicts exactly when its digest is the same", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(optionsArbitrary, jobSpec, jobSpec, async (options, first, second) => {
          const prefix = `${uniquePrefix("dg")}-${options.prefix}`
          const uniqueFor = (spec: JobSpec) =>
            UniqueJob.unsafeMake({
              worker: spec.worker,
              queue: spec.queue,
              lock: "until_executed",
              lockPrefix: prefix,
              uniqueAcrossQueues: options.uniqueAcrossQueues,
              uniqueAcrossWorkers: options.uniqueAcrossWorkers,
              lockArgs: options.lockArg === undefined ? undefined : (args) => [args[options.lockArg!]],
              digestAlgorithm: options.algorithm
            })
          const push = async (spec: JobSpec, jid: string) => {
            const unique = uniqueFor(spec)
            let stamped: Job.Job | undefined
            const outcome = await Effect.runPromise(
              unique.client(unique.job(spec.args, { jid }), (job) => Effect.sync(() => void (stamped = job))).pipe(
                Effect.provideService(Redis.RedisService, store),
                Effect.provideService(JobQueue, queue)
              )
            )
            return { outcome, stamped, unique }
          }
          const expected = [expectedDigest(first, options, prefix), expectedDigest(second, options, prefix)] as const
          const one = await push(first, "j1")
          assert.strictEqual(one.outcome._tag, "Enqueued")
          assert.strictEqual(one.stamped?.lockDigest, expected[0], "the digest the client stamps")
          const key = Lock.keyOf(one.unique.definition, expected[0], "queue")
          assert.strictEqual(Redis.keysOf(key).locked, `${expected[0]}:LOCKED`)
          assert.deepStrictEqual((await Effect.runPromise(store.holders(key))).map((h) => h.jid), ["j1"])
          const two = await push(second, "j2")
          assert.strictEqual(
            two.outcome._tag,
            expected[1] === expected[0] ? "Skipped" : "Enqueued",
            `second job's digest ${expected[1]}, first's ${expected[0]}`
          )
        }),
        { numRuns: Model.runs(300) }
      )
    ), 120_000)
})

// Keys of every kind an argument object may have: few or many (the sort changes method past 16), array-index keys
// ("0", "10", which JSON lists first in numeric order), text that sorts by UTF-16 code units (astral, accents, case).
const keyArbitrary = fc.oneof(
  fc.string({ maxLength: 4 }),
  fc.constantFrom("0", "9", "10", "4294967294", "4294967295", "01", "-1", "a", "B", "é", "\u{1F600}", "\uFFFF", "__proto__"),
  fc.nat({ max: 40 }).map(String)
)
const argument: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: "small" }, fc.integer(), fc.string({ maxLength: 3 }), fc.boolean(), tie("object"), fc.array(tie("value"), { maxLength: 3 })),
  object: fc.dictionary(keyArbitrary, tie("value"), { maxKeys: 40 })
})).value

describe("the text that is hashed", () => {
  it("is JSON of the arguments with object keys sorted as JSON.stringify of a sorted copy writes them", () =>
    fc.assert(
      fc.property(fc.array(argument, { maxLength: 3 }), (args) => {
        const text = Effect.runSync(Digest.hashedText({ worker: "W", queue: "q", args }))
        assert.strictEqual(text, JSON.stringify([["class", "W"], ["lock_args", sortKeys(args)], ["queue", "q"]]))
      }),
      { numRuns: Model.runs(500) }
    ))
})
