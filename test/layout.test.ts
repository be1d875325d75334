/**
 * The layout is data (issue 35): where a prefix's keys live is recorded in Redis the first time it is used, every
 * store checks it, and a process configured otherwise is refused. Also the cluster layout's slot rule, by example,
 * with no cluster: a lock's queue and run phases, its index shard and its fencing counter share one hash slot.
 */
import { assert, describe, it } from "vitest"
import * as Layout from "../src/internal/layout.js"

// Digests as the library writes them (legacy MD5, modern SHA3-256) and a few odd names a user's lockPrefix allows.
const hexes = (count: number, width: number): Array<string> =>
  Array.from({ length: count }, (_, i) => {
    let hex = ""
    for (let n = i * 2654435761 + 1; hex.length < width; n = Math.imul(n ^ (n >>> 13), 0x5bd1e995) >>> 0) {
      hex += (n >>> 0).toString(16).padStart(8, "0")
    }
    return hex.slice(0, width)
  })

describe("the cluster layout keeps a lock in one slot (observation 9, needs no cluster)", () => {
  const shardCounts = [1, 2, 3, 4, 7, 24, 48, 100, 1024]
  const prefixes = ["uniquejobs", "app:jobs", "x"]
  const digests = [...hexes(200, 32), ...hexes(50, 64), "a", "LOCKED", "x:y"]

  it("queue lock, run lock, index shard and fencing counter share one hash slot, for every shard count", () => {
    let checked = 0
    for (const shards of shardCounts) {
      const layout = Layout.cluster(shards)
      for (const prefix of prefixes) {
        for (const hex of digests) {
          const queue = { prefix, name: `${prefix}:${hex}` }
          const run = { prefix, name: `${prefix}:${hex}:RUN` }
          const q = layout.keysOf(queue)
          const r = layout.keysOf(run)
          const slot = Layout.slotOf(q.locked)
          assert.strictEqual(Layout.slotOf(r.locked), slot, `${run.name} (shards ${shards}) is not in ${queue.name}'s slot`)
          assert.strictEqual(Layout.slotOf(q.index), slot, `${queue.name}'s index shard (shards ${shards})`)
          assert.strictEqual(Layout.slotOf(q.fence), slot, `${queue.name}'s fencing counter (shards ${shards})`)
          assert.strictEqual(layout.shardOf(run), layout.shardOf(queue), `${run.name}'s shard (shards ${shards})`)
          assert.strictEqual(q.index, layout.index(prefix, layout.shardOf(queue)))
          assert.strictEqual(r.locked, q.locked.replace(/:LOCKED$/, ":RUN:LOCKED"))
          checked++
        }
      }
    }
    assert.strictEqual(checked, shardCounts.length * prefixes.length * digests.length)
  })

  it("the phases of many digests spread over the shards (a run lock is not pinned to one shard)", () => {
    const layout = Layout.cluster(24)
    const shards = new Set(hexes(500, 32).map((hex) => layout.shardOf({ prefix: "p", name: `p:${hex}:RUN` })))
    assert.strictEqual(shards.size, 24)
  })
})
