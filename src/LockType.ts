/**
 * The lock types, one record each: what the type does at enqueue, before and after perform, when the queue gives
 * its job up, and which options it reads. The middleware and the options check read the record; adding a lock
 * type is adding one record.
 *
 * @since 0.1.0
 */

/**
 * The canonical lock types.
 *
 * @since 0.1.0
 * @category models
 */
export type LockType =
  | "until_executing"
  | "until_executed"
  | "until_expired"
  | "while_executing"
  | "while_executing_reject"
  | "until_and_while_executing"

/**
 * Every name a worker's `lock` option accepts, aliases included.
 *
 * @since 0.1.0
 * @category models
 */
export type Name =
  | LockType
  | "while_enqueued"
  | "until_completed"
  | "until_performed"
  | "until_processed"
  | "until_successfully_completed"
  | "around_perform"
  | "while_busy"
  | "while_working"

/**
 * Each accepted name and the type it stands for.
 *
 * @since 0.1.0
 * @category constants
 */
export const names: { readonly [K in Name]: LockType } = {
  until_executing: "until_executing",
  while_enqueued: "until_executing",
  until_executed: "until_executed",
  until_completed: "until_executed",
  until_performed: "until_executed",
  until_processed: "until_executed",
  until_successfully_completed: "until_executed",
  until_expired: "until_expired",
  while_executing: "while_executing",
  around_perform: "while_executing",
  while_busy: "while_executing",
  while_working: "while_executing",
  while_executing_reject: "while_executing_reject",
  until_and_while_executing: "until_and_while_executing"
}

/**
 * Which lock a step is about: `queue` from enqueue (the digest itself), `run` during perform (`<digest>:RUN`).
 *
 * @since 0.1.0
 * @category models
 */
export type Phase = "queue" | "run"

/**
 * What one lock type does.
 *
 * @since 0.1.0
 * @category models
 */
export interface Record {
  readonly type: LockType
  /** At enqueue: take the queue lock (and enqueue only with it), or enqueue as is. */
  readonly enqueue: "lock" | "pass"
  /**
   * Before perform: nothing; release the queue lock; take the run lock; or hand the queue lock over to the run lock
   * in one script.
   */
  readonly beforePerform: "none" | "releaseQueueLock" | "takeRunLock" | "handoff"
  /**
   * After perform: nothing; release the queue lock once the perform succeeded (a failure keeps it for the retry,
   * which has the same jid); or release the run lock, however the perform ended.
   */
  readonly afterPerform: "none" | "releaseQueueLockOnSuccess" | "releaseRunLock"
  /** When the queue gives the job up for good: release the queue lock it may still hold, or leave it. */
  readonly onDeath: "releaseQueueLock" | "none"
  /**
   * What ends the queue lock: `unlock` (the steps above, with `lockTtl` as a bound), or `expiry` only (its `lockTtl`
   * is its one release: nothing unlocks it, and `afterUnlock` never runs).
   */
  readonly releasedBy: "unlock" | "expiry"
  /** The options that apply to it; one given where it never applies is refused. */
  readonly options: {
    readonly lockTtl: "required" | "optional" | "never"
    readonly lockLease: "optional" | "never"
    /** The only server strategy it has, when it has one fixed. */
    readonly serverStrategy?: "reject" | undefined
  }
}

const queueOnly = { lockTtl: "optional", lockLease: "never" } as const
const runOnly = { lockTtl: "never", lockLease: "optional" } as const

/**
 * The record of every lock type.
 *
 * @since 0.1.0
 * @category constants
 */
export const records: { readonly [K in LockType]: Record & { readonly type: K } } = {
  until_executing: {
    type: "until_executing",
    enqueue: "lock",
    beforePerform: "releaseQueueLock",
    afterPerform: "none",
    onDeath: "releaseQueueLock",
    releasedBy: "unlock",
    options: queueOnly
  },
  until_executed: {
    type: "until_executed",
    enqueue: "lock",
    beforePerform: "none",
    afterPerform: "releaseQueueLockOnSuccess",
    onDeath: "releaseQueueLock",
    releasedBy: "unlock",
    options: queueOnly
  },
  until_expired: {
    type: "until_expired",
    enqueue: "lock",
    beforePerform: "none",
    afterPerform: "none",
    onDeath: "none",
    releasedBy: "expiry",
    options: { lockTtl: "required", lockLease: "never" }
  },
  while_executing: {
    type: "while_executing",
    enqueue: "pass",
    beforePerform: "takeRunLock",
    afterPerform: "releaseRunLock",
    onDeath: "none",
    releasedBy: "unlock",
    options: runOnly
  },
  while_executing_reject: {
    type: "while_executing_reject",
    enqueue: "pass",
    beforePerform: "takeRunLock",
    afterPerform: "releaseRunLock",
    onDeath: "none",
    releasedBy: "unlock",
    options: { ...runOnly, serverStrategy: "reject" }
  },
  until_and_while_executing: {
    type: "until_and_while_executing",
    enqueue: "lock",
    beforePerform: "handoff",
    afterPerform: "releaseRunLock",
    onDeath: "releaseQueueLock",
    releasedBy: "unlock",
    options: { lockTtl: "optional", lockLease: "optional" }
  }
}

/**
 * Whether a type takes a lock at enqueue (`queue`) and/or around perform (`run`), as its record says.
 *
 * @since 0.1.0
 * @category utils
 */
export const phases = (type: LockType): { readonly queue: boolean; readonly run: boolean } => phasesOf[type]

const phasesOf = Object.fromEntries(
  Object.values(records).map((record) => [record.type, {
    queue: record.enqueue === "lock",
    run: record.afterPerform === "releaseRunLock"
  }])
) as { readonly [K in LockType]: { readonly queue: boolean; readonly run: boolean } }

/**
 * Whether a type lets its queue lock go as its job starts (`until_executing` releases it, `until_and_while_executing`
 * hands it to the run lock): a queue-lock holder whose job runs is then caught starting, about to let go or to come
 * back delayed, not holding for its run.
 *
 * @since 0.1.0
 * @category utils
 */
export const letsGoAtStart = (type: LockType): boolean => {
  const before = records[type].beforePerform
  return before === "releaseQueueLock" || before === "handoff"
}
