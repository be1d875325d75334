/**
 * The admin UI under a wide index (issue 35, observation 4), on a private redis-server: L locks (100) of H holders
 * each (2,000; a high lockLimit makes this), seeded straight into Redis in the entries' shape, with lockInfo.
 *
 * - one page: the Redis time it costs (SLOWLOG at threshold 0: every top-level call with its time; a script's inner
 *   calls are inside its time), its longest call, its calls and the bytes it answers;
 * - ten page loads at once through `Web.serve` (Node's http): their statuses, how late a PING from another client is
 *   answered meanwhile, and the growth of the process' memory;
 * - a process' 50 `while_executing` run locks on a 1 s lease held through those ten loads: how many are Performed.
 *
 *   npm run bench -- --web-load [--locks=N] [--holders=N] [--out=name]    writes bench/results/<name>.md (web-load)
 */
import { writeFileSync } from "node:fs"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as References from "effect/References"
import * as Scope from "effect/Scope"
import { Redis as IORedis } from "ioredis"
import * as Middleware from "../dist/Middleware.js"
import * as LockOptions from "../dist/Options.js"
import * as Redis from "../dist/Redis.js"
import * as RedisServer from "../dist/testing/RedisServer.js"
import * as Web from "../dist/Web.js"
import * as MemoryQueue from "../dist/adapters/MemoryQueue.js"
import { recorder, revision, round } from "./harness.js"

const prefix = "webload"

/** L locks of H holders each, written as the scripts write them (no lock.lua call per holder: that is O(H) each). */
export const seedWide = async (client: IORedis, locks: number, holders: number): Promise<void> => {
  const now = Number((await client.time())[0]) * 1000
  for (let l = 0; l < locks; l++) {
    const name = `${prefix}:lock${l}`
    const fields: Array<string> = []
    for (let h = 0; h < holders; h++) {
      const info = { type: "until_executed", limit: holders, ttl: 3_600_000, timeout: 0, worker: "ReportJob", queue: "default", args: [l, h, { user: `u${h % 97}` }] }
      fields.push(`job-${l}-${h}`, `{"t":${now - h},"x":${now + 3_600_000},"l":0,"q":"default","i":${JSON.stringify(info)}}`)
    }
    await client.multi()
      .hset(`${name}:LOCKED`, ...fields)
      .pexpire(`${name}:LOCKED`, 3_600_000)
      .zadd(`${prefix}:digests`, now + 3_600_000, name)
      .exec()
  }
}

interface Slow {
  readonly calls: number
  /** Calls a script made (SLOWLOG logs them too, from client "?:0"): their time is inside the script's. */
  readonly inner: number
  readonly totalUs: number
  readonly longestUs: number
  readonly longest: string
}

// Every top-level call since the last reset, from SLOWLOG at threshold 0 (the probe's own calls left out). Redis 7
// logs a script's inner calls as well, from the scripts' own client ("?:0"): summed with the script, they would count
// its reads twice.
const slowlog = async (probe: IORedis): Promise<Slow> => {
  const entries = (await probe.call("SLOWLOG", "GET", "-1")) as Array<[number, number, number, Array<string>, string]>
  let calls = 0
  let inner = 0
  let totalUs = 0
  let longestUs = 0
  let longest = ""
  for (const [, , us, args, client] of entries) {
    const name = String(args[0]).toLowerCase()
    if (name === "slowlog" || name === "config" || name === "ping") continue
    if (String(client) === "?:0") {
      inner++
      continue
    }
    calls++
    totalUs += us
    if (us > longestUs) {
      longestUs = us
      longest = args.slice(0, 2).map(String).join(" ")
    }
  }
  return { calls, inner, totalUs, longestUs, longest }
}

const measured = async <A>(probe: IORedis, f: () => Promise<A>): Promise<{ readonly value: A; readonly slow: Slow }> => {
  await probe.call("SLOWLOG", "RESET")
  const value = await f()
  return { value, slow: await slowlog(probe) }
}

export const main = async (log: (line: string) => void, locks: number, holders: number, out: string): Promise<void> => {
  const scope = Effect.runSync(Scope.make())
  const { lines, out: say } = recorder(log)
  try {
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const probe = new IORedis(server.url)
    await probe.config("SET", "slowlog-log-slower-than", "0")
    await probe.config("SET", "slowlog-max-len", "1000000")
    const seeder = new IORedis(server.url)
    await seedWide(seeder, locks, holders)
    seeder.disconnect()
    const store = await Effect.runPromise(Scope.provide(Redis.make({ url: server.url }), scope))
    const provide = <A, E>(effect: Effect.Effect<A, E, Redis.RedisService | Scope.Scope>) =>
      Effect.runPromise(
        Scope.provide(Effect.provideService(effect, Redis.RedisService, store), scope).pipe(
          Effect.provideService(References.MinimumLogLevel, "Error")
        )
      )
    const served = await provide(Web.serve({ prefix }))
    say(`# The admin UI under a wide index (issue 35, observation 4)`)
    say("")
    say(`Revision ${revision()}; private redis-server ${server.url}; ${new Date().toISOString()}; Node ${process.version}.`)
    say(`${locks} locks × ${holders.toLocaleString("en")} holders each, every entry with lockInfo (about 190 bytes).`)
    say("")

    // -- one page at a time --------------------------------------------------------------------------------------------
    const get = async (path: string) => {
      const response = await fetch(`${served.url}${path}`)
      const body = await response.arrayBuffer()
      return { status: response.status, bytes: body.byteLength }
    }
    const pages = ["/?count=1000", "/locks", "/api/locks", `/lock?digest=${encodeURIComponent(`${prefix}:lock0`)}`]
    for (const path of pages) await get(path) // warm-up
    say("## One page, alone")
    say("")
    say("Redis time: the sum of every top-level call's time in SLOWLOG (threshold 0) while the page is served; the calls")
    say("scripts make inside (which SLOWLOG lists too) are counted apart, their time being inside the script's.")
    say("")
    say("SLOWLOG times are wall time inside Redis, so a busy machine inflates them: each page is served 7 times, and the")
    say("least and the median are shown (the least is the page's own cost).")
    say("")
    say("| page | status | Redis ms, least | Redis ms, median | calls | calls inside scripts | longest call µs, least | longest call | answer bytes |")
    say("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for (const path of pages) {
      const samples: Array<{ readonly slow: Slow; readonly value: { readonly status: number; readonly bytes: number } }> = []
      for (let i = 0; i < 7; i++) samples.push(await measured(probe, () => get(path)))
      const totals = samples.map((sample) => sample.slow.totalUs / 1000).sort((a, b) => a - b)
      const least = samples.reduce((a, b) => (b.slow.longestUs < a.slow.longestUs ? b : a))
      const { slow, value } = samples[0]!
      say(`| \`${path}\` | ${value.status} | ${round(totals[0]!, 1)} | ${round(totals[3]!, 1)} | ${slow.calls} | ${slow.inner} | ${least.slow.longestUs} | ${least.slow.longest.slice(0, 30)} | ${value.bytes.toLocaleString("en")} |`)
    }
    say("")

    // -- ten at once, and a worker beside them --------------------------------------------------------------------------
    const worker = await Effect.runPromise(Scope.provide(Redis.make({ url: server.url }), scope))
    // 50 run locks held for `ms`, from `at` (a prefix of their own per run); resolves once all 50 run.
    const hold = async (at: string, ms: number) => {
      let started = 0
      const held = LockOptions.unsafeMake({ lock: "while_executing", lockLease: "1 second", lockPrefix: at })
      const jobs = Effect.runPromise(
        Effect.forEach(
          Array.from({ length: 50 }, (_, i) => i),
          (i) =>
            Middleware.server(
              held,
              { worker: "HeldJob", queue: "q", args: [i], jid: `held-${i}` },
              Effect.andThen(Effect.sync(() => started++), Effect.sleep(ms))
            ).pipe(
              Effect.map((outcome) => outcome._tag as string),
              Effect.catch((error) => Effect.succeed(error._tag as string))
            ),
          { concurrency: "unbounded" }
        ).pipe(
          Effect.provideService(Redis.RedisService, worker),
          Effect.provide(MemoryQueue.layer()),
          Effect.provideService(References.MinimumLogLevel, "None")
        )
      )
      while (started < 50) await new Promise((resolve) => setTimeout(resolve, 10))
      return jobs
    }
    const tally = (outcomes: ReadonlyArray<string>) => {
      const counts: Record<string, number> = {}
      for (const outcome of outcomes) counts[outcome] = (counts[outcome] ?? 0) + 1
      return Object.entries(counts).map(([s, n]) => `${n} ${s}`).join(", ")
    }
    // The control: the same holds with no page load. A machine that loses these loses leases whatever the UI does.
    const control = tally(await (await hold(`${prefix}c`, 6000)))
    const pings: Array<number> = []
    let pinging = true
    const pinger = (async () => {
      while (pinging) {
        const sent = performance.now()
        await probe.ping()
        pings.push(performance.now() - sent)
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
    })()
    const rssBefore = process.memoryUsage().rss
    let rssPeak = rssBefore
    const rssTimer = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 20)
    const jobs = await hold(`${prefix}w`, 6000)

    await probe.call("SLOWLOG", "RESET")
    const loadStarted = performance.now()
    const loads = await Promise.all(
      Array.from({ length: 10 }, () => get("/?count=1000").catch((error: unknown) => ({ status: String(error), bytes: 0 })))
    )
    const loadMs = performance.now() - loadStarted
    const loadSlow = await slowlog(probe)
    const outcomes = await jobs
    pinging = false
    await pinger
    clearInterval(rssTimer)
    const statuses: Record<string, number> = {}
    for (const load of loads) statuses[String(load.status)] = (statuses[String(load.status)] ?? 0) + 1
    say("## Ten page loads at once (`GET /?count=1000`), beside a worker")
    say("")
    say("A worker's store (its own connection, in this process) holds 50 `while_executing` run locks on a 1 s lease, each")
    say("performing for 6 s; the ten loads start once all 50 run. A PING from another client every 10 ms meanwhile.")
    say("")
    say("| measure | value |")
    say("| --- | --- |")
    say(`| statuses | ${Object.entries(statuses).map(([s, n]) => `${n}× ${s}`).join(", ")} |`)
    say(`| all ten answered in (ms) | ${round(loadMs, 0)} |`)
    say(`| Redis time of the ten (ms, SLOWLOG) | ${round(loadSlow.totalUs / 1000, 1)} |`)
    say(`| longest call (µs) | ${loadSlow.longestUs} (${loadSlow.longest.slice(0, 30)}) |`)
    say(`| PING, longest wait (ms) | ${round(Math.max(...pings), 1)} |`)
    say(`| this process' RSS growth at peak (MB) | ${round((rssPeak - rssBefore) / 1e6, 0)} |`)
    say(`| the worker's 50 run locks | ${tally(outcomes)} |`)
    say(`| control: the same 50, no page load, just before | ${control} |`)
    say("")
    probe.disconnect()
    writeFileSync(new URL(`./results/${out}.md`, import.meta.url), lines.join("\n") + "\n")
    log(`\nwrote bench/results/${out}.md`)
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
