/**
 * Every metric the library records, in one place.
 *
 * Labelled counters are built once per label set with the labels inside their key: `Metric.tagged` would
 * merge labels and look the metric up again on every update, which costs more than the lock call it counts.
 *
 * @since 0.1.0
 */
import type * as FiberRef from "effect/FiberRef"
import { currentMetricLabels } from "effect/FiberRef"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as MetricKey from "effect/MetricKey"
import * as MetricLabel from "effect/MetricLabel"

/**
 * A counter family: one counter per `(lock_type, phase)`, made on first use and kept.
 *
 * @since 0.1.0
 * @category models
 */
export interface Family {
  readonly name: string
  readonly of: (lockType: string, phase: string) => Metric.Metric.Counter<number>
}

const family = (name: string, description: string): Family => {
  const made = new Map<string, Map<string, Metric.Metric.Counter<number>>>()
  return {
    name,
    of: (lockType, phase) => {
      let byPhase = made.get(lockType)
      if (byPhase === undefined) {
        byPhase = new Map()
        made.set(lockType, byPhase)
      }
      let counter = byPhase.get(phase)
      if (counter === undefined) {
        const key = MetricKey.counter(name, { description, incremental: true }).pipe(
          MetricKey.taggedWithLabels([MetricLabel.make("lock_type", lockType), MetricLabel.make("phase", phase)])
        )
        counter = Metric.fromMetricKey(key)
        byPhase.set(phase, counter)
      }
      return counter
    }
  }
}

/**
 * `Metric.increment` as a plain call, for code already inside `Effect.withFiberRuntime`: the same update with the
 * fiber's metric labels (`Effect.labelMetrics` still applies), without the three runtime steps `Metric.increment`
 * takes as an Effect. The lock steps count every call, so this is on their hot path.
 *
 * @since 0.1.0
 * @category utils
 */
export const unsafeIncrement = (
  counter: Metric.Metric.Counter<number>,
  fiber: { readonly getFiberRef: <X>(fiberRef: FiberRef.FiberRef<X>) => X }
): void => counter.unsafeUpdate(1, fiber.getFiberRef(currentMetricLabels))

/**
 * Locks taken, labelled `lock_type` and `phase` (`queue` or `run`).
 *
 * @since 0.1.0
 * @category metrics
 */
export const acquired = family("unique_jobs_locks_acquired_total", "Locks taken")

/**
 * Attempts that found the lock held, labelled `lock_type` and `phase`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const conflicts = family("unique_jobs_lock_conflicts_total", "Lock attempts that found the lock held")

/**
 * Locks released by an unlock, labelled `lock_type` and `phase`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const released = family("unique_jobs_locks_released_total", "Locks released")

/**
 * Held execution locks found gone by a lease renewal, labelled `lock_type` and `phase`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const lost = family("unique_jobs_locks_lost_total", "Execution locks lost while the job ran")

/**
 * Jobs whose queue lock had vanished (TTL, manual delete) when they started; they run anyway. Labelled
 * `lock_type` and `phase`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const uniquenessLapsed = family(
  "unique_jobs_uniqueness_lapsed_total",
  "Jobs that started without the queue lock they were enqueued with"
)

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
