/**
 * A reaper pass against a model, on the memory store (TestClock) and on the scripts over a virtual clock: random
 * locks — orphans whose job is gone, jobs that still exist, jobs of a queue the adapter does not serve, entries that
 * name no queue, locks taken within the grace, run locks and TTL locks ending within 2 ms either side of the pass —
 * walked in random batch sizes. After one pass exactly the model's locks are left: nothing live removed, nothing
 * removable skipped (a pass steps back over the members its orphans took with them), the pass's counts are the
 * model's, and the orphans it hands `onStep` are exactly the model's. A second property: every Reaper option value
 * is accepted exactly when the model says it is valid.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as FastCheck from "fast-check"
import * as Result from "effect/Result"
import * as TestClock from "effect/testing/TestClock"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Reaper from "../src/Reaper.js"
import * as Redis from "../src/Redis.js"
import * as RedisTest from "./support/redis.js"
import * as VirtualRedis from "./support/virtualRedis.js"

type Kind =
  | { readonly _tag: "gone" }
  | { readonly _tag: "exists" }
  | { readonly _tag: "otherQueue" }
  | { readonly _tag: "noQueue" }
  | { readonly _tag: "young" }
  | { readonly _tag: "lease"; readonly d: number }
  | { readonly _tag: "ttl"; readonly d: number }

const kind: FastCheck.Arbitrary<Kind> = FastCheck.oneof(
  FastCheck.constant({ _tag: "gone" as const }),
  FastCheck.constant({ _tag: "exists" as const }),
  FastCheck.constant({ _tag: "otherQueue" as const }),
  FastCheck.constant({ _tag: "noQueue" as const }),
  FastCheck.constant({ _tag: "young" as const }),
  FastCheck.record({ _tag: FastCheck.constant("lease" as const), d: FastCheck.integer({ min: -2, max: 2 }) }),
  FastCheck.record({ _tag: FastCheck.constant("ttl" as const), d: FastCheck.integer({ min: -2, max: 2 }) })
)

const scenario = FastCheck.record({
  kinds: FastCheck.array(kind, { minLength: 1, maxLength: 14 }),
  batch: FastCheck.integer({ min: 1, max: 5 })
})

const t0 = 10_000_000
const span = 1000
const grace = 100

/** Whether the lock of `k` is left after a pass at t0 + span with the grace. */
const kept = (k: Kind): boolean => {
  switch (k._tag) {
    case "gone":
      return false
    case "lease":
    case "ttl":
      return span + k.d > span
    default:
      return true
  }
}

const run = (
  store: Redis.RedisService["Service"],
  setTime: (ms: number) => Effect.Effect<void>,
  input: { readonly kinds: ReadonlyArray<Kind>; readonly batch: number }
) =>
  Effect.gen(function*() {
    const prefix = RedisTest.uniquePrefix("prop")
    const queue = yield* MemoryQueue.make({ queues: ["default"] })
    const request = (jid: string, k: Kind): Redis.HolderRequest => ({
      jid,
      limit: 1,
      ttlMs: k._tag === "ttl" ? span + k.d : 0,
      leaseMs: k._tag === "lease" ? span + k.d : 0,
      info: "",
      fenced: k._tag === "lease",
      ...(k._tag === "noQueue" || k._tag === "lease" ? {} : { queue: k._tag === "otherQueue" ? "other" : "default" })
    })
    const lockOf = (i: number) => ({ prefix, name: `${prefix}:l${i}` })
    yield* setTime(t0)
    for (const [i, k] of input.kinds.entries()) {
      if (k._tag === "young") continue
      yield* store.lock(lockOf(i), request(`j${i}`, k))
      if (k._tag === "exists") yield* queue.push(Job.make({ worker: "P", args: [], jid: `j${i}` }))
    }
    yield* setTime(t0 + span - grace / 2)
    for (const [i, k] of input.kinds.entries()) {
      if (k._tag === "young") yield* store.lock(lockOf(i), request(`j${i}`, k))
    }
    yield* setTime(t0 + span)
    // The orphans each step freed, as the pass hands them to onStep (what `reap --dry-run` lists).
    const freed: Array<string> = []
    const pass = yield* Effect.flatMap(Reaper.make({ prefix, grace, batch: input.batch }), (runner) =>
      Effect.ensuring(
        runner.pass((_sofar, orphans) => Effect.sync(() => freed.push(...orphans.map((o) => `${o.lock} ${o.jid}`)))),
        runner.release
      )).pipe(
        Effect.provideService(JobQueue, queue),
        Effect.provideService(Redis.RedisService, store)
      )
    const left = yield* Effect.map(store.scan(prefix, "0", "*", 1000), (page) => page.members.map((m) => m.name).sort())
    const expected = input.kinds.flatMap((k, i) => (kept(k) ? [lockOf(i).name] : [])).sort()
    assert.deepStrictEqual(left, expected, JSON.stringify(input))
    assert.strictEqual(pass.orphans, input.kinds.filter((k) => k._tag === "gone").length, "orphans")
    assert.deepStrictEqual(
      freed.sort(),
      input.kinds.flatMap((k, i) => (k._tag === "gone" ? [`${lockOf(i).name} j${i}`] : [])).sort(),
      `the orphans handed to onStep: ${JSON.stringify(input)}`
    )
    for (const [i, k] of input.kinds.entries()) {
      if (!kept(k)) continue
      const holders = (yield* store.fetch(lockOf(i))).holders.map((h) => h.jid)
      assert.deepStrictEqual(holders, [`j${i}`], `${k._tag} keeps its holder`)
    }
  }).pipe(Effect.scoped)

describe("Reaper properties", () => {
  layer(RedisTest.layerServer)((it) => {
    it.effect("one pass leaves exactly the model's locks: memory store", () =>
      Effect.promise(() =>
        FastCheck.assert(
          FastCheck.asyncProperty(scenario, (input) =>
            Effect.runPromise(
              Effect.gen(function*() {
                const store = yield* Effect.provide(Redis.RedisService, Redis.layerMemory)
                yield* run(
                  store,
                  (ms) => TestClock.setTime(ms),
                  input
                )
              }).pipe(Effect.provide(TestClock.layer()))
            )),
          { numRuns: 200 }
        )
      ), { timeout: 120_000 })

    // The virtual clock shims one Redis' scripts: no cluster variant.
    const onOneRedis = it.effect.skipIf(RedisTest.clusterMode)
    onOneRedis("one pass leaves exactly the model's locks: the scripts on a virtual clock", () =>
      Effect.gen(function*() {
        const { raw } = yield* RedisTest.TestRedis
        const virtual = VirtualRedis.make(raw, RedisTest.uniquePrefix("vclock"))
        const store = yield* virtual.store
        yield* Effect.promise(() =>
          FastCheck.assert(
            FastCheck.asyncProperty(scenario, (input) =>
              Effect.runPromise(
                run(
                  store,
                  // The scripts read the virtual clock; the reaper's grace reads the Clock: both move together.
                  (ms) => Effect.andThen(Effect.promise(() => virtual.setTime(ms)), TestClock.setTime(ms)),
                  input
                ).pipe(Effect.provide(TestClock.layer()))
              )),
            { numRuns: 150 }
          )
        )
      }), { timeout: 180_000 })

    it.effect("every option value is accepted exactly when it is valid", () =>
      Effect.promise(() =>
        FastCheck.assert(
          FastCheck.asyncProperty(
            FastCheck.constantFrom("interval", "lease", "grace", "batch"),
            FastCheck.oneof(
              FastCheck.integer({ min: -5, max: 2000 }),
              FastCheck.double({ noDefaultInfinity: false }),
              FastCheck.constantFrom(Number.NaN, 0, 1, 9, 10, 99, 100, 1000, 1001, 86_400_000, 86_400_001, 1e20),
              FastCheck.constantFrom("abc", "", "1 second", "-1 seconds", "1.5 millis", "2 days", "10 millis")
            ),
            (field, value) =>
              Effect.runPromise(Effect.gen(function*() {
                const min = { interval: 10, lease: 100, grace: 1, batch: 1 }[field]!
                const max = { interval: 86_400_000, lease: 86_400_000, grace: 31_536_000_000_000, batch: 1000 }[field]!
                const ms = typeof value === "number"
                  ? value
                  : { "1 second": 1000, "1.5 millis": 1.5, "2 days": 172_800_000, "10 millis": 10 }[value] ?? Number.NaN
                const valid = field === "batch"
                  ? typeof value === "number" && Number.isSafeInteger(value) && value >= min && value <= max
                  : Number.isInteger(ms) && ms >= min && ms <= max
                const result = yield* Effect.result(Reaper.make({ [field]: value } as Reaper.Options))
                assert.strictEqual(Result.isSuccess(result), valid, `${field}: ${String(value)}`)
                if (Result.isFailure(result)) assert.strictEqual(result.failure.field, field)
              }).pipe(Effect.provide(TestClock.layer())))
          ),
          { numRuns: 500 }
        )
      ), { timeout: 60_000 })
  })
})
