/**
 * Redis Cluster (issue 22): the same lock lifecycles on a 1-master cluster and on a 3-master cluster (no replicas, so
 * only the lock work counts), and on one plain redis-server for reference; Redis time per node from `INFO
 * commandstats` (every command's usec, reset before each round). The load spreads when each of the 3 masters spends
 * a third of what the single master spends (the goal: at most 40%). This machine has 2 cores, so throughput cannot show
 * the spread: Redis time per node does.
 *
 *   npm run bench -- --cluster [--lifecycles=N] [--rounds=N] [--shards=N] [--pipelining] [--concurrency=N] [--phased]
 *     writes bench/results/cluster[-<shards>][-pipelined][-phased].md
 */
import { randomBytes } from "node:crypto"
import { writeFileSync } from "node:fs"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { Redis as IORedis } from "ioredis"
import * as Layout from "../dist/store/Layout.js"
import * as Redis from "../dist/Redis.js"
import * as RedisCluster from "../dist/testing/RedisCluster.js"
import * as RedisServer from "../dist/testing/RedisServer.js"
import { median, recorder, round } from "./harness.js"

const prefix = "clusterbench"

// One until_and_while_executing lifecycle: the queue lock, the handoff to the run lock, its release.
const lifecycle = (store: Redis.Store, name: string) => {
  const queue = { prefix, name }
  const run = { prefix, name: `${name}:RUN` }
  return store.lock(queue, { jid: "j", limit: 1, ttlMs: 60_000, leaseMs: 0, info: "", fenced: false }).pipe(
    Effect.andThen(store.handoff(queue, run, { jid: "j", limit: 1, ttlMs: 0, leaseMs: 30_000, info: "", fenced: true }, {
      keepOnConflict: false
    })),
    Effect.andThen(store.unlock(run, "j"))
  )
}

const usecOf = async (port: number): Promise<number> => {
  const node = new IORedis(port, "127.0.0.1")
  try {
    const text = await node.info("commandstats")
    let total = 0
    for (const match of text.matchAll(/cmdstat_[^:]+:calls=\d+,usec=(\d+)/g)) total += Number(match[1])
    return total
  } finally {
    node.disconnect()
  }
}

// The node's own CPU time (user + system, µs): unlike commandstats' usec, not inflated while the process waits for a
// core (three servers and the client share two here).
const cpuOf = async (port: number): Promise<number> => {
  const node = new IORedis(port, "127.0.0.1")
  try {
    const text = await node.info("cpu")
    const user = Number(/used_cpu_user:([\d.]+)/.exec(text)?.[1] ?? 0)
    const sys = Number(/used_cpu_sys:([\d.]+)/.exec(text)?.[1] ?? 0)
    return (user + sys) * 1e6
  } finally {
    node.disconnect()
  }
}

const reset = async (port: number) => {
  const node = new IORedis(port, "127.0.0.1")
  await node.config("RESETSTAT")
  node.disconnect()
}

interface Target {
  readonly name: string
  readonly ports: ReadonlyArray<number>
  readonly store: Redis.Store
  /** Which of `ports` holds a lock's keys (its shard's slot). */
  readonly ownerOf: (name: string) => number
}

// The master (an index into `ports`) of each slot, from CLUSTER SLOTS.
const ownersOf = async (ports: ReadonlyArray<number>): Promise<(slot: number) => number> => {
  const node = new IORedis(ports[0]!, "127.0.0.1")
  try {
    const ranges = (await node.call("CLUSTER", "SLOTS")) as Array<[number, number, [string, number]]>
    const owner = new Int16Array(16384)
    for (const [from, to, [, port]] of ranges) owner.fill(ports.indexOf(Number(port)), from, to + 1)
    return (slot) => owner[slot]!
  } finally {
    node.disconnect()
  }
}

// `lifecycles` over fresh digests from `concurrency` fibers; per node, the commands' usec and the process' CPU (µs)
// they cost. `phased`: the digests of one master after another, so only one server is busy at a time, as on the
// single master (on two cores, three busy servers and the client make every command dearer).
const roundOn = async (
  target: Target,
  lifecycles: number,
  concurrency: number,
  phased: boolean
): Promise<ReadonlyArray<readonly [number, number]>> => {
  await Promise.all(target.ports.map(reset))
  const before = await Promise.all(target.ports.map(cpuOf))
  const names = Array.from({ length: lifecycles }, () => `${prefix}:${randomBytes(16).toString("hex")}`)
  const phases = phased
    ? target.ports.map((_, node) => names.filter((name) => target.ownerOf(name) === node))
    : [names]
  for (const phase of phases) {
    await Effect.runPromise(Effect.forEach(phase, (name) => lifecycle(target.store, name), { concurrency, discard: true }))
  }
  const after = await Promise.all(target.ports.map(cpuOf))
  const usec = await Promise.all(target.ports.map(usecOf))
  return target.ports.map((_, i) => [usec[i]!, after[i]! - before[i]!] as const)
}

export const main = async (
  log: (line: string) => void,
  lifecycles: number,
  rounds: number,
  shards?: number,
  pipelining = false,
  concurrency = 64,
  phased = false
): Promise<void> => {
  const scope = Effect.runSync(Scope.make())
  const { lines, out } = recorder(log)
  try {
    const start = (masters: number) =>
      Effect.runPromise(Scope.provide(Effect.gen(function*() {
        const cluster = yield* RedisCluster.start({ masters, replicas: 0 })
        const store = yield* Redis.makeCluster({
          nodes: cluster.startupNodes.map((n) => `${n.host}:${n.port}`),
          enableAutoPipelining: pipelining,
          ...(shards === undefined ? {} : { shards })
        })
        const ports = yield* cluster.masters
        const owners = yield* Effect.promise(() => ownersOf(ports))
        const layout = Layout.cluster(shards ?? Layout.defaultShards)
        const ownerOf = (name: string) => owners(Layout.slotOf(layout.keysOf({ prefix, name }).locked))
        return { name: `${masters}-master cluster`, ports, store, ownerOf }
      }), scope))
    const one = await start(1)
    const three = await start(3)
    const plain = await Effect.runPromise(Scope.provide(Effect.gen(function*() {
      const server = yield* RedisServer.start
      const store = yield* Redis.make({ url: server.url, enableAutoPipelining: pipelining })
      return { name: "one redis-server (standalone layout)", ports: [Number(new URL(server.url).port)], store, ownerOf: () => 0 }
    }), scope))
    const targets: ReadonlyArray<Target> = [one, three, plain]
    // One untimed round each, then alternating rounds.
    for (const target of targets) await roundOn(target, Math.min(lifecycles, 2_000), concurrency, phased)
    const samples = new Map<string, Array<ReadonlyArray<readonly [number, number]>>>(targets.map((t) => [t.name, []]))
    for (let r = 0; r < rounds; r++) {
      for (const target of targets) samples.get(target.name)!.push(await roundOn(target, lifecycles, concurrency, phased))
    }
    const perNode = (target: Target, which: 0 | 1) =>
      target.ports.map((_, node) => median(samples.get(target.name)!.map((sample) => sample[node]![which])))
    const single = perNode(one, 0)[0]!
    const singleCpu = perNode(one, 1)[0]!
    const spread = perNode(three, 0)
    const spreadCpu = perNode(three, 1)
    const worst = Math.max(...spread)
    const worstCpu = Math.max(...spreadCpu)
    out("# Redis Cluster: where the Redis time goes (issue 22)")
    out("")
    out("`npm run bench -- --cluster`")
    out("")
    out(
      `Run ${new Date().toISOString()}: ${lifecycles.toLocaleString("en")} until_and_while_executing lifecycles per round ` +
        `(queue lock, handoff, release: 3 script calls each) on fresh digests from ${concurrency} fibers, ${shards ?? Layout.defaultShards} shards, ` +
        `auto-pipelining ${pipelining ? "on" : "off"}, ${
          phased ? "each master's digests in turn (one server busy at a time)" : "every master at once"
        }, ${rounds} alternating ` +
        "rounds after one untimed round each (medians); Redis time is every command's usec in `INFO commandstats` of each " +
        "master, reset before each round. No replicas."
    )
    out("")
    out("| where | node | commands' time per round | per lifecycle | share | process CPU per round | share |")
    out("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for (const target of targets) {
      const cpu = perNode(target, 1)
      perNode(target, 0).forEach((usec, node) => {
        out(
          `| ${target.name} | ${target.ports[node]} | ${round(usec / 1000, 1)} ms | ${round(usec / lifecycles, 2)} µs | ${
            round((100 * usec) / single, 1)
          }% | ${round(cpu[node]! / 1000, 1)} ms | ${round((100 * cpu[node]!) / singleCpu, 1)}% |`
        )
      })
    }
    out("")
    out("Shares are of the single master's, for the same work.")
    out("")
    out(
      `Verdict on the process CPU: the busiest of the 3 masters spends ${round((100 * worstCpu) / singleCpu, 1)}% of the ` +
        `single master's (goal: at most 40%): ${worstCpu <= 0.4 * singleCpu ? "**met**" : "**missed**"}; the three ` +
        `together ${round((100 * spreadCpu.reduce((a, b) => a + b, 0)) / singleCpu, 1)}%. On the commands' time: ` +
        `${round((100 * worst) / single, 1)}% (${worst <= 0.4 * single ? "met" : "missed"}), together ${
          round((100 * spread.reduce((a, b) => a + b, 0)) / single, 1)
        }%. With three servers and the client on two cores, a command's wall time includes the waits for a core.`
    )
    const variant = `${shards === undefined ? "" : `-${shards}`}${pipelining ? "-pipelined" : ""}${phased ? "-phased" : ""}`
    writeFileSync(new URL(`./results/cluster${variant}.md`, import.meta.url), `${lines.join("\n")}\n`)
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
