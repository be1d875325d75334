/**
 * The port a queue adapter implements: what strategies, the reaper and the middleware need from a queue.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { Job } from "./Job.js"

// An Effect answering, once the queue has answered a timed-out add, whether the job was stored.
const Landing = Schema.declare((input: unknown): input is Effect.Effect<boolean> => Effect.isEffect(input), {
  identifier: "Landing"
})

/**
 * A queue operation failed. `landing` is set when an add timed out after it was sent: the queue may still store the
 * job when its Redis answers. It ends once the queue has answered (true: the job was stored); until then the job's
 * queue lock is kept, so that no second copy can be added meanwhile, and it is released only when the job was not
 * stored.
 *
 * @since 0.1.0
 * @category errors
 */
export class QueueError extends Schema.TaggedError<QueueError>("effect-unique-jobs/QueueError")("QueueError", {
  operation: Schema.String,
  jid: Schema.optional(Schema.String),
  reason: Schema.String,
  cause: Schema.optional(Schema.Defect),
  landing: Schema.optional(Landing)
}) {
  override get message(): string {
    return `Queue ${this.operation}${this.jid === undefined ? "" : ` of job ${this.jid}`} failed: ${this.reason}`
  }
}

/**
 * The port. The contract every adapter keeps (`test/jobqueue.conformance.test.ts` checks `MemoryQueue` and BullMQ):
 *
 * - **Job ids.** A job lives under its `jid` from push to end: a retry and a reschedule keep it. Locks are held by
 *   jid, so a queue that makes up its own ids cannot carry them.
 * - **Which job a call receives.** `push` receives a job the queue never saw. `schedule` receives either a new job
 *   (an enqueue with `at`) or the job being performed right now (a server `reschedule`): that one must come back at
 *   `at` under the same jid and must not also complete or retry. `kill` receives either a job the queue never saw
 *   (a client `reject`: nothing was pushed) or the job being performed (a server `reject`): it goes to the dead set
 *   with the reason and must not be retried; the perform then returns normally. `remove` and `exists` take any jid.
 * - **`exists`** takes jobs by jid and queue name, in a batch, and answers each with a `Presence`: `"exists"` for a job
 *   waiting, delayed, paused, running, or failed and waiting for its retry; `"gone"` for one of the queue's own jobs
 *   that is completed, dead, removed, or was never seen; `"unknown"` for a job the adapter cannot see: another queue
 *   than the ones it serves, or one it could not ask. A queue answers only for its own jobs: never `"gone"` for
 *   another queue's. The reaper and `replace` act on `"gone"` alone. The answers come in the order asked, one per
 *   job; each costs the queue O(1) work, and a batch one round trip.
 * - **Time.** Every call is bounded in time: an adapter whose queue does not answer fails with a `QueueError`, it
 *   does not wait for ever. A `push` or `schedule` that timed out after it was sent, and may still be stored, sets
 *   the error's `landing` to its eventual answer: the job's queue lock is kept until then.
 * - **Locks across the queue's own moves.** A retry (same jid) re-enters its queue lock. A job redelivered while its
 *   first copy may still run (a stalled or crashed worker) meets that copy's run lock, held per acquisition: it is
 *   a conflict, handled by the server strategy, until the first copy's lease ends. When the queue gives a job up
 *   for good (last attempt failed), the adapter calls `Middleware.died` (`UniqueJob.died`) so `until_executed` and
 *   the handoff's queue lock let go.
 *
 * @since 0.1.0
 * @category tags
 */
export class JobQueue extends Context.Tag("effect-unique-jobs/JobQueue")<JobQueue, {
  /** Makes a job the queue never saw ready to run now, under its jid. */
  readonly push: (job: Job) => Effect.Effect<void, QueueError>
  /** Makes a new job, or the job being performed, run at `at` (epoch ms) under its jid. */
  readonly schedule: (job: Job, at: number) => Effect.Effect<void, QueueError>
  /** Removes a job that waits (ready or scheduled); false when it is running, done or unknown. */
  readonly remove: (jid: string) => Effect.Effect<boolean, QueueError>
  /** Puts a job the queue never saw, or the job being performed, in the dead set with a reason. */
  readonly kill: (job: Job, reason: string) => Effect.Effect<void, QueueError>
  /**
   * Whether each job is still to run or running (`"exists"`), definitely over (`"gone"`), or not this adapter's to
   * tell (`"unknown"`): one answer per job, in order, in one round trip.
   */
  readonly exists: (jobs: ReadonlyArray<JobRef>) => Effect.Effect<ReadonlyArray<Presence>, QueueError>
}>() {}

/**
 * A job as `exists` asks about it: its jid and the name of the queue it was added to.
 *
 * @since 0.1.0
 * @category models
 */
export interface JobRef {
  readonly jid: string
  readonly queue: string
}

/**
 * What a queue knows of a job: still to run or running, definitely over, or not its to tell (another queue's job,
 * or a queue it could not ask). Only `"gone"` lets the reaper or `replace` act.
 *
 * @since 0.1.0
 * @category models
 */
export type Presence = "exists" | "gone" | "unknown"

/**
 * `exists` of one job.
 *
 * @since 0.1.0
 * @category utils
 */
export const presenceOf = (
  queue: Context.Tag.Service<JobQueue>,
  job: JobRef
): Effect.Effect<Presence, QueueError> => Effect.map(queue.exists([job]), (answers) => answers[0] ?? "unknown")
