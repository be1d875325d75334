/**
 * The BullMQ adapter against a model of the `JobQueue` contract: random sequences of pushes, schedules, a worker
 * taking, completing, failing (one retry, then dead) and rescheduling jobs by hand (BullMQ's manual fetch, with the
 * job's token), removals and kills, on a real BullMQ over a private redis-server. After every step, `exists` of every
 * jid seen, and the answer of the step itself, must be the model's: waiting, delayed and active jobs exist;
 * completed, failed, removed and never-seen ones do not; only a waiting or delayed job can be removed; a job being
 * performed that `schedule` receives comes back delayed under its id; `describe` of every jid tells the model's state.
 * Also: Workers of real queues under until_executed, a delivery meeting its own run lock, and run locks lost while
 * the processor's job runs (the perform stops, the attempt fails LockLost).
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=200 npx vitest run test/bullmq.properties.test.ts
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { type Job as BullJob, DelayedError, Queue, Worker } from "bullmq"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as fc from "fast-check"
import * as Scope from "effect/Scope"
import * as TestClock from "effect/testing/TestClock"
import { Redis as IORedis, ReplyError } from "ioredis"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as UniqueQueue from "../src/adapters/UniqueQueue.js"
import { LockLost } from "../src/Errors.js"
import { RedisError } from "../src/store/Store.js"
import * as Job from "../src/Job.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as Strategy from "../src/Strategy.js"
import { uniqueName } from "./support/bullmq.js"

type State = "waiting" | "delayed" | "active" | "completed" | "failed" | "gone"

type Command =
  | { readonly _tag: "push" }
  | { readonly _tag: "schedule" }
  | { readonly _tag: "take" }
  | { readonly _tag: "complete"; readonly pick: number }
  | { readonly _tag: "fail"; readonly pick: number }
  | { readonly _tag: "reschedule"; readonly pick: number }
  | { readonly _tag: "remove"; readonly pick: number; readonly ended: boolean }
  | { readonly _tag: "kill" }

// Weighted so that sequences often reach the states that matter: jobs taken, then ended, then asked about.
const command: fc.Arbitrary<Command> = fc.oneof(
  { arbitrary: fc.constant({ _tag: "push" as const }), weight: 3 },
  { arbitrary: fc.constant({ _tag: "schedule" as const }), weight: 1 },
  { arbitrary: fc.constant({ _tag: "take" as const }), weight: 3 },
  { arbitrary: fc.nat(20).map((pick) => ({ _tag: "complete" as const, pick })), weight: 2 },
  { arbitrary: fc.nat(20).map((pick) => ({ _tag: "fail" as const, pick })), weight: 2 },
  { arbitrary: fc.nat(20).map((pick) => ({ _tag: "reschedule" as const, pick })), weight: 2 },
  {
    arbitrary: fc.record({ pick: fc.nat(20), ended: fc.boolean() }).map((r) => ({ _tag: "remove" as const, ...r })),
    weight: 3
  },
  { arbitrary: fc.constant({ _tag: "kill" as const }), weight: 1 }
)

/** The state BullMQ reports for a job in each model state. */
const bullState: Record<State, string> = {
  waiting: "waiting",
  delayed: "delayed",
  active: "active",
  completed: "completed",
  failed: "failed",
  gone: "unknown"
}

const runs = Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? 50)
const hour = 3_600_000

describe("BullMQ adapter: what puts a job back before its perform", () => {
  // A failover's or a busy server's answer passes, so the job goes back with no attempt spent; an answer Redis would
  // give again (a wrong type, a script's error, a refused password) fails it as its attempts say.
  const passingCodes = ["CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "LOADING", "BUSY", "MASTERDOWN", "READONLY"]
  const otherCodes = ["ERR", "WRONGTYPE", "NOSCRIPT", "NOAUTH", "WRONGPASS", "NOPERM", "OOM", "EXECABORT", "BUSYKEY"]
  it("a reply Redis gave puts the job back exactly when it is a failover's or a busy server's", () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...passingCodes, ...otherCodes),
        fc.string({ maxLength: 40 }),
        fc.option(fc.constantFrom("lua/handoff.lua:12", "lua/lock.lua:3"), { nil: undefined }),
        (code, rest, script) => {
          const reply = new ReplyError(`${code} ${rest}`)
          const failure = new RedisError({ operation: "handoff", reason: reply.message, cause: reply, script })
          assert.strictEqual(BullMQ.failedBeforePerform(failure), passingCodes.includes(code), reply.message)
        }
      ),
      { numRuns: runs * 4 }
    )
  })

  it("no answer puts it back, unless its reason is one a retry meets again; a lost run lock too; nothing else", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("Connection is closed.", "no answer within 5s (the timeout option)", "Too many Cluster redirections"),
        // A step of a batch that met a wrong-typed key fails with that error's words, not a ReplyError (issue 47, item 8).
        fc.constantFrom(
          "",
          "WRONGPASS invalid password",
          "NOAUTH Authentication required",
          "unexpected reply: 3",
          "WRONGTYPE Operation against a key holding the wrong kind of value"
        ),
        (reason, refused) => {
          const failure = new RedisError({ operation: "lock", reason: `${reason}${refused === "" ? "" : ` ${refused}`}`, cause: new Error(reason) })
          assert.strictEqual(BullMQ.failedBeforePerform(failure), refused === "")
        }
      )
    )
    assert.isTrue(BullMQ.failedBeforePerform(new LockLost({ digest: "d", jid: "j", lockType: "while_executing", reason: "gone" })))
    assert.isFalse(BullMQ.failedBeforePerform(new Error("the job's own failure")))
    assert.isFalse(BullMQ.failedBeforePerform("a string"))
  })
})

describe("BullMQ adapter: a dead job's lock", () => {
  // A job failing for good releases its queue lock, which often has no TTL: a release that finds no connection is
  // tried again (Lock.releaseRetry, for up to 30 s), so a blip of any length within that never leaves it for good.
  it("a release that finds no connection k times is tried again until it goes; the job still fails with its error", () =>
    fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 10 }), async (k) => {
        const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: "dead" })
        const ours: Job.Job = { ...Job.make({ worker: "W", queue: "q", args: [k], jid: `j${k}` }), lockDigest: "dead:abc" }
        const bull = { id: ours.jid, attemptsMade: 0, opts: { attempts: 1 } } as unknown as BullJob
        const program = Effect.gen(function*() {
          const store = yield* Redis.RedisService
          yield* Lock.lock(definition, { digest: "dead:abc", jid: ours.jid })
          let calls = 0
          const blips: Redis.Store = {
            ...store,
            unlock: (lock, jid, fence) =>
              ++calls <= k
                ? Effect.fail(new RedisError({ operation: "unlock", reason: "Connection is closed." }))
                : store.unlock(lock, jid, fence)
          }
          const fiber = yield* Effect.forkChild(
            Effect.provideService(BullMQ.failed(definition, bull, ours)(new Error("boom")), Redis.RedisService, blips)
          )
          yield* TestClock.adjust("40 seconds")
          const exit = yield* Fiber.await(fiber)
          const left = yield* store.fetch({ prefix: "dead", name: "dead:abc" })
          return { exit, calls, left: left.holders.length }
        })
        const { calls, exit, left } = await Effect.runPromise(
          program.pipe(Effect.provide(Redis.layerMemory), Effect.provide(TestClock.layer()), Effect.scoped)
        )
        assert.isTrue(Exit.isFailure(exit) && String(Cause.squash(exit.cause)).includes("boom"))
        assert.strictEqual(calls, k + 1)
        assert.strictEqual(left, 0, `the lock is left after ${k} failed releases`)
      }),
      { numRuns: runs }
    ))
})

describe("BullMQ adapter: model property", () => {
  let connection: { readonly host: string; readonly port: number }
  let redisUrl: string
  let raw: IORedis
  let close: () => Promise<void>
  beforeAll(async () => {
    const scope = Effect.runSync(Scope.make())
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const url = new URL(server.url)
    redisUrl = server.url
    connection = { host: url.hostname, port: Number(url.port) }
    raw = new IORedis(server.url)
    close = async () => {
      raw.disconnect()
      await Effect.runPromise(Scope.close(scope, Exit.void))
    }
  })
  afterAll(() => close())

  it.live("every answer of the port, and exists of every jid after every step, is the contract's", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(fc.array(command, { minLength: 10, maxLength: 40 }), async (commands) => {
          const name = uniqueName("prop")
          const queue = new Queue(name, { connection })
          const worker = new Worker(name, null, { connection, autorun: false })
          const scope = Effect.runSync(Scope.make())
          try {
            // One retry, at once: a failed job waits again once, then fails for good.
            const port = await Effect.runPromise(Scope.provide(BullMQ.make(queue, { jobOptions: { attempts: 2 } }), scope))
            const model = new Map<string, State>()
            const active = new Map<string, { readonly job: BullJob; readonly token: string }>()
            const dead: Array<string> = []
            const fresh = () => Job.make({ worker: "Prop", queue: name, args: [model.size] })
            const pick = (n: number, states?: ReadonlyArray<State>) => {
              const jids = [...model.keys()].filter((jid) => states === undefined || states.includes(model.get(jid)!))
              return jids.length === 0 ? undefined : jids[n % jids.length]
            }
            const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
            let taken = 0
            for (const c of commands) {
              switch (c._tag) {
                case "push": {
                  const job = fresh()
                  await run(port.push(job))
                  model.set(job.jid, "waiting")
                  break
                }
                case "schedule": {
                  const job = fresh()
                  await run(port.schedule(job, Date.now() + hour))
                  model.set(job.jid, "delayed")
                  break
                }
                case "take": {
                  const token = `token-${++taken}`
                  const job = await worker.getNextJob(token, { block: false })
                  const waiting = [...model.values()].filter((s) => s === "waiting").length
                  if (job === undefined) {
                    assert.strictEqual(waiting, 0, "BullMQ gave no job though one waits")
                    break
                  }
                  assert.strictEqual(model.get(job.id!), "waiting", "BullMQ gave a job that does not wait")
                  model.set(job.id!, "active")
                  active.set(job.id!, { job, token })
                  break
                }
                case "complete":
                case "fail":
                case "reschedule": {
                  const jid = pick(c.pick, ["active"])
                  if (jid === undefined) break
                  const { job, token } = active.get(jid)!
                  active.delete(jid)
                  if (c._tag === "complete") {
                    await job.moveToCompleted("done", token, false)
                    model.set(jid, "completed")
                  } else if (c._tag === "fail") {
                    await job.moveToFailed(new Error("failed"), token, false)
                    model.set(jid, job.attemptsMade >= 2 ? "failed" : "waiting")
                  } else {
                    // The server strategy's reschedule: `schedule` of the job being performed, inside its perform.
                    const exit = await Effect.runPromiseExit(
                      BullMQ.performing(job, token, port.schedule(BullMQ.toJob(job), Date.now() + hour))
                    )
                    assert.isTrue(
                      Exit.isFailure(exit) && Cause.squash(exit.cause) instanceof DelayedError,
                      "a moved job ends with DelayedError"
                    )
                    model.set(jid, "delayed")
                  }
                  break
                }
                case "remove": {
                  // Half the time a finished job: the one a queue must refuse to "remove" (it is not waiting).
                  const jid = (c.ended ? pick(c.pick, ["completed", "failed"]) : undefined) ?? pick(c.pick) ?? "never-seen"
                  const removed = await run(port.remove(jid))
                  const state = model.get(jid)
                  assert.strictEqual(removed, state === "waiting" || state === "delayed", `remove of a ${state} job`)
                  if (removed) model.set(jid, "gone")
                  break
                }
                case "kill": {
                  const job = fresh()
                  await run(port.kill(job, `reason ${job.jid}`))
                  dead.push(job.jid)
                  break
                }
              }
              for (const [jid, state] of model) {
                assert.strictEqual(await queue.getJobState(jid), bullState[state], "BullMQ's own state is the model's")
                const [exists] = await run(port.exists([{ jid, queue: name }]))
                const expected = state === "waiting" || state === "delayed" || state === "active" ? "exists" : "gone"
                assert.strictEqual(exists, expected, `exists of a ${state} job`)
                // Asked as another queue's job: not this adapter's to tell, whatever its state here.
                assert.deepStrictEqual(await run(port.exists([{ jid, queue: `${name}-other` }])), ["unknown"])
              }
              for (const jid of dead) {
                assert.deepStrictEqual(await run(port.exists([{ jid, queue: name }])), ["gone"], "a killed job the queue never saw")
              }
              // describe tells every job's state as the model holds it, all in one call: an active job (its worker
              // holds its lock) apart from a waiting one; a removed, killed or never-seen job is gone.
              const asked = [...model.keys(), ...dead, "never-seen"]
              const described = await run(port.describe!(asked.map((jid) => ({ jid, queue: name }))))
              assert.deepStrictEqual(
                described.map((details) => details?.state),
                asked.map((jid) => model.get(jid) ?? "gone"),
                `describe after ${JSON.stringify(c)}`
              )
            }
            if (dead.length > 0) {
              const letters = await port.deadLetter.getJobs(["waiting"])
              assert.deepStrictEqual(
                letters.map((l) => (l.data as BullMQ.DeadLetter).reason).sort(),
                dead.map((jid) => `reason ${jid}`).sort()
              )
            }
          } finally {
            await Effect.runPromise(Scope.close(scope, Exit.void))
            await worker.close(true)
            await queue.obliterate({ force: true }).catch(() => undefined)
            await queue.close()
          }
        }),
        { numRuns: runs }
      )
    ))

  // A job delivered while its run lock is held: by another job (a duplicate: the server strategy decides), or by
  // its own jid (BullMQ delivered it again after a stall while its first copy may still run: never a duplicate, so it
  // waits, moved to delayed, whatever the strategy). Through UniqueQueue's processor, BullMQ's manual fetch.
  it.live("a delivery meeting its own jid's run lock is rescheduled, whatever the strategy; another's, as it says", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(
          fc.constantFrom("while_executing" as const, "while_executing_reject" as const, "until_and_while_executing" as const),
          fc.constantFrom(...Strategy.serverNames),
          fc.boolean(),
          async (lock, server, own) => {
            const name = uniqueName("again")
            const lockPrefix = `${name}-locks`
            const queue = new Queue(name, { connection })
            const worker = new Worker(name, null, { connection, autorun: false })
            // while_executing_reject takes no server strategy: it always rejects.
            const options = lock === "while_executing_reject"
              ? { lock, lockPrefix, lockLease: 60_000 } as const
              : { lock, lockPrefix, lockLease: 60_000, onConflict: { server } } as const
            const unique = UniqueQueue.make<{ readonly n: number }>(queue, { ...options, redis: { url: redisUrl } })
            try {
              const added = await unique.add("Again", { n: 1 })
              assert.strictEqual(added._tag, "Enqueued")
              const holder = own ? added.job.jid : "another-job"
              const definition = LockOptions.unsafeMake(options)
              await Effect.runPromise(
                Effect.flatMap(Redis.RedisService, (redis) =>
                  redis.lock(Lock.keyOf(definition, added.digest, "run"), {
                    jid: holder,
                    limit: 1,
                    ttlMs: 0,
                    leaseMs: 60_000,
                    info: "",
                    fenced: true
                  })).pipe(Effect.provide(Redis.layer({ url: redisUrl })), Effect.scoped)
              )
              const token = "token-1"
              const job = await worker.getNextJob(token, { block: false })
              assert.isDefined(job)
              let ran = false
              const processor = unique.processor(async () => {
                ran = true
                return "ran"
              })
              const ended = await processor(job!, token).then((value) => ({ value }), (error: unknown) => ({ error }))
              assert.isFalse(ran, "the copy did not run beside the holder")
              const rescheduled = "error" in ended && ended.error instanceof DelayedError
              const configured = lock === "while_executing_reject" ? "reject" : server
              assert.strictEqual(
                rescheduled,
                own || configured === "reschedule",
                `${lock}, ${server}, held by ${own ? "its own jid" : "another job"}: ${JSON.stringify(ended)}`
              )
              if (rescheduled) assert.strictEqual(await queue.getJobState(added.job.jid), "delayed")
            } finally {
              await worker.close(true)
              await unique.close({ timeout: 1000 }).catch(() => undefined)
              await queue.obliterate({ force: true }).catch(() => undefined)
              await queue.close()
            }
          }
        ),
        {
          numRuns: Math.max(8, Math.round(runs / 4)),
          examples: [["while_executing", "log", true], ["while_executing_reject", "reject", true], ["while_executing", "log", false]]
        }
      )
    ), 120_000)

  // Jobs that succeed, fail and then succeed, or fail every attempt, through UniqueQueue and real Workers that may
  // stop retrying before the attempts are spent (maxStartedAttempts, a backoff strategy answering -1): once the queue
  // is idle, every until_executed lock is gone (a dead job's too: the processor calls `died` on what BullMQ makes
  // its last attempt), and each argument list is Enqueued again.
  it.live("until_executed on real Workers: whatever the jobs do, an idle queue leaves no lock behind", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(
          fc.array(
            fc.record({
              fate: fc.constantFrom("ok" as const, "failOnce" as const, "failAlways" as const),
              attempts: fc.integer({ min: 1, max: 3 }),
              copies: fc.integer({ min: 1, max: 3 })
            }),
            { minLength: 1, maxLength: 8 }
          ),
          fc.constantFrom("attempts" as const, "maxStartedAttempts" as const, "backoffGivesUp" as const),
          async (plan, retries) => {
            const name = uniqueName("life")
            const lockPrefix = `${name}-locks`
            const queue = new Queue(name, { connection })
            const unique = UniqueQueue.make<{ readonly n: number }>(queue, {
              lock: "until_executed",
              lockPrefix,
              redis: { url: redisUrl }
            })
            const worker = new Worker<{ readonly n: number }>(
              name,
              unique.processor(async (job) => {
                const { fate } = plan[job.data.n]!
                if (fate === "failAlways" || (fate === "failOnce" && job.attemptsMade === 0)) throw new Error(fate)
                return "done"
              }),
              {
                connection,
                concurrency: 3,
                ...(retries === "maxStartedAttempts" ? { maxStartedAttempts: 1 } : {}),
                ...(retries === "backoffGivesUp" ? { settings: { backoffStrategy: () => -1 } } : {})
              }
            )
            worker.on("error", () => {})
            try {
              for (const [n, { attempts, copies }] of plan.entries()) {
                for (let i = 0; i < copies; i++) {
                  await unique.add("Life", { n }, { attempts, ...(retries === "backoffGivesUp" ? { backoff: { type: "custom" } } : {}) })
                }
              }
              const idle = async () => {
                const counts = await queue.getJobCounts("waiting", "active", "delayed", "prioritized")
                return Object.values(counts).every((count) => count === 0)
              }
              const deadline = Date.now() + 60_000
              while (!(await idle()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
              assert.isTrue(await idle(), "the queue went idle")
              const keys = await raw.keys(`${lockPrefix}:*`)
              const ttls = await Promise.all(keys.map((key) => raw.pttl(key)))
              const documented = [`${lockPrefix}:digests`, `${lockPrefix}:layout`]
              const kept = keys.filter((key, i) => ttls[i] === -1 && !documented.includes(key))
              assert.deepStrictEqual(kept, [], JSON.stringify(plan))
              for (const n of plan.keys()) {
                assert.strictEqual((await unique.add("Life", { n }))._tag, "Enqueued", `argument list ${n} is free again`)
              }
            } finally {
              await worker.close(true)
              await queue.obliterate({ force: true }).catch(() => undefined)
              await unique.close()
            }
          }
        ),
        {
          numRuns: Math.max(5, Math.round(runs / 5)),
          // A job with attempts left that BullMQ gives up on at its first failure, both ways.
          examples: [
            [[{ fate: "failOnce", attempts: 3, copies: 1 }], "maxStartedAttempts"],
            [[{ fate: "failAlways", attempts: 3, copies: 1 }], "backoffGivesUp"]
          ]
        }
      )
    ))

  // A processor runs each job on a fiber of its own and holds the run lock on it (no fork per perform): however the
  // lock is lost, and whenever, the perform stops (its signal aborts), the attempt fails with LockLost, a retry runs
  // as a new holder, and nothing is left held.
  // The fn ends on its abort (the keeper found the lock gone and interrupted the perform), or returns as soon as the
  // lock is gone, before the keeper's next renewal: then its release finds the lock gone, and the attempt fails with
  // LockLost all the same (a perform that started is never put back for free).
  it.live("a run lock lost while the processor's job runs: the perform stops, the attempt fails LockLost, none left", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(
          fc.constantFrom("while_executing" as const, "until_and_while_executing" as const),
          fc.constantFrom("deleted" as const, "its entry removed" as const),
          fc.integer({ min: 0, max: 600 }),
          fc.integer({ min: 1, max: 2 }),
          fc.constantFrom("on its abort" as const, "once the lock is gone" as const),
          async (lock, how, afterMs, attempts, ends) => {
            const name = uniqueName("lost")
            const lockPrefix = `${name}-locks`
            const queue = new Queue(name, { connection })
            const unique = UniqueQueue.make<{ readonly n: number }>(queue, {
              lock,
              lockLease: "900 millis",
              onConflict: { server: "reschedule" },
              lockPrefix,
              redis: { url: redisUrl }
            })
            const events: Array<string> = []
            let started: () => void = () => undefined
            const running = new Promise<void>((resolve) => (started = resolve))
            let lockGone: () => void = () => undefined
            const gone = new Promise<void>((resolve) => (lockGone = resolve))
            const worker = new Worker<{ readonly n: number }>(
              name,
              unique.processor(async (job, _token, signal) => {
                events.push(`start ${job.attemptsMade}`)
                if (job.attemptsMade > 0) return "done"
                started()
                await Promise.race([
                  new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true })),
                  ...(ends === "once the lock is gone" ? [gone] : [])
                ])
                // Returning once the lock is gone, the keeper may still have told it first: either way it ended.
                events.push(ends === "on its abort" ? "aborted" : "ended")
                return "late"
              }),
              { connection, concurrency: 2 }
            )
            worker.on("error", () => {})
            try {
              const added = await unique.add("Lost", { n: 1 }, { attempts })
              assert.strictEqual(added._tag, "Enqueued")
              await running
              await new Promise((resolve) => setTimeout(resolve, afterMs))
              const key = `${added.digest}:RUN:LOCKED`
              if (how === "deleted") await raw.del(key)
              else await raw.hdel(key, added.job.jid)
              lockGone()
              const ended = async () => {
                const state = await queue.getJobState(added.job.jid)
                return state === "completed" || state === "failed"
              }
              const deadline = Date.now() + 15_000
              while (!(await ended()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
              const job = await queue.getJob(added.job.jid)
              const state = await queue.getJobState(added.job.jid)
              const run = JSON.stringify({ lock, how, afterMs, attempts, ends, events, state })
              const end = ends === "on its abort" ? "aborted" : "ended"
              if (attempts === 1) {
                assert.strictEqual(state, "failed", run)
                assert.include(job?.failedReason ?? "", "lost its lock", run)
                assert.deepStrictEqual(events, ["start 0", end], run)
              } else {
                assert.strictEqual(state, "completed", run)
                assert.strictEqual(job?.returnvalue, "done", run)
                assert.deepStrictEqual(events, ["start 0", end, "start 1"], run)
              }
              const keys = (await raw.keys(`${lockPrefix}:*`)).filter((k) => k.endsWith(":LOCKED"))
              assert.deepStrictEqual(keys, [], run)
            } finally {
              await worker.close(true)
              await queue.obliterate({ force: true }).catch(() => undefined)
              await unique.close({ timeout: 1_000 })
            }
          }
        ),
        {
          numRuns: Math.max(6, Math.round(runs / 8)),
          examples: [
            ["while_executing", "deleted", 0, 1, "on its abort"],
            ["until_and_while_executing", "its entry removed", 400, 2, "on its abort"],
            ["while_executing", "its entry removed", 0, 1, "once the lock is gone"]
          ]
        }
      )
    ), 120_000)
})
