/**
 * The lease keeper: one per store (so one per `RedisService` layer). Held run locks register with it; it renews
 * every lease held by the process in one script call per chunk per tick, and tells exactly the holders whose entry
 * is gone, or whose last confirmed lease ran out, that they lost their lock. No fiber per held lock: one loop,
 * started by the first registration and ended when the last lease is let go.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import { LockLost } from "../Errors.js"
import * as Metrics from "../Metrics.js"
import type { RedisError, Renewal, Store } from "./models.js"

/** The most renewals one script call carries: a tick over thousands of leases sends several calls. @internal */
export const chunkSize = 500

/**
 * How long before its lease could end in Redis a holder gives the lock up: a tenth of the lease, at most 2 seconds.
 * It covers the time to interrupt the perform and a small drift between the two clocks. @internal
 */
export const leaseGuardMs = (leaseMs: number): number => Math.min(2000, Math.ceil(leaseMs / 10))

/** One held run lock's lease. @internal */
export interface Lease {
  readonly renewal: Renewal
  readonly digest: string
  readonly lockType: string
  /** Renew this often: a third of the lease. */
  readonly every: number
  /**
   * When this process stops believing it holds the lock: the send time of the last confirmed renewal (or of the
   * acquisition) + lease − `leaseGuardMs`. The call reached Redis after it was sent, so the lease ends here first.
   */
  deadline: number
  next: number
  inFlight: boolean
  lastError: RedisError | undefined
  /** Set once the lease is no longer kept: released, or lost (then `lost` says why). */
  ended: boolean
  lost: LockLost | undefined
  /** Told once, when the lock is lost while kept. */
  onLost: ((lost: LockLost) => void) | undefined
}

interface Keeper {
  readonly leases: Set<Lease>
  running: boolean
  /** The clock the loop runs on: a lock taken on another clock (a test's TestClock) starts a loop on its own. */
  clock: Clock.Clock | undefined
  /** Which loop is the current one: a loop that finds it moved on ends. */
  generation: number
  plannedWake: number
  wake: Deferred.Deferred<void> | undefined
}

const keepers = new WeakMap<Store, Keeper>()

const keeperOf = (store: Store): Keeper => {
  let keeper = keepers.get(store)
  if (keeper === undefined) {
    keeper = { leases: new Set(), running: false, clock: undefined, generation: 0, plannedWake: Infinity, wake: undefined }
    keepers.set(store, keeper)
  }
  return keeper
}

const annotations = (lease: Lease) => ({
  package: "effect-unique-jobs",
  module: "Lock",
  digest: lease.digest,
  jid: lease.renewal.jid
})

/** Ends a lease as lost: counted, logged, and its holder told. @internal */
const lose = (keeper: Keeper, lease: Lease, reason: string): Effect.Effect<void> => {
  if (lease.ended) return Effect.void
  lease.ended = true
  keeper.leases.delete(lease)
  const lost = new LockLost({ digest: lease.digest, jid: lease.renewal.jid, lockType: lease.lockType, reason })
  lease.lost = lost
  return Effect.zipRight(
    Metric.increment(Metrics.lost.of(lease.lockType, "run")),
    Effect.sync(() => lease.onLost?.(lost))
  ).pipe(Effect.zipRight(Effect.logWarning(lost.message).pipe(Effect.annotateLogs(annotations(lease)))))
}

const ranOut = (lease: Lease) =>
  `no renewal was confirmed before its lease ended${
    lease.lastError === undefined ? "" : ` (last renewal: ${lease.lastError.message})`
  }`

const signal = (keeper: Keeper) => {
  const wake = keeper.wake
  if (wake !== undefined) {
    keeper.wake = undefined
    Deferred.unsafeDone(wake, Effect.void)
  }
}

// One call for a chunk; its answers settle each lease it carried (one whose lock ended meanwhile is left alone).
const renewChunk = (store: Store, keeper: Keeper, chunk: ReadonlyArray<Lease>, sent: number): Effect.Effect<void> =>
  store.renewAll(chunk.map((lease) => lease.renewal)).pipe(
    Effect.flatMap((renewed) =>
      Effect.forEach(chunk, (lease, i) => {
        lease.inFlight = false
        if (lease.ended) return Effect.void
        if (renewed[i] === true) {
          lease.deadline = Math.max(lease.deadline, sent + lease.renewal.leaseMs - leaseGuardMs(lease.renewal.leaseMs))
          lease.next = sent + lease.every
          lease.lastError = undefined
          return Effect.void
        }
        return lose(keeper, lease, "a renewal found the hold gone (deleted, or its lease passed)")
      }, { discard: true })
    ),
    Effect.catchAll((error) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        for (const lease of chunk) {
          lease.inFlight = false
          lease.lastError = error
          // Tried again within a second (sooner for a short lease) until the lease ends.
          lease.next = now + Math.min(lease.every, 1000)
        }
        const [first] = chunk
        return first === undefined ? Effect.void : Effect.logWarning(
          `lease renewal of ${chunk.length} lock(s) failed; retrying until their leases end`,
          error
        ).pipe(Effect.annotateLogs(annotations(first)))
      })
    ),
    Effect.ensuring(Effect.sync(() => signal(keeper)))
  )

const tick = (store: Store, keeper: Keeper, generation: number): Effect.Effect<boolean> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) => {
    if (keeper.generation !== generation) return Effect.succeed(false)
    const due: Array<Lease> = []
    const losses: Array<Effect.Effect<void>> = []
    for (const lease of keeper.leases) {
      if (lease.deadline <= now) {
        losses.push(lose(keeper, lease, ranOut(lease)))
      } else if (!lease.inFlight && lease.next - lease.every / 2 <= now) {
        // Due, or due within half a period: renewed now, so leases taken at different times share the calls.
        lease.inFlight = true
        due.push(lease)
      }
    }
    const chunks: Array<ReadonlyArray<Lease>> = []
    for (let i = 0; i < due.length; i += chunkSize) chunks.push(due.slice(i, i + chunkSize))
    return Effect.zipRight(
      Effect.all(losses, { discard: true }),
      // Each call runs on its own: a call that hangs must not hold back the deadlines of the others.
      Effect.forEach(chunks, (chunk) => Effect.fork(renewChunk(store, keeper, chunk, now)), { discard: true })
    ).pipe(Effect.zipRight(Effect.fiberIdWith((fiberId) => {
      if (keeper.generation !== generation) return Effect.succeed(false)
      if (keeper.leases.size === 0) {
        keeper.running = false
        return Effect.succeed(false)
      }
      let wakeAt = Infinity
      for (const lease of keeper.leases) {
        wakeAt = Math.min(wakeAt, lease.deadline, lease.inFlight ? Infinity : lease.next)
      }
      // Set in the same step as the plan: a lease registered from now on wakes the loop if it is due earlier.
      keeper.plannedWake = wakeAt
      const wake = Deferred.unsafeMake<void>(fiberId)
      keeper.wake = wake
      return Effect.as(Effect.raceFirst(Effect.sleep(Math.max(0, wakeAt - now)), Deferred.await(wake)), true)
    })))
  })

const loop = (store: Store, keeper: Keeper, generation: number): Effect.Effect<void> =>
  Effect.flatMap(tick(store, keeper, generation), (again) => (again ? loop(store, keeper, generation) : Effect.void))

/**
 * Keeps a run lock's lease from now on: `sentAt` is when its acquisition was sent, by this process' clock.
 * @internal
 */
export const keep = (
  store: Store,
  renewal: Renewal,
  about: { readonly digest: string; readonly lockType: string },
  sentAt: number
): Effect.Effect<Lease> =>
  Effect.clockWith((clock) => {
    const keeper = keeperOf(store)
    const every = Math.max(1, Math.floor(renewal.leaseMs / 3))
    const lease: Lease = {
      renewal,
      digest: about.digest,
      lockType: about.lockType,
      every,
      deadline: sentAt + renewal.leaseMs - leaseGuardMs(renewal.leaseMs),
      next: sentAt + every,
      inFlight: false,
      lastError: undefined,
      ended: false,
      lost: undefined,
      onLost: undefined
    }
    keeper.leases.add(lease)
    if (!keeper.running || keeper.clock !== clock) {
      keeper.running = true
      keeper.clock = clock
      keeper.plannedWake = Infinity
      // A new loop runs on the clock and logger of the fiber that needs it; interruptible, whatever that fiber's
      // region (a lock is taken and handed over here without an interruption in between).
      return Effect.as(Effect.forkDaemon(Effect.interruptible(loop(store, keeper, ++keeper.generation))), lease)
    }
    if (Math.min(lease.next, lease.deadline) < keeper.plannedWake) signal(keeper)
    return Effect.succeed(lease)
  })

/** Stops keeping a lease (its lock is being released). @internal */
export const letGo = (store: Store, lease: Lease): void => {
  if (lease.ended) return
  lease.ended = true
  const keeper = keepers.get(store)
  if (keeper === undefined) return
  // The loop ends at its next tick if no lease is left by then.
  keeper.leases.delete(lease)
}
