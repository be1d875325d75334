/**
 * Issue 18, item 2: an operator's unlock or delete of a running job's run lock never lets a second copy start beside
 * the first. The probe: a `while_executing` job runs (its own store and lease keeper) while a second worker (another
 * connection, another keeper) retries the same job every 50 ms; an operator unlocks it, deletes it, or deletes by
 * pattern through the admin API. What is checked is the order of events, never how long anything took: the first copy
 * ends (`LockLost`, told at its next renewal) before the second starts, so at most one copy runs at any time.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Locks from "../src/Locks.js"
import { inTurn, isLockLost, probe } from "./support/probe.js"
import * as RedisTest from "./support/redis.js"

describe("an operator's unlock or delete of a running job's lock", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    const cases: ReadonlyArray<readonly [string, (locks: Locks.Locks["Service"], digest: string, jid: string) => Effect.Effect<
      ReadonlyArray<{ readonly jid: string; readonly leaseUntil: number }>,
      unknown
    >]> = [
      ["Locks.unlock", (locks, digest, jid) => Effect.map(locks.unlock(digest, jid), (r) => r.revoked)],
      ["Locks.delete", (locks, digest) => Effect.map(locks.delete(digest), (r) => r.revoked)],
      ["Locks.deleteByPattern", (locks) =>
        Effect.gen(function*() {
          const revoked: Array<{ readonly jid: string; readonly leaseUntil: number }> = []
          let cursor = "0"
          do {
            const page = yield* locks.deleteByPattern(`${locks.prefix}:*`, { cursor })
            revoked.push(...page.revoked)
            cursor = page.cursor
          } while (cursor !== "0")
          return revoked
        })]
    ]
    for (const [name, operate] of cases) {
      it.effect(`${name}: the holder is revoked, ends LockLost, and only then can the second copy start`, () =>
        Effect.gen(function*() {
          const run = yield* probe(name.replace(/\W/g, "-"), (digest, jid, prefix) =>
            Effect.flatMap(Locks.make({ prefix }), (locks) => operate(locks, digest, jid)))
          assert.deepStrictEqual(run.events, inTurn)
          assert.strictEqual(run.most, 1)
          assert.isTrue(isLockLost(run.firstExit), String(run.firstExit))
          assert.deepStrictEqual(run.answer.map((r) => r.jid), ["jid-1"])
          // Nothing is left behind once both copies are done.
          assert.deepStrictEqual(yield* RedisTest.keysWithoutTtl(run.prefix), [])
        }), { timeout: 60_000 })
    }
  })
})
