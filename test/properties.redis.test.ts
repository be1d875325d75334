/**
 * Model-based properties of the whole lifecycle on Redis (real time), each case compared with the memory store's run
 * of the same commands (test/lifecycle.properties.test.ts runs the model on the memory store alone, with more
 * commands). A Redis run that a busy machine took past what the model assumes of real time is repeated, and the
 * property fails if more cases are discarded than compared. A lock script with its limit check removed must be caught.
 * In the slow tier (`npm run test:slow`): the model's time advances are real sleeps on Redis, about 80 s in all.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=100 npx vitest run test/properties.redis.test.ts
 */
import { Redis as IORedis } from "ioredis"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Exit from "effect/Exit"
import * as fc from "fast-check"
import * as Scope from "effect/Scope"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as Memory from "../src/store/Memory.js"
import * as Model from "./support/model.js"
import { uniquePrefix } from "./support/redis.js"

import { commandsFor, lockTypes, withMemory } from "./support/lifecycle.js"
describe("lifecycle properties: redis, differential against the memory store", () => {
  let server: { readonly url: string; readonly close: () => Promise<void> }
  let store: Redis.RedisService["Service"]
  beforeAll(async () => {
    const scope = Effect.runSync(Scope.make())
    const source = await Effect.runPromise(Scope.provide(RedisServer.acquire, scope))
    store = await Effect.runPromise(Scope.provide(Redis.make({ url: source.url }), scope))
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
    on: Redis.RedisService["Service"] = store
  ): Promise<ReadonlyArray<string> | undefined> => {
    for (let attempt = 1; attempt <= 3; attempt++) {
      const realTime = new Model.RealTime()
      const system = () =>
        Promise.resolve(
          new Model.System(config, on, Context.empty(), Model.advanceReal, uniquePrefix("pr"), realTime)
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
      const run = async (on: Redis.RedisService["Service"], calls: ReadonlyArray<Call>, limit: number) => {
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
          const result = await Effect.runPromise(Effect.result(attempt))
          reasons.push(
            Result.isFailure(result) ? result.failure.reason : `accepted: ${JSON.stringify(result.success)}`
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
