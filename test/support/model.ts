/**
 * Model-based testing of the lock lifecycle: a hand-driven queue, workers whose performs the commands start,
 * finish, fail, crash, stall and deliver twice, store calls with arguments the stores must refuse, and time that the
 * commands advance. After every command the invariants are checked; after the last one everything is drained and
 * nothing may be left held. Each run records a trace of what was observed, so the same commands can be compared
 * across the Redis and the memory store.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import type * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Result from "effect/Result"
import * as fc from "fast-check"
import * as Fiber from "effect/Fiber"
import * as References from "effect/References"
import type * as Job from "../../src/Job.js"
import { JobQueue, QueueError } from "../../src/JobQueue.js"
import * as Lock from "../../src/Lock.js"
import * as LockType from "../../src/LockType.js"
import * as Reaper from "../../src/Reaper.js"
import * as Redis from "../../src/Redis.js"
import type * as Strategy from "../../src/Strategy.js"
import * as UniqueJob from "../../src/UniqueJob.js"

/**
 * The arguments the two digests of a run are made of: plain numbers, objects whose only difference is the content
 * of a `__proto__` key, or `{}` beside `{"__proto__":{}}`. Two digests that collided would share one lock, and the
 * holders of one would show up under the other.
 */
export type ArgsFamily = "number" | "proto" | "empty"

export interface Config {
  readonly lock: LockType.LockType
  readonly limit: number
  readonly client: Strategy.ClientName
  readonly server: Strategy.ServerName
  readonly ttl: boolean
  readonly args: ArgsFamily
}

/**
 * TTLs and leases are short; `Advance` always moves time past both. A live holder renews every 100 ms and gives its
 * lock up 270 ms after its last renewal was sent (`Lock.leaseGuardMs`: 30 ms before the lease ends), so it has about
 * 170 ms to spare between renewals. On Redis, RealTime checks that real time kept within these.
 */
export const TTL_MS = 300
export const LEASE_MS = 300
export const ADVANCE_MS = 400
/** The documented guard, min(2 s, lease / 10), written out: the code's own leaseGuardMs is what is under test. */
const LEASE_GUARD_MS = 30
/** Renewals come every lease / 3. */
const RENEW_EVERY_MS = 100

/** Lets forked fibers (renewals, keepers woken by TestClock) run to their next wait. */
const yieldMany = Effect.repeat(Effect.yieldNow, { times: 20 })
const MAX_RETRIES = 1
const DIGESTS = 2

/** Only options the lock type reads: the Schema refuses the others. */
export const configArbitrary = (lock: LockType.LockType): fc.Arbitrary<Config> => {
  const { queue, run } = LockType.phases(lock)
  return fc.record({
    lock: fc.constant(lock),
    limit: lock.startsWith("while") ? fc.constantFrom(1, 2) : fc.constantFrom(1, 1, 2),
    client: queue
      ? fc.constantFrom<Strategy.ClientName>("log", "raise", "reject", "replace")
      : fc.constant<Strategy.ClientName>("log"),
    server: lock === "while_executing_reject"
      ? fc.constant<Strategy.ServerName>("reject")
      : run
      ? fc.constantFrom<Strategy.ServerName>("log", "raise", "reject", "reschedule")
      : fc.constant<Strategy.ServerName>("log"),
    ttl: lock === "until_expired" ? fc.constant(true) : queue ? fc.boolean() : fc.constant(false),
    args: fc.constantFrom<ArgsFamily>("number", "number", "proto", "empty")
  })
}

/** An own `__proto__` key, as JSON.parse makes one (plain assignment would set the prototype instead). */
const withProto = (proto: unknown, rest: Record<string, unknown>, protoFirst: boolean): Record<string, unknown> => {
  const o: Record<string, unknown> = protoFirst ? {} : { ...rest }
  Object.defineProperty(o, "__proto__", { value: proto, enumerable: true, writable: true, configurable: true })
  return protoFirst ? Object.assign(o, rest) : o
}

/**
 * The arguments of digest `digest` (0 or 1) in one of two spellings of the same content: the spellings must share a
 * digest, the two digests must not.
 */
export const argsOf = (family: ArgsFamily, digest: number, spelling: number): ReadonlyArray<unknown> => {
  switch (family) {
    case "number":
      return [digest]
    case "proto":
      return spelling === 0
        ? JSON.parse(`[{"__proto__":{"user":${digest}},"n":1}]`)
        : [withProto({ user: digest }, { n: 1 }, false)]
    case "empty":
      return digest === 0
        ? (spelling === 0 ? [{}] : JSON.parse("[{}]"))
        : spelling === 0
        ? JSON.parse(`[{"__proto__":{}}]`)
        : [withProto({}, {}, true)]
  }
}

interface Waiting {
  readonly job: Job.Job
  /** Entered through the client (or went back holding its queue lock): counts as a queued copy. */
  fresh: boolean
}

/**
 * What a worker's store calls go through: a crashed worker reaches nothing; a stalled one renews nothing; a
 * partitioned one's renewals fail (Redis is out of its reach) while its perform goes on.
 */
interface Worker {
  readonly jid: string
  crashed: boolean
  stalled: boolean
  partitioned: boolean
  /** Store time at which its last confirmed acquisition or renewal was sent (virtual time only). */
  confirmedAt: number | undefined
}

interface Running {
  readonly job: Job.Job
  readonly fiber: Fiber.Fiber<Strategy.ServerOutcome<void>, unknown>
  readonly finish: Deferred.Deferred<void, string>
  readonly worker: Worker
  /** The fencing token its perform was handed; undefined for types without a run lock. */
  readonly fence: number | undefined
  /** Stalled, and time has passed since: its lease is over in the store, while the worker still runs. */
  lapsed: boolean
  /** When its hold was taken away from outside (an operator's unlock, a failover that lost the write). */
  revokedAt?: number | undefined
}

type Fate = "performed" | "dead" | "replaced" | "dropped"

/** The holders of one lock of one digest. */
export interface Held {
  readonly digest: number
  readonly phase: LockType.Phase
  readonly entries: ReadonlyArray<Redis.Holder>
}

/** One store call with an argument both stores must refuse before they write anything. */
export interface Refusal {
  readonly digest: number
  readonly call: "lock queue" | "lock run" | "renew" | "handoff"
  readonly field: "limit" | "ttlMs" | "leaseMs"
  readonly value: number
  /** Whose jid: an index into the key's holders, one past them for a jid that holds nothing. */
  readonly who: number
}

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
  /** The digest (0 or 1) of every jid pushed. */
  readonly digestOf = new Map<string, number>()
  /** Per digest, the fencing tokens handed to performs, in the order the performs started. */
  readonly fences = new Map<number, Array<{ readonly jid: string; readonly fence: number }>>()
  /** Broken ordering promises seen while commands ran (inside performs, in the queue): checkInvariants reports them. */
  readonly violations: Array<string> = []
  /** The model's time: the store's on TestClock, which moves only by `advance`. */
  private clockMs = 0
  /** Whether the next push fails in the queue (the job is not enqueued). */
  private failNextPush = false
  /** Jids the queue removed (replace). */
  private readonly removed = new Set<string>()
  /** The longest delay of a scheduled job pushed. */
  private longestDelay = 0
  private nextJid = 0
  private timeBound = false
  /** Whether the job being started held its queue lock (a reschedule keeps it). */
  private startingFresh = false
  private readonly digests = new Map<number, string>()
  readonly unique: UniqueJob.UniqueJob

  readonly store: Redis.RedisService["Service"]

  /**
   * `realTime`: the store runs on real time (Redis); its watch says afterwards whether real time kept within what the
   * model assumes (see RealTime).
   */
  constructor(
    readonly config: Config,
    store: Redis.RedisService["Service"],
    readonly services: Context.Context<never>,
    readonly advanceTime: (ms: number) => Effect.Effect<void>,
    prefix: string,
    readonly realTime?: RealTime | undefined
  ) {
    this.store = realTime === undefined ? store : realTime.watch(store)
    const { run } = LockType.phases(config.lock)
    this.unique = UniqueJob.unsafeMake({
      worker: "ModelJob",
      lock: config.lock,
      lockLimit: config.limit,
      lockTtl: config.ttl ? TTL_MS : undefined,
      lockLease: run ? LEASE_MS : undefined,
      rescheduleDelay: config.server === "reschedule" ? 1 : undefined,
      lockPrefix: prefix,
      onConflict: { client: config.client, server: config.server },
      afterUnlock: (u) => Effect.sync(() => this.unlocks.set(u.jid, (this.unlocks.get(u.jid) ?? 0) + 1))
    })
    this.timeBound = config.ttl
  }

  /** The store runs on TestClock (the memory store): time moves by exactly what the commands say. */
  get virtualTime(): boolean {
    return this.realTime === undefined
  }

  get hasRunLock(): boolean {
    return LockType.phases(this.config.lock).run
  }

  /** Running entries a command may finish: a stalled worker does nothing until its lease is over. */
  completable(): Array<Running> {
    return this.running.filter((r) => !r.worker.stalled || r.lapsed)
  }

  stallable(): Array<Running> {
    return this.hasRunLock ? this.running.filter((r) => !r.worker.stalled && r.revokedAt === undefined) : []
  }

  // -- the queue port, hand-driven --------------------------------------------------------------------------------

  private readonly queue: JobQueue["Service"] = {
    push: (job) =>
      Effect.suspend(() => {
        if (!this.failNextPush) return Effect.sync(() => void this.waiting.push({ job, fresh: true }))
        this.failNextPush = false
        return Effect.fail(new QueueError({ operation: "push", jid: job.jid, reason: "the model's queue refused it" }))
      }),
    schedule: (job, at) =>
      Effect.sync(() => {
        // The reschedule strategy puts the job off by rescheduleDelay (1 ms here), counted on the store's clock.
        if (this.virtualTime && at - this.clockMs !== 1) {
          this.violations.push(`${job.jid} was rescheduled ${at - this.clockMs} ms ahead, not rescheduleDelay (1 ms)`)
        }
        // A rescheduled until_and_while_executing job keeps its queue lock if it had one: still the one queued copy.
        this.waiting.push({
          job,
          fresh: this.config.lock === "until_and_while_executing" && this.startingFresh
        })
      }),
    remove: (jid) =>
      Effect.sync(() => {
        const i = this.waiting.findIndex((w) => w.job.jid === jid)
        if (i < 0) return false
        this.waiting.splice(i, 1)
        this.fates.set(jid, "replaced")
        this.removed.add(jid)
        return true
      }),
    kill: (job, reason) => Effect.sync(() => void this.dead.push({ job, reason })),
    exists: (jobs) =>
      Effect.sync(() =>
        jobs.map(({ jid }) =>
          this.waiting.some((w) => w.job.jid === jid) || this.running.some((r) => r.job.jid === jid) ? "exists" : "gone"
        )
      )
  }

  private provide<A, E>(
    effect: Effect.Effect<A, E, Redis.RedisService | JobQueue>,
    store: Redis.RedisService["Service"] = this.store
  ): Effect.Effect<A, E> {
    return effect.pipe(
      Effect.provideService(Redis.RedisService, store),
      Effect.provideService(JobQueue, this.queue),
      Effect.provideService(References.MinimumLogLevel, "None")
    )
  }

  exec<A, E>(effect: Effect.Effect<A, E>): Promise<A> {
    return Effect.runPromiseWith(this.services)(effect)
  }

  private async lockKey(digest: number, phase: LockType.Phase): Promise<Redis.LockKey> {
    let name = this.digests.get(digest)
    if (name === undefined) {
      name = await this.exec(this.unique.digest(argsOf(this.config.args, digest, 0)))
      this.digests.set(digest, name)
    }
    return Lock.keyOf(this.unique.definition, name, phase)
  }

  // -- commands ----------------------------------------------------------------------------------------------------

  /**
   * `n`: the digest is n % 2, the spelling of its arguments n >> 1 (same content, so the same digest). `delayMs`: a
   * scheduled job, to run that long from now; `failing`: the queue refuses the job.
   */
  async push(n: number, options?: { readonly delayMs?: number | undefined; readonly failing?: boolean | undefined }): Promise<void> {
    const digest = n % DIGESTS
    const delayMs = options?.delayMs
    this.longestDelay = Math.max(this.longestDelay, delayMs ?? 0)
    const at = delayMs === undefined ? undefined : (await this.exec(Clock.currentTimeMillis)) + delayMs
    const job = this.unique.job(argsOf(this.config.args, digest, (n >> 1) % 2), {
      jid: `j${this.nextJid++}`,
      ...(at === undefined ? {} : { at })
    })
    this.digestOf.set(job.jid, digest)
    this.failNextPush = options?.failing === true
    const exit = await this.exec(Effect.exit(this.provide(this.unique.client(job, (j) => this.queue.push(j)))))
    this.failNextPush = false
    const shown = `push ${job.jid}(${digest})${delayMs === undefined ? "" : ` in ${delayMs} ms`}${
      options?.failing === true ? ", failing" : ""
    }`
    if (Exit.isSuccess(exit)) {
      const outcome = exit.value
      if (outcome._tag === "Enqueued" || outcome._tag === "Replaced") this.accepted.add(job.jid)
      if (outcome._tag === "Rejected") this.fates.set(job.jid, "dead")
      const extra = outcome._tag === "Replaced" ? ` ${[...outcome.replaced].sort()}` : ""
      this.trace.push(`${shown} -> ${outcome._tag}${extra}`)
      if (outcome._tag === "Replaced") {
        for (const jid of outcome.replaced) {
          // A job that runs cannot be replaced (only a copy of it that waits, when the broker delivered it twice).
          if (this.running.some((r) => r.job.jid === jid) && !this.removed.has(jid)) {
            this.violations.push(`replace took ${jid}, which runs`)
          }
          if (await this.holdsQueueLock(jid)) this.violations.push(`replaced ${jid} still holds its queue lock`)
        }
      }
      if ((outcome._tag === "Enqueued" || outcome._tag === "Replaced") && delayMs !== undefined && this.config.ttl) {
        // A scheduled job's queue lock lasts its TTL from its run time: the TTL grows by the delay.
        const entry = (await this.queueEntries(digest)).find((e) => e.jid === job.jid)
        const ttl = entry?.expiresAt === undefined ? undefined : entry.expiresAt - entry.lockedAt
        const ok = ttl !== undefined &&
          (this.virtualTime ? ttl === TTL_MS + delayMs : ttl >= TTL_MS && ttl <= TTL_MS + delayMs)
        if (!ok) this.violations.push(`${job.jid}, scheduled in ${delayMs} ms, got a queue lock for ${ttl} ms`)
      }
    } else {
      this.trace.push(`${shown} -> ${failureTag(exit.cause)}`)
      // A queue lock whose enqueue failed is released: nothing queued holds it.
      if (await this.holdsQueueLock(job.jid)) this.violations.push(`${job.jid} was not enqueued, but holds its lock`)
    }
  }

  /** The entries of a digest's queue lock. */
  private async queueEntries(digest: number): Promise<ReadonlyArray<Redis.Holder>> {
    return this.exec(this.store.holders(await this.lockKey(digest, "queue")))
  }

  /** The store's time now: TestClock's, or (Redis) this machine's clock, which Redis' is close to. */
  private storeNow(): number {
    return this.virtualTime ? this.clockMs : Date.now()
  }

  private isLive(entry: Redis.Holder, now = this.storeNow()): boolean {
    const end = Math.min(entry.expiresAt ?? Infinity, entry.leaseUntil ?? Infinity)
    return end > now
  }

  /** Whether jid has a live entry in its digest's queue lock. */
  async holdsQueueLock(jid: string): Promise<boolean> {
    if (!LockType.phases(this.config.lock).queue) return false
    const entries = await this.queueEntries(this.digestOf.get(jid)!)
    return entries.some((e) => e.jid === jid && this.isLive(e))
  }

  /** Hands a job to a worker: it runs until a command finishes it, or its server wrapper ends at once. */
  private async deliver(job: Job.Job, fresh: boolean): Promise<
    | { readonly _tag: "running"; readonly entry: Running }
    | { readonly _tag: "ended"; readonly fiber: Fiber.Fiber<Strategy.ServerOutcome<void>, unknown> }
  > {
    this.starts.set(job.jid, (this.starts.get(job.jid) ?? 0) + 1)
    const worker: Worker = { jid: job.jid, crashed: false, stalled: false, partitioned: false, confirmedAt: undefined }
    const digest = this.digestOf.get(job.jid)!
    const queueKey = await this.lockKey(digest, "queue")
    let fence: number | undefined
    this.startingFresh = fresh
    const result = await this.exec(Effect.gen({ self: this }, function*() {
      const started = yield* Deferred.make<void>()
      const finish = yield* Deferred.make<void, string>()
      const perform = (running: Lock.Running) =>
        Effect.suspend(() => {
          fence = running.fence
          if (fence !== undefined) {
            const tokens = this.fences.get(digest) ?? []
            tokens.push({ jid: job.jid, fence })
            this.fences.set(digest, tokens)
          }
          return Effect.andThen(
            Effect.flatMap(this.store.holders(queueKey), (entries) => Effect.sync(() => this.atPerform(job, entries))),
            Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(finish))
          )
        })
      // A daemon: the worker outlives this command (a plain fork would be interrupted when the command returns).
      const fiber = yield* Effect.forkDetach(
        this.provide(this.unique.server(job, perform), workerStore(this.store, worker, this.realTime))
      )
      const first = yield* Effect.raceFirst(
        Effect.as(Deferred.await(started), "started" as const),
        Effect.as(Fiber.await(fiber), "ended" as const)
      )
      return { first, fiber, finish }
    }))
    this.startingFresh = false
    if (result.first === "ended") return { _tag: "ended", fiber: result.fiber }
    const entry: Running = { job, fiber: result.fiber, finish: result.finish, worker, fence, lapsed: false }
    this.running.push(entry)
    return { _tag: "running", entry }
  }

  /**
   * The ordering promises at the moment perform starts: until_executing and until_and_while_executing have let
   * their queue lock go; until_executed (without a TTL that may have run out) still holds it.
   */
  private atPerform(job: Job.Job, queueEntries: ReadonlyArray<Redis.Holder>): void {
    const mine = queueEntries.filter((e) => e.jid === job.jid && this.isLive(e))
    const lock = this.config.lock
    if ((lock === "until_executing" || lock === "until_and_while_executing") && mine.length > 0) {
      this.violations.push(`${job.jid} (${lock}) performs while it still holds its queue lock`)
    }
    if (lock === "until_executed" && !this.config.ttl && !this.fates.has(job.jid) && mine.length === 0) {
      this.violations.push(`${job.jid} (until_executed) performs without its queue lock`)
    }
  }

  async start(index: number): Promise<void> {
    const [entry] = this.waiting.splice(index % this.waiting.length, 1)
    const job = entry!.job
    const heldQueueLock = this.config.lock === "until_and_while_executing" && (await this.holdsQueueLock(job.jid))
    const delivered = await this.deliver(job, entry!.fresh)
    if (delivered._tag === "running") {
      this.trace.push(`start ${job.jid} -> running`)
    } else {
      const outcome = await this.settle(job, delivered.fiber, "start")
      if (heldQueueLock) {
        // The handoff met a conflict: a job going back to the queue (raise, reschedule) stays the one queued copy and
        // keeps its queue lock; one that is discarded (log, reject) lets it go.
        const back = (outcome === "ExecutionConflict" || outcome === "Rescheduled") && this.fates.get(job.jid) !== "dead"
        const discarded = outcome === "Skipped" || outcome === "Rejected"
        const holds = await this.holdsQueueLock(job.jid)
        if (back && !holds) this.violations.push(`${job.jid} went back to the queue (${outcome}) without its queue lock`)
        if (discarded && holds) this.violations.push(`${job.jid} was discarded (${outcome}) but keeps its queue lock`)
      }
    }
  }

  /**
   * The broker delivers a running job again (a stalled message, a visibility timeout): same job, same jid. While the
   * first copy's lease is live, the second is a conflict and gets the server strategy's outcome.
   */
  async redeliver(index: number): Promise<void> {
    const original = this.running[index % this.running.length]!
    const job = original.job
    const delivered = await this.deliver(job, false)
    if (delivered._tag === "running") {
      this.trace.push(`redeliver ${job.jid} -> running`)
      if (this.hasRunLock && !original.lapsed && original.revokedAt === undefined) {
        throw new Error(
          `a redelivered copy of ${job.jid} runs beside its original, whose lease is live ` +
            `(fences ${original.fence} and ${delivered.entry.fence})`
        )
      }
      return
    }
    const outcome = await this.settle(job, delivered.fiber, "redeliver")
    if (this.hasRunLock && !original.lapsed && original.revokedAt === undefined) {
      const expected = serverOutcome[this.config.server]
      if (outcome !== expected) {
        throw new Error(`a redelivered copy of running ${job.jid} ended ${outcome}, not ${expected} (its conflict)`)
      }
    }
  }

  async complete(index: number, how: "finish" | "fail"): Promise<void> {
    const completable = this.completable()
    const run = completable[index % completable.length]!
    this.running.splice(this.running.indexOf(run), 1)
    const jid = run.job.jid
    const heldQueueLock = await this.holdsQueueLock(jid)
    await this.exec(Deferred.complete(run.finish, how === "finish" ? Effect.void : Effect.fail("perform failed")))
    const outcome = await this.settle(run.job, run.fiber, how)
    if (how === "finish") {
      // A release that finds the hold gone is a lost lock, never a success; one that finds it is a success.
      const expected = run.lapsed || run.revokedAt !== undefined ? "LockLost" : "Performed"
      if (outcome !== expected) throw new Error(`${jid} finished ${outcome}, not ${expected}`)
    }
    if (this.config.lock === "until_executed") {
      // until_executed keeps its lock while the job may still run again (a failure is retried with the same jid),
      // and lets it go once it has run (or died: settle checks that).
      const holds = await this.holdsQueueLock(jid)
      if (outcome === "Performed" && holds) this.violations.push(`${jid} was performed but still holds its queue lock`)
      if (how === "fail" && heldQueueLock && !this.fates.has(jid) && !holds) {
        this.violations.push(`${jid} failed and will be retried, but its queue lock was released`)
      }
    }
    if (run.fence !== undefined) {
      const key = await this.lockKey(this.digestOf.get(run.job.jid)!, "run")
      const holders = await this.exec(this.store.holders(key))
      const left = holders.find((h) => h.jid === run.job.jid && h.fence === run.fence)
      if (left !== undefined) throw new Error(`${run.job.jid} ended, but its hold (fence ${run.fence}) is still there`)
    }
  }

  async crash(index: number): Promise<void> {
    const [run] = this.running.splice(index % this.running.length, 1)
    // The worker's process dies: nothing it would still say reaches Redis, and the broker redelivers the job.
    this.realTime?.stopped(run!.worker)
    run!.worker.crashed = true
    this.timeBound = true
    await this.exec(Fiber.interrupt(run!.fiber))
    this.waiting.push({ job: run!.job, fresh: false })
    this.trace.push(`crash ${run!.job.jid}`)
  }

  /**
   * A worker stalls past its lease (a frozen process): its renewals stop reaching the store while it believes they
   * were kept. It does nothing more until time has passed; then a finish finds its hold gone (`LockLost`).
   */
  async stall(index: number): Promise<void> {
    const stallable = this.stallable()
    const run = stallable[index % stallable.length]!
    this.realTime?.stopped(run.worker)
    run.worker.stalled = true
    this.timeBound = true
    this.trace.push(`stall ${run.job.jid}`)
  }

  /**
   * Time passes beyond every TTL and lease. With `redeliverStalled`, the broker then delivers again each job whose
   * worker stalled past its lease meanwhile (as BullMQ's stalled-job check does): the copy may take the lock.
   */
  async advance(redeliverStalled = false, ms = ADVANCE_MS): Promise<void> {
    this.realTime?.advancing()
    // On real time (Redis) time only ever moves past every TTL and lease (see RealTime).
    const step = this.virtualTime ? ms : ADVANCE_MS
    await this.exec(Effect.andThen(this.advanceTime(step), yieldMany))
    this.clockMs += step
    let lapsed: Array<Running>
    if (!this.virtualTime) {
      // Every TTL has run out: what was queued under one is no longer the one locked copy.
      if (this.config.ttl) for (const w of this.waiting) w.fresh = false
      lapsed = this.running.filter((r) => r.worker.stalled && !r.lapsed)
    } else {
      // Some TTLs and leases ran out, others not: the store says which.
      for (const w of this.waiting) if (w.fresh && this.config.ttl) w.fresh = await this.holdsQueueLock(w.job.jid)
      lapsed = []
      for (const r of this.running) {
        if (!r.worker.stalled || r.lapsed) continue
        const entries = await this.exec(this.store.holders(await this.lockKey(this.digestOf.get(r.job.jid)!, "run")))
        if (!entries.some((e) => e.jid === r.job.jid && e.fence === r.fence && this.isLive(e))) lapsed.push(r)
      }
    }
    for (const r of lapsed) r.lapsed = true
    this.trace.push(`${step === ADVANCE_MS ? "advance" : `advance ${step} ms`}${redeliverStalled ? ", redelivering stalled jobs" : ""}`)
    await this.checkPartitioned()
    await this.checkRevoked()
    if (redeliverStalled) for (const r of lapsed) await this.redeliver(this.running.indexOf(r))
  }

  /**
   * A holder cut off from Redis (its renewals fail) gives its run lock up leaseGuardMs before its last confirmed
   * lease can end in Redis, and not before: by then its perform has been interrupted and its outcome is LockLost.
   */
  private async checkPartitioned(): Promise<void> {
    // A stalled process runs no timers: it finds out when it wakes (stall's own rules).
    for (const r of this.running.filter((r) => r.worker.partitioned && !r.worker.stalled)) {
      const deadline = r.worker.confirmedAt! + LEASE_MS - LEASE_GUARD_MS
      const ended = r.fiber.pollUnsafe() !== undefined
      if (this.clockMs >= deadline && !ended) {
        throw new Error(`${r.job.jid}, cut off from Redis, still performs at ${this.clockMs} (its deadline: ${deadline})`)
      }
      if (this.clockMs < deadline && ended) {
        throw new Error(`${r.job.jid}, cut off from Redis, gave up at ${this.clockMs}, before its deadline ${deadline}`)
      }
      if (!ended) continue
      this.running.splice(this.running.indexOf(r), 1)
      const outcome = await this.settle(r.job, r.fiber, "cut off")
      if (outcome !== "LockLost") throw new Error(`${r.job.jid}, cut off from Redis, ended ${outcome}, not LockLost`)
    }
  }

  /** A worker's renewals stop reaching Redis (a network partition) while its perform goes on (TestClock only). */
  async partition(index: number): Promise<void> {
    const partitionable = this.partitionable()
    const run = partitionable[index % partitionable.length]!
    run.worker.partitioned = true
    this.trace.push(`partition ${run.job.jid}`)
  }

  partitionable(): Array<Running> {
    return this.hasRunLock && this.virtualTime
      ? this.running.filter((r) =>
        !r.worker.stalled && !r.worker.partitioned && r.revokedAt === undefined && r.worker.confirmedAt !== undefined
      )
      : []
  }

  /**
   * A holder's run lock is taken away from outside while it performs (an operator's unlock, a failover that lost the
   * write): its next renewal, within lease / 3, finds the hold gone, and its perform ends LockLost (TestClock only).
   */
  async revoke(index: number): Promise<void> {
    const revocable = this.partitionable()
    const run = revocable[index % revocable.length]!
    const key = await this.lockKey(this.digestOf.get(run.job.jid)!, "run")
    await this.exec(this.store.unlock(key, run.job.jid, run.fence))
    run.revokedAt = this.clockMs
    this.trace.push(`revoke ${run.job.jid}`)
  }

  private async checkRevoked(): Promise<void> {
    for (const r of this.running.filter((r) => r.revokedAt !== undefined)) {
      const ended = r.fiber.pollUnsafe() !== undefined
      if (!ended && this.clockMs - r.revokedAt! >= RENEW_EVERY_MS) {
        throw new Error(`${r.job.jid} still performs ${this.clockMs - r.revokedAt!} ms after its hold was taken away`)
      }
      if (!ended) continue
      this.running.splice(this.running.indexOf(r), 1)
      const outcome = await this.settle(r.job, r.fiber, "revoked")
      if (outcome !== "LockLost") throw new Error(`${r.job.jid}, its hold taken away, ended ${outcome}, not LockLost`)
    }
  }

  /** A store call with an argument out of range: both stores refuse it, with the same reason, writing nothing. */
  async refuse(refusal: Refusal): Promise<void> {
    const { call, digest, field, value } = refusal
    const queueKey = await this.lockKey(digest, "queue")
    const runKey = await this.lockKey(digest, "run")
    const key = call === "lock queue" ? queueKey : runKey
    const before = await this.holders()
    const mine = before.find((h) => h.digest === digest && h.phase === (call === "lock queue" ? "queue" : "run"))!
    const holder = mine.entries[refusal.who % (mine.entries.length + 1)]
    const jid = holder?.jid ?? "stranger"
    const request: Redis.HolderRequest = {
      jid,
      limit: this.config.limit,
      ttlMs: call === "lock queue" && this.config.ttl ? TTL_MS : 0,
      leaseMs: call === "lock queue" ? 0 : LEASE_MS,
      info: "",
      fenced: call !== "lock queue",
      [field]: value
    }
    const attempt: Effect.Effect<unknown, Redis.RedisError> = call === "renew"
      ? this.store.renew(key, jid, value, holder?.fence ?? 0)
      : call === "handoff"
      ? this.store.handoff(queueKey, runKey, request, { keepOnConflict: true })
      : this.store.lock(key, request)
    const result = await this.exec(Effect.result(attempt))
    const shown = `${call}(${digest} ${field}=${value} by ${holder === undefined ? "a stranger" : "a holder"})`
    if (Result.isSuccess(result)) throw new Error(`the store accepted ${shown}: ${JSON.stringify(result.success)}`)
    const after = await this.holders()
    for (const { digest: d, entries, phase } of after) {
      const was = before.find((h) => h.digest === d && h.phase === phase)!.entries
      // Nothing added or changed. On Redis, time runs: a lease may be renewed meanwhile, an expired key may go.
      const keeping = new Set(this.running.filter((r) => !r.worker.stalled).map((r) => `${r.job.jid}/${r.fence}`))
      for (const entry of entries) {
        const old = was.find((e) => e.jid === entry.jid)
        const same = old !== undefined &&
          JSON.stringify({ ...old, leaseUntil: 0 }) === JSON.stringify({ ...entry, leaseUntil: 0 }) &&
          (old.leaseUntil === entry.leaseUntil || keeping.has(`${entry.jid}/${entry.fence}`))
        if (!same) {
          const change = `${JSON.stringify(old)} -> ${JSON.stringify(entry)}`
          throw new Error(`refused ${shown} changed digest ${d} ${phase}: ${change}`)
        }
      }
      for (const old of was) {
        if (!entries.some((e) => e.jid === old.jid) && old.expiresAt === undefined && old.leaseUntil === undefined) {
          throw new Error(`refused ${shown} removed ${old.jid} from digest ${d} ${phase}`)
        }
      }
    }
    const jids = after
      .filter((h) => h.digest === digest)
      .map((h) => `${h.phase} [${h.entries.map((e) => e.jid).sort()}]`)
    this.trace.push(`refuse ${shown} -> ${result.failure._tag}: ${result.failure.reason}; ${jids.join(" ")}`)
  }

  /** The job dies for good; the queue tells the middleware, which lets its queue lock go (until_expired's lasts its TTL). */
  private async die(job: Job.Job, reason: string): Promise<void> {
    this.dead.push({ job, reason })
    this.fates.set(job.jid, "dead")
    await this.exec(this.provide(Effect.ignore(this.unique.died(job))))
    if (this.config.lock !== "until_expired" && (await this.holdsQueueLock(job.jid))) {
      this.violations.push(`${job.jid} died (${reason}), but its queue lock is still held`)
    }
  }

  /**
   * The reaper runs one pass (bounded steps of 2 index members, a 1 ms grace for holders with no expiry): it may
   * remove only what no live holder needs. Every entry that was live before the pass and whose job the queue still
   * knows must be there after it; every entry it removed had ended, or had no expiry and a job the queue forgot.
   */
  async reap(): Promise<void> {
    const known = (jid: string) => this.waiting.some((w) => w.job.jid === jid) || this.running.some((r) => r.job.jid === jid)
    const before = await this.holders()
    const now = this.storeNow()
    const pass = await this.exec(
      this.provide(Reaper.runOnce({ prefix: this.unique.definition.lockPrefix, grace: 1, batch: 2 }))
    )
    const after = await this.holders()
    for (const held of before) {
      const kept = after.find((h) => h.digest === held.digest && h.phase === held.phase)!
      for (const entry of held.entries) {
        if (kept.entries.some((e) => e.jid === entry.jid && e.fence === entry.fence)) continue
        const live = this.isLive(entry, now)
        const orphan = live && entry.expiresAt === undefined && entry.leaseUntil === undefined && !known(entry.jid)
        if (live && !orphan) {
          this.violations.push(`the reaper removed ${entry.jid}'s live ${held.phase} hold on digest ${held.digest}`)
        }
      }
    }
    this.trace.push(`reap: ${pass.members} members, ${pass.holders} ended holders, ${pass.orphans} orphans`)
  }

  /** An operator kills a waiting job (it goes to the dead set): it dies for good. */
  async kill(index: number): Promise<void> {
    const [entry] = this.waiting.splice(index % this.waiting.length, 1)
    const job = entry!.job
    // Another copy of the jid may still run (a redelivery): then the job is not dead yet, only this copy.
    if (this.running.some((r) => r.job.jid === job.jid)) {
      this.trace.push(`kill ${job.jid} (a copy still runs)`)
      return
    }
    await this.die(job, "killed")
    this.trace.push(`kill ${job.jid}`)
  }

  /** The outcome of a server wrapper that ended: what becomes of the job, as the queue would do it. */
  private async settle(
    job: Job.Job,
    fiber: Fiber.Fiber<Strategy.ServerOutcome<void>, unknown>,
    step: string
  ): Promise<string> {
    const exit = await this.exec(Fiber.await(fiber))
    if (Exit.isSuccess(exit)) {
      const outcome = exit.value
      this.trace.push(`${step} ${job.jid} -> ${outcome._tag}`)
      if (outcome._tag === "Performed") this.fates.set(job.jid, "performed")
      if (outcome._tag === "Skipped") this.fates.set(job.jid, "dropped")
      if (outcome._tag === "Rejected") this.fates.set(job.jid, "dead")
      return outcome._tag
    }
    const tag = failureTag(exit.cause)
    this.trace.push(`${step} ${job.jid} -> ${tag}`)
    const retryCount = (job.retryCount ?? 0) + 1
    if (retryCount <= MAX_RETRIES) {
      this.waiting.push({ job: { ...job, retryCount }, fresh: false })
    } else {
      await this.die(job, "retries exhausted")
    }
    return tag
  }

  // -- observation -------------------------------------------------------------------------------------------------

  async holders(): Promise<Array<Held>> {
    const out: Array<Held> = []
    for (let d = 0; d < DIGESTS; d++) {
      for (const phase of ["queue", "run"] as const) {
        const entries = await this.exec(this.store.holders(await this.lockKey(d, phase)))
        out.push({ digest: d, phase, entries })
      }
    }
    return out
  }

  /** The invariants that hold after every command. */
  async checkInvariants(): Promise<void> {
    const { config } = this
    const phases = LockType.phases(config.lock)
    if (this.violations.length > 0) throw new Error(this.violations.join("; "))
    const held = await this.holders()
    if (new Set(this.digests.values()).size !== this.digests.size) {
      throw new Error(`the two digests' arguments share a digest: ${[...this.digests.values()]}`)
    }
    for (const { digest, entries, phase } of held) {
      const jids = entries.map((h) => h.jid).sort()
      if (jids.length > config.limit) {
        throw new Error(`digest ${digest} ${phase}: ${jids.length} holders (${jids}) > lockLimit ${config.limit}`)
      }
      const strangers = jids.filter((jid) => this.digestOf.get(jid) !== digest)
      if (strangers.length > 0) {
        throw new Error(`digest ${digest} ${phase} is held by other digests' jobs: ${strangers}`)
      }
    }
    for (let d = 0; d < DIGESTS; d++) {
      if (phases.run) {
        // A stalled worker whose lease is over no longer holds the lock (it finds out when it releases).
        const executing = this.running.filter((r) =>
          !r.lapsed && r.revokedAt === undefined && this.digestOf.get(r.job.jid) === d
        )
        if (executing.length > config.limit) {
          const jids = executing.map((r) => r.job.jid)
          throw new Error(`digest ${d}: ${executing.length} executions at once (${jids}) > ${config.limit}`)
        }
        // Each acquisition keeps its own hold: no other copy's release may have freed it.
        const entries = held.find((h) => h.digest === d && h.phase === "run")!.entries
        for (const r of executing) {
          if (r.worker.stalled) continue
          const hold = entries.find((e) => e.jid === r.job.jid && e.fence === r.fence)
          if (hold === undefined) {
            throw new Error(`${r.job.jid} runs, but its hold (fence ${r.fence}) is gone: ${JSON.stringify(entries)}`)
          }
          // Renewals keep a live holder's lease ahead of the clock (on TestClock, to the millisecond).
          if (this.virtualTime && !this.isLive(hold)) {
            throw new Error(`${r.job.jid} runs, but its lease ended at ${hold.leaseUntil} (now ${this.clockMs})`)
          }
        }
      }
      if (phases.queue) {
        const queued = this.waiting.filter((w) => w.fresh && this.digestOf.get(w.job.jid) === d).map((w) => w.job.jid)
        if (queued.length > config.limit) {
          throw new Error(`digest ${d}: ${queued.length} queued copies (${queued}) > ${config.limit}`)
        }
      }
      // Fencing: every acquisition's token is above all tokens handed out before it.
      const tokens = this.fences.get(d) ?? []
      for (let i = 1; i < tokens.length; i++) {
        if (!(tokens[i]!.fence > tokens[i - 1]!.fence)) {
          const shown = tokens.map((t) => `${t.jid}:${t.fence}`).join(", ")
          throw new Error(`digest ${d}: fencing tokens do not strictly increase: ${shown}`)
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
    const finishAll = async () => {
      while (this.completable().length > 0) await this.complete(0, "finish")
    }
    await finishAll()
    // Stalled workers wake up once their leases are over.
    if (this.running.length > 0) {
      await this.advance()
      await finishAll()
    }
    // Time only has to pass for locks that end by time: TTLs, and leases of crashed or stalled workers.
    for (let round = 0; round < 12 && this.waiting.length > 0; round++) {
      if (round > 0 || this.timeBound) await this.advance()
      for (let n = this.waiting.length; n > 0 && this.waiting.length > 0; n--) {
        await this.start(0)
        await finishAll()
      }
    }
    if (this.waiting.length > 0) {
      throw new Error(`jobs still waiting after draining: ${this.waiting.map((w) => w.job.jid)}`)
    }
    // A scheduled job's queue lock lasts its TTL from its run time.
    if (this.timeBound) for (let t = 0; t < TTL_MS + this.longestDelay; t += ADVANCE_MS) await this.advance()
    const held = (await this.holders()).filter((h) => h.entries.length > 0)
    if (held.length > 0) {
      const shown = held.map((h) => `digest ${h.digest} ${h.phase}: ${h.entries.map((e) => e.jid)}`)
      throw new Error(`locks left held: ${shown.join("; ")}`)
    }
    const lost = [...this.accepted].filter((jid) => !this.fates.has(jid))
    if (lost.length > 0) throw new Error(`accepted jobs with no fate (lost): ${lost}`)
  }
}

/** What a duplicate execution turns into under each server strategy. */
const serverOutcome: Record<Strategy.ServerName, string> = {
  log: "Skipped",
  raise: "ExecutionConflict",
  reject: "Rejected",
  reschedule: "Rescheduled"
}

const failureTag = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.findErrorOption(cause)
  if (failure._tag === "Some") {
    const error = failure.value
    return typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : String(error)
  }
  return Cause.hasInterruptsOnly(cause) ? "Interrupted" : "Defect"
}

/**
 * A worker's view of the store: every call fails once it has crashed; renewals are lost once it has stalled. On real
 * time, its run lock's acquisition, renewals and release are reported to the watch when they answer.
 */
const workerStore = (
  store: Redis.RedisService["Service"],
  worker: Worker,
  realTime: RealTime | undefined
): Redis.RedisService["Service"] => {
  const guard = <A>(operation: string, call: () => Effect.Effect<A, Redis.RedisError>) =>
    Effect.suspend(() =>
      worker.crashed ? Effect.fail(new Redis.RedisError({ operation, reason: "the worker crashed" })) : call()
    )
  /** On TestClock: when the worker's last confirmed acquisition or renewal of its run lock was sent. */
  const confirming = <A>(call: Effect.Effect<A, Redis.RedisError>, confirmed: (a: A) => boolean) =>
    realTime !== undefined ? call : Effect.flatMap(Clock.currentTimeMillis, (sent) =>
      Effect.tap(call, (a) =>
        Effect.sync(() => {
          if (confirmed(a)) worker.confirmedAt = sent
        })))
  /** A run lock's acquisition (the request has a lease): the worker holds it from the moment the call was sent. */
  const acquiring = <A extends Redis.LockResult>(
    request: Redis.HolderRequest,
    call: Effect.Effect<A, Redis.RedisError>
  ) =>
    realTime === undefined || request.leaseMs === 0 ? call : Effect.suspend(() => {
      const sent = performance.now()
      return Effect.tap(call, (result) =>
        Effect.sync(() => {
          if (result._tag === "Acquired") realTime.holding(worker, result.fence, sent)
        }))
    })
  const fake: Redis.RedisService["Service"] = {
    lock: (lock, request) =>
      guard("lock", () =>
        confirming(acquiring(request, store.lock(lock, request)), (r) => request.fenced && r._tag === "Acquired")),
    // Whether the release finds the hold depends on when Redis runs it: the deadline is checked at its answer.
    unlock: (lock, jid, fence) =>
      guard("unlock", () =>
        realTime === undefined
          ? store.unlock(lock, jid, fence)
          : Effect.ensuring(store.unlock(lock, jid, fence), Effect.sync(() => realTime.released(worker, fence)))),
    // A frozen process' timers fire late: as far as it knows, its lease was kept.
    renew: (lock, jid, leaseMs, fence) =>
      guard("renew", () => {
        if (worker.stalled) return Effect.succeed(true)
        if (worker.partitioned) return Effect.fail(new Redis.RedisError({ operation: "renew", reason: "partitioned" }))
        const sent = performance.now()
        return confirming(
          Effect.tap(
            store.renew(lock, jid, leaseMs, fence),
            (renewed) => Effect.sync(() => realTime?.renewed(worker, sent, renewed))
          ),
          (renewed) => renewed
        )
      }),
    // The worker's renewals one by one, each as `renew` above.
    renewAll: (renewals) =>
      Effect.forEach(renewals, (renewal) => fake.renew(renewal.lock, renewal.jid, renewal.leaseMs, renewal.fence)),
    handoff: (from, to, request, options) =>
      guard("handoff", () =>
        confirming(acquiring(request, store.handoff(from, to, request, options)), (r) => r._tag === "Acquired")),
    holders: (lock) => guard("holders", () => store.holders(lock)),
    // The admin calls (reaper, lock listing), as the store answers them; the worker's faults above do not apply.
    fetch: (lock) => guard("fetch", () => store.fetch(lock)),
    events: (lock, count) => guard("events", () => store.events(lock, count)),
    reap: (request) => guard("reap", () => store.reap(request)),
    scan: (prefix, cursor, pattern, count) => guard("scan", () => store.scan(prefix, cursor, pattern, count)),
    remove: (locks) => guard("remove", () => store.remove(locks)),
    claim: (key, owner, leaseMs) => guard("claim", () => store.claim(key, owner, leaseMs)),
    tally: (key, amounts, ttlMs) => guard("tally", () => store.tally(key, amounts, ttlMs)),
    tallies: (keys) => guard("tallies", () => store.tallies(keys)),
    journal: (key, entry, keep, ttlMs) => guard("journal", () => store.journal(key, entry, keep, ttlMs)),
    journaled: (key, count) => guard("journaled", () => store.journaled(key, count))
  }
  return fake
}

// -- real time ------------------------------------------------------------------------------------------------------

/**
 * How far from a deadline a Redis run must stay for its trace to count. The quantities are measured, not estimated
 * (send times against the TTL, the lease and the holder's own deadline), so this only has to cover the clocks'
 * granularity and Redis receiving a call after it was sent; a sixth of the TTL and lease is many times that.
 */
export const REAL_TIME_MARGIN_MS = 50

/**
 * Real time during a run on Redis, against the model's. The model's time moves only with `Advance`, past every TTL
 * and lease at once; between two advances, nothing ends by time. Redis' TTLs and leases, and a holder's own deadline
 * (it gives its run lock up at the send time of its last confirmed renewal + lease − guard: 270 ms, renewing every
 * 100 ms), run on real time. The two agree while
 * - every TTL written since the last advance still runs when the next advance starts,
 * - so does the lease of every holder that stopped renewing (crashed, stalled) since then,
 * - every live holder's renewal is confirmed before its deadline.
 * On an idle machine a run stays far inside these; a busy one (another copy of the suite beside it) can stall this
 * process or Redis past them, and then Redis ends a lock the model still holds: the trace says nothing about the code.
 * The watch records when each write with a TTL, and each holder's acquisition and renewals, were sent, and checks the
 * deadlines against the clock whenever what it watches changes (a renewal confirmed, a release, a crash or stall, time
 * advancing) and when asked at the end of the run, so a deadline that passed while watched is always seen.
 */
export class RealTime {
  /** Why this run's trace cannot be compared with the model's; empty when it can. */
  readonly problems: Array<string> = []
  private readonly started = performance.now()
  /** When the first write with a TTL since the last advance was sent. */
  private firstTtlWrite: number | undefined
  /** Live run-lock holders: their acquisition's fencing token, and when their last confirmed call was sent. */
  private readonly renewing = new Map<Worker, { readonly fence: number; sent: number }>()
  /** Holders that stopped renewing since the last advance, and when their last confirmed call was sent. */
  private readonly lapsing: Array<{ readonly jid: string; readonly sent: number }> = []

  /** Whether the run kept within every deadline so far: checks the ones still watched against the clock now. */
  kept(): boolean {
    this.checkAll()
    return this.problems.length === 0
  }

  /** The store, with the send time of every write that sets a TTL recorded. */
  watch(store: Redis.RedisService["Service"]): Redis.RedisService["Service"] {
    const timed = <A extends Redis.LockResult>(
      request: Redis.HolderRequest,
      call: Effect.Effect<A, Redis.RedisError>
    ) =>
      request.ttlMs === 0 ? call : Effect.suspend(() => {
        const sent = performance.now()
        return Effect.tap(call, (result) =>
          Effect.sync(() => {
            if (result._tag === "Acquired") this.firstTtlWrite = Math.min(this.firstTtlWrite ?? Infinity, sent)
          }))
      })
    return {
      ...store,
      lock: (lock, request) => timed(request, store.lock(lock, request)),
      handoff: (from, to, request, options) => timed(request, store.handoff(from, to, request, options))
    }
  }

  /** A run lock acquired by a call sent at `sent`. */
  holding(worker: Worker, fence: number, sent: number): void {
    this.renewing.set(worker, { fence, sent })
  }

  /** A renewal sent at `sent` answered: it must have come before the deadline of the one before. */
  renewed(worker: Worker, sent: number, confirmed: boolean): void {
    const held = this.renewing.get(worker)
    if (held === undefined) return
    this.checkHolder(worker, held.sent)
    if (confirmed) held.sent = Math.max(held.sent, sent)
  }

  /** Its release answered: it must have come before the holder's deadline, which no longer matters after it. */
  released(worker: Worker, fence: number | undefined): void {
    const held = this.renewing.get(worker)
    if (held === undefined || fence !== held.fence) return
    this.checkHolder(worker, held.sent)
    this.renewing.delete(worker)
  }

  /** The holder crashed or stalled: its lease must last until time next advances. */
  stopped(worker: Worker): void {
    const held = this.renewing.get(worker)
    if (held === undefined) return
    this.checkHolder(worker, held.sent)
    this.renewing.delete(worker)
    this.lapsing.push({ jid: worker.jid, sent: held.sent })
  }

  /** Time is about to advance in the model: what was written since the last advance must still be held. */
  advancing(): void {
    this.checkAll()
    this.firstTtlWrite = undefined
    this.lapsing.length = 0
  }

  private checkAll(): void {
    const now = performance.now()
    const first = this.firstTtlWrite
    if (first !== undefined) this.check(first + TTL_MS, now, () => `a TTL written at ${this.at(first)}`)
    for (const { jid, sent } of this.lapsing) {
      this.check(sent + LEASE_MS, now, () => `the lease of ${jid}, which stopped, last renewed at ${this.at(sent)},`)
    }
    for (const [worker, { sent }] of this.renewing) this.checkHolder(worker, sent)
  }

  private checkHolder(worker: Worker, sent: number): void {
    const deadline = sent + LEASE_MS - Lock.leaseGuardMs(LEASE_MS)
    this.check(deadline, performance.now(), () => `the deadline of ${worker.jid}, last renewed at ${this.at(sent)},`)
  }

  private check(deadline: number, now: number, what: () => string): void {
    const left = deadline - now
    if (left < REAL_TIME_MARGIN_MS && this.problems.length < 5) {
      this.problems.push(`${what()} had ${Math.round(left)} ms left at ${this.at(now)}`)
    }
  }

  private at(time: number): string {
    return `${Math.round(time - this.started)} ms`
  }
}

// -- fast-check commands --------------------------------------------------------------------------------------------

export type Model = {
  waiting: number
  running: number
  completable: number
  stallable: number
  partitionable: number
}
export type Cmd = fc.AsyncCommand<Model, System>

/** Runs a command's step, checks the invariants, and brings the model's counts up to date. */
const step = async (m: Model, s: System, run: () => Promise<void>) => {
  await run()
  await s.checkInvariants()
  Object.assign(m, {
    waiting: s.waiting.length,
    running: s.running.length,
    completable: s.completable().length,
    stallable: s.stallable().length,
    partitionable: s.partitionable().length
  })
}

class Push implements Cmd {
  constructor(readonly digest: number) {}
  check = () => true
  run = (m: Model, s: System) => step(m, s, () => s.push(this.digest))
  toString = () => `push(${this.digest})`
}

/** A scheduled job, to run `delayMs` from now. */
class PushScheduled implements Cmd {
  constructor(readonly digest: number, readonly delayMs: number) {}
  check = () => true
  run = (m: Model, s: System) => step(m, s, () => s.push(this.digest, { delayMs: this.delayMs }))
  toString = () => `pushScheduled(${this.digest}, ${this.delayMs}ms)`
}

/** The queue refuses the job: its queue lock must not stay behind. */
class PushFailing implements Cmd {
  constructor(readonly digest: number) {}
  check = () => true
  run = (m: Model, s: System) => step(m, s, () => s.push(this.digest, { failing: true }))
  toString = () => `pushFailing(${this.digest})`
}

class Revoke implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.partitionable > 0
  run = (m: Model, s: System) => step(m, s, () => s.revoke(this.index))
  toString = () => `revoke(${this.index})`
}

class Partition implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.partitionable > 0
  run = (m: Model, s: System) => step(m, s, () => s.partition(this.index))
  toString = () => `partition(${this.index})`
}

class Start implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.waiting > 0
  run = (m: Model, s: System) => step(m, s, () => s.start(this.index))
  toString = () => `start(${this.index})`
}

class Complete implements Cmd {
  constructor(readonly index: number, readonly how: "finish" | "fail") {}
  check = (m: Readonly<Model>) => m.completable > 0
  run = (m: Model, s: System) => step(m, s, () => s.complete(this.index, this.how))
  toString = () => `${this.how}(${this.index})`
}

class Kill implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.waiting > 0
  run = (m: Model, s: System) => step(m, s, () => s.kill(this.index))
  toString = () => `kill(${this.index})`
}

class Crash implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.running > 0
  run = (m: Model, s: System) => step(m, s, () => s.crash(this.index))
  toString = () => `crash(${this.index})`
}

class Redeliver implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.running > 0
  run = (m: Model, s: System) => step(m, s, () => s.redeliver(this.index))
  toString = () => `redeliver(${this.index})`
}

class Stall implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.stallable > 0
  run = (m: Model, s: System) => step(m, s, () => s.stall(this.index))
  toString = () => `stall(${this.index})`
}

class Advance implements Cmd {
  constructor(readonly redeliverStalled: boolean, readonly ms: number = ADVANCE_MS) {}
  check = () => true
  run = (m: Model, s: System) => step(m, s, () => s.advance(this.redeliverStalled, this.ms))
  toString = () => `advance(${this.ms}ms${this.redeliverStalled ? ", redeliver stalled" : ""})`
}

class Reap implements Cmd {
  check = () => true
  run = (m: Model, s: System) => step(m, s, () => s.reap())
  toString = () => "reap()"
}

class Refuse implements Cmd {
  constructor(readonly refusal: Refusal) {}
  check = () => true
  run = (m: Model, s: System) => step(m, s, () => s.refuse(this.refusal))
  toString = () => {
    const { call, digest, field, value, who } = this.refusal
    return `refuse(${digest}, ${call}, ${field}=${Object.is(value, -0) ? "-0" : value}, who ${who})`
  }
}

/** The scripts' range for a whole number of milliseconds (or a count). */
const maxWhole = 2 ** 50

/** A number that is not a whole number in [min, 2^50]: fractional, negative, too large, NaN or infinite. */
export const outOfRange = (min: number): fc.Arbitrary<number> =>
  fc.oneof(
    fc.constantFrom(
      NaN,
      Infinity,
      -Infinity,
      min - 1,
      0.5,
      1000.5,
      1 / 3,
      5e-324,
      1 + Number.EPSILON,
      -1,
      maxWhole + 1,
      2 ** 53,
      1e17,
      1e21,
      Number.MAX_VALUE,
      -maxWhole
    ),
    fc.double(),
    fc.integer({ min: -1000, max: min - 1 }),
    fc.double({ min: maxWhole + 1, noNaN: true })
  ).filter((n) => !(Number.isInteger(n) && n >= min && n <= maxWhole))

const refusalArbitrary: fc.Arbitrary<Refusal> = fc
  .record({
    digest: fc.nat(DIGESTS - 1),
    call: fc.constantFrom<Refusal["call"]>("lock queue", "lock run", "renew", "handoff"),
    field: fc.constantFrom<Refusal["field"]>("limit", "ttlMs", "leaseMs"),
    who: fc.nat(2)
  })
  .chain((r) => {
    const field = r.call === "renew" ? "leaseMs" : r.field
    const min = field === "limit" || r.call === "renew" ? 1 : 0
    return outOfRange(min).map((value): Refusal => ({ ...r, field, value }))
  })

export interface CommandOptions {
  /** Advance time (TTLs, leases). Default true. */
  readonly time?: boolean | undefined
  /** Redelivered jids, stalled workers, refused store calls. Default true. */
  readonly faults?: boolean | undefined
  /** Whether the lock type holds a run lock (stalling a worker is meaningful only then). */
  readonly runLock?: boolean | undefined
  /** How long the sequences get: fast-check's default ("small") stays at 10 commands or fewer. */
  readonly size?: fc.SizeForArbitrary | undefined
  /**
   * The store runs on TestClock: time moves by random amounts (some TTLs and leases pass, others not), jobs are
   * scheduled, and workers get cut off from Redis. On real time (Redis) time only moves past everything.
   */
  readonly virtualTime?: boolean | undefined
}

export const commandsArbitrary = (maxCommands: number, options?: CommandOptions): fc.Arbitrary<Iterable<Cmd>> => {
  const time = options?.time !== false
  const faults = options?.faults !== false
  const commands: Array<fc.Arbitrary<Cmd>> = [
    fc.nat(DIGESTS - 1).map((d) => new Push(d)),
    fc.nat(3).map((d) => new Push(d)),
    fc.nat(3).map((i) => new Start(i)),
    fc.nat(3).map((i) => new Start(i)),
    fc.nat(3).map((i) => new Complete(i, "finish")),
    fc.nat(3).map((i) => new Complete(i, "fail")),
    fc.nat(3).map((i) => new Crash(i)),
    ...(time ? [fc.boolean().map((redeliver) => new Advance(redeliver))] : []),
    ...(time && options?.virtualTime === true
      ? [
        fc.tuple(fc.boolean(), fc.constantFrom(1, 29, 30, 31, 99, 100, 101, 150, 269, 270, 271, 299, 300, 301))
          .map(([redeliver, ms]) => new Advance(redeliver, ms)),
        fc.tuple(fc.boolean(), fc.integer({ min: 1, max: 350 })).map(([redeliver, ms]) => new Advance(redeliver, ms)),
        fc.tuple(fc.nat(3), fc.constantFrom(1, 100, 250, 600)).map(([d, delay]) => new PushScheduled(d, delay)),
        fc.nat(3).map((d) => new PushFailing(d)),
        fc.nat(3).map((i) => new Kill(i)),
        fc.constant(new Reap())
      ]
      : []),
    ...(faults && time && options?.virtualTime === true && options.runLock === true
      ? [fc.nat(3).map((i) => new Partition(i)), fc.nat(3).map((i) => new Partition(i)), fc.nat(3).map((i) => new Revoke(i))]
      : []),
    ...(faults ? [fc.nat(3).map((i) => new Redeliver(i)), refusalArbitrary.map((r) => new Refuse(r))] : []),
    ...(faults && time && options?.runLock === true ? [fc.nat(3).map((i) => new Stall(i))] : [])
  ]
  return fc.commands(commands, { maxCommands, ...(options?.size === undefined ? {} : { size: options.size }) })
}

/**
 * A scripted run per lock type, run before the random ones: two spellings of one `__proto__` job pushed, a running jid
 * delivered again (a conflict while its lease is live; the original still releases), a refused renewal with a
 * fractional lease, then (types with a run lock) a worker stalls past its lease: the next copy takes the lock and
 * the original ends `LockLost`.
 */
export const scenario = (lock: LockType.LockType): [Config, Iterable<Cmd>] => {
  const { queue, run } = LockType.phases(lock)
  const config: Config = {
    lock,
    limit: 1,
    client: queue ? "replace" : "log",
    server: lock === "while_executing_reject"
      ? "reject"
      : lock === "while_executing"
      ? "reschedule"
      : run
      ? "raise"
      : "log",
    ttl: lock === "until_expired",
    args: "proto"
  }
  const refusal: Refusal = { digest: 0, call: "renew", field: "leaseMs", value: 1000.5, who: 0 }
  const commands: Array<Cmd> = [
    new Push(0),
    new Push(2),
    new Push(1),
    new Start(0),
    new Start(1),
    // Digest 1's job delivered again, then the original finishes: its release still works.
    new Redeliver(1),
    new Complete(1, "finish"),
    new Redeliver(0),
    new Refuse(refusal),
    ...(run
      ? [new Stall(0), new Redeliver(0), new Advance(false), new Redeliver(0), new Complete(0, "finish")]
      : [new Redeliver(0), new Complete(0, "finish")]),
    new Start(0),
    new Complete(0, "finish")
  ]
  return [config, commands]
}

/**
 * A scripted conflict per lock type, run before the random ones: a job runs, a second job of the same digest is
 * pushed and started while it does (raise, limit 1), then both finish. For until_and_while_executing the second
 * job's handoff meets the first's run lock: it goes back to the queue for a retry and must keep its queue lock.
 */
export const conflictScenario = (lock: LockType.LockType): [Config, Iterable<Cmd>] => {
  const { queue, run } = LockType.phases(lock)
  const config: Config = {
    lock,
    limit: 1,
    client: "log",
    server: lock === "while_executing_reject" ? "reject" : run ? "raise" : "log",
    ttl: lock === "until_expired",
    args: "number"
  }
  const commands: Array<Cmd> = [
    new Push(0),
    new Start(0),
    new Push(0),
    new Start(0),
    new Complete(0, "finish"),
    ...(queue ? [new Start(0), new Complete(0, "finish")] : [])
  ]
  return [config, commands]
}

/** Runs the commands on a fresh system, then drains it; answers the trace. */
export const runCommands = async (
  cmds: Iterable<fc.AsyncCommand<Model, System>>,
  makeSystem: () => Promise<System>
): Promise<ReadonlyArray<string>> => {
  const system = await makeSystem()
  await fc.asyncModelRun(
    () => ({ model: { waiting: 0, running: 0, completable: 0, stallable: 0, partitionable: 0 }, real: system }),
    cmds
  )
  await system.drain()
  return system.trace
}

/** How many cases: bounded in CI, many more with UNIQUE_JOBS_PROPERTY_RUNS. */
export const runs = (ci: number): number => Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? ci)

export const advanceReal = (ms: number) => Effect.sleep(Duration.millis(ms))
