/**
 * The orphan reaper: walks `<prefix>:digests` oldest first in bounded steps (one script call each) and removes what no
 * live holder needs: index members whose lock key is gone (TTL, lease, manual delete), holders whose own expiry or
 * lease has passed, and — once older than `grace` — holders with no expiry whose job the `JobQueue` says is `"gone"`,
 * asked as a job of the queue the holder's entry names, a step's holders in one call. It never removes a holder whose
 * lease or expiry is live, whose job its queue still knows, or that its queue cannot tell about (`"unknown"`: a queue
 * the `JobQueue` does not serve, an entry that names no queue); a pass whose queue does not answer ends with that
 * `QueueError`, keeping every lock it could not decide. Every option is decoded once, at `make`. One runner at
 * a time across processes: a pass runs only while this runner holds `<prefix>:reaper`, a lease each step renews in
 * its own script call; a runner that dies mid-pass lets another take over once that lease ends.
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { Reaper, Redis } from "effect-unique-jobs"
 *
 * const Live = Reaper.layer({ interval: "1 minute", grace: "10 minutes" }).pipe(Layer.provide(Redis.layerConfig()))
 * ```
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import type * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaGetter from "effect/SchemaGetter"
import * as SchemaIssue from "effect/SchemaIssue"
import type * as Scope from "effect/Scope"
import { Defaults } from "./Defaults.js"
import * as History from "./History.js"
import * as Tracing from "./observability/Tracing.js"
import { JobQueue, QueueError } from "./JobQueue.js"
import * as Metrics from "./Metrics.js"
import { describeValue, durationFrom, formatIssues, type InvalidLockOptions, invalidOptions } from "./options/Decoding.js"
import { PrefixSchema } from "./Options.js"
import type { ReapCandidate, RedisError } from "./Redis.js"
import { RedisService } from "./Redis.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The key prefix whose index is walked. Default: the `Defaults` prefix (`uniquejobs`). */
  readonly prefix?: string | undefined
  /** Time between passes (`layer`): 10 ms to 1 day, whole milliseconds. Default 1 minute. */
  readonly interval?: Duration.Input | undefined
  /** Index members one step (one script call) looks at. Default 100 (under 1 ms of Redis time on a 2-core VM), at most 1000. */
  readonly batch?: number | undefined
  /**
   * How old a holder with no expiry and no lease must be before the reaper asks the queue whether its job still
   * exists: 1 ms to 1000 years. Default 10 minutes. Without a `JobQueue` in context such holders are left alone.
   */
  readonly grace?: Duration.Input | undefined
  /** The runner's lease on `<prefix>:reaper`, renewed by every step: 100 ms to 1 day. Default 30 seconds. */
  readonly lease?: Duration.Input | undefined
  /** Report what a pass would remove, and remove nothing. */
  readonly dryRun?: boolean | undefined
}

/**
 * What one pass did (or, in a dry run, would do).
 *
 * @since 0.1.0
 * @category models
 */
export interface Pass {
  /** false: another runner holds the lease; this pass did nothing. */
  readonly ran: boolean
  /** Script calls made over the index. */
  readonly steps: number
  readonly scanned: number
  readonly members: number
  readonly holders: number
  readonly orphans: number
  readonly dryRun: boolean
}

/**
 * A reaper runner: its passes share one owner id on the runner lease.
 *
 * @since 0.1.0
 * @category models
 */
export interface Runner {
  readonly owner: string
  /**
   * One pass over the whole index, if this runner gets (or holds) the lease; `onStep` sees each step's totals and the
   * orphans the step released (in a dry run: would release), each a holder whose job its queue said is gone.
   */
  readonly pass: (
    onStep?: (sofar: Pass, orphans: ReadonlyArray<ReapCandidate>) => Effect.Effect<void>
  ) => Effect.Effect<Pass, RedisError | QueueError, RedisService>
  /** Gives the lease up (only this runner's). */
  readonly release: Effect.Effect<void, never, RedisService>
}

interface Settings {
  readonly prefix: string
  readonly batch: number
  readonly intervalMs: number
  readonly graceMs: number
  readonly leaseMs: number
  readonly dryRun: boolean
}

const dayMs = 86_400_000

// interval: 0 would run passes back to back; lease: shorter than a step's round trips lets two runners in at once;
// grace: the time between a lock and its job's add, so at least 1 ms.
const Batch = Schema.Unknown.pipe(
  Schema.decodeTo(Schema.Number, {
    decode: SchemaGetter.transformEffect((n: unknown) =>
      typeof n === "number" && Number.isSafeInteger(n) && n >= 1 && n <= 1000
        ? Effect.succeed(n)
        : Effect.fail(
          new SchemaIssue.InvalidValue({
            message: `expected a whole number from 1 to 1000, such as 100; got ${describeValue(n)}`
          })
        )
    ),
    encode: SchemaGetter.transform((n: number): unknown => n)
  })
)

const OptionsSchema = Schema.Struct({
  prefix: Schema.optional(PrefixSchema),
  interval: durationFrom(10, `a duration from 10 ms to 1 day, such as "1 minute"`, dayMs).pipe(
    Schema.withDecodingDefaultType(Effect.sync(() => Duration.minutes(1)))
  ),
  batch: Batch.pipe(Schema.withDecodingDefaultType(Effect.succeed(100))),
  lease: durationFrom(100, `a duration from 100 ms to 1 day, such as "30 seconds"`, dayMs).pipe(
    Schema.withDecodingDefaultType(Effect.sync(() => Duration.seconds(30)))
  ),
  grace: durationFrom(1, `a duration of at least 1 ms, such as "10 minutes"`).pipe(
    Schema.withDecodingDefaultType(Effect.sync(() => Duration.minutes(10)))
  ),
  dryRun: Schema.Boolean.pipe(Schema.withDecodingDefaultType(Effect.succeed(false)))
})

const decodeSettings = Schema.decodeUnknownResult(OptionsSchema, { errors: "all" })

/** The options decoded once, where they are given: each bad field named, with what to write instead. */
const decodeOptions = (options: Options, lockPrefix: string): Result.Result<Settings, InvalidLockOptions> =>
  Result.match(decodeSettings(options), {
    onFailure: (error) => Result.fail(invalidOptions(formatIssues(error))),
    onSuccess: (decoded) =>
      Result.succeed({
        prefix: decoded.prefix ?? lockPrefix,
        batch: decoded.batch,
        intervalMs: Duration.toMillis(decoded.interval),
        graceMs: Duration.toMillis(decoded.grace),
        leaseMs: Duration.toMillis(decoded.lease),
        dryRun: decoded.dryRun
      })
  })

const settingsOf = (options: Options) =>
  Effect.flatMap(Defaults, (defaults) => Effect.fromResult(decodeOptions(options, defaults.lockPrefix)))

// The candidates the queue their job belongs to says are gone, asked in one call. A candidate whose entry names no
// queue (written by an older version) is kept, as is every job the queue cannot tell about ("unknown").
const orphansOf = (
  queue: Context.Service.Shape<typeof JobQueue>,
  candidates: ReadonlyArray<ReapCandidate>
): Effect.Effect<ReadonlyArray<ReapCandidate>, QueueError> => {
  const asked = candidates.filter((c): c is ReapCandidate & { readonly queue: string } => c.queue !== undefined)
  if (asked.length === 0) return Effect.succeed([])
  return Effect.flatMap(queue.exists(asked.map((c) => ({ jid: c.jid, queue: c.queue }))), (answers) =>
    answers.length === asked.length
      ? Effect.succeed(asked.filter((_, i) => answers[i] === "gone"))
      : Effect.fail(
        new QueueError({
          operation: "exists",
          reason: `the queue answered ${answers.length} times for ${asked.length} jobs; no lock was removed`
        })
      ))
}

const annotations = (prefix: string) => ({ package: "effect-unique-jobs", module: "Reaper", prefix })

/**
 * A runner with its own owner id.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Effect.Effect<Runner, InvalidLockOptions> =>
  Effect.map(settingsOf(options), (settings) => {
    const owner = `reaper-${crypto.randomUUID()}`
    const leaseKey = `${settings.prefix}:reaper`
    const claim = (leaseMs: number) => Effect.flatMap(RedisService, (redis) => redis.claim(leaseKey, owner, leaseMs))
    const pass: Runner["pass"] = (onStep) =>
      Tracing.traced("UniqueJobs.reaper.pass", () => ({
        ...Tracing.redisAttributes("reap"),
        "unique_jobs.prefix": settings.prefix,
        "unique_jobs.dry_run": settings.dryRun
      }), () => Effect.gen(function*() {
        const redis = yield* RedisService
        const queue = yield* Effect.serviceOption(JobQueue)
        let sofar: Pass = {
          ran: false,
          steps: 0,
          scanned: 0,
          members: 0,
          holders: 0,
          orphans: 0,
          dryRun: settings.dryRun
        }
        if (!(yield* claim(settings.leaseMs))) return sofar
        sofar = { ...sofar, ran: true }
        const now = yield* Clock.currentTimeMillis
        // Lock times are Redis time; the grace is minutes, far beyond the clocks' usual skew.
        const orphansBefore = Option.isSome(queue) && settings.graceMs > 0 ? Math.max(1, now - settings.graceMs) : 0
        const walked = yield* Effect.result(Effect.gen(function*() {
          let start = 0
          for (;;) {
            const step = yield* redis.reap({
              prefix: settings.prefix,
              start,
              batch: settings.batch,
              orphansBefore,
              dryRun: settings.dryRun,
              // The lease is kept by the step itself: one call per step.
              runner: { key: leaseKey, owner, leaseMs: settings.leaseMs }
            })
            // Another runner took the lease (this one stalled past it): it walks the index now.
            if (step.refused === true) break
            let orphans = 0
            const freed: Array<ReapCandidate> = []
            if (Option.isSome(queue) && step.candidates.length > 0) {
              const orphaned = yield* orphansOf(queue.value, step.candidates)
              for (const candidate of orphaned) {
                // Released only if it is still that holder's entry (a no-horizon queue lock, re-entrant by jid).
                const released = settings.dryRun ||
                  (yield* redis.unlock({ prefix: settings.prefix, name: candidate.lock }, candidate.jid, 0))
                if (released) {
                  orphans++
                  freed.push(candidate)
                }
              }
            }
            sofar = {
              ...sofar,
              steps: sofar.steps + 1,
              scanned: sofar.scanned + step.scanned,
              members: sofar.members + step.removedMembers.length,
              holders: sofar.holders + step.removedHolders.length,
              orphans: sofar.orphans + orphans
            }
            if (!settings.dryRun) {
              yield* Metric.update(Metrics.reaped.member, step.removedMembers.length)
              yield* Metric.update(Metrics.reaped.holder, step.removedHolders.length)
              yield* Metric.update(Metrics.reaped.orphan, orphans)
            }
            if (onStep !== undefined) yield* onStep(sofar, freed)
            if (step.next < 0) break
            // A released orphan may have taken its index member with it: step back as many, so no member is skipped
            // (walking one again is harmless).
            start = settings.dryRun ? step.next : Math.max(start, step.next - orphans)
          }
        }))
        // Every pass that ran is kept for the admin UI, one that stopped short too; keeping it never fails the pass.
        const ended = yield* Clock.currentTimeMillis
        yield* History.recordPass(settings.prefix, {
          at: ended,
          owner,
          tookMs: ended - now,
          ...sofar,
          ...(Result.isFailure(walked) ? { error: walked.failure.message } : {})
        }).pipe(Effect.catch((error) => Effect.logDebug("reaper pass not kept in its journal", error)))
        if (Result.isFailure(walked)) return yield* Effect.fail(walked.failure)
        const removed = sofar.members + sofar.holders + sofar.orphans
        const line = `reaper pass${settings.dryRun ? " (dry run)" : ""}: ${sofar.scanned} index members in ${sofar.steps} ` +
          `steps; ${settings.dryRun ? "would remove" : "removed"} ${sofar.members} members, ${sofar.holders} ended ` +
          `holders, ${sofar.orphans} orphans`
        yield* (removed > 0 ? Effect.logInfo(line) : Effect.logDebug(line)).pipe(
          Effect.annotateLogs(annotations(settings.prefix))
        )
        return sofar
      }))
    return { owner, pass, release: Effect.ignore(claim(0)) }
  })

/**
 * One pass with a runner of its own, released afterwards (for a command line or a scheduled job of yours).
 *
 * @since 0.1.0
 * @category constructors
 */
export const runOnce = (
  options: Options = {}
): Effect.Effect<Pass, InvalidLockOptions | RedisError | QueueError, RedisService> =>
  Effect.flatMap(make(options), (runner) => Effect.ensuring(runner.pass(), runner.release))

/**
 * Runs a pass every `interval` for as long as the layer lives; a failed pass is logged and the next one tried at the
 * next interval. The lease is given up when the layer closes.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<never, InvalidLockOptions, RedisService> =>
  Layer.effectDiscard(
    Effect.gen(function*() {
      const settings = yield* settingsOf(options)
      const runner = yield* make(options)
      const interval = Duration.millis(settings.intervalMs)
      yield* Effect.addFinalizer(() => runner.release)
      yield* runner.pass().pipe(
        Effect.catch((error) =>
          Effect.logWarning("reaper pass failed; trying again at the next interval", error).pipe(
            Effect.annotateLogs({ package: "effect-unique-jobs", module: "Reaper" })
          )
        ),
        Effect.repeat(Schedule.spaced(interval)),
        Effect.forkScoped
      )
    }) as Effect.Effect<void, InvalidLockOptions, RedisService | Scope.Scope>
  )
