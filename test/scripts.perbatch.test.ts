/**
 * Redis work per batch, not per step (issue 50): what a batch.lua call runs inside Redis, counted with INFO
 * commandstats on a private redis-server. A call reads Redis' clock once, checks a layout epoch and reads a fencing
 * counter once, writes the counter once and its steps' index writes after the first in one call; each lock step then
 * costs HLEN, HSET and PEXPIRE, each release HRANDFIELD and HDEL. And whatever the steps, a batch leaves the index,
 * the counters and the holders as the same steps sent one call each.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fc from "fast-check"
import type { Redis as IORedis } from "ioredis"
import * as Lock from "../src/Lock.js"
import * as Options from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as Layout from "../src/store/Layout.js"
import * as Scripts from "../src/store/Scripts.js"
import { privateStore } from "./support/batch.js"

const scripts = Scripts.loadScripts()

/** Every command's calls since the last CONFIG RESETSTAT, the script calls and INFO itself left out. */
const inner = async (probe: IORedis): Promise<Record<string, number>> => {
  const info = await probe.info("commandstats")
  const out: Record<string, number> = {}
  for (const match of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) {
    const command = match[1]!.split("|")[0]!
    if (!["evalsha", "eval", "info", "config"].includes(command)) out[command] = (out[command] ?? 0) + Number(match[2])
  }
  return out
}

interface Step {
  readonly kind: "l" | "u" | "h"
  readonly keys: ReadonlyArray<string>
  readonly argv: ReadonlyArray<string>
}

const keysOf = (prefix: string, name: string) => Layout.standalone.keysOf({ prefix, name })

/** A lock step as the store sends it (lock.lua's keys and arguments; epoch '': no layout record). */
const lockStep = (prefix: string, name: string, jid: string, run: boolean, limit = 1): Step => {
  const keys = keysOf(prefix, name)
  return {
    kind: "l",
    keys: [keys.locked, keys.index, keys.fence, keys.resets],
    argv: [jid, name, String(limit), run ? "0" : "60000", run ? "30000" : "0", "", run ? "1" : "0", "", ""]
  }
}
const unlockStep = (prefix: string, name: string, jid: string, token = "0"): Step => {
  const keys = keysOf(prefix, name)
  return { kind: "u", keys: [keys.locked, keys.index], argv: [jid, name, token] }
}
const handoffStep = (prefix: string, name: string, jid: string, keep: boolean): Step => {
  const queue = keysOf(prefix, name)
  const run = keysOf(prefix, `${name}:RUN`)
  return {
    kind: "h",
    keys: [queue.locked, run.locked, queue.index, queue.fence, queue.resets],
    argv: [jid, name, `${name}:RUN`, "1", "0", "30000", "", keep ? "1" : "0", ""]
  }
}

/** batch.lua over `steps`, as the store sends it: every step's keys, then per step its kind, counts and arguments. */
const batch = (probe: IORedis, steps: ReadonlyArray<Step>): Promise<Array<[number, unknown]>> => {
  const keys = steps.flatMap((step) => step.keys)
  const argv = steps.flatMap((step) => [step.kind, String(step.keys.length), String(step.argv.length), ...step.argv])
  return probe.evalsha(scripts.batch.sha, keys.length, ...keys, ...argv) as Promise<Array<[number, unknown]>>
}

/** The same step as its own script (lock.lua, unlock.lua, handoff.lua), answered as batch.lua answers a step. */
const alone = (probe: IORedis, step: Step): Promise<[number, unknown]> => {
  const script = step.kind === "l" ? scripts.lock : step.kind === "u" ? scripts.unlock : scripts.handoff
  return (probe.evalsha(script.sha, step.keys.length, ...step.keys, ...step.argv) as Promise<unknown>).then(
    (reply) => [1, reply],
    (error: Error) => [0, error.message]
  )
}

describe("a batch's Redis work (issue 50)", () => {
  it.live("N run locks and their N releases: the clock, layout, counter and index once per call, not per step", () =>
    Effect.gen(function*() {
      const { probe } = yield* privateStore()
      for (const script of Object.values(scripts)) yield* Effect.promise(() => probe.script("LOAD", script.source))
      const n = 16
      const names = Array.from({ length: n }, (_, i) => `pb:d${i}:RUN`)
      yield* Effect.promise(() => probe.config("RESETSTAT"))
      const locked = yield* Effect.promise(() =>
        batch(probe, names.map((name, i) => lockStep("pb", name, `j${i}`, true)))
      )
      const tokens = locked.map(([ok, token]) => {
        assert.strictEqual(ok, 1)
        return Number(token)
      })
      const counted = yield* Effect.promise(() => inner(probe))
      // Strictly increasing within the call, and the counter holds the last.
      tokens.slice(1).forEach((token, i) => assert.isAbove(token, tokens[i]!))
      assert.strictEqual(Number(yield* Effect.promise(() => probe.get("pb:fence"))), tokens[n - 1])
      assert.deepStrictEqual(counted, {
        time: 1,
        sismember: 1,
        get: 1,
        set: 1,
        hlen: n,
        // The first step's ZADD checks the index is a sorted set; the others' go as one, after the last step.
        zadd: 2,
        hset: n,
        pexpire: n
      })
      // A run lock taken without lockInfo holds no info; every one is indexed, its key leased.
      for (const name of names) {
        const entry = (yield* Effect.promise(() => probe.hvals(keysOf("pb", name).locked)))[0]!
        assert.match(entry, /^\{"t":\d+,"x":0,"l":\d+,"f":\d+\}$/)
        assert.isNotNull(yield* Effect.promise(() => probe.zscore("pb:digests", name)))
        assert.isAbove(yield* Effect.promise(() => probe.pttl(keysOf("pb", name).locked)), 0)
      }

      yield* Effect.promise(() => probe.config("RESETSTAT"))
      const released = yield* Effect.promise(() =>
        batch(probe, names.map((name, i) => unlockStep("pb", name, `j${i}`, String(tokens[i]))))
      )
      assert.deepStrictEqual(released, names.map(() => [1, 1]))
      assert.deepStrictEqual(yield* Effect.promise(() => inner(probe)), { time: 1, hrandfield: n, zrem: 2, hdel: n })
      assert.strictEqual(yield* Effect.promise(() => probe.zcard("pb:digests")), 0)
      const left = yield* Effect.promise(() => probe.exists(...names.map((name) => keysOf("pb", name).locked)))
      assert.strictEqual(left, 0)

      // Three calls, whatever their steps: three reads of the clock.
      yield* Effect.promise(() => probe.config("RESETSTAT"))
      for (let call = 0; call < 3; call++) {
        const steps = names.slice(0, 5).flatMap((name, i) => [
          lockStep("pb3", `${name}:${call}`, `j${i}`, call % 2 === 0),
          unlockStep("pb3", `${name}:${call}`, `j${i}`)
        ])
        yield* Effect.promise(() => batch(probe, steps))
      }
      assert.strictEqual((yield* Effect.promise(() => inner(probe))).time, 3)
    }))

  it.live("index writes keep their order: a handoff's release after its lock in one call drops the queue member", () =>
    Effect.gen(function*() {
      const { probe } = yield* privateStore()
      for (const script of Object.values(scripts)) yield* Effect.promise(() => probe.script("LOAD", script.source))
      // The first step writes the index (so the others' writes wait for the call's end); the lock's ZADD of d1 waits,
      // and the handoff's release of d1, after it, must not go before it.
      const replies = yield* Effect.promise(() =>
        batch(probe, [
          lockStep("po", "po:d0", "j0", false),
          lockStep("po", "po:d1", "j1", false),
          handoffStep("po", "po:d1", "j1", false)
        ])
      )
      assert.deepStrictEqual(replies.map(([ok]) => ok), [1, 1, 1])
      const members = yield* Effect.promise(() => probe.zrange("po:digests", 0, -1))
      assert.deepStrictEqual(members.sort(), ["po:d0", "po:d1:RUN"])
      assert.strictEqual(yield* Effect.promise(() => probe.exists(keysOf("po", "po:d1").locked)), 0)
    }))

  it.live("a release of one of a lock's two holders in a batch keeps the digest indexed; the last one's drops it", () =>
    Effect.gen(function*() {
      const { probe } = yield* privateStore()
      for (const script of Object.values(scripts)) yield* Effect.promise(() => probe.script("LOAD", script.source))
      const taken = yield* Effect.promise(() =>
        batch(probe, [lockStep("ps", "ps:d0", "j0", false, 2), lockStep("ps", "ps:d0", "j1", false, 2)])
      )
      assert.deepStrictEqual(taken.map(([ok]) => ok), [1, 1])
      const members = () => Effect.promise(() => probe.zrange("ps:digests", 0, -1))
      // Batched (a call of two steps): the release reads the hash by HRANDFIELD, which tells whether it is the last.
      const first = yield* Effect.promise(() =>
        batch(probe, [unlockStep("ps", "ps:d0", "j0"), lockStep("ps", "ps:d9", "j9", false)])
      )
      assert.deepStrictEqual(first.map((reply) => reply[1]), [1, -1])
      assert.deepStrictEqual((yield* members()).sort(), ["ps:d0", "ps:d9"], "j1 still holds ps:d0")
      const last = yield* Effect.promise(() =>
        batch(probe, [unlockStep("ps", "ps:d0", "j1"), unlockStep("ps", "ps:d9", "j9")])
      )
      assert.deepStrictEqual(last.map((reply) => reply[1]), [1, 1])
      assert.deepStrictEqual(yield* members(), [])
    }))

  it.live("a run lock of while_executing without lockInfo writes no info, with it the info", () =>
    Effect.gen(function*() {
      const { probe, store } = yield* privateStore()
      const target = { digest: "pi:0123", jid: "j1", info: { worker: "W", queue: "q", args: [1] } }
      for (const lockInfo of [false, true]) {
        const definition = Options.unsafeMake({ lock: "while_executing", lockPrefix: "pi", lockInfo })
        const digest = `pi:${lockInfo ? "with" : "without"}`
        yield* Lock.lock(definition, { ...target, digest }).pipe(Effect.provideService(Redis.RedisService, store))
        const entry = yield* Effect.promise(() => probe.hget(keysOf("pi", `${digest}:RUN`).locked, "j1"))
        if (lockInfo) assert.include(entry, ',"i":{')
        else assert.match(entry!, /^\{"t":\d+,"x":0,"l":\d+,"f":\d+\}$/)
      }
    }))
})

type Op =
  | {
    readonly _tag: "lock"
    readonly digest: number
    readonly jid: number
    readonly run: boolean
    readonly limit: number
  }
  | { readonly _tag: "unlock"; readonly digest: number; readonly jid: number; readonly run: boolean }
  | { readonly _tag: "handoff"; readonly digest: number; readonly jid: number; readonly keep: boolean }
  // A debounced enqueue: jid takes the queue lock in over's place (lock.lua's swap), or is refused.
  | { readonly _tag: "swap"; readonly digest: number; readonly jid: number; readonly over: number }

const digests = 4
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    _tag: fc.constant("lock" as const),
    digest: fc.nat(digests - 1),
    jid: fc.nat(2),
    run: fc.boolean(),
    // 0: refused by the argument check.
    limit: fc.constantFrom(0, 1, 1, 2)
  }),
  fc.record({ _tag: fc.constant("unlock" as const), digest: fc.nat(digests - 1), jid: fc.nat(2), run: fc.boolean() }),
  fc.record({ _tag: fc.constant("handoff" as const), digest: fc.nat(digests - 1), jid: fc.nat(2), keep: fc.boolean() }),
  fc.record({ _tag: fc.constant("swap" as const), digest: fc.nat(digests - 1), jid: fc.nat(2), over: fc.nat(2) })
)

/** A swap as the store sends it: the lock's keys and the replaced set, the lock's arguments, then over's jid and ''. */
const swapStep = (prefix: string, name: string, jid: string, over: string): Step => {
  const lock = lockStep(prefix, name, jid, false)
  return { kind: "l", keys: [...lock.keys, keysOf(prefix, name).replaced], argv: [...lock.argv, over, ""] }
}

describe("a batch's deferred writes: a property", () => {
  it.live("any steps in one batch.lua call answer, and leave the index, counter and holders, as one call each", () =>
    Effect.gen(function*() {
      const { probe } = yield* privateStore()
      for (const script of Object.values(scripts)) yield* Effect.promise(() => probe.script("LOAD", script.source))
      let n = 0
      const stepOf = (prefix: string, o: Op): Step => {
        const name = `${prefix}:d${o.digest}`
        switch (o._tag) {
          case "lock":
            return lockStep(prefix, o.run ? `${name}:RUN` : name, `j${o.jid}`, o.run, o.limit)
          case "unlock":
            return unlockStep(prefix, o.run ? `${name}:RUN` : name, `j${o.jid}`)
          case "handoff":
            return handoffStep(prefix, name, `j${o.jid}`, o.keep)
          case "swap":
            return swapStep(prefix, name, `j${o.jid}`, `j${o.over}`)
        }
      }
      // What Redis holds under the prefix: each lock's holders and whether its key has a TTL, the index's members,
      // whether the counter is set. Times and tokens are clock readings: compared by place, not value.
      const state = async (prefix: string) => {
        const locks: Array<unknown> = []
        for (let d = 0; d < digests; d++) {
          for (const suffix of ["", ":RUN"]) {
            const key = keysOf(prefix, `${prefix}:d${d}${suffix}`).locked
            const type = await probe.type(key)
            locks.push(
              type === "hash" ? [Object.keys(await probe.hgetall(key)).sort(), await probe.pttl(key) > 0] : type
            )
          }
        }
        const index = await probe.type(`${prefix}:digests`) === "zset"
          ? (await probe.zrange(`${prefix}:digests`, 0, -1)).map((member) => member.slice(prefix.length)).sort()
          : "not a sorted set"
        const replaced: Array<unknown> = []
        for (let d = 0; d < digests; d++) {
          replaced.push((await probe.smembers(keysOf(prefix, `${prefix}:d${d}`).replaced)).sort())
        }
        return { locks, index, replaced, fence: (await probe.exists(`${prefix}:fence`)) === 1 }
      }
      // A foreign key among them: digest 3's queue lock a string; and some runs' index a list.
      const fresh = async (wrongIndex: boolean) => {
        const prefix = `bd${++n}`
        await probe.set(keysOf(prefix, `${prefix}:d3`).locked, "x")
        if (wrongIndex) await probe.rpush(`${prefix}:digests`, "x")
        return prefix
      }
      const tokenless = (reply: unknown): unknown =>
        typeof reply === "number" && reply > 0 ? "token" : Array.isArray(reply) ? reply.map(tokenless) : reply
      const property = fc.asyncProperty(
        fc.array(op, { minLength: 1, maxLength: 40 }),
        fc.boolean(),
        async (ops, wrongIndex) => {
          const one = await fresh(wrongIndex)
          const answers: Array<unknown> = []
          for (const o of ops) answers.push(await alone(probe, stepOf(one, o)))
          const together = await fresh(wrongIndex)
          const batched = await batch(probe, ops.map((o) => stepOf(together, o)))
          // A failed step's message: batch.lua gives the reason, a lone script's error names its line too.
          const reasons = (replies: Array<unknown>) =>
            replies.map((reply) => {
              const [ok, value] = reply as [number, unknown]
              return ok === 1 ? [1, tokenless(value)] : [0, String(value).split(" script:")[0]!.replace(/^.*?: /, "")]
            })
          assert.deepStrictEqual(reasons(batched), reasons(answers))
          assert.deepStrictEqual(await state(together), await state(one))
          // The counter holds the last token handed out, as after the lone calls.
          const tokens = (replies: Array<unknown>) =>
            replies.flatMap((reply, i) => {
              const [ok, value] = reply as [number, unknown]
              if (ok !== 1 || ops[i]!._tag === "unlock") return []
              // A lock's reply is its token (a run lock's); a handoff's {held, 1, reentrant, token} when taken.
              const token = Array.isArray(value) ? (value[1] === 1 ? Number(value[3]) : 0) : Number(value)
              return token > 0 ? [token] : []
            })
          for (const [prefix, replies] of [[together, batched], [one, answers]] as const) {
            const handed = tokens(replies)
            if (handed.length > 0) assert.strictEqual(Number(await probe.get(`${prefix}:fence`)), Math.max(...handed))
            // Every jid a swap took the place of is recorded as replaced (Store.replaced), with the record's TTL.
            for (const [i, o] of ops.entries()) {
              const [ok, value] = replies[i] as [number, unknown]
              if (o._tag !== "swap" || ok !== 1 || Array.isArray(value)) continue
              const key = keysOf(prefix, `${prefix}:d${o.digest}`).replaced
              assert.strictEqual(await probe.sismember(key, `j${o.over}`), 1, `${prefix} step ${i}`)
              assert.isAbove(await probe.pttl(key), 0)
            }
          }
        }
      )
      // A handoff's release after a lock of the same digest in one call, the index written before both: the release's
      // ZREM must wait for the lock's deferred ZADD (it went first once, and the index kept the digest).
      const example: [Array<Op>, boolean] = [[
        { _tag: "handoff", digest: 0, jid: 0, keep: false },
        { _tag: "lock", digest: 2, jid: 0, run: false, limit: 1 },
        { _tag: "handoff", digest: 2, jid: 0, keep: false }
      ], false]
      // A debounced enqueue that takes a held place, and records the jid it replaced.
      const swap: [Array<Op>, boolean] = [[
        { _tag: "lock", digest: 2, jid: 0, run: false, limit: 1 },
        { _tag: "swap", digest: 2, jid: 1, over: 0 }
      ], false]
      // A release of one of a lock's two holders: the other keeps the digest indexed (HRANDFIELD of two tells the last).
      const shared: [Array<Op>, boolean] = [[
        { _tag: "lock", digest: 1, jid: 0, run: false, limit: 2 },
        { _tag: "lock", digest: 1, jid: 1, run: false, limit: 2 },
        { _tag: "unlock", digest: 1, jid: 0, run: false }
      ], false]
      yield* Effect.promise(() => fc.assert(property, { numRuns: 200, examples: [example, swap, shared] }))
    }), 120_000)
})
