/**
 * The lease keeper: one per store (so one per `RedisService` layer). Held run locks register with it; it renews
 * every lease held by the process in one script call per chunk, and tells exactly the holders whose entry is gone,
 * or whose last confirmed lease ran out, that they lost their lock. No fiber per held lock: one loop, started by the
 * first registration and ended once nothing is held (on the live clock `lingerMs` later) or its store's layer closes,
 * so it never keeps a process alive by itself.
 *
 * On the live clock the loop outlives its last lease by `lingerMs`: a worker taking run locks one after another
 * (concurrency 1) would otherwise start a loop, a fiber, per lock. Its timer holds the process open only while a lease
 * is held (a perform runs then anyway), so a lingering loop never does.
 *
 * Nothing here costs per held lease on a registration or a wake-up. Leases that share a period form a cohort,
 * renewed in rounds every half period: a lease joins the cohort's current round and is renewed one or two rounds
 * later (at an age between half a period and a period), so a tick touches only the leases it renews. Run-lock
 * acquisitions are admitted with at most `admissionLimit` in flight: one that finds room and nobody waiting goes at
 * once, the rest of a burst in batches, each sent at its own turn of the event loop, so a burst of thousands never has
 * a lock's reply and first renewal wait behind the rest of the burst, and the lease clock starts when the call is sent.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import type * as Scope from "effect/Scope"
import { LockLost } from "../Errors.js"
import * as Metrics from "../Metrics.js"
import type { RedisError, Renewal, Store } from "./Store.js"
import * as Waits from "./ReleaseWaits.js"

/** Why a lease ends when Redis refuses its renewal. @internal */
export const renewalRefused =
  "a renewal found the hold gone or revoked (deleted, its lease passed, or an operator unlocked it)"

/**
 * How long the loop on the live clock waits, with nothing held, for the next lease before it ends. Restarting it cost
 * a run-lock job at concurrency 1 more Node CPU than its lock call (bench/, issue 20). @internal
 */
export const lingerMs = 100

/** The most renewals one script call carries: a tick over thousands of leases sends several calls. @internal */
export const chunkSize = 500

/** The most run-lock acquisitions one store has in flight; the rest of a burst waits for the next turn. @internal */
export const admissionLimit = 256

/**
 * How long before its lease could end in Redis a holder gives the lock up: a tenth of the lease, at most 2 seconds.
 * It covers the time to interrupt the perform and a small drift between the two clocks. @internal
 */
export const leaseGuardMs = (leaseMs: number): number => Math.min(2000, Math.ceil(leaseMs / 10))

/** One held run lock's lease. @internal */
export interface Lease {
  readonly store: Store
  /** What each renewal sends; `keep` once its holder was told it lost the hold (a revoke) and has not let go. */
  renewal: Renewal
  readonly digest: string
  readonly lockType: string
  /** Renew this often: a third of the lease. */
  readonly every: number
  /** When the last confirmed call (the acquisition, or a renewal) was sent, by this process' clock. */
  sent: number
  /**
   * When this process stops believing it holds the lock: the send time of the last confirmed renewal (or of the
   * acquisition) + lease − `leaseGuardMs`. The call reached Redis after it was sent, so the lease ends here first.
   */
  deadline: number
  /** Where it waits for its next renewal (a cohort's round, or the keeper's `soon`); undefined while one is sent. */
  slot: Set<Lease> | undefined
  /** For a lease in `soon`: when to send its renewal. */
  retryAt: number
  lastError: RedisError | undefined
  /** Set once the lease is no longer kept: released, or lost (then `lost` says why). */
  ended: boolean
  lost: LockLost | undefined
  /** Told once, when the lock is lost while kept. */
  onLost: ((lost: LockLost) => void) | undefined
}

/** The leases of one period: renewed in rounds, half a period apart. */
interface Cohort {
  readonly every: number
  /** Joined since the last round: renewed at the round after next. */
  current: Set<Lease>
  /** Renewed at the next round. */
  previous: Set<Lease>
  nextRound: number
}

/** A renewal call in flight, and the earliest deadline among its leases. */
interface Chunk {
  readonly leases: ReadonlyArray<Lease>
  deadline: number
}

interface Keeper {
  /** Leases kept now: the loop ends when none is left. */
  held: number
  readonly cohorts: Map<number, Cohort>
  /** Leases renewed at their own `retryAt`: after a failed call, or taken so late that they are due already. */
  readonly soon: Set<Lease>
  readonly inFlight: Set<Chunk>
  running: boolean
  fiber: Fiber.Fiber<void> | undefined
  /** The clock the loop runs on: a lock taken on another clock (a test's TestClock) starts a loop on its own. */
  clock: Clock.Clock | undefined
  /** Which loop is the current one: a loop that finds it moved on ends. */
  generation: number
  /** With nothing held on the live clock: when the loop ends unless a lease joins first (which clears it). */
  lingerUntil: number | undefined
  plannedWake: number
  wake: Deferred.Deferred<void> | undefined
  /** Ends the loop's wait on the live clock (its timer and its wake in one callback). */
  wakeNow: (() => void) | undefined
  /** The timer of that wait: it holds the process open exactly while a lease is held. */
  timer: ReturnType<typeof setTimeout> | undefined
  // Admission of acquisitions.
  admitted: number
  readonly waiting: Array<Waiter>
  head: number
  flushing: boolean
}

interface Waiter {
  resume: (() => void) | undefined
  granted: boolean
}

const keepers = new WeakMap<Store, Keeper>()

const keeperOf = (store: Store): Keeper => {
  let keeper = keepers.get(store)
  if (keeper === undefined) {
    keeper = {
      held: 0,
      cohorts: new Map(),
      soon: new Set(),
      inFlight: new Set(),
      running: false,
      fiber: undefined,
      clock: undefined,
      generation: 0,
      lingerUntil: undefined,
      plannedWake: Infinity,
      wake: undefined,
      wakeNow: undefined,
      timer: undefined,
      admitted: 0,
      waiting: [],
      head: 0,
      flushing: false
    }
    keepers.set(store, keeper)
  }
  return keeper
}

// ---------------------------------------------------------------------------------------------------------------
// Admission
// ---------------------------------------------------------------------------------------------------------------

const flush = (keeper: Keeper) => {
  keeper.flushing = false
  while (keeper.admitted < admissionLimit && keeper.head < keeper.waiting.length) {
    const waiter = keeper.waiting[keeper.head++]!
    const resume = waiter.resume
    if (resume === undefined) continue // interrupted while it waited
    waiter.resume = undefined
    waiter.granted = true
    keeper.admitted++
    resume()
  }
  if (keeper.head === keeper.waiting.length) {
    keeper.waiting.length = 0
    keeper.head = 0
  } else {
    schedule(keeper)
  }
}

// The next batch goes at the next turn of the event loop, after whatever the current turn still runs (the rest of a
// burst that is asking for locks), and after the replies and renewals that turn lets in.
const schedule = (keeper: Keeper) => {
  if (keeper.flushing || keeper.admitted >= admissionLimit) return
  keeper.flushing = true
  setImmediate(flush, keeper)
}

const leave = (keeper: Keeper) => {
  keeper.admitted--
  if (keeper.head < keeper.waiting.length) schedule(keeper)
}

/**
 * `admitted`'s common case without a fiber: room, and nobody waiting before it, so in at once (true; the caller calls
 * `leaveNow` once its acquisition is kept or failed). Only a burst beyond the limit waits for its turn (a wait, a turn
 * of the event loop, cost a lone acquisition more than its lock call): false, and nothing was taken.
 *
 * @internal
 */
export const admitNow = (store: Store): boolean => {
  const keeper = keeperOf(store)
  if (keeper.admitted >= admissionLimit || keeper.head !== keeper.waiting.length) return false
  keeper.admitted++
  return true
}

/** Ends an acquisition `admitNow` let in. @internal */
export const leaveNow = (store: Store): void => leave(keeperOf(store))

/**
 * Runs a run-lock acquisition (the call, then `keep`) in its turn: at the next turn of the event loop, with at most
 * `admissionLimit` of the store's acquisitions in flight. The wait is interruptible (nothing is held yet); `self`
 * runs in the caller's region.
 *
 * @internal
 */
export const admitted = <A, E>(store: Store, self: Effect.Effect<A, E>): Effect.Effect<A, E> =>
  Effect.suspend(() => {
    const keeper = keeperOf(store)
    if (admitNow(store)) return Effect.ensuring(self, Effect.sync(() => leave(keeper)))
    const waiter: Waiter = { resume: undefined, granted: false }
    const wait = Effect.interruptible(Effect.callback<void>((resume) => {
      waiter.resume = () => resume(Effect.void)
      keeper.waiting.push(waiter)
      schedule(keeper)
      return Effect.sync(() => {
        waiter.resume = undefined
      })
    }))
    return Effect.onExit(wait, (exit) =>
      // Granted, then interrupted before it went on: its place goes to the next.
      exit._tag === "Failure" && waiter.granted ? Effect.sync(() => leave(keeper)) : Effect.void).pipe(
        Effect.andThen(Effect.ensuring(self, Effect.sync(() => leave(keeper))))
      )
  })

// ---------------------------------------------------------------------------------------------------------------
// Keeping leases
// ---------------------------------------------------------------------------------------------------------------

const annotations = (lease: Lease) => ({
  package: "effect-unique-jobs",
  module: "Lock",
  digest: lease.digest,
  jid: lease.renewal.jid
})

const signal = (keeper: Keeper) => {
  const wakeNow = keeper.wakeNow
  if (wakeNow !== undefined) {
    keeper.wakeNow = undefined
    wakeNow()
  }
  const wake = keeper.wake
  if (wake !== undefined) {
    keeper.wake = undefined
    Deferred.doneUnsafe(wake, Effect.void)
  }
}

// The lease stops being kept; with nothing left held the loop's timer lets the process go, and the loop is woken to
// end (or linger) now, not at its planned wake, unless that wake comes within the linger anyway (a loop lingering
// already is left to its wait).
const end = (keeper: Keeper, lease: Lease) => {
  lease.ended = true
  lease.slot?.delete(lease)
  lease.slot = undefined
  keeper.held--
  if (keeper.held > 0) return
  keeper.timer?.unref()
  if (keeper.clock !== liveClock || keeper.plannedWake > liveClock.currentTimeMillisUnsafe() + lingerMs) signal(keeper)
}

const lostError = (lease: Lease, reason: string) =>
  new LockLost({ digest: lease.digest, jid: lease.renewal.jid, lockType: lease.lockType, reason })

const told = (lease: Lease, lost: LockLost): Effect.Effect<void> =>
  Effect.andThen(
    Metric.update(Metrics.lost.of(lease.lockType, "run"), 1),
    Effect.sync(() => lease.onLost?.(lost))
  ).pipe(Effect.andThen(Effect.logWarning(lost.message).pipe(Effect.annotateLogs(annotations(lease)))))

/** Ends a lease as lost: counted, logged, and its holder told (once: a place kept since is only ended). @internal */
const lose = (keeper: Keeper, lease: Lease, reason: string): Effect.Effect<void> => {
  if (lease.ended) return Effect.void
  end(keeper, lease)
  if (lease.lost !== undefined) return Effect.void
  const lost = lostError(lease, reason)
  lease.lost = lost
  return told(lease, lost)
}

// A renewal refused while the holder still holds on (an operator revoked it: the entry stays until the holder lets
// go): the holder is told, and the lease goes on being renewed with `keep` until it lets go (`letGo`), so a perform
// that cannot be stopped at once (a Promise that ignores its signal) keeps its place however long it runs on. A hold
// gone otherwise refuses that renewal too, and the lease ends then.
const keepPlace = (keeper: Keeper, lease: Lease, now: number): Effect.Effect<void> => {
  const lost = lostError(lease, renewalRefused)
  lease.lost = lost
  lease.renewal = { ...lease.renewal, keep: true }
  join(keeper, lease, now)
  return told(lease, lost)
}

const ranOut = (lease: Lease) =>
  `no renewal was confirmed before its lease ended${
    lease.lastError === undefined ? "" : ` (last renewal: ${lease.lastError.message})`
  }`

const later = (keeper: Keeper, at: number) => {
  if (at < keeper.plannedWake) signal(keeper)
}

// Where a lease waits for its next renewal, by its age (since the send of its last confirmed call): a young one joins
// its cohort's current round, one past half a period the next round, one past a whole period is renewed at once.
const join = (keeper: Keeper, lease: Lease, now: number) => {
  keeper.lingerUntil = undefined
  keeper.timer?.ref()
  const age = now - lease.sent
  if (age >= lease.every) {
    lease.retryAt = now
    lease.slot = keeper.soon
    keeper.soon.add(lease)
    return later(keeper, now)
  }
  let cohort = keeper.cohorts.get(lease.every)
  if (cohort === undefined) {
    cohort = { every: lease.every, current: new Set(), previous: new Set(), nextRound: Infinity }
    keeper.cohorts.set(lease.every, cohort)
  }
  const first = cohort.current.size + cohort.previous.size === 0
  const slot = age >= lease.every / 2 ? cohort.previous : cohort.current
  lease.slot = slot
  slot.add(lease)
  // In its slot before the loop is woken: Effect 4 resumes a waiting fiber at once, inside this call, and a tick
  // that found the cohort empty would drop it.
  if (first) {
    cohort.nextRound = now + cohort.every / 2
    later(keeper, cohort.nextRound)
  }
}

const retry = (keeper: Keeper, lease: Lease, now: number, error: RedisError) => {
  lease.lastError = error
  // Tried again within a second (sooner for a short lease) until the lease ends.
  lease.retryAt = now + Math.min(lease.every, 1000)
  lease.slot = keeper.soon
  keeper.soon.add(lease)
  later(keeper, Math.min(lease.retryAt, lease.deadline))
}

// One call for a chunk; its answers settle each lease it carried (one whose lock ended meanwhile is left alone).
const renewChunk = (store: Store, keeper: Keeper, chunk: Chunk, sent: number): Effect.Effect<void> =>
  store.renewAll(chunk.leases.map((lease) => lease.renewal)).pipe(
    Effect.flatMap((renewed) =>
      Effect.clockWith((clock) => {
        keeper.inFlight.delete(chunk)
        const now = clock.currentTimeMillisUnsafe()
        const losses: Array<Effect.Effect<void>> = []
        chunk.leases.forEach((lease, i) => {
          if (lease.ended) return
          if (renewed[i] === true) {
            lease.deadline = Math.max(
              lease.deadline,
              sent + lease.renewal.leaseMs - leaseGuardMs(lease.renewal.leaseMs)
            )
            lease.sent = Math.max(lease.sent, sent)
            lease.lastError = undefined
            join(keeper, lease, now)
          } else if (lease.lost === undefined) {
            losses.push(keepPlace(keeper, lease, now))
          } else {
            // A kept place found gone (its lease passed): nothing is left to keep.
            end(keeper, lease)
          }
        })
        return Effect.all(losses, { discard: true })
      })
    ),
    Effect.catch((error) =>
      Effect.clockWith((clock) => {
        keeper.inFlight.delete(chunk)
        const now = clock.currentTimeMillisUnsafe()
        let first: Lease | undefined
        for (const lease of chunk.leases) {
          if (lease.ended) continue
          first ??= lease
          retry(keeper, lease, now, error)
        }
        return first === undefined ? Effect.void : Effect.logWarning(
          `lease renewal of ${chunk.leases.length} lock(s) failed; retrying until their leases end`,
          error
        ).pipe(Effect.annotateLogs(annotations(first)))
      })
    )
  )

const tick = (store: Store, keeper: Keeper, generation: number): Effect.Effect<boolean> =>
  Effect.clockWith((clock) => {
    if (keeper.generation !== generation) return Effect.succeed(false)
    const now = clock.currentTimeMillisUnsafe()
    keeper.wake = undefined
    keeper.wakeNow = undefined
    keeper.plannedWake = -Infinity // a lease joining during this tick is seen by the plan below
    const due: Array<Lease> = []
    const losses: Array<Effect.Effect<void>> = []
    const send = (lease: Lease) => {
      lease.slot = undefined
      if (lease.deadline <= now) losses.push(lose(keeper, lease, ranOut(lease)))
      else due.push(lease)
    }
    for (const [every, cohort] of keeper.cohorts) {
      if (cohort.current.size + cohort.previous.size === 0) {
        keeper.cohorts.delete(every)
      } else if (cohort.nextRound <= now) {
        const round = cohort.previous
        cohort.previous = cohort.current
        cohort.current = new Set()
        for (const lease of round) send(lease)
        cohort.nextRound = now + cohort.every / 2
      }
    }
    for (const lease of keeper.soon) {
      // A retry can be due after the lease's deadline: the deadline comes first.
      if (lease.deadline <= now) losses.push(lose(keeper, lease, ranOut(lease)))
      else if (lease.retryAt <= now) {
        keeper.soon.delete(lease)
        send(lease)
      }
    }
    // A call that hangs: its leases end at their own deadlines, whatever the call does later.
    for (const chunk of keeper.inFlight) {
      if (chunk.deadline > now) continue
      let next = Infinity
      for (const lease of chunk.leases) {
        if (lease.ended) continue
        if (lease.deadline <= now) losses.push(lose(keeper, lease, ranOut(lease)))
        else next = Math.min(next, lease.deadline)
      }
      chunk.deadline = next
    }
    const calls: Array<Effect.Effect<unknown>> = []
    for (let i = 0; i < due.length; i += chunkSize) {
      const leases = due.slice(i, i + chunkSize)
      const chunk: Chunk = { leases, deadline: Math.min(...leases.map((lease) => lease.deadline)) }
      keeper.inFlight.add(chunk)
      // Each call runs on its own: a call that hangs must not hold back the deadlines of the others.
      calls.push(Effect.forkDetach(renewChunk(store, keeper, chunk, now)))
    }
    return Effect.andThen(
      Effect.all(losses, { discard: true }),
      Effect.all(calls, { discard: true })
    ).pipe(Effect.andThen(Effect.suspend(() => {
      if (keeper.generation !== generation) return Effect.succeed(false)
      if (keeper.held === 0) {
        if (clock === liveClock) {
          const lingerUntil = keeper.lingerUntil ??= now + lingerMs
          if (now < lingerUntil) {
            keeper.plannedWake = lingerUntil
            return Effect.as(liveWait(keeper, lingerUntil - now), true)
          }
        }
        keeper.lingerUntil = undefined
        keeper.running = false
        keeper.fiber = undefined
        keeper.plannedWake = Infinity
        return Effect.succeed(false)
      }
      let wakeAt = Infinity
      for (const cohort of keeper.cohorts.values()) {
        if (cohort.current.size + cohort.previous.size > 0) wakeAt = Math.min(wakeAt, cohort.nextRound)
      }
      for (const lease of keeper.soon) wakeAt = Math.min(wakeAt, lease.retryAt, lease.deadline)
      for (const chunk of keeper.inFlight) wakeAt = Math.min(wakeAt, chunk.deadline)
      // Set in the same step as the plan: a lease registered from now on wakes the loop if it is due earlier.
      keeper.plannedWake = wakeAt
      if (clock === liveClock) return Effect.as(liveWait(keeper, wakeAt - now), true)
      const wake = Deferred.makeUnsafe<void>()
      keeper.wake = wake
      const sleep = wakeAt === Infinity ? Deferred.await(wake) : Effect.raceFirst(
        Effect.sleep(Math.max(0, wakeAt - now)),
        Deferred.await(wake)
      )
      return Effect.as(sleep, true)
    })))
  })

// The clock of Effect's default services. On it the loop waits with one timer and one callback: a sleep raced
// against a wake (two fibers, a deferred) cost more than a whole lock call, once per start and stop of the loop.
const liveClock = Effect.runSync(Effect.clockWith(Effect.succeed))

// setTimeout's longest delay: a later wake-up is a wake-up then, which plans again.
const longestTimer = 2_147_483_647

// Registered as the keeper's wake in the step that planned the wait (as the deferred is on other clocks): a wake
// that comes before the wait begins ends it at once.
const liveWait = (keeper: Keeper, ms: number): Effect.Effect<void> => {
  let woken = false
  let resumeNow: (() => void) | undefined
  const wakeNow = () => {
    woken = true
    resumeNow?.()
  }
  keeper.wakeNow = wakeNow
  return Effect.callback<void>((resume) => {
    if (woken) return resume(Effect.void)
    const timer = ms === Infinity ? undefined : setTimeout(() => {
      resumeNow = undefined
      if (keeper.wakeNow === wakeNow) keeper.wakeNow = undefined
      if (keeper.timer === timer) keeper.timer = undefined
      resume(Effect.void)
    }, Math.min(longestTimer, Math.max(0, ms)))
    if (keeper.held === 0) timer?.unref()
    keeper.timer = timer
    const cleared = () => {
      resumeNow = undefined
      clearTimeout(timer)
      if (keeper.timer === timer) keeper.timer = undefined
    }
    resumeNow = () => {
      cleared()
      resume(Effect.void)
    }
    return Effect.sync(() => {
      cleared()
      if (keeper.wakeNow === wakeNow) keeper.wakeNow = undefined
    })
  })
}

const loop = (store: Store, keeper: Keeper, generation: number): Effect.Effect<void> =>
  Effect.flatMap(tick(store, keeper, generation), (again) => (again ? loop(store, keeper, generation) : Effect.void))

const leaseOf = (
  store: Store,
  renewal: Renewal,
  about: { readonly digest: string; readonly lockType: string },
  sentAt: number
): Lease => ({
  store,
  renewal,
  digest: about.digest,
  lockType: about.lockType,
  every: Math.max(1, Math.floor(renewal.leaseMs / 3)),
  sent: sentAt,
  deadline: sentAt + renewal.leaseMs - leaseGuardMs(renewal.leaseMs),
  slot: undefined,
  retryAt: 0,
  lastError: undefined,
  ended: false,
  lost: undefined,
  onLost: undefined
})

/**
 * `keep` without a fiber where it needs none: the keeper's loop already runs on `clock`, and the reply came in time.
 * Undefined otherwise, with nothing kept: run `keep`, which starts the loop or tells the late lease's loss.
 *
 * @internal
 */
export const keepNow = (
  store: Store,
  renewal: Renewal,
  about: { readonly digest: string; readonly lockType: string },
  sentAt: number,
  clock: Clock.Clock
): Lease | undefined => {
  const keeper = keeperOf(store)
  if (!keeper.running || keeper.clock !== clock) return undefined
  const now = clock.currentTimeMillisUnsafe()
  const lease = leaseOf(store, renewal, about, sentAt)
  if (now >= lease.deadline) return undefined
  keeper.held++
  join(keeper, lease, now)
  return lease
}

/**
 * Keeps a run lock's lease from now on: `sentAt` is when its acquisition was sent, by this process' clock. A reply
 * that came back after the point where this process would already count the lock as lost gives a lease that is lost
 * from the start (counted and logged): its perform must never start.
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
    const now = clock.currentTimeMillisUnsafe()
    const lease = leaseOf(store, renewal, about, sentAt)
    if (now >= lease.deadline) {
      lease.ended = true
      lease.lost = lostError(
        lease,
        `its acquisition was answered ${now - sentAt} ms after it was sent, past the point where its ` +
          `${renewal.leaseMs} ms lease could have ended`
      )
      return Effect.as(told(lease, lease.lost), lease)
    }
    keeper.held++
    if (keeper.running && keeper.clock === clock) {
      join(keeper, lease, now)
      return Effect.succeed(lease)
    }
    const previous = keeper.fiber
    // The loop on another clock is retired before the lease joins: Effect 4 resumes a waiting fiber at once, inside
    // `join`'s wake, and it must find itself retired (as it did when it woke later) rather than tick on its own clock.
    const generation = ++keeper.generation
    keeper.running = true
    keeper.clock = clock
    keeper.plannedWake = Infinity
    join(keeper, lease, now)
    // A new loop runs on the clock and logger of the fiber that needs it; interruptible, whatever that fiber's
    // region (a lock is taken and handed over here without an interruption in between).
    const started = Effect.map(
      Effect.forkDetach(Effect.interruptible(loop(store, keeper, generation))),
      (fiber) => {
        keeper.fiber = fiber
        return lease
      }
    )
    return previous === undefined ? started : Effect.andThen(Effect.sync(() => previous.interruptUnsafe(previous.id)), started)
  })

/**
 * Whether the lease is lost by now: one whose deadline has passed (the loop has not looked yet) is lost here,
 * counted and logged, so a perform about to start never starts past it. @internal
 */
export const check = (lease: Lease): Effect.Effect<LockLost | undefined> =>
  Effect.clockWith((clock) => {
    if (checkNow(lease, clock.currentTimeMillisUnsafe())) return Effect.succeed(undefined)
    if (lease.lost !== undefined || lease.ended) return Effect.succeed(lease.lost)
    const keeper = keeperOf(lease.store)
    return Effect.as(lose(keeper, lease, ranOut(lease)), lease.lost)
  })

/** `check`'s common case at `now`, by this process' clock: the lease is kept and its deadline ahead. @internal */
export const checkNow = (lease: Lease, now: number): boolean =>
  lease.lost === undefined && !lease.ended && now < lease.deadline

/** Whether the store's keeper has a loop running (tests read it: no loop is left once nothing is held). @internal */
export const running = (store: Store): boolean => keepers.get(store)?.running === true

/** Whether the loop's wait holds the process open (tests read it: a lingering loop holds none). @internal */
export const holdsProcess = (store: Store): boolean => keepers.get(store)?.timer?.hasRef() === true

/** Stops keeping a lease (its lock is being released). @internal */
export const letGo = (store: Store, lease: Lease): void => {
  if (lease.ended) return
  end(keeperOf(store), lease)
}

/**
 * Ends the store's keeper with its layer's scope: the loop stops, and a lease still held is lost (its holder told),
 * since nothing renews it any more. @internal
 */
export const close = (store: Store): Effect.Effect<void> =>
  Effect.suspend(() => {
    const keeper = keepers.get(store)
    if (keeper === undefined) return Effect.void
    keeper.generation++
    keeper.running = false
    const fiber = keeper.fiber
    keeper.fiber = undefined
    const held: Array<Lease> = []
    for (const cohort of keeper.cohorts.values()) held.push(...cohort.current, ...cohort.previous)
    held.push(...keeper.soon)
    for (const chunk of keeper.inFlight) held.push(...chunk.leases.filter((lease) => !lease.ended))
    const reason = "its RedisService layer was closed while the lock was held; nothing renews its lease any more"
    return Effect.andThen(
      Effect.all(held.map((lease) => lose(keeper, lease, reason)), { discard: true }),
      fiber === undefined ? Effect.void : Effect.sync(() => fiber.interruptUnsafe(fiber.id))
    )
  })

/** Ties the store's keeper, and its lockTimeout waits (store/ReleaseWaits), to the scope of the layer that built the store. @internal */
export const scoped = (store: Store): Effect.Effect<Store, never, Scope.Scope> =>
  Effect.as(Effect.addFinalizer(() => Effect.andThen(Waits.close(store), close(store))), store)
