import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fc from "fast-check"
import * as Digest from "../src/Digest.js"

const job = { worker: "ChargeCustomerJob", queue: "default", args: [1] }

describe("Digest", () => {
  it.effect("matches the gem's legacy (MD5) digest", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* Digest.make(job), "uniquejobs:ace64a5ce1899f22b3c3cb97985a733d")
      assert.strictEqual(
        yield* Digest.hashedText(job),
        `[["class","ChargeCustomerJob"],["lock_args",[1]],["queue","default"]]`
      )
    }))

  it.effect("modern is SHA3-256 of the same text", () =>
    Effect.gen(function*() {
      const modern = yield* Digest.make(job, { algorithm: "modern" })
      assert.strictEqual(modern, "uniquejobs:627c4762aa7f0843255e250144af01f1f23f7efd6b770c7d9a2c033f7bc6ee21")
      assert.strictEqual(modern, `uniquejobs:${Digest.hash(yield* Digest.hashedText(job), "modern")}`)
    }))

  it.effect("uniqueAcrossQueues drops queue, uniqueAcrossWorkers drops class", () =>
    Effect.gen(function*() {
      const acrossQueues = yield* Digest.hashedText(job, { uniqueAcrossQueues: true })
      assert.strictEqual(acrossQueues, `[["class","ChargeCustomerJob"],["lock_args",[1]]]`)
      const acrossWorkers = yield* Digest.hashedText(job, { uniqueAcrossWorkers: true })
      assert.strictEqual(acrossWorkers, `[["lock_args",[1]],["queue","default"]]`)
      assert.strictEqual(
        yield* Digest.make(job, { uniqueAcrossQueues: true }),
        `uniquejobs:${Digest.hash(acrossQueues, "legacy")}`
      )
      assert.strictEqual(
        yield* Digest.make({ ...job, queue: "critical" }, { uniqueAcrossQueues: true }),
        yield* Digest.make(job, { uniqueAcrossQueues: true })
      )
      assert.strictEqual(
        yield* Digest.make({ ...job, worker: "RefundJob" }, { uniqueAcrossWorkers: true }),
        yield* Digest.make(job, { uniqueAcrossWorkers: true })
      )
      assert.notStrictEqual(yield* Digest.make({ ...job, queue: "critical" }), yield* Digest.make(job))
    }))

  it.effect("nested object keys are sorted, so key order does not matter", () =>
    Effect.gen(function*() {
      const a = yield* Digest.make({ ...job, args: [{ a: 1, b: 2 }] })
      const b = yield* Digest.make({ ...job, args: [{ b: 2, a: 1 }] })
      assert.strictEqual(a, b)
      const deep = yield* Digest.hashedText({ ...job, args: [{ z: { y: 1, x: [{ d: 1, c: 2 }] }, a: null }] })
      assert.include(deep, `[{"a":null,"z":{"x":[{"c":2,"d":1}],"y":1}}]`)
      assert.notStrictEqual(a, yield* Digest.make({ ...job, args: [{ a: 1, b: 3 }] }))
    }))

  it.effect("lockArgs selects what counts, and prefix is used", () =>
    Effect.gen(function*() {
      const lockArgs = (args: ReadonlyArray<unknown>) => [args[0]]
      const one = yield* Digest.make({ ...job, args: [7, "2026-01-01T00:00:00Z"] }, { lockArgs, prefix: "app" })
      const two = yield* Digest.make({ ...job, args: [7, "2026-02-02T00:00:00Z"] }, { lockArgs, prefix: "app" })
      assert.strictEqual(one, two)
      assert.isTrue(one.startsWith("app:"))
    }))

  it.effect("a BigInt fails with DigestError naming its path", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Digest.make({ ...job, args: [1, { amount: 10n }] }))
      assert.strictEqual(error._tag, "DigestError")
      assert.strictEqual(error.path, "lock_args[1].amount")
      assert.include(error.message, "BigInt")
    }))

  it.effect("every value JSON would alter is refused with its path", () =>
    Effect.gen(function*() {
      const cyclic: Record<string, unknown> = {}
      cyclic.self = cyclic
      const cases: Array<[unknown, string]> = [
        [undefined, "lock_args[0]"],
        [() => 1, "lock_args[0]"],
        [Symbol("s"), "lock_args[0]"],
        [NaN, "lock_args[0]"],
        [Infinity, "lock_args[0]"],
        [{ when: new Date(0) }, "lock_args[0].when"],
        [new Map(), "lock_args[0]"],
        [cyclic, "lock_args[0].self"],
        [[1, [2, undefined]], "lock_args[0][1][1]"]
      ]
      for (const [value, path] of cases) {
        const error = yield* Effect.flip(Digest.make({ ...job, args: [value] }))
        assert.strictEqual(error.path, path, String(path))
      }
    }))

  it.effect("a throwing lockArgs is a DigestError", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Digest.make(job, {
          lockArgs: () => {
            throw new Error("boom")
          }
        })
      )
      assert.strictEqual(error.path, "lockArgs")
    }))

  it.effect("a __proto__ key counts like any other key", () =>
    Effect.gen(function*() {
      // JSON.parse makes "__proto__" an own data property, as a payload from a queue or an HTTP body would have it.
      const user1 = yield* Digest.make({ ...job, args: JSON.parse(`[{"__proto__":{"user":1}}]`) })
      const user2 = yield* Digest.make({ ...job, args: JSON.parse(`[{"__proto__":{"user":2}}]`) })
      const empty = yield* Digest.make({ ...job, args: [{}] })
      assert.strictEqual(new Set([user1, user2, empty]).size, 3)
      assert.strictEqual(
        yield* Digest.hashedText({ ...job, args: JSON.parse(`[{"z":0,"__proto__":{"b":2,"a":1}}]`) }),
        `[["class","ChargeCustomerJob"],["lock_args",[{"__proto__":{"a":1,"b":2},"z":0}]],["queue","default"]]`
      )
      // A literal `{ __proto__: x }` sets the prototype: not a plain object, refused rather than hashed as `{}`.
      const error = yield* Effect.flip(Digest.make({ ...job, args: [{ __proto__: { user: 1 } }] }))
      assert.strictEqual(error.path, "lock_args[0]")
    }))

  it.effect("a null-prototype object hashes like the plain object with the same keys", () =>
    Effect.gen(function*() {
      const bare: Record<string, unknown> = Object.create(null)
      bare.b = 2
      bare.a = { c: 1 }
      const digest = yield* Digest.make({ ...job, args: [bare] })
      assert.strictEqual(digest, yield* Digest.make({ ...job, args: [{ a: { c: 1 }, b: 2 }] }))
      assert.include(yield* Digest.hashedText({ ...job, args: [bare] }), `[{"a":{"c":1},"b":2}]`)
    }))

  it.effect("shared (non-cyclic) references are fine", () =>
    Effect.gen(function*() {
      const shared = { id: 1 }
      const digest = yield* Digest.make({ ...job, args: [shared, shared] })
      assert.strictEqual(digest, yield* Digest.make({ ...job, args: [{ id: 1 }, { id: 1 }] }))
    }))

  it.effect("array-index keys come first in numeric order, then the other keys sorted (as JSON.stringify lists them)", () =>
    Effect.gen(function*() {
      const text = yield* Digest.hashedText({ ...job, args: [{ b: 0, "10": 1, a: 0, "9": 2, "01": 3 }] })
      assert.include(text, `[{"9":2,"10":1,"01":3,"a":0,"b":0}]`)
    }))

  it.effect("an array's own toJSON is not called: the digest is of its elements", () =>
    Effect.gen(function*() {
      const ids = Object.assign([1, 2, 3], { toJSON: () => "other" })
      assert.strictEqual(yield* Digest.make({ ...job, args: [ids] }), yield* Digest.make({ ...job, args: [[1, 2, 3]] }))
    }))

  // The text is written out directly (no sorted copy is made): it must be exactly JSON.stringify of that copy, for any
  // JSON value, sparse arrays (holes are null) and "__proto__" keys included.
  it("the hashed text is JSON.stringify of the pairs with object keys sorted, for any JSON value", () => {
    const sorted = (value: unknown): unknown => {
      if (Array.isArray(value)) return Array.from(value, (item) => sorted(item) ?? null)
      if (typeof value !== "object" || value === null) return value
      const copy: Record<string, unknown> = Object.create(null)
      for (const key of Object.keys(value).sort()) {
        Object.defineProperty(copy, key, { value: sorted((value as Record<string, unknown>)[key]), enumerable: true })
      }
      return copy
    }
    const value = fc.oneof(fc.jsonValue(), fc.sparseArray(fc.jsonValue(), { noTrailingHole: true }))
    fc.assert(
      fc.property(fc.array(value, { maxLength: 4 }), fc.string(), fc.string(), fc.boolean(), fc.boolean(), (args, worker, queue, q, w) => {
        const expected = JSON.stringify([
          ...(w ? [] : [["class", worker]]),
          ["lock_args", sorted(args)],
          ...(q ? [] : [["queue", queue]])
        ])
        const text = Effect.runSync(Digest.hashedText({ worker, queue, args }, { uniqueAcrossQueues: q, uniqueAcrossWorkers: w }))
        assert.strictEqual(text, expected)
        assert.strictEqual(
          Effect.runSync(Digest.make({ worker, queue, args }, { uniqueAcrossQueues: q, uniqueAcrossWorkers: w })),
          `uniquejobs:${Digest.hash(expected, "legacy")}`
        )
      }),
      { numRuns: 2000 }
    )
  })
})
