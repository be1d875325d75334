/**
 * How the metrics are made and updated on the hot path.
 *
 * @internal
 */
import type * as FiberRef from "effect/FiberRef"
import { currentMetricLabels } from "effect/FiberRef"
import * as Metric from "effect/Metric"
import * as MetricKey from "effect/MetricKey"
import * as MetricLabel from "effect/MetricLabel"

/**
 * A counter family: one counter per `(lock_type, phase)` (or another second label, as `outcome`), made on first use
 * and kept.
 *
 * @internal
 */
export interface Family {
  readonly name: string
  readonly of: (lockType: string, phase: string) => Metric.Metric.Counter<number>
}

/** @internal */
export const family = (name: string, description: string, second: string = "phase"): Family => {
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
          MetricKey.taggedWithLabels([MetricLabel.make("lock_type", lockType), MetricLabel.make(second, phase)])
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
 * @internal
 */
export const unsafeIncrement = (
  counter: Metric.Metric.Counter<number>,
  fiber: { readonly getFiberRef: <X>(fiberRef: FiberRef.FiberRef<X>) => X }
): void => counter.unsafeUpdate(1, fiber.getFiberRef(currentMetricLabels))
