/**
 * The bound on the admin UI's requests served at once: `concurrency` read Redis together, up to `queue` more wait
 * for a turn, and one beyond that is refused at once (503 with Retry-After) instead of piling calls on the store's
 * connection, where every worker's lease renewal would wait behind them.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Semaphore from "effect/Semaphore"
import { Refusal } from "./Responses.js"

/** The defaults and bounds of `Web.Options`' `concurrency` and `queue`. @internal */
export const limits = {
  concurrency: { min: 1, max: 64, fallback: 4 },
  queue: { min: 0, max: 1000, fallback: 16 }
} as const

/** What `Gate.make` answers a request it turned away: a 503 and the seconds to wait before asking again. @internal */
export const retryAfterSeconds = 1

/** A request turned away: `concurrency` are served and `queue` wait already. Answered with Retry-After. @internal */
export class Busy extends Refusal {
  constructor(concurrency: number, queue: number) {
    const reason = `the admin UI serves ${concurrency} request(s) at once and ${queue} more wait; try again in a moment`
    super(503, "Busy", reason)
  }
}

/**
 * A gate for one router: `run(self)` runs `self` once one of `concurrency` turns is free, or fails with `Busy` at once
 * when `queue` requests wait already.
 *
 * @internal
 */
export const make = (concurrency: number, queue: number) => {
  const turns = Semaphore.makeUnsafe(concurrency)
  // Requests served or waiting: counted before the wait, so a burst finds the queue full at once.
  let admitted = 0
  return {
    // Uninterruptible between the count and its release: a request dropped while it waits gives its place back.
    run: <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E | Refusal, R> =>
      Effect.uninterruptibleMask((restore) =>
        Effect.suspend((): Effect.Effect<A, E | Refusal, R> => {
          if (admitted >= concurrency + queue) return Effect.fail(new Busy(concurrency, queue))
          admitted++
          return restore(Semaphore.withPermits(turns, 1)(self)).pipe(Effect.ensuring(Effect.sync(() => admitted--)))
        })
      ),
    /** Requests served or waiting now. */
    admitted: () => admitted
  }
}
