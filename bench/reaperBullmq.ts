/**
 * One reaper pass over a BullMQ backlog (issue 18, item 8): N waiting `until_executed` jobs (50,000 by default), every
 * lock older than the grace, 1% of the jobs removed (their locks are orphans), through `BullMQ.layer(queue)`. Two ways
 * of asking the queue, on the same data, same run:
 *
 *   after    the adapter's `exists`: per job EXISTS of its hash and ZSCORE in completed and failed, one script call
 *            per 200 jobs, one batch per reaper step
 *   before   the old path: one `queue.getJobState(jid)` per candidate, one after the other (it scans the wait list)
 *
 * Measured on the Redis for the pass alone (the locks and the queue share it here). Every call of the pass is a script
 * (the reaper's steps, unlocks and lease, BullMQ's getJobState, the adapter's presence script): Redis time is the
 * usec of EVALSHA and EVAL in INFO commandstats (a script's inner commands are counted inside it, and again under
 * their own names since Redis 7, so only the scripts are summed). SLOWLOG at 1 ms logs every call of 1 ms or more:
 * the longest call, calls over 5 and 10 ms (Redis 7 logs a script's inner commands too: the longest is the script).
 * And the pass's wall time. The before
 * pass runs last (its orphans are gone by then: the after pass removed them; it asks about every other job as well).
 *
 *   npm run bench -- --reaper-bullmq [--jobs=50000] [--no-before]     writes bench/results/reaper-bullmq.md
 */
import { writeFileSync } from "node:fs"
import * as os from "node:os"
import { Queue } from "bullmq"
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as BullMQ from "../dist/adapters/BullMQ.js"
import { JobQueue, type Presence } from "../dist/JobQueue.js"
import * as Reaper from "../dist/Reaper.js"
import * as Redis from "../dist/Redis.js"
import * as RedisServer from "../dist/testing/RedisServer.js"
import * as UniqueJob from "../dist/UniqueJob.js"

const prefix = "reapq"

interface Measured {
  readonly candidates: number
  readonly orphans: number
  readonly wallMs: number
  readonly redisUsec: number
  readonly calls: number
  readonly longestUsec: number
  readonly longest: string
  readonly over5ms: number
  readonly over10ms: number
}

/** The usec and calls of EVALSHA and EVAL in INFO commandstats since the last reset. */
export const scriptStats = async (admin: IORedis) => {
  let usec = 0
  let calls = 0
  for (const match of String(await admin.info("commandstats")).matchAll(/cmdstat_(evalsha|eval):calls=(\d+),usec=(\d+)/g)) {
    calls += Number(match[2])
    usec += Number(match[3])
  }
  return { usec, calls }
}

export const main = async (log: (line: string) => void, jobs: number, before: boolean): Promise<void> => {
  const scope = Effect.runSync(Scope.make())
  try {
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const url = new URL(server.url)
    const connection = { host: url.hostname, port: Number(url.port) }
    const admin = new IORedis(server.url)
    const queue = new Queue("backlog", { connection })
    const redisLayer = Redis.layer({ url: server.url, timeout: "30 seconds" })
    const adapter = BullMQ.layer(queue, { timeout: "30 seconds" })
    const unique = UniqueJob.unsafeMake({ worker: "Backlog", queue: "backlog", lock: "until_executed", lockPrefix: prefix })
    const services = await Effect.runPromise(Scope.provide(Layer.build(Layer.merge(redisLayer, adapter)), scope))
    const run = <A, E>(effect: Effect.Effect<A, E, Redis.RedisService | JobQueue>) =>
      Effect.runPromise(Effect.provideContext(effect, services))

    const started = performance.now()
    const jids: Array<string> = []
    const chunk = 1000
    for (let from = 0; from < jobs; from += chunk) {
      const outcomes = await run(Effect.forEach(
        Array.from({ length: Math.min(chunk, jobs - from) }, (_, i) => from + i),
        (i) => unique.enqueue([{ i }]),
        { concurrency: 64 }
      ))
      for (const outcome of outcomes) jids.push(outcome.job.jid)
    }
    const orphaned = jids.filter((_, i) => i % 100 === 0)
    for (const jid of orphaned) await queue.remove(jid)
    log(`filled ${jobs} waiting jobs and their locks, ${orphaned.length} jobs removed, in ` +
      `${((performance.now() - started) / 1000).toFixed(1)} s; waiting: ${await queue.count()}`)
    // Past the grace.
    await new Promise((resolve) => setTimeout(resolve, 1100))

    const measure = async (label: string, queueLayer: Layer.Layer<JobQueue, unknown>): Promise<Measured> => {
      let candidates = 0
      const counted = Layer.effect(
        JobQueue,
        Effect.map(JobQueue, (port) =>
          JobQueue.of({
            ...port,
            exists: (asked) => {
              candidates += asked.length
              return port.exists(asked)
            }
          }))
      ).pipe(Layer.provide(queueLayer))
      await admin.config("SET", "slowlog-max-len", "100000")
      await admin.config("SET", "slowlog-log-slower-than", "1000")
      await admin.slowlog("RESET")
      await admin.config("RESETSTAT")
      const t0 = performance.now()
      const pass = await run(Effect.provide(Reaper.runOnce({ prefix, grace: "1 second" }), counted))
      const wallMs = performance.now() - t0
      await admin.config("SET", "slowlog-log-slower-than", "10000")
      const stats = await scriptStats(admin)
      const entries = (await admin.slowlog("GET", -1)) as Array<[number, number, number, Array<string>]>
      // The bench's own CONFIG and SLOWLOG calls are not the pass's.
      const pass_ = entries.filter(([, , , command]) => !/^(config|slowlog)$/i.test(String(command[0])))
      let longest: [number, number, number, Array<string>] | undefined
      for (const entry of pass_) if (longest === undefined || entry[2] > longest[2]) longest = entry
      const result: Measured = {
        candidates,
        orphans: pass.orphans,
        wallMs,
        redisUsec: stats.usec,
        calls: stats.calls,
        longestUsec: longest?.[2] ?? 0,
        // EVALSHA <sha> <numkeys> <first key>: the key says whose script it was (a reap step's index, BullMQ's keys).
        longest: longest === undefined ? "" : [longest[3][0], longest[3][3]].join(" … "),
        over5ms: pass_.filter(([, , usec]) => usec > 5000).length,
        over10ms: pass_.filter(([, , usec]) => usec > 10_000).length
      }
      log(`${label}: ${JSON.stringify(result)}`)
      return result
    }

    const after = await measure("after (BullMQ.layer exists)", adapter)
    // The old adapter's exists, one getJobState per candidate, as the old reaper asked: one at a time.
    const old = Layer.succeed(
      JobQueue,
      JobQueue.of({
        push: () => Effect.void,
        schedule: () => Effect.void,
        remove: () => Effect.succeed(false),
        kill: () => Effect.void,
        exists: (asked) =>
          Effect.forEach(asked, ({ jid }) =>
            Effect.map(
              Effect.promise(() => queue.getJobState(jid)),
              (state): Presence => (state === "completed" || state === "failed" || state === "unknown" ? "gone" : "exists")
            ))
      })
    )
    const was = before ? await measure("before (getJobState per job)", old) : undefined
    // The control, on the same server right after: as many calls of a script that only reads the clock as the after
    // pass made. Its calls over 5 ms are the machine's (a busy 2-core box descheduling Redis), not the reaper's.
    await admin.config("SET", "slowlog-log-slower-than", "5000")
    await admin.slowlog("RESET")
    const trivial = String(await admin.script("LOAD", "return redis.call('TIME')"))
    for (let i = 0; i < after.calls; i += 50) {
      await Promise.all(Array.from({ length: Math.min(50, after.calls - i) }, () => admin.evalsha(trivial, 0)))
    }
    const controlSlow = ((await admin.slowlog("GET", -1)) as Array<unknown>).length

    const row = (label: string, m: Measured | undefined) =>
      m === undefined
        ? `| ${label} | not run | | | | | |`
        : `| ${label} | ${m.candidates} asked, ${m.orphans} removed | ${(m.redisUsec / 1e6).toFixed(2)} s in ${m.calls} calls | ` +
          `${(m.longestUsec / 1000).toFixed(2)} ms (${m.longest}) | ${m.over5ms} | ${m.over10ms} | ` +
          `${(m.wallMs / 1000).toFixed(1)} s |`
    const lines = [
      `Run ${new Date().toISOString()}: one reaper pass over ${jobs} waiting \`until_executed\` jobs of one BullMQ queue, ` +
      `every lock past the grace, ${orphaned.length} of the jobs removed (orphans). Redis ${
        String(await admin.info("server")).match(/redis_version:(\S+)/)?.[1] ?? "?"
      }, private server. Redis time: the script calls' usec (commandstats); longest: SLOWLOG at 1 ms.`,
      "",
      "| how the queue is asked | jobs | Redis time (script calls) | longest call | calls > 5 ms | calls > 10 ms | wall |",
      "| --- | --- | --- | --- | --- | --- | --- |",
      row("after: `BullMQ.layer` `exists` (batched, O(1) per job)", after),
      row("before: `getJobState` per job (the old adapter)", was),
      "",
      `Control: ${controlSlow} of ${after.calls} calls of a script that only reads TIME took over 5 ms on this machine ` +
      `(load average ${os.loadavg().map((x) => x.toFixed(1)).join(", ")}).`,
      "",
      was === undefined
        ? ""
        : `Redis time ${(was.redisUsec / Math.max(1, after.redisUsec)).toFixed(0)}× less; the longest call ` +
          `${(was.longestUsec / Math.max(1, after.longestUsec)).toFixed(0)}× shorter.`
    ]
    for (const line of lines) log(line)
    writeFileSync(
      new URL("./results/reaper-bullmq.md", import.meta.url),
      `# Reaper over a BullMQ backlog\n\n${lines.join("\n")}\n`
    )
    await queue.close()
    admin.disconnect()
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
