/**
 * Issue 35, observation 2, on a private Redis Cluster (3 masters, 1 replica each): a master SIGKILLed while work runs.
 * A lock store built before the kill keeps answering its calls through the failover, within its timeout (ioredis'
 * cluster retries outlast the failover); and under a UniqueQueue + BullMQ load (prefix `{bull}`, concurrency 10), no
 * job fails unrun: those caught at their handoff or run lock go back to the queue and run once the cluster answers.
 * The master killed is one that does not hold BullMQ's `{bull}` slot: what is tested is the lock store's failover,
 * not BullMQ's own. Each test has a cluster of its own. Counts only; durations are printed, never asserted.
 */
import { Queue, type Job as BullJob, Worker } from "bullmq"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { Cluster as IOCluster, Redis as IORedis } from "ioredis"
import { afterEach, assert, beforeEach, describe, it } from "vitest"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import * as Layout from "../src/store/Layout.js"
import type * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisCluster from "../src/testing/RedisCluster.js"

let scope: Scope.Closeable
let cluster: RedisCluster.Cluster
let nodes: ReadonlyArray<string>
beforeEach(async () => {
  scope = Effect.runSync(Scope.make())
  cluster = await Effect.runPromise(Scope.provide(RedisCluster.start(), scope))
  nodes = cluster.startupNodes.map((node) => `${node.host}:${node.port}`)
})
afterEach(() => Effect.runPromise(Scope.close(scope, Exit.void)))

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const until = async (done: () => boolean | Promise<boolean>, what: string, limitMs = 240_000) => {
  const deadline = Date.now() + limitMs
  while (Date.now() < deadline) {
    if (await done()) return
    await sleep(50)
  }
  throw new Error(`gave up waiting for ${what}`)
}

/** A client of the test's own, for reading the cluster. */
const reader = async () => {
  const client = new IOCluster([...cluster.startupNodes], { lazyConnect: true })
  client.on("error", () => {})
  await client.connect()
  return client
}

/**
 * Waits until every replica has synced with its master: a replica that has not (a cluster just made) is too stale to
 * take over, and the failover would never come.
 */
const synced = () =>
  until(async () => {
    const infos = await Promise.all(cluster.nodes.map(async (node) => {
      const client = new IORedis(node.port, "127.0.0.1", { lazyConnect: true })
      client.on("error", () => {})
      try {
        await client.connect()
        return await client.info("replication")
      } catch {
        return ""
      } finally {
        client.disconnect()
      }
    }))
    return infos.every((info) => info.includes("role:master") || info.includes("master_link_status:up"))
  }, "every replica in sync")

/** A master that does not own the slot of `{bull}`: BullMQ's keys stay on a live master. */
const victimBesides = async (tag: string) => {
  const client = await reader()
  try {
    const slot = Number(await client.cluster("KEYSLOT", tag))
    const slots = (await client.cluster("SLOTS")) as unknown as ReadonlyArray<[number, number, [string, number]]>
    const owner = slots.find(([from, to]) => slot >= from && slot <= to)![2][1]
    const masters = await Effect.runPromise(cluster.masters)
    return cluster.nodes.find((node) => node.port !== owner && masters.includes(node.port))!
  } finally {
    client.disconnect()
  }
}

/** Every key matching `pattern` that has no TTL, from every master, but the documented permanent ones (index, fence, layout record). */
const keysWithoutTtl = async (pattern: string) => {
  const client = await reader()
  try {
    const keys = (await Promise.all(client.nodes("master").map((node) => node.keys(pattern)))).flat()
    const ttls = await Promise.all(keys.map((key) => client.pttl(key)))
    return keys.filter((key, i) => ttls[i] === -1 && !/:(digests|fence|layout)$/.test(key))
  } finally {
    client.disconnect()
  }
}

describe("a cluster store built before a master is killed", () => {
  it("answers every lock call through the failover, within its timeout (no 'Too many Cluster redirections')", async () => {
    const prefix = `ride${process.pid}`
    // One lock name per shard: every master, the one killed included, is asked in every round.
    const layout = Layout.cluster()
    const byShard = new Map<number, string>()
    for (let i = 0; byShard.size < Layout.defaultShards; i++) {
      const name = `${prefix}:n${i}`
      const shard = layout.shardOf({ prefix, name })
      if (!byShard.has(shard)) byShard.set(shard, name)
    }
    const names = [...byShard.values()]
    const outcome = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      // A timeout longer than a failover on a busy machine: the promise is "within the timeout", whatever it is.
      const store = yield* Redis.makeCluster({ nodes, timeout: "30 seconds" })
      const request = { jid: "j", limit: 1, ttlMs: 60_000, leaseMs: 0, info: "", fenced: false }
      const failures: Array<string> = []
      let calls = 0
      let longest = 0
      const round = Effect.forEach(names, (name) => {
        const started = Date.now()
        return Effect.flatMap(store.lock({ prefix, name }, request), (taken) =>
          Effect.map(store.unlock({ prefix, name }, "j"), (released) => {
            calls++
            longest = Math.max(longest, Date.now() - started)
            if (taken._tag !== "Acquired" || !released) failures.push(`${name}: ${taken._tag}/${released}`)
          })).pipe(Effect.catch((error) => Effect.sync(() => failures.push(`${name}: ${error.message}`))))
      }, { concurrency: "unbounded", discard: true })
      for (let i = 0; i < 5; i++) yield* round
      yield* Effect.promise(synced)
      const victim = yield* Effect.promise(() => victimBesides("{bull}"))
      yield* victim.kill
      // Rounds go on until the cluster is ready again, and then 5 more: the whole failover is asked through.
      let ready = false
      const readied = Effect.runPromise(cluster.ready).then(() => {
        ready = true
      })
      while (!ready) yield* Effect.andThen(round, Effect.promise(() => sleep(50)))
      yield* Effect.promise(() => readied)
      for (let i = 0; i < 5; i++) yield* round
      return { failures, calls, longest }
    })))
    process.stdout.write(`cluster store through a failover: ${outcome.calls} lock+unlock pairs, longest ${outcome.longest} ms\n`)
    assert.deepStrictEqual(outcome.failures.slice(0, 10), [], `${outcome.failures.length} calls failed`)
  }, 240_000)
})

interface Tally {
  /** The jobs whose fn started, by `n`. */
  readonly started: Set<number>
  readonly performed: Map<number, number>
  readonly handed: Map<number, number>
  overlaps: number
}

const bump = (map: Map<number, number>, n: number) => map.set(n, (map.get(n) ?? 0) + 1)

describe("UniqueQueue + BullMQ on the cluster, a master killed mid-run", () => {
  it("until_and_while_executing and while_executing, 300 jobs each at concurrency 10: 0 failed unrun, each performed, 0 at once, 0 locks without an end", async () => {
    // BullMQ's own connection rides the failover out too (its calls wait; a CLUSTERDOWN covers every slot while a
    // master is failing): as BullMQ on a cluster should be configured.
    const connection = new IOCluster([...cluster.startupNodes], {
      redisOptions: { maxRetriesPerRequest: null },
      maxRedirections: 1000
    })
    connection.on("error", () => {})
    const jobs = 300
    // Once 30 jobs of each lane have performed, the jobs then running wait for the kill: the jobs taken next meet
    // the failover at their handoff or run lock, whatever the machine's speed.
    let killed!: () => void
    const afterKill = new Promise<void>((resolve) => (killed = resolve))
    const lanes: ReadonlyArray<[string, LockOptions.Options]> = [
      ["handoff", { lock: "until_and_while_executing", lockLease: "20 seconds" }],
      ["runlock", { lock: "while_executing", lockLease: "20 seconds" }]
    ]
    const running = lanes.map(([label, options]) => {
      const queue = new Queue(`${label}-${process.pid}`, { connection, prefix: "{bull}" })
      const lockPrefix = `${label}${process.pid}`
      const unique = UniqueQueue.make<{ readonly n: number }>(queue, {
        ...options,
        lockPrefix,
        // Shorter than any failover (a master is failed only after the 1 s node timeout): the lock calls caught in
        // it fail, and the put-back is what keeps their jobs.
        redis: { nodes, timeout: "1 second" },
        defaults: {},
        history: false
      })
      const tally: Tally = { started: new Set(), performed: new Map(), handed: new Map(), overlaps: 0 }
      const active = new Set<number>()
      // A fn of one parameter: while_executing runs on the hot path, until_and_while_executing on a fiber.
      const processor = unique.processor(async (job: BullJob<{ readonly n: number }>) => {
        const n = job.data.n
        tally.started.add(n)
        if (active.has(n)) tally.overlaps++
        active.add(n)
        if (tally.performed.size >= 30) await afterKill
        await sleep(20)
        active.delete(n)
        bump(tally.performed, n)
        return "done"
      })
      return { label, queue, unique, lockPrefix, tally, processor }
    })
    const workers: Array<Worker> = []
    try {
      for (const lane of running) {
        for (let n = 0; n < jobs; n++) {
          const added = await lane.unique.add("Work", { n }, { attempts: 1 })
          assert.strictEqual(added._tag, "Enqueued")
        }
      }
      await synced()
      const victim = await victimBesides("{bull}")
      for (const lane of running) {
        const worker = new Worker(lane.queue.name, (job: BullJob<{ readonly n: number }>, token?: string) => {
          bump(lane.tally.handed, job.data.n)
          return lane.processor(job, token)
        }, { connection, prefix: "{bull}", concurrency: 10 })
        worker.on("error", () => {})
        workers.push(worker)
      }
      await until(() => running.every((lane) => lane.tally.performed.size >= 30), "the run started")
      const killedAt = Date.now()
      await Effect.runPromise(victim.kill)
      killed()
      await Effect.runPromise(cluster.ready)
      const failoverMs = Date.now() - killedAt
      for (const lane of running) {
        await until(async () => {
          const c = await lane.queue.getJobCounts("completed", "failed")
          return (c.completed ?? 0) + (c.failed ?? 0) === jobs
        }, `${lane.label}: every job ended`)
      }
      for (const lane of running) {
        const failed = await lane.queue.getFailed()
        const putBack = [...lane.tally.handed.values()].filter((times) => times > 1).length
        const twice = [...lane.tally.performed].filter(([, times]) => times > 1)
        process.stdout.write(
          `cluster ${lane.label}: failover ${failoverMs} ms, ${failed.length} failed, ${putBack} handed again, ` +
            `${twice.length} performed twice (never at once)${
              failed.length === 0 ? "" : `; failed: ${failed.slice(0, 3).map((job) => job.failedReason).join(" | ")}`
            }\n`
        )
        // A job whose fn started may fail for its own reasons (a lease lost to a failover longer than it): the promise
        // is about the jobs that never started.
        const unrun = failed.filter((job) => !lane.tally.started.has(job.data.n))
        assert.deepStrictEqual(
          unrun.slice(0, 5).map((job) => `${job.id}: ${job.failedReason}`),
          [],
          `${lane.label}: ${unrun.length} jobs failed unrun`
        )
        assert.strictEqual(lane.tally.overlaps, 0, `${lane.label}: no job ran twice at once`)
        assert.strictEqual(lane.tally.performed.size, jobs, `${lane.label}: every job performed`)
        assert.isAbove(putBack, 0, `${lane.label}: the failover caught jobs at their lock step; they were handed again`)
        assert.deepStrictEqual(await keysWithoutTtl(`${lane.lockPrefix}:*`), [], `${lane.label}: no lock without an end`)
      }
    } finally {
      killed()
      await Promise.all(workers.map((worker) => worker.close(true)))
      await Promise.all(running.map((lane) => lane.unique.close({ timeout: 10_000 }).catch(() => undefined)))
      connection.disconnect()
    }
  }, 300_000)
})
