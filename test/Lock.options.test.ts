import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Lock from "../src/Lock.js"

const invalid = (options: unknown) => Effect.flip(Lock.make(options as Lock.Options))

describe("Lock options", () => {
  it.effect("decodes aliases, durations and defaults once", () =>
    Effect.gen(function*() {
      const def = yield* Lock.make({ lock: "until_completed", lockTtl: "2 seconds", lockTimeout: 0 })
      assert.strictEqual(def.lock, "until_executed")
      assert.deepStrictEqual(def.lockTtl, Option.some(Duration.seconds(2)))
      assert.strictEqual(def.lockLimit, 1)
      assert.deepStrictEqual(def.onConflict, { client: "log", server: "log" })
      assert.strictEqual(def.lockPrefix, "uniquejobs")
      assert.strictEqual(def.digestAlgorithm, "legacy")
      for (const [alias, type] of Object.entries(Lock.lockTypes)) {
        assert.strictEqual((yield* Lock.make({ lock: alias as Lock.LockTypeName, lockTtl: 1000 })).lock, type)
      }
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
      assert.deepStrictEqual((yield* Lock.make({ lock: "until_executed", onConflict: "reschedule" })).onConflict, {
        client: "log",
        server: "reschedule"
      })
      assert.deepStrictEqual((yield* Lock.make({ lock: "until_executed", onConflict: "replace" })).onConflict, {
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
      assert.strictEqual((yield* Lock.make({ lock: "while_executing_reject" })).onConflict.server, "reject")
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

  it("unsafeMake throws the typed error at definition time", () => {
    try {
      Lock.unsafeMake({ lock: "until_expired" })
      assert.fail("expected a throw")
    } catch (error) {
      assert.instanceOf(error, Lock.InvalidLockOptions)
      assert.strictEqual((error as Lock.InvalidLockOptions).field, "lockTtl")
    }
  })
})
