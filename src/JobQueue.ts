/**
 * The port a queue adapter implements: what strategies, the reaper and the middleware need from a queue.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
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
  cause: Schema.optional(Schema.Defect()),
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
export class JobQueue extends Context.Service<JobQueue, {
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
  /**
   * Optional: what each job is now, for an operator (the admin UI's lock page and its `?job=` filter): its state,
   * attempts, times and a preview of its data, or undefined for a job not this adapter's to tell (another queue's).
   * One answer per job, in order, in one round trip per queue; each costs the queue O(1) work (never a walk of its
   * lists), and the data and failure reason it answers are cut at `previewBytes`. An adapter without it leaves the
   * UI showing the lock alone.
   */
  readonly describe?: ((jobs: ReadonlyArray<JobRef>) => Effect.Effect<ReadonlyArray<JobDetails | undefined>, QueueError>) | undefined
}>()("effect-unique-jobs/JobQueue") {}

/**
 * Where a job is in its queue, as `describe` answers it: BullMQ's states (`"waiting"`, `"delayed"`, `"prioritized"`,
 * `"active"`, `"completed"`, `"failed"`, `"paused"`: waiting in a paused queue, `"waiting-children"`), `"gone"` for a
 * job the queue does not hold (removed, or never added), and `"unknown"` for one it holds in no state it can tell.
 *
 * @since 0.1.0
 * @category models
 */
export type JobState =
  | "waiting"
  | "delayed"
  | "prioritized"
  | "active"
  | "completed"
  | "failed"
  | "paused"
  | "waiting-children"
  | "gone"
  | "unknown"

/**
 * Every `JobState`, in the order an operator reads them.
 *
 * @since 0.1.0
 * @category constants
 */
export const jobStates: ReadonlyArray<JobState> = [
  "waiting",
  "delayed",
  "prioritized",
  "active",
  "paused",
  "waiting-children",
  "completed",
  "failed",
  "gone",
  "unknown"
]

/**
 * The most bytes of a job's data (and of its failure reason) `describe` answers: a preview, cut beyond.
 *
 * @since 0.1.0
 * @category constants
 */
export const previewBytes = 2048

/**
 * What a queue tells of one job (`describe`). Times are epoch ms; a field the queue does not keep is undefined.
 *
 * @since 0.1.0
 * @category models
 */
export interface JobDetails {
  readonly jid: string
  readonly queue: string
  readonly state: JobState
  /** The job's name (BullMQ's job name: the worker). */
  readonly name?: string | undefined
  /** Attempts made so far (ended in a failure, or done). */
  readonly attemptsMade?: number | undefined
  /** When it was added. */
  readonly addedAt?: number | undefined
  /** When its last attempt started. */
  readonly processedOn?: number | undefined
  /** When it completed or failed. */
  readonly finishedOn?: number | undefined
  /** When a delayed job is due. */
  readonly runsAt?: number | undefined
  /** Why its last attempt failed, cut at `previewBytes`. */
  readonly failedReason?: string | undefined
  /** Its data as the queue stores it (BullMQ: JSON), cut at `previewBytes`. */
  readonly data?: string | undefined
  /** The stored data's whole size in bytes: more than the preview's when it was cut. */
  readonly dataBytes?: number | undefined
}

/**
 * Whether a `JobDetails`' data preview was cut.
 *
 * @since 0.1.0
 * @category utils
 */
export const dataCut = (details: JobDetails): boolean =>
  details.data !== undefined && details.dataBytes !== undefined && details.dataBytes > Buffer.byteLength(details.data)

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
  queue: Context.Service.Shape<typeof JobQueue>,
  job: JobRef
): Effect.Effect<Presence, QueueError> => Effect.map(queue.exists([job]), (answers) => answers[0] ?? "unknown")

/**
 * The reason a job's failure is recorded with (a dead letter, a failed event): the error's name and message.
 *
 * @internal
 */
export const reasonOf = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.squash(cause)
  return failure instanceof Error ? `${failure.name}: ${failure.message}` : String(failure)
}
