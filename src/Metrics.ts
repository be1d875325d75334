/**
 * Every metric the library records, in one place. Labels are added where a metric is used.
 *
 * @since 0.1.0
 */
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"

/**
 * Locks taken, labelled `lock_type` and `phase` (`queue` or `run`).
 *
 * @since 0.1.0
 * @category metrics
 */
export const acquired = Metric.counter("unique_jobs_locks_acquired_total", {
  description: "Locks taken",
  incremental: true
})

/**
 * Attempts that found the lock held, labelled `lock_type` and `phase`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const conflicts = Metric.counter("unique_jobs_lock_conflicts_total", {
  description: "Lock attempts that found the lock held by another job",
  incremental: true
})

/**
 * Locks released by an unlock, labelled `lock_type` and `phase`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const released = Metric.counter("unique_jobs_locks_released_total", {
  description: "Locks released",
  incremental: true
})

/**
 * Held locks found gone by a lease renewal, labelled `lock_type`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const lost = Metric.counter("unique_jobs_locks_lost_total", {
  description: "Execution locks lost while the job ran",
  incremental: true
})

/**
 * Jobs whose queue lock had vanished (TTL, manual delete) when they started; they run anyway.
 *
 * @since 0.1.0
 * @category metrics
 */
export const uniquenessLapsed = Metric.counter("unique_jobs_uniqueness_lapsed_total", {
  description: "Jobs that started without the queue lock they were enqueued with",
  incremental: true
})

/**
 * How long a lock was held, in milliseconds, from acquire to release in one process.
 *
 * @since 0.1.0
 * @category metrics
 */
export const holdTime = Metric.histogram(
  "unique_jobs_lock_hold_time_ms",
  MetricBoundaries.exponential({ start: 1, factor: 4, count: 12 }),
  "Time a lock was held, in milliseconds"
)
