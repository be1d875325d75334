/**
 * The admin UI: the locks (filtered, paged with a cursor, bounded work per page whatever the index holds), one lock
 * with both phases' holders (unlock one jid, delete the digest), the reaper (a dry run, then a pass for real, and the
 * last passes) and the last hour's counts per lock type, with a JSON API beside every page (`/api/…`, described at
 * `/api/openapi.json`). Server-rendered, no script, served three ways: `serve` (and `unique-jobs web`), `router` to
 * mount in an Effect HTTP app, and `nodeHandler` for Express, Fastify or Koa.
 *
 * Safe by default: `serve` binds 127.0.0.1 and answers only loopback Host names, and binding elsewhere needs a token
 * for every request; `authorize` decides per request in the mounted forms; `readOnly` serves no change at all. Every
 * change is a POST with a CSRF token from a same-origin page; GET never writes; every value read from Redis is
 * escaped, and the Content-Security-Policy forbids any script. Every change is logged and counted
 * (`Metrics.adminActions`).
 *
 * @example
 * ```ts
 * import * as HttpRouter from "@effect/platform/HttpRouter"
 * import { Effect } from "effect"
 * import * as Web from "effect-unique-jobs/Web"
 *
 * const app = Effect.map(Web.router({ readOnly: true }), (admin) => HttpRouter.empty.pipe(HttpRouter.mount("/admin/locks", admin)))
 * ```
 *
 * @since 0.1.0
 */
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import type * as Runtime from "effect/Runtime"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import * as History from "./History.js"
import { describeValue, formatIssues, type InvalidLockOptions, invalidOptions, isRecord } from "./internal/decoding.js"
import * as Locks from "./Locks.js"
import * as Metrics from "./Metrics.js"
import { PrefixSchema } from "./Options.js"
import * as Reaper from "./Reaper.js"
import type { RedisError } from "./Redis.js"
import { RedisService } from "./Redis.js"
import type { Html } from "./web/Html.js"
import { BasePath, mountOf, type NodeHandler, toNode } from "./web/Node.js"
import * as Pages from "./web/Pages.js"
import * as Security from "./web/Security.js"

/**
 * What a request may do: read and change, only read, or nothing.
 *
 * @since 0.1.0
 * @category models
 */
export type Access = Security.Access

/**
 * An `authorize` answer: the access, and who asked (logged with every change).
 *
 * @since 0.1.0
 * @category models
 */
export interface Principal {
  readonly access: Access
  readonly who?: string | undefined
}

/**
 * What `authorize` sees of a request.
 *
 * @since 0.1.0
 * @category models
 */
export interface RequestInfo {
  readonly method: string
  /** The path and query, as mounted (without the mount path). */
  readonly url: string
  /** Header names in lower case. */
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly remoteAddress: string | undefined
  readonly cookies: Readonly<Record<string, string>>
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** The lock prefix shown. Default: the `Defaults` prefix. */
  readonly prefix?: string | undefined
  /** Serve no change at all: no form is shown and every POST is refused (403). */
  readonly readOnly?: boolean | undefined
  /**
   * A token every request must carry: `Authorization: Bearer <token>`, or once as `?token=` in the address (it is
   * then kept in an HttpOnly cookie and taken out of the address). `serve` requires one off the loopback.
   */
  readonly token?: Redacted.Redacted<string> | undefined
  /** Decides per request (after the token): full, read-only, or forbidden (403). Like Oban Web's resolver. */
  readonly authorize?:
    | ((request: RequestInfo) => Access | Principal | PromiseLike<Access | Principal> | Effect.Effect<Access | Principal>)
    | undefined
  /** Locks per page, 1 to 1000: index members read per page. Default 100. */
  readonly pageSize?: number | undefined
}

/**
 * `serve`'s options.
 *
 * @since 0.1.0
 * @category models
 */
export interface ServeOptions extends Options {
  /** Default 127.0.0.1. Anything else requires `token`. */
  readonly host?: string | undefined
  /** Default 0: a free port (see the answer's `url`). */
  readonly port?: number | undefined
}

/**
 * `serve` could not start: the address is taken, or a setting is not safe.
 *
 * @since 0.1.0
 * @category errors
 */
export class WebError extends Schema.TaggedError<WebError>("effect-unique-jobs/WebError")("WebError", {
  reason: Schema.String
}) {
  override get message(): string {
    return this.reason
  }
}

interface Settings {
  readonly prefix: string | undefined
  readonly readOnly: boolean
  readonly token: Redacted.Redacted<string> | undefined
  readonly authorize: Options["authorize"]
  readonly pageSize: number
  /** `serve` on the loopback without a token: only loopback Host names are answered. */
  readonly loopbackHosts: boolean
}

const maxPageSize = 1000

const decodeSettings = (options: Options): Either.Either<Omit<Settings, "loopbackHosts">, InvalidLockOptions> => {
  if (!isRecord(options as unknown)) {
    return Either.left(invalidOptions([{ field: "options", reason: `expected an object, got ${describeValue(options)}` }]))
  }
  const issues: Array<{ readonly field: string; readonly reason: string }> = []
  const prefix = Schema.decodeUnknownEither(Schema.UndefinedOr(PrefixSchema))(options.prefix)
  if (Either.isLeft(prefix)) issues.push(...formatIssues(prefix.left).map((i) => ({ ...i, field: "prefix" })))
  if (options.readOnly !== undefined && typeof options.readOnly !== "boolean") {
    issues.push({ field: "readOnly", reason: `expected true or false, got ${describeValue(options.readOnly)}` })
  }
  const token = options.token
  if (token !== undefined) {
    if (!Redacted.isRedacted(token) || typeof Redacted.value(token) !== "string") {
      issues.push({ field: "token", reason: "expected a Redacted string, such as Redacted.make(process.env.TOKEN)" })
    } else if (Redacted.value(token).length < 16 || /\s/.test(Redacted.value(token))) {
      issues.push({ field: "token", reason: "expected at least 16 characters and no spaces" })
    }
  }
  if (options.authorize !== undefined && typeof options.authorize !== "function") {
    issues.push({ field: "authorize", reason: `expected a function, got ${describeValue(options.authorize)}` })
  }
  const pageSize = options.pageSize ?? 100
  if (!Number.isSafeInteger(pageSize) || pageSize < 1 || pageSize > maxPageSize) {
    issues.push({ field: "pageSize", reason: `expected a whole number from 1 to ${maxPageSize}, got ${describeValue(pageSize)}` })
  }
  for (const key of Object.keys(options)) {
    if (!["prefix", "readOnly", "token", "authorize", "pageSize", "host", "port"].includes(key)) {
      issues.push({ field: key, reason: "is not an option of the admin UI" })
    }
  }
  if (issues.length > 0) return Either.left(invalidOptions(issues))
  return Either.right({
    prefix: options.prefix,
    readOnly: options.readOnly === true,
    token,
    authorize: options.authorize,
    pageSize
  })
}

/** A request refused or failed, with its status: a page or a JSON answer, by the route. */
class Refusal {
  constructor(readonly status: number, readonly title: string, readonly reason: string) {}
}

const securityHeaders = {
  "content-security-policy":
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "same-origin",
  "x-frame-options": "DENY",
  "cache-control": "no-store"
}

const failureOf = (
  error: RedisError | InvalidLockOptions | Locks.NotALock | { readonly _tag: "QueueError"; readonly message: string }
) => {
  switch (error._tag) {
    case "InvalidLockOptions":
      return new Refusal(400, "Bad request", error.message)
    case "NotALock":
      return new Refusal(409, "Not a lock", error.message)
    case "RedisError":
      // Redis answered with an error (a key of another type under the prefix): it is there, but refused the call.
      return /^(WRONGTYPE|ERR|NOSCRIPT|OOM|READONLY|NOPERM)\b/.test(error.reason)
        ? new Refusal(500, "Redis refused the call", error.message)
        : new Refusal(503, "Redis did not answer", error.message)
    default:
      return new Refusal(503, "The queue did not answer", error.message)
  }
}

/** What a request is, resolved once: where it is mounted, who asks, what it may do. */
interface Context {
  readonly request: HttpServerRequest.HttpServerRequest
  readonly frame: Pages.Frame
  readonly who: string
  readonly query: URLSearchParams
  readonly locks: Context.Tag.Service<Locks.Locks>
  /** A fresh CSRF cookie to set, when the browser had none. */
  readonly newCsrf: string | undefined
}

// The mount path: the router's own `url` is what is left of `originalUrl` once the mount's prefix is sliced off.
const baseOf = (request: HttpServerRequest.HttpServerRequest, given: Option.Option<string>): string => {
  if (Option.isSome(given)) return given.value
  const original = request.originalUrl
  const path = /^https?:\/\//.test(original) ? new URL(original).pathname : original
  return mountOf(path, request.url) ?? ""
}

const infoOf = (request: HttpServerRequest.HttpServerRequest): RequestInfo => ({
  method: request.method,
  url: request.url,
  headers: request.headers,
  remoteAddress: Option.getOrUndefined(request.remoteAddress),
  cookies: request.cookies
})

const principalOf = (answer: Access | Principal): Principal => (typeof answer === "string" ? { access: answer } : answer)

const isPromiseLike = (value: unknown): value is PromiseLike<unknown> =>
  typeof value === "object" && value !== null && typeof (value as { then?: unknown }).then === "function"

const authorizeWith = (settings: Settings, request: RequestInfo): Effect.Effect<Principal, Refusal> => {
  const authorize = settings.authorize
  if (authorize === undefined) return Effect.succeed({ access: "full" })
  return Effect.suspend(() => {
    const answer = authorize(request)
    const effect: Effect.Effect<Access | Principal, unknown> = Effect.isEffect(answer)
      ? answer
      : isPromiseLike(answer)
      ? Effect.tryPromise(() => Promise.resolve(answer))
      : Effect.succeed(answer)
    return effect
  }).pipe(
    Effect.catchAllDefect((defect) => Effect.fail(defect)),
    Effect.mapError(() => new Refusal(500, "Authorization failed", "the authorize hook failed; nothing was done")),
    Effect.flatMap((answer) => {
      const principal = principalOf(answer)
      return principal.access === "full" || principal.access === "read-only" || principal.access === "forbidden"
        ? Effect.succeed(principal)
        : Effect.fail(new Refusal(500, "Authorization failed", `authorize answered ${describeValue(answer)}, not an Access`))
    })
  )
}

const withHeaders = (response: HttpServerResponse.HttpServerResponse) => HttpServerResponse.setHeaders(response, securityHeaders)

const pageResponse = (page: Html, status = 200) =>
  withHeaders(HttpServerResponse.text(page.value, { status, contentType: "text/html; charset=utf-8" }))

const jsonResponse = (body: unknown, status = 200) =>
  withHeaders(HttpServerResponse.unsafeJson(body, { status }))

const unauthorized = (api: boolean) => {
  const reason = "this admin UI needs its token: an Authorization: Bearer header, or ?token= once in the address"
  const response = api
    ? jsonResponse({ error: "Unauthorized", message: reason }, 401)
    : withHeaders(HttpServerResponse.text(`401 Unauthorized: ${reason}\n`, { status: 401 }))
  return HttpServerResponse.setHeader(response, "www-authenticate", "Bearer")
}

const cookieOptions = (base: string) => ({ path: base === "" ? "/" : base, httpOnly: true, sameSite: "strict" as const })

/** The string fields of a POST: a form, or a JSON object. */
const fieldsOf = (request: HttpServerRequest.HttpServerRequest): Effect.Effect<Record<string, string>, Refusal> => {
  const type = request.headers["content-type"] ?? ""
  const bad = (what: string) => new Refusal(400, "Bad request", `the body is not ${what}`)
  if (type.includes("application/json")) {
    return Effect.flatMap(Effect.mapError(request.json, () => bad("JSON")), (body) =>
      isRecord(body)
        ? Effect.succeed(Object.fromEntries(
          Object.entries(body).flatMap(([k, v]) =>
            typeof v === "string" ? [[k, v]] : typeof v === "boolean" || typeof v === "number" ? [[k, String(v)]] : []
          )
        ))
        : Effect.fail(bad("a JSON object")))
  }
  return Effect.map(Effect.mapError(request.urlParamsBody, () => bad("a form")), (params) => {
    const out: Record<string, string> = {}
    for (const [k, v] of params) if (!(k in out)) out[k] = v
    return out
  })
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

const filtersFrom = (query: URLSearchParams, prefix: string, pageSize: number): Either.Either<Pages.Filters, Refusal> => {
  const issues: Array<string> = []
  const pattern = query.get("pattern") || `${prefix}:*`
  if (pattern.length > 1024 || /[\u0000-\u001f\u007f]/.test(pattern)) issues.push("pattern: at most 1024 characters, no control characters")
  else if (!Locks.canMatch(pattern, prefix)) issues.push(`pattern: ${pattern} matches no lock; lock names start with ${prefix}:`)
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
  if (stale !== null && stale !== "" && stale !== "1" && stale !== "on" && stale !== "true") issues.push("stale: 1 or nothing")
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

const matches = (filters: Pages.Filters) => (row: Locks.Row): boolean => {
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
    return { filters, rows: rows.filter(matches(filters)), scanned: page.items.length, next: page.cursor } satisfies Pages.LocksView
  })

const rowJson = (row: Locks.Row) => ({
  name: row.entry.name,
  digest: row.entry.digest,
  phase: row.entry.phase,
  type: row.type,
  holders: row.lock.holders,
  ttlMs: row.lock.ttlMs,
  queue: Pages.queueOf(row),
  worker: Pages.workerOf(row),
  since: Pages.sinceOf(row),
  stale: row.stale,
  notOurs: row.notOurs
})

type Handler = (context: Context) => Effect.Effect<HttpServerResponse.HttpServerResponse, Refusal, RedisService>

interface Route {
  readonly method: "GET" | "POST"
  readonly path: `/${string}`
  readonly api: boolean
  /** The admin action a POST is logged and counted as. */
  readonly action?: string
  readonly summary: string
  readonly parameters?: ReadonlyArray<{ readonly name: string; readonly description: string; readonly required?: boolean }>
  readonly handler: Handler
}

const counted = (action: string, outcome: string) =>
  Metric.increment(Metric.tagged(Metric.tagged(Metrics.adminActions, "action", action), "outcome", outcome))

const mapFailure = <A, R>(effect: Effect.Effect<A, RedisError | InvalidLockOptions | Locks.NotALock | { readonly _tag: "QueueError"; readonly message: string }, R>) =>
  Effect.mapError(effect, failureOf)

const routes = (settings: Settings): ReadonlyArray<Route> => {
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
  const digestParam = [{ name: "digest", description: "the lock's digest (its name)", required: true }]
  const listed = (context: Context) =>
    Effect.flatMap(
      Either.match(filtersFrom(context.query, context.frame.prefix, settings.pageSize), {
        onLeft: Effect.fail,
        onRight: Effect.succeed
      }),
      (filters) => mapFailure(locksView(context.locks, filters))
    )
  const shown = (context: Context, value: string | undefined) =>
    Effect.flatMap(
      Either.match(digestFrom(value, context.frame.prefix), { onLeft: Effect.fail, onRight: Effect.succeed }),
      (digest) => mapFailure(context.locks.show(digest))
    )
  const removal = (context: Context, jid: boolean) =>
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
        Effect.annotateLogs({ who: context.who, digest, ...(jid ? { jid: fields.jid } : {}), removed: removed.removed.length, revoked: removed.revoked.length })
      )
      return { digest, removed, jid: fields.jid }
    })
  const reaped = (context: Context) =>
    Effect.gen(function*() {
      const fields = yield* fieldsOf(context.request)
      const dryRun = fields.dryRun !== "0" && fields.dryRun !== "false"
      const pass = yield* mapFailure(Reaper.runOnce({ prefix: context.frame.prefix, dryRun }))
      yield* Effect.logInfo(dryRun ? "admin reap (dry run)" : "admin reap").pipe(
        Effect.annotateLogs({ who: context.who, scanned: pass.scanned, members: pass.members, holders: pass.holders })
      )
      return pass
    })
  const passes = (context: Context) => mapFailure(History.passes(context.frame.prefix))
  const buckets = (context: Context) => mapFailure(History.buckets(context.frame.prefix))
  return [
    {
      method: "GET",
      path: "/",
      api: false,
      summary: "the locks page",
      handler: (context) => Effect.map(listed(context), (view) => pageResponse(Pages.locksPage(context.frame, view)))
    },
    {
      method: "GET",
      path: "/locks",
      api: false,
      summary: "the locks page",
      handler: (context) => Effect.map(listed(context), (view) => pageResponse(Pages.locksPage(context.frame, view)))
    },
    {
      method: "GET",
      path: "/lock",
      api: false,
      summary: "one lock's page",
      handler: (context) =>
        Effect.map(shown(context, context.query.get("digest") ?? undefined), (digest) => pageResponse(Pages.lockPage(context.frame, digest)))
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
            pageResponse(Pages.lockPage(context.frame, shown, Pages.removalMessage(`Unlocked ${jid}`, removed)))))
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
            pageResponse(Pages.lockPage(context.frame, shown, Pages.removalMessage("Deleted", removed)))))
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
          Effect.map(passes(context), (kept) => pageResponse(Pages.reaperPage(context.frame, kept, pass))))
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
          jsonResponse({ next: view.next, scanned: view.scanned, items: view.rows.map(rowJson) }))
    },
    {
      method: "GET",
      path: "/api/lock",
      api: true,
      summary: "one digest's queue and run locks",
      parameters: digestParam,
      handler: (context) => Effect.map(shown(context, context.query.get("digest") ?? undefined), (digest) => jsonResponse(digest))
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
      handler: (context) => Effect.map(buckets(context), (read) => jsonResponse({ events: History.events, buckets: read }))
    },
    {
      method: "GET",
      path: "/api/session",
      api: true,
      summary: "what this request may do, and the CSRF token a change carries (x-csrf-token)",
      handler: (context) =>
        Effect.succeed(jsonResponse({ canChange: context.frame.canChange, csrf: context.frame.csrf, prefix: context.frame.prefix }))
    }
  ]
}

/** The JSON API as OpenAPI 3.1, from the same route table the router serves. */
const openApiOf = (table: ReadonlyArray<Route>) => {
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
            parameters: [{ name: "x-csrf-token", in: "header", required: false, description: "from /api/session; not needed with a bearer token", schema: { type: "string" } }]
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

const makeRouter = (settings: Settings): HttpRouter.HttpRouter<never, RedisService> => {
  // The stylesheet and the API's description pass the same guards as every page (the token, the Host), and so does
  // a path the UI does not have (404).
  const table: ReadonlyArray<Route> = [
    ...routes(settings),
    {
      method: "GET",
      path: "/assets/style.css",
      api: false,
      summary: "the stylesheet",
      handler: () => Effect.succeed(withHeaders(HttpServerResponse.text(Pages.stylesheet, { contentType: "text/css; charset=utf-8" })))
    },
    {
      method: "GET",
      path: "/api/openapi.json",
      api: true,
      summary: "this API, as OpenAPI 3.1",
      handler: () => Effect.succeed(jsonResponse(openApi))
    }
  ]
  const openApi = openApiOf(table)
  const notFound: Route = {
    method: "GET",
    path: "/*",
    api: false,
    summary: "no such page",
    handler: (context) =>
      Effect.fail(new Refusal(404, "Not found", `the admin UI has no page ${context.request.url.split("?")[0]}`))
  }
  const serve = (route: Route) =>
    Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const base = baseOf(request, yield* Effect.serviceOption(BasePath))
      const url = new URL(request.url, "http://admin")
      const answer = (refusal: Refusal) =>
        route.api
          ? jsonResponse({ error: refusal.title, message: refusal.reason }, refusal.status)
          : pageResponse(Pages.errorPage({ base, prefix: settings.prefix ?? "", canChange: false, csrf: "" }, refusal.status, refusal.title, refusal.reason), refusal.status)
      if (settings.loopbackHosts && !Security.hostIsLoopback(request.headers["host"])) {
        return answer(new Refusal(403, "Forbidden", "this server answers only loopback names (127.0.0.1, localhost)"))
      }
      // The token first: without it, nothing else is told.
      let bearer = false
      if (settings.token !== undefined) {
        const token = Redacted.value(settings.token)
        const fromHeader = Security.bearerOf(request.headers["authorization"])
        const fromQuery = url.searchParams.get("token")
        if (fromHeader !== undefined) {
          if (!Security.same(fromHeader, token)) return unauthorized(route.api)
          bearer = true
        } else if (fromQuery !== null && request.method === "GET") {
          if (!Security.same(fromQuery, token)) return unauthorized(route.api)
          url.searchParams.delete("token")
          return HttpServerResponse.redirect(`${base}${url.pathname}${url.search}`, { status: 303 }).pipe(
            withHeaders,
            HttpServerResponse.unsafeSetCookie(Security.tokenCookie, token, cookieOptions(base))
          )
        } else {
          const fromCookie = request.cookies[Security.tokenCookie]
          if (fromCookie === undefined || !Security.same(fromCookie, token)) return unauthorized(route.api)
        }
      }
      const principal = yield* Effect.either(authorizeWith(settings, infoOf(request)))
      if (Either.isLeft(principal)) return answer(principal.left)
      if (principal.right.access === "forbidden") return answer(new Refusal(403, "Forbidden", "this request may not see the admin UI"))
      const canChange = principal.right.access === "full" && !settings.readOnly
      const cookieCsrf = request.cookies[Security.csrfCookie]
      const newCsrf = cookieCsrf === undefined || !/^[0-9a-f]{64}$/.test(cookieCsrf) ? Security.freshCsrf() : undefined
      const locks = yield* Effect.either(Locks.make(settings.prefix === undefined ? {} : { prefix: settings.prefix }))
      if (Either.isLeft(locks)) return answer(failureOf(locks.left))
      const frame: Pages.Frame = { base, prefix: locks.right.prefix, canChange, csrf: newCsrf ?? cookieCsrf! }
      const who = principal.right.who ?? Option.getOrElse(request.remoteAddress, () => "unknown")
      const context: Context = { request, frame, who, query: url.searchParams, locks: locks.right, newCsrf }
      if (route.method === "POST") {
        const action = route.action ?? "change"
        const refuse = (refusal: Refusal) =>
          Effect.zipRight(
            Effect.zipRight(
              counted(action, "refused"),
              Effect.logWarning(`admin ${action} refused`).pipe(Effect.annotateLogs({ who, reason: refusal.reason }))
            ),
            Effect.succeed(answer(refusal))
          )
        if (!canChange) {
          return yield* refuse(new Refusal(403, "Read-only", settings.readOnly ? "this admin UI is read-only" : "this request may only read"))
        }
        const cross = Security.crossOrigin(request.headers)
        if (cross !== undefined) return yield* refuse(new Refusal(403, "Cross-origin", `a change from another site is refused: ${cross}`))
        if (!bearer) {
          const fields = yield* Effect.either(fieldsOf(request))
          const sent = request.headers["x-csrf-token"] ?? (Either.isRight(fields) ? fields.right._csrf : undefined)
          if (cookieCsrf === undefined || sent === undefined || !Security.same(sent, cookieCsrf)) {
            return yield* refuse(new Refusal(403, "CSRF token missing", "a change carries the CSRF token of a page of this admin UI; reload the page and try again"))
          }
        }
      }
      const response = yield* Effect.either(route.handler(context))
      if (route.method === "POST") yield* counted(route.action ?? "change", Either.isRight(response) ? "done" : "failed")
      const out = Either.isRight(response) ? response.right : answer(response.left)
      return newCsrf === undefined ? out : HttpServerResponse.unsafeSetCookie(out, Security.csrfCookie, newCsrf, cookieOptions(base))
    })
  let router: HttpRouter.HttpRouter<never, RedisService> = HttpRouter.empty
  for (const route of table) {
    router = route.method === "GET" ? HttpRouter.get(router, route.path, serve(route)) : HttpRouter.post(router, route.path, serve(route))
  }
  return HttpRouter.all(router, "*", serve(notFound))
}

const settingsFrom = (options: Options, loopbackHosts: boolean) =>
  Either.map(decodeSettings(options), (decoded): Settings => ({ ...decoded, loopbackHosts }))

/**
 * The admin UI as an `HttpRouter`, to mount under a path of your Effect HTTP app (`HttpRouter.mount("/admin/locks",
 * …)`); its links follow the mount. Each option is decoded here: a bad one fails with `InvalidLockOptions` naming it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const router = (options: Options = {}): Effect.Effect<HttpRouter.HttpRouter<never, RedisService>, InvalidLockOptions> =>
  Either.match(settingsFrom(options, false), { onLeft: Effect.fail, onRight: (settings) => Effect.succeed(makeRouter(settings)) })

/**
 * The admin UI as a Node request handler, to mount under a path in Express (`app.use("/admin/locks", handler)`),
 * Fastify (with @fastify/middie) or Koa (with koa-connect): links follow the mount (Express' `baseUrl`, or
 * `basePath`). The store comes from `redis`, a layer built once; `dispose` closes it. A bad option throws
 * `InvalidLockOptions` here, naming it, before any request is served.
 *
 * @since 0.1.0
 * @category constructors
 */
export const nodeHandler = <E>(
  options: Options & { readonly redis: Layer.Layer<RedisService, E>; readonly basePath?: string | undefined }
): { readonly handle: NodeHandler; readonly dispose: () => Promise<void> } => {
  const { basePath, redis, ...rest } = options
  const settings = Either.getOrThrowWith(settingsFrom(rest, false), (error) => error)
  const router = makeRouter(settings)
  // The store is built at the first request, and again at the next one after a build that failed (Redis was down
  // when the app started): a failed build is answered 503, never kept.
  let built: { readonly scope: Scope.CloseableScope; readonly handler: ReturnType<typeof handlerOf> } | undefined
  let building: Promise<NonNullable<typeof built>> | undefined
  let disposed = false
  const handlerOf = (runtime: Runtime.Runtime<RedisService>) => HttpApp.toWebHandlerRuntime(runtime)(router)
  const build = (): Promise<NonNullable<typeof built>> => {
    const scope = Effect.runSync(Scope.make())
    return Effect.runPromise(Scope.extend(Layer.toRuntime(redis), scope)).then(
      (runtime) => (built = { scope, handler: handlerOf(runtime) }),
      (error: unknown) => {
        building = undefined
        void Effect.runPromise(Scope.close(scope, Exit.void))
        throw error
      }
    )
  }
  const web = async (request: Request, context?: Context.Context<never>): Promise<Response> => {
    try {
      if (disposed) throw new Error("this admin handler was disposed")
      const ready = built ?? await (building ??= build())
      return await ready.handler(request, context)
    } catch (error) {
      const reason = `the admin UI's store is not ready: ${error instanceof Error ? error.message : String(error)}`
      const api = new URL(request.url).pathname.includes("/api/")
      const base = context === undefined ? "" : Option.getOrElse(Context.getOption(context, BasePath), () => "")
      const page = Pages.errorPage({ base, prefix: settings.prefix ?? "", canChange: false, csrf: "" }, 503, "Redis did not answer", reason)
      return new Response(api ? JSON.stringify({ error: "Redis did not answer", message: reason }) : page.value, {
        status: 503,
        headers: { ...securityHeaders, "content-type": api ? "application/json" : "text/html; charset=utf-8" }
      })
    }
  }
  return {
    handle: toNode(web, { basePath }),
    dispose: async () => {
      disposed = true
      const current = built ?? await building?.catch(() => undefined)
      if (current !== undefined) await Effect.runPromise(Scope.close(current.scope, Exit.void))
    }
  }
}

/**
 * A web handler on the given runtime (which provides the store): the Node bridge's input, and `serve`'s.
 *
 * @internal
 */
const handlerOn = (runtime: Runtime.Runtime<RedisService>, settings: Settings) =>
  HttpApp.toWebHandlerRuntime(runtime)(makeRouter(settings))

/**
 * Serves the admin UI on Node's `http` for as long as the scope lives (`unique-jobs web` runs it). Binds 127.0.0.1
 * by default, where it answers only loopback Host names; any other host needs `token`. Answers the address it
 * listens on.
 *
 * @since 0.1.0
 * @category constructors
 */
export const serve = (
  options: ServeOptions = {}
): Effect.Effect<{ readonly url: string; readonly host: string; readonly port: number }, WebError | InvalidLockOptions, RedisService | Scope.Scope> =>
  Effect.gen(function*() {
    const host = options.host ?? "127.0.0.1"
    const port = options.port ?? 0
    if (!Number.isSafeInteger(port) || port < 0 || port > 65535) {
      return yield* Effect.fail(invalidOptions([{ field: "port", reason: `expected a whole number from 0 to 65535, got ${describeValue(port)}` }]))
    }
    if (typeof host !== "string" || host === "") {
      return yield* Effect.fail(invalidOptions([{ field: "host", reason: `expected a host name or address, got ${describeValue(host)}` }]))
    }
    const loopback = Security.isLoopback(host)
    if (!loopback && options.token === undefined) {
      return yield* Effect.fail(
        new WebError({ reason: `serving on ${host} (not the loopback) needs a token: set UNIQUE_JOBS_WEB_TOKEN or pass token` })
      )
    }
    const settings = yield* settingsFrom(options, loopback && options.token === undefined)
    const runtime = yield* Effect.runtime<RedisService>()
    const server = createServer(toNode(handlerOn(runtime, settings)))
    // Idle keep-alive connections must not hold the process once the scope closes.
    yield* Effect.addFinalizer(() =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      })
    )
    const address = yield* Effect.async<AddressInfo, WebError>((resume) => {
      server.once("error", (error) => resume(Effect.fail(new WebError({ reason: `cannot listen on ${host}:${port}: ${error.message}` }))))
      server.listen(port, host, () => resume(Effect.succeed(server.address() as AddressInfo)))
    })
    const shown = address.family === "IPv6" ? `[${address.address}]` : address.address
    return { url: `http://${shown}:${address.port}`, host: address.address, port: address.port }
  })
