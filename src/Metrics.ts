/**
 * Every metric the library records, in one place.
 *
 * Labelled counters are built once per label set with the labels as their own attributes: `Metric.withAttributes`
 * would merge attributes and look the metric up again on every update, which costs more than the lock call it counts.
 *
 * @since 0.1.0
 */
import * as Metric from "effect/Metric"
import * as Internal from "./observability/MetricState.js"

/**
 * A counter family: one counter per `(lock_type, phase)`, made on first use and kept.
 *
 * @since 0.1.0
 * @category models
 */
export type Family = Internal.Family

/**
 * Locks taken, labelled `lock_type` and `phase` (`queue` or `run`).
 *
 * @since 0.1.0
 * @category metrics
 */
export const acquired = Internal.family("unique_jobs_locks_acquired_total", "Locks taken")

/**
 * Attempts that found the lock held, labelled `lock_type` and `phase`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const conflicts = Internal.family("unique_jobs_lock_conflicts_total", "Lock attempts that found the lock held")

/**
 * Locks released by an unlock, labelled `lock_type` and `phase`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const released = Internal.family("unique_jobs_locks_released_total", "Locks released")

/**
 * Held execution locks found gone by a lease renewal, labelled `lock_type` and `phase`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const lost = Internal.family("unique_jobs_locks_lost_total", "Execution locks lost while the job ran")

/**
 * Releases that found no lock where the lock type says the job holds one (a queue lock released before or after
 * perform), labelled `lock_type` and `phase`. The likely cause is a worker whose `lockPrefix` or digest options differ
 * from the producer's: the producer's lock then stays. Each is also a warning naming the digest.
 *
 * @since 0.1.0
 * @category metrics
 */
export const releaseMissed = Internal.family(
  "unique_jobs_release_missed_total",
  "Releases that found no lock where the lock type holds one"
)

/**
 * Jobs whose queue lock had vanished (TTL, manual delete) when they started; they run anyway. Labelled
 * `lock_type` and `phase`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const uniquenessLapsed = Internal.family(
  "unique_jobs_uniqueness_lapsed_total",
  "Jobs that started without the queue lock they were enqueued with"
)

/**
 * Jobs a queue adapter put back on their queue, no attempt spent, because Redis failed (a timeout, a closed
 * connection, a failover) before their perform started: at the handoff or the run lock's acquisition. Labelled
 * `lock_type` and `phase`. Each is also a warning naming the job.
 *
 * @since 0.1.0
 * @category metrics
 */
export const putBack = Internal.family(
  "unique_jobs_jobs_put_back_total",
  "Jobs put back on their queue, no attempt spent, after Redis failed before their perform"
)

/**
 * How long a lock was held, in milliseconds, from acquire to release in one process.
 *
 * @since 0.1.0
 * @category metrics
 */
export const holdTime: Metric.Histogram<number> = Metric.histogram("unique_jobs_lock_hold_time_ms", {
  description: "Time a lock was held, in milliseconds",
  boundaries: Metric.exponentialBoundaries({ start: 1, factor: 4, count: 12 })
})

/**
 * `lockTimeout`'s waits, one per job that met its run lock held and waited (a job that takes the lock at once, or
 * whose store has no release signals, counts none), labelled `lock_type` and `outcome`: `taken` (the lock was taken
 * after waiting), `timed_out` (`lockTimeout` ran out: the server strategy had the job), `full` (refused by a waiter
 * cap, `maxLockWaiters` or `maxProcessWaiters`: the strategy at once), `closed` (the store closed: the strategy),
 * `interrupted` (the job was interrupted while it waited) or `failed` (Redis failed: the channel could not be
 * subscribed, or a try failed).
 *
 * @since 0.1.0
 * @category metrics
 */
export const lockWaits = Internal.family("unique_jobs_lock_waits_total", "lockTimeout waits, by outcome", "outcome")

/**
 * How long each `lockTimeout` wait lasted, in milliseconds, from the job's first conflict to the wait's end (the lock
 * taken, the deadline, …). Waits refused at once (`full`, `closed` at the start) are not recorded.
 *
 * @since 0.1.0
 * @category metrics
 */
export const waitTime: Metric.Histogram<number> = Metric.histogram("unique_jobs_lock_wait_time_ms", {
  description: "Time a job waited for a held run lock (lockTimeout), in milliseconds",
  boundaries: Metric.exponentialBoundaries({ start: 1, factor: 4, count: 12 })
})

/**
 * What the reaper removed, labelled `what`: `member` (an index member whose lock was gone or emptied), `holder` (a
 * holder whose expiry or lease had passed) or `orphan` (a holder with no expiry whose job the queue no longer knows).
 *
 * @since 0.1.0
 * @category metrics
 */
export const reaped: {
  readonly member: Metric.Counter<number>
  readonly holder: Metric.Counter<number>
  readonly orphan: Metric.Counter<number>
} = {
  member: Metric.counter("unique_jobs_reaped_total", {
    description: "Removed by the reaper",
    incremental: true,
    attributes: { what: "member" }
  }),
  holder: Metric.counter("unique_jobs_reaped_total", {
    description: "Removed by the reaper",
    incremental: true,
    attributes: { what: "holder" }
  }),
  orphan: Metric.counter("unique_jobs_reaped_total", {
    description: "Removed by the reaper",
    incremental: true,
    attributes: { what: "orphan" }
  })
}

/**
 * Changes made through the admin UI, labelled `action` (`unlock`, `delete`, `reap`) and `outcome` (`done`, `nothing`:
 * a page's change found nothing to act on, `failed`, or `refused`: read-only, no CSRF token, another origin).
 *
 * @since 0.1.0
 * @category metrics
 */
export const adminActions: Metric.Counter<number> = Metric.counter("unique_jobs_admin_actions_total", {
  description: "Changes asked of the admin UI",
  incremental: true
})
