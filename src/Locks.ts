/**
 * The admin API over `RedisService`: list digests by pattern with cursor paging, show one digest, delete a digest,
 * unlock one jid, delete by pattern (bounded per call, resumable, with a dry run), and stats. Every call is bounded:
 * a page of the index, or one digest. It acts only on this library's locks (members of the index whose keys are
 * lock hashes), and never lets a second copy of a running job start: a run lock's holder whose lease is live is
 * revoked, not removed (see `Removal`).
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { Defaults } from "./Defaults.js"
import { describeValue, formatIssues, invalidOptions, type InvalidLockOptions, isRecord, PrefixSchema } from "./Options.js"
import type { Fetched, Holder, HolderPage, LockEvent, LockKey, RedisError, Removal } from "./Redis.js"
import { eventLog, holdersChanged, RedisService } from "./Redis.js"
import * as Layout from "./store/Layout.js"
import * as Tracing from "./observability/Tracing.js"

export type {
  /**
   * What `delete`, `unlock` and a page of `deleteByPattern` did: holders `removed` at once, run-lock holders
   * `revoked` (their lease was live: each keeps its place until it lets go, or until `leaseUntil` if it died, and is
   * told at its next renewal, a third of its lease at most, that it lost the lock; a perform that runs on after that,
   * a Promise that ignores its signal, keeps the place, renewed and still revoked, until it returns), and locks
   * `refused`.
   *
   * @since 0.1.0
   * @category models
   */
  Removal
} from "./Redis.js"

/**
 * `delete` or `unlock` was asked to touch a key that is not one of this library's locks (not in the index, or not a
 * lock hash): nothing was changed.
 *
 * @since 0.1.0
 * @category errors
 */
export class NotALock extends Schema.TaggedError<NotALock>("effect-unique-jobs/NotALock")("NotALock", {
  name: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `${this.name}: ${this.reason}; nothing was changed`
  }
}

/**
 * `delete` or `unlock` was given the holders the caller read (`ChangeOptions.expect`), and the lock held others by
 * the time of the call (one came, one went): nothing was changed. Read the lock again, and ask again.
 *
 * @since 0.1.0
 * @category errors
 */
export class HoldersChanged extends Schema.TaggedError<HoldersChanged>("effect-unique-jobs/HoldersChanged")(
  "HoldersChanged",
  { name: Schema.String }
) {
  override get message(): string {
    return `${this.name}: its holders changed since they were read; nothing was changed, read it again`
  }
}

/**
 * An index member: a queue lock (the digest) or a run lock (`<digest>:RUN`).
 *
 * @since 0.1.0
 * @category models
 */
export interface Entry {
  readonly name: string
  readonly digest: string
  readonly phase: "queue" | "run"
  /** Its index score: the expiry (ms) of a lock with a TTL, else when it was taken. */
  readonly score: number
}

/**
 * A page of entries and the cursor of the next one ("0": no more).
 *
 * @since 0.1.0
 * @category models
 */
export interface Page<A> {
  readonly cursor: string
  readonly items: ReadonlyArray<A>
}

/**
 * One digest's two locks, a page of each one's holders: `size` counts them all, `cursor` is where `show`'s next page
 * of that lock starts ("0": none left).
 *
 * @since 0.1.0
 * @category models
 */
export interface Digest {
  readonly digest: string
  readonly queue: Fetched
  readonly run: Fetched
  /**
   * What is at either lock's key but is not this library's: a key of another type, a key not in the index, or a
   * field in another shape (left out of `holders`: it counts as gone). Empty for a lock of ours.
   */
  readonly notOurs: ReadonlyArray<{ readonly lock: string; readonly reason: string }>
  /**
   * The digest's activity log, newest first (at most `eventLog.keep`): what happened to its two locks while a worker
   * with `lockEvents` held them, and what an admin or the reaper did to them then. Empty without it.
   */
  readonly events: ReadonlyArray<LockEvent>
}

/**
 * An index member read for a list (`rows`): its lock's first holders (this library's only; `lock.size` counts them
 * all), the lock type stored with `lockInfo`, and whether the next reaper pass removes it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Row {
  readonly entry: Entry
  /** At most `holders` of its holders, each entry cut at `bytes` (`Holder.truncated`); `size` counts them all. */
  readonly lock: Fetched
  /** By the `type` stored with `lockInfo`; `unknown` for a lock taken without it. */
  readonly type: string
  /**
   * Its key is gone or every holder has ended: what the next reaper pass removes. Judged on a read of every holder:
   * a lock with more holders than one read takes (about `holders`, at least) is not called stale.
   */
  readonly stale: boolean
  /** Why the key is not one of this library's locks (a key of another type, foreign fields); undefined when it is. */
  readonly notOurs: string | undefined
}

/**
 * What the index holds, counted over a full walk of it (`stats`).
 *
 * @since 0.1.0
 * @category models
 */
export interface Stats {
  readonly prefix: string
  readonly indexSize: number
  readonly byPhase: { readonly queue: number; readonly run: number }
  /** By the `type` stored with `lockInfo`; locks taken without it count as `unknown`. */
  readonly byType: Readonly<Record<string, number>>
  /** The oldest index member (lowest score), if any. */
  readonly oldest: Entry | undefined
  /** Members whose lock key is gone or whose holders have all ended: what the next reaper pass removes. */
  readonly stale: number
  /**
   * Set when some of a cluster's shards did not answer (a master down, a failover under way): the counts are those of
   * the shards that did, and leave out every lock of the others. Absent on a whole answer.
   */
  readonly partial?: true | undefined
  /** With `partial`: each shard that did not answer, and why (the error names the node serving it). */
  readonly unanswered?: ReadonlyArray<{ readonly shard: number; readonly reason: string }> | undefined
}

/**
 * Which holders `show` reads of each of a digest's two locks: a page of them, bounded whatever the lock holds.
 *
 * @since 0.1.0
 * @category models
 */
export interface ShowOptions {
  /** Holders per lock, 1 to 1000 (a hint on Redis: a small hash comes whole). Default 100. */
  readonly count?: number | undefined
  /** Where the queue lock's page starts: "0" (default) or the `queue.cursor` of the page before. */
  readonly queueCursor?: string | undefined
  /** Where the run lock's page starts: "0" (default) or the `run.cursor` of the page before. */
  readonly runCursor?: string | undefined
  /** Entries longer than this many bytes are cut (`Holder.truncated`), 256 to 1,048,576. Default 65,536. */
  readonly bytes?: number | undefined
}

/**
 * What `rows` reads of each lock.
 *
 * @since 0.1.0
 * @category models
 */
export interface RowOptions {
  /** Holders kept per lock, 1 to 100. Default 10. */
  readonly holders?: number | undefined
  /** Entries longer than this many bytes are cut (`Holder.truncated`), 256 to 65,536. Default 1,024. */
  readonly bytes?: number | undefined
}

/**
 * Who makes an admin call: named in the activity log of each digest that keeps one (`LockEvent.who`).
 *
 * @since 0.1.0
 * @category models
 */
export interface AdminOptions {
  readonly who?: string | undefined
}

/**
 * A `delete` or `unlock` that acts only on what its caller saw: `expect` names the jids of each lock's holders as read
 * (for `unlock`, the jid itself when it held that lock, else none). When either lock holds others by the time of the
 * call, in the same script call, nothing is changed and it fails with `HoldersChanged`: a confirmation page (the web
 * UI's) never removes or revokes a holder that came after it was shown.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChangeOptions extends AdminOptions {
  readonly expect?: {
    readonly queue: ReadonlyArray<string>
    readonly run: ReadonlyArray<string>
  } | undefined
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Locks extends Context.Service<Locks, {
  readonly prefix: string
  /** A page of the index, members matching `pattern` (a Redis glob over lock names; default every one). */
  readonly list: (
    options?: { readonly pattern?: string | undefined; readonly cursor?: string | undefined; readonly count?: number | undefined }
  ) => Effect.Effect<Page<Entry>, RedisError | InvalidLockOptions>
  /**
   * A digest's queue and run locks, a page of each one's holders (see `ShowOptions`). A bad option fails with
   * `InvalidLockOptions` naming it.
   */
  readonly show: (digest: string, options?: ShowOptions) => Effect.Effect<Digest, RedisError | InvalidLockOptions>
  /**
   * Each entry's lock read once, its first holders only (see `RowOptions`), the reads sent together: one round trip's
   * wait for a page, and bounded Redis work per lock whatever it holds.
   */
  readonly rows: (
    entries: ReadonlyArray<Entry>,
    options?: RowOptions
  ) => Effect.Effect<ReadonlyArray<Row>, RedisError | InvalidLockOptions>
  /**
   * Removes every holder of a digest's two locks (queue and run), but revokes a run lock's holder whose lease is live
   * (see `Removal`). Fails with `NotALock`, changing nothing, when either key exists and is not one of ours; with
   * `expect`, with `HoldersChanged` when the holders are not the ones expected.
   */
  readonly delete: (
    digest: string,
    options?: ChangeOptions
  ) => Effect.Effect<Removal, RedisError | NotALock | HoldersChanged>
  /** `delete` of one jid's hold on the digest's queue lock and run lock. */
  readonly unlock: (
    digest: string,
    jid: string,
    options?: ChangeOptions
  ) => Effect.Effect<Removal, RedisError | NotALock | HoldersChanged>
  /**
   * `delete` of one page of the members matching `pattern` (bounded by `count`), or with `dryRun` lists them only; a
   * member whose key is not one of ours is left alone (`refused`). `deleted` counts the locks that went whole. Call
   * again with the answer's cursor until it is "0". Whatever `count` is, each Redis call stays small: the page is read
   * in ZSCAN calls of at most 200 members and removed in script calls of at most 50 locks.
   */
  readonly deleteByPattern: (
    pattern: string,
    options?: { readonly cursor?: string | undefined; readonly count?: number | undefined; readonly dryRun?: boolean | undefined }
  ) => Effect.Effect<
    Page<string> & {
      readonly deleted: number
      readonly revoked: Removal["revoked"]
      readonly refused: Removal["refused"]
    },
    RedisError | InvalidLockOptions
  >
  /**
   * Counts over the whole index, a page at a time; on a cluster, every shard at once, and an answer from the shards
   * that reply (`partial`, naming the others in `unanswered`) unless none does.
   */
  readonly stats: Effect.Effect<Stats, RedisError>
}>()("effect-unique-jobs/Locks") {}

// The literal start of a glob (up to its first special character).
const literalHead = (pattern: string): string => {
  const special = pattern.search(/[*?[\\]/)
  return special === -1 ? pattern : pattern.slice(0, special)
}

/**
 * Whether a glob can match a lock name of `prefix`: every one starts with `<prefix>:`, so a pattern whose literal
 * start says otherwise matches nothing (a mistyped prefix, a digest without its prefix).
 *
 * @since 0.1.0
 * @category patterns
 */
export const canMatch = (pattern: string, prefix: string): boolean => {
  const head = literalHead(pattern)
  const start = `${prefix}:`
  return head.startsWith(start) || start.startsWith(head)
}

/** The largest page `list` and `deleteByPattern` take. */
const maxPage = 10_000
/** The most ZSCAN calls one page of `list` makes while it holds fewer than it asked for, beyond the calls its size
 * takes at `scanChunk` a call: more than a cluster index's default 24 shards, so a sparse index fills its first page. */
const pageReads = 64
/** The most index members one ZSCAN call is asked for: a large page is read in several short calls, each a bounded
 * piece of Redis's time, so no worker's call waits long behind an operator's page. */
const scanChunk = 200
/** The most locks one removal script call takes (`deleteByPattern`): a page of thousands is removed in short calls. */
const removeChunk = 50
/** How many shards `stats` walks at once: every shard of the default 24, so one shard down costs one call's timeout. */
const statsShards = 32

/** The bounds of the holders' reads, as the options name them. */
const holderBounds = {
  count: { min: 1, max: 1000, fallback: 100 },
  showBytes: { min: 256, max: 1_048_576, fallback: 65_536 },
  holders: { min: 1, max: 100, fallback: 10 },
  rowBytes: { min: 256, max: 65_536, fallback: 1024 }
} as const

// A whole number option within its bounds, else the issue naming it.
const bounded = (
  field: string,
  value: unknown,
  bounds: { readonly min: number; readonly max: number; readonly fallback: number },
  issues: Array<{ readonly field: string; readonly reason: string }>
): number => {
  if (value === undefined) return bounds.fallback
  const within = typeof value === "number" && Number.isSafeInteger(value) && value >= bounds.min && value <= bounds.max
  if (within) return value
  const range = `${bounds.min} to ${bounds.max.toLocaleString("en")}`
  const reason = `expected a whole number from ${range}, such as ${bounds.fallback}; got ${describeValue(value)}`
  issues.push({ field, reason })
  return bounds.fallback
}

// HSCAN's cursor: an unsigned 64-bit number, as a page answered it.
const cursorOf = (
  field: string,
  value: unknown,
  issues: Array<{ readonly field: string; readonly reason: string }>
): string => {
  if (value === undefined) return "0"
  if (typeof value === "string" && /^\d{1,20}$/.test(value) && BigInt(value) <= 18446744073709551615n) return value
  issues.push({ field, reason: `expected "0" or the cursor a page answered, got ${describeValue(value)}` })
  return "0"
}

const entryOf = (name: string, score: number): Entry =>
  name.endsWith(":RUN")
    ? { name, digest: name.slice(0, -4), phase: "run", score }
    : { name, digest: name, phase: "queue", score }

const typeOf = (fetched: Fetched): string => {
  for (const holder of fetched.holders) {
    const info = holder.info as { readonly type?: unknown } | undefined
    if (typeof info === "object" && info !== null && typeof info.type === "string") return info.type
  }
  return "unknown"
}

const ended = (fetched: Fetched): boolean =>
  fetched.holders.every((holder) => {
    if (holder.foreign !== undefined) return true
    const horizon = Math.min(holder.expiresAt ?? Infinity, holder.leaseUntil ?? Infinity)
    return horizon !== Infinity && horizon <= fetched.now
  })

// A field in another shape is no holder (it counts as gone): notOurs names it instead.
const ours = (fetched: Fetched): Fetched =>
  fetched.holders.every((holder) => holder.foreign === undefined)
    ? fetched
    : { ...fetched, holders: fetched.holders.filter((holder) => holder.foreign === undefined) }

const nothingFetched: Fetched = { holders: [], size: 0, cursor: "0", ttlMs: undefined, indexScore: undefined, now: 0 }

// What a fetched lock holds that is not ours: a key of another type, holders of a key not in the index, foreign entries.
const notOurs = (
  lock: string,
  { fetched, wrongType }: { readonly fetched: Fetched; readonly wrongType: boolean }
): Array<{ readonly lock: string; readonly reason: string }> => {
  if (wrongType) return [{ lock, reason: `${lock}:LOCKED is not a hash: not a lock of this library` }]
  if (fetched.holders.length > 0 && fetched.indexScore === undefined) {
    return [{ lock, reason: `${lock}:LOCKED is not in the index: not a lock of this library` }]
  }
  const foreign = fetched.holders.filter((holder) => holder.foreign !== undefined).map((holder) => holder.jid)
  const named = foreign.map((jid) => JSON.stringify(jid)).join(", ")
  return foreign.length === 0 ? [] : [{ lock, reason: foreignReason(named) }]
}

const foreignReason = (fields: string) => `field(s) ${fields} not in this library's entry shape (not holders)`
const foreignFields = /^field\(s\) (.*) not in this library's entry shape \(not holders\)$/s

const decodePrefix = Schema.decodeUnknownResult(Schema.Struct({ prefix: Schema.optional(PrefixSchema) }), {
  errors: "all",
  onExcessProperty: "error"
})

/**
 * The admin API for one prefix (default: the `Defaults` prefix). A prefix a lock could not have (`"a b"`, `"*"`,
 * an empty or trailing-colon one) fails with `InvalidLockOptions` naming `prefix`: it would match no lock, or others'.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: { readonly prefix?: string | undefined } = {}): Effect.Effect<
  Context.Service.Shape<typeof Locks>,
  InvalidLockOptions,
  RedisService
> =>
  Effect.gen(function*() {
    if (!isRecord(options)) {
      const reason = `expected { prefix }, got ${describeValue(options)}`
      return yield* Effect.fail(invalidOptions([{ field: "options", reason }]))
    }
    const checked = decodePrefix(options)
    if (Result.isFailure(checked)) return yield* Effect.fail(invalidOptions(formatIssues(checked.failure)))
    const redis = yield* RedisService
    const prefix = options.prefix ?? (yield* Defaults).lockPrefix
    const key = (name: string): LockKey => ({ prefix, name })
    // ZSCAN's pages vary (a cluster's index is one sorted set per shard, and a shard may hold no match): a page goes
    // on reading until it holds `count` or the walk is over, within `pageReads` calls, so a pattern that matches
    // nothing still costs a bounded amount per page.
    const scanPage = (pattern: string, cursor: string, count: number): Effect.Effect<Page<Entry>, RedisError> => {
      const items: Array<Entry> = []
      const reads = pageReads + Math.ceil(count / scanChunk)
      const more = (at: string, read: number): Effect.Effect<Page<Entry>, RedisError> =>
        Effect.flatMap(redis.scan(prefix, at, pattern, Math.min(scanChunk, count - items.length)), (scanned) => {
          for (const member of scanned.members) items.push(entryOf(member.name, member.score))
          return scanned.cursor === "0" || items.length >= count || read + 1 >= reads
            ? Effect.succeed({ cursor: scanned.cursor, items })
            : more(scanned.cursor, read + 1)
        })
      return more(cursor, 0)
    }
    // A caller's page size goes to ZSCAN's COUNT: checked here, so a bad one is named rather than a syntax error.
    const page = (
      pattern: string,
      cursor: string,
      count: number
    ): Effect.Effect<Page<Entry>, RedisError | InvalidLockOptions> =>
      Number.isSafeInteger(count) && count >= 1 && count <= maxPage
        ? scanPage(pattern, cursor, count)
        : Effect.fail(invalidOptions([{
          field: "count",
          reason: `expected a whole number from 1 to ${maxPage}, such as 100; got ${describeValue(count)}`
        }]))
    // A key of another type fails fetch (WRONGTYPE): for show, that is an answer, not an error.
    const fetchOrType = (name: string, page: HolderPage) =>
      redis.fetch(key(name), page).pipe(
        Effect.map((fetched) => ({ fetched, wrongType: false })),
        Effect.catchIf(
          (error) => error.reason.startsWith("WRONGTYPE"),
          () => Effect.succeed({ fetched: nothingFetched, wrongType: true })
        )
      )
    const show = (digest: string, o: ShowOptions = {}): Effect.Effect<Digest, RedisError | InvalidLockOptions> => {
      const issues: Array<{ readonly field: string; readonly reason: string }> = []
      const count = bounded("count", o.count, holderBounds.count, issues)
      const bytes = bounded("bytes", o.bytes, holderBounds.showBytes, issues)
      const queueCursor = cursorOf("queueCursor", o.queueCursor, issues)
      const runCursor = cursorOf("runCursor", o.runCursor, issues)
      if (issues.length > 0) return Effect.fail(invalidOptions(issues))
      return Effect.map(
        // The two reads go out together (one connection pipelines them): one round trip's wait, not two.
        Effect.all([
          fetchOrType(digest, { cursor: queueCursor, count, bytes }),
          fetchOrType(`${digest}:RUN`, { cursor: runCursor, count, bytes }),
          // The log goes out with them (one round trip still); bounded by its length (eventLog.keep).
          redis.events(key(digest), eventLog.keep)
        ], { concurrency: 3 }),
        ([queue, run, events]): Digest => ({
          digest,
          queue: ours(queue.fetched),
          run: ours(run.fetched),
          notOurs: [notOurs(digest, queue), notOurs(`${digest}:RUN`, run)].flat(),
          events
        })
      )
    }
    // Strict: a key of the two that is not ours fails the call before anything is written.
    // With `expect`, holders other than the ones read refuse the lock in the same call (holdersChanged).
    const removeDigest = (digest: string, jid?: string, o?: ChangeOptions) =>
      Effect.flatMap(
        redis.remove([key(digest), key(`${digest}:RUN`)], {
          jid,
          strict: true,
          who: o?.who,
          expect: o?.expect === undefined ? undefined : [o.expect.queue, o.expect.run]
        }),
        (removal): Effect.Effect<Removal, NotALock | HoldersChanged> => {
          const refused = removal.refused.find((r) => r.reason !== holdersChanged) ?? removal.refused[0]
          return refused === undefined
            ? Effect.succeed(removal)
            : refused.reason === holdersChanged
            ? Effect.fail(new HoldersChanged({ name: refused.lock }))
            : Effect.fail(new NotALock({ name: refused.lock, reason: refused.reason }))
        }
      )
    // A page's reads go out together: one connection pipelines them, so a page costs one round trip's wait.
    // A member whose key is of another type (a user's string) is a row, not a failure: the reaper keeps it.
    // Each lock is read once, a page of `holders` of its holders: the type and the staleness come from what that read.
    const readRows = (entries: ReadonlyArray<Entry>, holders: number, bytes: number) =>
      Effect.forEach(entries, (entry) =>
        Effect.map(fetchOrType(entry.name, { cursor: "0", count: holders, bytes }), (read): Row => {
          const reasons = notOurs(entry.name, read)
          const kept = ours(read.fetched)
          return {
            entry,
            lock: { ...kept, holders: kept.holders.slice(0, holders), cursor: "0" },
            type: typeOf(read.fetched),
            // Every holder read (the walk of the hash ended within this one read) and none live.
            stale: !read.wrongType && read.fetched.cursor === "0" && ended(read.fetched),
            notOurs: reasons.length === 0 ? undefined : reasons.map((r) => r.reason).join("; ")
          }
        }), { concurrency: "unbounded" })
    const rows = (
      entries: ReadonlyArray<Entry>,
      o: RowOptions = {}
    ): Effect.Effect<ReadonlyArray<Row>, RedisError | InvalidLockOptions> => {
      const issues: Array<{ readonly field: string; readonly reason: string }> = []
      const holders = bounded("holders", o.holders, holderBounds.holders, issues)
      const bytes = bounded("bytes", o.bytes, holderBounds.rowBytes, issues)
      return issues.length > 0 ? Effect.fail(invalidOptions(issues)) : readRows(entries, holders, bytes)
    }
    // The counts of a walk of the index from `start` while `within` holds of the next cursor: one ZSCAN at a time,
    // each of one shard (its cursor carries the shard).
    const tally = (start: string, within: (cursor: string) => boolean) =>
      Effect.gen(function*() {
        let cursor = start
        const counts = { indexSize: 0, stale: 0, oldest: undefined as Entry | undefined }
        const byPhase = { queue: 0, run: 0 }
        const byType: Record<string, number> = {}
        do {
          const next = yield* redis.scan(prefix, cursor, "*", scanChunk)
          cursor = next.cursor
          const entries = next.members.map((member) => entryOf(member.name, member.score))
          for (const row of yield* readRows(entries, holderBounds.holders.fallback, holderBounds.rowBytes.fallback)) {
            counts.indexSize++
            byPhase[row.entry.phase]++
            if (counts.oldest === undefined || row.entry.score < counts.oldest.score) counts.oldest = row.entry
            byType[row.type] = (byType[row.type] ?? 0) + 1
            if (row.stale) counts.stale++
          }
        } while (cursor !== "0" && within(cursor))
        return { prefix, ...counts, byPhase, byType } satisfies Stats
      })
    // A sharded index (a cluster's) is walked shard by shard, all at once: a shard whose master is down fails its
    // own walk within the call's timeout, and the answer is the other shards' counts, saying which did not answer.
    const shardedStats = (shards: number) =>
      Effect.flatMap(
        Effect.forEach(Array.from({ length: shards }, (_, shard) => shard), (shard) =>
          Effect.result(
            tally(Layout.scanCursor.encode({ shards }, shard, "0"), (at) =>
              Layout.scanCursor.decode({ shards }, at).shard === shard)
          ), { concurrency: statsShards }),
        (walks): Effect.Effect<Stats, RedisError> => {
          const unanswered = walks.flatMap((walk, shard) =>
            Result.isFailure(walk) ? [{ shard, reason: walk.failure.message, error: walk.failure }] : [])
          if (unanswered.length === shards) return Effect.fail(unanswered[0]!.error)
          const whole = walks.reduce<Stats>((sum, walk) => {
            if (Result.isFailure(walk)) return sum
            const part = walk.success
            const byType = { ...sum.byType }
            for (const [type, n] of Object.entries(part.byType)) byType[type] = (byType[type] ?? 0) + n
            return {
              prefix,
              indexSize: sum.indexSize + part.indexSize,
              byPhase: { queue: sum.byPhase.queue + part.byPhase.queue, run: sum.byPhase.run + part.byPhase.run },
              byType,
              oldest: sum.oldest === undefined || (part.oldest !== undefined && part.oldest.score < sum.oldest.score)
                ? part.oldest ?? sum.oldest
                : sum.oldest,
              stale: sum.stale + part.stale
            }
          }, { prefix, indexSize: 0, byPhase: { queue: 0, run: 0 }, byType: {}, oldest: undefined, stale: 0 })
          return Effect.succeed(
            unanswered.length === 0
              ? whole
              : { ...whole, partial: true, unanswered: unanswered.map(({ reason, shard }) => ({ shard, reason })) }
          )
        }
      )
    const stats = Effect.flatMap(
      redis.layout === undefined
        ? Effect.succeed(1)
        : redis.layout(prefix).pipe(
          Effect.map((layout) => layout.shards),
          // A layout this store is not configured for is walked as one: its scan fails as every call on it does.
          Effect.catchTag("LayoutMismatch", () => Effect.succeed(1))
        ),
      (shards) => shards > 1 ? shardedStats(shards) : tally("0", () => true)
    )
    // Each admin call in its span, under a tracer that records it.
    const admin = <A, E>(operation: string, script: string, attributes: Record<string, unknown>, self: Effect.Effect<A, E>) =>
      Tracing.traced(`UniqueJobs.admin.${operation}`, () => ({
        ...Tracing.redisAttributes(script),
        "unique_jobs.prefix": prefix,
        ...attributes
      }), () => self)
    return Locks.of({
      prefix,
      list: (o) =>
        admin("list", "ZSCAN", { "unique_jobs.pattern": o?.pattern ?? `${prefix}:*` }, page(o?.pattern ?? `${prefix}:*`, o?.cursor ?? "0", o?.count ?? 100)),
      show: (digest, o) => admin("show", "fetch", { "unique_jobs.digest": digest }, show(digest, o)),
      rows: (entries, o) => admin("rows", "fetch", { "unique_jobs.count": entries.length }, rows(entries, o)),
      delete: (digest, o) =>
        admin("delete", "remove", { "unique_jobs.digest": digest }, removeDigest(digest, undefined, o)),
      unlock: (digest, jid, o) =>
        admin(
          "unlock",
          "remove",
          { "unique_jobs.digest": digest, "unique_jobs.jid": jid },
          removeDigest(digest, jid, o)
        ),
      deleteByPattern: (pattern, o) =>
        admin("deleteByPattern", "remove", { "unique_jobs.pattern": pattern }, Effect.flatMap(page(pattern, o?.cursor ?? "0", o?.count ?? 100), (found) => {
          const names = found.items.map((entry) => entry.name)
          if (o?.dryRun === true) return Effect.succeed({ cursor: found.cursor, items: names, deleted: 0, revoked: [], refused: [] })
          // In calls of removeChunk locks, one after the other: each script a short, bounded piece of Redis's time.
          const chunks = Array.from({ length: Math.ceil(names.length / removeChunk) }, (_, i) =>
            names.slice(i * removeChunk, (i + 1) * removeChunk))
          return Effect.map(Effect.forEach(chunks, (chunk) => redis.remove(chunk.map(key))), (removals) => ({
            cursor: found.cursor,
            items: names,
            deleted: removals.reduce((n, removal) => n + removal.deleted.length, 0),
            revoked: removals.flatMap((removal) => removal.revoked),
            refused: removals.flatMap((removal) => removal.refused)
          }))
        })),
      stats
    })
  })

/**
 * Every holder of a digest's two locks, a bounded page per call (`show`), walked until both locks' cursors are "0": for
 * one digest an operator asked about (the CLI's `locks show`), not for a page of many. A holder that HSCAN answers
 * twice (the hash changed during the walk) is kept once; `size` is the last page's count.
 *
 * @since 0.1.0
 * @category combinators
 */
export const showAll = (
  locks: Context.Service.Shape<typeof Locks>,
  digest: string,
  options: { readonly count?: number | undefined; readonly bytes?: number | undefined } = {}
): Effect.Effect<Digest, RedisError | InvalidLockOptions> =>
  Effect.gen(function*() {
    let page = yield* locks.show(digest, options)
    const holders = { queue: new Map<string, Holder>(), run: new Map<string, Holder>() }
    // What is not ours, by lock: the foreign fields each page named, as one list.
    const notOurs = new Map<string, { readonly reasons: Set<string>; readonly fields: Array<string> }>()
    const done = { queue: false, run: false }
    for (;;) {
      for (const phase of ["queue", "run"] as const) {
        if (done[phase]) continue
        for (const holder of page[phase].holders) holders[phase].set(holder.jid, holder)
        done[phase] = page[phase].cursor === "0"
      }
      for (const item of page.notOurs) {
        const kept = notOurs.get(item.lock) ?? { reasons: new Set<string>(), fields: [] }
        notOurs.set(item.lock, kept)
        const fields = foreignFields.exec(item.reason)?.[1]
        if (fields === undefined) kept.reasons.add(item.reason)
        else kept.fields.push(fields)
      }
      if (done.queue && done.run) break
      // A lock walked to its end reads its first page again (left out): bounded, simpler than reading one lock alone.
      page = yield* locks.show(digest, {
        ...options,
        queueCursor: done.queue ? "0" : page.queue.cursor,
        runCursor: done.run ? "0" : page.run.cursor
      })
    }
    return {
      digest,
      queue: { ...page.queue, holders: Array.from(holders.queue.values()), cursor: "0" },
      run: { ...page.run, holders: Array.from(holders.run.values()), cursor: "0" },
      events: page.events,
      notOurs: Array.from(notOurs, ([lock, { fields, reasons }]) => [
        ...Array.from(reasons, (reason) => ({ lock, reason })),
        ...(fields.length === 0 ? [] : [{ lock, reason: foreignReason(fields.join(", ")) }])
      ]).flat()
    }
  })

/**
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options: { readonly prefix?: string | undefined } = {}
): Layer.Layer<Locks, InvalidLockOptions, RedisService> =>
  Layer.effect(Locks)(make(options))
