/**
 * Multi-process races at full size (the slow tier, `npm run test:slow`): four scenarios, each four Node processes
 * against one private redis-server, at least 10,000 executions in all; what each race checks is in
 * `support/races.ts`. The fast tier runs one small race (test/multiprocess.race.test.ts).
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { PROCESSES, race, RUN_CAP_MS, type Scenario } from "./support/races.js"
import * as RedisTest from "./support/redis.js"
import * as Workers from "./support/workers.js"

describe("multi-process races", () => {
  // The same four processes serve every scenario (Node's start is paid once); each run has its own connections.
  layer(Layer.merge(RedisTest.layerServer, Workers.layerPool(PROCESSES)), { excludeTestServices: true })((it) => {
    let executions = 0
    const scenarios: ReadonlyArray<Scenario> = [
      {
        name: "while_executing lockLimit 1",
        mode: "while_executing",
        lockLimit: 1,
        digests: 4,
        fibers: 3,
        concurrency: 0,
        target: 900
      },
      {
        name: "while_executing lockLimit 3",
        mode: "while_executing",
        lockLimit: 3,
        digests: 2,
        fibers: 5,
        concurrency: 0,
        target: 650
      },
      {
        name: "until_executed client+server",
        mode: "until_executed",
        lockLimit: 1,
        digests: 4,
        fibers: 2,
        concurrency: 4,
        target: 550
      },
      {
        name: "until_and_while_executing client+server",
        mode: "until_and_while_executing",
        lockLimit: 1,
        digests: 4,
        fibers: 2,
        concurrency: 4,
        target: 500
      }
    ]
    for (const scenario of scenarios) {
      it.effect(`${scenario.name}: ${PROCESSES} processes, one Redis`, () =>
        Effect.map(race(scenario), (summary) => {
          executions += summary.executions
        }), RUN_CAP_MS + 60_000)
    }

    it.effect("at least 10,000 executions across the multi-process runs", () =>
      Effect.sync(() => {
        assert.isAtLeast(executions, 10_000)
      }))
  })
})
