/**
 * What the Worker's per-job path allocates (issue 50): a BullMQ `Worker` at concurrency 32 with a no-op job, bare and
 * through our processor (`until_executed`, `while_executing`) on both faces, the rounds of `bench/worker.ts` (jobs
 * added beforehand, untimed, the same checks). After one warm-up round of each workload, three windows of the same
 * number of jobs each, every one a round of its own so that no instrument weighs on another's figures:
 *
 *   clean      Node CPU per job (`process.cpuUsage`), jobs/s, and the Effect fibers created: Effect 4 numbers its
 *              fibers from one process-wide counter (`fiberIdStore` in effect/src/internal/effect.ts, one id per
 *              `FiberImpl`), so the id of a fiber made after the window less the id of one made before, less one, is
 *              exactly the number of fibers made in between
 *   heap       bytes allocated: exactly, from the heap's used size before and after every garbage collection of the
 *              window (`v8.GCProfiler`); and where, from V8's sampling heap profiler (`HeapProfiler.startSampling`
 *              through `node:inspector`, one sample every 1 KiB on average, collected objects kept), grouped as
 *              `bench/profile.ts` groups CPU self time, and the 15 functions that allocate most
 *   promises   promises created (`node:async_hooks` `init` of type PROMISE, enabled for the window only: the hook
 *              makes every promise slower, so this window's Node CPU is not the clean one's), and the other async
 *              resources (timers, ticks, sockets' requests)
 *
 * Everything is per job, over the whole process while the Worker runs (BullMQ's own work included): the bare Worker
 * is the baseline, and ours less it is what our processor adds.
 *
 *   npm run bench -- --alloc [--root=<checkout>] [--out=<file.md>] [--jobs=6000]
 *
 * `--root` runs another checkout's `dist/` (built there) against this bench: the before of a change. Writes to `--out`
 * (default bench/results/alloc.md).
 */
import { createHook } from "node:async_hooks"
import { writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"
import * as os from "node:os"
import * as v8 from "node:v8"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as RedisServer from "../dist/testing/RedisServer.js"
import { bullmqVersion } from "./bullmq.js"
import { Probe, revision, round, withCpu } from "./harness.js"
import { groupOf } from "./profile.js"
import * as Worker from "./worker.js"

const concurrency = 32
const warmupJobs = 2_000
// Bytes between two samples on average: small enough for a per-job path's few hundred bytes a function to show.
const samplingInterval = 1_024
const topFunctions = 15

interface CallFrame {
  readonly functionName: string
  readonly url: string
  readonly lineNumber: number
}

interface HeapNode {
  readonly callFrame: CallFrame
  readonly selfSize: number
  readonly children: ReadonlyArray<HeapNode>
}

interface GcStatistics {
  readonly beforeGC: { readonly heapStatistics: { readonly usedHeapSize: number } }
  readonly afterGC: { readonly heapStatistics: { readonly usedHeapSize: number } }
}

/** A function and the bytes it allocates (per job once divided). */
interface Allocating {
  readonly name: string
  readonly file: string
  readonly bytes: number
}

/** What one workload's three windows measured, per job. */
interface Measured {
  readonly contender: Worker.Contender
  readonly jobsPerSecond: number
  readonly nodeCpuUs: number
  readonly fibers: number
  /** From the heap's used size around every collection: every byte allocated. */
  readonly bytes: number
  /** The sampled profile's estimate of the same, and where it goes. */
  readonly sampledBytes: number
  readonly groups: ReadonlyArray<readonly [string, number]>
  readonly functions: ReadonlyArray<Allocating>
  readonly promises: number
  readonly otherAsync: number
  /** Node CPU per job in the heap and promise windows: what the instruments cost. */
  readonly heapCpuUs: number
  readonly hookCpuUs: number
}

// The id of a fiber made now: Effect 4's fiber ids come from one counter, so the difference of two marks counts the
// fibers made between them (plus the second mark's own).
const fiberMark = (): number => Effect.runSync(Effect.fiberId)

// A function's file as a reader finds it: from node_modules/ on for a dependency, from dist/ or bench/ on for ours.
const fileOf = (url: string, root: string): string => {
  const file = url.replace(/^file:\/\//, "")
  const dependency = file.lastIndexOf("node_modules/")
  if (dependency >= 0) return file.slice(dependency + "node_modules/".length)
  if (file.startsWith(root)) return file.slice(root.length).replace(/^\//, "")
  const bench = file.lastIndexOf("/bench/")
  return bench >= 0 ? file.slice(bench + 1) : file || "(native)"
}

const whereOf = (node: HeapNode): string => node.callFrame.url.includes("/bench/") ? "the bench itself (bench/)" : groupOf(node)

/**
 * Bytes by group and by function (name, file and line), over the sampled profile's tree. A builtin (`then`, `sort`,
 * `join`: no file) allocates for its caller: its bytes go to the group of the nearest function with a file, and the
 * function is shown with that caller.
 */
const attribute = (head: HeapNode, root: string) => {
  const groups = new Map<string, number>()
  const functions = new Map<string, Allocating>()
  let total = 0
  const visit = (node: HeapNode, caller: HeapNode | undefined) => {
    const { functionName, url } = node.callFrame
    const at = (frame: CallFrame) => `${fileOf(frame.url, root)}:${frame.lineNumber + 1}`
    if (node.selfSize > 0) {
      total += node.selfSize
      const group = whereOf(url === "" && caller !== undefined ? caller : node)
      groups.set(group, (groups.get(group) ?? 0) + node.selfSize)
      const name = functionName || "(anonymous)"
      const file = url !== ""
        ? at(node.callFrame)
        : caller === undefined
        ? "(native)"
        : `(native) from \`${caller.callFrame.functionName || "(anonymous)"}\` ${at(caller.callFrame)}`
      const key = `${name} ${file}`
      functions.set(key, { name, file, bytes: (functions.get(key)?.bytes ?? 0) + node.selfSize })
    }
    for (const child of node.children) visit(child, url === "" ? caller : node)
  }
  visit(head, undefined)
  return {
    total,
    groups: Array.from(groups).sort((a, b) => b[1] - a[1]),
    functions: Array.from(functions.values()).sort((a, b) => b.bytes - a.bytes).slice(0, topFunctions)
  }
}

/** Every byte allocated while `f` ran: the used heap's growth between collections, summed. */
const allocatedWhile = async (f: () => Promise<void>): Promise<number> => {
  const profiler = new v8.GCProfiler()
  const start = v8.getHeapStatistics().used_heap_size
  profiler.start()
  await f()
  const end = v8.getHeapStatistics().used_heap_size
  const statistics = (profiler.stop()?.statistics ?? []) as unknown as ReadonlyArray<GcStatistics>
  let bytes = 0
  let last = start
  for (const gc of statistics) {
    bytes += gc.beforeGC.heapStatistics.usedHeapSize - last
    last = gc.afterGC.heapStatistics.usedHeapSize
  }
  return bytes + end - last
}

export const main = async (log: (line: string) => void, root: string, out: string, jobs: number): Promise<void> => {
  const lib = await Worker.load(root)
  const loadAverage = os.loadavg().map((x) => round(x, 2))
  const started = performance.now()
  const scope = Effect.runSync(Scope.make())
  const failures: Array<string> = []
  try {
    // Always a private server: never a shared Redis (REDIS_URL or port 6379), whose other clients would skew it.
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const probe = await Probe.connect(server.url)
    const env: Worker.Env = {
      lib,
      url: server.url,
      port: server.port,
      probe,
      log,
      fail: (where, reason) => {
        failures.push(`${where}: ${reason}`)
        log(`  CHECK FAILED: ${where}: ${reason}`)
      }
    }
    const workloads = Worker.contenders
    log(`Allocation profiles of ${lib.root}/dist: a BullMQ Worker at c=${concurrency}, ${jobs} no-op jobs a window`)
    for (const contender of workloads) {
      await Worker.runRound(env, contender, concurrency, warmupJobs, `${contender.id} (warm-up)`, (timed) => timed())
    }

    const results: Array<Measured> = []
    for (const contender of workloads) {
      const where = (window: string) => `${contender.id} (${window})`
      const clean = await Worker.runRound(env, contender, concurrency, jobs, where("clean"), async (timed) => {
        const before = fiberMark()
        const { cpuUs, value: ms } = await withCpu(async () => {
          const t0 = performance.now()
          await timed()
          return performance.now() - t0
        })
        return { cpuUs, ms, fibers: fiberMark() - before - 1 }
      })
      const heap = await Worker.runRound(env, contender, concurrency, jobs, where("heap"), async (timed) => {
        const session = new Session()
        session.connect()
        await session.post("HeapProfiler.enable")
        await session.post("HeapProfiler.startSampling", {
          samplingInterval,
          includeObjectsCollectedByMajorGC: true,
          includeObjectsCollectedByMinorGC: true
        })
        try {
          let cpuUs = 0
          const bytes = await allocatedWhile(async () => {
            cpuUs = (await withCpu(timed)).cpuUs
          })
          const { profile } = await session.post("HeapProfiler.stopSampling")
          return { bytes, cpuUs, sampled: attribute(profile.head as unknown as HeapNode, lib.root) }
        } finally {
          session.disconnect()
        }
      })
      const hooked = await Worker.runRound(env, contender, concurrency, jobs, where("promises"), async (timed) => {
        let promises = 0
        let other = 0
        const hook = createHook({
          init: (_id, type) => {
            if (type === "PROMISE") promises++
            else other++
          }
        })
        hook.enable()
        try {
          const { cpuUs } = await withCpu(timed)
          return { promises, other, cpuUs }
        } finally {
          hook.disable()
        }
      })
      const measured: Measured = {
        contender,
        jobsPerSecond: jobs / (clean.ms / 1000),
        nodeCpuUs: clean.cpuUs / jobs,
        fibers: clean.fibers / jobs,
        bytes: heap.bytes / jobs,
        sampledBytes: heap.sampled.total / jobs,
        groups: heap.sampled.groups.map(([group, bytes]) => [group, bytes / jobs] as const),
        functions: heap.sampled.functions.map((f) => ({ ...f, bytes: f.bytes / jobs })),
        promises: hooked.promises / jobs,
        otherAsync: hooked.other / jobs,
        heapCpuUs: heap.cpuUs / jobs,
        hookCpuUs: hooked.cpuUs / jobs
      }
      results.push(measured)
      log(
        `  ${contender.id.padEnd(22)} ${measured.nodeCpuUs.toFixed(1)} µs CPU, ${Math.round(measured.bytes)} B, ` +
          `${measured.promises.toFixed(1)} promises, ${measured.fibers.toFixed(2)} fibers per job`
      )
    }
    const redisVersion = (await probe.info("server")).redis_version ?? "unknown"
    await probe.close()

    const lines = report(results, {
      root: lib.root,
      jobs,
      loadAverage,
      seconds: Math.round((performance.now() - started) / 1000),
      redisVersion
    })
    const checks = failures.length === 0
      ? `Checks: every round (warm-up and windows) completed all its jobs, each performed once, none failed or left in ` +
        "the queue, and no lock key left under its prefix (`bench/worker.ts`'s checks)."
      : `**CHECKS FAILED** (${failures.length}):\n\n${failures.map((f) => `- ${f}`).join("\n")}`
    const text = `# Allocations per job of the Worker's path (issue 50)\n\n${[...lines, "", checks].join("\n")}\n`
    writeFileSync(out, text)
    log("")
    for (const line of lines) log(line)
    log(`\nwrote ${out}`)
    if (failures.length > 0) {
      log(`\nCHECKS FAILED: ${failures.length} round(s) (see above)`)
      process.exitCode = 1
    }
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

const report = (
  results: ReadonlyArray<Measured>,
  run: {
    readonly root: string
    readonly jobs: number
    readonly loadAverage: ReadonlyArray<number>
    readonly seconds: number
    readonly redisVersion: string
  }
): Array<string> => {
  const cpu = os.cpus()
  const bare = results.find((r) => r.contender.face === undefined)
  const name = (r: Measured) =>
    r.contender.face === undefined
      ? "bare Worker"
      : `${r.contender.face === "promise" ? "Promise face" : "Effect face"}, \`${r.contender.lock}\``
  const int = (x: number) => Math.round(x).toLocaleString("en-US")
  const over = (x: number, base: number | undefined) =>
    base === undefined ? "" : ` (${x - base >= 0 ? "+" : "−"}${Math.abs(x - base) >= 10 ? int(Math.abs(x - base)) : Math.abs(x - base).toFixed(1)})`
  const groups = Array.from(new Set(results.flatMap((r) => r.groups.map(([group]) => group))))
    .map((group) => [group, Math.max(...results.map((r) => r.groups.find(([g]) => g === group)?.[1] ?? 0))] as const)
    .filter(([, most]) => most >= 5)
    .sort((a, b) => b[1] - a[1])
    .map(([group]) => group)
  return [
    `Run ${new Date().toISOString()} (${run.seconds} s) of \`${run.root}/dist\`, code ${revision(run.root)}: ` +
    `${cpu.length} × ${cpu[0]?.model ?? "cpu"}, Node ${process.version}, BullMQ ${bullmqVersion()}, Redis ` +
    `${run.redisVersion} (a private redis-server), load average before the run ${run.loadAverage.join(" / ")}.`,
    "",
    `Settings: a BullMQ \`Worker\` at concurrency ${concurrency}, no-op jobs added beforehand (untimed) as ` +
    "`bench/worker.ts` adds them, `removeOnComplete: true`; one warm-up round of " +
    `${warmupJobs.toLocaleString("en-US")} jobs per workload, then three windows of ${run.jobs.toLocaleString("en-US")} ` +
    "jobs each, each its own round: clean (Node CPU, jobs/s, Effect fibers), heap (bytes: exact from the used heap " +
    `around every collection, \`v8.GCProfiler\`; where, from the sampling heap profiler every ${samplingInterval} B, ` +
    "collected objects kept) and promises (an `async_hooks` init hook, on for that window only). Everything per job " +
    "over the whole process (BullMQ's work included); in brackets, ours less the bare Worker's.",
    "",
    "| workload | Node CPU µs | jobs/s | bytes allocated | sampled bytes | promises | Effect fibers | other async resources |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...results.map((r) =>
      `| ${name(r)} | ${r.nodeCpuUs.toFixed(1)}${over(r.nodeCpuUs, r === bare ? undefined : bare?.nodeCpuUs)} | ` +
      `${int(r.jobsPerSecond)} | ${int(r.bytes)}${over(r.bytes, r === bare ? undefined : bare?.bytes)} | ` +
      `${int(r.sampledBytes)} | ${r.promises.toFixed(1)}${over(r.promises, r === bare ? undefined : bare?.promises)} | ` +
      `${r.fibers.toFixed(2)} | ${r.otherAsync.toFixed(1)}${over(r.otherAsync, r === bare ? undefined : bare?.otherAsync)} |`
    ),
    "",
    "What the instruments cost (Node CPU µs per job in the heap window and in the promise window, against the clean " +
    `one): ${results.map((r) => `${name(r)} ${r.heapCpuUs.toFixed(0)} and ${r.hookCpuUs.toFixed(0)} (clean ${r.nodeCpuUs.toFixed(0)})`).join("; ")}.`,
    "",
    "### Bytes per job by where they are allocated (sampled)",
    "",
    "Groups of `bench/profile.ts` (by the allocating function's file; a builtin's bytes go to its caller's); groups " +
    "under 5 B per job everywhere left out.",
    "",
    `| where | ${results.map(name).join(" | ")} |`,
    `| --- | ${results.map(() => "---:").join(" | ")} |`,
    ...groups.map((group) =>
      `| ${group} | ${results.map((r) => int(r.groups.find(([g]) => g === group)?.[1] ?? 0)).join(" | ")} |`
    ),
    "",
    ...results.flatMap((r) => [
      `### Top ${topFunctions} allocating functions: ${name(r)}`,
      "",
      "| function | file:line | bytes per job |",
      "| --- | --- | ---: |",
      ...r.functions.map((f) => `| \`${f.name}\` | ${f.file} | ${int(f.bytes)} |`),
      ""
    ])
  ]
}
