/**
 * Where the Node CPU goes (issue 20): `node:inspector` CPU profiles of three fixed workloads, on the built library
 * (`dist/`, what users install) of this checkout or of another one, self time grouped by where it runs.
 *
 *   add        `UniqueQueue.add` of 200 argument lists, 20,000 adds from 32 async loops after one warm-up pass, so
 *              every timed add is a duplicate (the lock call refuses it): BullMQ's deduplication workload
 *   executed   a BullMQ `Worker` at concurrency 32 through `unique.processor` (`until_executed`), 6,000 no-op jobs
 *   while      the same with `while_executing`
 *
 *   npm run bench -- --profile [--root=<checkout>] [--out=<file.md>]
 *
 * `--root` runs another checkout's `dist/` (built there) against this bench: the before of a change. Writes the
 * tables to `--out` (default bench/results/profile.md). Only ratios and shares mean anything on a shared 2-core VM.
 */
import { writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"
import * as os from "node:os"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { Queue, Worker } from "bullmq"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import type * as UniqueQueueModule from "../dist/adapters/UniqueQueue.js"
import * as RedisServer from "../dist/testing/RedisServer.js"
import { round } from "./harness.js"

interface ProfileNode {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string }
}

interface Profile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

/**
 * The groups of `results/foundation-profile.md`, by where a function runs (CPU self time here, allocations in
 * `alloc.ts`).
 */
export const groupOf = (node: { readonly callFrame: ProfileNode["callFrame"] }): string => {
  const { functionName, url } = node.callFrame
  if (functionName === "(garbage collector)") return "garbage collection"
  if (functionName === "(idle)") return "idle (waiting for Redis)"
  if (functionName === "writeUtf8String" || functionName === "writeBuffer" || functionName === "writev") {
    return "socket writes (the write syscall)"
  }
  if (/node:(net|internal\/stream_base_commons|internal\/streams)/.test(url)) return "socket writes and reads (node:net)"
  if (url.includes("node_modules/effect/")) return "Effect runtime (fibers, fiber refs, scheduler)"
  if (url.includes("node_modules/ioredis/") || url.includes("node_modules/redis-parser/")) {
    return "ioredis (commands, RESP encode/decode)"
  }
  if (url.includes("node_modules/bullmq/") || url.includes("node_modules/msgpackr/")) return "BullMQ"
  if (url.includes("node:internal/crypto") || url.endsWith("/Digest.js")) return "digest (canonical JSON + MD5)"
  const ours = /\/dist\/(.+\.js)$/.exec(url)
  if (ours !== null) return `this library: ${ours[1]}`
  return "other (node internals, timers, promises)"
}

const grouped = (profile: Profile): Array<readonly [string, number]> => {
  const byNode = new Map<number, number>()
  profile.samples.forEach((id, i) => byNode.set(id, (byNode.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)))
  const groups = new Map<string, number>()
  let total = 0
  for (const node of profile.nodes) {
    const t = byNode.get(node.id) ?? 0
    total += t
    const group = groupOf(node)
    groups.set(group, (groups.get(group) ?? 0) + t)
  }
  return Array.from(groups, ([group, t]) => [group, t / total] as const).sort((a, b) => b[1] - a[1])
}

interface Measured {
  readonly name: string
  readonly perOp: number
  readonly rate: number
  readonly groups: Array<readonly [string, number]>
}

const profiled = async (name: string, ops: number, work: () => Promise<void>): Promise<Measured> => {
  const session = new Session()
  session.connect()
  await session.post("Profiler.enable")
  await session.post("Profiler.setSamplingInterval", { interval: 100 })
  await session.post("Profiler.start")
  const cpu = process.cpuUsage()
  const t0 = performance.now()
  await work()
  const ms = performance.now() - t0
  const used = process.cpuUsage(cpu)
  const { profile } = await session.post("Profiler.stop")
  session.disconnect()
  return {
    name,
    perOp: (used.user + used.system) / ops,
    rate: ops / (ms / 1000),
    groups: grouped(profile as unknown as Profile)
  }
}

export const main = async (log: (line: string) => void, root: string, out: string): Promise<void> => {
  const library = pathToFileURL(path.resolve(root, "dist/adapters/UniqueQueue.js")).href
  const UniqueQueue = (await import(library)) as typeof UniqueQueueModule
  const scope = Effect.runSync(Scope.make())
  try {
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const connection = { host: "127.0.0.1", port: server.port }
    const results: Array<Measured> = []
    let n = 0

    // add: every timed add is a duplicate, as 90% of the --bullmq workload's are.
    {
      const queue = new Queue(`profile-add-${++n}`, { connection })
      const unique = UniqueQueue.make<{ readonly k: number }>(queue, { lock: "until_executed", onConflict: "log" })
      const drive = async (adds: number) => {
        let next = 0
        await Promise.all(Array.from({ length: 32 }, async () => {
          while (next < adds) await unique.add("rebuild", { k: next++ % 200 })
        }))
      }
      await drive(2_000)
      results.push(await profiled("`UniqueQueue.add`, until_executed, c=32, every add a duplicate", 20_000, () => drive(20_000)))
      await unique.close()
    }

    for (const lock of ["until_executed", "while_executing"] as const) {
      const jobs = 6_000
      const queue = new Queue(`profile-${lock}-${++n}`, { connection, defaultJobOptions: { removeOnComplete: true } })
      const unique = UniqueQueue.make<{ readonly k: number }>(queue, {
        lock,
        ...(lock === "while_executing" ? { onConflict: { server: "reschedule" as const } } : {})
      })
      let next = 0
      await Promise.all(Array.from({ length: 32 }, async () => {
        while (next < jobs) await unique.add("rebuild", { k: next++ })
      }))
      let completed = 0
      let finish: () => void = () => undefined
      const done = new Promise<void>((resolve) => (finish = resolve))
      const worker = new Worker(queue.name, unique.processor(async () => undefined), {
        connection,
        concurrency: 32,
        autorun: false
      })
      worker.on("completed", () => {
        if (++completed === jobs) finish()
      })
      await worker.waitUntilReady()
      results.push(
        await profiled(`BullMQ Worker through \`unique.processor\`, ${lock}, c=32, no-op job`, jobs, async () => {
          void worker.run()
          await done
        })
      )
      await worker.close()
      await unique.close()
    }

    const lines = [
      `Run ${new Date().toISOString()} of \`${path.resolve(root)}/dist\`: ${os.cpus().length} × ${
        os.cpus()[0]?.model ?? "cpu"
      }, Node ${process.version}, load before ${os.loadavg().map((x) => round(x, 2)).join(" / ")}.`,
      "",
      ...results.flatMap((r) => [
        `## ${r.name}`,
        "",
        `${round(r.perOp, 1)} µs of Node CPU per operation, ${Math.round(r.rate).toLocaleString("en-US")} per second ` +
        "(sampled every 100 µs; the profiler's own cost included).",
        "",
        "| where | share of Node CPU |",
        "| --- | ---: |",
        ...r.groups.filter(([, share]) => share >= 0.001).map(([group, share]) => `| ${group} | ${(share * 100).toFixed(1)}% |`),
        ""
      ])
    ]
    for (const line of lines) log(line)
    writeFileSync(out, `# Where the Node CPU goes (issue 20)\n\n${lines.join("\n")}`)
    log(`wrote ${out}`)
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
