/**
 * The admin UI's route table: every page and JSON call with its handler, read from its query or body (each field
 * checked, a 400 naming it), and the OpenAPI description made from the same table.
 *
 * @internal
 */
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as History from "../History.js"
import { JobQueue } from "../JobQueue.js"
import * as Locks from "../Locks.js"
import * as Metrics from "../Metrics.js"
import * as Reaper from "../Reaper.js"
import type { Holder, RedisService } from "../Redis.js"
import * as Pages from "./Pages.js"
import { failureOf, fieldsOf, jsonResponse, mapFailure, pageResponse, Refusal, withHeaders } from "./Responses.js"
import * as Security from "./Security.js"

/** The largest page a request may ask for. @internal */
export const maxPageSize = 1000

/** What a request is, resolved once: where it is mounted, who asks, what it may do. */
export interface RequestContext {
  readonly request: HttpServerRequest.HttpServerRequest
  readonly frame: Pages.Frame
  readonly who: string
  readonly query: URLSearchParams
  readonly locks: Context.Service.Shape<typeof Locks.Locks>
  /** A fresh CSRF cookie to set, when the browser had none. */
  readonly newCsrf: string | undefined
  /** The server's signing key: CSRF tokens, results carried in an address, confirmations. */
  readonly secret: Uint8Array
  /** How old a holder with no expiry must be before a pass asks the queue about it (the reaper's default when unset). */
  readonly reaperGrace: Duration.Input | undefined
}

/**
 * The longest lock name or jid the UI acts on, in characters of its URL encoding: one fits a page's address, the
 * Referer of the next and a form, within Node's 16 KiB of headers and the 64 KiB body. A longer one is not listed.
 *
 * @internal
 */
export const maxNameLength = 4096

const encodedLength = (value: string): number => {
  try {
    return encodeURIComponent(value).length
  } catch {
    // A lone surrogate has no encoding: no address can carry it.
    return Number.POSITIVE_INFINITY
  }
}

// A digest as a lock name of the prefix: the run lock's name (`…:RUN`) shows its digest.
const digestFrom = (value: string | undefined, prefix: string): Result.Result<string, Refusal> => {
  const bad = (reason: string) => Result.fail(new Refusal(400, "Bad digest", reason))
  if (value === undefined || value === "") return bad("give the digest, such as ?digest=" + `${prefix}:…`)
  if (encodedLength(value) > maxNameLength)
    return bad(`a digest of ${value.length} characters is longer than any the UI acts on (${maxNameLength} encoded)`)
  if (/[\u0000-\u001f\u007f]/.test(value)) return bad("a digest has no control characters")
  if (!value.startsWith(`${prefix}:`)) return bad(`a lock's digest under this prefix starts with ${prefix}:`)
  const digest = value.endsWith(":RUN") ? value.slice(0, -4) : value
  return digest.length > prefix.length + 1 ? Result.succeed(digest) : bad("the digest is empty after its prefix")
}

const filtersFrom = (
  query: URLSearchParams,
  prefix: string,
  pageSize: number
): Result.Result<Pages.Filters, Refusal> => {
  const issues: Array<string> = []
  const pattern = query.get("pattern") || `${prefix}:*`
  if (pattern.length > 1024 || /[\u0000-\u001f\u007f]/.test(pattern))
    issues.push("pattern: at most 1024 characters, no control characters")
  else if (!Locks.canMatch(pattern, prefix))
    issues.push(`pattern: ${pattern} matches no lock; lock names start with ${prefix}:`)
  const type = query.get("type") ?? ""
  if (type !== "" && ![...Pages.lockTypes, "unknown"].includes(type)) {
    issues.push(`type: one of ${[...Pages.lockTypes, "unknown"].join(", ")}`)
  }
  const text = (name: string) => {
    const value = query.get(name) ?? ""
    if (value.length > 256) issues.push(`${name}: at most 256 characters`)
    return value
  }
  const queue = text("queue")
  const worker = text("worker")
  const args = query.get("args") ?? ""
  if (args.length > 256 || /[\u0000-\u001f\u007f]/.test(args)) {
    issues.push(`args: part of the arguments' JSON text, at most 256 characters and no control characters (got ${args.length})`)
  }
  const ageText = query.get("age") ?? ""
  const age = ageText === "" ? undefined : /^\d+(\.\d+)?$/.test(ageText) ? Number(ageText) : Number.NaN
  if (age !== undefined && !(Number.isFinite(age) && age >= 0 && age <= 1e7)) {
    issues.push(`age: minutes from 0 to 10000000, got ${JSON.stringify(ageText)}`)
  }
  const cursor = query.get("cursor") || "0"
  // ZSCAN's cursor is an unsigned 64-bit number.
  if (!/^\d{1,20}$/.test(cursor) || BigInt(cursor) > 18446744073709551615n) {
    issues.push(`cursor: the number a page's next link carries, got ${JSON.stringify(cursor)}`)
  }
  const countText = query.get("count") ?? ""
  const count = countText === "" ? pageSize : /^\d{1,5}$/.test(countText) ? Number(countText) : Number.NaN
  if (!Number.isSafeInteger(count) || count < 1 || count > maxPageSize) {
    issues.push(`count: a whole number from 1 to ${maxPageSize}, got ${JSON.stringify(countText)}`)
  }
  const job = query.get("job") ?? ""
  if (job !== "" && !Pages.jobFilters.includes(job)) {
    issues.push(`job: one of ${Pages.jobFilters.join(", ")}, got ${JSON.stringify(job.slice(0, 64))}`)
  }
  const stale = query.get("stale")
  if (stale !== null && stale !== "" && stale !== "1" && stale !== "on" && stale !== "true")
    issues.push("stale: 1 or nothing")
  if (issues.length > 0) return Result.fail(new Refusal(400, "Bad filter", issues.join("; ")))
  return Result.succeed({
    pattern,
    type,
    queue,
    worker,
    args,
    age,
    stale: stale === "1" || stale === "on" || stale === "true",
    job,
    cursor,
    count
  })
}

// Every filter but the arguments (which may find a lock it could not search: counted apart).
// `?refresh=N`: the metrics page reloads itself every N seconds (a meta refresh: the UI runs no script).
const refreshFrom = (query: URLSearchParams): Result.Result<number | undefined, Refusal> => {
  const text = query.get("refresh") ?? ""
  if (text === "" || text === "0") return Result.succeed(undefined)
  const n = /^\d{1,4}$/.test(text) ? Number(text) : Number.NaN
  const { max, min } = Pages.refreshBounds
  return n >= min && n <= max
    ? Result.succeed(n)
    : Result.fail(
      new Refusal(400, "Bad request", `refresh: seconds, a whole number from ${min} to ${max} (or 0 for none), got ${JSON.stringify(text)}`)
    )
}

const matches =
  (filters: Pages.Filters) =>
  (row: Locks.Row): boolean => {
    if (filters.type !== "" && row.type !== filters.type) return false
    if (filters.stale && !row.stale) return false
    if (filters.queue !== "" && !Pages.queueOf(row).includes(filters.queue)) return false
    if (filters.worker !== "" && !Pages.workerOf(row).includes(filters.worker)) return false
    if (filters.age !== undefined) {
      const since = Pages.sinceOf(row)
      if (since === undefined || row.lock.now - since < filters.age * 60_000) return false
    }
    return true
  }

/**
 * The holders' jobs, asked of the UI's `JobQueue` when it has one that describes jobs: one `describe` call for them
 * all (one round trip per queue), none when no holder names a queue. A queue that fails is told, not thrown.
 */
const jobsOf = (holders: ReadonlyArray<Holder>): Effect.Effect<Pages.JobsView> =>
  Effect.flatMap(Effect.serviceOption(JobQueue), (queue): Effect.Effect<Pages.JobsView> => {
    const describe = Option.isSome(queue) ? queue.value.describe : undefined
    if (describe === undefined) return Effect.succeed({ describer: false, details: new Map() })
    const refs = Pages.jobRefsOf(holders)
    if (refs.length === 0) return Effect.succeed({ describer: true, details: new Map() })
    return describe(refs).pipe(
      Effect.map((answers): Pages.JobsView => ({
        describer: true,
        details: new Map(refs.map((ref, i) => [Pages.jobKey(ref), answers[i]]))
      })),
      Effect.catch((error) => Effect.succeed<Pages.JobsView>({ describer: true, details: new Map(), error: error.message }))
    )
  })

/**
 * One page of the index with its rows read and filtered: one ZSCAN and one pipelined read per member, and with a
 * queue that describes jobs one `describe` of the page's holders (the `job` filter and column).
 */
const locksView = (locks: Context.Service.Shape<typeof Locks.Locks>, filters: Pages.Filters) =>
  Effect.gen(function*() {
    const page = yield* locks.list({ pattern: filters.pattern, cursor: filters.cursor, count: filters.count })
    // What the UI could not open or act on (a name too long for an address) is counted, not listed nor read.
    const actionable = page.items.filter((entry) => Result.isSuccess(digestFrom(entry.name, locks.prefix)))
    const rows = (yield* locks.rows(actionable)).filter(matches(filters))
    const searched = filters.args === "" ? undefined : rows.map((row) => Pages.argsMatch(row, filters.args))
    const found = searched === undefined ? rows : rows.filter((_, i) => searched[i] === "match")
    const jobs = yield* jobsOf(found.flatMap((row) => row.lock.holders))
    if (filters.job !== "" && !jobs.describer) {
      return yield* Effect.fail(
        new Refusal(
          400,
          "Bad filter",
          "job: this UI has no queue to ask about jobs; serve it with one in its context (BullMQ.layer), or run " +
            "unique-jobs web --bullmq-queue NAME"
        )
      )
    }
    if (filters.job !== "" && jobs.error !== undefined) {
      return yield* Effect.fail(new Refusal(503, "The queue did not answer", jobs.error))
    }
    return {
      filters,
      rows: filters.job === ""
        ? found
        : found.filter((row) => Pages.jobStatesOf(row, jobs).some((state) => Pages.jobMatches(filters.job, state))),
      scanned: page.items.length,
      next: page.cursor,
      omitted: page.items.length - actionable.length,
      notSearched: searched === undefined ? 0 : searched.filter((s) => s === "cut").length,
      jobs
    } satisfies Pages.LocksView
  })

// A holder's job as the API answers it: its details, or null when the queue was not asked or could not tell.
const jobsJson = (holders: ReadonlyArray<Holder>, jobs: Pages.JobsView) =>
  Pages.jobRefsOf(holders).map((ref) => ({ ...ref, details: jobs.details.get(Pages.jobKey(ref)) ?? null }))

const rowJson = (row: Locks.Row, jobs?: Pages.JobsView) => ({
  name: row.entry.name,
  digest: row.entry.digest,
  phase: row.entry.phase,
  type: row.type,
  holders: row.lock.holders,
  holderCount: row.lock.size,
  ttlMs: row.lock.ttlMs,
  queue: Pages.queueOf(row),
  worker: Pages.workerOf(row),
  args: Pages.argsOf(row),
  since: Pages.sinceOf(row),
  stale: row.stale,
  notOurs: row.notOurs,
  ...(jobs?.describer === true ? { jobs: jobsJson(row.lock.holders, jobs) } : {})
})

export type Handler = (
  context: RequestContext
) => Effect.Effect<HttpServerResponse.HttpServerResponse, Refusal, RedisService>

export interface Route {
  readonly method: "GET" | "POST"
  readonly path: `/${string}`
  readonly api: boolean
  /** The admin action a POST is logged and counted as. */
  readonly action?: string
  readonly summary: string
  readonly parameters?: ReadonlyArray<{
    readonly name: string
    readonly description: string
    readonly required?: boolean
  }>
  readonly handler: Handler
}

export const counted = (action: string, outcome: string) =>
  Metric.update(Metric.withAttributes(Metrics.adminActions, { action, outcome }), 1)

// A result as the lock page gets it back from its address: what the signed value must hold.
const decodeResult = Schema.decodeUnknownOption(
  Schema.Struct({
    action: Schema.Literals(["unlock", "delete"]),
    jid: Schema.optional(Schema.String),
    at: Schema.Number,
    nothing: Schema.Boolean,
    removed: Schema.Number,
    deleted: Schema.Number,
    revoked: Schema.Number,
    until: Schema.optional(Schema.Number),
    locks: Schema.optional(Schema.Number),
    refused: Schema.optional(Schema.Number),
    changed: Schema.optional(Schema.Number)
  })
)
const decodeReport = Schema.decodeUnknownOption(
  Schema.Struct({
    dryRun: Schema.Boolean,
    ran: Schema.Boolean,
    scanned: Schema.Number,
    members: Schema.Number,
    holders: Schema.Number,
    orphans: Schema.Number,
    at: Schema.Number
  })
)

const seeOther = (location: string) => withHeaders(HttpServerResponse.redirect(location, { status: 303 }))

const lockBind = (digest: string) => `lock\0${digest}`
const bulkBind = (prefix: string) => `bulk\0${prefix}`
const reaperBind = (prefix: string) => `reaper\0${prefix}`

// Every holder of both phases as a confirmation page showed them: a confirmation is for exactly these.
const holdersMark = (shown: Locks.Digest, jid?: string): string =>
  JSON.stringify(
    (["queue", "run"] as const)
      .flatMap((phase) => shown[phase].holders.map((h) => [phase, h.jid, h.lockedAt, h.fence, h.revokedAt ?? 0]))
      .filter(([, holder]) => jid === undefined || holder === jid)
      .map((entry) => JSON.stringify(entry))
      .sort()
  )

/** The value a delete's confirmation carries: valid while the digest's holders are the ones it named. @internal */
export const deleteConfirmation = (secret: Uint8Array, shown: Locks.Digest): string =>
  Security.sign(secret, "confirm-delete", `${shown.digest}\0${holdersMark(shown)}`)

/** The value an unlock's confirmation carries: valid while the jid holds what it named. @internal */
export const unlockConfirmation = (secret: Uint8Array, shown: Locks.Digest, jid: string): string =>
  Security.sign(secret, "confirm-unlock", `${shown.digest}\0${jid}\0${holdersMark(shown, jid)}`)

/**
 * The most a bulk delete carries in its form: its digests, URL-encoded, one per line. With the CSRF token and the
 * confirmation it stays within the 64 KiB body a change may send. @internal
 */
export const maxBulkBytes = 60 * 1024

/** The digests a bulk preview or delete reads (or deletes) at once: each call bounded, their waits overlapped. */
const bulkReads = 16

/** The most holders a bulk preview reads over its locks (as the list counted them): a bounded read per request. @internal */
export const maxBulkHolders = 10_000

/**
 * The most digests one bulk delete lists, its preview and its POST alike: a page of the list holds up to `count`
 * index members, and ZSCAN may answer a few more than it was asked for (a bucket's chain comes whole), so the bound is
 * above the largest page, never at it. @internal
 */
export const maxBulkDigests = 2 * maxPageSize

/**
 * The pages of the list a bulk preview reads on from its cursor while a page shows nothing to delete: a sparse filter's
 * next match is found in one request, and a preview stays a bounded read (at most this many pages of `count`).
 */
const bulkReadOn = 10

/**
 * The value a bulk delete's confirmation carries: for the digests its preview listed, in order, the Redis time `at`
 * when its reads began (a holder taken later was never shown, so it is never deleted), and where the walk of the
 * index goes on (`next`). @internal
 */
export const bulkConfirmation = (
  secret: Uint8Array,
  digests: ReadonlyArray<string>,
  at: number,
  next: string
): string => Security.sign(secret, "confirm-bulk", JSON.stringify([digests, at, next]))

const reapConfirmation = (secret: Uint8Array, prefix: string): string => Security.sign(secret, "confirm-reap", prefix)

export const routes = (pageSize: number): ReadonlyArray<Route> => {
  const filterParams = [
    { name: "pattern", description: "a Redis glob over lock names (default <prefix>:*)" },
    { name: "type", description: "a lock type, or unknown (taken without lockInfo)" },
    { name: "queue", description: "part of the queue name" },
    { name: "worker", description: "part of the worker name (stored with lockInfo)" },
    {
      name: "args",
      description: "part of the arguments' JSON text (stored with lockInfo), at most 256 characters; a lock whose " +
        "stored info was cut is not searched, and counted in notSearched"
    },
    { name: "age", description: "minutes: only locks whose oldest holder is at least this old" },
    { name: "stale", description: "1: only what the next reaper pass removes" },
    {
      name: "job",
      description: `only locks a holder's job of which is in this state, asked of the UI's queue (${Pages.jobFilters.join(", ")})`
    },
    { name: "cursor", description: "the cursor of the page (from the previous answer's next)" },
    { name: "count", description: `index members read for the page, 1 to ${maxPageSize}` }
  ]
  const digestParam = [
    { name: "digest", description: "the lock's digest (its name)", required: true },
    { name: "holders", description: "holders read per lock, 1 to 1000 (default 100)" },
    { name: "queueCursor", description: "where the queue lock's holders page starts (the last answer's queue.cursor)" },
    { name: "runCursor", description: "where the run lock's holders page starts (the previous answer's run.cursor)" }
  ]
  const filtersOf = (context: RequestContext) =>
    Effect.fromResult(filtersFrom(context.query, context.frame.prefix, pageSize))
  const viewOf = (context: RequestContext, filters: Pages.Filters) =>
    locksView(context.locks, filters).pipe(Effect.mapError((error) => (error instanceof Refusal ? error : failureOf(error))))
  const listed = (context: RequestContext) => Effect.flatMap(filtersOf(context), (filters) => viewOf(context, filters))
  // A page of each lock's holders: `holders` per lock, from `queueCursor` and `runCursor` (checked by Locks.show).
  const shown = (context: RequestContext, value: string | undefined) =>
    Effect.flatMap(
      Effect.fromResult(digestFrom(value, context.frame.prefix)),
      (digest) => {
        const holders = context.query.get("holders") ?? ""
        if (holders !== "" && !(/^\d{1,4}$/.test(holders) && Number(holders) >= 1 && Number(holders) <= 1000)) {
          const reason = `holders: a whole number from 1 to 1000, got ${JSON.stringify(holders)}`
          return Effect.fail(new Refusal(400, "Bad request", reason))
        }
        // An empty cursor is the first page, as "0" is.
        return mapFailure(context.locks.show(digest, {
          count: holders === "" ? undefined : Number(holders),
          queueCursor: context.query.get("queueCursor") || undefined,
          runCursor: context.query.get("runCursor") || undefined
        }))
      }
    )
  // Every holder of a digest, page by page (each read bounded): a confirmation names all it acts on, and an unlock
  // finds a holder beyond the lock page's first page of them.
  const everyHolder = (context: RequestContext, digest: string) => mapFailure(Locks.showAll(context.locks, digest))
  const shownWhole = (context: RequestContext, value: string | undefined) =>
    Effect.flatMap(
      Effect.fromResult(digestFrom(value, context.frame.prefix)),
      (digest) => everyHolder(context, digest)
    )
  // A change's fields: the digest, and the jid when `jid` (an unlock).
  const target = (context: RequestContext, jid: boolean) =>
    Effect.gen(function*() {
      const fields = yield* fieldsOf(context.request)
      const digest = yield* Effect.fromResult(digestFrom(fields.digest, context.frame.prefix))
      if (jid && (fields.jid === undefined || fields.jid === "" || encodedLength(fields.jid) > maxNameLength)) {
        return yield* Effect.fail(
          new Refusal(400, "Bad jid", `give the jid to unlock (1 to ${maxNameLength} characters, URL-encoded)`)
        )
      }
      return { fields, digest, jid: jid ? fields.jid : undefined }
    })
  // With `expect` (a page's change: the holders it read), a holder that came or went since changes nothing: "changed".
  const act = (
    context: RequestContext,
    digest: string,
    jid: string | undefined,
    expect?: Locks.ChangeOptions["expect"]
  ) =>
    Effect.gen(function*() {
      const action = jid !== undefined ? "unlock" : "delete"
      const options = { who: context.who, expect }
      const removed = yield* mapFailure(
        Effect.catchTag(
          jid !== undefined ? context.locks.unlock(digest, jid, options) : context.locks.delete(digest, options),
          "HoldersChanged",
          () => Effect.succeed("changed" as const)
        )
      )
      if (removed === "changed") {
        yield* counted(action, "changed")
        yield* Effect.logInfo(`admin ${action} asked again: the holders changed after they were read`).pipe(
          Effect.annotateLogs({ who: context.who, digest })
        )
        return removed
      }
      yield* counted(action, "done")
      yield* Effect.logInfo(jid !== undefined ? "admin unlock" : "admin delete").pipe(
        Effect.annotateLogs({
          who: context.who,
          digest,
          ...(jid !== undefined ? { jid } : {}),
          removed: removed.removed.length,
          revoked: removed.revoked.length
        })
      )
      return removed
    })
  // The holders a change read (only jid's, for an unlock): the script compares them in the call that removes them.
  const expectOf = (shown: Locks.Digest, jid?: string): NonNullable<Locks.ChangeOptions["expect"]> => ({
    queue: shown.queue.holders.map((h) => h.jid).filter((holder) => jid === undefined || holder === jid),
    run: shown.run.holders.map((h) => h.jid).filter((holder) => jid === undefined || holder === jid)
  })
  // The API acts on what it is given (no expectation: it is never "changed").
  const removal = (context: RequestContext, jid: boolean) =>
    Effect.flatMap(
      target(context, jid),
      ({ digest, jid }) =>
        Effect.flatMap(act(context, digest, jid), (removed) =>
          removed === "changed" ? Effect.die("unexpected") : Effect.succeed(removed))
    )
  const reaped = (context: RequestContext, dryRun: boolean) =>
    Effect.gen(function*() {
      // With a JobQueue in the UI's context (the app's, or `web --bullmq-queue`) the pass also frees orphans.
      const pass = yield* mapFailure(Reaper.runOnce({
        prefix: context.frame.prefix,
        dryRun,
        ...(context.reaperGrace === undefined ? {} : { grace: context.reaperGrace })
      }))
      yield* counted("reap", "done")
      yield* Effect.logInfo(dryRun ? "admin reap (dry run)" : "admin reap").pipe(
        Effect.annotateLogs({
          who: context.who,
          scanned: pass.scanned,
          members: pass.members,
          holders: pass.holders,
          orphans: pass.orphans
        })
      )
      return pass
    })
  const dryRunOf = (fields: Record<string, string>) => fields.dryRun !== "0" && fields.dryRun !== "false"
  // After a change: 303 to the lock page, with what was done signed into its address (a reload shows it again and
  // repeats nothing).
  const toResult = (context: RequestContext, digest: string, result: Pages.Result) =>
    seeOther(
      `${context.frame.base}/lock?digest=${encodeURIComponent(digest)}&result=${
        Security.seal(context.secret, lockBind(digest), result)
      }`
    )
  const resultOf = (
    action: Pages.Result["action"],
    jid: string | undefined,
    at: number,
    removal?: Locks.Removal
  ): Pages.Result => ({
    action,
    // A long jid stays out of the address: the message then says "a holder".
    ...(jid !== undefined && jid.length <= 256 ? { jid } : {}),
    at,
    nothing: removal === undefined,
    removed: removal?.removed.length ?? 0,
    deleted: removal?.deleted.length ?? 0,
    revoked: removal?.revoked.length ?? 0,
    ...(removal !== undefined && removal.revoked.length > 0
      ? { until: Math.max(...removal.revoked.map((r) => r.leaseUntil)) }
      : {})
  })
  const nothingFound = (context: RequestContext, digest: string, jid: string | undefined, at: number) =>
    Effect.as(
      Effect.andThen(
        counted(jid !== undefined ? "unlock" : "delete", "nothing"),
        Effect.logInfo(jid !== undefined ? "admin unlock found nothing" : "admin delete found nothing").pipe(
          Effect.annotateLogs({ who: context.who, digest })
        )
      ),
      toResult(context, digest, resultOf(jid !== undefined ? "unlock" : "delete", jid, at))
    )
  const confirmUrl = (context: RequestContext, digest: string, jid: string | undefined, changed: boolean) =>
    `${context.frame.base}/lock/${jid === undefined ? "delete" : "unlock"}/confirm?digest=${
      encodeURIComponent(digest)
    }${jid === undefined ? "" : `&jid=${encodeURIComponent(jid)}`}${changed ? "&changed=1" : ""}`
  // An unlock from a page: a running holder (revoked, not removed) is confirmed on a page of its own first.
  const unlockFromPage: Handler = (context) =>
    Effect.gen(function*() {
      const { digest, fields, jid } = yield* target(context, true)
      const shown = yield* everyHolder(context, digest)
      if (![...shown.queue.holders, ...shown.run.holders].some((h) => h.jid === jid)) {
        return yield* nothingFound(context, digest, jid, shown.queue.now)
      }
      const running = shown.run.holders.some((h) => h.jid === jid && Pages.isRunning(h, shown.run.now))
      if (running && !Security.same(fields.confirm ?? "", unlockConfirmation(context.secret, shown, jid!))) {
        return seeOther(confirmUrl(context, digest, jid, fields.confirm !== undefined))
      }
      const removed = yield* act(context, digest, jid, expectOf(shown, jid))
      return removed === "changed"
        ? seeOther(confirmUrl(context, digest, jid, true))
        : toResult(context, digest, resultOf("unlock", jid, removed.now, removed))
    })
  // A delete from a page: only with the confirmation of the holders it removes, as its page named them.
  const deleteFromPage: Handler = (context) =>
    Effect.gen(function*() {
      const { digest, fields } = yield* target(context, false)
      const shown = yield* everyHolder(context, digest)
      if (shown.queue.holders.length === 0 && shown.run.holders.length === 0) {
        return yield* nothingFound(context, digest, undefined, shown.queue.now)
      }
      if (!Security.same(fields.confirm ?? "", deleteConfirmation(context.secret, shown))) {
        return seeOther(confirmUrl(context, digest, undefined, fields.confirm !== undefined))
      }
      const removed = yield* act(context, digest, undefined, expectOf(shown))
      return removed === "changed"
        ? seeOther(confirmUrl(context, digest, undefined, true))
        : toResult(context, digest, resultOf("delete", undefined, removed.now, removed))
    })
  // A reap from the page: a dry run at once, a pass for real only confirmed; either way 303 to the report.
  const reapFromPage: Handler = (context) =>
    Effect.gen(function*() {
      const fields = yield* fieldsOf(context.request)
      const dryRun = dryRunOf(fields)
      if (!dryRun && !Security.same(fields.confirm ?? "", reapConfirmation(context.secret, context.frame.prefix))) {
        return seeOther(`${context.frame.base}/reaper/confirm`)
      }
      const pass = yield* reaped(context, dryRun)
      const report = {
        dryRun: pass.dryRun,
        ran: pass.ran,
        scanned: pass.scanned,
        members: pass.members,
        holders: pass.holders,
        orphans: pass.orphans,
        at: Date.now()
      }
      return seeOther(
        `${context.frame.base}/reaper?result=${
          Security.seal(context.secret, reaperBind(context.frame.prefix), report)
        }`
      )
    })
  // A bulk delete's digests, as its form carried them: one per line (a digest has no control character), each a digest of this prefix, none twice.
  const bulkTargets = (context: RequestContext, value: string | undefined) => {
    const bad = (reason: string) => Effect.fail(new Refusal(400, "Bad digests", reason))
    if (value === undefined || value === "") return bad("give the digests to delete, one per line, as the preview listed them")
    // A browser sends a form's line breaks as CRLF.
    const lines = value.split(/\r?\n/)
    if (lines.length > maxBulkDigests) {
      return bad(`at most ${maxBulkDigests} digests, what one preview lists; got ${lines.length}`)
    }
    const digests: Array<string> = []
    for (const line of lines) {
      const checked = digestFrom(line, context.frame.prefix)
      if (Result.isFailure(checked)) return Effect.fail(checked.failure)
      digests.push(checked.success)
    }
    return new Set(digests).size === digests.length ? Effect.succeed(digests) : bad("a digest is listed twice")
  }
  // Every holder of each digest, a few digests read at once (each read bounded, as a lock's own confirmation reads).
  const everyHolderOf = (context: RequestContext, digests: ReadonlyArray<string>) =>
    Effect.forEach(digests, (digest) => everyHolder(context, digest), { concurrency: bulkReads })
  // A bulk delete's preview: the page of the list at its cursor, read again with its bounded work (or, while a page
  // shows nothing to delete, the next ones, up to bulkReadOn pages), and every holder of each digest on it. A lock that
  // is not ours is left alone (a delete would refuse it). `at` is Redis's time before any of the holders were read.
  const bulkPreview = (context: RequestContext) =>
    Effect.gen(function*() {
      let filters = yield* filtersOf(context)
      let view = yield* viewOf(context, filters)
      let passed = 0
      for (let pages = 1; Pages.bulkDigests(view.rows).length === 0 && view.next !== "0" && pages < bulkReadOn; pages++) {
        passed += view.scanned
        filters = { ...filters, cursor: view.next }
        view = yield* viewOf(context, filters)
      }
      const digests = Pages.bulkDigests(view.rows)
      const holders = view.rows.reduce((n, row) => n + row.lock.size, 0)
      const bytes = digests.reduce((n, digest) => n + encodedLength(digest) + 3, 0)
      if (digests.length > maxBulkDigests || holders > maxBulkHolders || bytes > maxBulkBytes) {
        const reason = `this page's locks are ${digests.length} digest(s) with ${holders} holder(s) and ${bytes} bytes ` +
          `of names; one bulk delete takes at most ${maxBulkDigests} digests, ${maxBulkHolders} holders and ` +
          `${maxBulkBytes} bytes: lower "per page" or narrow the filter`
        return yield* Effect.fail(new Refusal(400, "Too much for one bulk delete", reason))
      }
      // The rows were read before every holder is: the earliest of their times comes before any holder read.
      const at = Math.min(...view.rows.map((row) => row.lock.now).filter((now) => now > 0))
      const read = yield* everyHolderOf(context, digests)
      return {
        filters,
        next: view.next,
        passed,
        at: Number.isFinite(at) ? at : 0,
        shown: read.filter((digest) => digest.notOurs.length === 0),
        leftAlone: [
          ...view.rows.flatMap((row) => row.notOurs === undefined ? [] : [{ lock: row.entry.name, reason: row.notOurs }]),
          ...read.flatMap((digest) => digest.notOurs)
        ]
      } satisfies Pages.BulkPreview
    })
  // What a bulk delete does to one digest it listed: with a holder taken after the preview's reads began (one the
  // operator never saw), nothing; else delete it with the holders just read, in the call that compares them (one that
  // comes or goes in between leaves it whole too). Running holders are revoked, as one delete does.
  const bulkOne = (context: RequestContext, read: Locks.Digest, at: number) => {
    const newcomer = [...read.queue.holders, ...read.run.holders].some((holder) => holder.lockedAt > at)
    return (newcomer
      ? Effect.succeed({ digest: read.digest, changed: true as const })
      : context.locks.delete(read.digest, { who: context.who, expect: expectOf(read) }).pipe(
        Effect.map((removal) => ({ digest: read.digest, removal })),
        // Not ours by now (a key of another type since the preview): left alone, as a delete leaves it.
        Effect.catchTag("NotALock", (error) => Effect.succeed({ digest: read.digest, refused: error.reason })),
        Effect.catchTag("HoldersChanged", () => Effect.succeed({ digest: read.digest, changed: true as const })),
        mapFailure
      )).pipe(
        Effect.tap((outcome) =>
          Effect.logInfo("admin bulk delete").pipe(
            Effect.annotateLogs({
              who: context.who,
              digest: read.digest,
              ...("removal" in outcome
                ? { removed: outcome.removal.removed.length, revoked: outcome.removal.revoked.length }
                : "changed" in outcome
                ? { changed: true }
                : { refused: outcome.refused })
            })
          )
        )
      )
  }
  // A bulk delete from its preview: only with the confirmation of the digests it listed and the time it read them
  // (else nothing, and the preview again); then each digest as bulkOne says, logged with who. A page with more of the
  // index after it goes on to the preview of the next page, with the result signed into its address; the last goes to
  // the list. A second submit finds those digests gone and does nothing.
  const bulkDelete: Handler = (context) =>
    Effect.gen(function*() {
      const filters = yield* filtersOf(context)
      const query = Pages.queryOf(filters, filters.cursor)
      const fields = yield* fieldsOf(context.request)
      const digests = yield* bulkTargets(context, fields.digests)
      const at = /^\d{1,16}$/.test(fields.at ?? "") ? Number(fields.at) : undefined
      const next = /^\d{1,20}$/.test(fields.next ?? "") ? fields.next! : undefined
      if (
        at === undefined || next === undefined ||
        !Security.same(fields.confirm ?? "", bulkConfirmation(context.secret, digests, at, next))
      ) {
        yield* Effect.logInfo("admin bulk delete asked again: its confirmation is not for these digests").pipe(
          Effect.annotateLogs({ who: context.who, locks: digests.length })
        )
        return seeOther(
          `${context.frame.base}/locks/bulk/confirm?${query}${fields.confirm === undefined ? "" : "&changed=1"}`
        )
      }
      const reads = yield* everyHolderOf(context, digests)
      const outcomes = yield* Effect.forEach(reads, (read) => bulkOne(context, read, at), { concurrency: bulkReads })
      const removals = outcomes.flatMap((outcome) => "removal" in outcome ? [outcome.removal] : [])
      const merged: Locks.Removal = {
        now: Math.max(0, ...removals.map((removal) => removal.now)),
        deleted: removals.flatMap((removal) => removal.deleted),
        removed: removals.flatMap((removal) => removal.removed),
        revoked: removals.flatMap((removal) => removal.revoked),
        refused: removals.flatMap((removal) => removal.refused)
      }
      const refused = outcomes.filter((outcome) => "refused" in outcome).length
      const changed = outcomes.filter((outcome) => "changed" in outcome).length
      // No digest held or indexed any more, nothing left alone: a second submit of a form done already.
      const acted = refused + changed > 0 || reads.some((read) =>
        read.queue.holders.length + read.run.holders.length > 0 ||
        read.queue.indexScore !== undefined || read.run.indexScore !== undefined
      )
      const result = {
        ...resultOf("delete", undefined, removals.length === 0 ? Date.now() : merged.now, acted ? merged : undefined),
        locks: removals.length,
        refused,
        changed
      }
      yield* counted("bulk-delete", acted ? "done" : "nothing")
      yield* Effect.logInfo(acted ? "admin bulk delete done" : "admin bulk delete found nothing").pipe(
        Effect.annotateLogs({
          who: context.who,
          locks: result.locks,
          refused: result.refused,
          changed: result.changed,
          removed: result.removed,
          revoked: result.revoked
        })
      )
      const sealed = Security.seal(context.secret, bulkBind(context.frame.prefix), result)
      return seeOther(
        next === "0"
          ? `${context.frame.base}/locks?${Pages.queryOf(filters, "0")}&result=${sealed}`
          : `${context.frame.base}/locks/bulk/confirm?${Pages.queryOf(filters, next)}&result=${sealed}`
      )
    })
  // A change's result, from the address of the page it redirected to (signed for that page), in words.
  const resultIn = (context: RequestContext, bind: string) =>
    Option.getOrUndefined(
      Option.map(
        Option.flatMap(
          Option.fromNullishOr(Security.unseal(context.secret, bind, context.query.get("result"))),
          decodeResult
        ),
        Pages.resultMessage
      )
    )
  const reportOf = (context: RequestContext) =>
    Option.flatMap(
      Option.fromNullishOr(
        Security.unseal(context.secret, reaperBind(context.frame.prefix), context.query.get("result"))
      ),
      decodeReport
    )
  const locksPage: Handler = (context) =>
    Effect.map(listed(context), (view) =>
      pageResponse(Pages.locksPage(context.frame, view, resultIn(context, bulkBind(context.frame.prefix)))))
  const passes = (context: RequestContext) => mapFailure(History.passes(context.frame.prefix))
  const buckets = (context: RequestContext) => mapFailure(History.buckets(context.frame.prefix))
  return [
    {
      method: "GET",
      path: "/",
      api: false,
      summary: "the locks page",
      handler: locksPage
    },
    {
      method: "GET",
      path: "/locks",
      api: false,
      summary: "the locks page",
      handler: locksPage
    },
    {
      method: "GET",
      path: "/lock",
      api: false,
      summary: "one lock's page",
      handler: (context) =>
        Effect.flatMap(shown(context, context.query.get("digest") ?? undefined), (digest) =>
          Effect.map(jobsOf([...digest.queue.holders, ...digest.run.holders]), (jobs) =>
            pageResponse(Pages.lockPage(context.frame, digest, resultIn(context, lockBind(digest.digest)), jobs))))
    },
    {
      method: "GET",
      path: "/lock/delete/confirm",
      api: false,
      summary: "what deleting a digest removes and revokes, to confirm",
      handler: (context) =>
        Effect.map(shownWhole(context, context.query.get("digest") ?? undefined), (digest) =>
          pageResponse(
            Pages.confirmDeletePage(
              context.frame,
              digest,
              deleteConfirmation(context.secret, digest),
              context.query.get("changed") === "1"
            )
          )
        )
    },
    {
      method: "GET",
      path: "/locks/bulk/confirm",
      api: false,
      summary: "what deleting every digest a page of the list shows removes and revokes, to confirm",
      handler: (context) =>
        Effect.map(bulkPreview(context), (preview) =>
          pageResponse(
            Pages.confirmBulkPage(
              context.frame,
              preview,
              bulkConfirmation(context.secret, preview.shown.map((shown) => shown.digest), preview.at, preview.next),
              context.query.get("changed") === "1",
              resultIn(context, bulkBind(context.frame.prefix))
            )
          ))
    },
    {
      method: "POST",
      path: "/locks/bulk/delete",
      api: false,
      action: "bulk-delete",
      summary: "delete the digests a bulk preview listed, once confirmed, then 303 to the list",
      handler: bulkDelete
    },
    {
      method: "GET",
      path: "/lock/unlock/confirm",
      api: false,
      summary: "what unlocking a running holder does, to confirm",
      handler: (context) =>
        Effect.flatMap(shownWhole(context, context.query.get("digest") ?? undefined), (digest) => {
          const jid = context.query.get("jid") ?? ""
          return jid === "" || encodedLength(jid) > maxNameLength
            ? Effect.fail(new Refusal(400, "Bad jid", `give the jid to unlock (1 to ${maxNameLength} characters)`))
            : Effect.succeed(
              pageResponse(
                Pages.confirmUnlockPage(
                  context.frame,
                  digest,
                  jid,
                  unlockConfirmation(context.secret, digest, jid),
                  context.query.get("changed") === "1"
                )
              )
            )
        })
    },
    {
      method: "POST",
      path: "/lock/unlock",
      api: false,
      action: "unlock",
      summary: "unlock one jid (a running one once confirmed), then 303 to the lock page",
      handler: unlockFromPage
    },
    {
      method: "POST",
      path: "/lock/delete",
      api: false,
      action: "delete",
      summary: "delete a digest once confirmed, then 303 to the lock page",
      handler: deleteFromPage
    },
    {
      method: "GET",
      path: "/reaper",
      api: false,
      summary: "the reaper page",
      handler: (context) =>
        Effect.map(Effect.zip(passes(context), Effect.serviceOption(JobQueue)), ([kept, queue]) => {
          const asksQueue = Option.isSome(queue)
          const report = Option.getOrUndefined(reportOf(context))
          const result = context.query.get("result")
          const shown = report === undefined || result === null ? undefined : { report, result }
          return pageResponse(Pages.reaperPage(context.frame, kept, shown, asksQueue))
        })
    },
    {
      method: "GET",
      path: "/reaper/confirm",
      api: false,
      summary: "what a reaper pass for real removes, to confirm",
      handler: (context) =>
        Effect.succeed(
          pageResponse(
            Pages.confirmReapPage(
              context.frame,
              Option.getOrUndefined(reportOf(context)),
              reapConfirmation(context.secret, context.frame.prefix)
            )
          )
        )
    },
    {
      method: "POST",
      path: "/reaper",
      api: false,
      action: "reap",
      summary: "run a reaper pass (for real once confirmed), then 303 to its report",
      handler: reapFromPage
    },
    {
      method: "GET",
      path: "/metrics",
      api: false,
      summary: "the metrics page",
      handler: (context) =>
        Effect.flatMap(
          Effect.fromResult(refreshFrom(context.query)),
          (refresh) =>
            Effect.map(buckets(context), (read) =>
              pageResponse(Pages.metricsPage(context.frame, read, History.events, refresh))
            )
        )
    },
    {
      method: "GET",
      path: "/api/locks",
      api: true,
      summary: "a page of locks, filtered",
      parameters: filterParams,
      handler: (context) =>
        Effect.map(listed(context), (view) =>
          jsonResponse({
            next: view.next,
            scanned: view.scanned,
            omitted: view.omitted,
            notSearched: view.notSearched,
            items: view.rows.map((row) => rowJson(row, view.jobs))
          })
        )
    },
    {
      method: "GET",
      path: "/api/lock",
      api: true,
      summary: "one digest's queue and run locks, and its holders' jobs when the UI has a queue that describes them",
      parameters: digestParam,
      handler: (context) =>
        Effect.flatMap(shown(context, context.query.get("digest") ?? undefined), (digest) => {
          const holders = [...digest.queue.holders, ...digest.run.holders]
          return Effect.map(jobsOf(holders), (jobs) =>
            jsonResponse(
              jobs.describer
                ? { ...digest, jobs: jobsJson(holders, jobs), ...(jobs.error === undefined ? {} : { jobsError: jobs.error }) }
                : digest
            ))
        })
    },
    {
      method: "POST",
      path: "/api/lock/unlock",
      api: true,
      action: "unlock",
      summary: "unlock one jid of a digest (body: digest, jid)",
      handler: (context) => Effect.map(removal(context, true), jsonResponse)
    },
    {
      method: "POST",
      path: "/api/lock/delete",
      api: true,
      action: "delete",
      summary: "delete a digest (body: digest)",
      handler: (context) => Effect.map(removal(context, false), jsonResponse)
    },
    {
      method: "GET",
      path: "/api/reaper",
      api: true,
      summary: "the last reaper passes",
      handler: (context) => Effect.map(passes(context), (kept) => jsonResponse({ passes: kept }))
    },
    {
      method: "POST",
      path: "/api/reaper",
      api: true,
      action: "reap",
      summary: "run a reaper pass (body: dryRun, default true)",
      handler: (context) =>
        Effect.flatMap(fieldsOf(context.request), (fields) =>
          Effect.map(reaped(context, dryRunOf(fields)), (pass) => jsonResponse(pass))
        )
    },
    {
      method: "GET",
      path: "/api/metrics",
      api: true,
      summary: "the last hour's counts per lock type, per minute",
      handler: (context) =>
        Effect.map(buckets(context), (read) => jsonResponse({ events: History.events, buckets: read }))
    },
    {
      method: "GET",
      path: "/api/session",
      api: true,
      summary: "what this request may do, and the CSRF token a change carries (x-csrf-token)",
      handler: (context) =>
        Effect.succeed(
          jsonResponse({ canChange: context.frame.canChange, csrf: context.frame.csrf, prefix: context.frame.prefix })
        )
    }
  ]
}

/** The JSON API as OpenAPI 3.1, from the same route table the router serves. */
export const openApiOf = (table: ReadonlyArray<Route>) => {
  const paths: Record<string, Record<string, unknown>> = {}
  for (const route of table.filter((r) => r.api)) {
    paths[route.path] = {
      ...paths[route.path],
      [route.method.toLowerCase()]: {
        summary: route.summary,
        parameters: (route.parameters ?? []).map((p) => ({
          name: p.name,
          in: "query",
          required: p.required === true,
          description: p.description,
          schema: { type: "string" }
        })),
        ...(route.method === "POST"
          ? {
              requestBody: {
                content: {
                  "application/json": { schema: { type: "object", additionalProperties: { type: "string" } } },
                  "application/x-www-form-urlencoded": { schema: { type: "object" } }
                }
              },
              parameters: [
                {
                  name: "x-csrf-token",
                  in: "header",
                  required: false,
                  description: "from /api/session; not needed with a bearer token",
                  schema: { type: "string" }
                }
              ]
            }
          : {}),
        responses: {
          "200": { description: "the answer", content: { "application/json": {} } },
          "400": { description: "a malformed digest, pattern, cursor or field" },
          "401": { description: "the token is missing or wrong" },
          "403": { description: "read-only, forbidden, or a change without its CSRF token or from another origin" },
          "503": { description: "Redis did not answer" }
        }
      }
    }
  }
  return {
    openapi: "3.1.0",
    info: { title: "effect-unique-jobs admin API", version: "2.0.0" },
    components: { securitySchemes: { bearer: { type: "http", scheme: "bearer" } } },
    paths
  }
}
