/**
 * Properties of what the admin UI shows of the past and of the spans, on a real Redis. Random runs of lock calls
 * (take, duplicate, release) with flushes between them: the buckets add up to exactly what the counters counted, none
 * twice. Random runs of reaper passes: the journal keeps every pass, newest first. Random runs of lock calls under a
 * recording tracer: every refused duplicate's span links to exactly the span of the hold that refused it.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=100 npx vitest run test/telemetry.properties.test.ts
 */
import * as Effect from "effect/Effect"
import * as fc from "fast-check"
import * as Metric from "effect/Metric"
import * as Tracer from "effect/Tracer"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as History from "../src/History.js"
import * as Lock from "../src/Lock.js"
import * as Metrics from "../src/Metrics.js"
import * as LockOptions from "../src/Options.js"
import * as Reaper from "../src/Reaper.js"
import * as RedisTest from "./support/redis.js"
import * as Harness from "./support/web.js"

const runs = Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? 40)

let harness: Harness.Harness
beforeAll(async () => {
  harness = await Harness.start()
})
afterAll(() => harness?.close())

type Step =
  | { readonly _tag: "take"; readonly digest: number; readonly jid: number }
  | { readonly _tag: "release"; readonly digest: number; readonly jid: number }
  | { readonly _tag: "flush" }

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ _tag: fc.constant("take" as const), digest: fc.nat(3), jid: fc.nat(2) }),
  fc.record({ _tag: fc.constant("release" as const), digest: fc.nat(3), jid: fc.nat(2) }),
  fc.constant({ _tag: "flush" as const })
)

const counters = {
  acquired: Metrics.acquired.of("until_executing", "queue"),
  conflicts: Metrics.conflicts.of("until_executing", "queue"),
  released: Metrics.released.of("until_executing", "queue")
}
const totals = () =>
  Effect.runSync(Effect.all({
    acquired: Effect.map(Metric.value(counters.acquired), (s) => s.count),
    conflicts: Effect.map(Metric.value(counters.conflicts), (s) => s.count),
    released: Effect.map(Metric.value(counters.released), (s) => s.count)
  }))

describe("telemetry, by property", () => {
  it("the buckets add up to what the counters counted since the run began: every count flushed once", async () => {
    let n = 0
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 30 }), async (steps) => {
        const prefix = RedisTest.uniquePrefix(`flush${++n}`)
        const definition = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix })
        // Whatever earlier runs left unflushed goes elsewhere first.
        await harness.run(History.flush(RedisTest.uniquePrefix("drain")))
        const before = totals()
        for (const s of steps) {
          if (s._tag === "flush") await harness.run(History.flush(prefix))
          else {
            const target = { digest: `${prefix}:d${s.digest}`, jid: `j${s.jid}` }
            await harness.run(Effect.result(s._tag === "take" ? Effect.asVoid(Lock.lock(definition, target)) : Effect.asVoid(Lock.unlock(definition, target))))
          }
        }
        await harness.run(History.flush(prefix))
        const after = totals()
        const buckets = await harness.run(History.buckets(prefix))
        for (const event of ["acquired", "conflicts", "released"] as const) {
          const flushed = buckets.reduce((sum, b) => sum + (b.counts["until_executing"]?.[event] ?? 0), 0)
          assert.strictEqual(flushed, after[event] - before[event], `${event}: ${JSON.stringify(steps)}`)
        }
      }),
      { numRuns: runs }
    )
  })

  it("the journal keeps every reaper pass that ran, dry or not, newest first, with what it removed", async () => {
    let n = 0
    await fc.assert(
      fc.asyncProperty(fc.array(fc.record({ dryRun: fc.boolean(), expired: fc.nat(3) }), { minLength: 1, maxLength: 6 }), async (passes) => {
        const prefix = RedisTest.uniquePrefix(`journal${++n}`)
        const expiring = LockOptions.unsafeMake({ lock: "until_expired", lockPrefix: prefix, lockTtl: 20 })
        const ran: Array<{ dryRun: boolean; members: number }> = []
        let i = 0
        for (const pass of passes) {
          for (let k = 0; k < pass.expired; k++) await harness.run(Lock.lock(expiring, { digest: `${prefix}:e${i++}`, jid: "e" }))
          await harness.run(Effect.sleep(40))
          const done = await harness.run(Reaper.runOnce({ prefix, dryRun: pass.dryRun }))
          ran.push({ dryRun: pass.dryRun, members: done.members })
        }
        const kept = await harness.run(History.passes(prefix))
        assert.deepStrictEqual(kept.map((p) => ({ dryRun: p.dryRun, members: p.members })), ran.reverse())
        for (let k = 1; k < kept.length; k++) assert.isAtLeast(kept[k - 1]!.at, kept[k]!.at)
      }),
      { numRuns: Math.max(5, Math.round(runs / 4)) }
    )
  })

  it("every refused duplicate's span links to the span of the hold that refused it, and only to it", async () => {
    let n = 0
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 30 }), async (steps) => {
        const prefix = RedisTest.uniquePrefix(`links${++n}`)
        const definition = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix })
        const made: Array<{ name: string; spanId: string; traceId: string; links: Array<Tracer.SpanLink> }> = []
        const builtIn = Effect.runSync(Effect.tracer)
        const tracer = Tracer.make({
          span: (options) => {
            const span = builtIn.span(options)
            const kept: Array<Tracer.SpanLink> = []
            made.push({ name: options.name, spanId: span.spanId, traceId: span.traceId, links: kept })
            const addLinks = span.addLinks.bind(span)
            span.addLinks = (more) => {
              kept.push(...more)
              addLinks(more)
            }
            return span
          },
          ...(builtIn.context === undefined ? {} : { context: builtIn.context })
        })
        // The model: which jid holds each digest, and the span of its (first) acquisition.
        const holder = new Map<number, { jid: number; spanId: string }>()
        for (const s of steps) {
          if (s._tag === "flush") continue
          const target = { digest: `${prefix}:d${s.digest}`, jid: `j${s.jid}` }
          const at = made.length
          const outcome = await harness.run(Effect.result(Effect.withTracer(
            s._tag === "take" ? Effect.asVoid(Lock.lock(definition, target)) : Effect.asVoid(Lock.unlock(definition, target)),
            tracer
          )))
          const span = made[at]!
          const held = holder.get(s.digest)
          if (s._tag === "release") {
            if (held?.jid === s.jid) holder.delete(s.digest)
            continue
          }
          if (held === undefined) {
            assert.strictEqual(outcome._tag, "Success")
            holder.set(s.digest, { jid: s.jid, spanId: span.spanId })
            assert.deepStrictEqual(span.links, [])
          } else if (held.jid === s.jid) {
            assert.strictEqual(outcome._tag, "Success", "re-entrant by jid")
          } else {
            assert.strictEqual(outcome._tag, "Failure")
            assert.deepStrictEqual(span.links.map((l) => l.span.spanId), [held.spanId], JSON.stringify(steps))
          }
        }
      }),
      { numRuns: runs }
    )
  })
})
