/**
 * `Locks.stats` over a sharded index with a shard that does not answer (issue 47): the counts of the shards that
 * reply, `partial`, and the shard that did not with its error; no shard answering is a RedisError, not an empty answer.
 * A stand-in store: the memory store's locks, its index read through a 4-shard scan whose shard 2 fails.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { assert, describe, it } from "vitest"
import * as Layout from "../src/store/Layout.js"
import * as Memory from "../src/store/Memory.js"
import * as Locks from "../src/Locks.js"
import * as Redis from "../src/Redis.js"

const shards = 4
const prefix = "partial"
const names = Array.from({ length: 12 }, (_, i) => `${prefix}:d${i}`)
const shardOf = (name: string) => names.indexOf(name) % shards

const sharded = (down: (shard: number) => boolean): Effect.Effect<Redis.Store, Redis.RedisError> =>
  Effect.gen(function*() {
    const store = Memory.make()
    yield* Effect.forEach(names, (name) =>
      store.lock({ prefix, name }, { jid: `j-${name}`, limit: 1, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false }))
    return {
      ...store,
      layout: () => Effect.succeed({ cluster: true, shards, recorded: true }),
      scan: (_prefix, cursor) => {
        const at = Layout.scanCursor.decode({ shards }, cursor)
        if (down(at.shard)) {
          return Effect.fail(new Redis.RedisError({ operation: "scan", reason: `Connection is closed (shard ${at.shard} on 127.0.0.1:7002)` }))
        }
        return Effect.succeed({
          cursor: at.shard + 1 < shards ? Layout.scanCursor.encode({ shards }, at.shard + 1, "0") : "0",
          members: names.filter((name) => shardOf(name) === at.shard).map((name, i) => ({ name, score: 1000 + i }))
        })
      }
    } satisfies Redis.Store
  })

const statsOn = (store: Redis.Store) =>
  Effect.runPromiseExit(Effect.provideService(Effect.flatMap(Locks.make({ prefix }), (locks) => locks.stats), Redis.RedisService, store))

describe("Locks.stats over shards, one down", () => {
  it("counts the shards that answer, marks the answer partial and names the shard that did not", async () => {
    const exit = await statsOn(await Effect.runPromise(sharded((shard) => shard === 2)))
    assert.isTrue(Exit.isSuccess(exit))
    if (!Exit.isSuccess(exit)) return
    assert.strictEqual(exit.value.indexSize, 9)
    assert.deepStrictEqual(exit.value.byPhase, { queue: 9, run: 0 })
    assert.strictEqual(exit.value.partial, true)
    assert.deepStrictEqual(exit.value.unanswered?.map((u) => u.shard), [2])
    assert.include(exit.value.unanswered?.[0]?.reason, "127.0.0.1:7002")
  })

  it("is whole, with no partial field, when every shard answers; fails when none does", async () => {
    const whole = await statsOn(await Effect.runPromise(sharded(() => false)))
    assert.isTrue(Exit.isSuccess(whole))
    if (Exit.isSuccess(whole)) {
      assert.strictEqual(whole.value.indexSize, 12)
      assert.notProperty(whole.value, "partial")
      assert.notProperty(whole.value, "unanswered")
    }
    const none = await statsOn(await Effect.runPromise(sharded(() => true)))
    assert.isTrue(Exit.isFailure(none))
  })
})
