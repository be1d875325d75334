/**
 * What each lock script costs Redis, counted in instructions (issue 20): a `redis-server` under valgrind's callgrind
 * runs fixed workloads, and the instructions it ran for each (zeroed before, dumped after, by `callgrind_control`)
 * are divided by the calls made. Unlike INFO commandstats' `usec`, the count is the same whatever else the machine is
 * doing, so a change to a script is measured to a fraction of a percent on a busy 2-core VM.
 *
 *   npm run bench -- --scripts [--root=<checkout>] [--calls=N]
 *
 * Every phase runs `calls` (3,000) script calls in pipelines of 500, on 3,000 other index members (the index is a
 * skiplist, as it is with many locks held), with realistic keys (`<prefix>:<32 hex>`) and 24-hex jids:
 *
 *   lock        a queue lock taken (until_executed, lockTtl 300 s, the job's queue named)
 *   duplicate   the same locks asked by other jids: refused, the holder answered
 *   unlock      the queue locks released
 *   lock, no TTL / unlock, no TTL   the same without a lockTtl (the default): an entry only its release ends
 *   handoff     until_and_while_executing's handoff (queue lock → run lock with a 60 s lease), the queue locks taken
 *               untimed before it
 *   renew       each run lock's lease renewed
 *   run unlock  the run locks released
 *   run lock    while_executing's run lock taken (a 60 s lease, fenced), on fresh digests
 *   set, cad    the raw pair: `SET key jid PX 300000 NX`, and a compare-and-delete script
 *
 * TTLs and leases are long enough that nothing expires while valgrind runs it slowly. `--root` counts another
 * checkout's scripts (its `dist/`, built there) first, each tree on a server of its own: the before of a change.
 *
 * `--gem=<checkout>` counts sidekiq-unique-jobs v9's own `lock.lua` and `unlock.lua`, read from a checkout of the gem
 * (nothing of it is copied here), called as its Locksmith calls them: KEYS `<digest>:LOCKED` and the digests index,
 * ARGV the jid, pttl, type, limit and the metadata JSON it always writes, then the five values its script caller
 * appends. Its phases are lock, duplicate, unlock and the two without a TTL; the handoff, renew and run-lock phases
 * have no counterpart there. Each tree also gives the bytes a held lock costs (used_memory over the `lock` phase).
 * Writes bench/results/scripts.md (with `--gem`, scripts-gem.md). Needs valgrind (Debian's package; on every machine
 * here).
 */
import { execFileSync, spawn, spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { Redis as IORedis } from "ioredis"
import type * as ScriptsModule from "../dist/store/Scripts.js"
import { freePort } from "../dist/testing/RedisProcess.js"
import { compareAndDelete, hex32 } from "./contenders.js"

type Scripts = ReturnType<typeof ScriptsModule.loadScripts>

const phases = [
  "lock",
  "duplicate",
  "unlock",
  "lock, no TTL",
  "unlock, no TTL",
  "handoff",
  "renew",
  "run unlock",
  "run lock",
  "set",
  "cad",
  "lock, batched",
  "duplicate, batched",
  "unlock, batched"
] as const
type Phase = (typeof phases)[number]

interface Tree {
  readonly label: string
  /** Ours, or the gem's two scripts' sources (their ERB partials rendered). */
  readonly scripts: Scripts | { readonly gem: { readonly lock: string; readonly unlock: string } }
  counts: Partial<Record<Phase, number>>
  /** Bytes per held lock: the `lock` phase's and the raw `set` phase's used_memory growth per call. */
  bytes: { lock?: number; set?: number }
}

/** The gem's script, its `<%= include_partial "shared/_x.lua" %>` lines replaced by those files, as its loader does. */
const gemScript = (checkout: string, name: string): string => {
  const dir = path.join(checkout, "lib", "sidekiq_unique_jobs", "lua")
  return readFileSync(path.join(dir, `${name}.lua`), "utf8").replace(
    /<%=\s*include_partial\s+["']([^"']+)["']\s*%>/g,
    (_, partial: string) => readFileSync(path.join(dir, partial), "utf8")
  )
}

const batch = 500
const fillers = 3_000

export const main = async (
  log: (line: string) => void,
  roots: ReadonlyArray<string>,
  calls: number,
  out: string,
  gem?: string
) => {
  if (spawnSync("valgrind", ["--version"]).status !== 0) {
    throw new Error("valgrind is not installed (apt-get install -y valgrind): the script counts run under callgrind")
  }
  const trees: Array<Tree> = []
  for (const root of roots) {
    // 2.0.0 moved the scripts' loader to dist/store/Scripts.js; a checkout from before has it at dist/internal/scripts.js.
    const current = path.join(root, "dist", "store", "Scripts.js")
    const file = existsSync(current) ? current : path.join(root, "dist", "internal", "scripts.js")
    const module = (await import(pathToFileURL(file).href)) as typeof ScriptsModule
    trees.push({ label: path.resolve(root), scripts: module.loadScripts(), counts: {}, bytes: {} })
  }
  if (gem !== undefined) {
    trees.unshift({
      label: `sidekiq-unique-jobs ${path.resolve(gem)}`,
      scripts: { gem: { lock: gemScript(gem, "lock"), unlock: gemScript(gem, "unlock") } },
      counts: {},
      bytes: {}
    })
  }
  // Each tree on a server of its own: the scripts one loads (and the garbage they leave) never weigh on another's.
  const measure = async (tree: Tree): Promise<void> => {
    const dir = mkdtempSync(path.join(tmpdir(), "unique-jobs-callgrind-"))
    const port = await freePort()
    const server = spawn(
      "valgrind",
      ["--tool=callgrind", `--callgrind-out-file=${dir}/out.%p`, "redis-server", "--port", String(port), "--save", "", "--appendonly", "no", "--hz", "1", "--enable-debug-command", "local"],
      { cwd: dir, stdio: "ignore" }
    )
    const redis = new IORedis({ port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 })
    redis.on("error", () => {})
    try {
      // valgrind starts Redis slowly: try for up to a minute.
      for (let attempt = 0; ; attempt++) {
        try {
          await redis.connect()
          break
        } catch (error) {
          if (attempt >= 200) throw error
          await new Promise((resolve) => setTimeout(resolve, 300))
        }
      }
      // What the server does on its own (its cron, the active expiry of keys with a TTL) would count into a phase.
      await redis.call("DEBUG", "SET-ACTIVE-EXPIRE", "0")
      const control = (flag: string) =>
        execFileSync("callgrind_control", [flag, String(server.pid)], { cwd: dir, stdio: "ignore" })
      // The instructions since the last zero, from the newest dump.
      const dumped = (): number => {
        control("-d")
        const files = readdirSync(dir).filter((file) => file.startsWith(`out.${server.pid}.`))
        const newest = files.sort((a, b) => Number(b.split(".").pop()) - Number(a.split(".").pop()))[0]!
        const totals = /^totals: (\d+)/m.exec(readFileSync(path.join(dir, newest), "utf8"))
        if (totals === null) throw new Error(`no totals in ${newest}`)
        return Number(totals[1])
      }
      type Pipeline = ReturnType<IORedis["pipeline"]>
      const run = async (build: (pipeline: Pipeline, i: number) => void): Promise<void> => {
        for (let from = 0; from < calls; from += batch) {
          const pipeline = redis.pipeline()
          for (let i = from; i < Math.min(from + batch, calls); i++) build(pipeline, i)
          for (const [error] of (await pipeline.exec()) ?? []) if (error) throw error
        }
      }
      const count = async (build: (pipeline: Pipeline, i: number) => void): Promise<number> => {
        control("-z")
        await run(build)
        return dumped() / calls
      }
      const usedMemory = async (): Promise<number> =>
        Number(/used_memory:(\d+)/.exec(String(await redis.info("memory")))![1])
      // The count, and what the calls left in memory, per call.
      const countAndBytes = async (build: (pipeline: Pipeline, i: number) => void): Promise<[number, number]> => {
        const before = await usedMemory()
        const instructions = await count(build)
        return [instructions, (await usedMemory() - before) / calls]
      }
      const digest = (round: string, i: number) => `uniquejobs:${hex32(`${round}/${i}`)}`
      const jid = (i: number) => hex32(`jid/${i}`).slice(0, 24)
      const other = (i: number) => hex32(`other/${i}`).slice(0, 24)
      const index = "uniquejobs:digests"
      const fence = "uniquejobs:fence"

      await redis.flushdb()
      const filler = redis.pipeline()
      for (let i = 0; i < fillers; i++) filler.zadd(index, Date.now() + 3_600_000, digest("filler", i))
      await filler.exec()
      if ("gem" in tree.scripts) {
        const lock = String(await redis.script("LOAD", tree.scripts.gem.lock))
        const unlock = String(await redis.script("LOAD", tree.scripts.gem.unlock))
        // What its script caller appends to every call: now_f, debug_lua, max_history, the script's name, the version.
        const appended = (name: string) => [Date.now() / 1000, 0, 1000, name, "7.0.0"]
        // Its Locksmith's metadata for an until_executed job with a lock_ttl of 300 s and one argument.
        const metadata = (i: number) =>
          JSON.stringify({
            worker: "MyWorker", queue: "default", limit: null, timeout: null, ttl: 300, type: "until_executed",
            lock_args: [i], time: Date.now() / 1000, at: null
          })
        const gemLock = (round: string, who: (i: number) => string, pttl: number) => (p: Pipeline, i: number) =>
          p.evalsha(lock, 2, `${digest(round, i)}:LOCKED`, index, who(i), pttl, "until_executed", 1, metadata(i), ...appended("lock"))
        const gemUnlock = (round: string) => (p: Pipeline, i: number) =>
          p.evalsha(unlock, 2, `${digest(round, i)}:LOCKED`, index, jid(i), "until_executed", ...appended("unlock"))
        ;[tree.counts.lock, tree.bytes.lock] = await countAndBytes(gemLock("q", jid, 300_000))
        tree.counts.duplicate = await count(gemLock("q", other, 300_000))
        tree.counts.unlock = await count(gemUnlock("q"))
        tree.counts["lock, no TTL"] = await count(gemLock("n", jid, 0))
        tree.counts["unlock, no TTL"] = await count(gemUnlock("n"))
      } else {
        const { scripts } = tree
        for (const script of Object.values(scripts)) await redis.script("LOAD", script.source)
        // A tree whose lock steps check the layout's epoch (issue 47) takes the resets key and the epoch after the rest.
        const epochs = scripts.lock.source.includes("layout_current")
        const resets = epochs ? [`${index.slice(0, -":digests".length)}:resets`] : []
        const epoch = epochs ? [""] : []
        const queueLock = (who: (i: number) => string) => (p: Pipeline, i: number) =>
          p.evalsha(
            scripts.lock.sha, 3 + resets.length, `${digest("q", i)}:LOCKED`, index, fence, ...resets,
            who(i), digest("q", i), 1, 300_000, 0, "", "0", '"default"', ...epoch
          )
        const runKey = (i: number) => `${digest("q", i)}:RUN`
        ;[tree.counts.lock, tree.bytes.lock] = await countAndBytes(queueLock(jid))
        tree.counts.duplicate = await count(queueLock(other))
        tree.counts.unlock = await count((p, i) =>
          p.evalsha(scripts.unlock.sha, 2, `${digest("q", i)}:LOCKED`, index, jid(i), digest("q", i), 0))
        tree.counts["lock, no TTL"] = await count((p, i) =>
          p.evalsha(
            scripts.lock.sha, 3 + resets.length, `${digest("n", i)}:LOCKED`, index, fence, ...resets,
            jid(i), digest("n", i), 1, 0, 0, "", "0", '"default"', ...epoch
          ))
        tree.counts["unlock, no TTL"] = await count((p, i) =>
          p.evalsha(scripts.unlock.sha, 2, `${digest("n", i)}:LOCKED`, index, jid(i), digest("n", i), 0))
        await run(queueLock(jid))
        tree.counts.handoff = await count((p, i) =>
          p.evalsha(
            scripts.handoff.sha, 4 + resets.length, `${digest("q", i)}:LOCKED`, `${runKey(i)}:LOCKED`, index, fence,
            ...resets, jid(i), digest("q", i), runKey(i), 1, 0, 60_000, "", "0", ...epoch
          ))
        tree.counts.renew = await count((p, i) => p.evalsha(scripts.renew.sha, 1, `${runKey(i)}:LOCKED`, jid(i), 60_000, 0))
        tree.counts["run unlock"] = await count((p, i) =>
          p.evalsha(scripts.unlock.sha, 2, `${runKey(i)}:LOCKED`, index, jid(i), runKey(i), 0))
        tree.counts["run lock"] = await count((p, i) =>
          p.evalsha(
            scripts.lock.sha, 3 + resets.length, `${digest("w", i)}:RUN:LOCKED`, index, fence, ...resets,
            jid(i), `${digest("w", i)}:RUN`, 1, 0, 60_000, "", "1", "", ...epoch
          ))
        // Issue 39: the same lock, duplicate and unlock steps, 32 to a batch.lua call (a tree that has it), per step.
        const batchScript = (scripts as Partial<Scripts>).batch
        if (batchScript !== undefined) {
          await redis.flushdb()
          await filler.exec()
          const steps = 32
          const batched = (kind: string, step: (i: number) => { keys: Array<string>; argv: Array<string | number> }) =>
            (p: Pipeline, i: number) => {
              if (i % steps !== 0) return
              const keys: Array<string> = []
              const argv: Array<string | number> = []
              for (let j = i; j < Math.min(i + steps, calls); j++) {
                const one = step(j)
                keys.push(...one.keys)
                argv.push(kind, one.keys.length, one.argv.length, ...one.argv)
              }
              p.evalsha(batchScript.sha, keys.length, ...keys, ...argv)
            }
          const lockStep = (who: (i: number) => string) => (i: number) => ({
            keys: [`${digest("q", i)}:LOCKED`, index, fence, ...resets],
            argv: [who(i), digest("q", i), 1, 300_000, 0, "", "0", '"default"', ...epoch]
          })
          tree.counts["lock, batched"] = await count(batched("l", lockStep(jid)))
          tree.counts["duplicate, batched"] = await count(batched("l", lockStep(other)))
          tree.counts["unlock, batched"] = await count(batched("u", (i) => ({
            keys: [`${digest("q", i)}:LOCKED`, index],
            argv: [jid(i), digest("q", i), 0]
          })))
        }
      }
      await redis.flushdb()
      const cad = String(await redis.script("LOAD", compareAndDelete))
      ;[tree.counts.set, tree.bytes.set] = await countAndBytes((p, i) => p.set(digest("raw", i), jid(i), "PX", 300_000, "NX"))
      tree.counts.cad = await count((p, i) => p.evalsha(cad, 1, digest("raw", i), jid(i)))
      log(`${tree.label}: ${phases.map((phase) => `${phase} ${Math.round(tree.counts[phase] ?? NaN)}`).join(", ")}`)
    } finally {
      await redis.shutdown("NOSAVE").catch(() => undefined)
      redis.disconnect()
      await new Promise<void>((resolve) => {
        if (server.exitCode !== null) return resolve()
        server.once("exit", () => resolve())
        setTimeout(() => {
          server.kill("SIGKILL")
          resolve()
        }, 10_000).unref()
      })
      rmSync(dir, { recursive: true, force: true })
    }
  }
  for (const tree of trees) await measure(tree)

  const of = (tree: Tree, phase: Phase) => tree.counts[phase] ?? NaN
  const lifecycle = (tree: Tree) => of(tree, "lock") + of(tree, "unlock")
  const raw = (tree: Tree) => of(tree, "set") + of(tree, "cad")
  const k = (n: number | undefined) => (n === undefined || Number.isNaN(n) ? "–" : `${(n / 1000).toFixed(1)}k`)
  const first = trees[0]!
  const last = trees[trees.length - 1]!
  const header = trees.length > 1
    ? `| phase | ${trees.map((t) => `\`${t.label}\``).join(" | ")} | last / first |`
    : `| phase | instructions per call |`
  const rows = [...phases, "lifecycle (lock + unlock)"].map((phase) => {
    const value = (tree: Tree) => (phase === "lifecycle (lock + unlock)" ? lifecycle(tree) : of(tree, phase as Phase))
    // A batched phase against the first tree's batched figure, or its one-call-per-step one when it has no batch.lua.
    const firstValue = Number.isNaN(value(first)) ? of(first, phase.replace(", batched", "") as Phase) : value(first)
    const ratio = trees.length > 1
      ? ` | ${Number.isNaN(value(last) / firstValue) ? "–" : `${(value(last) / firstValue).toFixed(3)}×`}`
      : ""
    return `| ${phase} | ${trees.map((tree) => k(value(tree))).join(" | ")}${ratio} |`
  })
  const bytes = (tree: Tree) => tree.bytes.lock ?? NaN
  const bytesRow = `| bytes per held lock (used_memory) | ${trees.map((tree) => String(Math.round(bytes(tree)))).join(" | ")}` +
    (trees.length > 1 ? ` | ${(bytes(last) / bytes(first)).toFixed(3)}× |` : " |")
  const lines = [
    "# What each script costs Redis, in instructions (issue 20)",
    "",
    "`npm run bench -- --scripts" + (gem === undefined ? "" : ` --gem=${path.resolve(gem)}`) +
    (trees.length > (gem === undefined ? 1 : 2) ? ` --root=${trees[gem === undefined ? 0 : 1]!.label}` : "") + "`",
    "",
    `Run ${new Date().toISOString()}: ${calls.toLocaleString("en-US")} calls per phase in pipelines of ${batch}, ` +
    `${fillers.toLocaleString("en-US")} other index members, a redis-server per tree under callgrind ` +
    `(${String(execFileSync("redis-server", ["--version"])).trim().split(" ").slice(0, 3).join(" ")}, hz 1, active expiry ` +
    "off). Instructions Redis ran per call (the call's command parsing, script and reply included), the same count " +
    "on a busy machine.",
    "",
    header,
    `| --- | ${trees.map(() => "---:").join(" | ")}${trees.length > 1 ? " | ---: |" : ""}`,
    ...rows,
    bytesRow,
    "",
    ...trees.map((tree) =>
      `- \`${tree.label}\`: a lifecycle (lock + unlock) costs ${(lifecycle(tree) / raw(tree)).toFixed(2)}× the raw ` +
      `pair (SET NX PX + compare-and-delete: ${k(raw(tree))}); a held lock ${(bytes(tree) / (tree.bytes.set ?? NaN)).toFixed(2)}× ` +
      `a plain SET's ${Math.round(tree.bytes.set ?? NaN)} B`
    ),
    ""
  ]
  for (const line of lines) log(line)
  writeFileSync(out, lines.join("\n"))
  log(`wrote ${out}`)
}
