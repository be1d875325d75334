/**
 * What the admin UI shows of the past, kept in Redis with a TTL so that every process contributes and nothing stays
 * without an end: lock counts per lock type in one-minute buckets over the last hour, with a histogram of how long
 * locks were held (`Metrics.holdTime`) in each, and the reaper's last passes.
 *
 * Counting costs the lock calls nothing: they update the process' own counters (`Metrics`), and `layer` adds what
 * they counted since its last flush to the current minute's bucket, one script call per interval whatever the
 * number of jobs. A process without `layer` takes its locks all the same; its counts are missing from the chart.
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { History, Redis } from "effect-unique-jobs"
 *
 * // In every process that takes locks, beside the store:
 * const Live = History.layer({ interval: "10 seconds" }).pipe(Layer.provideMerge(Redis.layerConfig()))
 * ```
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { Defaults } from "./Defaults.js"
import { durationFrom, formatIssues, type InvalidLockOptions, invalidOptions, withDefault } from "./options/Decoding.js"
import { PrefixSchema } from "./Options.js"
import type { RedisError } from "./Redis.js"
import { RedisService } from "./Redis.js"

/**
 * What the chart counts: locks taken, attempts that found the lock held, locks released, what the reaper removed, and
 * run locks lost while their job ran.
 *
 * @since 0.1.0
 * @category models
 */
export type Event = "acquired" | "conflicts" | "released" | "reaped" | "lost"

/**
 * The events, in the chart's order.
 *
 * @since 0.1.0
 * @category constants
 */
export const events: ReadonlyArray<Event> = ["acquired", "conflicts", "released", "reaped", "lost"]

/**
 * The lock type `reaped` is counted under: the reaper removes what it finds whatever the lock's type.
 *
 * @since 0.1.0
 * @category constants
 */
export const anyType = "*"

/**
 * One minute's counts: `counts[lockType][event]`, with `anyType` for `reaped`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Bucket {
  /** The minute's start (ms since the epoch). */
  readonly start: number
  readonly counts: Readonly<Record<string, Readonly<Partial<Record<Event, number>>>>>
  /**
   * Locks released in the minute by how long they were held: `hold[bound]` counts the holds of at most `bound` ms
   * and more than the bound before it (`holdBounds`; "Infinity" for the last). Empty for a bucket written before
   * hold times were kept.
   */
  readonly hold: Readonly<Record<string, number>>
}

/**
 * The upper bounds (ms) of the hold-time histogram's bins, as `Bucket.hold` names them: those of `Metrics.holdTime`.
 *
 * @since 0.1.0
 * @category constants
 */
export const holdBounds: ReadonlyArray<string> = [
  ...Array.from({ length: 11 }, (_, i) => String(4 ** i)),
  "Infinity"
]

/**
 * One reaper pass as the journal keeps it.
 *
 * @since 0.1.0
 * @category models
 */
export interface PassRecord {
  /** When the pass ended (ms since the epoch). */
  readonly at: number
  /** The runner's owner id. */
  readonly owner: string
  readonly dryRun: boolean
  readonly tookMs: number
  readonly steps: number
  readonly scanned: number
  readonly members: number
  readonly holders: number
  readonly orphans: number
  /** Why the pass stopped short (a queue that did not answer); what it removed before stays counted. */
  readonly error?: string | undefined
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The lock prefix whose buckets are written. Default: the `Defaults` prefix. */
  readonly prefix?: string | undefined
  /** Time between flushes: 100 ms to 1 hour. Default 10 seconds. */
  readonly interval?: Duration.Input | undefined
}

/** A bucket's width. */
const bucketMs = 60_000
/** The buckets the chart reads: the last hour. */
const window = 60
/** A bucket lives for the window past its own minute. */
const bucketTtlMs = (window + 2) * bucketMs
/** The passes kept, and for how long after the newest. */
const passesKept = 50
const passesTtlMs = 7 * 86_400_000

const bucketKey = (prefix: string, start: number) => `${prefix}:metrics:${start}`
const passesKey = (prefix: string) => `${prefix}:reaper:passes`

// The Metrics counters each event sums, over every other label (phase, the fiber's own metric attributes).
const sources: ReadonlyArray<readonly [name: string, event: Event]> = [
  ["unique_jobs_locks_acquired_total", "acquired"],
  ["unique_jobs_lock_conflicts_total", "conflicts"],
  ["unique_jobs_locks_released_total", "released"],
  ["unique_jobs_reaped_total", "reaped"],
  ["unique_jobs_locks_lost_total", "lost"]
]
const eventOf = new Map(sources)
const holdName = "unique_jobs_lock_hold_time_ms"
/** A hold-time bin's field in a bucket: not `<type>|<event>`, so a reader that knows only the counts skips it. */
const holdField = "~hold"

// The process' counters are one registry, so what was flushed of them is one record too: two layers in one process
// (two prefixes) never write the same count twice.
const flushed = new Map<string, number>()

/** The process' totals per `<lock type>|<event>` field, from the Metrics registry. */
const totals = Effect.map(Metric.snapshot, (pairs) => {
  const sums = new Map<string, number>()
  for (const pair of pairs) {
    const event = eventOf.get(pair.id)
    if (event === undefined || pair.type !== "Counter") continue
    const type = event === "reaped" ? anyType : (pair.attributes?.["lock_type"] ?? "unknown")
    const field = `${type}|${event}`
    sums.set(field, (sums.get(field) ?? 0) + Number(pair.state.count))
  }
  // The hold-time histogram's bins, each its own count (the state's are cumulative), over every label; only the
  // known bounds, so a bucket holds at most twelve of them.
  for (const pair of pairs) {
    if (pair.id !== holdName || pair.type !== "Histogram") continue
    let below = 0
    for (const [bound, cumulated] of pair.state.buckets) {
      const field = `${holdField}|${String(bound)}`
      if (holdBounds.includes(String(bound))) sums.set(field, (sums.get(field) ?? 0) + cumulated - below)
      below = cumulated
    }
  }
  return sums
})

/**
 * Adds what the process counted since the last flush to the current minute's bucket, in one script call. A flush
 * that fails keeps its counts for the next one.
 *
 * @since 0.1.0
 * @category recording
 */
export const flush = (prefix: string): Effect.Effect<void, RedisError, RedisService> =>
  Effect.gen(function*() {
    const redis = yield* RedisService
    const sums = yield* totals
    const amounts: Array<readonly [string, number]> = []
    for (const [field, total] of sums) {
      const delta = total - (flushed.get(field) ?? 0)
      if (delta > 0) amounts.push([field, delta])
    }
    if (amounts.length === 0) return
    const now = yield* Clock.currentTimeMillis
    yield* redis.tally(bucketKey(prefix, now - (now % bucketMs)), amounts, bucketTtlMs)
    for (const [field, delta] of amounts) flushed.set(field, (flushed.get(field) ?? 0) + delta)
  })

const decodeOptions = Schema.decodeUnknownResult(
  Schema.Struct({
    prefix: Schema.optional(PrefixSchema),
    interval: withDefault(
      durationFrom(100, `a duration from 100 ms to 1 hour, such as "10 seconds"`, 3_600_000),
      () => Duration.seconds(10)
    )
  }),
  { errors: "all", onExcessProperty: "error" }
)

/**
 * Flushes every `interval` for as long as the layer lives, and once more when it closes. A flush that fails is
 * logged and its counts go with the next.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<never, InvalidLockOptions, RedisService> =>
  Layer.effectDiscard(
    Effect.gen(function*() {
      const decoded = decodeOptions(options)
      if (Result.isFailure(decoded)) return yield* Effect.fail(invalidOptions(formatIssues(decoded.failure)))
      const prefix = decoded.success.prefix ?? (yield* Defaults).lockPrefix
      const once = flush(prefix).pipe(
        Effect.catch((error) =>
          Effect.logWarning("metrics flush failed; its counts go with the next", error).pipe(
            Effect.annotateLogs({ package: "effect-unique-jobs", module: "History", prefix })
          )
        )
      )
      yield* Effect.addFinalizer(() => once)
      yield* once.pipe(
        Effect.repeat(Schedule.spaced(decoded.success.interval)),
        Effect.delay(decoded.success.interval),
        Effect.forkScoped
      )
    })
  )

/**
 * The last `minutes` buckets (1 to 60), oldest first, ending with the current minute; a minute nothing was counted in
 * has empty counts.
 *
 * @since 0.1.0
 * @category reading
 */
export const buckets = (
  prefix: string,
  minutes: number = window
): Effect.Effect<ReadonlyArray<Bucket>, RedisError, RedisService> =>
  Effect.gen(function*() {
    const redis = yield* RedisService
    const now = yield* Clock.currentTimeMillis
    const count = Number.isSafeInteger(minutes) ? Math.min(Math.max(minutes, 1), window) : window
    const current = now - (now % bucketMs)
    const starts = Array.from({ length: count }, (_, i) => current - (count - 1 - i) * bucketMs)
    const read = yield* redis.tallies(starts.map((start) => bucketKey(prefix, start)))
    return starts.map((start, i): Bucket => {
      const counts: Record<string, Partial<Record<Event, number>>> = {}
      const hold: Record<string, number> = {}
      for (const [field, n] of Object.entries(read[i] ?? {})) {
        const bar = field.lastIndexOf("|")
        if (field.slice(0, bar) === holdField) {
          const bound = field.slice(bar + 1)
          if (holdBounds.includes(bound)) hold[bound] = n
          continue
        }
        const event = field.slice(bar + 1) as Event
        if (bar < 1 || !events.includes(event)) continue
        const type = field.slice(0, bar)
        counts[type] = { ...counts[type], [event]: n }
      }
      return { start, counts, hold }
    })
  })

/**
 * Keeps one reaper pass in the journal (the newest 50, for a week after the newest). Called by `Reaper` at the end
 * of every pass that ran.
 *
 * @since 0.1.0
 * @category recording
 */
export const recordPass = (prefix: string, record: PassRecord): Effect.Effect<void, RedisError, RedisService> =>
  Effect.flatMap(RedisService, (redis) =>
    redis.journal(passesKey(prefix), JSON.stringify(record), passesKept, passesTtlMs)
  )

const PassRecordSchema = Schema.Struct({
  at: Schema.Number,
  owner: Schema.String,
  dryRun: Schema.Boolean,
  tookMs: Schema.Number,
  steps: Schema.Number,
  scanned: Schema.Number,
  members: Schema.Number,
  holders: Schema.Number,
  orphans: Schema.Number,
  error: Schema.optional(Schema.String)
})
const decodePass = Schema.decodeUnknownOption(Schema.fromJsonString(PassRecordSchema))

/**
 * The newest `count` passes (1 to 50), newest first; an entry not in the journal's shape is left out.
 *
 * @since 0.1.0
 * @category reading
 */
export const passes = (
  prefix: string,
  count: number = passesKept
): Effect.Effect<ReadonlyArray<PassRecord>, RedisError, RedisService> =>
  Effect.flatMap(RedisService, (redis) =>
    Effect.map(
      redis.journaled(
        passesKey(prefix),
        Number.isSafeInteger(count) ? Math.min(Math.max(count, 1), passesKept) : passesKept
      ),
      (entries) =>
        entries.flatMap((entry) => {
          const decoded = decodePass(entry)
          return decoded._tag === "Some" ? [decoded.value] : []
        })
    )
  )
