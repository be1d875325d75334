/**
 * The admin API over `RedisService`: list digests by pattern with cursor paging, show one digest, delete a digest,
 * unlock one jid, delete by pattern (bounded per call, resumable, with a dry run), and stats. Every call is bounded:
 * a page of the index, or one digest.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { Defaults } from "./Defaults.js"
import type { Fetched, LockKey, RedisError } from "./Redis.js"
import { RedisService } from "./Redis.js"

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
 * One digest's two locks, each read whole.
 *
 * @since 0.1.0
 * @category models
 */
export interface Digest {
  readonly digest: string
  readonly queue: Fetched
  readonly run: Fetched
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
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Locks extends Context.Tag("effect-unique-jobs/Locks")<Locks, {
  readonly prefix: string
  /** A page of the index, members matching `pattern` (a Redis glob over lock names; default every one). */
  readonly list: (
    options?: { readonly pattern?: string | undefined; readonly cursor?: string | undefined; readonly count?: number | undefined }
  ) => Effect.Effect<Page<Entry>, RedisError>
  readonly show: (digest: string) => Effect.Effect<Digest, RedisError>
  /** Deletes a digest's two locks whole; answers how many existed. */
  readonly delete: (digest: string) => Effect.Effect<number, RedisError>
  /** Releases one jid's hold on the digest's queue lock and run lock; answers whether either was live. */
  readonly unlock: (digest: string, jid: string) => Effect.Effect<boolean, RedisError>
  /**
   * Deletes one page of the members matching `pattern` (bounded by `count`), or with `dryRun` lists them only.
   * Call again with the answer's cursor until it is "0".
   */
  readonly deleteByPattern: (
    pattern: string,
    options?: { readonly cursor?: string | undefined; readonly count?: number | undefined; readonly dryRun?: boolean | undefined }
  ) => Effect.Effect<Page<string> & { readonly deleted: number }, RedisError>
  /** Counts over the whole index, a page at a time. */
  readonly stats: Effect.Effect<Stats, RedisError>
}>() {}

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

/**
 * The admin API for one prefix (default: the `Defaults` prefix).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: { readonly prefix?: string | undefined } = {}): Effect.Effect<
  Context.Tag.Service<Locks>,
  never,
  RedisService
> =>
  Effect.gen(function*() {
    const redis = yield* RedisService
    const prefix = options.prefix ?? (yield* Defaults).lockPrefix
    const key = (name: string): LockKey => ({ prefix, name })
    const page = (pattern: string, cursor: string, count: number) =>
      Effect.map(redis.scan(prefix, cursor, pattern, count), (scanned) => ({
        cursor: scanned.cursor,
        items: scanned.members.map((member) => entryOf(member.name, member.score))
      }))
    const show = (digest: string) =>
      Effect.map(
        // The two reads go out together (one connection pipelines them): one round trip's wait, not two.
        Effect.all([redis.fetch(key(digest)), redis.fetch(key(`${digest}:RUN`))], { concurrency: 2 }),
        ([queue, run]): Digest => ({ digest, queue, run })
      )
    const stats = Effect.gen(function*() {
      let cursor = "0"
      let indexSize = 0
      let stale = 0
      let oldest: Entry | undefined
      const byPhase = { queue: 0, run: 0 }
      const byType: Record<string, number> = {}
      do {
        const next = yield* page("*", cursor, 500)
        cursor = next.cursor
        // A page's reads go out together: one connection pipelines them, so a walk costs a round trip per page.
        const fetched = yield* Effect.forEach(next.items, (entry) => redis.fetch(key(entry.name)), {
          concurrency: "unbounded"
        })
        for (const [i, entry] of next.items.entries()) {
          indexSize++
          byPhase[entry.phase]++
          if (oldest === undefined || entry.score < oldest.score) oldest = entry
          const type = typeOf(fetched[i]!)
          byType[type] = (byType[type] ?? 0) + 1
          if (ended(fetched[i]!)) stale++
        }
      } while (cursor !== "0")
      return { prefix, indexSize, byPhase, byType, oldest, stale } satisfies Stats
    })
    return Locks.of({
      prefix,
      list: (o) => page(o?.pattern ?? `${prefix}:*`, o?.cursor ?? "0", o?.count ?? 100),
      show,
      delete: (digest) => redis.remove([key(digest), key(`${digest}:RUN`)]),
      unlock: (digest, jid) =>
        Effect.map(
          Effect.all([redis.unlock(key(digest), jid, 0), redis.unlock(key(`${digest}:RUN`), jid, 0)], {
            concurrency: 2
          }),
          ([queue, run]) => queue || run
        ),
      deleteByPattern: (pattern, o) =>
        Effect.flatMap(page(pattern, o?.cursor ?? "0", o?.count ?? 100), (found) => {
          const names = found.items.map((entry) => entry.name)
          return Effect.map(
            o?.dryRun === true ? Effect.succeed(0) : redis.remove(names.map(key)),
            (deleted) => ({ cursor: found.cursor, items: names, deleted })
          )
        }),
      stats
    })
  })

/**
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: { readonly prefix?: string | undefined } = {}): Layer.Layer<Locks, never, RedisService> =>
  Layer.effect(Locks, make(options))
