/**
 * Model-based properties of the whole lifecycle (client, queue, server, retries, deaths, crashes, TTL and lease
 * expiry) for every lock type and strategy: on the memory store (TestClock, many cases) and on Redis (real time,
 * fewer cases, each compared with the memory store's run of the same commands). A lock script with its limit
 * check removed must be caught. More cases: UNIQUE_JOBS_PROPERTY_RUNS=500 npx vitest run test/properties.test.ts
 */
import { Redis as IORedis } from "ioredis"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "effect/FastCheck"
import * as Layer from "effect/Layer"
import * as Runtime from "effect/Runtime"
import * as Scope from "effect/Scope"
import * as TestClock from "effect/TestClock"
import * as TestContext from "effect/TestContext"
import type * as Lock from "../src/Lock.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/RedisServer.js"
import * as Memory from "../src/internal/memory.js"
import * as Model from "./support/model.js"
import { uniquePrefix } from "./support/redis.js"

const lockTypes: ReadonlyArray<Lock.LockType> = [
  "until_executing",
  "until_executed",
  "until_expired",
  "while_executing",
  "while_executing_reject",
  "until_and_while_executing"
]

/** A fresh memory store on a TestClock of its own. */
const memorySystem = async (config: Model.Config, scopes: Array<Scope.CloseableScope>) => {
  const scope = Effect.runSync(Scope.make())
  scopes.push(scope)
  const runtime = await Effect.runPromise(Scope.extend(Layer.toRuntime(TestContext.TestContext), scope))
  return new Model.System(
    config,
    Memory.make(),
    runtime as Runtime.Runtime<never>,
    (ms) => TestClock.adjust(ms),
    uniquePrefix("pm")
  )
}

const closeAll = (scopes: Array<Scope.CloseableScope>) =>
  Effect.runPromise(Effect.forEach(scopes.splice(0), (s) => Scope.close(s, Exit.void), { discard: true }))

/** Memory systems for one property: each case's TestClock scope closes when the next case starts, the last after. */
const withMemory = <A>(use: (memory: (config: Model.Config) => Promise<Model.System>) => Promise<A>) => {
  const scopes: Array<Scope.CloseableScope> = []
  return Effect.acquireUseRelease(
    Effect.succeed((config: Model.Config) => closeAll(scopes).then(() => memorySystem(config, scopes))),
    (memory) => Effect.promise(() => use(memory)),
    () => Effect.promise(() => closeAll(scopes))
  )
}

describe("lifecycle properties: memory store", () => {
  for (const lock of lockTypes) {
    it.live(lock, () =>
      withMemory((memory) =>
        fc.assert(
          fc.asyncProperty(Model.configArbitrary(lock), Model.commandsArbitrary(30), async (config, cmds) => {
            await Model.runCommands(cmds, () => memory(config))
          }),
          { numRuns: Model.runs(100) }
        )
      ), 120_000)
  }
})

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

  const redisSystem = (config: Model.Config, on: Redis.RedisService["Type"] = store) =>
    Promise.resolve(
      new Model.System(config, on, Runtime.defaultRuntime, Model.advanceReal, uniquePrefix("pr"))
    )

  for (const lock of lockTypes) {
    it.live(lock, () =>
      withMemory((memory) =>
        fc.assert(
          fc.asyncProperty(Model.configArbitrary(lock), Model.commandsArbitrary(20), async (config, cmds) => {
            const onRedis = await Model.runCommands(cmds, () => redisSystem(config))
            const inMemory = await Model.runCommands(cmds, () => memory(config))
            assert.deepStrictEqual(onRedis, inMemory)
          }),
          { numRuns: Model.runs(6) }
        )
      ), 180_000)
  }

  it.live("a lock script that skips the limit check is caught, with a shrunk trace", () =>
    Effect.promise(async () => {
      const client = new IORedis(server.url)
      try {
        const broken = await Effect.runPromise(Redis.makeFromClient(brokenLimitCheck(client)))
        const result = await fc.check(
          fc.asyncProperty(Model.configArbitrary("while_executing"), Model.commandsArbitrary(12, { time: false }), (config, cmds) =>
            Model.runCommands(cmds, () => redisSystem({ ...config, limit: 1 }, broken)).then(() => undefined)),
          { numRuns: 100, seed: 42 }
        )
        assert.isTrue(result.failed, "the properties must catch a lock that admits more than lockLimit holders")
        const report = fc.defaultReportMessage(result) ?? ""
        assert.match(report, /lockLimit|executions at once/)
        process.stdout.write(`\nbroken limit check, shrunk counterexample:\n${report}\n`)
      } finally {
        client.disconnect()
      }
    }), 180_000)
})

/** A client that runs lua/acquire.lua with its final limit check removed (a mutation the properties must kill). */
const brokenLimitCheck = (client: IORedis): Redis.Client => {
  const mutate = (source: string) => {
    const mutated = source.replace("count = redis.call('HLEN', key)\n    if count >= limit then", "count = 0\n    if false then")
    if (mutated === source) throw new Error("the limit check to remove was not found in the lock script")
    return mutated
  }
  return {
    evalsha: () => Promise.reject(new Error("NOSCRIPT forced: run the mutated source")),
    eval: (script, numKeys, ...args) => client.eval(mutate(script), numKeys, ...args),
    hgetall: (key) => client.hgetall(key),
    script: (_subcommand, script) => client.script("LOAD", mutate(script))
  }
}
