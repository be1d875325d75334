/**
 * Properties of definitions: durations out of range are refused at definition, naming the field; `__proto__` keys
 * count in digests. (The lifecycle on Redis against the memory store, in real time, is
 * test/properties.redis.test.ts, in the slow tier.)
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=1000 npx vitest run test/properties.test.ts
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Exit from "effect/Exit"
import * as fc from "fast-check"
import * as Option from "effect/Option"
import * as Digest from "../src/Digest.js"
import * as Layout from "../src/store/Layout.js"
import * as LockOptions from "../src/Options.js"
import * as Model from "./support/model.js"

// -- durations at definition ----------------------------------------------------------------------------------------

type DurationField = "lockTtl" | "lockLease" | "rescheduleDelay" | "lockTimeout"

/** Options in which each duration field is read (the Schema refuses it where the lock type ignores it). */
const readers: Record<DurationField, ReadonlyArray<LockOptions.Options>> = {
  lockTtl: [
    { lock: "until_executing" },
    { lock: "until_executed" },
    { lock: "until_expired" },
    { lock: "until_and_while_executing" }
  ],
  lockLease: [{ lock: "while_executing" }, { lock: "while_executing_reject" }, { lock: "until_and_while_executing" }],
  rescheduleDelay: [
    { lock: "while_executing", onConflict: { server: "reschedule" } },
    { lock: "until_and_while_executing", onConflict: "reschedule" }
  ],
  lockTimeout: [{ lock: "until_executed" }, { lock: "while_executing" }]
}

const minimum: Record<DurationField, number> = {
  lockTtl: 1,
  lockLease: LockOptions.minLeaseMs,
  rescheduleDelay: 1,
  lockTimeout: 0
}

const fieldArbitrary = fc.constantFrom<DurationField>("lockTtl", "lockLease", "rescheduleDelay", "lockTimeout")
  .chain((field) => fc.constantFrom(...readers[field]).map((options) => ({ field, options })))

interface Written {
  readonly input: unknown
  readonly what: string
}

const written = (input: unknown, what: string): Written => ({ input, what })

/**
 * Whole milliseconds plus at least a nanosecond and less than a millisecond. Durations have nanosecond resolution:
 * Effect rounds a finer fraction away before the Schema sees it (1.0000000000000002 ms decodes as exactly 1 ms).
 */
const fractionalMs = fc.tuple(fc.integer({ min: 0, max: 1_000_000_000 }), fc.integer({ min: 1, max: 999_999 }))

const tooLarge = fc.oneof(
  fc.integer({ min: LockOptions.maxDurationMs + 1, max: Number.MAX_SAFE_INTEGER }),
  fc.double({ min: LockOptions.maxDurationMs + 0.5, noNaN: true }),
  fc.constantFrom(1e17, 1e21, Number.MAX_VALUE, 2 ** 50, 2 ** 53)
)

/** Durations written every way a user can, each fractional, negative, too large, NaN, infinite, or below the floor. */
const badDuration = (field: DurationField): fc.Arbitrary<Written> =>
  fc.oneof(
    fractionalMs.map(([ms, ns]) => written(ms + ns / 1e6, "fractional ms")),
    fractionalMs.map(([ms, ns]) => written(`${ms}.${String(ns).padStart(6, "0")} millis`, "fractional string")),
    fractionalMs.map(([ms, ns]) => {
      const fraction = String((ms % 1000) * 1e6 + ns).padStart(9, "0")
      return written(`${Math.floor(ms / 1000)}.${fraction} seconds`, "fractional seconds")
    }),
    fractionalMs.map(([ms, ns]) =>
      written(Duration.nanos(BigInt(ms) * 1_000_000n + BigInt(ns)), "fractional Duration")
    ),
    fractionalMs.map(([ms, ns]) => written(BigInt(ms) * 1_000_000n + BigInt(ns), "fractional bigint nanos")),
    fractionalMs.map(([ms, ns]) =>
      written([Math.floor(ms / 1000), (ms % 1000) * 1e6 + ns] as const, "fractional [seconds, nanos]")
    ),
    fc.constantFrom(
      written(1000.5, "1000.5"),
      written("1.0005 seconds", "1.0005 seconds"),
      written(Duration.seconds(1 / 3), "a third of a second"),
      written(0.5, "half a ms")
    ),
    fc.oneof(fc.double({ max: -Number.MIN_VALUE, noNaN: true }), fc.integer({ max: -1 }))
      .map((n) => written(n, "negative")),
    fc.integer({ min: 1, max: 1_000_000 }).chain((n) =>
      fc.constantFrom(
        written(`-${n} millis`, "negative string"),
        written(`-${n / 1000} seconds`, "negative seconds"),
        written(-BigInt(n), "negative bigint"),
        written([-n, 0] as const, "negative [seconds, nanos]")
      )
    ),
    tooLarge.map((n) => written(n, "too large")),
    fc.integer({ min: LockOptions.maxDurationMs + 1, max: Number.MAX_SAFE_INTEGER }).chain((n) =>
      fc.constantFrom(
        written(`${n} millis`, "too large string"),
        written(Duration.millis(n), "too large Duration"),
        written(BigInt(n) * 1_000_000n, "too large bigint nanos")
      )
    ),
    fc.constantFrom(
      written(NaN, "NaN"),
      written(Infinity, "Infinity"),
      written(-Infinity, "-Infinity"),
      written(Duration.infinity, "Duration.infinity"),
      written([NaN, 0] as const, "[NaN, 0]"),
      written([Infinity, 0] as const, "[Infinity, 0]"),
      written("NaN millis", "NaN string"),
      written("Infinity seconds", "Infinity string"),
      written(Duration.days(366_000), "1002 years")
    ),
    ...(minimum[field] > 0
      ? [fc.integer({ min: 0, max: minimum[field] - 1 }).map((n) => written(n, "below the floor"))]
      : [])
  )

/** A whole number of milliseconds in range, written every way a user can. */
const goodDuration = (field: DurationField): fc.Arbitrary<{ readonly written: Written; readonly ms: number }> =>
  fc.integer({ min: minimum[field], max: LockOptions.maxDurationMs }).chain((ms) =>
    fc.constantFrom(
      { written: written(ms, "ms"), ms },
      { written: written(`${ms} millis`, "string"), ms },
      { written: written(Duration.millis(ms), "Duration"), ms },
      { written: written(BigInt(ms) * 1_000_000n, "bigint nanos"), ms },
      // Effect's own arithmetic is exact for these: whole seconds, and [seconds, nanos] below 10^12 ms.
      ...(ms % 1000 === 0 ? [{ written: written(`${ms / 1000} seconds`, "seconds"), ms }] : []),
      ...(ms < 1e12 ? [{ written: written([Math.floor(ms / 1000), (ms % 1000) * 1e6] as const, "[s, ns]"), ms }] : [])
    )
  )

const decodedMs = (definition: LockOptions.Definition, field: DurationField): number =>
  Duration.toMillis(
    field === "lockTtl" ? Option.getOrThrow(definition.lockTtl) : definition[field]
  )

describe("durations at definition: whole milliseconds within range, or InvalidLockOptions naming the field", () => {
  it("a fractional, negative, too large, NaN or infinite duration, written any way, is refused naming it", () => {
    const cases = fieldArbitrary.chain((c) => badDuration(c.field).map((bad) => ({ ...c, bad })))
    fc.assert(
      fc.property(cases, ({ bad, field, options }) => {
        const exit = Effect.runSyncExit(LockOptions.make({ ...options, [field]: bad.input } as LockOptions.Options))
        if (Exit.isSuccess(exit)) {
          assert.fail(`${field}: ${bad.what} ${String(bad.input)} was accepted as ${decodedMs(exit.value, field)} ms`)
        }
        const failure = Cause.findErrorOption(exit.cause)
        assert.isTrue(Option.isSome(failure), Cause.pretty(exit.cause))
        const error = Option.getOrThrow(failure)
        assert.instanceOf(error, LockOptions.InvalidLockOptions)
        assert.strictEqual(error.field, field, error.message)
        assert.deepStrictEqual(error.issues.map((i) => i.field), [field], error.message)
        assert.include(error.message, field)
      }),
      { numRuns: Model.runs(1000) }
    )
  })

  it("a whole duration in range, written any way, is accepted as exactly that many milliseconds", () => {
    const cases = fieldArbitrary.chain((c) => goodDuration(c.field).map((good) => ({ ...c, good })))
    fc.assert(
      fc.property(cases, ({ field, good, options }) => {
        const definition = Result.getOrThrowWith(
          Result.try(() => LockOptions.unsafeMake({ ...options, [field]: good.written.input } as LockOptions.Options)),
          (error) => new Error(`${field}: ${good.written.what} ${String(good.written.input)} refused: ${error}`)
        )
        assert.strictEqual(decodedMs(definition, field), good.ms)
      }),
      { numRuns: Model.runs(300) }
    )
  })
})

// -- __proto__ in arguments -----------------------------------------------------------------------------------------

/** JSON text with sorted keys: equal for equal content. */
const canonical = (value: unknown): string =>
  Array.isArray(value)
    ? `[${value.map(canonical).join(",")}]`
    : typeof value === "object" && value !== null
    ? `{${
      Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`)
        .join(",")
    }}`
    : JSON.stringify(value)

describe("digests of arguments with __proto__ keys", () => {
  const digestOf = (args: ReadonlyArray<unknown>) =>
    Effect.runSync(Digest.make({ worker: "ModelJob", queue: "default", args }))
  it("differ from {} and from each other exactly by content", () => {
    const json = fc.jsonValue({ maxDepth: 2 }).map((v) => JSON.parse(JSON.stringify(v)) as unknown)
    fc.assert(
      fc.property(json, json, fc.boolean(), (v, other, same) => {
        const w = same ? JSON.parse(JSON.stringify(v)) : other
        const proto = (x: unknown) => JSON.parse(`[{"__proto__":${JSON.stringify(x)}}]`) as ReadonlyArray<unknown>
        const a = digestOf(proto(v))
        assert.notStrictEqual(a, digestOf([{}]))
        assert.notStrictEqual(a, digestOf([v]))
        assert.strictEqual(a === digestOf(proto(w)), canonical(v) === canonical(w))
        // The same content spelled another way is the same job.
        for (let spelling = 0; spelling < 2; spelling++) {
          for (const family of ["proto", "empty"] as const) {
            const d0 = digestOf(Model.argsOf(family, 0, spelling))
            const d1 = digestOf(Model.argsOf(family, 1, spelling))
            assert.notStrictEqual(d0, d1)
            assert.strictEqual(d0, digestOf(Model.argsOf(family, 0, 1 - spelling)))
            assert.strictEqual(d1, digestOf(Model.argsOf(family, 1, 1 - spelling)))
          }
        }
      }),
      { numRuns: Model.runs(300) }
    )
  })
})

describe("the cluster layout: one digest, one hash slot", () => {
  // A run lock, the index shard and the fencing counter are written by one script call with the queue lock (the
  // handoff), so on a cluster they must share its slot: for any prefix, name and shard count, with no cluster.
  it("a digest's run lock, index shard and fencing counter share its queue lock's slot", () => {
    const name = fc.oneof(fc.hexaString({ minLength: 1, maxLength: 64 }), fc.string({ minLength: 1, maxLength: 40 }))
    const prefix = fc.string({ minLength: 1, maxLength: 20 }).filter((p) => !p.includes("{") && !p.includes("}"))
    fc.assert(
      // Shard counts as users set them (a layout for a count is made once, then kept).
      fc.property(prefix, name, fc.constantFrom(1, 2, 3, 4, 7, 16, 24, 48, 100, 1024), (prefix, rest, shards) => {
        const layout = Layout.cluster(shards)
        const queue = { prefix, name: `${prefix}:${rest}` }
        const run = { prefix, name: `${prefix}:${rest}:RUN` }
        const q = layout.keysOf(queue)
        const slot = Layout.slotOf(q.locked)
        assert.strictEqual(Layout.slotOf(layout.keysOf(run).locked), slot)
        assert.strictEqual(Layout.slotOf(q.index), slot)
        assert.strictEqual(Layout.slotOf(q.fence), slot)
        assert.strictEqual(layout.shardOf(run), layout.shardOf(queue))
      }),
      { numRuns: Model.runs(300) }
    )
  })
})

// -- Redis ----------------------------------------------------------------------------------------------------------

