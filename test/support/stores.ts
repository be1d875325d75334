/**
 * The two stores every store-level suite runs on: the memory store, where TestClock moves time, and the Lua scripts
 * on a private redis-server, where time is real (short sleeps).
 */
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import * as TestClock from "effect/testing/TestClock"
import * as Redis from "../../src/Redis.js"
import * as RedisTest from "./redis.js"

export interface Store {
  readonly name: string
  readonly layer: Layer.Layer<Redis.RedisService, unknown>
  /** Whether it runs on real time (exclude the test services). */
  readonly live: boolean
  readonly advance: (ms: number) => Effect.Effect<void>
}

export const stores: ReadonlyArray<Store> = [
  { name: "memory", layer: Redis.layerMemory, live: false, advance: (ms) => TestClock.adjust(ms) },
  { name: RedisTest.clusterMode ? "cluster" : "redis", layer: RedisTest.layer(), live: true, advance: (ms) => Effect.sleep(ms) }
]

/**
 * `redis` with its renewals failing while `cut()` says so, as a holder cut off from its store sees them (the lease
 * keeper renews in batches, `Lock.renew` one by one); every other call goes through.
 */
export const cutOff = (redis: Redis.Store, cut: () => boolean): Redis.Store => ({
  ...redis,
  renew: (...args) =>
    cut() ? Effect.fail(new Redis.RedisError({ operation: "renew", reason: "cut off" })) : redis.renew(...args),
  renewAll: (renewals) =>
    cut() ? Effect.fail(new Redis.RedisError({ operation: "renewAll", reason: "cut off" })) : redis.renewAll(renewals)
})

/**
 * `redis` whose next unlocks fail as `plan` says, one entry per call, then answer as usual: "ran" runs the unlock and
 * loses its answer (a call that timed out on the way back), "refused" fails before it runs (a connection refused).
 */
export const losingUnlocks = (redis: Redis.Store, plan: ReadonlyArray<"ran" | "refused">): Redis.Store => {
  let next = 0
  const lost = new Redis.RedisError({ operation: "unlock", reason: "its answer was lost" })
  return {
    ...redis,
    unlock: (lock, jid, fence) => {
      const step = plan[next++]
      if (step === undefined) return redis.unlock(lock, jid, fence)
      return step === "ran" ? Effect.andThen(redis.unlock(lock, jid, fence), Effect.fail(lost)) : Effect.fail(lost)
    }
  }
}
