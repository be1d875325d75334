/**
 * The lock store's shared models: the error, the keys of a lock, the requests and results of the scripts, and the
 * store's shape. `Redis.ts` re-exports them as the public face; the stores (the Lua scripts over ioredis, the
 * in-process one) build on them without importing `Redis.ts` back.
 *
 * @internal
 */
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { LayoutMismatch } from "../Errors.js"
import * as Layout from "./Layout.js"

/**
 * A Redis call failed: connection, script, reply or timeout. Carries the cause; a script's error also names where in
 * `lua/` it was raised (`script`).
 *
 * @since 0.1.0
 * @category errors
 */
export class RedisError extends Schema.TaggedError<RedisError>("effect-unique-jobs/RedisError")("RedisError", {
  operation: Schema.String,
  reason: Schema.String,
  /** Where a script's error was raised: the file under `lua/` and its line (`lua/lib/prelude.lua:21`). */
  script: Schema.optional(Schema.String),
  cause: Schema.optional(Schema.Defect())
}) {
  override get message(): string {
    return `Redis ${this.operation} failed: ${this.reason}${this.script === undefined ? "" : ` (at ${this.script})`}`
  }
}

// Redis answered with an error that passes: a failover's redirection, a cluster or a replica not ready yet, a busy
// or loading server. Any other answer (a script's error, a wrong type, a refused password) comes again on a retry.
const passingReply = /^(CLUSTERDOWN|TRYAGAIN|MOVED|ASK|LOADING|BUSY|MASTERDOWN|READONLY)\b/
// An answer a retry meets again, in the words of a step's error inside a batch (no ReplyError then) or of a reply
// the store could not read.
const refusedReason = /\b(WRONGPASS|NOAUTH|NOPERM|WRONGTYPE)\b|unexpected reply/

/**
 * Whether another try of the call that failed with `error` may get another answer: Redis did not answer (a timeout,
 * a closed or refused connection, a MOVED storm that ran out of redirections: the call may have run, or was not
 * sent), or answered with an error that passes. An answer Redis would give again (a wrong-typed key, a script's
 * error, a refused password), whether the call went alone or in a batch, does not pass.
 *
 * @internal
 */
export const passes = (error: RedisError): boolean => {
  const cause = error.cause
  if (cause instanceof Error && cause.name === "ReplyError") return passingReply.test(cause.message)
  return error.script === undefined && !refusedReason.test(error.reason)
}

/**
 * Which lock a call is about: its name (`<prefix>:<hex>` or `<prefix>:<hex>:RUN`), which is also its member in
 * the `<prefix>:digests` index.
 *
 * @since 0.1.0
 * @category models
 */
export interface LockKey {
  readonly prefix: string
  readonly name: string
}

/**
 * The Redis keys of a lock on one Redis (the spec's names): its holders hash, its prefix's index, and its prefix's
 * fencing counter. On Redis Cluster the store names them with its shard's hash tag (see docs/redis-cluster.md).
 *
 * @since 0.1.0
 * @category keys
 */
export const keysOf: (lock: LockKey) => Layout.Keys = Layout.standalone.keysOf

/**
 * How long a lock's `replaced` set is kept after its last swap (lock_step writes the same: lua/lib/prelude.lua). A job
 * on its way to its queue lands within the queue's own timeout, or once its Redis answers again: an hour covers both.
 *
 * @internal
 */
export const replacedTtlMs = 3_600_000

/**
 * Who asks for a lock and on what terms. Times in milliseconds; 0 means none.
 *
 * @since 0.1.0
 * @category models
 */
export interface HolderRequest {
  readonly jid: string
  readonly limit: number
  /** The entry counts until Redis time + ttl (and the index score is that expiry). */
  readonly ttlMs: number
  /** The entry counts until Redis time + lease unless renewed. */
  readonly leaseMs: number
  /** Compact JSON stored with the entry (`lockInfo`), or `""`. */
  readonly info: string
  /**
   * The job's queue name, stored with a queue lock's entry (`q`) so the reaper asks the queue the job belongs to;
   * undefined or `""`: none (the reaper then never removes the entry as an orphan).
   */
  readonly queue?: string | undefined
  /**
   * false: the hold is re-entrant by jid (a queue lock: a retry of the same jid re-enters it). true: the hold belongs
   * to this acquisition (a run lock): a second live copy of the jid is a conflict, the acquisition gets a fencing
   * token, and only that token releases or renews it.
   */
  readonly fenced: boolean
  /**
   * Log the outcome (taken, reentered, refused with a holder) in the digest's activity log, `<digest>:EVENTS`, in the
   * same script call (`lockEvents`). Default false.
   */
  readonly events?: boolean | undefined
  /**
   * A swap (debounce): take the lock in place of these holders, in the same call, only if each is there as given:
   * live, and with `lockedAt` (when given) as read, so not written again since. Else nothing is written and the answer
   * is a `Conflict` naming the live holders, maybe none. The new entry's `lockedAt` is above theirs. The jids taken the
   * place of are kept an hour in the lock's `replaced` set (`Store.replaced`).
   */
  readonly swap?: ReadonlyArray<{ readonly jid: string; readonly lockedAt?: number | undefined }> | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export type LockResult =
  | {
    readonly _tag: "Acquired"
    readonly reentrant: boolean
    /** The fencing token of a fenced acquisition: above every token handed out before under the prefix; else 0. */
    readonly fence: number
  }
  | { readonly _tag: "Conflict"; readonly holders: ReadonlyArray<string> }

/**
 * @since 0.1.0
 * @category models
 */
export type HandoffResult = LockResult & {
  /** Whether the job still held its queue lock; false means its uniqueness lapsed (TTL, manual delete). */
  readonly queueLockHeld: boolean
}

/**
 * One entry of a lock's holders hash, as stored.
 *
 * @since 0.1.0
 * @category models
 */
export interface Holder {
  readonly jid: string
  readonly lockedAt: number
  readonly expiresAt: number | undefined
  readonly leaseUntil: number | undefined
  /** The fencing token of a run lock's acquisition; 0 for a queue lock. */
  readonly fence: number
  readonly info: unknown
  /** The job's queue, as a queue lock's entry names it (`q`); undefined when it names none. */
  readonly queue?: string | undefined
  /** The raw value when it is not this library's (another library's, the gem's): it counts as gone. */
  readonly foreign?: string | undefined
  /**
   * When an operator revoked this run-lock hold (Redis ms; `Store.remove`): it keeps its place until its holder lets
   * go or its lease passes, and is never renewed.
   */
  readonly revokedAt?: number | undefined
  /**
   * The entry's whole length in bytes when a page read it cut (`HolderPage.bytes`): `info` then holds only the leading
   * fields it could read whole (type, worker, queue; not the arguments). Undefined when read whole.
   */
  readonly truncated?: number | undefined
}

/**
 * One held run lock's lease to move forward, in a batch (`Store.renewAll`).
 *
 * @since 0.1.0
 * @category models
 */
export interface Renewal {
  readonly lock: LockKey
  readonly jid: string
  readonly leaseMs: number
  /** The acquisition's fencing token; 0 renews whichever acquisition holds jid's entry. */
  readonly fence: number
  /** A refused renewal logs `lost` in the digest's activity log, in the same call (`lockEvents`). Default false. */
  readonly events?: boolean | undefined
  /**
   * Its holder was told it lost the hold, and its perform runs on (a Promise that cannot be stopped): the place is kept
   * until the holder lets go, so a hold an operator revoked is renewed too, still marked revoked, and no second copy
   * starts while the first runs. A hold gone otherwise (its lease passed, taken over) is still refused. Default false.
   */
  readonly keep?: boolean | undefined
}

/**
 * What a digest's activity log holds (`lockEvents`): what happened to its locks, newest first.
 *
 * - `taken`, `reentered` (a retry of the jid re-entered its queue lock), `refused` (`holder` names one who held it);
 * - `released` (its holder let go), `missed` (a release found nothing of jid's live);
 * - `lost` (a renewal was refused: the lease had passed, the hold was taken over, deleted or revoked);
 * - `revoked` and `removed` (an admin's call; `who` when it named itself), `reaped` (the reaper removed an ended hold).
 *
 * @since 0.1.0
 * @category models
 */
export interface LockEvent {
  /** Redis time (ms). */
  readonly at: number
  readonly event: string
  readonly jid: string
  readonly phase: "queue" | "run"
  readonly holder?: string | undefined
  readonly who?: string | undefined
  /**
   * Refusals only: how many this entry stands for, when more than one (a refusal like the newest entry, of the same
   * phase naming the same holder, is folded into it: `at` and `jid` are the last one's).
   */
  readonly count?: number | undefined
  /** With `count`: when the first of them was refused (Redis ms). */
  readonly firstAt?: number | undefined
}

/**
 * A digest's activity log's bounds: the most entries it keeps; how long after its last event while either of the
 * digest's locks is held (`ttlMs`), and once neither is (`goneTtlMs`); the bytes of a jid, holder or who kept, past
 * which a text is cut at a character's start and ends with "…" (`textBytes`).
 *
 * @since 0.1.0
 * @category constants
 */
export const eventLog = { keep: 100, ttlMs: 24 * 60 * 60 * 1000, goneTtlMs: 60 * 60 * 1000, textBytes: 128 } as const

/**
 * Which of a lock's holders `Store.fetch` reads: a page of them, bounded whatever the lock holds.
 *
 * @since 0.1.0
 * @category models
 */
export interface HolderPage {
  /** "0" for the first page, else the `cursor` the previous page answered. */
  readonly cursor: string
  /**
   * Holders to read, 1 to 1000 (0: every one, as with no page). Redis' HSCAN takes it as a hint: a page may hold a few
   * more, and a small hash of short entries (a listpack: up to hash-max-listpack-entries of at most 64 bytes) comes
   * whole. Fewer only where the hash ends, or a sparse one that the script's few HSCAN calls (8) did not fill the
   * page from. The memory store answers exactly this many.
   */
  readonly count: number
  /** Entries longer than this many bytes are cut to their first bytes (`Holder.truncated`); 0 reads them whole. */
  readonly bytes: number
}

/**
 * One lock read at one instant (`Store.fetch`): its holders (all, or a page), its key's TTL, its index score, and
 * Redis time when read.
 *
 * @since 0.1.0
 * @category models
 */
export interface Fetched {
  /** Every holder, or a page of them. A holder may show on two pages when the hash changed between them. */
  readonly holders: ReadonlyArray<Holder>
  /** How many entries the holders hash has (this library's or not), however many `holders` holds. */
  readonly size: number
  /** Where the next page of holders starts; "0" once the hash is read to its end (always, for a whole read). */
  readonly cursor: string
  /** The holders key's remaining time in ms; undefined when it has none or is gone. */
  readonly ttlMs: number | undefined
  /** The lock's score in `<prefix>:digests` (its expiry, or when it was taken); undefined when not indexed. */
  readonly indexScore: number | undefined
  /** Redis time (ms) of the read, to judge each holder's expiry and lease by. */
  readonly now: number
}

/**
 * One bounded step of the reaper over `<prefix>:digests`, oldest first (`Store.reap`).
 *
 * @since 0.1.0
 * @category models
 */
export interface ReapRequest {
  readonly prefix: string
  /** The index rank (0: the oldest) this step starts at. */
  readonly start: number
  /** How many index members this step looks at, at most (1 to 1000). */
  readonly batch: number
  /** Holders with no expiry and no lease taken before this Redis time (ms) are reported as orphan candidates; 0: none. */
  readonly orphansBefore: number
  /** Compute the same answer and write no lock data. */
  readonly dryRun: boolean
  /**
   * The runner's lease (as `claim` takes it), kept in the same call: the step runs only while `owner` holds the lease
   * at `key` (or it is free), and renews it for `leaseMs`, so a pass costs one call per step.
   */
  readonly runner?: { readonly key: string; readonly owner: string; readonly leaseMs: number } | undefined
}

/**
 * A holder the reaper may remove once the queue its job belongs to says the job is gone.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReapCandidate {
  readonly lock: string
  readonly jid: string
  readonly lockedAt: number
  /** The queue the entry names; absent when it names none (an entry written by an older version). */
  readonly queue?: string | undefined
}

/**
 * What one reap step did (or, in a dry run, would do).
 *
 * @since 0.1.0
 * @category models
 */
export interface ReapResult {
  /** Index members looked at. */
  readonly scanned: number
  /** The rank the next step starts at; -1 once the index has been walked to its end. */
  readonly next: number
  /** Index members removed: their lock key was gone, or every holder in it had ended. */
  readonly removedMembers: ReadonlyArray<string>
  /** Holders removed because their expiry or lease had passed (or their entry was foreign). */
  readonly removedHolders: ReadonlyArray<{ readonly lock: string; readonly jid: string }>
  /**
   * Live holders with no expiry and no lease taken before `orphansBefore`: the caller asks the queue about them.
   * `queue` is the queue the entry names; undefined for an entry that names none (written by an older version).
   */
  readonly candidates: ReadonlyArray<ReapCandidate>
  /** With a `runner`: another owner holds the lease, and the step did nothing. */
  readonly refused?: true | undefined
}

/**
 * A page of `<prefix>:digests` (`Store.scan`).
 *
 * @since 0.1.0
 * @category models
 */
export interface ScanPage {
  /** "0" once the scan is complete. */
  readonly cursor: string
  readonly members: ReadonlyArray<{ readonly name: string; readonly score: number }>
}

/**
 * What an admin removal did (`Store.remove`), at Redis time `now`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Removal {
  readonly now: number
  /** Locks whose every holder went: their key and index member are gone. */
  readonly deleted: ReadonlyArray<string>
  /**
   * Holders removed at once: held with no lease (a queue lock; `live`), or their expiry or lease had already passed,
   * or the entry was not in this library's shape (not `live`).
   */
  readonly removed: ReadonlyArray<{ readonly lock: string; readonly jid: string; readonly live: boolean }>
  /**
   * Run-lock holders whose lease was live, marked revoked instead: each keeps its place (no second copy can start
   * while it may still run), is told at its next renewal that it lost the lock, and frees the place when it lets go,
   * or at `leaseUntil` if it died.
   */
  readonly revoked: ReadonlyArray<{ readonly lock: string; readonly jid: string; readonly leaseUntil: number }>
  /**
   * Locks left alone: not this library's (the key exists but not in the index, or is not a hash), or, when the call
   * named the holders it expected, holding others by then (`reason` is `holdersChanged`).
   */
  readonly refused: ReadonlyArray<{ readonly lock: string; readonly reason: string }>
}

/**
 * The reason a removal gives a lock whose holders are not the ones the call expected (`Store.remove`'s `expect`).
 *
 * @since 0.1.0
 * @category constants
 */
export const holdersChanged = "its holders changed since they were read: read it again"

/**
 * What a lock store does: one method per script, each a single round trip.
 *
 * @since 0.1.0
 * @category models
 */
export interface Store {
  /** Takes a place in the lock, evicting holders whose expiry or lease has passed. */
  readonly lock: (lock: LockKey, request: HolderRequest) => Effect.Effect<LockResult, RedisError>
  /**
   * Removes jid's entry, only the acquisition `fence` when it is not 0; true when that hold was still live. False
   * when it was gone, another acquisition's, or past its expiry or lease (the lock may have passed to another job).
   * With `signal`, a release of a live hold is published for `lockTimeout`'s waiters (`releases`) in the same call.
   */
  readonly unlock: (
    lock: LockKey,
    jid: string,
    fence?: number,
    events?: boolean,
    signal?: boolean
  ) => Effect.Effect<boolean, RedisError>
  /**
   * Moves jid's lease forward; false when the hold is gone, another acquisition's (`fence`), or already lapsed. With
   * `events` (and in `unlock`): the outcome goes to the digest's activity log in the same call.
   */
  readonly renew: (
    lock: LockKey,
    jid: string,
    leaseMs: number,
    fence?: number,
    events?: boolean
  ) => Effect.Effect<boolean, RedisError>
  /**
   * `renew` for many holds in one round trip (one script call): answers, in order, whether each was renewed. The
   * caller bounds the batch (the lease keeper sends chunks of at most a few hundred).
   */
  readonly renewAll: (renewals: ReadonlyArray<Renewal>) => Effect.Effect<ReadonlyArray<boolean>, RedisError>
  /** Takes `to` for the holder and releases jid's entry in `from`, atomically. */
  readonly handoff: (
    from: LockKey,
    to: LockKey,
    request: HolderRequest,
    options: { readonly keepOnConflict: boolean }
  ) => Effect.Effect<HandoffResult, RedisError>
  /** The entries of a lock's holders hash. */
  readonly holders: (lock: LockKey) => Effect.Effect<ReadonlyArray<Holder>, RedisError>
  /**
   * Whether a debounced enqueue took `jid`'s place in this lock (a swap, `HolderRequest.swap`) within the last hour: its
   * job was superseded. A store without it (an older one of a user's) answers for none.
   */
  readonly replaced?: ((lock: LockKey, jid: string) => Effect.Effect<boolean, RedisError>) | undefined
  /**
   * One lock read in one script call: holders with their metadata (all of them, or the `page` asked for: the admin's
   * reads, bounded whatever the lock holds), their count, the key's TTL, the index score, Redis time.
   */
  readonly fetch: (lock: LockKey, page?: HolderPage) => Effect.Effect<Fetched, RedisError>
  /**
   * One bounded reaper step in one script call: removes index members whose lock key is gone and holders whose
   * expiry or lease has passed (dropping a lock, and its member, once no holder is left), never a live holder.
   */
  readonly reap: (request: ReapRequest) => Effect.Effect<ReapResult, RedisError>
  /**
   * A page of the index (`ZSCAN` with `MATCH pattern`, a glob over lock names; `count` is a hint). Start with cursor
   * "0"; the scan is complete when the answer's cursor is "0" again.
   */
  readonly scan: (prefix: string, cursor: string, pattern: string, count: number) => Effect.Effect<ScanPage, RedisError>
  /**
   * The admin's removal, in one script call: every holder of each lock (only `jid`'s when given) goes, except a run
   * lock's holder whose lease is live, which is revoked (see `Removal`). Only this library's locks: others are
   * refused; with `strict`, one refused lock means nothing is written.
   */
  readonly remove: (
    locks: ReadonlyArray<LockKey>,
    options?: {
      readonly jid?: string | undefined
      readonly strict?: boolean | undefined
      /**
       * For each lock (in `locks`' order), the jids of the holders the caller read (only `jid`'s, when given), or
       * undefined to expect none in particular: a lock whose holders of this library's shape are others by the time
       * of the call is refused (`holdersChanged`), in the same call that removes the rest.
       */
      readonly expect?: ReadonlyArray<ReadonlyArray<string> | undefined> | undefined
      /** Who asked, named in the activity log of each digest that has one (`LockEvent.who`). */
      readonly who?: string | undefined
    }
  ) => Effect.Effect<Removal, RedisError>
  /**
   * The newest `count` (1 to 1000) events of the activity log of `lock`'s digest (both phases share it), newest first;
   * none when it has no log (`lockEvents` off, or 24 hours without an event). An entry not in the log's shape is left
   * out.
   */
  readonly events: (lock: LockKey, count: number) => Effect.Effect<ReadonlyArray<LockEvent>, RedisError>
  /**
   * A lease on `key` for `owner` (one runner at a time): taken when free, renewed when `owner` holds it, refused
   * otherwise; `leaseMs` 0 gives it up (only `owner`'s). Answers whether `owner` holds it after the call.
   */
  readonly claim: (key: string, owner: string, leaseMs: number) => Effect.Effect<boolean, RedisError>
  /**
   * Adds each amount (a whole number, 0 or more) to its field of the hash at `key`, and sets the key's TTL when
   * anything was added, in one script call: a bucket of the per-minute counts `History` keeps.
   */
  readonly tally: (
    key: string,
    amounts: ReadonlyArray<readonly [field: string, amount: number]>,
    ttlMs: number
  ) => Effect.Effect<void, RedisError>
  /** The hashes `tally` wrote, in order of `keys` (an empty record for a key that is gone, or of another type). */
  readonly tallies: (keys: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<Readonly<Record<string, number>>>, RedisError>
  /** Puts `entry` first in the list at `key`, keeps its newest `keep` (1 to 1000) and sets its TTL, in one script call. */
  readonly journal: (key: string, entry: string, keep: number, ttlMs: number) => Effect.Effect<void, RedisError>
  /** The newest `count` entries `journal` kept at `key`, newest first (none when the key is of another type). */
  readonly journaled: (key: string, count: number) => Effect.Effect<ReadonlyArray<string>, RedisError>
  /**
   * Where `prefix`'s keys live for this store, as Redis records it (`<prefix>:layout`, recorded by the first store
   * that uses the prefix): the store's own calls under the prefix check it once, before the first, and fail with a
   * `RedisError` of operation `"layout"` while it differs. Absent on a store with no layout (the memory store).
   */
  readonly layout?: ((prefix: string) => Effect.Effect<PrefixLayout, LayoutMismatch | RedisError>) | undefined
  /**
   * Retires the epoch of `prefix`'s layout record in every shard of that layout (refused, and undone, where a shard's
   * index holds a lock), so a process that read it locks nothing more under the prefix, then deletes the record when
   * it is still the one read: the next lock under the prefix records its own. Answers whether it was deleted. Only
   * for a drained prefix (`Redis.resetLayout` checks first).
   */
  readonly resetLayout?: ((prefix: string) => Effect.Effect<boolean, LayoutMismatch | RedisError>) | undefined
  /**
   * The release signals `lockTimeout` waits on (see `ReleaseSignals`); absent on a store that has none: a job whose
   * run lock is held then goes to its strategy at once, as with no `lockTimeout`.
   */
  readonly releases?: ReleaseSignals | undefined
  /**
   * Waits until no undo of jid's lost lock or handoff is still being tried: a lock step Redis did not answer may have
   * run, and the store releases what it may have taken, trying again while the connection is down. A job put back
   * after such a failure waits for it (`BullMQ.putBack`), so its next start, in any process, never comes before the
   * undo: an undo that landed after it released the hold of that next run. Absent on a store that undoes nothing.
   */
  readonly undone?: ((jid: string) => Effect.Effect<void>) | undefined
}

/**
 * The connection a store opens for `lockTimeout`'s waits (`Store.releases`): one per process, subscribed to the
 * channels of the run locks the process waits for.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReleaseChannel {
  /** Subscribes to `channel`; resolves once Redis has confirmed it (a release after that reaches this process). */
  readonly subscribe: (channel: string) => Promise<void>
  readonly unsubscribe: (channel: string) => Promise<void>
  readonly close: () => Promise<void>
}

/**
 * How a store tells its process that a run lock's places were freed (`lockTimeout`'s wake): the release scripts
 * `PUBLISH` on the channel named as the lock's holders key; `open` makes the connection that hears them, `deliver`
 * called with the channel and the number of places freed.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReleaseSignals {
  readonly channelOf: (lock: LockKey) => string
  readonly open: (deliver: (channel: string, freed: number) => void) => ReleaseChannel
  /**
   * The most jobs of this process that wait for one lock (`perLock`, default 1000) and for any lock of the store
   * (`perProcess`, default 10 000); a job over either goes to its strategy at once.
   */
  readonly waiters?: WaiterCaps | undefined
}

/**
 * How many jobs of one process may wait for run locks (`ReleaseSignals.waiters`, the store options
 * `maxLockWaiters` and `maxProcessWaiters`).
 *
 * @since 0.1.0
 * @category models
 */
export interface WaiterCaps {
  readonly perLock: number
  readonly perProcess: number
}

/**
 * Where a prefix's keys live (`Store.layout`).
 *
 * @since 0.1.0
 * @category models
 */
export interface PrefixLayout {
  /** Redis Cluster's layout: every key of a lock hash-tagged with its shard. */
  readonly cluster: boolean
  /** How many shards the index and the fencing counter are split into (1 on one Redis). */
  readonly shards: number
  /** Whether Redis records it; false: nothing under the prefix yet, and this is what the store would record. */
  readonly recorded: boolean
}
