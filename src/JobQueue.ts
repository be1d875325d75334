/**
 * The port a queue adapter implements: what strategies, the reaper and the middleware need from a queue.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { Job } from "./Job.js"

/**
 * A queue operation failed.
 *
 * @since 0.1.0
 * @category errors
 */
export class QueueError extends Schema.TaggedError<QueueError>("effect-unique-jobs/QueueError")("QueueError", {
  operation: Schema.String,
  jid: Schema.optional(Schema.String),
  reason: Schema.String,
  cause: Schema.optional(Schema.Defect)
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
 * - **`exists`** answers true for a job waiting, delayed, running, or failed and waiting for its retry; false for
 *   one completed, dead, removed, or never seen. The reaper and `replace` act on a false.
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
  /** Whether the job is still to run or running: waiting, delayed, active, or waiting for a retry. */
  readonly exists: (jid: string) => Effect.Effect<boolean, QueueError>
}>() {}
