/**
 * The `PersistedQueue` adapter under random sequences: enqueues of three digests of five workers (one per lock type
 * that locks: `until_executed`, `until_executing`, `while_executing`, `until_and_while_executing`, `until_expired`),
 * each job planned to fail 0 to 3 of its 3 attempts (3: it dies through `onDeath`), and takes granted a few at a
 * time to two takers (a taken job waits at a gate, before the middleware, until a take lets it through), with now
 * and then a drain (every waiting job let through, until none is left). After every step:
 *
 * - no digest ever ran twice at once, for every type but `until_executing` (which gives its lock up before the
 *   perform, so a second job of the digest may run beside the first);
 * - every accepted job (`Enqueued`) ran to success once, or is still in the queue (`exists`), or died through
 *   `onDeath`; none ran to success twice;
 * - once the queue is idle (after a drain): no lock held, queue or run, but `until_expired`'s, which is held by an
 *   accepted job's jid and ends at its TTL.
 *
 * On Effect's memory store (locks on the library's memory store), then a few runs on its Redis store (locks on the
 * same private redis-server) and on its SQL store (a PostgreSQL database of this file's own; locks on the memory
 * store). Real time: retries 5 ms apart (1 s on the SQL store, which rounds delays up to whole seconds).
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=200 npx vitest run test/persistedqueue.properties.test.ts
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as fc from "fast-check"
import * as UniquePersistedQueue from "../src/adapters/PersistedQueue.js"
import type * as Job from "../src/Job.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import type * as LockType from "../src/LockType.js"
import * as Redis from "../src/Redis.js"
import * as UniqueJob from "../src/UniqueJob.js"
import { until } from "./support/bullmq.js"
import * as PQ from "./support/persistedQueue.js"
import * as RedisTest from "./support/redis.js"

const locks = [
  "until_executed",
  "until_executing",
  "while_executing",
  "until_and_while_executing",
  "until_expired"
] as const satisfies ReadonlyArray<LockType.LockType>
const digests = 3
const maxAttempts = 3

type Command =
  | { readonly _tag: "enqueue"; readonly lock: number; readonly digest: number; readonly failures: number }
  | { readonly _tag: "take"; readonly n: number }
  | { readonly _tag: "drain" }

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    arbitrary: fc.record({
      lock: fc.nat(locks.length - 1),
      digest: fc.nat(digests - 1),
      // Mostly jobs that end well; sometimes one that fails once or twice, or every attempt.
      failures: fc.oneof({ arbitrary: fc.constant(0), weight: 4 }, { arbitrary: fc.integer({ min: 1, max: 3 }), weight: 2 })
    }).map((r) => ({ _tag: "enqueue" as const, ...r })),
    weight: 5
  },
  { arbitrary: fc.integer({ min: 1, max: 3 }).map((n) => ({ _tag: "take" as const, n })), weight: 3 },
  { arbitrary: fc.constant({ _tag: "drain" as const }), weight: 1 }
)

const runs = Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? 30)

interface Variant {
  readonly name: string
  readonly store: PQ.Store<never>
  readonly services: Layer.Layer<Redis.RedisService, unknown>
  readonly numRuns: number
  readonly maxLength: number
}

const variants: ReadonlyArray<Variant> = [
  { name: "memory store", store: PQ.memory, services: Redis.layerMemory, numRuns: runs, maxLength: 30 },
  {
    name: "Redis store",
    store: PQ.redis as PQ.Store<never>,
    services: Layer.merge(RedisTest.layer(), PQ.layerEffectRedis.pipe(Layer.provide(RedisTest.layerServer))) as Layer.Layer<
      Redis.RedisService,
      unknown
    >,
    numRuns: Math.max(3, Math.round(runs / 6)),
    maxLength: 20
  },
  {
    // PostgreSQL keeps the jobs, the memory store the locks. Its delays are whole seconds (a retry waits 1 s): few runs.
    name: "SQL store",
    store: PQ.sql as PQ.Store<never>,
    services: Layer.merge(Redis.layerMemory, PQ.layerPg("properties")) as Layer.Layer<Redis.RedisService, unknown>,
    numRuns: Math.max(2, Math.round(runs / 10)),
    maxLength: 12
  }
]

/** One sequence against a fresh adapter (its own queue, store and lock prefix); fails with the first broken rule. */
const check = (variant: Variant, commands: ReadonlyArray<Command>) =>
  Effect.gen(function*() {
    const { adapter } = yield* PQ.adapterOn(variant.store, {
      maxAttempts,
      retrySchedule: Schedule.spaced("5 millis")
    })
    const lockPrefix = RedisTest.uniquePrefix("pqprop")
    const workers = locks.map((lock) =>
      UniqueJob.unsafeMake({
        worker: `PQProp_${lock}`,
        queue: adapter.name,
        lockPrefix,
        lock,
        // A run lock met is a failure the queue retries (not a skip): every job accepted runs or dies. Only the types
        // with a run lock take a server strategy.
        onConflict: lock === "while_executing" || lock === "until_and_while_executing"
          ? { client: "log", server: "raise" }
          : "log",
        ...(lock === "until_expired" ? { lockTtl: "1 minute" } : {})
      })
    )
    const byWorker = new Map(workers.map((w, i) => [w.worker, { unique: w, lock: locks[i]! }]))
    const plan = new Map<string, number>()
    const accepted: Array<{ readonly jid: string; readonly queue: string }> = []
    const ran = new Map<string, number>()
    const died = new Set<string>()
    const running = new Map<string, number>()
    const overlaps: Array<string> = []
    let permits = 0
    let open = false

    const context = Context.add(yield* Effect.context<Redis.RedisService>(), JobQueue, adapter)
    const handles = new Map<string, (job: Job.Job) => Effect.Effect<unknown, unknown>>()
    for (const [name, { lock, unique }] of byWorker) {
      const handle = yield* UniquePersistedQueue.processor(unique, (args, _running, job) =>
        Effect.suspend(() => {
          const key = `${lock}/${String(args[0])}`
          const now = (running.get(key) ?? 0) + 1
          running.set(key, now)
          if (now > 1 && lock !== "until_executing") overlaps.push(`${key}: ${now} runs at once (jid ${job.jid})`)
          const fails = (job.retryCount ?? 0) < (plan.get(job.jid) ?? 0)
          return Effect.sleep(2).pipe(
            Effect.andThen(
              fails ? Effect.fail(new Error("planned failure")) : Effect.sync(() => ran.set(job.jid, (ran.get(job.jid) ?? 0) + 1))
            ),
            Effect.ensuring(Effect.sync(() => running.set(key, running.get(key)! - 1)))
          )
        }))
      handles.set(name, (job) => Effect.provideContext(handle(job), context))
    }
    // The gate: a taken job waits here, before the middleware (so it holds no run lock), until a take lets it on.
    const gate = until(
      Effect.sync(() => {
        if (open) return true
        if (permits === 0) return false
        permits--
        return true
      }),
      120_000
    )
    yield* adapter.work((job) => Effect.andThen(gate, handles.get(job.worker)!(job)), {
      concurrency: 2,
      onDeath: (job) =>
        Effect.andThen(
          Effect.sync(() => died.add(job.jid)),
          Effect.provideContext(byWorker.get(job.worker)!.unique.died(job), context)
        )
    })

    const ended = (jid: string) => (ran.get(jid) ?? 0) > 0 || died.has(jid)
    const invariants = (step: string) =>
      Effect.gen(function*() {
        assert.deepStrictEqual(overlaps, [], `${step}: a digest ran twice at once`)
        for (const [jid, n] of ran) assert.isAtMost(n, 1, `${step}: ${jid} ran to success ${n} times`)
        if (accepted.length === 0) return
        const presence = yield* adapter.exists(accepted)
        accepted.forEach(({ jid }, i) => {
          // Read after exists: a job that ended between the two was recorded before it left the queue.
          assert.isTrue(presence[i] === "exists" || ended(jid), `${step}: accepted ${jid} neither ran, nor died, nor exists`)
        })
      })
    const holdersOf = (unique: UniqueJob.UniqueJob, digest: string, phase: LockType.Phase) =>
      Effect.flatMap(Redis.RedisService, (redis) => redis.holders(Lock.keyOf(unique.definition, digest, phase)))
    const idle = (step: string) =>
      Effect.gen(function*() {
        open = true
        const done = yield* until(Effect.sync(() => accepted.every(({ jid }) => ended(jid))), 60_000)
        assert.isTrue(done, `${step}: the queue did not drain`)
        const acceptedJids = new Set(accepted.map(({ jid }) => jid))
        for (const [i, unique] of workers.entries()) {
          for (let d = 0; d < digests; d++) {
            const digest = yield* unique.digest([d])
            // A run lock is released as its run ends; a queue lock as its job ends (or when it dies): wait a little
            // for the release that follows the last recorded end.
            const free = (phase: LockType.Phase) =>
              until(Effect.map(holdersOf(unique, digest, phase), (hs) => hs.length === 0), 5_000)
            assert.isTrue(yield* free("run"), `${step}: ${locks[i]} digest ${d}: a run lock is left`)
            if (locks[i] === "until_expired") {
              const held = yield* holdersOf(unique, digest, "queue")
              assert.isAtMost(held.length, 1)
              for (const h of held) {
                assert.isTrue(acceptedJids.has(h.jid), `${step}: until_expired held by ${h.jid}, never accepted`)
                assert.isDefined(h.expiresAt, `${step}: until_expired's lock has no TTL`)
              }
            } else {
              assert.isTrue(yield* free("queue"), `${step}: ${locks[i]} digest ${d}: a queue lock is left`)
            }
          }
        }
        open = false
      })

    for (const [k, c] of commands.entries()) {
      const step = `step ${k} ${JSON.stringify(c)}`
      switch (c._tag) {
        case "enqueue": {
          const outcome = yield* Effect.provideContext(workers[c.lock]!.enqueue([c.digest]), context)
          if (outcome._tag === "Enqueued") {
            plan.set(outcome.job.jid, c.failures)
            accepted.push({ jid: outcome.job.jid, queue: outcome.job.queue })
          } else {
            assert.strictEqual(outcome._tag, "Skipped", step)
            assert.notStrictEqual(locks[c.lock], "while_executing", `${step}: while_executing never locks at enqueue`)
          }
          break
        }
        case "take": {
          permits += c.n
          yield* Effect.sleep(10)
          break
        }
        case "drain": {
          yield* idle(step)
          break
        }
      }
      yield* invariants(step)
    }
    yield* idle("the end")
    yield* invariants("the end")
  })

for (const variant of variants) {
  describe(`PersistedQueue adapter properties: ${variant.name}`, () => {
    // One set of services (and, for the Redis store, one redis-server) for every run; each run its own queue.
    layer(variant.services, { excludeTestServices: true })((it) => {
      it.effect("no digest runs twice at once; every accepted job runs, waits or dies; no lock left once idle", () =>
        Effect.gen(function*() {
          const services = yield* Effect.context<Redis.RedisService>()
          yield* Effect.promise(() =>
            fc.assert(
              fc.asyncProperty(fc.array(command, { minLength: 5, maxLength: variant.maxLength }), (commands) =>
                Effect.runPromise(check(variant, commands).pipe(Effect.scoped, Effect.provideContext(services)))),
              { numRuns: variant.numRuns }
            )
          )
        }), { timeout: 120_000 })
    })
  })
}
