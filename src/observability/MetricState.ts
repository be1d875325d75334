/**
 * How the metrics are made and updated on the hot path.
 *
 * @internal
 */
import type * as Context from "effect/Context"
import * as Metric from "effect/Metric"

/**
 * A counter family: one counter per `(lock_type, phase)` (or another second label, as `outcome`), made on first use
 * and kept.
 *
 * @internal
 */
export interface Family {
  readonly name: string
  readonly of: (lockType: string, phase: string) => Metric.Counter<number>
}

/** @internal */
export const family = (name: string, description: string, second: string = "phase"): Family => {
  const made = new Map<string, Map<string, Metric.Counter<number>>>()
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
        counter = Metric.counter(name, {
          description,
          incremental: true,
          attributes: { lock_type: lockType, [second]: phase }
        })
        byPhase.set(phase, counter)
      }
      return counter
    }
  }
}

/**
 * `Metric.update(counter, 1)` as a plain call, for code already inside `Effect.withFiber`: the same update with the
 * fiber's services (its metric attributes still apply), without the steps `Metric.update` takes as an Effect. The
 * lock steps count every call, so this is on their hot path.
 *
 * @internal
 */
export const unsafeIncrement = (
  counter: Metric.Counter<number>,
  fiber: { readonly context: Context.Context<never> }
): void => counter.updateUnsafe(1, fiber.context)
