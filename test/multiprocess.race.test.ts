/**
 * One multi-process race in the fast tier: four Node processes take and release one `while_executing` lock of
 * lockLimit 1 on the same digests of one private redis-server; no two executions of a digest overlap, in Redis' own
 * order and time, and nothing is left. The four scenarios at full size are test/multiprocess.test.ts (slow tier).
 */
import { describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { PROCESSES, race, RUN_CAP_MS } from "./support/races.js"
import * as RedisTest from "./support/redis.js"
import * as Workers from "./support/workers.js"

describe("a multi-process race", () => {
  layer(Layer.merge(RedisTest.layerServer, Workers.layerPool(PROCESSES)), { excludeTestServices: true })((it) => {
    it.effect(`while_executing lockLimit 1, 150 executions in each of ${PROCESSES} processes, one Redis`, () =>
      Effect.asVoid(race({
        name: "while_executing lockLimit 1 (small)",
        mode: "while_executing",
        lockLimit: 1,
        digests: 4,
        fibers: 3,
        concurrency: 0,
        target: 150
      })), RUN_CAP_MS + 60_000)
  })
})
