/**
 * The typed failures of the lock steps and the strategies, each with the fields a caller handles it by. Users
 * tell them apart with `Effect.catchTag`.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"

/**
 * The lock is held by other jobs (as many as `lockLimit`). The conflict strategies turn it into an outcome.
 *
 * @since 0.1.0
 * @category errors
 */
export class LockConflict extends Schema.TaggedError<LockConflict>("effect-unique-jobs/LockConflict")("LockConflict", {
  digest: Schema.String,
  jid: Schema.String,
  phase: Schema.Literals(["queue", "run"]),
  lockType: Schema.String,
  holders: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `Job ${this.jid} cannot take the ${this.phase} lock ${this.digest}: held by ${this.holders.join(", ")}`
  }
}

/**
 * A held execution lock was lost while the job ran: a renewal or the release found it gone (deleted, or its lease
 * passed and another job may have taken it) or revoked by an operator (its place stays taken until this run lets go),
 * or no renewal was confirmed before the lease ended. The perform is
 * interrupted when the loss is seen while it runs. The job's writes since then may overlap another holder's: pass
 * the fencing token (`Running.fence`) to the stores it writes to so they can refuse the stale holder.
 *
 * @since 0.1.0
 * @category errors
 */
export class LockLost extends Schema.TaggedError<LockLost>("effect-unique-jobs/LockLost")("LockLost", {
  digest: Schema.String,
  jid: Schema.String,
  lockType: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `Job ${this.jid} lost its lock ${this.digest} while running (${this.reason}); another copy may take it once this run stops`
  }
}

/**
 * A duplicate enqueue under `raise`.
 *
 * @since 0.1.0
 * @category errors
 */
export class DuplicateJob extends Schema.TaggedError<DuplicateJob>("effect-unique-jobs/DuplicateJob")("DuplicateJob", {
  digest: Schema.String,
  jid: Schema.String,
  worker: Schema.String,
  holders: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `${this.worker} ${this.jid} is a duplicate of ${this.holders.join(", ")} (${this.digest}); ` +
      "it was not enqueued. Catch DuplicateJob, or use onConflict: \"log\" to skip duplicates quietly."
  }
}

/**
 * A duplicate execution under `raise`: fails the job so the queue retries it later.
 *
 * @since 0.1.0
 * @category errors
 */
export class ExecutionConflict extends Schema.TaggedError<ExecutionConflict>("effect-unique-jobs/ExecutionConflict")(
  "ExecutionConflict",
  {
    digest: Schema.String,
    jid: Schema.String,
    worker: Schema.String,
    holders: Schema.Array(Schema.String)
  }
) {
  override get message(): string {
    return `${this.worker} ${this.jid} cannot run while ${this.holders.join(", ")} runs (${this.digest}); ` +
      "failing it so the queue retries it later."
  }
}

/**
 * A job's arguments did not fit its worker's `args` schema: on the way into the queue (`encode`: nothing was locked or
 * enqueued) or on the way out (`decode`: the payload the queue delivered; the perform never ran). `issues` name each
 * path, like `args[0].reportId`.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidJobArgs extends Schema.TaggedError<InvalidJobArgs>("effect-unique-jobs/InvalidJobArgs")("InvalidJobArgs", {
  worker: Schema.String,
  jid: Schema.String,
  direction: Schema.Literals(["encode", "decode"]),
  issues: Schema.Array(Schema.Struct({ path: Schema.String, message: Schema.String }))
}) {
  override get message(): string {
    const issues = this.issues.map((issue) => `${issue.path}: ${issue.message}`).join("; ")
    return this.direction === "decode"
      ? `${this.worker} job ${this.jid} was not performed: its payload does not decode with the worker's args schema (${issues})`
      : `${this.worker} job ${this.jid} was not enqueued: its arguments do not encode with the worker's args schema (${issues})`
  }
}

/**
 * Where a prefix's keys live (one Redis, or a cluster and its number of `shards`) is recorded in Redis the first time
 * the prefix is used (`<prefix>:layout`), and this process is configured otherwise: its locks would be keys the other
 * processes never look at, so the same job could run twice at once. Nothing was written. Configure this process as
 * the record says, or move the prefix to the new layout first (docs/redis-cluster.md, "Moving a prefix to another
 * layout").
 *
 * With `reset`, the record was there and this process read it, but `unique-jobs layout reset` (`Redis.resetLayout`) has
 * forgotten it since: every lock call of this process under the prefix is refused before it writes anything, for as
 * long as it runs, so it never locks beside a process that recorded the prefix's new layout. Restart it configured
 * for the layout the prefix has now (`unique-jobs layout show`).
 *
 * @since 0.1.0
 * @category errors
 */
export class LayoutMismatch extends Schema.TaggedError<LayoutMismatch>("effect-unique-jobs/LayoutMismatch")(
  "LayoutMismatch",
  {
    prefix: Schema.String,
    /** The key that holds the record. */
    key: Schema.String,
    /** What the record says, in words (or, for a key this library did not write, what it holds). */
    recorded: Schema.String,
    /** What this process is configured for, in words. */
    configured: Schema.String,
    /** The key holds something this library did not write. */
    foreign: Schema.Boolean,
    /**
     * The layout this process read was reset after it read it (`recorded` then names the layout it read).
     *
     * @since 0.1.0
     */
    reset: Schema.optional(Schema.Boolean)
  }
) {
  override get message(): string {
    if (this.reset === true) {
      return `the layout of prefix ${this.prefix} that this process read (${this.recorded}) was reset with unique-jobs ` +
        `layout reset after it read it (${this.key} retires it): this process locks nothing more under the prefix. ` +
        `Stop it, and start it again configured for the prefix's layout now (unique-jobs layout show)`
    }
    return this.foreign
      ? `the layout of prefix ${this.prefix} cannot be read: ${this.key} holds ${this.recorded}, which this library ` +
        `did not write; use another lockPrefix, or delete ${this.key} if nothing else uses it (this process is ` +
        `configured for ${this.configured})`
      : `prefix ${this.prefix} is recorded in Redis (${this.key}) as ${this.recorded}, but this process is ` +
        `configured for ${this.configured}: configure it as the processes that use the prefix are (Redis Cluster: ` +
        `the same shards), or stop them all and move the prefix first (unique-jobs layout reset, once it holds no lock)`
  }
}

/**
 * A worker's options ask a queue adapter for something its queue cannot do: refused where the worker meets the
 * adapter (its processor is built), before any job runs, instead of failing or misbehaving job by job. `strategy`
 * names what was asked (`server: reschedule`, `client: replace`, `debounce`), `reason` why the queue cannot do it.
 *
 * @since 2.0.0
 * @category errors
 */
export class UnsupportedStrategy extends Schema.TaggedError<UnsupportedStrategy>("effect-unique-jobs/UnsupportedStrategy")(
  "UnsupportedStrategy",
  {
    adapter: Schema.String,
    worker: Schema.optional(Schema.String),
    strategy: Schema.String,
    reason: Schema.String
  }
) {
  override get message(): string {
    return `${this.adapter} cannot run ${this.worker === undefined ? "this worker" : `worker ${this.worker}`} with ` +
      `${this.strategy}: ${this.reason}`
  }
}
