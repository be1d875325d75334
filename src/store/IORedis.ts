/**
 * The lock store over ioredis: one EVALSHA per call (EVAL when Redis lost the script), a deadline per call without a
 * timer per call, and the connection checks. Imports only the shared models, so `Redis.ts` can re-export it.
 *
 * @internal
 */
import type { ClusterOptions as IORedisClusterOptions, RedisOptions as IORedisOptions } from "ioredis"
import { Cluster, Redis } from "ioredis"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import { LayoutMismatch } from "../Errors.js"
import { makeDeadlines, type Pending } from "./Deadlines.js"
import { cutHolder, eventOf, holderOf, queueOf } from "./Entries.js"
import * as Direct from "./Direct.js"
import * as Keeper from "./LeaseKeeper.js"
import type {
  Fetched,
  Holder,
  HolderRequest,
  LockEvent,
  LockKey,
  LockResult,
  PrefixLayout,
  ReapCandidate,
  ReapRequest,
  ReapResult,
  ReleaseSignals,
  Removal,
  Renewal,
  ScanPage,
  Store,
  WaiterCaps
} from "./Store.js"
import * as Layout from "./Layout.js"
import { RedisError } from "./Store.js"
import * as Waits from "./ReleaseWaits.js"
import * as Scripts from "./Scripts.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** `redis://[user:password@]host:port/db`; a secret when it carries a password. */
  readonly url?: string | Redacted.Redacted<string> | undefined
  /** Per-call limit; a call still unanswered then fails with `RedisError`. Default 5 seconds. */
  readonly timeout?: Duration.Input | undefined
  /** ioredis' automatic pipelining: many concurrent calls share one write. */
  readonly enableAutoPipelining?: boolean | undefined
  /**
   * The most jobs of this process that wait for one run lock (`lockTimeout`), 1 to 1 000 000. Default 1000; one more
   * goes to its strategy at once.
   */
  readonly maxLockWaiters?: number | undefined
  /** The most jobs of this process that wait for any run lock of this store, 1 to 1 000 000. Default 10 000. */
  readonly maxProcessWaiters?: number | undefined
  /** Anything else ioredis takes. */
  readonly client?: IORedisOptions | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface ClusterOptions {
  /** Where the cluster is first reached (`host:port`, `redis://host:port`, or `{ host, port }`); the rest is found. */
  readonly nodes: ReadonlyArray<string | { readonly host: string; readonly port: number }>
  /** Per-call limit, redirects and failover retries included. Default 5 seconds. */
  readonly timeout?: Duration.Input | undefined
  /**
   * How many shards the index and the fencing counter are split into (1 to 1024). Default 24. Every process of a
   * prefix must agree: the first lock records it (`<prefix>:layout`), and a store configured otherwise is refused.
   */
  readonly shards?: number | undefined
  /** ioredis' automatic pipelining, per node. */
  readonly enableAutoPipelining?: boolean | undefined
  /**
   * The most jobs of this process that wait for one run lock (`lockTimeout`), 1 to 1 000 000. Default 1000; one more
   * goes to its strategy at once.
   */
  readonly maxLockWaiters?: number | undefined
  /** The most jobs of this process that wait for any run lock of this store, 1 to 1 000 000. Default 10 000. */
  readonly maxProcessWaiters?: number | undefined
  /** Anything else ioredis' `Cluster` takes; what each node's connection takes (password, tls) under `redisOptions`. */
  readonly client?: IORedisClusterOptions | undefined
}


const defaultTimeout = Duration.seconds(5)

const toArray = (reply: unknown, operation: string): ReadonlyArray<unknown> => {
  if (Array.isArray(reply)) return reply
  throw new Error(`unexpected ${operation} reply: ${JSON.stringify(reply)}`)
}

const toLockResult = (reply: ReadonlyArray<unknown>): LockResult =>
  Number(reply[0]) === 1
    ? { _tag: "Acquired", reentrant: Number(reply[1]) === 1, fence: Number(reply[2] ?? 0) }
    : { _tag: "Conflict", holders: reply.slice(1).map(String) }

// lock.lua answers a taken lock with one integer: its fencing token (a run lock), -1 (taken) or -2 (re-entered); a
// refusal with a table. The integer may come as text (ioredis' stringNumbers).
const toLockResultReply = (reply: unknown): LockResult => {
  if (Array.isArray(reply)) return toLockResult(reply)
  const taken = typeof reply === "number" || typeof reply === "string" ? Number(reply) : Number.NaN
  if (Number.isInteger(taken) && taken > 0) return { _tag: "Acquired", reentrant: false, fence: taken }
  if (taken === -1 || taken === -2) return { _tag: "Acquired", reentrant: taken === -2, fence: 0 }
  throw new Error(`unexpected lock reply: ${JSON.stringify(reply)}`)
}

const isOne = (reply: unknown): boolean => Number(reply) === 1

// A flat HGETALL reply (field, value, ...) as holders, in the hash's order.
const toHolders = (flat: ReadonlyArray<unknown>): Array<Holder> => {
  const holders: Array<Holder> = []
  for (let i = 0; i < flat.length; i += 2) holders.push(parseHolder(String(flat[i]), String(flat[i + 1])))
  return holders
}

const toFetched = (reply: unknown): Fetched => {
  const [entries, pttl, score, now, size, cursor, cut] = toArray(reply, "fetch")
  const holders = toHolders(toArray(entries, "fetch"))
  // A cut entry is read as far as it goes; its place among the holders counts from 1.
  const flatCut = toArray(cut, "fetch")
  for (let i = 0; i < flatCut.length; i += 2) {
    const at = Number(flatCut[i]) - 1
    holders[at] = cutHolder(holders[at]!.jid, String(toArray(entries, "fetch")[at * 2 + 1]), Number(flatCut[i + 1]))
  }
  return {
    holders,
    size: Number(size),
    cursor: String(cursor),
    ttlMs: Number(pttl) >= 0 ? Number(pttl) : undefined,
    indexScore: score === null || score === undefined ? undefined : Number(score),
    now: Number(now)
  }
}

// An entry's q as reap.lua returns it (the JSON string literal, or "" when the entry names no queue): queueOf.
const toReapResult = (reply: unknown): ReapResult => {
  const [scanned, next, members, holders, candidates, held] = toArray(reply, "reap")
  const flatHolders = toArray(holders, "reap")
  const flatCandidates = toArray(candidates, "reap")
  const removedHolders: Array<{ readonly lock: string; readonly jid: string }> = []
  for (let i = 0; i < flatHolders.length; i += 2) {
    removedHolders.push({ lock: String(flatHolders[i]), jid: String(flatHolders[i + 1]) })
  }
  const found: Array<ReapCandidate> = []
  for (let i = 0; i < flatCandidates.length; i += 4) {
    const queue = queueOf(String(flatCandidates[i + 3]))
    found.push({
      lock: String(flatCandidates[i]),
      jid: String(flatCandidates[i + 1]),
      lockedAt: Number(flatCandidates[i + 2]),
      ...(queue === undefined ? {} : { queue })
    })
  }
  return {
    scanned: Number(scanned),
    next: Number(next),
    removedMembers: toArray(members, "reap").map(String),
    removedHolders,
    candidates: found,
    ...(held !== undefined && Number(held) === 0 ? { refused: true as const } : {})
  }
}

/** What `remove` of no lock did: nothing (no call is made, so there is no Redis time to tell). @internal */
export const noRemoval: Removal = { now: 0, deleted: [], removed: [], revoked: [], refused: [] }

const toRemoval = (reply: unknown): Removal => {
  const [now, deleted, removed, revoked, refused] = toArray(reply, "remove")
  const flatRemoved = toArray(removed, "remove")
  const flatRevoked = toArray(revoked, "remove")
  const flatRefused = toArray(refused, "remove")
  const out = {
    now: Number(now),
    deleted: toArray(deleted, "remove").map(String),
    removed: [] as Array<Removal["removed"][number]>,
    revoked: [] as Array<Removal["revoked"][number]>,
    refused: [] as Array<Removal["refused"][number]>
  }
  for (let i = 0; i < flatRemoved.length; i += 3) {
    out.removed.push({ lock: String(flatRemoved[i]), jid: String(flatRemoved[i + 1]), live: isOne(flatRemoved[i + 2]) })
  }
  for (let i = 0; i < flatRevoked.length; i += 3) {
    out.revoked.push({
      lock: String(flatRevoked[i]),
      jid: String(flatRevoked[i + 1]),
      leaseUntil: Number(flatRevoked[i + 2])
    })
  }
  for (let i = 0; i < flatRefused.length; i += 2) {
    out.refused.push({ lock: String(flatRefused[i]), reason: String(flatRefused[i + 1]) })
  }
  return out
}

// A key of another type where a tally or a journal would be (someone else's) holds none of ours: it reads as empty.
const isWrongType = (error: RedisError): boolean => error.reason.startsWith("WRONGTYPE")

// A field that is not a whole number (a user's own write) reads as 0: a count is never made up.
const toTally = (reply: unknown): Readonly<Record<string, number>> => {
  const out: Record<string, number> = {}
  for (const [field, value] of Object.entries(reply as Record<string, string>)) {
    const n = Number(value)
    out[field] = Number.isSafeInteger(n) && n >= 0 ? n : 0
  }
  return out
}

const toStrings = (reply: unknown): ReadonlyArray<string> => (reply as Array<unknown>).map(String)

const toScanPage = (reply: unknown): ScanPage => {
  const [cursor, flat] = toArray(reply, "scan")
  const elements = toArray(flat, "scan")
  const members: Array<{ readonly name: string; readonly score: number }> = []
  for (let i = 0; i < elements.length; i += 2) members.push({ name: String(elements[i]), score: Number(elements[i + 1]) })
  return { cursor: String(cursor), members }
}

// The one prefix of the locks `Store.remove` deletes in one call (their index is its KEYS[1]); undefined when mixed.
const onePrefix = (locks: ReadonlyArray<LockKey>): string | undefined => {
  const prefix = locks[0]?.prefix
  return locks.every((lock) => lock.prefix === prefix) ? prefix : undefined
}

// The memory store refuses the same call with the same words.
const mixedPrefixes = (locks: ReadonlyArray<LockKey>): RedisError =>
  new RedisError({
    operation: "remove",
    reason: `the locks of one call must share one prefix (their index), got ${
      Array.from(new Set(locks.map((lock) => JSON.stringify(lock.prefix)))).join(", ")
    }`
  })

// What the scripts' `whole` (lua/lib/prelude.lua) answers for a value out of range, in its words; undefined when in range.
const outOfRange = (name: string, value: number, min: number, max?: number): string | undefined =>
  Number.isSafeInteger(value) && value >= min && value <= (max ?? 2 ** 50)
    ? undefined
    : `ERR ${name} must be a whole number from ${min} to ${max === undefined ? "2^50" : max}, got ${String(value)}`

// A lease renew_all.lua takes: a whole number of milliseconds from 1 to 2^50.
const isLease = (ms: number): boolean => outOfRange("lease", ms, 1) === undefined

const emptyReap: ReapResult = { scanned: 0, next: -1, removedMembers: [], removedHolders: [], candidates: [] }

// The removals of one call's shards as one: the latest Redis time, the lists in shard order.
const mergeRemovals = (parts: ReadonlyArray<Removal>): Removal => ({
  now: Math.max(...parts.map((part) => part.now)),
  deleted: parts.flatMap((part) => part.deleted),
  removed: parts.flatMap((part) => part.removed),
  revoked: parts.flatMap((part) => part.revoked),
  refused: parts.flatMap((part) => part.refused)
})

/** A lock step's kind in batch.lua, and the shard its keys are on. */
interface Step {
  readonly kind: "l" | "u" | "h"
  readonly group: number
  /** Called once the step has gone to Redis. */
  readonly sent?: (() => void) | undefined
}

/** A lock step waiting for its turn's batch: its script and arguments as sent alone, and how it is answered. */
interface Queued extends Step {
  readonly script: Scripts.Script
  readonly args: ReadonlyArray<string | number>
  readonly pending: Pending
  readonly replied: (reply: unknown) => void
  readonly refused: (cause: unknown, located?: boolean) => void
}

/**
 * The most steps of a shard a turn gathers: they go then, without waiting for the turn's end, so Redis runs them
 * while Node makes the rest (a turn's whole batch sent at its end left Redis idle meanwhile), and a batch.lua call
 * stays short (some 16 × 20 µs of Redis time, and flushBytes of arguments at most) for the clients behind it.
 *
 * @internal
 */
export const flushAt = 16

// The most argument bytes a shard's gathered steps reach before they go: a step's lockInfo can be large (a job's
// arguments), and a batch of sixteen 100 KB steps would hold Redis for milliseconds at a stretch.
const flushBytes = 64 * 1024

// A step's arguments' size, about as Redis reads them.
const sizeOf = (args: ReadonlyArray<string | number>): number => {
  let bytes = 0
  for (const arg of args) bytes += typeof arg === "string" ? arg.length : 8
  return bytes
}

// batch.lua's arguments for `steps`: every step's keys, then per step its kind, key count, argument count, arguments.
// One array, filled in place (no copies: every batch pays this).
const batchArgs = (steps: ReadonlyArray<Queued>): [number, ...Array<string | number>] => {
  const args: [number, ...Array<string | number>] = [0]
  for (const step of steps) {
    const count = step.args[0] as number
    for (let i = 1; i <= count; i++) args.push(step.args[i]!)
    args[0] += count
  }
  for (const step of steps) {
    const count = step.args[0] as number
    args.push(step.kind, count, step.args.length - 1 - count)
    for (let i = 1 + count; i < step.args.length; i++) args.push(step.args[i]!)
  }
  return args
}

// A lock refused because a reset retired the layout epoch it sent (acquire's layout_current).
const layoutResetReply = /^LAYOUTRESET epoch=([0-9a-f]*) key=(.*)$/s

// A script's error ends naming the script's sha and the line of its source (prelude included).
const scriptSuffix = / script: [0-9a-f]{40}, on @user_script:(\d+)\.$/

// The cause keeps the suffix; the reason leaves it out, so it reads like the memory store's.
const reasonOf = (cause: unknown): string =>
  cause instanceof Error ? cause.message.replace(scriptSuffix, "") : String(cause)

// Where in lua/ a script's error was raised: the suffix's line, mapped back to its file and line.
const locationOf = (cause: unknown, script: Scripts.Script): { readonly script?: string } => {
  const line = cause instanceof Error ? scriptSuffix.exec(cause.message)?.[1] : undefined
  const location = line === undefined ? undefined : Scripts.locate(script, Number(line))
  return location === undefined ? {} : { script: location }
}

// The call was sent and may have run without its reply reaching us: timed out, or its connection closed first.
const mayHaveRun = (cause: unknown): boolean =>
  cause instanceof Error &&
  (cause.message === "Command timed out" || cause.message.startsWith(closedBeforeAnswer))

const closedBeforeAnswer = "the connection to Redis closed before it answered"

// Named groups: an optional field added between two others does not renumber the rest.
const entryShape = new RegExp(
  String.raw`^\{"t":(?<t>\d+),"x":(?<x>\d+),"l":(?<l>\d+)(?:,"f":(?<f>\d+))?(?:,"r":(?<r>\d+))?` +
    String.raw`(?:,"q":(?<q>"(?:[^"\\]|\\.)*"))?(?:,"i":(?<i>.*))?\}$`,
  "s"
)

/**
 * Reads a holder entry as the scripts do; one in any other shape is reported as `foreign` (it counts as gone).
 *
 * @since 0.1.0
 * @category utils
 */
export const parseHolder = (jid: string, raw: string): Holder => {
  const match = entryShape.exec(raw)?.groups
  if (match === undefined) {
    return { jid, lockedAt: 0, expiresAt: undefined, leaseUntil: undefined, fence: 0, info: undefined, foreign: raw }
  }
  let info: unknown = undefined
  if (match.i !== undefined) {
    try {
      info = JSON.parse(match.i)
    } catch {
      info = match.i
    }
  }
  return holderOf(jid, match, info)
}

/**
 * The client surface the store needs: ioredis' `Redis` or `Cluster` (a `Cluster` gets the cluster key layout).
 *
 * @since 0.1.0
 * @category models
 */
export type Client = Scripts.ScriptClient & {
  hgetall(key: string): Promise<Record<string, string>>
  script(subcommand: "LOAD", script: string): Promise<unknown>
  /** `Store.scan`'s one ZSCAN; a client without it (a test's stand-in) fails `scan` with a `RedisError`. */
  zscan?(
    key: string,
    cursor: string,
    patternToken: "MATCH",
    pattern: string,
    countToken: "COUNT",
    count: number
  ): Promise<[cursor: string, elements: Array<string>]>
  /** `Store.journaled`'s one LRANGE; a client without it fails `journaled` with a `RedisError`. */
  lrange?(key: string, start: number, stop: number): Promise<Array<string>>
  /** A cluster's reap step reads its members first (its script then names every key it touches). */
  zrange?(key: string, start: number, stop: number): Promise<Array<string>>
  /** `Store.replaced`'s one SISMEMBER; a client without it answers that no job was replaced. */
  sismember?(key: string, member: string): Promise<number>
  /** ioredis' `Cluster`: the scripts are loaded on every master. */
  readonly isCluster?: boolean
  nodes?(role: "master"): Array<{ script(subcommand: "LOAD", script: string): Promise<unknown> }>
  /** ioredis' `Cluster`: the nodes ("host:port") serving each slot, its master first. */
  readonly slots?: ReadonlyArray<ReadonlyArray<string> | undefined>
  /**
   * A second connection like this one, for `lockTimeout`'s release signals (ioredis' `duplicate`); a client without it
   * (a test's stand-in) has none, and a held run lock goes to its strategy at once.
   */
  duplicate?(...args: ReadonlyArray<never>): Subscriber
}

/** What the release signals' connection is asked (an ioredis `Redis` or `Cluster` made by `duplicate`). @internal */
export interface Subscriber {
  subscribe(...channels: Array<string>): Promise<unknown>
  unsubscribe(channel: string): Promise<unknown>
  on(event: "message", listener: (channel: string, message: string) => void): unknown
  on(event: "error", listener: (error: Error) => void): unknown
  on(event: "ready" | "end", listener: () => void): unknown
  readonly status: string
  disconnect(): void
}

// The release signals' connection: made from the store's client when the first job waits (a duplicate queues its
// commands while it connects, and subscribes again after a reconnect), closed with the store. A release published
// while it was away reached no one: once back, each lock still waited for gets one signal when its channel is
// confirmed again (its first job in line tries the lock, and lines up again if it is still held). On a cluster, whose
// subscriber may move to another node without a "ready", each waiter's timer on the holders' ends makes up for it.
const releasesOf = (
  client: Client,
  channelOf: (lock: LockKey) => string,
  waiters: WaiterCaps | undefined
): ReleaseSignals | undefined => {
  const duplicate = client.duplicate
  if (duplicate === undefined) return undefined
  return {
    channelOf,
    waiters,
    open: (deliver) => {
      const options = { enableOfflineQueue: true, lazyConnect: false, autoResubscribe: true }
      const subscriber = (client.isCluster === true
        ? (duplicate as (nodes: ReadonlyArray<never>, options: object) => Subscriber).call(client, [], options)
        : (duplicate as (options: object) => Subscriber).call(client, options))
      subscriber.on("message", (channel, message) => deliver(channel, Number(message) || 1))
      // Its errors show as the waits' ends by their timers; the store's calls report the connection's state.
      subscriber.on("error", () => undefined)
      // Each SUBSCRIBE waits for the connection's ready: one written while it shakes hands puts it in subscriber mode
      // before ioredis' ready check (INFO), which ioredis then refuses, failing every queued command with "Connection
      // in subscriber mode" (redis/ioredis#2037). A connection that never gets ready leaves the waits to their
      // deadlines.
      // Closed (by the store, or for good by ioredis), the subscriptions still waiting for ready fail at once.
      const waiting = new Set<{ readonly resolve: () => void; readonly reject: (error: Error) => void }>()
      let ended = false
      const end = () => {
        ended = true
        for (const waiter of waiting) waiter.reject(new Error("the release signals' connection is closed"))
        waiting.clear()
      }
      const channels = new Set<string>()
      let readyBefore = false
      subscriber.on("ready", () => {
        for (const waiter of waiting) waiter.resolve()
        waiting.clear()
        // One SUBSCRIBE of every channel: its answer confirms them all, ioredis' own resubscription included.
        if (readyBefore && channels.size > 0) {
          const again = [...channels]
          subscriber.subscribe(...again).then(() => {
            for (const channel of again) if (channels.has(channel)) deliver(channel, 1)
          }, () => undefined)
        }
        readyBefore = true
      })
      subscriber.on("end", end)
      const ready = () =>
        subscriber.status === "ready"
          ? Promise.resolve()
          : ended
          ? Promise.reject(new Error("the release signals' connection is closed"))
          : new Promise<void>((resolve, reject) => void waiting.add({ resolve, reject }))
      return {
        subscribe: (channel) => {
          channels.add(channel)
          return ready().then(() => subscriber.subscribe(channel)).then(() => undefined)
        },
        unsubscribe: (channel) => {
          channels.delete(channel)
          return subscriber.unsubscribe(channel).then(() => undefined)
        },
        close: () => {
          end()
          return Promise.resolve(subscriber.disconnect())
        }
      }
    }
  }
}

// Only when either is given: a store without them keeps the registry's defaults.
const waiterCapsOf = (
  options: { readonly maxLockWaiters?: number | undefined; readonly maxProcessWaiters?: number | undefined } | undefined
): WaiterCaps | undefined =>
  options?.maxLockWaiters === undefined && options?.maxProcessWaiters === undefined
    ? undefined
    : {
      perLock: options.maxLockWaiters ?? Waits.maxWaitersPerLock,
      perProcess: options.maxProcessWaiters ?? Waits.maxWaiters
    }

/**
 * A store over a connected client that the caller owns.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeFromClient = (
  client: Client,
  options?: {
    readonly timeout?: Duration.Input | undefined
    readonly shards?: number | undefined
    readonly maxLockWaiters?: number | undefined
    readonly maxProcessWaiters?: number | undefined
    /**
     * "check" (the default): a prefix's layout is recorded by its first use, and a prefix recorded otherwise is
     * refused. "adopt" (the CLI, the web UI): the recorded layout is used, and nothing is recorded.
     */
    readonly layout?: "check" | "adopt" | undefined
  }
): Effect.Effect<Store, RedisError> =>
  Effect.gen(function*() {
    // What this store is configured for: a Cluster's keys in shards, one Redis's as the spec names them. Each prefix's
    // layout is what Redis records for it (layoutOf), asked once per prefix before the first call under it.
    const configured = client.isCluster === true ? Layout.cluster(options?.shards) : Layout.standalone
    const adopt = options?.layout === "adopt"
    const layouts = new Map<string, Layout.Layout>()
    const layoutFor = (prefix: string): Layout.Layout => layouts.get(prefix) ?? configured
    // The epoch of each prefix's record as this store read it, sent with every lock (acquire's layout_current).
    const epochs = new Map<string, string>()
    // The calls below name keys through the layout of the lock's prefix; `shards` is the prefix's own (layoutFor).
    const layout: Pick<Layout.Layout, "shardOf" | "keysOf" | "index"> = {
      shardOf: (lock) => layoutFor(lock.prefix).shardOf(lock),
      keysOf: (lock) => layoutFor(lock.prefix).keysOf(lock),
      index: (prefix, shard) => layoutFor(prefix).index(prefix, shard)
    }
    const keysOf = layout.keysOf
    // From the generated module: nothing is read from disk, so bundles work.
    const scripts = Scripts.loadScripts()
    const timeout = Duration.fromInputUnsafe(options?.timeout ?? defaultTimeout)
    const timeoutMs = Duration.toMillis(timeout)
    const timedOut = (operation: string) =>
      new RedisError({ operation, reason: `no answer within ${Duration.format(timeout)} (the timeout option)` })
    // The hot path: one callback pair per call, and no timer of its own. A fiber per call (Effect.timeout), a
    // setTimeout per call, or a promise chain per call each cost more Node CPU than the Redis call itself.
    const deadlines = makeDeadlines(timeoutMs)
    const errorOf = (operation: string, cause: unknown, script?: Scripts.Script): RedisError =>
      layoutResetOf(operation, cause) ??
        new RedisError({
          operation,
          reason: reasonOf(cause),
          ...(script === undefined ? {} : locationOf(cause, script)),
          cause
        })
    const unreadable = (operation: string, cause: unknown) =>
      new RedisError({ operation, reason: `unexpected reply: ${String(cause)}`, cause })
    const finish = <A>(
      resume: (effect: Effect.Effect<A, RedisError>) => void,
      operation: string,
      decode: (reply: unknown) => A,
      reply: unknown
    ) => {
      try {
        resume(Effect.succeed(decode(reply)))
      } catch (cause) {
        resume(Effect.fail(unreadable(operation, cause)))
      }
    }
    const failWith = <A>(
      resume: (effect: Effect.Effect<A, RedisError>) => void,
      operation: string,
      cause: unknown,
      script?: Scripts.Script
    ) => resume(Effect.fail(errorOf(operation, cause, script)))
    const call = <A>(operation: string, f: () => Promise<unknown>, decode: (reply: unknown) => A) =>
      Effect.callback<A, RedisError>((resume) => {
        const pending = deadlines.add(() => resume(Effect.fail(timedOut(operation))))
        f().then(
          (reply) => {
            if (pending.settle()) finish(resume, operation, decode, reply)
          },
          (cause) => {
            if (pending.settle()) failWith(resume, operation, cause)
          }
        )
        // No canceler: an interrupted call's reply settles its deadline, and resuming then is a no-op.
      })
    // EVALSHA, and EVAL when Redis lost the script (NOSCRIPT): `args` is numkeys, the keys, then ARGV.
    // `compensate` undoes a call that timed out: a stalled Redis still runs what it was sent once it resumes, so a
    // lock whose caller already failed would stay held. The undo goes out on the same connection, which Redis
    // answers in order, so it runs after the late call if that ever runs. A lock step (`step`: a lock, unlock or
    // handoff, with the shard it goes to) may share its call with others (`batched`).
    const script = <A>(
      operation: string,
      script: Scripts.Script,
      args: Array<string | number>,
      decode: (reply: unknown) => A,
      compensate?: () => void,
      step?: Step
    ) =>
      Effect.callback<A, RedisError>((resume) =>
        send(
          operation,
          script,
          args,
          decode,
          (value) => resume(Effect.succeed(value)),
          (error) => resume(Effect.fail(error)),
          compensate,
          step
        )
      )
    // `script` as a promise, rejected with its RedisError: the store's promise calls (store/Direct).
    const sendPromise = <A>(
      operation: string,
      script: Scripts.Script,
      args: Array<string | number>,
      decode: (reply: unknown) => A,
      compensate?: () => void,
      step?: Step
    ): Promise<A> =>
      new Promise((resolve, reject) => send(operation, script, args, decode, resolve, reject, compensate, step))
    // The one way a script call goes out, for the Effect calls and the promise ones: each gets its decoded reply or its
    // RedisError once, and never after its deadline (which counts from here, a turn spent waiting for a batch too).
    const send = <A>(
      operation: string,
      script: Scripts.Script,
      args: Array<string | number>,
      decode: (reply: unknown) => A,
      done: (value: A) => void,
      failed: (error: RedisError) => void,
      compensate: (() => void) | undefined,
      step?: Step
    ): void => {
      const pending = deadlines.add(() => {
        compensate?.()
        failed(timedOut(operation))
      })
      const replied = (reply: unknown) => {
        if (!pending.settle()) return
        let value: A
        try {
          value = decode(reply)
        } catch (cause) {
          return failed(unreadable(operation, cause))
        }
        done(value)
      }
      // `located`: the error names a line of this script (not of a batch that carried it).
      const refused = (cause: unknown, located = true) => {
        if (pending.settle()) {
          if (compensate !== undefined && mayHaveRun(cause)) compensate()
          failed(errorOf(operation, cause, located ? script : undefined))
        }
      }
      if (step === undefined) return void evalOne(script, args, pending, replied, refused)
      batched({ kind: step.kind, group: step.group, sent: step.sent, script, args, pending, replied, refused })
    }
    const evalOne = (
      script: Scripts.Script,
      args: ReadonlyArray<string | number>,
      pending: Pending,
      replied: (reply: unknown) => void,
      refused: (cause: unknown) => void
    ): Promise<void> =>
      client.evalsha(script.sha, ...(args as [number, ...Array<string | number>])).then(replied, (cause: unknown) => {
        // A NOSCRIPT that comes after the deadline is not answered with EVAL: its caller has already failed.
        if (Scripts.isNoScript(cause) && !pending.settled) {
          return client.eval(script.source, ...(args as [number, ...Array<string | number>])).then(replied, refused)
        }
        refused(cause)
      })

    // Lock steps batched per event-loop turn (issue 39). A step that finds no call of its shard in flight and none
    // waiting goes at once, alone, in its own script: a lone job waits for nothing. Otherwise it waits for the end of
    // the turn (setImmediate) or for flushAt steps, and the steps of each shard gathered by then go as one batch.lua
    // call: one command to write, parse and answer for many jobs. Each step keeps its own deadline, compensation,
    // decoding and error: a refused or failed step answers its job alone. On a cluster a shard's keys share a slot.
    const queued = new Map<number, { readonly steps: Array<Queued>; bytes: number }>()
    const flying = new Map<number, number>()
    let turnEnds = false
    const batched = (step: Queued): void => {
      const waiting = queued.get(step.group)
      if (waiting === undefined && (flying.get(step.group) ?? 0) === 0) return sendSteps(step.group, [step])
      const bytes = sizeOf(step.args)
      if (waiting === undefined) queued.set(step.group, { steps: [step], bytes })
      else if (waiting.steps.push(step) >= flushAt || (waiting.bytes += bytes) >= flushBytes) {
        queued.delete(step.group)
        return sendSteps(step.group, waiting.steps)
      }
      if (!turnEnds) {
        turnEnds = true
        setImmediate(endTurn)
      }
    }
    const endTurn = () => {
      turnEnds = false
      const groups = Array.from(queued)
      queued.clear()
      for (const [group, waiting] of groups) sendSteps(group, waiting.steps)
    }
    const sendSteps = (group: number, gathered: ReadonlyArray<Queued>): void => {
      // A step whose deadline passed while it waited is not sent: its undo has gone out already, and the step would
      // run after it (a lock held by a caller told it failed). Found by an outsider probe of the flushAt path.
      const steps = gathered.filter((step) => !step.pending.settled)
      if (steps.length === 0) return
      flying.set(group, (flying.get(group) ?? 0) + 1)
      const landed = () => {
        const left = flying.get(group)! - 1
        if (left === 0) flying.delete(group)
        else flying.set(group, left)
      }
      if (steps.length === 1) {
        const [step] = steps as [Queued]
        evalOne(step.script, step.args, step.pending, step.replied, step.refused).then(landed, landed)
        return step.sent?.()
      }
      const answered = (sent: ReadonlyArray<Queued>) => (reply: unknown) => {
        if (!Array.isArray(reply) || reply.length !== sent.length) {
          const cause = new Error(`a batch of ${sent.length} steps answered ${String(reply)}`)
          for (const step of sent) step.refused(cause, false)
          return
        }
        sent.forEach((step, i) => {
          const one = reply[i] as unknown
          if (!Array.isArray(one) || one.length !== 2) return step.refused(new Error(`unexpected reply: ${String(one)}`), false)
          if (Number(one[0]) === 1) step.replied(one[1])
          else step.refused(new Error(String(one[1])), false)
        })
      }
      const failed = (sent: ReadonlyArray<Queued>) => (cause: unknown) => {
        for (const step of sent) step.refused(cause, false)
      }
      client.evalsha(scripts.batch.sha, ...batchArgs(steps)).then(answered(steps), (cause: unknown) => {
        if (!Scripts.isNoScript(cause)) return failed(steps)(cause)
        // Redis lost the script and ran nothing: the steps still waiting go again, by EVAL (one that timed out
        // meanwhile has been compensated, and must not run after its undo).
        const live = steps.filter((step) => !step.pending.settled)
        if (live.length === 0) return
        return client.eval(scripts.batch.source, ...batchArgs(live)).then(answered(live), failed(live))
      }).then(landed, landed)
      for (const step of steps) step.sent?.()
    }

    // The compensation of a lock or handoff: release what the late call may take for jid. Fire and forget, tried
    // again while the connection is down (a call lost with its connection is undone once it is back), for up to 30 s.
    // A late lock's fence is unknown here: release whichever acquisition of jid it made. So jid's next acquisition
    // must come after it (or its last try): a job put back waits for it (`undone`), and an undo that landed after the
    // next run of its job took the lock ended that run's hold (issue 47).
    const undoing = new Map<string, Set<Promise<void>>>()
    const releaseLate = (lock: LockKey, jid: string) => () => {
      // A run lock's late hold is published as released: a job of this worker may wait for it (lockTimeout).
      const args = unlockArgs(lock, jid, 0, false, lock.name.endsWith(":RUN")) as [number, ...Array<string | number>]
      let done!: () => void
      const ended = new Promise<void>((resolve) => (done = resolve))
      const pending = undoing.get(jid) ?? new Set()
      pending.add(ended)
      undoing.set(jid, pending)
      const end = () => {
        pending.delete(ended)
        if (pending.size === 0 && undoing.get(jid) === pending) undoing.delete(jid)
        done()
      }
      const attempt = (left: number): void => {
        client.evalsha(scripts.unlock.sha, ...args)
          .catch((cause: unknown) => (Scripts.isNoScript(cause) ? client.eval(scripts.unlock.source, ...args) : Promise.reject(cause)))
          .then(end, () => {
            if (left > 0) setTimeout(() => attempt(left - 1), 500).unref()
            else end()
          })
      }
      attempt(60)
    }

    // A prefix's layout as Redis records it, asked once per prefix (concurrent first calls share the one question):
    // recorded by the first lock under the prefix when none is ("check"), refused when it differs from this store's.
    // Until a record is read, each call asks again: a question that failed (Redis did not answer), and a call that
    // writes no lock (a release, a renewal, an admin read), which records nothing.
    const asking = new Map<string, Promise<Layout.Layout>>()
    const refusalOf = (prefix: string, recorded: string, foreign: boolean) =>
      new LayoutMismatch({
        prefix,
        key: Layout.recordKey(prefix),
        recorded,
        configured: Layout.describe(configured),
        foreign
      })
    const mismatch = (prefix: string, recorded: string, foreign: boolean) => {
      const refusal = refusalOf(prefix, recorded, foreign)
      return new RedisError({ operation: "layout", reason: refusal.message, cause: refusal })
    }
    const settleLayout = (prefix: string, reply: unknown): Layout.Layout => {
      if (reply === null || reply === undefined) return configured
      const text = String(reply)
      const read = Layout.decodeRecord(text)
      if (read === undefined) throw mismatch(prefix, JSON.stringify(text.slice(0, 200)), true)
      const recorded = read.layout
      // Adopting a cluster layout on one Redis works (its keys are names like any other); one Redis's layout on a
      // cluster does not (a lock's keys span slots).
      const usable = adopt ? recorded.cluster || !configured.cluster : Layout.same(recorded, configured)
      if (!usable) throw mismatch(prefix, Layout.describe(recorded), false)
      layouts.set(prefix, recorded)
      epochs.set(prefix, read.epoch)
      return recorded
    }
    // A lock refused by acquire's layout_current (`LAYOUTRESET epoch=<epoch> key=<resets key>`): the prefix whose layout was
    // reset is the one this store read with that epoch whose shards' resets key it is.
    const layoutResetOf = (operation: string, cause: unknown): RedisError | undefined => {
      const found = cause instanceof Error ? layoutResetReply.exec(reasonOf(cause)) : null
      if (found === null) return undefined
      const [, epoch, key] = found as unknown as [string, string, string]
      let prefix = key
      for (const [known, at] of epochs) {
        const read = layoutFor(known)
        if (at !== epoch) continue
        for (let shard = 0; shard < read.shards; shard++) if (read.resets(known, shard) === key) prefix = known
      }
      const refusal = new LayoutMismatch({
        prefix,
        key,
        recorded: Layout.describe(layoutFor(prefix)),
        configured: Layout.describe(configured),
        foreign: false,
        reset: true
      })
      return new RedisError({ operation, reason: refusal.message, cause: refusal })
    }
    const layoutPromise = (prefix: string, lock: boolean): Promise<Layout.Layout> => {
      const known = layouts.get(prefix)
      if (known !== undefined) return Promise.resolve(known)
      const record = lock && !adopt
      const question = `${record ? "1" : "0"}${prefix}`
      let pending = asking.get(question)
      if (pending === undefined) {
        const asked = sendPromise(
          "layout",
          scripts.layout,
          [1, Layout.recordKey(prefix), Layout.encode(configured, Layout.newEpoch()), record ? "1" : "0"],
          (reply) => reply
        ).then(
          (reply) => settleLayout(prefix, reply),
          (error: RedisError) =>
            Promise.reject(
              isWrongType(error) ? mismatch(prefix, "a key of another type", true) : error
            )
        )
        pending = asked.finally(() => asking.delete(question))
        asking.set(question, pending)
      }
      return pending
    }
    const layoutOf = (prefix: string, lock = false): Effect.Effect<Layout.Layout, RedisError> =>
      Effect.callback((resume) => {
        layoutPromise(prefix, lock).then(
          (known) => resume(Effect.succeed(known)),
          (error: RedisError) => resume(Effect.fail(error))
        )
      })
    // `self` once the prefix's layout is known: nothing more to pay after the first call under it. `lock`: the call
    // may write a lock, so the layout is recorded first when none is.
    const withLayout = <A>(
      prefix: string,
      self: () => Effect.Effect<A, RedisError>,
      lock = false
    ): Effect.Effect<A, RedisError> => layouts.has(prefix) ? self() : Effect.flatMap(layoutOf(prefix, lock), self)
    // Which slot a renewal goes to: a shard's hash tag depends only on the shard count and the shard, not the prefix.
    const slotGroup = (lock: LockKey): number => {
      const own = layoutFor(lock.prefix)
      return own.shards * (Layout.maxShards + 1) + own.shardOf(lock)
    }

    // Load once now, on every master of a cluster; a later SCRIPT FLUSH, or a replica promoted since, is answered by
    // EVAL on NOSCRIPT.
    const loadOn = (node: { script(subcommand: "LOAD", script: string): Promise<unknown> }) =>
      Effect.forEach(
        Object.values(scripts),
        (script) => call("load scripts", () => node.script("LOAD", script.source), () => undefined),
        { discard: true }
      )
    // A refusal (a denied command, a script Redis cannot compile) is the same on every node and every time.
    const refusal = (error: RedisError) => /^(ERR|NOPERM|NOAUTH|WRONGPASS)/.test(error.reason)
    // A cluster built during a failover lists the master that died until a replica takes over: the masters load at
    // once, and one that does not answer fails only if none does (or one refuses). Every call answers NOSCRIPT with
    // EVAL, so the promoted replica needs no load; waiting for it would fail the store, or hold a command line, for
    // the whole failover.
    const loadMasters = Effect.suspend(() =>
      Effect.flatMap(
        Effect.forEach(client.nodes?.("master") ?? [], (node) => Effect.result(loadOn(node)), { concurrency: "unbounded" }),
        (loads) => {
          const failed = loads.flatMap((load) => load._tag === "Failure" ? [load.failure] : [])
          const refused = failed.find(refusal)
          return refused !== undefined
            ? Effect.fail(refused)
            : failed.length > 0 && failed.length === loads.length
            ? Effect.fail(failed[0]!)
            : Effect.void
        }
      )
    )
    yield* client.isCluster === true && client.nodes !== undefined ? loadMasters : loadOn(client)

    // The items' indices, grouped by shard: one group for a standalone layout, and one per shard for a prefix whose
    // recorded cluster layout a standalone Redis adopted (each script names its own shard's index).
    const shardGroups = <I>(items: ReadonlyArray<I>, shardOf: (item: I) => number | string): Array<Array<number>> => {
      const groups = new Map<number | string, Array<number>>()
      items.forEach((item, i) => {
        const shard = shardOf(item)
        const group = groups.get(shard)
        if (group === undefined) groups.set(shard, [i])
        else group.push(i)
      })
      return Array.from(groups.values())
    }

    // One call per shard the items fall in, sent together, the answers put back in the items' order.
    const perShard = <I, A>(
      items: ReadonlyArray<I>,
      shardOf: (item: I) => number | string,
      run: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<A>, RedisError>
    ): Effect.Effect<ReadonlyArray<A>, RedisError> => {
      const groups = shardGroups(items, shardOf)
      if (groups.length === 1) return run(items)
      return Effect.map(
        Effect.forEach(
          groups,
          (indices) => Effect.map(run(indices.map((i) => items[i]!)), (answers) => [indices, answers] as const),
          { concurrency: "unbounded" }
        ),
        (parts) => {
          const out = new Array<A>(items.length)
          for (const [indices, answers] of parts) indices.forEach((index, j) => (out[index] = answers[j]!))
          return out
        }
      )
    }

    // The logs of the renewals with lockEvents on follow the holders keys; each renewal names its log's place.
    const renewBatch = (renewals: ReadonlyArray<Renewal>) => {
      const logs: Array<string> = []
      const args: Array<string | number> = []
      for (const renewal of renewals) {
        args.push(renewal.jid, renewal.leaseMs, renewal.fence)
        if (renewal.events === true) {
          logs.push(keysOf(renewal.lock).events)
          args.push(renewals.length + logs.length)
        } else {
          args.push(0)
        }
        args.push(renewal.keep === true ? 1 : 0)
      }
      return script(
        "renewAll",
        scripts.renewAll,
        [renewals.length + logs.length, ...renewals.map((renewal) => keysOf(renewal.lock).locked), ...logs, ...args],
        (reply) => {
          const answers = toArray(reply, "renewAll")
          if (answers.length !== renewals.length) {
            throw new Error(`${answers.length} answers to ${renewals.length} renewals`)
          }
          return answers.map(isOne)
        }
      )
    }

    const reapArgs = (request: ReapRequest, rank: number, batch: number) =>
      [rank, batch, request.orphansBefore, request.dryRun ? "1" : "0"] as const

    // A cluster's step: the runner's lease first (it is in another slot), then shard by shard from where the last
    // step stopped, the shard's members (ZRANGE) and the script over their declared keys, until `batch` members are
    // looked at or the last shard ends. Each shard's call is all or nothing; the step is not, across shards.
    const reapShards = (request: ReapRequest): Effect.Effect<ReapResult, RedisError> => {
      const layout = layoutFor(request.prefix)
      const zrange = client.zrange
      if (zrange === undefined) return Effect.fail(new RedisError({ operation: "reap", reason: "this client has no ZRANGE" }))
      // The arguments first, in reap.lua's order and words: the runner's lease is claimed before any script of the
      // step runs, and nothing (that lease included) may be written for a step that is refused.
      const runner = request.runner
      const refusal = outOfRange("batch", request.batch, 1, 1000) ?? outOfRange("start", request.start, 0) ??
        outOfRange("orphansBefore", request.orphansBefore, 0) ??
        (runner === undefined ? undefined : outOfRange("lease", runner.leaseMs, 1))
      if (refusal !== undefined) return Effect.fail(new RedisError({ operation: "reap", reason: refusal }))
      const claimed = runner === undefined
        ? Effect.succeed(true)
        : script("reap", scripts.claim, [1, runner.key, runner.owner, runner.leaseMs], isOne)
      const shardStep = (shard: number, rank: number, batch: number) => {
        const index = layout.index(request.prefix, shard)
        return Effect.flatMap(call("reap", () => zrange.call(client, index, rank, rank + batch - 1), toStrings), (members) =>
          members.length === 0
            ? Effect.succeed(emptyReap)
            : script(
              "reap",
              scripts.reap,
              [
                2 * members.length + 1,
                index,
                ...members.map((name) => keysOf({ prefix: request.prefix, name }).locked),
                ...members.map((name) => keysOf({ prefix: request.prefix, name }).events),
                ...reapArgs(request, rank, batch),
                "",
                ...members
              ],
              toReapResult
            ))
      }
      const walk = (shard: number, rank: number, sofar: ReapResult): Effect.Effect<ReapResult, RedisError> =>
        Effect.flatMap(shardStep(shard, rank, request.batch - sofar.scanned), (step) => {
          const merged: ReapResult = {
            scanned: sofar.scanned + step.scanned,
            next: step.next >= 0 ? Layout.reapStart.encode(shard, step.next) : -1,
            removedMembers: [...sofar.removedMembers, ...step.removedMembers],
            removedHolders: [...sofar.removedHolders, ...step.removedHolders],
            candidates: [...sofar.candidates, ...step.candidates]
          }
          if (step.next >= 0) return Effect.succeed(merged)
          if (shard + 1 >= layout.shards) return Effect.succeed(merged)
          if (merged.scanned >= request.batch) return Effect.succeed({ ...merged, next: Layout.reapStart.encode(shard + 1, 0) })
          return walk(shard + 1, 0, merged)
        })
      const { rank, shard } = Layout.reapStart.decode(request.start)
      return Effect.flatMap(claimed, (held) =>
        !held
          ? Effect.succeed<ReapResult>({ ...emptyReap, refused: true })
          : shard >= layout.shards
          ? Effect.succeed(emptyReap)
          : walk(shard, rank, emptyReap))
    }

    // A lock step's batch: one per shard on a cluster (a shard's keys share a slot), one in all on a standalone Redis.
    const stepOf = (kind: Step["kind"], lock: LockKey, sent?: () => void): Step => ({
      kind,
      group: client.isCluster === true ? slotGroup(lock) : 0,
      sent
    })
    // lock.lua's and unlock.lua's arguments, for the Effect calls and the promise ones alike.
    const lockArgs = (lock: LockKey, request: HolderRequest): Array<string | number> => {
      const keys = keysOf(lock)
      // Built in place, the events key only when on: every lock step pays for this array. A swap's keys have the
      // replaced set before it (lock_step).
      const swap = request.swap !== undefined && request.swap.length > 0
      const args: Array<string | number> = [4, keys.locked, keys.index, keys.fence, keys.resets]
      if (swap) args.push(keys.replaced)
      if (request.events === true) args.push(keys.events)
      args[0] = args.length - 1
      args.push(
        request.jid,
        lock.name,
        request.limit,
        request.ttlMs,
        request.leaseMs,
        request.info,
        request.fenced ? "1" : "0",
        request.queue === undefined || request.queue === "" ? "" : JSON.stringify(request.queue),
        epochs.get(lock.prefix) ?? ""
      )
      for (const held of request.swap ?? []) args.push(held.jid, held.lockedAt === undefined ? "" : String(held.lockedAt))
      return args
    }
    const unlockArgs = (
      lock: LockKey,
      jid: string,
      fence: number,
      events?: boolean,
      signal?: boolean
    ): Array<string | number> => {
      const keys = keysOf(lock)
      const args: Array<string | number> = events === true
        ? [3, keys.locked, keys.index, keys.events, jid, lock.name, fence]
        : [2, keys.locked, keys.index, jid, lock.name, fence]
      if (signal === true) args.push("1")
      return args
    }

    // A lock call as both the Effect call (`script`) and the promise one (`sendPromise`) send it.
    const lockCall = <R>(
      via: (
        operation: string,
        script: Scripts.Script,
        args: Array<string | number>,
        decode: (reply: unknown) => LockResult,
        compensate?: () => void,
        step?: Step
      ) => R,
      lock: LockKey,
      request: HolderRequest
    ): R => via("lock", scripts.lock, lockArgs(lock, request), toLockResultReply, releaseLate(lock, request.jid), stepOf("l", lock))

    const store: Store = {
      lock: (lock, request) => lockCall(script, lock, request),
      unlock: (lock, jid, fence = 0, events, signal) =>
        script("unlock", scripts.unlock, unlockArgs(lock, jid, fence, events, signal), isOne, undefined, stepOf("u", lock)),
      renew: (lock, jid, leaseMs, fence = 0, events) =>
        script(
          "renew",
          scripts.renew,
          events === true
            ? [2, keysOf(lock).locked, keysOf(lock).events, jid, leaseMs, fence]
            : [1, keysOf(lock).locked, jid, leaseMs, fence],
          isOne
        ),
      // One script call for the batch: the keys, then jid, lease, fence, log and keep per renewal.
      // One script call per shard the batch falls in (one for standalone Redis), each all or nothing. A lease out of
      // range fails the whole batch before anything is written: only the shard holding the first one is sent, and
      // refuses it, naming that lease as one Redis (and the memory store) would. Sending every such shard, the answer
      // was whichever shard refused first.
      renewAll: (renewals) => {
        if (renewals.length === 0) return Effect.succeed([])
        const invalid = client.isCluster === true ? renewals.find((renewal) => !isLease(renewal.leaseMs)) : undefined
        const shard = invalid === undefined ? undefined : slotGroup(invalid.lock)
        const sent = shard === undefined ? renewals : renewals.filter((renewal) => slotGroup(renewal.lock) === shard)
        return perShard(sent, (renewal) => slotGroup(renewal.lock), renewBatch)
      },
      handoff: (from, to, request, { keepOnConflict }) =>
        script(
          "handoff",
          scripts.handoff,
          [
            ...(request.events === true ? [6] : [5]),
            keysOf(from).locked,
            keysOf(to).locked,
            keysOf(to).index,
            keysOf(to).fence,
            keysOf(to).resets,
            ...(request.events === true ? [keysOf(from).events] : []),
            request.jid,
            from.name,
            to.name,
            request.limit,
            request.ttlMs,
            request.leaseMs,
            request.info,
            keepOnConflict ? "1" : "0",
            epochs.get(to.prefix) ?? ""
          ],
          (reply) => {
            const [held, ...rest] = toArray(reply, "handoff")
            return { ...toLockResult(rest), queueLockHeld: Number(held) === 1 }
          },
          releaseLate(to, request.jid),
          stepOf("h", to)
        ),
      holders: (lock) =>
        call(
          "holders",
          () => client.hgetall(keysOf(lock).locked),
          (reply) => Object.entries(reply as Record<string, string>).map(([jid, raw]) => parseHolder(jid, raw))
        ),
      replaced: (lock, jid) =>
        client.sismember === undefined
          ? Effect.succeed(false)
          : call("replaced", () => client.sismember!(keysOf(lock).replaced, jid), (reply) => Number(reply) === 1),
      fetch: (lock, page) => {
        const keys = keysOf(lock)
        const args = page === undefined ? ["0", 0, 0] : [page.cursor, page.count, page.bytes]
        return script("fetch", scripts.fetch, [2, keys.locked, keys.index, lock.name, ...args], toFetched)
      },
      reap: (request) =>
        layoutFor(request.prefix).shards > 1
          ? reapShards(request)
          : script(
            "reap",
            scripts.reap,
            request.runner === undefined
              ? [1, layout.index(request.prefix, 0), ...reapArgs(request, request.start, request.batch)]
              : [
                2,
                layout.index(request.prefix, 0),
                request.runner.key,
                ...reapArgs(request, request.start, request.batch),
                request.runner.owner,
                request.runner.leaseMs
              ],
            toReapResult
          ),
      // One ZSCAN of one shard per page; the cursor carries the shard (Layout.scanCursor).
      scan: (prefix, cursor, pattern, count) => {
        const zscan = client.zscan
        if (zscan === undefined) return Effect.fail(new RedisError({ operation: "scan", reason: "this client has no ZSCAN" }))
        const layout = layoutFor(prefix)
        const at = Layout.scanCursor.decode(layout, cursor)
        const index = layout.index(prefix, at.shard)
        // On a cluster a failed page names its shard and the node serving it: a caller walking every shard says which
        // one did not answer.
        const where = (error: RedisError) => {
          const slot = Layout.slotOf(index)
          const node = client.slots?.[slot]?.[0]
          return new RedisError({
            ...error,
            reason: `${error.reason} (shard ${at.shard} of ${layout.shards}, ${index} in slot ${slot}${
              node === undefined ? "" : ` on ${node}`
            })`
          })
        }
        return call(
          "scan",
          () => zscan.call(client, index, at.cursor, "MATCH", pattern, "COUNT", count),
          (reply) => {
            const page = toScanPage(reply)
            const next = page.cursor !== "0"
              ? Layout.scanCursor.encode(layout, at.shard, page.cursor)
              : at.shard + 1 < layout.shards
              ? Layout.scanCursor.encode(layout, at.shard + 1, "0")
              : "0"
            return { cursor: next, members: page.members }
          }
        ).pipe(Effect.mapError((error) => client.isCluster === true ? where(error) : error))
      },
      // One script call per shard (one for standalone Redis): all or nothing within each.
      remove: (locks, options) => {
        if (locks.length === 0) return Effect.succeed(noRemoval)
        const prefix = onePrefix(locks)
        if (prefix === undefined) return Effect.fail(mixedPrefixes(locks))
        const strict = options?.strict === true ? "1" : "0"
        // Each lock's expectation as a count (-1: none) then its jids.
        const expectation = (i: number) => {
          const jids = options?.expect?.[i]
          return jids === undefined ? [-1] : [jids.length, ...jids]
        }
        const removeShard = (shard: ReadonlyArray<number>, mode: "0" | "1" | "2") =>
          script(
            "remove",
            scripts.remove,
            [
              2 * shard.length + 1,
              keysOf(locks[shard[0]!]!).index,
              ...shard.map((i) => keysOf(locks[i]!).locked),
              ...shard.map((i) => keysOf(locks[i]!).events),
              options?.jid ?? "",
              mode,
              shard.length,
              ...shard.map((i) => locks[i]!.name),
              ...shard.flatMap(expectation),
              options?.who ?? ""
            ],
            toRemoval
          )
        const groups = shardGroups(locks, layout.shardOf)
        if (groups.length === 1) return removeShard(groups[0]!, strict)
        const removeAll = Effect.map(
          Effect.forEach(groups, (group) => removeShard(group, strict), { concurrency: "unbounded" }),
          mergeRemovals
        )
        if (strict === "0") return removeAll
        // Strict over several slots: every shard checked first (nothing written), then each removed all or nothing.
        return Effect.flatMap(
          Effect.forEach(groups, (group) => removeShard(group, "2"), { concurrency: "unbounded" }),
          (checks) => {
            const checked = mergeRemovals(checks)
            return checked.refused.length > 0 ? Effect.succeed(checked) : removeAll
          }
        )
      },
      claim: (key, owner, leaseMs) => script("claim", scripts.claim, [1, key, owner, leaseMs], isOne),
      tally: (key, amounts, ttlMs) =>
        script("tally", scripts.tally, [1, key, ttlMs, ...amounts.flat()], () => undefined),
      // One HGETALL per key, sent together: one connection answers them in order, one round trip's wait.
      tallies: (keys) =>
        Effect.forEach(
          keys,
          (key) => call("tallies", () => client.hgetall(key), toTally).pipe(Effect.catchIf(isWrongType, () => Effect.succeed({}))),
          { concurrency: "unbounded" }
        ),
      journal: (key, entry, keep, ttlMs) => script("journal", scripts.journal, [1, key, entry, keep, ttlMs], () => undefined),
      events: (lock, count) =>
        Effect.map(store.journaled(keysOf(lock).events, count), (texts) =>
          texts.flatMap((text): Array<LockEvent> => {
            const event = eventOf(text)
            return event === undefined ? [] : [event]
          })),
      journaled: (key, count) => {
        const lrange = client.lrange
        return lrange === undefined
          ? Effect.fail(new RedisError({ operation: "journaled", reason: "this client has no LRANGE" }))
          : !Number.isSafeInteger(count) || count < 1
          ? Effect.fail(new RedisError({ operation: "journaled", reason: `count must be a whole number from 1, got ${count}` }))
          : call("journaled", () => lrange.call(client, key, 0, count - 1), toStrings).pipe(
            Effect.catchIf(isWrongType, () => Effect.succeed([]))
          )
      }
    }
    // Every call under a prefix checks its layout first (once), and a prefix recorded otherwise fails each call.
    const checked: Store = {
      ...store,
      lock: (lock, request) => withLayout(lock.prefix, () => store.lock(lock, request), true),
      unlock: (lock, jid, fence, events, signal) =>
        withLayout(lock.prefix, () => store.unlock(lock, jid, fence, events, signal)),
      renew: (lock, jid, leaseMs, fence, events) =>
        withLayout(lock.prefix, () => store.renew(lock, jid, leaseMs, fence, events)),
      events: (lock, count) => withLayout(lock.prefix, () => store.events(lock, count)),
      renewAll: (renewals) => {
        const unknown = new Set<string>()
        for (const renewal of renewals) if (!layouts.has(renewal.lock.prefix)) unknown.add(renewal.lock.prefix)
        return unknown.size === 0
          ? store.renewAll(renewals)
          : Effect.andThen(
            Effect.forEach(unknown, (prefix) => layoutOf(prefix), { discard: true }),
            Effect.suspend(() => store.renewAll(renewals))
          )
      },
      handoff: (from, to, request, options) =>
        withLayout(
          from.prefix,
          () => withLayout(to.prefix, () => store.handoff(from, to, request, options), true),
          true
        ),
      holders: (lock) => withLayout(lock.prefix, () => store.holders(lock)),
      replaced: (lock, jid) => withLayout(lock.prefix, () => store.replaced!(lock, jid)),
      fetch: (lock, page) => withLayout(lock.prefix, () => store.fetch(lock, page)),
      reap: (request) => withLayout(request.prefix, () => store.reap(request)),
      scan: (prefix, cursor, pattern, count) => withLayout(prefix, () => store.scan(prefix, cursor, pattern, count)),
      remove: (locks, options) => {
        const prefix = onePrefix(locks)
        return locks.length === 0 || prefix === undefined
          ? store.remove(locks, options)
          : withLayout(prefix, () => store.remove(locks, options))
      },
      layout: (prefix) =>
        Effect.map(
          layoutOf(prefix, true).pipe(
            Effect.catchIf(
              (error) => error.cause instanceof LayoutMismatch,
              (error) => Effect.fail(error.cause as LayoutMismatch)
            )
          ),
          (known): PrefixLayout => ({ cluster: known.cluster, shards: known.shards, recorded: layouts.has(prefix) })
        ),
      // The record read again (not the store's copy), then its epoch retired on each of its shards, only while that
      // shard's index is empty (one script per shard, in the shard's slot, so a lock taken since Redis.resetLayout's
      // scan either refuses the reset or is refused itself); undone on the shards already done when one refuses. Then
      // the record goes, if it is still the one read.
      resetLayout: (prefix) =>
        Effect.gen(function*() {
          const key = Layout.recordKey(prefix)
          const text = yield* script(
            "layout reset",
            scripts.layout,
            [1, key, Layout.encode(configured, ""), "0"],
            (reply) => reply === null || reply === undefined ? undefined : String(reply)
          )
          if (text === undefined) return false
          const read = Layout.decodeRecord(text)
          if (read === undefined) return yield* Effect.fail(refusalOf(prefix, JSON.stringify(text.slice(0, 200)), true))
          const { epoch, layout: recorded } = read
          // One Redis's layout on a cluster: its keys span slots (as settleLayout refuses it).
          if (configured.cluster && !recorded.cluster) return yield* Effect.fail(refusalOf(prefix, Layout.describe(recorded), false))
          const retire = (shard: number, mode: "+" | "-") =>
            script(
              "layout reset",
              scripts.retire,
              [2, recorded.index(prefix, shard), recorded.resets(prefix, shard), epoch, mode],
              (reply) => Number(reply) === 1
            )
          for (let shard = 0; shard < recorded.shards; shard++) {
            if (yield* retire(shard, "+")) continue
            for (let done = 0; done < shard; done++) yield* retire(done, "-")
            return yield* Effect.fail(
              new RedisError({
                operation: "layout reset",
                reason: `a lock was taken under prefix ${prefix} while its layout was being reset (in ` +
                  `${recorded.index(prefix, shard)}): a process of the prefix still runs; stop every process of the ` +
                  `prefix, drain it, and reset again (nothing was changed)`
              })
            )
          }
          const reply = yield* script("layout reset", scripts.layout, [1, key, text, "-"], (reply) => reply)
          layouts.delete(prefix)
          epochs.delete(prefix)
          return reply !== null && reply !== undefined && String(reply) === text
        }),
      // A run lock's channel is its holders key's name (the scripts PUBLISH on KEYS[1]).
      releases: releasesOf(client, (lock) => keysOf(lock).locked, waiterCapsOf(options)),
      undone: (jid) => {
        const pending = undoing.get(jid)
        return pending === undefined ? Effect.void : Effect.promise(() => Promise.all(pending)).pipe(Effect.asVoid)
      }
    }
    // The promise calls: the question first only while the prefix's layout is not known yet.
    const directLock = (lock: LockKey, request: HolderRequest) => lockCall(sendPromise, lock, request)
    const directUnlock = (lock: LockKey, jid: string, fence: number, events?: boolean, sent?: () => void) =>
      sendPromise("unlock", scripts.unlock, unlockArgs(lock, jid, fence, events), isOne, undefined, stepOf("u", lock, sent))
    Direct.register(checked, {
      lock: (lock, request) =>
        layouts.has(lock.prefix)
          ? directLock(lock, request)
          : layoutPromise(lock.prefix, true).then(() => directLock(lock, request)),
      unlock: (lock, jid, fence, events, sent) =>
        layouts.has(lock.prefix)
          ? directUnlock(lock, jid, fence, events, sent)
          : layoutPromise(lock.prefix, false).then(() => directUnlock(lock, jid, fence, events, sent))
    })
    return checked
  })

/**
 * The client `make` hands to the store: it fails calls at once, naming the connection's state, while ioredis knows the
 * connection is down. ioredis alone rejects a call made while disconnected at once, but not one it sent just before
 * the connection closed: with `autoResendUnfulfilledCommands: false` it parks the unanswered commands on close and
 * drops them on reconnect unanswered, so only the timeout ends them (an enqueue then waits the whole timeout).
 */
const failFast = (client: Redis, options: IORedisOptions): Client => {
  if (options.autoResendUnfulfilledCommands === false) {
    // A close after "ready": what is still in the queue was sent on the lost connection and gets no answer. A close
    // while connecting leaves ioredis' own handshake commands alone.
    let ready = client.status === "ready"
    client.on("ready", () => {
      ready = true
    })
    client.on("close", () => {
      if (!ready) return
      ready = false
      const lost = new Error(`${closedBeforeAnswer} (connection ${client.status}); the call may have run`)
      for (let item = client.commandQueue.shift(); item !== undefined; item = client.commandQueue.shift()) {
        item.command.reject(lost)
      }
    })
  }
  // With the offline queue on, the caller wants calls to wait for a reconnect.
  if (options.enableOfflineQueue !== false) return client
  const commands = new Set(client.getBuiltinCommands())
  const guarded = new Map<string, (...args: Array<unknown>) => unknown>()
  // Every command, not only those `Client` lists today, so the store can use more of them without a change here.
  return new Proxy(client, {
    get: (target, key, receiver) => {
      if (typeof key !== "string" || !commands.has(key)) return Reflect.get(target, key, receiver)
      let command = guarded.get(key)
      if (command === undefined) {
        const send = Reflect.get(target, key, receiver) as (...args: Array<unknown>) => unknown
        // "ready" with a socket that no longer writes: the close is known, its event not handled yet.
        command = (...args) =>
          target.status === "ready" && target.stream?.writable === true
            ? send.apply(target, args)
            : Promise.reject(
              new Error(
                `not connected to Redis (connection ${
                  target.status === "ready" ? "closing" : target.status
                }); the call was not sent`
              )
            )
        guarded.set(key, command)
      }
      return command
    }
  })
}

// Checked before connecting: ioredis parses a db that is not a number to NaN, never selects it (db 0 it is), and
// its ready handler then sends `SELECT NaN` with no one to catch the rejection.
const databaseOf = (client: Redis): Effect.Effect<number, RedisError> => {
  const db: unknown = client.options.db ?? 0
  return typeof db === "number" && Number.isSafeInteger(db) && db >= 0
    ? Effect.succeed(db)
    : Effect.fail(
      new RedisError({
        operation: "connect",
        reason: "the database (the url's /db or the db option) is not a whole number"
      })
    )
}

// ioredis answers a failed SELECT (a db out of range) with an error event and goes on in db 0: selecting it again
// here makes it a RedisError at connect.
const selectDatabase = (client: Redis, db: number): Effect.Effect<void, RedisError> => {
  if (db === 0) return Effect.void
  // How many databases the server has, when the user may read its config (CONFIG may be denied or renamed).
  const databases = Effect.tryPromise(() => client.config("GET", "databases")).pipe(
    Effect.map((reply) => Number((reply as ReadonlyArray<unknown>)[1])),
    Effect.filterOrFail((count) => Number.isSafeInteger(count) && count > 0),
    Effect.option
  )
  return Effect.tryPromise({ try: () => client.select(db), catch: (cause) => cause }).pipe(
    Effect.asVoid,
    Effect.catch((cause) =>
      Effect.flatMap(databases, (count) =>
        Effect.fail(
          new RedisError({
            operation: "connect",
            reason: count._tag === "Some"
              ? `database ${db} is out of range: this server has databases 0 to ${count.value - 1}`
              : `cannot select database ${db}: ${cause instanceof Error ? cause.message : String(cause)}`,
            cause
          })
        ))
    )
  )
}

// Set on every connection `make` opens (ioredis 6 reads it; ioredis 5 has no such option, hence the cast).
const legacyReplies = { replyMapping: "legacy" } as unknown as Partial<IORedisOptions>

// ioredis 6's constructors take `replyMapping` without `| undefined`, its options type with it: under
// exactOptionalPropertyTypes one is not the other. The value is always "legacy" here.
type ConstructorOptions = IORedisOptions & { readonly replyMapping?: never }

// A client the store owns, closed with the scope, and the last connection error it reported: connect() rejects with
// only "Connection is closed"; the error event says why.
const owned = <C extends Redis | Cluster>(create: () => C, timeout: Duration.Duration) =>
  Effect.gen(function*() {
    const context = yield* Effect.context<never>()
    let lastError: Error | undefined
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const client = create()
        // Connection errors surface as RedisError on the calls; the event itself is only worth a debug line.
        client.on("error", (error: Error) => {
          lastError = error
          Effect.runForkWith(context)(
            Effect.logDebug("Redis connection error", error.message).pipe(
              Effect.annotateLogs({ package: "effect-unique-jobs", module: "Redis" })
            )
          )
        })
        return client
      }),
      (client) =>
        // Only a connected client can send QUIT: one still connecting (or never started) would wait to connect first.
        (client.status === "ready" ? Effect.promise(() => client.quit().catch(() => undefined)) : Effect.void).pipe(
          Effect.timeoutOption(timeout),
          Effect.ensuring(Effect.sync(() => client.disconnect()))
        )
    )
    return { client, lastError: () => lastError }
  })

/**
 * What only this package's own tools choose: the CLI and the web UI adopt each prefix's recorded layout.
 *
 * @internal
 */
export interface Own {
  readonly layout?: "check" | "adopt" | undefined
  /**
   * A command line's cluster: no reconnect once connected or once no node answers, but while nodes answer with their
   * slots and say the cluster is down (a failover under way), the first connect tries again every `downRetryMs`
   * within its timeout.
   */
  readonly oneShot?: boolean | undefined
}

/**
 * A store that owns its ioredis connection: connected (and checked) when built, closed with its scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}, tool?: Own): Effect.Effect<Store, RedisError, Scope.Scope> =>
  Effect.map(makeWithClient(options, tool), ({ store }) => store)

/**
 * `make`, answering its ioredis client too: for what shares the store's one connection (Effect's `Redis` service,
 * `Redis.layerWithEffectRedis`). The client is the store's: closed with its scope.
 *
 * @internal
 */
export const makeWithClient = (
  options: Options = {},
  tool?: Own
): Effect.Effect<{ readonly store: Store; readonly client: Redis }, RedisError, Scope.Scope> =>
  Effect.gen(function*() {
    const timeout = Duration.fromInputUnsafe(options.timeout ?? defaultTimeout)
    const clientOptions: IORedisOptions = {
      // Fail fast while disconnected: a lock call queued offline could run long after its caller gave up.
      enableOfflineQueue: false,
      // Never send a command again after a reconnect: its caller has had its answer (a RedisError) long before.
      autoResendUnfulfilledCommands: false,
      lazyConnect: true,
      // ioredis' command timeout too, beside each call's own deadline (makeFromClient): without it a timed-out
      // command stays pending inside ioredis, which changes what its late reply or a reconnect does with it.
      commandTimeout: Duration.toMillis(timeout),
      connectTimeout: Duration.toMillis(timeout),
      enableAutoPipelining: options.enableAutoPipelining ?? false,
      ...options.client,
      // ioredis 6 speaks RESP3: its "resp3" reply mapping would hand map replies over as objects, in shapes the store
      // does not read. "legacy" (its default) keeps every reply as ioredis 5 gives it; ioredis 5 ignores the option.
      ...legacyReplies
    }
    const url = options.url === undefined
      ? undefined
      : Redacted.isRedacted(options.url)
      ? Redacted.value(options.url)
      : options.url
    const { client, lastError } = yield* owned(
      () => url === undefined ? new Redis(clientOptions as ConstructorOptions) : new Redis(url, clientOptions as ConstructorOptions),
      timeout
    )
    const db = yield* databaseOf(client)
    yield* connect(client, timeout, url !== undefined ? "Redis at the configured url" : "Redis", lastError)
    yield* selectDatabase(client, db)
    const store = yield* makeFromClient(failFast(client, clientOptions), {
      timeout,
      maxLockWaiters: options.maxLockWaiters,
      maxProcessWaiters: options.maxProcessWaiters,
      layout: tool?.layout
    })
    // Its finalizer runs before the client's: the lease keeper stops before the connection closes.
    return { store: yield* Keeper.scoped(store), client }
  })

// How long ioredis waits before it tries a call again while a cluster fails over (its default).
const clusterRetryMs = 100
// How long a command line's first connect waits before it reads the slots again of a cluster that said it is down.
const downRetryMs = 300

/**
 * A store on Redis Cluster that owns its ioredis `Cluster`: connected when built (every slot known), closed with its
 * scope. Calls follow MOVED and ASK and wait out CLUSTERDOWN, TRYAGAIN and a failover as ioredis does, always within
 * the call's timeout.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeCluster = (options: ClusterOptions, tool?: Own): Effect.Effect<Store, RedisError, Scope.Scope> =>
  Effect.map(makeClusterWithClient(options, tool), ({ store }) => store)

/**
 * `makeCluster`, answering its ioredis `Cluster` too (as `makeWithClient`).
 *
 * @internal
 */
export const makeClusterWithClient = (
  options: ClusterOptions,
  tool?: Own
): Effect.Effect<{ readonly store: Store; readonly client: Cluster }, RedisError, Scope.Scope> =>
  Effect.gen(function*() {
    const timeout = Duration.fromInputUnsafe(options.timeout ?? defaultTimeout)
    const timeoutMs = Duration.toMillis(timeout)
    const own = options.client ?? {}
    const clusterOptions: IORedisClusterOptions = {
      // As for one Redis: fail fast while the cluster is not ready rather than send a lock call late.
      enableOfflineQueue: false,
      lazyConnect: true,
      enableAutoPipelining: options.enableAutoPipelining ?? false,
      slotsRefreshTimeout: Math.min(timeoutMs, 1000),
      // A failover is ridden out within the call's timeout: ioredis tries a call again every `clusterRetryMs` while
      // the cluster is down, a replica is taking over or a node's connection is closed, and each try (a MOVED to the
      // dead master included) spends one redirection. Its default of 16 gave up after about 1.5 s, well inside a
      // failover (about 3 s); two per pause over the whole timeout, and its own 16 for MOVED and ASK, outlast it.
      // The timeout still ends every call (the store's deadline, ioredis' commandTimeout).
      retryDelayOnFailover: clusterRetryMs,
      retryDelayOnClusterDown: clusterRetryMs,
      retryDelayOnTryAgain: clusterRetryMs,
      maxRedirections: 16 + 2 * Math.ceil(timeoutMs / clusterRetryMs),
      ...own,
      redisOptions: {
        autoResendUnfulfilledCommands: false,
        commandTimeout: timeoutMs,
        connectTimeout: timeoutMs,
        ...own.redisOptions,
        ...legacyReplies
      }
    }
    // Whether a node answered with its slots (ioredis' "refresh"): a connect that ends after one did not fail for want
    // of a node; the cluster said it was down (ioredis' ready check read cluster_state:fail).
    let answered = false
    let ready = false
    let masters = ""
    if (tool?.oneShot === true) {
      clusterOptions.clusterRetryStrategy = () => (answered && !ready ? downRetryMs : null)
    }
    const nodes = options.nodes.map((node) => typeof node === "string" ? node.replace(/^redis:\/\//, "") : { ...node })
    const { client, lastError } = yield* owned(() => new Cluster(nodes, clusterOptions), timeout)
    client.on("refresh", () => {
      answered = true
      masters = client.nodes("master").map((node) => `${node.options.host}:${node.options.port}`).join(", ")
    })
    client.once("ready", () => (ready = true))
    const named = nodes.map((node) => typeof node === "string" ? node : `${node.host}:${node.port}`).join(", ")
    yield* connect(client, timeout, `the Redis Cluster at ${named} (none answered with its slots)`, lastError, named, () =>
      answered
        ? `the Redis Cluster at ${named} answered with its slots (masters ${masters}) but reported itself down ` +
          `(CLUSTER INFO: cluster_state:fail, or no answer to it) until it was given up after ${Duration.format(timeout)}` +
          `: a master may be down and a failover under way; try again in a few seconds`
        : undefined)
    const store = yield* makeFromClient(client, {
      timeout,
      shards: options.shards,
      maxLockWaiters: options.maxLockWaiters,
      maxProcessWaiters: options.maxProcessWaiters,
      layout: tool?.layout
    })
    return { store: yield* Keeper.scoped(store), client }
  })

// Redis refused the client itself (credentials, ACL): trying again gives the same answer. Other reply errors during the
// handshake (a SELECT out of range) leave the connection usable and are reported by the checks after it.
const refused = (error: Error): boolean =>
  error.name === "ReplyError" && /^(WRONGPASS|NOAUTH|NOPERM)|invalid password|AUTH/i.test(error.message)

/**
 * The first connect, retried as ioredis retries a lost connection (its `retryStrategy`) until the timeout: a worker
 * started while Redis restarts, or is stalled, connects once Redis answers. An answer that retrying cannot change (a
 * refused password, a denied command: a Redis reply error) fails at once; so does a retry strategy that gives up.
 */
const connect = (
  client: Redis | Cluster,
  timeout: Duration.Duration,
  where: string,
  lastError: () => Error | undefined,
  clusterNodes?: string,
  // What is known to be true when the connect fails, said instead of the generic reason (a cluster that reported down).
  known: () => string | undefined = () => undefined
): Effect.Effect<void, RedisError> => {
  // The error's message only: a reply error to AUTH carries the command, password included.
  const cannotReach = (cause: unknown) =>
    new RedisError({
      operation: "connect",
      reason: `cannot reach ${where}: ${cause instanceof Error ? cause.message : String(cause)}`
    })
  return Effect.callback<void, RedisError>((resume) => {
    let done = false
    const finish = (effect: Effect.Effect<void, RedisError>) => {
      if (done) return
      done = true
      cleanup()
      resume(effect)
    }
    const onReady = () => finish(Effect.void)
    const onError = (error: Error) => {
      if (refused(error)) finish(Effect.fail(cannotReach(error)))
    }
    const onEnd = () => {
      const down = known()
      finish(Effect.fail(
        down === undefined ? cannotReach(lastError() ?? "the connection ended") : new RedisError({ operation: "connect", reason: down })
      ))
    }
    const cleanup = () => {
      client.off("ready", onReady)
      client.off("error", onError)
      client.off("end", onEnd)
    }
    client.on("ready", onReady)
    client.on("error", onError)
    client.on("end", onEnd)
    // A failed first attempt is reported by the error event; ioredis then reconnects by itself.
    client.connect().catch(() => undefined)
    return Effect.sync(cleanup)
  }).pipe(
    Effect.timeoutOrElse({
      duration: timeout,
      orElse: () => {
        const down = known()
        if (down !== undefined) return Effect.fail(new RedisError({ operation: "connect", reason: down }))
        const last = lastError()
        return Effect.fail(
          new RedisError({
            operation: "connect",
            reason: `no connection within ${Duration.format(timeout)}${
              clusterNodes === undefined ? "" : ` to the Redis Cluster at ${clusterNodes}`
            }${last === undefined ? "" : ` (last error: ${last.message})`}`
          })
        )
      }
    })
  )
}

