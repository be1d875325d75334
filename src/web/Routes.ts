/**
 * The admin UI's route table: every page and JSON call with its handler, read from its query or body (each field
 * checked, a 400 naming it), and the OpenAPI description made from the same table.
 *
 * @internal
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import type * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Metric from "effect/Metric"
import * as History from "../History.js"
import * as Locks from "../Locks.js"
import * as Metrics from "../Metrics.js"
import * as Reaper from "../Reaper.js"
import type { RedisService } from "../Redis.js"
import * as Pages from "./Pages.js"
import { fieldsOf, jsonResponse, mapFailure, pageResponse, Refusal } from "./Responses.js"

/** The largest page a request may ask for. @internal */
export const maxPageSize = 1000

/** What a request is, resolved once: where it is mounted, who asks, what it may do. */
export interface RequestContext {
  readonly request: HttpServerRequest.HttpServerRequest
  readonly frame: Pages.Frame
  readonly who: string
  readonly query: URLSearchParams
  readonly locks: Context.Tag.Service<Locks.Locks>
  /** A fresh CSRF cookie to set, when the browser had none. */
  readonly newCsrf: string | undefined
}

// A digest as a lock name of the prefix: the run lock's name (`…:RUN`) shows its digest.
const digestFrom = (value: string | undefined, prefix: string): Either.Either<string, Refusal> => {
  const bad = (reason: string) => Either.left(new Refusal(400, "Bad digest", reason))
  if (value === undefined || value === "") return bad("give the digest, such as ?digest=" + `${prefix}:…`)
  if (value.length > 4096) return bad(`a digest of ${value.length} characters is longer than any lock's`)
  if (/[\u0000-\u001f\u007f]/.test(value)) return bad("a digest has no control characters")
  if (!value.startsWith(`${prefix}:`)) return bad(`a lock's digest under this prefix starts with ${prefix}:`)
  const digest = value.endsWith(":RUN") ? value.slice(0, -4) : value
  return digest.length > prefix.length + 1 ? Either.right(digest) : bad("the digest is empty after its prefix")
}

const filtersFrom = (
  query: URLSearchParams,
  prefix: string,
  pageSize: number
): Either.Either<Pages.Filters, Refusal> => {
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
  const stale = query.get("stale")
  if (stale !== null && stale !== "" && stale !== "1" && stale !== "on" && stale !== "true")
    issues.push("stale: 1 or nothing")
  if (issues.length > 0) return Either.left(new Refusal(400, "Bad filter", issues.join("; ")))
  return Either.right({
    pattern,
    type,
    queue,
    worker,
    age,
    stale: stale === "1" || stale === "on" || stale === "true",
    cursor,
    count
  })
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

/** One page of the index with its rows read and filtered: one ZSCAN and one pipelined read per member. */
const locksView = (locks: Context.Tag.Service<Locks.Locks>, filters: Pages.Filters) =>
  Effect.gen(function*() {
    const page = yield* locks.list({ pattern: filters.pattern, cursor: filters.cursor, count: filters.count })
    const rows = yield* locks.rows(page.items)
    return {
      filters,
      rows: rows.filter(matches(filters)),
      scanned: page.items.length,
      next: page.cursor
    } satisfies Pages.LocksView
  })

const rowJson = (row: Locks.Row) => ({
  name: row.entry.name,
  digest: row.entry.digest,
  phase: row.entry.phase,
  type: row.type,
  holders: row.lock.holders,
  holderCount: row.lock.size,
  ttlMs: row.lock.ttlMs,
  queue: Pages.queueOf(row),
  worker: Pages.workerOf(row),
  since: Pages.sinceOf(row),
  stale: row.stale,
  notOurs: row.notOurs
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
  Metric.increment(Metric.tagged(Metric.tagged(Metrics.adminActions, "action", action), "outcome", outcome))

export const routes = (pageSize: number): ReadonlyArray<Route> => {
  const filterParams = [
    { name: "pattern", description: "a Redis glob over lock names (default <prefix>:*)" },
    { name: "type", description: "a lock type, or unknown (taken without lockInfo)" },
    { name: "queue", description: "part of the queue name" },
    { name: "worker", description: "part of the worker name (stored with lockInfo)" },
    { name: "age", description: "minutes: only locks whose oldest holder is at least this old" },
    { name: "stale", description: "1: only what the next reaper pass removes" },
    { name: "cursor", description: "the cursor of the page (from the previous answer's next)" },
    { name: "count", description: `index members read for the page, 1 to ${maxPageSize}` }
  ]
  const digestParam = [
    { name: "digest", description: "the lock's digest (its name)", required: true },
    { name: "holders", description: "holders read per lock, 1 to 1000 (default 100)" },
    { name: "queueCursor", description: "where the queue lock's holders page starts (the last answer's queue.cursor)" },
    { name: "runCursor", description: "where the run lock's holders page starts (the previous answer's run.cursor)" }
  ]
  const listed = (context: RequestContext) =>
    Effect.flatMap(
      Either.match(filtersFrom(context.query, context.frame.prefix, pageSize), {
        onLeft: Effect.fail,
        onRight: Effect.succeed
      }),
      (filters) => mapFailure(locksView(context.locks, filters))
    )
  // A page of each lock's holders: `holders` per lock, from `queueCursor` and `runCursor` (checked by Locks.show).
  const shown = (context: RequestContext, value: string | undefined) =>
    Effect.flatMap(
      Either.match(digestFrom(value, context.frame.prefix), { onLeft: Effect.fail, onRight: Effect.succeed }),
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
  const removal = (context: RequestContext, jid: boolean) =>
    Effect.gen(function*() {
      const fields = yield* fieldsOf(context.request)
      const digest = yield* Either.match(digestFrom(fields.digest, context.frame.prefix), {
        onLeft: Effect.fail,
        onRight: Effect.succeed
      })
      if (jid && (fields.jid === undefined || fields.jid === "" || fields.jid.length > 4096)) {
        return yield* Effect.fail(new Refusal(400, "Bad jid", "give the jid to unlock (1 to 4096 characters)"))
      }
      const removed = yield* mapFailure(jid ? context.locks.unlock(digest, fields.jid!) : context.locks.delete(digest))
      yield* Effect.logInfo(jid ? "admin unlock" : "admin delete").pipe(
        Effect.annotateLogs({
          who: context.who,
          digest,
          ...(jid ? { jid: fields.jid } : {}),
          removed: removed.removed.length,
          revoked: removed.revoked.length
        })
      )
      return { digest, removed, jid: fields.jid }
    })
  const reaped = (context: RequestContext) =>
    Effect.gen(function*() {
      const fields = yield* fieldsOf(context.request)
      const dryRun = fields.dryRun !== "0" && fields.dryRun !== "false"
      const pass = yield* mapFailure(Reaper.runOnce({ prefix: context.frame.prefix, dryRun }))
      yield* Effect.logInfo(dryRun ? "admin reap (dry run)" : "admin reap").pipe(
        Effect.annotateLogs({ who: context.who, scanned: pass.scanned, members: pass.members, holders: pass.holders })
      )
      return pass
    })
  const locksPage: Handler = (context) =>
    Effect.map(listed(context), (view) => pageResponse(Pages.locksPage(context.frame, view)))
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
        Effect.map(shown(context, context.query.get("digest") ?? undefined), (digest) =>
          pageResponse(Pages.lockPage(context.frame, digest))
        )
    },
    {
      method: "POST",
      path: "/lock/unlock",
      api: false,
      action: "unlock",
      summary: "unlock one jid",
      handler: (context) =>
        Effect.flatMap(removal(context, true), ({ digest, jid, removed }) =>
          Effect.map(mapFailure(context.locks.show(digest)), (shown) =>
            pageResponse(Pages.lockPage(context.frame, shown, Pages.removalMessage(`Unlocked ${jid}`, removed)))
          )
        )
    },
    {
      method: "POST",
      path: "/lock/delete",
      api: false,
      action: "delete",
      summary: "delete a digest",
      handler: (context) =>
        Effect.flatMap(removal(context, false), ({ digest, removed }) =>
          Effect.map(mapFailure(context.locks.show(digest)), (shown) =>
            pageResponse(Pages.lockPage(context.frame, shown, Pages.removalMessage("Deleted", removed)))
          )
        )
    },
    {
      method: "GET",
      path: "/reaper",
      api: false,
      summary: "the reaper page",
      handler: (context) => Effect.map(passes(context), (kept) => pageResponse(Pages.reaperPage(context.frame, kept)))
    },
    {
      method: "POST",
      path: "/reaper",
      api: false,
      action: "reap",
      summary: "run a reaper pass",
      handler: (context) =>
        Effect.flatMap(reaped(context), (pass) =>
          Effect.map(passes(context), (kept) => pageResponse(Pages.reaperPage(context.frame, kept, pass)))
        )
    },
    {
      method: "GET",
      path: "/metrics",
      api: false,
      summary: "the metrics page",
      handler: (context) =>
        Effect.map(buckets(context), (read) => pageResponse(Pages.metricsPage(context.frame, read, History.events)))
    },
    {
      method: "GET",
      path: "/api/locks",
      api: true,
      summary: "a page of locks, filtered",
      parameters: filterParams,
      handler: (context) =>
        Effect.map(listed(context), (view) =>
          jsonResponse({ next: view.next, scanned: view.scanned, items: view.rows.map(rowJson) })
        )
    },
    {
      method: "GET",
      path: "/api/lock",
      api: true,
      summary: "one digest's queue and run locks",
      parameters: digestParam,
      handler: (context) =>
        Effect.map(shown(context, context.query.get("digest") ?? undefined), (digest) => jsonResponse(digest))
    },
    {
      method: "POST",
      path: "/api/lock/unlock",
      api: true,
      action: "unlock",
      summary: "unlock one jid of a digest (body: digest, jid)",
      handler: (context) => Effect.map(removal(context, true), ({ removed }) => jsonResponse(removed))
    },
    {
      method: "POST",
      path: "/api/lock/delete",
      api: true,
      action: "delete",
      summary: "delete a digest (body: digest)",
      handler: (context) => Effect.map(removal(context, false), ({ removed }) => jsonResponse(removed))
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
      handler: (context) => Effect.map(reaped(context), (pass) => jsonResponse(pass))
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
    info: { title: "effect-unique-jobs admin API", version: "0.1.0" },
    components: { securitySchemes: { bearer: { type: "http", scheme: "bearer" } } },
    paths
  }
}
