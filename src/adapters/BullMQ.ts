/**
 * The BullMQ adapter: the `JobQueue` port over a BullMQ `Queue`, and a processor for BullMQ's `Worker` that runs
 * the server middleware. A BullMQ job is one of ours with `jid` = the job's id, `worker` = its name, `queue` = its
 * queue's name and `args` = `[data]`: the data your processor reads stays yours, untouched.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Queue } from "bullmq"
 * import { UniqueJob } from "effect-unique-jobs"
 * import { BullMQ } from "effect-unique-jobs/bullmq"
 *
 * const Charge = UniqueJob.unsafeMake({ worker: "charge", queue: "payments", lock: "until_executed" })
 * const program = Effect.gen(function*() {
 *   yield* Charge.enqueue([{ customer: 1 }]) // Enqueued | Skipped | …
 *   yield* BullMQ.worker(Charge, (job) => charge(job.data), { connection })
 * })
 * ```
 *
 * @since 0.1.0
 */
import type { Job as BullJob, JobsOptions, Queue, WorkerOptions } from "bullmq"
import { DelayedError, UnrecoverableError, Worker } from "bullmq"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import type * as Scope from "effect/Scope"
import { InvalidJobArgs, type LayoutMismatch } from "../Errors.js"
import { makeDeadlines } from "../store/Deadlines.js"
import type { Job } from "../Job.js"
import { type JobDetails, JobQueue, type JobRef, type JobState, type Presence, previewBytes, QueueError } from "../JobQueue.js"
import * as Lock from "../Lock.js"
import * as Metrics from "../Metrics.js"
import * as BullOptions from "./bullmq/Options.js"
import { passes } from "../store/Store.js"
import * as Middleware from "../Middleware.js"
import { Defaults, resolve } from "../Defaults.js"
import { type Definition, InvalidLockOptions } from "../Options.js"
import { adapterTimeoutMs } from "../options/Decoding.js"
import { checkLayout, type RedisError, RedisService } from "../Redis.js"
import * as Strategy from "../Strategy.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /**
   * Where `kill` puts a job, with its reason: a BullMQ queue you can inspect and retry from. Default: a queue
   * named `<queue>-dead` on the queue's connection, closed with the adapter.
   */
  readonly deadLetter?: Queue | undefined
  /** Options for every job this adapter adds (a push or a schedule): attempts, backoff, removeOnComplete… */
  readonly jobOptions?: JobsOptions | undefined
  /** How long any call to a queue may take before it fails with a `QueueError`. Default 5 seconds. */
  readonly timeout?: Duration.Input | undefined
}

/**
 * What a dead-letter entry carries: the job as we knew it, why it died, and when (epoch ms).
 *
 * @since 0.1.0
 * @category models
 */
export interface DeadLetter {
  readonly job: { readonly jid: string; readonly worker: string; readonly queue: string; readonly args: ReadonlyArray<unknown> }
  readonly reason: string
  readonly at: number
}

/**
 * The adapter: the `JobQueue` port over `queue`, and the dead-letter queue.
 *
 * @since 0.1.0
 * @category models
 */
export interface BullMQ extends Context.Service.Shape<typeof JobQueue> {
  /** The first queue given. */
  readonly queue: Queue
  /** Every queue the adapter serves, one per name. */
  readonly queues: ReadonlyArray<Queue>
  /** The first queue's dead-letter queue. */
  readonly deadLetter: Queue
  /**
   * `queue.add` of a stamped job under its jid, with BullMQ options beside the adapter's `jobOptions` (a `delay`, a
   * `priority`…): what `push` and `schedule` do, for callers that have options of their own.
   */
  readonly add: (job: Job, options?: JobsOptions | undefined) => Effect.Effect<BullJob, QueueError>
}

/**
 * @since 0.1.0
 * @category tags
 */
export const BullMQ: Context.Service<BullMQ, BullMQ> = Context.Service<BullMQ>("effect-unique-jobs/BullMQ")

/** The BullMQ job a processor is running, with the token that lets it move that job. @internal */
export interface Active {
  readonly job: BullJob
  readonly token: string | undefined
  /** Set by `schedule`: the job was moved to delayed, so the processor must end with `DelayedError`. */
  moved: boolean
  /** Set when its perform starts: a failure before then spent nothing of the job (see `putBack`). */
  started: boolean
}

// Which job the current fiber performs: `schedule` and `kill` receive the job being performed (a server strategy's
// reschedule or reject), and only its processor's token can move an active job. Fibers a strategy forks inherit it.
const currentActive = Context.Reference<Active | undefined>("effect-unique-jobs/BullMQ/currentActive", {
  defaultValue: () => undefined
})

/**
 * A BullMQ job as the middleware sees it.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toJob = (job: BullJob): Job => ({
  jid: job.id ?? "",
  worker: job.name,
  queue: job.queueName,
  args: [job.data],
  retryCount: job.attemptsMade
})

const queueErrorOf = (operation: string, jid: string | undefined, cause: unknown): QueueError =>
  new QueueError({ operation, jid, reason: cause instanceof Error ? cause.message : String(cause), cause })

// A check that refused, as a value: the Effect and promise faces of an add fail with it each in their way.
const refusal = (operation: string, jid: string, reason: string): QueueError =>
  new QueueError({ operation, jid, reason })

const refuse = (operation: string, jid: string, reason: string) => Effect.fail(refusal(operation, jid, reason))

// BullMQ carries one data value per job: our args are `[data]`. Options under which BullMQ may store nothing under
// the jid (deduplication…) are refused: the lock would be held for a job that never runs.
const dataOf = (
  operation: string,
  job: Job,
  queue: Queue,
  own?: JobsOptions
): QueueError | { readonly data: unknown } => {
  const refused = BullOptions.issues(own, "options", "add")
  if (refused.length > 0) {
    return refusal(operation, job.jid, refused.map((issue) => `${issue.field}: ${issue.reason}`).join("; "))
  }
  if (job.queue !== queue.name) {
    return refusal(operation, job.jid, `the job is for queue "${job.queue}" but this adapter adds to "${queue.name}"`)
  }
  if (job.args.length !== 1) {
    return refusal(
      operation,
      job.jid,
      `a BullMQ job carries one data value: args must be [data] (got ${job.args.length} arguments)`
    )
  }
  return { data: job.args[0] }
}

// An add answers the job BullMQ has under the id it returns: another id than the jid means the lock's job was not
// stored (the middleware then releases the lock), never an `Enqueued` for a job that does not exist.
const storedAs = (operation: string, job: Job, added: BullJob): QueueError | BullJob =>
  added.id === job.jid
    ? added
    : refusal(operation, job.jid, `BullMQ answered with job ${added.id} instead of storing this one under its id`)

// A job of the queue is there while its hash is and it is neither completed nor failed for good: BullMQ deletes the
// hash of a removed job (and of a completed or failed one under removeOnComplete/removeOnFail). Job keys are built
// from the queue's key prefix, as BullMQ's own scripts build them: one queue's keys share its hash slot.
// KEYS[1] <queue>:completed  KEYS[2] <queue>:failed  ARGV[1] the job key prefix <prefix>:<queue>:, ARGV[2..] jids.
const presenceScript = `local out = {}
for i = 2, #ARGV do
  local jid = ARGV[i]
  if redis.call('EXISTS', ARGV[1] .. jid) == 0 or redis.call('ZSCORE', KEYS[1], jid) or redis.call('ZSCORE', KEYS[2], jid) then
    out[#out + 1] = 0
  else
    out[#out + 1] = 1
  end
end
return out`
const presenceCommand = "uniqueJobsPresence"
const presenceChunk = 200
const defined = new WeakSet<object>()

// What a job is now, for an operator: O(1) reads per job (its hash's fields, a ZSCORE per sorted set, its lock key),
// never BullMQ's getState, which walks the active and wait lists. A job whose hash is there and that is in no sorted
// set is active while a worker holds its lock, else waiting (paused: its queue is). Data and reason come cut.
// KEYS[1..5] <queue>:completed, failed, delayed, prioritized, waiting-children  KEYS[6] <queue>:meta
// ARGV[1] the job key prefix <prefix>:<queue>:, ARGV[2] the most bytes of data and reason, ARGV[3..] jids.
// Per job: false (no hash), or { state, name, attemptsMade, timestamp, processedOn, finishedOn, failedReason,
// data, data's length, delayed score }.
const describeScript = `local out = {}
local max = tonumber(ARGV[2])
local paused = redis.call('HEXISTS', KEYS[6], 'paused') == 1
local states = { 'completed', 'failed', 'delayed', 'prioritized', 'waiting-children' }
for i = 3, #ARGV do
  local jid = ARGV[i]
  local key = ARGV[1] .. jid
  if redis.call('EXISTS', key) == 0 then
    out[#out + 1] = false
  else
    local state = false
    local score = false
    for k = 1, 5 do
      local s = redis.call('ZSCORE', KEYS[k], jid)
      if s then
        state = states[k]
        if k == 3 then score = s end
        break
      end
    end
    if not state then
      if redis.call('EXISTS', key .. ':lock') == 1 then state = 'active'
      elseif paused then state = 'paused'
      else state = 'waiting' end
    end
    local f = redis.call('HMGET', key, 'name', 'atm', 'timestamp', 'processedOn', 'finishedOn', 'failedReason', 'data')
    local reason = f[6]
    if reason then reason = string.sub(reason, 1, max) end
    local data = f[7]
    local size = 0
    if data then
      size = string.len(data)
      data = string.sub(data, 1, max)
    end
    out[#out + 1] = { state, f[1], f[2], f[3], f[4], f[5], reason, data, size, score }
  end
end
return out`
const describeCommand = "uniqueJobsDescribe"

const describing = new WeakSet<object>()

// A script over a queue's jobs, defined once on each queue's client (`made` remembers where), run on chunks of
// `presenceChunk` jids that keep each call short and are sent together: one reply per jid, in order.
const perJob = async (
  of: Queue,
  command: string,
  lua: string,
  made: WeakSet<object>,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string>,
  jids: ReadonlyArray<string>
): Promise<Array<unknown>> => {
  const client = await of.getBackend().client
  if (!made.has(client)) {
    client.defineCommand(command, { numberOfKeys: keys.length, lua })
    made.add(client)
  }
  const chunks: Array<Promise<unknown>> = []
  for (let i = 0; i < jids.length; i += presenceChunk) {
    chunks.push(client.runCommand(command, [...keys, ...args, ...jids.slice(i, i + presenceChunk)]))
  }
  const replies = (await Promise.all(chunks)).flatMap((reply) => (Array.isArray(reply) ? reply : []))
  if (replies.length !== jids.length) throw new Error(`${replies.length} answers for ${jids.length} jobs`)
  return replies
}

const numberOf = (value: unknown): number | undefined => {
  if (value === null || value === undefined || value === false || value === "") return undefined
  const n = Number(value)
  return Number.isFinite(n) ? n : undefined
}
const textOf = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined)
// A cut may split a character: its stray bytes are dropped.
const cutText = (value: string | undefined, cut: boolean): string | undefined =>
  value === undefined || !cut ? value : value.replace(/\uFFFD+$/, "")

const knownStates = new Set<string>(["waiting", "delayed", "prioritized", "active", "completed", "failed", "paused", "waiting-children"])

// One job's reply of `describeScript` as `JobDetails`.
const detailsOf = (queue: string, jid: string, reply: unknown): JobDetails => {
  if (!Array.isArray(reply)) return { jid, queue, state: "gone" }
  const [state, name, attemptsMade, timestamp, processedOn, finishedOn, reason, data, size, score] = reply as Array<unknown>
  const dataBytes = numberOf(size)
  const delayed = numberOf(score)
  const failedReason = textOf(reason)
  return {
    jid,
    queue,
    state: typeof state === "string" && knownStates.has(state) ? state as JobState : "unknown",
    name: textOf(name),
    attemptsMade: numberOf(attemptsMade) ?? 0,
    addedAt: numberOf(timestamp),
    processedOn: numberOf(processedOn),
    finishedOn: numberOf(finishedOn),
    runsAt: delayed === undefined ? undefined : Math.floor(delayed / 0x1000),
    failedReason: cutText(failedReason, failedReason !== undefined && Buffer.byteLength(failedReason) >= previewBytes),
    data: cutText(textOf(data), dataBytes !== undefined && dataBytes > previewBytes),
    dataBytes
  }
}

/**
 * How long every call to a queue may take before it fails with a `QueueError`: 5 seconds.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultTimeout: Duration.Input = "5 seconds"

const refuseOption = (field: string, reason: string) =>
  new InvalidLockOptions({ field, reason, issues: [{ field, reason }] })

// The options decoded once, at make: the queues (one per name) and the timeout in whole milliseconds.
const settingsOf = (
  queues: Queue | ReadonlyArray<Queue>,
  options: Options
): Effect.Effect<{ readonly queues: ReadonlyArray<Queue>; readonly timeoutMs: number }, InvalidLockOptions> => {
  const list: ReadonlyArray<Queue> = Array.isArray(queues) ? queues : [queues as Queue]
  if (list.length === 0) {
    return Effect.fail(refuseOption("queues", "expected a BullMQ Queue, or a non-empty array of them"))
  }
  const names = new Set<string>()
  for (const [i, queue] of list.entries()) {
    if (typeof queue !== "object" || queue === null || typeof (queue as Queue).name !== "string") {
      return Effect.fail(refuseOption(`queues[${i}]`, `expected a BullMQ Queue; got ${String(queue)}`))
    }
    // A job names its queue by name alone: two queues of one name (other prefixes) cannot be told apart.
    if (names.has(queue.name)) {
      return Effect.fail(
        refuseOption(`queues[${i}]`, `two queues are named "${queue.name}"; give one adapter per prefix instead`)
      )
    }
    names.add(queue.name)
  }
  const timeout = adapterTimeoutMs(options.timeout ?? defaultTimeout)
  if (Result.isFailure(timeout)) return Effect.fail(refuseOption("timeout", timeout.failure))
  // Job options every add would carry, checked here once: under deduplication, say, no add would store its job.
  const jobIssues = BullOptions.issues(options.jobOptions, "jobOptions", "defaults")
  if (options.deadLetter !== undefined && typeof (options.deadLetter as Partial<Queue> | null)?.add !== "function") {
    jobIssues.push({ field: "deadLetter", reason: `expected a BullMQ Queue; got ${String(options.deadLetter)}` })
  }
  if (jobIssues.length > 0) {
    return Effect.fail(new InvalidLockOptions({ field: jobIssues[0]!.field, reason: jobIssues[0]!.reason, issues: jobIssues }))
  }
  return Effect.succeed({ queues: list, timeoutMs: timeout.success })
}

/**
 * The adapter over one BullMQ queue or several (each job goes to the queue its `queue` names). `push` adds the job
 * under its jid; `schedule` adds a new job delayed, and moves the job being performed to delayed (the only way
 * BullMQ lets a running job come back later under its id); `remove` removes a waiting or delayed job; `kill` adds
 * the job to its queue's dead-letter queue with its reason; `exists` reads, per job and in one pipeline per queue,
 * whether its hash is there and whether it is in the completed or failed set: O(1) work per job, whatever the
 * backlog (waiting, delayed, prioritized, paused, active, waiting-children: `"exists"`; completed, failed,
 * removed, never added: `"gone"`; a job of a queue this adapter was not given: `"unknown"`). Every call fails with a
 * `QueueError` when the queue's Redis does not answer within `timeout`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  queues: Queue | ReadonlyArray<Queue>,
  options: Options = {}
): Effect.Effect<BullMQ, InvalidLockOptions, Scope.Scope> =>
  Effect.gen(function*() {
    const settings = yield* settingsOf(queues, options)
    const queue = settings.queues[0]!
    const byName = new Map(settings.queues.map((q) => [q.name, q]))
    // Made at the first kill: a queue writes its keys to Redis as it connects, and most never kill a job.
    const madeDeadLetters = new Map<string, Queue>()
    const deadLetterOf = (of: Queue): Queue => {
      if (options.deadLetter !== undefined) return options.deadLetter
      let made = madeDeadLetters.get(of.name)
      if (made === undefined) {
        // The queue's own class: a subclass keeps its behaviour, and no second copy of bullmq is loaded.
        made = new (of.constructor as typeof Queue)(`${of.name}-dead`, of.opts)
        madeDeadLetters.set(of.name, made)
      }
      return made
    }
    yield* Effect.addFinalizer(() =>
      Effect.forEach(madeDeadLetters.values(), (made) => Effect.promise(() => made.close()), { discard: true })
    )
    const jobOptions = options.jobOptions ?? {}

    // Every call to a queue is bounded: one whose Redis does not answer fails; it does not wait for its reconnect.
    // An add that times out has been handed to the connection, which sends it when its Redis answers: given
    // `stored`, the error carries the call's eventual answer (`landing`), so that the job's lock is kept until then.
    // One deadline queue for every call (store/Deadlines): a timer and a racing fiber per call (Effect.timeout)
    // cost more Node CPU than BullMQ's own add. `done` or `failed` is called once, never after the deadline.
    const deadlines = makeDeadlines(settings.timeoutMs)
    const send = <A>(
      operation: string,
      jid: string | undefined,
      f: () => Promise<A>,
      stored: ((value: A) => boolean) | undefined,
      done: (value: A) => void,
      failed: (error: QueueError) => void
    ): void => {
      let answer: Promise<A>
      try {
        answer = f()
      } catch (cause) {
        answer = Promise.reject(cause)
      }
      const pending = deadlines.add(() =>
        failed(
          stored === undefined
            ? new QueueError({ operation, jid, reason: `BullMQ's Redis did not answer within ${settings.timeoutMs} ms` })
            : new QueueError({
              operation,
              jid,
              reason: `BullMQ's Redis did not answer within ${settings.timeoutMs} ms; the add was sent and may ` +
                "still be stored when it answers (the job's lock is kept until then)",
              landing: Effect.promise(() => answer.then(stored, () => false))
            })
        )
      )
      answer.then(
        (value) => {
          if (pending.settle()) done(value)
        },
        (cause: unknown) => {
          if (pending.settle()) failed(queueErrorOf(operation, jid, cause))
        }
      )
    }
    // No canceler: an interrupted call's answer settles its deadline, and resuming then is a no-op.
    const call = <A>(
      operation: string,
      jid: string | undefined,
      f: () => Promise<A>,
      stored?: (value: A) => boolean
    ): Effect.Effect<A, QueueError> =>
      Effect.callback<A, QueueError>((resume) =>
        send(operation, jid, f, stored, (value) => resume(Effect.succeed(value)), (error) => resume(Effect.fail(error)))
      )

    const unknownQueue = (operation: string, job: Job): QueueError =>
      new QueueError({
        operation,
        jid: job.jid,
        reason: `the job is for queue "${job.queue}" but this adapter adds to ${
          Array.from(byName.keys(), (name) => `"${name}"`).join(", ")
        }`
      })
    const queueOf = (operation: string, job: Job): Effect.Effect<Queue, QueueError> => {
      const found = byName.get(job.queue)
      return found !== undefined ? Effect.succeed(found) : Effect.fail(unknownQueue(operation, job))
    }

    // Each job asked of its own queue, one call per queue, all at once; another queue's job answered `other`.
    const perQueue = <A>(
      jobs: ReadonlyArray<JobRef>,
      other: A,
      ask: (of: Queue, jids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<A>, QueueError>
    ): Effect.Effect<ReadonlyArray<A>, QueueError> =>
      Effect.gen(function*() {
        const answers: Array<A> = jobs.map(() => other)
        const asked = new Map<Queue, Array<number>>()
        jobs.forEach((job, i) => {
          const of = byName.get(job.queue)
          if (of === undefined) return // another queue's job: not this adapter's to tell
          const positions = asked.get(of)
          if (positions === undefined) asked.set(of, [i])
          else positions.push(i)
        })
        yield* Effect.forEach(asked, ([of, positions]) =>
          Effect.map(ask(of, positions.map((i) => jobs[i]!.jid)), (found) =>
            found.forEach((answer, k) => {
              answers[positions[k]!] = answer
            })), { concurrency: "unbounded", discard: true })
        return answers
      })

    const activeOf = (jid: string) =>
      Effect.map(currentActive, (active) => (active?.job.id === jid ? active : undefined))

    // Per job: its hash, and its score in the completed and failed sets (O(1) each).
    const presenceIn = (of: Queue, jids: ReadonlyArray<string>): Effect.Effect<Array<Presence>, QueueError> =>
      call("exists", jids.length === 1 ? jids[0] : undefined, async () =>
        (await perJob(of, presenceCommand, presenceScript, defined, [of.keys.completed!, of.keys.failed!], [of.toKey("")], jids))
          .map((reply): Presence => (Number(reply) === 1 ? "exists" : "gone")))

    // Per job what `describeScript` reads: one round trip per queue.
    const detailsIn = (of: Queue, jids: ReadonlyArray<string>): Effect.Effect<Array<JobDetails>, QueueError> =>
      call("describe", jids.length === 1 ? jids[0] : undefined, async () => {
        const keys = [of.keys.completed!, of.keys.failed!, of.keys.delayed!, of.keys.prioritized!, of.keys["waiting-children"]!, of.keys.meta!]
        const replies = await perJob(of, describeCommand, describeScript, describing, keys, [of.toKey(""), String(previewBytes)], jids)
        return replies.map((reply, i) => detailsOf(of.name, jids[i]!, reply))
      })

    // An add of `job` under its jid, answered through `done` or `failed`: the one way `add`, `push`, `schedule` and
    // the promise face add a job.
    const addWith = (
      operation: string,
      job: Job,
      own: JobsOptions | undefined,
      done: (added: BullJob) => void,
      failed: (error: QueueError) => void
    ): void => {
      const target = byName.get(job.queue)
      if (target === undefined) return failed(unknownQueue(operation, job))
      const checked = dataOf(operation, job, target, own)
      if (checked instanceof QueueError) return failed(checked)
      send(
        operation,
        job.jid,
        () => target.add(job.worker, checked.data, { ...jobOptions, ...own, jobId: job.jid }),
        (added) => added.id === job.jid,
        (added) => {
          const answer = storedAs(operation, job, added)
          if (answer instanceof QueueError) failed(answer)
          else done(answer)
        },
        failed
      )
    }
    const addAs = (operation: string, job: Job, own: JobsOptions | undefined): Effect.Effect<BullJob, QueueError> =>
      Effect.callback((resume) =>
        addWith(operation, job, own, (added) => resume(Effect.succeed(added)), (error) => resume(Effect.fail(error)))
      )

    const adapter: BullMQ = {
      queue,
      queues: settings.queues,
      get deadLetter() {
        return deadLetterOf(queue)
      },
      add: (job, own) => addAs("add", job, own),
      push: (job) => Effect.asVoid(addAs("push", job, undefined)),
      schedule: (job, at) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const active = yield* activeOf(job.jid)
          if (active !== undefined) {
            yield* call("schedule", job.jid, () => active.job.moveToDelayed(Math.max(at, now), active.token))
            active.moved = true
            return
          }
          const target = yield* queueOf("schedule", job)
          // BullMQ ignores an add whose id it knows: say so rather than lose the job. Whether it knows the id is one
          // look at the job's hash, which every add writes a timestamp into (getJobState would scan the wait list);
          // only a known id needs its state.
          const known = yield* call("schedule", job.jid, async () =>
            (await target.getBackend().client).hexists(target.toKey(job.jid), "timestamp"))
          if (known === 0) return yield* Effect.asVoid(addAs("schedule", job, { delay: Math.max(0, at - now) }))
          const state = yield* call("schedule", job.jid, () => target.getJobState(job.jid))
          if (state === "delayed") {
            const known = yield* call("schedule", job.jid, () => target.getJob(job.jid))
            if (known !== undefined) {
              return yield* call("schedule", job.jid, () => known.changeDelay(Math.max(0, at - now)))
            }
          }
          return yield* refuse(
            "schedule",
            job.jid,
            `BullMQ already has this job id (${state}); only its own processor can move it while it runs`
          )
        }),
      // A jid names no queue: each queue is asked in turn (O(1) each), and the first that holds the job removes it.
      remove: (jid) =>
        Effect.gen(function*() {
          for (const of of settings.queues) {
            const [presence] = yield* presenceIn(of, [jid])
            if (presence !== "exists") continue
            // A job that became active meanwhile is locked: BullMQ answers 0 and leaves it.
            return (yield* call("remove", jid, () => of.remove(jid))) === 1
          }
          return false
        }),
      kill: (job, reason) =>
        Effect.gen(function*() {
          const at = yield* Clock.currentTimeMillis
          const entry: DeadLetter = {
            job: { jid: job.jid, worker: job.worker, queue: job.queue, args: job.args },
            reason,
            at
          }
          const of = yield* queueOf("kill", job)
          yield* call("kill", job.jid, () => deadLetterOf(of).add(job.worker, entry, { jobId: job.jid }))
        }),
      exists: (jobs) => perQueue(jobs, "unknown" as Presence, presenceIn),
      describe: (jobs) => perQueue(jobs, undefined as JobDetails | undefined, detailsIn)
    }
    addsNow.set(adapter, (job, own) => new Promise((resolve, reject) => addWith("add", job, own, resolve, reject)))
    return adapter
  })

const addsNow = new WeakMap<BullMQ, (job: Job, options?: JobsOptions | undefined) => Promise<BullJob>>()

/**
 * The adapter's `add` as a promise that rejects with its `QueueError`, for the Promise face's hot path (no fiber);
 * undefined for an adapter `make` did not build.
 *
 * @internal
 */
export const addNow = (
  adapter: BullMQ
): ((job: Job, options?: JobsOptions | undefined) => Promise<BullJob>) | undefined => addsNow.get(adapter)

/**
 * The adapter as both `BullMQ` and the `JobQueue` port, over one queue or several. Closing the layer closes the
 * dead-letter queues it made, not the queues: those are yours.
 *
 * @example
 * ```ts
 * // One reaper for a process that runs workers for three queues: each holder's job is asked of its own queue.
 * const Live = Reaper.layer().pipe(Layer.provide(BullMQ.layer([emails, payments, reports])))
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  queues: Queue | ReadonlyArray<Queue>,
  options?: Options
): Layer.Layer<BullMQ | JobQueue, InvalidLockOptions> =>
  Layer.effectContext(
    Effect.map(make(queues, options), (adapter) => Context.make(BullMQ, adapter).pipe(Context.add(JobQueue, adapter)))
  )

/**
 * Something that has a worker's definition: a `UniqueJob`, or `{ definition }`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Defined<Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>, ArgsError = never> {
  readonly definition: Definition
  /** A `UniqueJob` with an `args` schema decodes the job's `[data]` with it before the perform (never on bad data). */
  readonly decode?: ((job: Job) => Effect.Effect<Args, ArgsError>) | undefined
}

/**
 * A perform for BullMQ: the job, the lock it runs under (`running.fence` is the run lock's fencing token), BullMQ's
 * token for the job, and the job's arguments `[data]`, decoded by the worker's `args` schema when it has one.
 *
 * @since 0.1.0
 * @category models
 */
export type Perform<A, E, R, Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>> = (
  job: BullJob,
  running: Lock.Running,
  token: string | undefined,
  args: Args
) => Effect.Effect<A, E, R>

const unrecoverable = (failure: InvalidJobArgs): UnrecoverableError =>
  Object.assign(new UnrecoverableError(failure.message), { cause: failure })

// A failure as BullMQ wants it: an Error. Ours (ExecutionConflict, LockLost, …) already are.
const asError = (failure: unknown): Error =>
  failure instanceof Error ? failure : new Error(typeof failure === "string" ? failure : JSON.stringify(failure))

/**
 * BullMQ will not try the job again after this failure: its attempts are spent, it said so (`UnrecoverableError`),
 * the worker's `maxStartedAttempts` is reached, or the backoff strategy answered -1. BullMQ's own decision
 * (`Job.shouldRetryJob`, what `moveToFailed` asks) where the job has it; otherwise the same rule on attempts. A
 * decision that cannot be made (a backoff strategy that throws: BullMQ's own move then fails too) keeps the lock.
 */
const lastAttempt = (job: BullJob, error: Error): Effect.Effect<boolean> => {
  if (error instanceof UnrecoverableError || error.name === "UnrecoverableError") return Effect.succeed(true)
  const decide = (job as unknown as { readonly shouldRetryJob?: unknown }).shouldRetryJob
  if (typeof decide !== "function") {
    return Effect.succeed(!(job.attemptsMade + 1 < (job.opts.attempts ?? 1)))
  }
  return Effect.tryPromise(() => (decide as (error: Error) => Promise<readonly [boolean, number]>).call(job, error))
    .pipe(Effect.map(([retry]) => !retry), Effect.orElseSucceed(() => false))
}

/**
 * Runs `effect` as the perform of `job`: `schedule` and `kill` called from inside it (a server strategy) act on this
 * active job, with its `token`. A job that `schedule` moved to delayed ends with BullMQ's `DelayedError`, whatever
 * `effect` ended: it is coming back under its id, and BullMQ must neither complete nor fail it.
 *
 * @since 0.1.0
 * @category processor
 */
export const performing = <A, E, R>(
  job: BullJob,
  token: string | undefined,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | DelayedError, R> => Effect.suspend(() => performingAs({ job, token, moved: false, started: false }, effect))

const performingAs = <A, E, R>(active: Active, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | DelayedError, R> =>
  endedAs(active, Effect.provideService(effect, currentActive, active))

// A job `schedule` moved ends with DelayedError, whatever `effect` ended with.
const endedAs = <A, E, R>(active: Active, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | DelayedError, R> =>
  Effect.flatMap(
    Effect.exit(effect),
    (exit): Effect.Effect<A, E | DelayedError> => (active.moved ? Effect.fail(new DelayedError()) : exit)
  )

/**
 * One BullMQ job through the server middleware, ended as BullMQ must see it: `Performed` completes with the
 * perform's value; `Skipped` and `Rejected` complete with `undefined` (a rejected job is in the dead-letter queue);
 * `Rescheduled` fails with BullMQ's `DelayedError` (the job was moved to delayed under its id); a failure fails
 * with an Error, so BullMQ retries it by its `attempts` and `backoff`, an `ExecutionConflict` (`raise`) included.
 * A failure on the job's last attempt first calls `Middleware.died`, so `until_executed` lets its lock go. A job
 * whose handoff or run lock Redis failed to take before its perform started (a timeout, a closed connection, a
 * failover) is put back on its queue instead, delayed, with no attempt spent, and ends with `DelayedError`. A copy
 * BullMQ redelivered while its first copy still holds the run lock is rescheduled, whatever the server strategy:
 * it is not a duplicate, and the first copy may be dead.
 *
 * @since 0.1.0
 * @category processor
 */
export const handle = <A, E, R, Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>, ArgsError = never>(
  unique: Defined<Args, ArgsError>,
  perform: Perform<A, E, R, Args>,
  job: BullJob,
  token?: string | undefined
): Effect.Effect<Strategy.ServerOutcome<A>, Error, R | RedisService | JobQueue> =>
  Effect.suspend(() => handleAs(unique, perform, { job, token, moved: false, started: false }))

const handleAs = <A, E, R, Args extends ReadonlyArray<unknown>, ArgsError>(
  unique: Defined<Args, ArgsError>,
  perform: Perform<A, E, R, Args>,
  active: Active
): Effect.Effect<Strategy.ServerOutcome<A>, Error, R | RedisService | JobQueue> => {
  const { job, token } = active
  const ours = toJob(job)
  const args: Effect.Effect<Args, ArgsError> = unique.decode === undefined
    ? Effect.succeed(ours.args as unknown as Args)
    : unique.decode(ours)
  const run = Effect.flatMap(Defaults, (settings) =>
    Middleware.server(Middleware.awaitingItself(resolve(unique.definition, settings), "reschedule"))(
      ours,
      unique.decode === undefined
        ? (running) => {
          active.started = true
          return perform(job, running, token, ours.args as unknown as Args)
        }
        : (running) => {
          active.started = true
          return Effect.flatMap(args, (decoded) => perform(job, running, token, decoded))
        }
    ))
  // `currentActive` is set on the job's own fiber by the processor.
  return endedAs(active, run).pipe(Effect.catch(failedAs(unique.definition, active, ours)))
}

/**
 * Whether `failure`, met by a job whose perform has not started, is Redis's and not the job's: a passing
 * `RedisError` at the handoff or the run lock's acquisition (or the lock store's build), or a run lock lost before
 * the perform could start (its answer came too late to count as held).
 *
 * @internal
 */
export const failedBeforePerform = (failure: unknown): boolean => {
  if (typeof failure !== "object" || failure === null || !("_tag" in failure)) return false
  if (failure._tag === "LockLost") return true
  return failure._tag === "RedisError" && passes(failure as RedisError)
}

// Put back k times in a row (BullMQ counts every start of a job, its attempts only when they end): 0.5 s, 1 s, 2 s,
// 4 s, then 8 s, so a Redis that stays down costs a few calls per job and minute, and one back soon runs them.
const putBackDelayMs = (job: BullJob): number => {
  const again = Math.max(0, (job.attemptsStarted ?? 0) - job.attemptsMade - 1)
  return 500 * 2 ** Math.min(again, 4)
}

/**
 * Puts the active job back on its queue, delayed and with no attempt spent (`moveToDelayed`, as `close` does), and
 * ends with BullMQ's `DelayedError` so that BullMQ neither fails nor completes it: Redis failed before its perform
 * started (`failedBeforePerform`), so nothing of it ran. What it held keeps its end: a queue lock stays its own (its
 * jid re-enters it), and a run lock a lost answer took is released by the store's undo of that call, or ends by its
 * lease (its next start waits for that, as a copy meeting its own run lock does). The move waits for that undo
 * (`Store.undone`), for up to the adapter's 5-second bound: the undo releases whichever hold of the jid it finds, so it
 * must land before the job can start again, in any process. A move BullMQ does not answer in time leaves the job active: BullMQ finds it stalled and
 * offers it again. Logged at Warning and counted (`Metrics.putBack`).
 *
 * @internal
 */
export const putBack = (definition: Definition, active: Active, failure: unknown): Effect.Effect<never, DelayedError> =>
  Effect.suspend(() => {
    const { job, token } = active
    const delayMs = putBackDelayMs(job)
    active.moved = true
    const reason = failure instanceof Error ? failure.message : String(failure)
    // At most the adapter's bound: a Redis that stays stalled keeps the undo waiting, and the job must go back.
    const undone = Effect.flatMap(Effect.serviceOption(RedisService), (redis) =>
      Option.isSome(redis) && redis.value.undone !== undefined
        ? Effect.timeoutOption(redis.value.undone(job.id ?? ""), defaultTimeout)
        : Effect.void)
    const move = Effect.tryPromise(() => job.moveToDelayed(Date.now() + delayMs, token)).pipe(
      Effect.timeout(defaultTimeout)
    )
    return Effect.andThen(undone, move).pipe(
      Effect.matchCauseEffect({
        onSuccess: () =>
          Effect.andThen(
            Metric.update(Metrics.putBack.of(definition.lock, "run"), 1),
            Effect.logWarning(
              `Redis failed before the job's perform started (${reason}); put back on its queue to run in ` +
                `${delayMs} ms, no attempt spent`
            )
          ),
        onFailure: (cause) =>
          Effect.logWarning(
            `Redis failed before the job's perform started (${reason}), and BullMQ did not take the job back; it ` +
              "stays active until BullMQ finds it stalled and offers it again",
            cause
          )
      }),
      Effect.annotateLogs({ package: "effect-unique-jobs", module: "BullMQ", jid: job.id ?? "" }),
      Effect.andThen(Effect.fail(new DelayedError()))
    )
  })

/**
 * A failure of `active`'s processing as BullMQ must see it: put back when Redis failed before its perform started
 * (`putBack`), else as `failed` says.
 *
 * @internal
 */
export const failedAs = (definition: Definition, active: Active, ours: Job) =>
(failure: unknown): Effect.Effect<never, Error, RedisService> =>
  !active.started && !active.moved && active.token !== undefined && failedBeforePerform(failure)
    ? putBack(definition, active, failure)
    : failed(definition, active.job, ours)(failure)

/** A failure as BullMQ must see it; on the job's last attempt, `Middleware.died` first. @internal */
export const failed = (definition: Definition, job: BullJob, ours: Job) =>
(failure: unknown): Effect.Effect<never, Error, RedisService> => {
  // A payload that does not decode will not decode on a retry either: BullMQ fails it for good.
  const error = failure instanceof InvalidJobArgs ? unrecoverable(failure) : asError(failure)
  if (error instanceof DelayedError) return Effect.fail(error)
  return Effect.flatMap(lastAttempt(job, error), (last) =>
    !last ? Effect.fail(error) : Effect.andThen(
      Effect.catchCause(
        // Its queue lock often has no TTL: a release lost to a blip would keep the digest locked for good, so it is
        // tried again as a queue lock's release is (for up to 30 s).
        Effect.retry(Middleware.died(definition)(ours), {
          schedule: Lock.releaseRetry,
          while: (error) => error._tag === "RedisError"
        }),
        (cause) => Effect.logWarning("releasing the lock of a dead job failed; its TTL or the reaper ends it", cause)
      ),
      Effect.fail(error)
    ))
}

/**
 * A BullMQ processor function `(job, token, signal)` over any way to run an effect to its `Exit` on a fiber of its
 * own (`Effect.runPromiseExitWith(context)`, a `ManagedRuntime`'s); `unique` may depend on the job (its name).
 * BullMQ's abort signal (`worker.cancelJob`) interrupts the perform, which releases its run lock, and fails the job
 * (on its last attempt, after `Middleware.died`); a job turned away completes with `undefined`.
 *
 * @since 0.1.0
 * @category processor
 */
export const processorWith = <R>(
  runExit: (
    effect: Effect.Effect<Strategy.ServerOutcome<unknown>, Error, R>,
    signal: AbortSignal | undefined
  ) => Promise<Exit.Exit<Strategy.ServerOutcome<unknown>, unknown>>
) =>
<A, E, R2 extends R, Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>, ArgsError = never>(
  unique: Defined<Args, ArgsError> | ((job: BullJob) => Defined<Args, ArgsError>),
  perform: Perform<A, E, R2, Args>
) =>
async (job: BullJob, token?: string, signal?: AbortSignal): Promise<A | undefined> => {
  const defined = typeof unique === "function" ? unique(job) : unique
  const active: Active = { job, token, moved: false, started: false }
  let boundary: Lock.Boundary | undefined
  // The job's own fiber is the perform's boundary: a run lock lost while it runs interrupts this fiber (no fork).
  // Its references are set on its context, not scoped with `Effect.provideService`: the fiber ends with the job.
  const handled = Effect.withFiber((fiber) => {
    boundary = { fiber, taken: false, lost: undefined }
    fiber.setContext(Context.add(Context.add(fiber.context, Lock.currentBoundary, boundary), currentActive, active))
    return handleAs(defined, perform, active)
  }) as Effect.Effect<Strategy.ServerOutcome<A>, Error, R>
  let exit = await runExit(handled, signal)
  // Failed before the job's own steps could run (the lock store's build: its Redis down at the first job), as a
  // failure at the handoff does: put back.
  if (Exit.isFailure(exit) && !active.started && !active.moved && token !== undefined) {
    const failure = Cause.findErrorOption(exit.cause)
    if (Option.isSome(failure) && failedBeforePerform(failure.value)) {
      exit = await Effect.runPromiseExit(putBack(defined.definition, active, failure.value))
    }
  }
  // Interrupted for its lost run lock, or cancelled by BullMQ (`worker.cancelJob`): ended as a perform that failed
  // with that error ends (on its last attempt its locks go as a dead job's do; a strategy that moved the job to
  // delayed first: DelayedError). An interruption of ours (close's timeout) stays a cancellation.
  const interruptedBy = Exit.isSuccess(exit)
    ? undefined
    : boundary?.lost !== undefined && Cause.hasInterrupts(exit.cause)
    ? boundary.lost
    : signal?.aborted === true && Cause.hasInterruptsOnly(exit.cause)
    ? new Error(`job ${job.id} was cancelled`)
    : undefined
  if (interruptedBy !== undefined) {
    exit = await runExit(
      Effect.suspend(() =>
        active.moved ? Effect.fail(new DelayedError()) : failed(defined.definition, job, toJob(job))(interruptedBy)
      ) as Effect.Effect<never, Error, R>,
      undefined
    )
  }
  if (Exit.isSuccess(exit)) return exit.value._tag === "Performed" ? exit.value.value as A : undefined
  throw Cause.hasInterruptsOnly(exit.cause) ? new Error(`job ${job.id} was cancelled`) : Cause.squash(exit.cause)
}

/**
 * A BullMQ processor function from an Effect perform, run with the current context (its services and references).
 * Fails with `LayoutMismatch` when Redis records the lock prefix's layout otherwise than this process's store has it
 * (`Redis.checkLayout`).
 *
 * @since 0.1.0
 * @category processor
 */
export const processor = <A, E, R, Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>, ArgsError = never>(
  unique: Defined<Args, ArgsError>,
  perform: Perform<A, E, R, Args>
): Effect.Effect<
  (job: BullJob, token?: string, signal?: AbortSignal) => Promise<A | undefined>,
  LayoutMismatch | RedisError,
  R | RedisService | JobQueue
> =>
  Effect.andThen(
    Effect.flatMap(Defaults, (settings) => {
      const resolved = resolve(unique.definition, settings)
      return Effect.andThen(warnIfDropping(resolved), settings.enabled ? checkLayout(resolved.lockPrefix) : Effect.void)
    }),
    Effect.map(
      Effect.context<R | RedisService | JobQueue>(),
      (context) => {
        const runPromiseExit = Effect.runPromiseExitWith(context)
        return processorWith<R | RedisService | JobQueue>((effect, signal) =>
          runPromiseExit(effect, signal === undefined ? undefined : { signal })
        )(unique, perform)
      }
    )
  )

/**
 * Said once per processor, at its start: under `while_executing` with the `log` server strategy (the gem's default),
 * a copy BullMQ delivers while another runs is dropped (BullMQ shows it completed, with no value). Users who meant
 * "one at a time, every job" want `reschedule` (or `raise` with attempts).
 *
 * @internal
 */
export const warnIfDropping = (definition: Definition): Effect.Effect<void> => {
  if (definition.lock !== "while_executing" || definition.onConflict.server !== "log") return Effect.void
  // With a lockTimeout the copy waits first: it is dropped only when the wait ends without the lock.
  const waits = Duration.toMillis(definition.lockTimeout) > 0
  return Effect.logWarning(
    `while_executing with the server strategy log drops a job that ${
      waits ? "still meets a running copy when its lockTimeout ends" : "arrives while a copy of it runs"
    } (BullMQ completes it without running it); to run every job one at a time, set onConflict: { server: ` +
      "\"reschedule\" } (or \"raise\" with attempts)"
  ).pipe(Effect.annotateLogs({ package: "effect-unique-jobs", module: "BullMQ" }))
}

/**
 * A BullMQ `Worker` on `unique`'s queue running `perform` through the server middleware; closed with the scope
 * (waiting for the jobs it runs).
 *
 * @since 0.1.0
 * @category processor
 */
export const worker = <A, E, R, Args extends ReadonlyArray<unknown> = ReadonlyArray<unknown>, ArgsError = never>(
  unique: Defined<Args, ArgsError> & { readonly queue: string },
  perform: Perform<A, E, R, Args>,
  options: WorkerOptions
): Effect.Effect<Worker, LayoutMismatch | RedisError, R | RedisService | JobQueue | Scope.Scope> =>
  Effect.flatMap(processor(unique, perform), (fn) =>
    Effect.acquireRelease(
      Effect.sync(() => new Worker(unique.queue, fn, options)),
      (worker) => Effect.promise(() => worker.close())
    ))
