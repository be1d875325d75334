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
 * @since 0.1.0
 * @category tags
 */
export class JobQueue extends Context.Tag("effect-unique-jobs/JobQueue")<JobQueue, {
  /** Makes the job ready to run now. */
  readonly push: (job: Job) => Effect.Effect<void, QueueError>
  /** Makes the job run at `at` (epoch ms), keeping its jid. */
  readonly schedule: (job: Job, at: number) => Effect.Effect<void, QueueError>
  /** Removes a job that waits (ready or scheduled); false when it is running, done or unknown. */
  readonly remove: (jid: string) => Effect.Effect<boolean, QueueError>
  /** Moves the job to the dead set with a reason. */
  readonly kill: (job: Job, reason: string) => Effect.Effect<void, QueueError>
  /** Whether the queue still knows the job: waiting, scheduled or running. */
  readonly exists: (jid: string) => Effect.Effect<boolean, QueueError>
}>() {}
