/**
 * Bad input, fuzzed: option objects decode or fail with a typed InvalidLockOptions naming a field, never an
 * untyped throw; arguments give a digest or a DigestError naming a path; unsafe key prefixes are refused.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "fast-check"
import * as Digest from "../src/Digest.js"
import * as LockOptions from "../src/Options.js"
import * as LockType from "../src/LockType.js"
import * as UniqueJob from "../src/UniqueJob.js"

const optionKeys = [
  "lock",
  "lockTtl",
  "lockTimeout",
  "lockLimit",
  "lockLease",
  "onConflict",
  "rescheduleDelay",
  "lockArgs",
  "uniqueAcrossQueues",
  "uniqueAcrossWorkers",
  "lockInfo",
  "lockPrefix",
  "digestAlgorithm",
  "afterUnlock"
] as const

/** Values that are sometimes right for some option and mostly wrong. */
const optionValue = fc.oneof(
  fc.constantFrom(
    "until_executed",
    "until_expired",
    "while_executing_reject",
    "log",
    "replace",
    "reschedule",
    "legacy",
    "modern",
    "30 seconds",
    "soon",
    "",
    "a b",
    "{x}",
    "ok_prefix"
  ),
  fc.integer({ min: -5, max: 100_000 }),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.constant(undefined),
  fc.constant(() => Effect.void),
  fc.record(
    {
      client: fc.constantFrom("log", "replace", "reschedule", 3),
      server: fc.constantFrom("log", "replace", "reschedule", {})
    },
    { requiredKeys: [] }
  ),
  fc.anything()
)

const randomOptions = fc.oneof(
  fc.dictionary(fc.constantFrom(...optionKeys, "lockTTL", "unique", "worker"), optionValue),
  fc.anything()
)

const decodeExit = (input: unknown) => Effect.runSyncExit(LockOptions.make(input as LockOptions.Options))

/**
 * A synchronous predicate made asynchronous, every 100th call first giving the event loop a turn. Thousands of runs
 * take long on a busy machine; run in one synchronous stretch, they would keep vitest's worker from answering its
 * RPC calls, which time out after a fixed 60 s and fail the run though every test passed.
 */
const yielding = <Ts extends Array<unknown>>(predicate: (...args: Ts) => void): (...args: Ts) => Promise<void> => {
  let calls = 0
  return async (...args) => {
    if (++calls % 100 === 0) await new Promise<void>((resolve) => setImmediate(resolve))
    predicate(...args)
  }
}

describe("fuzzed options", () => {
  it("decode, or fail with InvalidLockOptions naming a field of the input; never an untyped throw", async () => {
    await fc.assert(
      fc.asyncProperty(randomOptions, yielding((input) => {
        const exit = decodeExit(input)
        if (Exit.isSuccess(exit)) {
          assert.include(Object.values(LockType.names), exit.value.lock)
          assert.isAtLeast(exit.value.lockLimit, 1)
          return
        }
        const failure = Cause.findErrorOption(exit.cause)
        assert.isTrue(failure._tag === "Some", `not a typed failure: ${Cause.pretty(exit.cause)}`)
        const error = failure._tag === "Some" ? failure.value : undefined
        assert.instanceOf(error, LockOptions.InvalidLockOptions)
        const known = typeof input === "object" && input !== null && !Array.isArray(input)
          ? [...Object.keys(input), "lock", "lockTtl", "options"]
          : ["options", "lock"]
        const names = (key: string) => [key, `[${JSON.stringify(key)}]`]
        assert.isTrue(
          // A nested field reads `onConflict.client`, or `onConflict[""]` for a key that is no identifier.
          known.some((key) =>
            names(key).some((n) =>
              error!.field === n || error!.field.startsWith(`${n}.`) || error!.field.startsWith(`${n}[`)
            )
          ),
          `field ${error!.field} is not in the input ${JSON.stringify(Object.keys(input ?? {}))}`
        )
        assert.isAbove(error!.reason.length, 0)
        assert.include(error!.message, error!.field)
      })),
      { numRuns: 2000 }
    )
  })

  it("UniqueJob.make never throws untyped either", async () => {
    await fc.assert(
      fc.asyncProperty(fc.anything(), randomOptions, yielding((worker, options) => {
        const input = typeof options === "object" && options !== null ? { ...options, worker } : { worker }
        const exit = Effect.runSyncExit(UniqueJob.make(input as UniqueJob.Options))
        if (Exit.isFailure(exit)) {
          assert.isTrue(Cause.findErrorOption(exit.cause)._tag === "Some", Cause.pretty(exit.cause))
        }
      })),
      { numRuns: 1000 }
    )
  })

  it("a prefix that could collide with other keys or break key parsing is refused", async () => {
    const breaking = fc.constantFrom("*", " ", "{", "}", ":LOCKED", ":RUN", ":digests", "\n", "?", "[")
    const unsafe = fc.tuple(fc.string(), breaking, fc.string())
      .map(([a, bad, b]) => `ok${a}${bad}${b}`)
    await fc.assert(
      fc.asyncProperty(unsafe, yielding((prefix) => {
        const exit = decodeExit({ lock: "until_executed", lockPrefix: prefix })
        assert.isTrue(Exit.isFailure(exit), `accepted ${JSON.stringify(prefix)}`)
      })),
      { numRuns: 1000 }
    )
    await fc.assert(
      fc.asyncProperty(fc.stringMatching(/^[A-Za-z0-9_.-]{1,20}(:[A-Za-z0-9_.-]{1,10})?$/), yielding((prefix) => {
        fc.pre(!/:(LOCKED|RUN|digests)/.test(prefix))
        assert.isTrue(Exit.isSuccess(decodeExit({ lock: "until_executed", lockPrefix: prefix })), prefix)
      })),
      { numRuns: 500 }
    )
  })
})

const job = (args: ReadonlyArray<unknown>) => ({ worker: "FuzzJob", queue: "default", args })

describe("fuzzed arguments", () => {
  it("give a digest or a DigestError naming a path under lock_args; never an untyped throw", async () => {
    const anything = fc.anything({
      withBigInt: true,
      withBoxedValues: true,
      withDate: true,
      withMap: true,
      withSet: true,
      withNullPrototype: true,
      withObjectString: true,
      withSparseArray: true,
      withTypedArray: true,
      withUnicodeString: true
    })
    const algorithms = fc.constantFrom<Digest.Algorithm>("legacy", "modern")
    await fc.assert(
      fc.asyncProperty(fc.array(anything, { maxLength: 4 }), algorithms, yielding((args, algorithm) => {
        const exit = Effect.runSyncExit(Digest.make(job(args), { algorithm }))
        if (Exit.isSuccess(exit)) {
          assert.match(exit.value, algorithm === "legacy" ? /^uniquejobs:[0-9a-f]{32}$/ : /^uniquejobs:[0-9a-f]{64}$/)
        } else {
          const failure = Cause.findErrorOption(exit.cause)
          assert.isTrue(failure._tag === "Some", Cause.pretty(exit.cause))
          if (failure._tag === "Some") {
            assert.instanceOf(failure.value, Digest.DigestError)
            assert.match(failure.value.path, /^lock_args/)
          }
        }
      })),
      { numRuns: 2000 }
    )
  })

  it("JSON values: the digest survives a JSON round trip and ignores object key order", async () => {
    const shuffleKeys = (value: unknown, rand: () => number): unknown => {
      if (Array.isArray(value)) return value.map((v) => shuffleKeys(v, rand))
      if (typeof value === "object" && value !== null) {
        const entries = Object.entries(value).sort(() => rand() - 0.5)
        return Object.fromEntries(entries.map(([k, v]) => [k, shuffleKeys(v, rand)]))
      }
      return value
    }
    await fc.assert(
      fc.asyncProperty(fc.array(fc.jsonValue(), { maxLength: 4 }), fc.integer(), yielding((args, seed) => {
        let state = seed
        const rand = () => ((state = (state * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff)
        const digest = Effect.runSync(Digest.make(job(args)))
        assert.strictEqual(Effect.runSync(Digest.make(job(JSON.parse(JSON.stringify(args))))), digest)
        assert.strictEqual(Effect.runSync(Digest.make(job(shuffleKeys(args, rand) as Array<unknown>))), digest)
      })),
      { numRuns: 1000 }
    )
  })

  it("a 1 MB string and astral unicode digest without trouble", () => {
    const big = "x".repeat(1024 * 1024)
    const a = Effect.runSync(Digest.make(job([big])))
    const b = Effect.runSync(Digest.make(job([big + "y"])))
    assert.notStrictEqual(a, b)
    const unicode = Effect.runSync(Digest.make(job(["𝒳 ünïcödé 🚀", { "ключ": "值" }])))
    assert.match(unicode, /^uniquejobs:[0-9a-f]{32}$/)
  })
})
