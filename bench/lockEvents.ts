/**
 * What the activity log (`lockEvents`, issue 38) costs Redis: the same lifecycles with it off and on, in one run, on
 * one private redis-server. Each lifecycle goes through the Lock steps as a worker's do (a distinct digest each):
 *
 *   until_executed             lock (queue) + unlock
 *   until_and_while_executing  lock (queue) + handoff (run taken, queue released) + unlock (run)
 *   a refused duplicate        lock refused by a held queue lock
 *
 * Redis time is the usec of EVALSHA and EVAL in INFO commandstats (a script's inner commands run inside its call), per
 * lifecycle; round trips are their `calls`. Rounds alternate off and on (CONFIG RESETSTAT before each), and the table
 * gives each side's median round, so a drift of the machine falls on both.
 *
 *   npm run bench -- --lock-events [--lifecycles=N] [--rounds=N]     writes bench/results/lock-events.md
 */
import { writeFileSync } from "node:fs"
import * as os from "node:os"
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as Lock from "../dist/Lock.js"
import * as LockOptions from "../dist/Options.js"
import * as Redis from "../dist/Redis.js"
import * as RedisServer from "../dist/testing/RedisServer.js"
import { scriptStats } from "./reaperBullmq.js"

const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

type Scenario = "until_executed" | "until_and_while_executing" | "duplicate"

const scenarios: ReadonlyArray<{ readonly name: Scenario; readonly label: string }> = [
  { name: "until_executed", label: "until_executed: lock + unlock" },
  { name: "until_and_while_executing", label: "until_and_while_executing: lock + handoff + unlock" },
  { name: "duplicate", label: "a refused duplicate: one lock call" }
]

export const main = async (log: (line: string) => void, lifecycles: number, rounds: number): Promise<void> => {
  const scope = Effect.runSync(Scope.make())
  try {
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const admin = new IORedis(server.url)
    const store = await Effect.runPromise(Scope.provide(Redis.make({ url: server.url, timeout: "30 seconds" }), scope))
    const run = <A, E>(self: Effect.Effect<A, E, Redis.RedisService>) =>
      Effect.runPromise(Effect.provideService(self, Redis.RedisService, store))
    const version = (/redis_version:(\S+)/.exec(String(await admin.info("server"))) ?? [])[1] ?? "?"
    let round = 0
    // One round of one scenario: `lifecycles` of them, 16 at a time (as a few workers would), each its own digest.
    const measure = async (scenario: Scenario, lockEvents: boolean) => {
      const prefix = `bench-events-${round++}`
      const base = { lockPrefix: prefix, lockEvents } as const
      const queueOnly = LockOptions.unsafeMake({ lock: "until_executed", ...base })
      const both = LockOptions.unsafeMake({ lock: "until_and_while_executing", ...base })
      const held = `${prefix}:held`
      if (scenario === "duplicate") await run(Lock.lock(queueOnly, { digest: held, jid: "holder" }))
      const one = (i: number): Effect.Effect<unknown, unknown, Redis.RedisService> => {
        const digest = `${prefix}:${i.toString(16)}`
        const jid = `j${i}`
        switch (scenario) {
          case "until_executed":
            return Effect.andThen(Lock.lock(queueOnly, { digest, jid }), Lock.unlock(queueOnly, { digest, jid }))
          case "until_and_while_executing":
            return Lock.lock(both, { digest, jid }).pipe(
              Effect.andThen(Lock.handoff(both, { digest, jid }, { keepQueueLock: true })),
              Effect.flatMap((taken) => Lock.unlock(both, { digest, jid, phase: "run", fence: taken.fence }))
            )
          case "duplicate":
            return Effect.result(Lock.lock(queueOnly, { digest: held, jid }))
        }
      }
      await admin.config("RESETSTAT")
      await run(Effect.forEach(Array.from({ length: lifecycles }, (_, i) => i), one, { concurrency: 16, discard: true }))
      const stats = await scriptStats(admin)
      await admin.flushdb()
      return { usec: stats.usec / lifecycles, calls: stats.calls / lifecycles }
    }
    const rows: Array<string> = []
    for (const { label, name } of scenarios) {
      // Warm-up: the scripts loaded, the connection and the JIT settled; not counted.
      await measure(name, false)
      await measure(name, true)
      const off: Array<{ usec: number; calls: number }> = []
      const on: Array<{ usec: number; calls: number }> = []
      for (let r = 0; r < rounds; r++) {
        off.push(await measure(name, false))
        on.push(await measure(name, true))
      }
      const offUsec = median(off.map((m) => m.usec))
      const onUsec = median(on.map((m) => m.usec))
      const offCalls = median(off.map((m) => m.calls))
      const onCalls = median(on.map((m) => m.calls))
      const line = `| ${label} | ${offCalls.toFixed(2)} | ${onCalls.toFixed(2)} | ${offUsec.toFixed(2)} | ${
        onUsec.toFixed(2)
      } | ${(onUsec - offUsec).toFixed(2)} (${((onUsec / offUsec - 1) * 100).toFixed(0)}%) |`
      rows.push(line)
      log(line)
    }
    admin.disconnect()
    const text = [
      "# The activity log's cost (lockEvents off and on, one run)",
      "",
      `Redis ${version}, private server, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? "?"}), Node ${process.version}. ` +
      `${lifecycles} lifecycles per round, 16 at a time, each its own digest; ${rounds} rounds of each side, alternating, ` +
      "after one untimed round of each; medians of the rounds. Written by `npm run bench -- --lock-events`.",
      "",
      "Round trips: commandstats `calls` of EVALSHA/EVAL per lifecycle (each is one round trip). Redis µs: their `usec` " +
      "per lifecycle (a script's inner commands run inside its call, the log's LPUSH, LTRIM and PEXPIRE among them).",
      "",
      "| lifecycle | round trips, off | round trips, on | Redis µs, off | Redis µs, on | on − off |",
      "| --- | ---: | ---: | ---: | ---: | ---: |",
      ...rows,
      "",
      "The round trips are the same: the log is written inside the call that makes the event. What it adds is Redis " +
      "time: per event one LPUSH and PEXPIRE (and LTRIM once the list is past 100) and the entry's JSON (and a TIME read for a release, which reads " +
      "it only for an entry with a horizon otherwise). Off, the scripts that can log still define the log's function (Redis makes a script's functions anew on each run, a few hundred instructions) but never call it.",
      ""
    ].join("\n")
    writeFileSync(new URL("./results/lock-events.md", import.meta.url), text)
    log("wrote bench/results/lock-events.md")
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
