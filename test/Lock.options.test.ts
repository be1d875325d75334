import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as LockOptions from "../src/Options.js"
import * as LockType from "../src/LockType.js"
import * as UniqueJob from "../src/UniqueJob.js"

// Options that decode fail the test with a short message: a failure whose message is the decoded options (one long
// line of JSON) costs vitest's stack parser minutes (mutate's runs of a mutant that lets a bad option through).
const invalid = (options: unknown) =>
  Effect.flatMap(
    Effect.result(LockOptions.make(options as LockOptions.Options)),
    (decoded) =>
      Result.isFailure(decoded) ? Effect.succeed(decoded.failure) : Effect.die(new Error("the options decoded; expected a refusal"))
  )

const refused = (options: unknown, field: string, ...reason: Array<string>) =>
  Effect.gen(function*() {
    const error = yield* invalid(options)
    assert.strictEqual(error._tag, "InvalidLockOptions")
    assert.strictEqual(error.field, field, error.message)
    for (const part of reason) assert.include(error.reason, part)
    return error
  })

const queueTypes = ["until_executing", "until_executed", "until_expired"] as const
const runTypes = ["while_executing", "while_executing_reject"] as const

describe("Lock options", () => {
  it.effect("decodes aliases, durations and defaults once", () =>
    Effect.gen(function*() {
      const def = yield* LockOptions.make({ lock: "until_completed", lockTtl: "2 seconds", lockTimeout: 0 })
      assert.strictEqual(def.lock, "until_executed")
      assert.deepStrictEqual(def.lockTtl, Option.some(Duration.seconds(2)))
      assert.strictEqual(def.lockLimit, 1)
      assert.deepStrictEqual(def.onConflict, { client: "log", server: "log" })
      assert.strictEqual(def.lockPrefix, "uniquejobs")
      assert.strictEqual(def.digestAlgorithm, "legacy")
      for (const [alias, type] of Object.entries(LockType.names)) {
        const lockTtl = LockType.phases(type).queue ? 1000 : undefined
        assert.strictEqual((yield* LockOptions.make({ lock: alias as LockType.Name, lockTtl })).lock, type)
      }
    }))

  it.effect("lockArgs and afterUnlock given as undefined read as absent, as their type allows", () =>
    Effect.gen(function*() {
      const def = yield* LockOptions.make({ lock: "until_executed", lockArgs: undefined, afterUnlock: undefined })
      assert.strictEqual(def.lockArgs, undefined)
      assert.strictEqual(def.afterUnlock, undefined)
    }))

  it.effect("until_expired without lockTtl fails naming lockTtl", () =>
    Effect.gen(function*() {
      const error = yield* invalid({ lock: "until_expired" })
      assert.strictEqual(error._tag, "InvalidLockOptions")
      assert.strictEqual(error.field, "lockTtl")
      assert.include(error.message, "until_expired")
    }))

  it.effect("lockLimit 0 fails naming lockLimit", () =>
    Effect.gen(function*() {
      const error = yield* invalid({ lock: "while_executing", lockLimit: 0 })
      assert.strictEqual(error.field, "lockLimit")
      assert.include(error.reason, ">= 1")
      assert.strictEqual((yield* invalid({ lock: "while_executing", lockLimit: 1.5 })).field, "lockLimit")
    }))

  it.effect("an unknown lock type fails naming lock and listing the valid ones", () =>
    Effect.gen(function*() {
      const error = yield* invalid({ lock: "until_done" })
      assert.strictEqual(error.field, "lock")
      assert.include(error.reason, "until_and_while_executing")
      assert.strictEqual((yield* invalid({})).field, "lock")
    }))

  it.effect("strategies: one name applies where it means something; an explicit wrong side is refused", () =>
    Effect.gen(function*() {
      const both = yield* LockOptions.make({ lock: "until_and_while_executing", onConflict: "reschedule" })
      assert.deepStrictEqual(both.onConflict, { client: "log", server: "reschedule" })
      assert.deepStrictEqual((yield* LockOptions.make({ lock: "until_executed", onConflict: "replace" })).onConflict, {
        client: "replace",
        server: "log"
      })
      const server = yield* invalid({ lock: "until_executed", onConflict: { server: "replace" } })
      assert.strictEqual(server.field, "onConflict.server")
      const client = yield* invalid({ lock: "until_executed", onConflict: { client: "reschedule" } })
      assert.strictEqual(client.field, "onConflict.client")
      assert.include(client.reason, "server")
      assert.strictEqual((yield* invalid({ lock: "until_executed", onConflict: "explode" })).field, "onConflict")
    }))

  it.effect("while_executing_reject forces reject on the server", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* LockOptions.make({ lock: "while_executing_reject" })).onConflict.server, "reject")
      const error = yield* invalid({ lock: "while_executing_reject", onConflict: { server: "reschedule" } })
      assert.strictEqual(error.field, "onConflict.server")
    }))

  it.effect("bad durations, prefixes, functions and unknown fields name their field", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* invalid({ lock: "until_executed", lockTtl: -5 })).field, "lockTtl")
      assert.strictEqual((yield* invalid({ lock: "until_executed", lockTtl: "soon" })).field, "lockTtl")
      assert.strictEqual((yield* invalid({ lock: "until_executed", lockTimeout: "x" })).field, "lockTimeout")
      assert.strictEqual((yield* invalid({ lock: "until_executed", lockLease: 0 })).field, "lockLease")
      for (const prefix of ["a b", "jobs*", "{x}", "jobs:LOCKED", ""]) {
        assert.strictEqual((yield* invalid({ lock: "until_executed", lockPrefix: prefix })).field, "lockPrefix", prefix)
      }
      assert.strictEqual((yield* invalid({ lock: "until_executed", lockArgs: "first" })).field, "lockArgs")
      assert.strictEqual((yield* invalid({ lock: "until_executed", lockTTL: 5 })).field, "lockTTL")
      const many = yield* invalid({ lock: "until_executed", lockLimit: -1, lockInfo: "yes" })
      assert.deepStrictEqual(many.issues.map((issue) => issue.field).sort(), ["lockInfo", "lockLimit"])
    }))

  it.effect("every duration is whole milliseconds: a fraction is refused with the whole number to use", () =>
    Effect.gen(function*() {
      const whole = "expected whole milliseconds"
      yield* refused({ lock: "until_executed", lockTtl: 1000.5 }, "lockTtl", whole, "got 1000.5 ms", "(use 1001)")
      yield* refused({ lock: "until_executed", lockTtl: "1.0005 seconds" }, "lockTtl", whole, "1000.5 ms", "(use 1001)")
      yield* refused({ lock: "until_executed", lockTtl: Duration.seconds(1 / 3) }, "lockTtl", whole, "(use 333)")
      yield* refused({ lock: "until_executed", lockTtl: 1_500_000n }, "lockTtl", whole, "got 1.5 ms", "(use 2)")
      yield* refused({ lock: "while_executing", lockLease: 1000.5 }, "lockLease", whole, "(use 1001)")
      yield* refused({ lock: "until_executed", lockTimeout: 0.25 }, "lockTimeout", whole, "(use 0)")
      yield* refused(
        { lock: "while_executing", onConflict: "reschedule", rescheduleDelay: "2.5 millis" },
        "rescheduleDelay",
        whole,
        "(use 3)"
      )
    }))

  it.effect("a duration above 1000 years, or infinite, is refused", () =>
    Effect.gen(function*() {
      assert.strictEqual(LockOptions.maxDurationMs, 1000 * 365 * 24 * 60 * 60 * 1000)
      const max = "at most 1000 years"
      yield* refused({ lock: "until_executed", lockTtl: 1e17 }, "lockTtl", max, "got 100000000000000000 ms")
      yield* refused({ lock: "until_executed", lockTtl: LockOptions.maxDurationMs + 1 }, "lockTtl", max)
      yield* refused({ lock: "until_executed", lockTtl: Infinity }, "lockTtl", max, "Infinity")
      yield* refused({ lock: "until_executed", lockTtl: Duration.infinity }, "lockTtl", max)
      yield* refused({ lock: "until_executed", lockTimeout: "52200 weeks" }, "lockTimeout", max)
      yield* refused({ lock: "until_executed", lockTimeout: Duration.days(366_000) }, "lockTimeout", max)
      yield* refused({ lock: "while_executing", lockLease: 1e17 }, "lockLease", max)
      const rescheduling = { lock: "while_executing", onConflict: "reschedule" }
      yield* refused({ ...rescheduling, rescheduleDelay: 1e17 }, "rescheduleDelay", max)
      const longest = yield* LockOptions.make({ lock: "until_executed", lockTtl: LockOptions.maxDurationMs })
      assert.deepStrictEqual(longest.lockTtl, Option.some(Duration.millis(LockOptions.maxDurationMs)))
    }))

  it.effect("a negative duration is reported as written, not as the 0 it clamps to", () =>
    Effect.gen(function*() {
      yield* refused({ lock: "until_executed", lockTtl: -5 }, "lockTtl", "positive", "got -5 ms")
      yield* refused({ lock: "until_executed", lockTtl: "-5 seconds" }, "lockTtl", "got -5 seconds")
      yield* refused({ lock: "until_executed", lockTimeout: -1 }, "lockTimeout", ">= 0", "got -1 ms")
      yield* refused({ lock: "until_executed", lockTimeout: -2_000_000n }, "lockTimeout", "got -2000000 ns")
      yield* refused({ lock: "until_executed", lockTtl: NaN }, "lockTtl", "got NaN ms")
      yield* refused({ lock: "until_executed", lockTtl: 0 }, "lockTtl", "positive", "got 0 ms")
    }))

  it.effect("lockLease has a floor: below it a lease runs out before it is renewed", () =>
    Effect.gen(function*() {
      assert.strictEqual(LockOptions.minLeaseMs, 100)
      for (const lease of [1, 99, "50 millis", 0]) {
        yield* refused({ lock: "while_executing", lockLease: lease }, "lockLease", "at least 100 ms", "lease/3")
      }
      const floor = yield* LockOptions.make({ lock: "until_and_while_executing", lockLease: LockOptions.minLeaseMs })
      assert.strictEqual(Duration.toMillis(floor.lockLease), 100)
    }))

  it.effect("valid durations still decode, to whole milliseconds", () =>
    Effect.gen(function*() {
      const def = yield* LockOptions.make({
        lock: "until_and_while_executing",
        lockTtl: "1.5 seconds",
        lockTimeout: 2_000_000_000n,
        lockLease: Duration.seconds(2),
        onConflict: { server: "reschedule" },
        rescheduleDelay: "250 millis"
      })
      assert.deepStrictEqual(def.lockTtl, Option.some(Duration.millis(1500)))
      assert.strictEqual(Duration.toMillis(def.lockTimeout), 2000)
      assert.strictEqual(Duration.toMillis(def.lockLease), 2000)
      assert.strictEqual(Duration.toMillis(def.rescheduleDelay), 250)
      const defaults = yield* LockOptions.make({ lock: "while_executing" })
      assert.strictEqual(Duration.toMillis(defaults.lockLease), 30_000)
      assert.strictEqual(Duration.toMillis(defaults.rescheduleDelay), 5_000)
      assert.strictEqual(Duration.toMillis(defaults.lockTimeout), 0)
    }))

  it.effect("lockTtl on a type with no queue lock is refused, pointing at lockLease", () =>
    Effect.gen(function*() {
      for (const lock of [...runTypes, "while_busy"]) {
        const error = yield* refused({ lock, lockTtl: 5000 }, "lockTtl", "no lock at enqueue", "lockLease")
        assert.include(error.reason, "until_and_while_executing")
      }
    }))

  it.effect("lockLease on a type with no run lock is refused, pointing at lockTtl", () =>
    Effect.gen(function*() {
      for (const lock of queueTypes) {
        yield* refused({ lock, lockTtl: 1000, lockLease: 5000 }, "lockLease", "no lock around perform", "lockTtl")
      }
    }))

  it.effect("a client strategy on a type with no queue lock is refused; a name the server knows applies there", () =>
    Effect.gen(function*() {
      for (const lock of runTypes) {
        for (const client of ["raise", "reject", "replace", () => Effect.die("unused")]) {
          yield* refused({ lock, onConflict: { client } }, "onConflict.client", "no lock at enqueue", "server strategy")
        }
        yield* refused({ lock, onConflict: "replace" }, "onConflict", "\"replace\"", "no lock at enqueue")
        assert.strictEqual((yield* LockOptions.make({ lock, onConflict: { client: "log" } })).onConflict.client, "log")
      }
      for (const name of ["raise", "reject", "reschedule", "log"] as const) {
        assert.strictEqual((yield* LockOptions.make({ lock: "while_executing", onConflict: name })).onConflict.server, name)
      }
      assert.strictEqual(
        (yield* LockOptions.make({ lock: "while_executing_reject", onConflict: "reject" })).onConflict.server,
        "reject"
      )
    }))

  it.effect("a server strategy on a type with no run lock is refused; a name the client knows applies there", () =>
    Effect.gen(function*() {
      for (const lock of queueTypes) {
        for (const server of ["raise", "reject", "reschedule", () => Effect.die("unused")]) {
          yield* refused(
            { lock, lockTtl: 1000, onConflict: { server } },
            "onConflict.server",
            "no lock around perform",
            "client strategy"
          )
        }
        yield* refused({ lock, lockTtl: 1000, onConflict: "reschedule" }, "onConflict", "\"reschedule\"")
      }
      for (const name of ["raise", "reject", "replace", "log"] as const) {
        assert.strictEqual((yield* LockOptions.make({ lock: "until_executed", onConflict: name })).onConflict.client, name)
      }
    }))

  it.effect("rescheduleDelay is refused unless the server strategy is reschedule or a function", () =>
    Effect.gen(function*() {
      yield* refused({ lock: "while_executing", rescheduleDelay: 100 }, "rescheduleDelay", "strategy here is log")
      yield* refused(
        { lock: "until_and_while_executing", onConflict: "raise", rescheduleDelay: 100 },
        "rescheduleDelay",
        "is raise",
        "reschedule"
      )
      yield* refused({ lock: "while_executing_reject", rescheduleDelay: 100 }, "rescheduleDelay", "is reject")
      yield* refused({ lock: "until_executed", rescheduleDelay: 100 }, "rescheduleDelay", "nothing is rescheduled")
      const rescheduling = yield* LockOptions.make({ lock: "while_executing", onConflict: "reschedule", rescheduleDelay: 100 })
      assert.strictEqual(Duration.toMillis(rescheduling.rescheduleDelay), 100)
      const custom = yield* LockOptions.make({
        lock: "until_and_while_executing",
        onConflict: { server: () => Effect.succeed({ _tag: "Skip" }) as never },
        rescheduleDelay: 100
      })
      assert.strictEqual(Duration.toMillis(custom.rescheduleDelay), 100)
    }))

  it.effect("every refused option is listed, the first one named in field", () =>
    Effect.gen(function*() {
      const error = yield* invalid({ lock: "until_expired", lockLease: 5000, onConflict: { server: "raise" } })
      assert.strictEqual(error.field, "lockTtl")
      assert.deepStrictEqual(error.issues.map((issue) => issue.field), ["lockTtl", "lockLease", "onConflict.server"])
    }))

  it.effect("UniqueJob.make refuses an empty worker or queue, naming it", () =>
    Effect.gen(function*() {
      const make = (options: unknown) => Effect.flip(UniqueJob.make(options as UniqueJob.Options))
      const queue = yield* make({ worker: "W", queue: "", lock: "until_executed" })
      assert.strictEqual(queue.field, "queue")
      assert.include(queue.reason, "non-empty string")
      assert.strictEqual((yield* make({ worker: "W", queue: 3, lock: "until_executed" })).field, "queue")
      assert.strictEqual((yield* make({ worker: "", lock: "until_executed" })).field, "worker")
      const both = yield* make({ worker: "", queue: "", lock: "until_executed" })
      assert.deepStrictEqual(both.issues.map((issue) => issue.field), ["worker", "queue"])
      const fine = yield* UniqueJob.make({ worker: "W", lock: "until_executed" })
      assert.strictEqual(fine.queue, "default")
    }))

  it("unsafeMake throws the typed error at definition time", () => {
    try {
      LockOptions.unsafeMake({ lock: "until_expired" })
      assert.fail("expected a throw")
    } catch (error) {
      assert.instanceOf(error, LockOptions.InvalidLockOptions)
      assert.strictEqual((error as LockOptions.InvalidLockOptions).field, "lockTtl")
    }
  })
})
