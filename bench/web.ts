/**
 * The admin UI and telemetry (issue 21), on a private redis-server:
 *
 * - server time of each page with N locks in the index (100,000 by default): the handler called in process (no
 *   network), rendering included, against the goal of 50 ms; and the Redis time each page costs;
 * - the metrics panel's Redis cost per job: the process' counts go to Redis in one script call per flush, so per job
 *   it is the flush's cost over the jobs between two flushes, as a ratio to the job's own lock calls;
 * - the cost of tracing: lock + unlock cycles with no tracer and under OpenTelemetry (NodeSdk, a span processor that
 *   exports nowhere), Node CPU per cycle and throughput, interleaved rounds.
 *
 *   npm run bench -- --web [--locks=N]      writes bench/results/web.md
 */
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import { SimpleSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base"
import { writeFileSync } from "node:fs"
import * as Effect from "effect/Effect"
import * as HttpEffect from "effect/http/HttpEffect"
import * as HttpRouter from "effect/http/HttpRouter"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as References from "effect/References"
import * as Scope from "effect/Scope"
import * as History from "../dist/History.js"
import * as Lock from "../dist/Lock.js"
import * as LockOptions from "../dist/Options.js"
import * as Redis from "../dist/Redis.js"
import * as RedisServer from "../dist/testing/RedisServer.js"
import * as Web from "../dist/Web.js"
import { Redis as IORedis } from "ioredis"
import { delta, loopFibers, median, Probe, quantile, recorder, round, spyCommands, sum, withCpu } from "./harness.js"

const prefix = "webbench"

// Locks of every kind the page shows, with lockInfo, so each row reads a full entry.
const seed = (locks: number) =>
  Effect.flatMap(Redis.RedisService, (store) =>
    Effect.forEach(
      Array.from({ length: locks }, (_, i) => i),
      (i) =>
        store.lock({ prefix, name: `${prefix}:lock${i}` }, {
          jid: `job-${i}`,
          limit: 1,
          ttlMs: 3_600_000,
          leaseMs: 0,
          info: JSON.stringify({ type: "until_executed", limit: 1, ttl: 3_600_000, timeout: 0, worker: "ReportJob", queue: "default", args: [i, { user: `u${i % 97}` }] }),
          queue: "default",
          fenced: false
        }),
      { concurrency: 256, discard: true }
    ))

const pageTimes = async (
  handler: (request: Request) => Promise<Response>,
  probe: Probe,
  sent: ReadonlyMap<string, number>,
  path: string,
  samples: number
) => {
  const times: Array<number> = []
  const sentBefore = sum([...sent.values()])
  const before = await probe.snapshot()
  let bytes = 0
  for (let i = 0; i < samples; i++) {
    const started = performance.now()
    const response = await handler(new Request(`http://127.0.0.1${path}`))
    const text = await response.text()
    times.push(performance.now() - started)
    bytes = text.length
    if (response.status !== 200) throw new Error(`${path}: ${response.status} ${text.slice(0, 200)}`)
  }
  const spent = delta(before, await probe.snapshot())
  const redisUs = sum(Object.values(spent.commands).map((c) => c.usec)) / samples
  const calls = (sum([...sent.values()]) - sentBefore) / samples
  return { path, median: median(times), p95: quantile(times, 0.95), max: Math.max(...times), redisUs, calls, bytes }
}

const discard: SpanExporter = { export: (_spans, done) => done({ code: 0 }), shutdown: () => Promise.resolve() }

export const main = async (log: (line: string) => void, locks: number): Promise<void> => {
  const scope = Effect.runSync(Scope.make())
  const { lines, out } = recorder(log)
  try {
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    // The store on a client of our own, so the commands it sends are counted (round trips, not the scripts' inner calls).
    const client = new IORedis(server.url)
    const sent = spyCommands(client)
    const store = await Effect.runPromise(Redis.makeFromClient(client))
    const run = <A, E>(effect: Effect.Effect<A, E, Redis.RedisService>) =>
      Effect.runPromise(Effect.provideService(effect, Redis.RedisService, store).pipe(Effect.provideService(References.MinimumLogLevel, "Error")))
    const probe = await Probe.connect(server.url)
    out(`# The admin UI and telemetry (issue 21)`)
    out("")
    out(`Private redis-server ${server.url}; ${new Date().toISOString()}; Node ${process.version}.`)
    out("")

    // -- pages -------------------------------------------------------------------------------------------------------
    const seeded = await withCpu(() => run(seed(locks)))
    out(`## Server time per page, ${locks.toLocaleString("en")} locks in the index`)
    out("")
    out(`Seeded in ${round(seeded.cpuUs / 1e6, 1)} s of Node CPU. The handler is called in process (no network); the time`)
    out(`includes every Redis call and the rendering. Goal: under 50 ms.`)
    out("")
    // The admin UI's routes as the one app of an HttpRouter, called in process as a web handler.
    const services = await run(Effect.context<Redis.RedisService>())
    const app = await Effect.runPromise(Scope.provide(HttpRouter.toHttpEffect(HttpRouter.addAll(Web.router({ prefix }))), scope))
    const handler = HttpEffect.toWebHandlerWith<
      Redis.RedisService,
      Redis.RedisService | HttpServerRequest.HttpServerRequest | Scope.Scope
    >(services)(app)
    // A cursor from the middle of the index, as a walk reaches it.
    let cursor = "0"
    for (let i = 0; i < 50; i++) {
      const page = await run(store.scan(prefix, cursor, `${prefix}:*`, 100))
      cursor = page.cursor
    }
    const digest = encodeURIComponent(`${prefix}:lock${Math.floor(locks / 2)}`)
    const paths = [
      "/locks",
      `/locks?cursor=${cursor}`,
      "/locks?type=until_executed&queue=default&worker=Report&stale=1",
      "/locks?count=1000",
      `/lock?digest=${digest}`,
      "/reaper",
      "/metrics",
      "/api/locks"
    ]
    for (const path of paths) await pageTimes(handler, probe, sent, path, 5) // warm-up
    out("| page | median ms | p95 ms | max ms | commands sent | Redis µs | HTML bytes | under 50 ms |")
    out("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for (const path of paths) {
      const t = await pageTimes(handler, probe, sent, path, 40)
      out(`| \`${path.replace(/\|/g, "\\|")}\` | ${round(t.median, 2)} | ${round(t.p95, 2)} | ${round(t.max, 2)} | ${round(t.calls, 1)} | ${round(t.redisUs, 0)} | ${t.bytes} | ${t.p95 < 50 ? "yes" : "no"} |`)
    }
    out("")

    // -- the metrics panel's cost per job ------------------------------------------------------------------------------
    const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
    const jobs = 20_000
    const job = (i: number) =>
      Effect.andThen(
        Lock.lock(definition, { digest: `${prefix}:job${i}`, jid: `j${i}` }),
        Lock.unlock(definition, { digest: `${prefix}:job${i}`, jid: `j${i}` })
      )
    await run(History.flush(prefix))
    const beforeJobs = await probe.snapshot()
    const started = performance.now()
    await run(Effect.forEach(Array.from({ length: jobs }, (_, i) => i), job, { concurrency: 32, discard: true }))
    const jobsMs = performance.now() - started
    const jobDelta = delta(beforeJobs, await probe.snapshot())
    const jobUs = sum(Object.values(jobDelta.commands).map((c) => c.usec)) / jobs
    const jobCalls = (jobDelta.commands.evalsha?.calls ?? 0) / jobs
    const flushes = 200
    const beforeFlush = await probe.snapshot()
    for (let i = 0; i < flushes; i++) {
      await run(Effect.andThen(job(jobs + i), History.flush(prefix)))
    }
    const flushDelta = delta(beforeFlush, await probe.snapshot())
    // Each round was one job (two calls) and one flush: the flush's share is what is left.
    const flushUs = (sum(Object.values(flushDelta.commands).map((c) => c.usec)) - flushes * jobUs) / flushes
    const rate = jobs / (jobsMs / 1000)
    const perJob = (jobsPerFlush: number) => ({ calls: 1 / jobsPerFlush, us: flushUs / jobsPerFlush })
    const atRate = perJob(rate * 10)
    const atOne = perJob(10)
    out(`## The metrics panel's Redis cost per job`)
    out("")
    out(`A job here is one lock and one unlock (\`until_executed\`): ${round(jobCalls, 2)} script calls, ${round(jobUs, 1)} µs of`)
    out(`Redis time. \`History.layer\` adds what the process counted to the minute's bucket in one script call per flush`)
    out(`(every 10 s by default), whatever the number of jobs: ${round(flushUs, 1)} µs of Redis time per flush.`)
    out("")
    out("| jobs per second (one process) | metrics calls per job | metrics µs per job | ratio to the lock calls (calls / µs) |")
    out("| ---: | ---: | ---: | --- |")
    out(`| ${Math.round(rate).toLocaleString("en")} (this run) | ${atRate.calls.toExponential(2)} | ${atRate.us.toExponential(2)} | ${(atRate.calls / jobCalls).toExponential(2)} / ${(atRate.us / jobUs).toExponential(2)} |`)
    out(`| 1 | ${atOne.calls.toFixed(2)} | ${atOne.us.toFixed(2)} | ${(atOne.calls / jobCalls).toFixed(3)} / ${(atOne.us / jobUs).toFixed(3)} |`)
    out("")

    // -- tracing -------------------------------------------------------------------------------------------------------
    const traced = NodeSdk.layer(() => ({ resource: { serviceName: "bench" }, spanProcessor: new SimpleSpanProcessor(discard) }))
    const tracedServices = await Effect.runPromise(
      Scope.provide(Layer.build(Layer.merge(traced, Layer.succeed(Redis.RedisService, store))), scope)
    )
    const cycle = (worker: number, i: number) =>
      Effect.andThen(
        Lock.lock(definition, { digest: `${prefix}:t${worker}:${i}`, jid: `t${i}` }),
        Lock.unlock(definition, { digest: `${prefix}:t${worker}:${i}`, jid: `t${i}` })
      )
    const rounds = { untraced: [] as Array<{ perSec: number; cpuUs: number }>, traced: [] as Array<{ perSec: number; cpuUs: number }> }
    for (let r = 0; r < 6; r++) {
      for (const kind of r % 2 === 0 ? (["untraced", "traced"] as const) : (["traced", "untraced"] as const)) {
        const measured = await withCpu(() =>
          kind === "traced"
            ? Effect.runPromise(Effect.provideContext(loopFibers(32, 1500, cycle), tracedServices))
            : run(loopFibers(32, 1500, cycle))
        )
        if (r === 0) continue
        rounds[kind].push({ perSec: measured.value.cycles / (measured.value.ms / 1000), cpuUs: measured.cpuUs / measured.value.cycles })
      }
    }
    const med = (xs: ReadonlyArray<{ perSec: number; cpuUs: number }>) => ({ perSec: median(xs.map((x) => x.perSec)), cpuUs: median(xs.map((x) => x.cpuUs)) })
    const u = med(rounds.untraced)
    const t = med(rounds.traced)
    out(`## The cost of tracing`)
    out("")
    out(`Lock + unlock cycles, 32 fibers, 1.5 s rounds, the first round of each dropped, medians of 5 interleaved rounds.`)
    out(`Traced: @effect/opentelemetry's NodeSdk with a span processor that exports nowhere (two spans per cycle).`)
    out("")
    out("| | cycles/s | Node CPU µs per cycle |")
    out("| --- | ---: | ---: |")
    out(`| no tracer | ${Math.round(u.perSec)} | ${round(u.cpuUs, 1)} |`)
    out(`| OpenTelemetry | ${Math.round(t.perSec)} | ${round(t.cpuUs, 1)} |`)
    out(`| ratio (traced / untraced) | ${round(t.perSec / u.perSec, 2)}× | ${round(t.cpuUs / u.cpuUs, 2)}× |`)
    out("")
    await probe.close()
    client.disconnect()
    writeFileSync(new URL("./results/web.md", import.meta.url), lines.join("\n") + "\n")
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
