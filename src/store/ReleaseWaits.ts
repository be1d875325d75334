/**
 * `lockTimeout`'s waiters, one registry per store (as the lease keeper is): the jobs of this process that wait for a
 * held run lock. The store's release signals (`Store.releases`) are heard on one connection, opened at the first
 * wait and closed with the store; a lock's channel is subscribed while a job of this process waits for it.
 *
 * Each signal names the places it freed: each wakes the longest waiting job of the lock in this process (first come,
 * first served), which then tries the lock once. A signal that finds no job in line (each is trying the lock at that
 * moment) is kept for the next to line up, so none is lost between a job's try and its return to the line.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { LockKey, ReleaseChannel, Store } from "./Store.js"

/**
 * The most jobs of one process that wait for one lock by default (`maxLockWaiters`); one more goes to its strategy at
 * once.
 *
 * @internal
 */
export const maxWaitersPerLock = 1000

/** The most jobs of one process that wait for any lock of one store by default (`maxProcessWaiters`). @internal */
export const maxWaiters = 10_000

/** The largest cap either option takes: each waiter is a fiber and a place in a line, kept in memory. @internal */
export const maxWaitersBound = 1_000_000

/** Why a job's turn came: a release signal for it, or the store closing. @internal */
export type Turn = "signal" | "closed"

interface Waiter {
  readonly wake: (turn: Turn) => void
}

interface Line {
  readonly channel: string
  members: number
  readonly queue: Array<Waiter>
  /** Signals that found no one in line, for the next to line up (never more than the members). */
  pending: number
  /** Whether Redis confirmed the subscription: false when it could not be made. */
  readonly ready: Promise<boolean>
}

interface Registry {
  connection: ReleaseChannel | undefined
  readonly lines: Map<string, Line>
  total: number
  closed: boolean
  /** Whether a refusal (a full line) was logged: logged once per store. */
  warned: boolean
}

const registries = new WeakMap<Store, Registry>()

const registryOf = (store: Store): Registry => {
  let registry = registries.get(store)
  if (registry === undefined) {
    registry = { connection: undefined, lines: new Map(), total: 0, closed: false, warned: false }
    registries.set(store, registry)
  }
  return registry
}

// The channel is open to any client of the Redis: a count is read as at least one and spent only while a job is in
// line or a member has no signal kept, so a foreign message costs at most one try per member.
const deliver = (registry: Registry) => (channel: string, freed: number): void => {
  const line = registry.lines.get(channel)
  if (line === undefined) return
  // Woken once the count is spent: Effect 4 runs a woken fiber at once, inside `wake`, and its next step must not
  // change the line while this loop still reads it.
  const woken: Array<Waiter> = []
  for (let left = Math.max(1, freed); left > 0; left--) {
    const waiter = line.queue.shift()
    if (waiter !== undefined) woken.push(waiter)
    else if (line.pending < line.members) line.pending++
    else break
  }
  for (const waiter of woken) waiter.wake("signal")
}

/**
 * One job's place among the waiters of a lock, from its first conflict to its last try.
 *
 * @internal
 */
export interface Member {
  /** Resolves true once the lock's channel is subscribed (a release after that reaches this process). */
  readonly ready: Promise<boolean>
  /**
   * Waits for this job's turn: at the back of the line the first time, at its front after a lost try. Interrupted
   * (its timer, the job's interruption), it leaves the line.
   */
  readonly turn: (front: boolean) => Effect.Effect<Turn>
  /** The job is trying the lock: the signal that woke it is spent. */
  readonly spend: () => void
  /** Leaves the waiters (unsubscribing the channel with the last); a signal it did not spend goes to the next. */
  readonly leave: Effect.Effect<void>
}

/**
 * Why a job does not wait: the store has no release signals, is closed, or the line is full. @internal
 */
export type Refusal = "unsupported" | "closed" | "full"

/**
 * A job's place among the waiters of `lock`, its channel subscribed with the first; a `Refusal` when it cannot wait.
 * A full line is logged once per store.
 *
 * @internal
 */
export const join = (store: Store, lock: LockKey): Effect.Effect<Member | Refusal> =>
  Effect.suspend(() => {
    const signals = store.releases
    if (signals === undefined) return Effect.succeed<Member | Refusal>("unsupported")
    const registry = registryOf(store)
    if (registry.closed) return Effect.succeed<Member | Refusal>("closed")
    const channel = signals.channelOf(lock)
    let line = registry.lines.get(channel)
    const perLock = signals.waiters?.perLock ?? maxWaitersPerLock
    const perProcess = signals.waiters?.perProcess ?? maxWaiters
    if (registry.total >= perProcess || (line !== undefined && line.members >= perLock)) {
      if (registry.warned) return Effect.succeed<Member | Refusal>("full")
      registry.warned = true
      return Effect.as(
        Effect.logWarning(
          `too many jobs wait for run locks (at most ${perLock} per lock and ${perProcess} per process): ` +
            "a job over the limit goes to its strategy at once (logged once)"
        ).pipe(Effect.annotateLogs({ package: "effect-unique-jobs", module: "Lock", lock: lock.name })),
        "full" as const
      )
    }
    if (line === undefined) {
      const connection = registry.connection ?? (registry.connection = signals.open(deliver(registry)))
      line = {
        channel,
        members: 0,
        queue: [],
        pending: 0,
        ready: connection.subscribe(channel).then(() => true, () => false)
      }
      registry.lines.set(channel, line)
    }
    const joined = line
    joined.members++
    registry.total++
    let unspent = false
    let left = false
    const member: Member = {
      ready: joined.ready,
      turn: (front) =>
        Effect.callback<Turn>((resume) => {
          if (registry.closed) return resume(Effect.succeed("closed"))
          if (joined.pending > 0) {
            joined.pending--
            unspent = true
            return resume(Effect.succeed("signal"))
          }
          const waiter: Waiter = {
            wake: (turn) => {
              if (turn === "signal") unspent = true
              resume(Effect.succeed(turn))
            }
          }
          if (front) joined.queue.unshift(waiter)
          else joined.queue.push(waiter)
          return Effect.sync(() => {
            const at = joined.queue.indexOf(waiter)
            if (at !== -1) joined.queue.splice(at, 1)
          })
        }),
      spend: () => {
        unspent = false
      },
      leave: Effect.sync(() => {
        if (left) return
        left = true
        joined.members--
        registry.total--
        if (joined.members === 0) {
          if (registry.lines.get(channel) === joined) registry.lines.delete(channel)
          if (!registry.closed) registry.connection?.unsubscribe(channel).catch(() => undefined)
        } else if (unspent) {
          // Woken, then gone without trying (interrupted): the place it was told of goes to the next in line.
          deliver(registry)(channel, 1)
        }
        unspent = false
        if (joined.pending > joined.members) joined.pending = joined.members
      })
    }
    return Effect.succeed<Member | Refusal>(member)
  })

/** How many jobs wait for `lock` in this process (tests read it). @internal */
export const waiting = (store: Store, lock: LockKey): number => {
  const signals = store.releases
  if (signals === undefined) return 0
  return registries.get(store)?.lines.get(signals.channelOf(lock))?.members ?? 0
}

/** Whether the store's release connection is open (tests read it). @internal */
export const connected = (store: Store): boolean => registries.get(store)?.connection !== undefined

/** Whether the store's waits were ended by its close (`close`). @internal */
export const closed = (store: Store): boolean => registries.get(store)?.closed === true

/**
 * Ends the store's waits with its layer's scope: every waiting job's turn comes as `closed` (it goes to its strategy),
 * no job waits any more, and the connection closes.
 *
 * @internal
 */
export const close = (store: Store): Effect.Effect<void> =>
  Effect.suspend(() => {
    const registry = registries.get(store)
    if (registry === undefined || registry.closed) return Effect.void
    registry.closed = true
    for (const line of registry.lines.values()) {
      for (const waiter of line.queue.splice(0)) waiter.wake("closed")
    }
    const connection = registry.connection
    registry.connection = undefined
    return connection === undefined
      ? Effect.void
      : Effect.promise(() => connection.close().catch(() => undefined)).pipe(Effect.timeoutOption("1 second"))
  })
