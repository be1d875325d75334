/**
 * Model-based testing of the lock lifecycle: a hand-driven queue, workers whose performs the commands start,
 * finish, fail and crash, and time that the commands advance. After every command the invariants are checked;
 * after the last one everything is drained and nothing may be left held. Each run records a trace of what was
 * observed, so the same commands can be compared across the Redis and the memory store.
 */
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Runtime from "effect/Runtime"
import type * as Job from "../../src/Job.js"
import { JobQueue } from "../../src/JobQueue.js"
import * as Lock from "../../src/Lock.js"
import * as Redis from "../../src/Redis.js"
import type * as Strategy from "../../src/Strategy.js"
import * as UniqueJob from "../../src/UniqueJob.js"

export interface Config {
  readonly lock: Lock.LockType
  readonly limit: number
  readonly client: Strategy.ClientName
  readonly server: Strategy.ServerName
  readonly ttl: boolean
}

/** TTLs and leases are short; `Advance` always moves time past both. */
export const TTL_MS = 300
export const LEASE_MS = 300
export const ADVANCE_MS = 400
const MAX_RETRIES = 2
const DIGESTS = 2

export const configArbitrary = (lock: Lock.LockType): fc.Arbitrary<Config> =>
  fc.record({
    lock: fc.constant(lock),
    limit: lock.startsWith("while") ? fc.constantFrom(1, 2) : fc.constantFrom(1, 1, 2),
    client: fc.constantFrom<Strategy.ClientName>("log", "raise", "reject", "replace"),
    server: lock === "while_executing_reject"
      ? fc.constant<Strategy.ServerName>("reject")
      : fc.constantFrom<Strategy.ServerName>("log", "raise", "reject", "reschedule"),
    ttl: lock === "until_expired" ? fc.constant(true) : fc.boolean()
  })

interface Waiting {
  readonly job: Job.Job
  /** Entered through the client (or went back holding its queue lock): counts as a queued copy. */
  fresh: boolean
}

interface Running {
  readonly job: Job.Job
  readonly fiber: Fiber.RuntimeFiber<Strategy.ServerOutcome<void>, unknown>
  readonly finish: Deferred.Deferred<void, string>
  readonly crash: () => void
}

type Fate = "performed" | "dead" | "replaced" | "dropped"

/** The system under test, for one command sequence on one store. */
export class System {
  readonly trace: Array<string> = []
  readonly waiting: Array<Waiting> = []
  readonly running: Array<Running> = []
  readonly fates = new Map<string, Fate>()
  readonly accepted = new Set<string>()
  readonly starts = new Map<string, number>()
  readonly unlocks = new Map<string, number>()
  readonly dead: Array<{ readonly job: Job.Job; readonly reason: string }> = []
  private nextJid = 0
  private crashes = 0
  readonly unique: UniqueJob.UniqueJob

  constructor(
    readonly config: Config,
    readonly store: Redis.RedisService["Type"],
    readonly runtime: Runtime.Runtime<never>,
    readonly advanceTime: (ms: number) => Effect.Effect<void>,
    prefix: string
  ) {
    this.unique = UniqueJob.unsafeMake({
      worker: "ModelJob",
      lock: config.lock,
      lockLimit: config.limit,
      lockTtl: config.ttl ? TTL_MS : undefined,
      lockLease: LEASE_MS,
      rescheduleDelay: 1,
      lockPrefix: prefix,
      onConflict: config.lock === "while_executing_reject"
        ? { client: config.client }
        : { client: config.client, server: config.server },
      afterUnlock: (u) => Effect.sync(() => this.unlocks.set(u.jid, (this.unlocks.get(u.jid) ?? 0) + 1))
    })
  }

  // -- the queue port, hand-driven --------------------------------------------------------------------------------

  private readonly queue: JobQueue["Type"] = {
    push: (job) => Effect.sync(() => void this.waiting.push({ job, fresh: true })),
    schedule: (job) =>
      Effect.sync(() =>
        // A rescheduled until_and_while_executing job keeps its queue lock: it is still the one queued copy.
        void this.waiting.push({ job, fresh: this.config.lock === "until_and_while_executing" })
      ),
    remove: (jid) =>
      Effect.sync(() => {
        const i = this.waiting.findIndex((w) => w.job.jid === jid)
        if (i < 0) return false
        this.waiting.splice(i, 1)
        this.fates.set(jid, "replaced")
        return true
      }),
    kill: (job, reason) => Effect.sync(() => void this.dead.push({ job, reason })),
    exists: (jid) =>
      Effect.sync(() => this.waiting.some((w) => w.job.jid === jid) || this.running.some((r) => r.job.jid === jid))
  }

  private provide<A, E>(
    effect: Effect.Effect<A, E, Redis.RedisService | JobQueue>,
    store: Redis.RedisService["Type"] = this.store
  ): Effect.Effect<A, E> {
    return effect.pipe(
      Effect.provideService(Redis.RedisService, store),
      Effect.provideService(JobQueue, this.queue),
      Logger.withMinimumLogLevel(LogLevel.None)
    )
  }

  exec<A, E>(effect: Effect.Effect<A, E>): Promise<A> {
    return Runtime.runPromise(this.runtime)(effect)
  }

  // -- commands ----------------------------------------------------------------------------------------------------

  async push(digestIndex: number): Promise<void> {
    const job = this.unique.job([digestIndex % DIGESTS], { jid: `j${this.nextJid++}` })
    const exit = await this.exec(Effect.exit(this.provide(this.unique.client(job, (j) => this.queue.push(j)))))
    if (Exit.isSuccess(exit)) {
      const outcome = exit.value
      if (outcome._tag === "Enqueued" || outcome._tag === "Replaced") this.accepted.add(job.jid)
      if (outcome._tag === "Rejected") this.fates.set(job.jid, "dead")
      const extra = outcome._tag === "Replaced" ? ` ${[...outcome.replaced].sort()}` : ""
      this.trace.push(`push ${job.jid}(${job.args[0]}) -> ${outcome._tag}${extra}`)
    } else {
      this.trace.push(`push ${job.jid}(${job.args[0]}) -> ${failureTag(exit.cause)}`)
    }
  }

  async start(index: number): Promise<void> {
    const [entry] = this.waiting.splice(index % this.waiting.length, 1)
    const job = entry!.job
    this.starts.set(job.jid, (this.starts.get(job.jid) ?? 0) + 1)
    let crashed = false
    const crashable = crashableStore(this.store, () => crashed)
    const result = await this.exec(Effect.gen(this, function*() {
      const started = yield* Deferred.make<void>()
      const finish = yield* Deferred.make<void, string>()
      const perform = Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(finish))
      // A daemon: the worker outlives this command (a plain fork would be interrupted when the command returns).
      const fiber = yield* Effect.forkDaemon(this.provide(this.unique.server(job, perform), crashable))
      const first = yield* Effect.raceFirst(
        Effect.as(Deferred.await(started), "started" as const),
        Effect.as(Fiber.await(fiber), "ended" as const)
      )
      return { first, fiber, finish }
    }))
    if (result.first === "started") {
      this.running.push({ job, fiber: result.fiber, finish: result.finish, crash: () => (crashed = true) })
      this.trace.push(`start ${job.jid} -> running`)
    } else {
      await this.settle(job, result.fiber, "start")
    }
  }

  async complete(index: number, how: "finish" | "fail"): Promise<void> {
    const [run] = this.running.splice(index % this.running.length, 1)
    await this.exec(Deferred.complete(run!.finish, how === "finish" ? Effect.void : Effect.fail("perform failed")))
    await this.settle(run!.job, run!.fiber, how)
  }

  async crash(index: number): Promise<void> {
    const [run] = this.running.splice(index % this.running.length, 1)
    // The worker's process dies: nothing it would still say reaches Redis, and the broker redelivers the job.
    run!.crash()
    this.crashes++
    await this.exec(Fiber.interrupt(run!.fiber))
    this.waiting.push({ job: run!.job, fresh: false })
    this.trace.push(`crash ${run!.job.jid}`)
  }

  async advance(): Promise<void> {
    await this.exec(this.advanceTime(ADVANCE_MS))
    // Every TTL has run out: what was queued under one is no longer the one locked copy.
    if (this.config.ttl) for (const w of this.waiting) w.fresh = false
    this.trace.push("advance")
  }

  /** The outcome of a server wrapper that ended: what becomes of the job, as the queue would do it. */
  private async settle(
    job: Job.Job,
    fiber: Fiber.RuntimeFiber<Strategy.ServerOutcome<void>, unknown>,
    step: string
  ): Promise<void> {
    const exit = await this.exec(Fiber.await(fiber))
    if (Exit.isSuccess(exit)) {
      const outcome = exit.value
      this.trace.push(`${step} ${job.jid} -> ${outcome._tag}`)
      if (outcome._tag === "Performed") this.fates.set(job.jid, "performed")
      if (outcome._tag === "Skipped") this.fates.set(job.jid, "dropped")
      if (outcome._tag === "Rejected") this.fates.set(job.jid, "dead")
      return
    }
    this.trace.push(`${step} ${job.jid} -> ${failureTag(exit.cause)}`)
    const retryCount = (job.retryCount ?? 0) + 1
    if (retryCount <= MAX_RETRIES) {
      this.waiting.push({ job: { ...job, retryCount }, fresh: false })
    } else {
      this.dead.push({ job, reason: "retries exhausted" })
      this.fates.set(job.jid, "dead")
      await this.exec(this.provide(Effect.ignore(this.unique.died(job))))
    }
  }

  // -- observation -------------------------------------------------------------------------------------------------

  async holders(): Promise<Array<{ digest: number; phase: Lock.Phase; jids: ReadonlyArray<string> }>> {
    const out: Array<{ digest: number; phase: Lock.Phase; jids: ReadonlyArray<string> }> = []
    for (let d = 0; d < DIGESTS; d++) {
      const digest = await this.exec(this.unique.digest([d]))
      for (const phase of ["queue", "run"] as const) {
        const holders = await this.exec(this.store.holders(Lock.keyOf(this.unique.definition, digest, phase)))
        out.push({ digest: d, phase, jids: holders.map((h) => h.jid).sort() })
      }
    }
    return out
  }

  /** The invariants that hold after every command. */
  async checkInvariants(): Promise<void> {
    const { config } = this
    for (const { digest, jids, phase } of await this.holders()) {
      if (jids.length > config.limit) {
        throw new Error(`digest ${digest} ${phase}: ${jids.length} holders (${jids}) > lockLimit ${config.limit}`)
      }
    }
    const phases = Lock.phases(config.lock)
    for (let d = 0; d < DIGESTS; d++) {
      if (phases.run) {
        const executing = this.running.filter((r) => r.job.args[0] === d).map((r) => r.job.jid)
        if (executing.length > config.limit) {
          throw new Error(`digest ${d}: ${executing.length} executions at once (${executing}) > ${config.limit}`)
        }
      }
      if (phases.queue) {
        const queued = this.waiting.filter((w) => w.fresh && w.job.args[0] === d).map((w) => w.job.jid)
        if (queued.length > config.limit) {
          throw new Error(`digest ${d}: ${queued.length} queued copies (${queued}) > ${config.limit}`)
        }
      }
    }
    for (const [jid, count] of this.unlocks) {
      if (config.lock === "until_expired") throw new Error(`afterUnlock fired for until_expired (${jid})`)
      const bound = config.lock === "until_executing" || config.lock === "until_executed"
        ? 1
        : (this.starts.get(jid) ?? 0) + 1
      if (count > bound) throw new Error(`afterUnlock fired ${count} times for ${jid} (at most ${bound})`)
    }
  }

  /** Finishes and runs everything, lets every TTL and lease pass, then nothing may be held and no job lost. */
  async drain(): Promise<void> {
    while (this.running.length > 0) await this.complete(0, "finish")
    // Time only has to pass for locks that end by time: TTLs, and leases of crashed workers.
    const timeBound = () => this.config.ttl || this.crashes > 0
    for (let round = 0; round < 12 && this.waiting.length > 0; round++) {
      if (round > 0 || timeBound()) await this.advance()
      for (let n = this.waiting.length; n > 0 && this.waiting.length > 0; n--) {
        await this.start(0)
        while (this.running.length > 0) await this.complete(0, "finish")
      }
    }
    if (this.waiting.length > 0) throw new Error(`jobs still waiting after draining: ${this.waiting.map((w) => w.job.jid)}`)
    if (timeBound()) await this.advance()
    const held = (await this.holders()).filter((h) => h.jids.length > 0)
    if (held.length > 0) {
      throw new Error(`locks left held: ${held.map((h) => `digest ${h.digest} ${h.phase}: ${h.jids}`).join("; ")}`)
    }
    const lost = [...this.accepted].filter((jid) => !this.fates.has(jid))
    if (lost.length > 0) throw new Error(`accepted jobs with no fate (lost): ${lost}`)
  }
}

const failureTag = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.failureOption(cause)
  if (failure._tag === "Some") {
    const error = failure.value
    return typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : String(error)
  }
  return Cause.isInterruptedOnly(cause) ? "Interrupted" : "Defect"
}

/** A store whose every call fails once the worker holding it has crashed. */
const crashableStore = (store: Redis.RedisService["Type"], crashed: () => boolean): Redis.RedisService["Type"] => {
  const guard = <A>(operation: string, call: () => Effect.Effect<A, Redis.RedisError>) =>
    Effect.suspend(() =>
      crashed() ? Effect.fail(new Redis.RedisError({ operation, reason: "the worker crashed" })) : call()
    )
  return {
    lock: (lock, request) => guard("lock", () => store.lock(lock, request)),
    unlock: (lock, jid) => guard("unlock", () => store.unlock(lock, jid)),
    renew: (lock, jid, leaseMs) => guard("renew", () => store.renew(lock, jid, leaseMs)),
    handoff: (from, to, request, options) => guard("handoff", () => store.handoff(from, to, request, options)),
    holders: (lock) => guard("holders", () => store.holders(lock))
  }
}

// -- fast-check commands --------------------------------------------------------------------------------------------

export type Model = { waiting: number; running: number }
export type Cmd = fc.AsyncCommand<Model, System>

class Push implements Cmd {
  constructor(readonly digest: number) {}
  check = () => true
  run = async (m: Model, s: System) => {
    await s.push(this.digest)
    await s.checkInvariants()
    Object.assign(m, { waiting: s.waiting.length, running: s.running.length })
  }
  toString = () => `push(${this.digest})`
}

class Start implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.waiting > 0
  run = async (m: Model, s: System) => {
    await s.start(this.index)
    await s.checkInvariants()
    Object.assign(m, { waiting: s.waiting.length, running: s.running.length })
  }
  toString = () => `start(${this.index})`
}

class Complete implements Cmd {
  constructor(readonly index: number, readonly how: "finish" | "fail") {}
  check = (m: Readonly<Model>) => m.running > 0
  run = async (m: Model, s: System) => {
    await s.complete(this.index, this.how)
    await s.checkInvariants()
    Object.assign(m, { waiting: s.waiting.length, running: s.running.length })
  }
  toString = () => `${this.how}(${this.index})`
}

class Crash implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.running > 0
  run = async (m: Model, s: System) => {
    await s.crash(this.index)
    await s.checkInvariants()
    Object.assign(m, { waiting: s.waiting.length, running: s.running.length })
  }
  toString = () => `crash(${this.index})`
}

class Advance implements Cmd {
  check = () => true
  run = async (m: Model, s: System) => {
    await s.advance()
    await s.checkInvariants()
    Object.assign(m, { waiting: s.waiting.length, running: s.running.length })
  }
  toString = () => `advance(${ADVANCE_MS}ms)`
}

export const commandsArbitrary = (maxCommands: number, options?: { readonly time?: boolean }): fc.Arbitrary<Iterable<Cmd>> => {
  const commands: Array<fc.Arbitrary<Cmd>> = [
      fc.nat(DIGESTS - 1).map((d) => new Push(d)),
      fc.nat(3).map((d) => new Push(d)),
      fc.nat(3).map((i) => new Start(i)),
      fc.nat(3).map((i) => new Start(i)),
      fc.nat(3).map((i) => new Complete(i, "finish")),
      fc.nat(3).map((i) => new Complete(i, "fail")),
      fc.nat(3).map((i) => new Crash(i)),
    ...(options?.time === false ? [] : [fc.constant(new Advance())])
  ]
  return fc.commands(commands, { maxCommands })
}

/** Runs the commands on a fresh system, then drains it; answers the trace. */
export const runCommands = async (
  cmds: Iterable<fc.AsyncCommand<Model, System>>,
  makeSystem: () => Promise<System>
): Promise<ReadonlyArray<string>> => {
  const system = await makeSystem()
  await fc.asyncModelRun(() => ({ model: { waiting: 0, running: 0 }, real: system }), cmds)
  await system.drain()
  return system.trace
}

/** How many cases: bounded in CI, many more with UNIQUE_JOBS_PROPERTY_RUNS. */
export const runs = (ci: number): number => Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? ci)

export const advanceReal = (ms: number) => Effect.sleep(Duration.millis(ms))

