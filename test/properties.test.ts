/**
 * Model-based properties of the whole lifecycle on Redis (real time), each case compared with the memory store's run
 * of the same commands (test/lifecycle.properties.test.ts runs the model on the memory store alone, with more
 * commands). A Redis run that a busy machine took past what the model assumes of real time is repeated, and the
 * property fails if more cases are discarded than compared. Beside them: durations out of range are refused at
 * definition, naming the field, and by both stores alike; `__proto__` keys count in digests. A lock script with its
 * limit check removed must be caught.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=100 npx vitest run test/properties.test.ts
 */
import { Redis as IORedis } from "ioredis"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as fc from "effect/FastCheck"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import * as Scope from "effect/Scope"
import * as Digest from "../src/Digest.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/RedisServer.js"
import * as Memory from "../src/internal/memory.js"
import * as Model from "./support/model.js"
import { uniquePrefix } from "./support/redis.js"

import { commandsFor, lockTypes, withMemory } from "./support/lifecycle.js"

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
        const failure = Cause.failureOption(exit.cause)
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
        const definition = Either.getOrThrowWith(
          Either.try(() => LockOptions.unsafeMake({ ...options, [field]: good.written.input } as LockOptions.Options)),
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

// -- Redis ----------------------------------------------------------------------------------------------------------

describe("lifecycle properties: redis, differential against the memory store", () => {
  let server: { readonly url: string; readonly close: () => Promise<void> }
  let store: Redis.RedisService["Type"]
  beforeAll(async () => {
    const scope = Effect.runSync(Scope.make())
    const source = await Effect.runPromise(Scope.extend(RedisServer.acquire, scope))
    store = await Effect.runPromise(Scope.extend(Redis.make({ url: source.url }), scope))
    server = { url: source.url, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
  })
  afterAll(() => server.close())

  /** What became of one property's Redis runs. */
  interface Runs {
    repeated: number
    discarded: number
    readonly problems: Array<string>
  }

  const newRuns = (): Runs => ({ repeated: 0, discarded: 0, problems: [] })

  /**
   * The commands' trace on Redis, on fresh keys. A run in which real time broke what the model assumes (a busy
   * machine stalled this process or Redis near a TTL, a lease or a holder's deadline: see Model.RealTime) says
   * nothing about the code, whether it failed or not: it is run again, up to three runs in all. Undefined when none
   * kept within; a run that kept within and failed fails the property.
   */
  const redisTrace = async (
    config: Model.Config,
    cmds: Iterable<Model.Cmd>,
    runs: Runs,
    on: Redis.RedisService["Type"] = store
  ): Promise<ReadonlyArray<string> | undefined> => {
    for (let attempt = 1; attempt <= 3; attempt++) {
      const realTime = new Model.RealTime()
      const system = () =>
        Promise.resolve(
          new Model.System(config, on, Runtime.defaultRuntime, Model.advanceReal, uniquePrefix("pr"), realTime)
        )
      try {
        const trace = await Model.runCommands(cmds, system)
        if (realTime.kept()) return trace
      } catch (error) {
        if (realTime.kept()) throw error
      }
      runs.repeated++
      runs.problems.push(realTime.problems[0]!)
    }
    return undefined
  }

  /** Says when real time made runs repeat (a busy machine), and why. */
  const reportRuns = (name: string, runs: Runs) => {
    if (runs.repeated === 0) return
    const some = runs.problems.slice(0, 3).map((p) => `\n  ${p}`).join("")
    process.stdout.write(
      `\n${name} on redis: ${runs.repeated} runs repeated, ${runs.discarded} cases discarded; real time went past ` +
        `what the model assumes, e.g.${some}\n`
    )
  }

  for (const lock of lockTypes) {
    it.live(lock, () =>
      withMemory(async (memory) => {
        const runs = newRuns()
        try {
          await fc.assert(
            fc.asyncProperty(Model.configArbitrary(lock), commandsFor(lock, 20, "redis"), async (config, cmds) => {
              const onRedis = await redisTrace(config, cmds, runs)
              // The memory store's time is the model's: its run is checked whatever became of the Redis runs.
              const inMemory = await Model.runCommands(cmds, () => memory(config))
              if (onRedis === undefined) runs.discarded++
              // A discarded case is replaced by a new one; more discarded than compared fails the property.
              fc.pre(onRedis !== undefined)
              assert.deepStrictEqual(onRedis, inMemory)
            }),
            // The scripted run first: each type's redelivery and stall on both stores, whatever the random runs hold.
            { numRuns: Model.runs(25), examples: [Model.scenario(lock)], maxSkipsPerRun: 1 }
          )
        } finally {
          reportRuns(lock, runs)
        }
      }), 180_000)
  }

  it.live("store calls out of range: both stores refuse them with the same reason and keep their holders", () =>
    Effect.promise(async () => {
      interface Call {
        readonly call: "lock queue" | "lock run" | "renew" | "handoff"
        readonly field: string
        readonly value: number
        readonly who: number
      }
      const callArbitrary: fc.Arbitrary<Call> = fc
        .record({
          call: fc.constantFrom<Call["call"]>("lock queue", "lock run", "renew", "handoff"),
          field: fc.constantFrom("limit", "ttlMs", "leaseMs"),
          who: fc.nat(2)
        })
        .chain((c) => {
          const field = c.call === "renew" ? "leaseMs" : c.field
          const min = field === "limit" || c.call === "renew" ? 1 : 0
          return Model.outOfRange(min).map((value) => ({ ...c, field, value }))
        })
      const run = async (on: Redis.RedisService["Type"], calls: ReadonlyArray<Call>, limit: number) => {
        const prefix = uniquePrefix("ps")
        const queue: Redis.LockKey = { prefix, name: `${prefix}:d` }
        const runKey: Redis.LockKey = { prefix, name: `${prefix}:d:RUN` }
        const base = { limit, ttlMs: 0, leaseMs: 0, info: "", fenced: false }
        // Holders of every kind: with a TTL, with a lease (fenced), with neither.
        await Effect.runPromise(on.lock(queue, { ...base, jid: "a", ttlMs: 60_000 }))
        await Effect.runPromise(on.lock(runKey, { ...base, jid: "b", leaseMs: 60_000, fenced: true }))
        await Effect.runPromise(on.lock(queue, { ...base, jid: "c" }))
        const snapshot = async () =>
          JSON.stringify(await Effect.runPromise(Effect.all([on.holders(queue), on.holders(runKey)])))
        const before = await snapshot()
        const reasons: Array<string> = []
        for (const { call, field, value, who } of calls) {
          const jid = ["a", "b", "c"][who]!
          const request = { ...base, jid, fenced: call !== "lock queue", ttlMs: 1000, leaseMs: 1000, [field]: value }
          const attempt: Effect.Effect<unknown, Redis.RedisError> = call === "renew"
            ? on.renew(runKey, jid, value)
            : call === "handoff"
            ? on.handoff(queue, runKey, request, { keepOnConflict: false })
            : on.lock(call === "lock queue" ? queue : runKey, request)
          const result = await Effect.runPromise(Effect.either(attempt))
          reasons.push(
            Either.isLeft(result) ? result.left.reason : `accepted: ${JSON.stringify(result.right)}`
          )
        }
        assert.strictEqual(await snapshot(), before, "a refused call changed the holders")
        return reasons
      }
      const memory = Memory.make()
      const sequences = fc.array(callArbitrary, { minLength: 1, maxLength: 8 })
      await fc.assert(
        fc.asyncProperty(sequences, fc.constantFrom(1, 3), async (calls, limit) => {
          const onRedis = await run(store, calls, limit)
          const inMemory = await run(memory, calls, limit)
          assert.deepStrictEqual(onRedis, inMemory)
          for (const reason of onRedis) {
            assert.match(reason, /^ERR (limit|ttl|lease) must be a whole number from [01] to 2\^50, got /)
          }
        }),
        { numRuns: Model.runs(100) }
      )
    }), 60_000)

  it.live("a lock script that skips the limit check is caught, with a shrunk trace", () =>
    Effect.promise(async () => {
      const client = new IORedis(server.url)
      try {
        const broken = await Effect.runPromise(Redis.makeFromClient(brokenLimitCheck(client)))
        const runs = newRuns()
        const result = await fc.check(
          fc.asyncProperty(
            Model.configArbitrary("while_executing"),
            Model.commandsArbitrary(12, { time: false, faults: false }),
            async (config, cmds) => {
              fc.pre(await redisTrace({ ...config, limit: 1 }, cmds, runs, broken) !== undefined)
            }
          ),
          { numRuns: 100, seed: 42 }
        )
        reportRuns("broken limit check", runs)
        assert.isTrue(result.failed, "the properties must catch a lock that admits more than lockLimit holders")
        const report = fc.defaultReportMessage(result) ?? ""
        assert.match(report, /lockLimit|executions at once/)
        process.stdout.write(`\nbroken limit check, shrunk counterexample:\n${report}\n`)
      } finally {
        client.disconnect()
      }
    }), 180_000)
})

/**
 * A client that runs the lock scripts with acquire's limit checks removed (a mutation the properties must kill): a
 * full lock still evicts lapsed holders and refuses a second copy of a jid, but admits any number of jids.
 */
const brokenLimitCheck = (client: IORedis): Redis.Client => {
  const checks: ReadonlyArray<readonly [string, string]> = [
    ["if count >= limit or copy then", "if copy then"],
    ["if copy or #holders >= limit then", "if copy then"]
  ]
  // Only the scripts that take a place hold acquire (each script holds just the prelude functions it calls).
  const mutate = (source: string) =>
    !source.includes("local function acquire(") ? source : checks.reduce((mutated, [check, without]) => {
      if (!mutated.includes(check)) throw new Error(`the limit check "${check}" was not found in the lock script`)
      return mutated.replace(check, without)
    }, source)
  return {
    evalsha: () => Promise.reject(new Error("NOSCRIPT forced: run the mutated source")),
    eval: (script, numKeys, ...args) => client.eval(mutate(script), numKeys, ...args),
    hgetall: (key) => client.hgetall(key),
    script: (_subcommand, script) => client.script("LOAD", mutate(script))
  }
}
