/**
 * The lock and unlock calls of a store as plain promises, for the Promise face's hot path (`UniqueQueue`): a caller
 * with no fiber to run pays for none. Only the ioredis store has them, registered here against the very object it
 * made: a store wrapped by a spread (a test's fault injector, a user's decorator) is another object, has none, and
 * its callers take the Effect path through the wrapper.
 *
 * @internal
 */
import type { HolderRequest, LockKey, LockResult, Store } from "./Store.js"

/**
 * `Store.lock` and `Store.unlock` answering as promises: the same script, deadline, compensation and errors (a
 * rejection is always a `RedisError`).
 *
 * @internal
 */
export interface Direct {
  readonly lock: (lock: LockKey, request: HolderRequest) => Promise<LockResult>
  /** `sent`, when given, is called once the release has gone to Redis (a batched one waits for its turn's end). */
  readonly unlock: (lock: LockKey, jid: string, fence: number, events?: boolean, sent?: () => void) => Promise<boolean>
}

const registry = new WeakMap<Store, Direct>()

/** @internal */
export const register = (store: Store, direct: Direct): void => {
  registry.set(store, direct)
}

/** The promise calls of `store`, when it is one the ioredis store made. @internal */
export const directOf = (store: Store): Direct | undefined => registry.get(store)
