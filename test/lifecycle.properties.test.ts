/**
 * Model-based properties of the whole lifecycle on the memory store, on TestClock: client, queue, server, retries,
 * deaths, crashes, redelivered jids, stalled workers and workers cut off from Redis, scheduled jobs and enqueues that
 * fail, for every lock type and strategy. Time moves by random amounts, so some TTLs and leases pass and others not;
 * after every command the invariants hold, among them the middleware's ordering promises (until_executing releases
 * before perform, until_executed keeps its lock on failure and releases on success or death, the handoff keeps or
 * releases the queue lock as the strategy says). After the last command everything is drained: nothing stays held and
 * every accepted job has an outcome.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=500 npx vitest run test/lifecycle.properties.test.ts
 */
import { describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import { commandsFor, lockTypes, withMemory } from "./support/lifecycle.js"
import * as Model from "./support/model.js"

describe("lifecycle properties: memory store", () => {
  for (const lock of lockTypes) {
    it.live(lock, () =>
      withMemory((memory) =>
        fc.assert(
          fc.asyncProperty(Model.configArbitrary(lock), commandsFor(lock, 30, "memory"), async (config, cmds) => {
            await Model.runCommands(cmds, () => memory(config))
          }),
          { numRuns: Model.runs(100), examples: [Model.scenario(lock), Model.conflictScenario(lock)] }
        )
      ), 120_000)
  }
})

