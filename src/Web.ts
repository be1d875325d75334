/**
 * The admin UI: the locks (filtered, paged with a cursor, bounded work per page whatever the index holds), one lock
 * with both phases' holders (unlock one jid, delete the digest), the reaper (a dry run, then a pass for real, and the
 * last passes) and the last hour's counts per lock type, with a JSON API beside every page (`/api/…`, described at
 * `/api/openapi.json`). Server-rendered, no script, served three ways: `serve` (and `unique-jobs web`), `router` to
 * mount in an Effect HTTP app, and `nodeHandler` for Express, Fastify or Koa.
 *
 * Safe by default: `serve` binds 127.0.0.1 and answers only loopback Host names, and binding elsewhere needs a token
 * for every request; `authorize` decides per request in the mounted forms; `readOnly` serves no change at all. Every
 * change is a POST with a CSRF token (signed by the server) from a same-origin page, answered 303 to a page showing
 * its result, and a destructive one is confirmed on a page of its own first; GET never writes; every value read from
 * Redis is escaped, and the Content-Security-Policy forbids any script. Every change is logged and counted
 * (`Metrics.adminActions`).
 *
 * @example
 * ```ts
 * import { HttpRouter } from "effect/http"
 * import * as Web from "effect-unique-jobs/Web"
 *
 * // A layer of the app's router: the admin UI's routes under /admin/locks.
 * const Admin = HttpRouter.addAll(Web.router({ readOnly: true }), { prefix: "/admin/locks" })
 * ```
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as HttpEffect from "effect/http/HttpEffect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { describeValue, formatIssues, type InvalidLockOptions, invalidOptions, isRecord } from "./options/Decoding.js"
import * as Locks from "./Locks.js"
import { PrefixSchema } from "./Options.js"
import * as Reaper from "./Reaper.js"
import { RedisService } from "./Redis.js"
import { BasePath, mountOf, type NodeHandler, RemoteAddress, toNode } from "./web/Node.js"
import * as Gate from "./web/Gate.js"
import * as Pages from "./web/Pages.js"
import {
  cookieOptions,
  failureOf,
  jsonResponse,
  fieldsOf,
  Refusal,
  refusalBody,
  refusalResponse,
  securityHeaders,
  unauthorized,
  withHeaders
} from "./web/Responses.js"
import { counted, maxPageSize, openApiOf, type RequestContext, type Route, routes } from "./web/Routes.js"
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
    | ((
        request: RequestInfo
      ) => Access | Principal | PromiseLike<Access | Principal> | Effect.Effect<Access | Principal>)
    | undefined
  /** Locks per page, 1 to 1000: index members read per page. Default 100. */
  readonly pageSize?: number | undefined
  /**
   * Behind a proxy the app trusts: `X-Forwarded-Host` and `X-Forwarded-Proto` name the address a change's `Origin`
   * must match, and `X-Forwarded-For` the client (`RequestInfo.remoteAddress`, logged with every change). Default
   * false: anyone can send those headers, so they are ignored.
   */
  readonly trustProxy?: boolean | undefined
  /**
   * The key that signs CSRF tokens and the results shown after a change (at least 32 characters). Default: random,
   * made when the UI is; give the same one to every process serving one address behind a balancer.
   */
  readonly secret?: Redacted.Redacted<string> | undefined
  /**
   * A reaper pass from the page asks the queue about holders with no expiry older than this (1 ms to 1000 years;
   * default 10 minutes), and frees those whose job is gone: when the UI runs with a `JobQueue` in its context
   * (`BullMQ.layer`, or `unique-jobs web --bullmq-queue NAME`). Without one such holders are left alone.
   */
  readonly reaperGrace?: Duration.Input | undefined
  /**
   * Requests that read Redis at once, 1 to 64 (default 4): a dashboard open in many tabs shares the store's connection
   * with nothing else waiting behind it for long.
   */
  readonly concurrency?: number | undefined
  /** Requests that wait for a turn beyond those, 0 to 1000 (default 16); one more is answered 503 with Retry-After. */
  readonly queue?: number | undefined
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
  readonly trustProxy: boolean
  readonly secret: Uint8Array
  readonly reaperGrace: Duration.Input | undefined
  readonly concurrency: number
  readonly queue: number
  /** `serve` on the loopback without a token: only loopback Host names are answered. */
  readonly loopbackHosts: boolean
}

const decodeSettings = (options: Options): Result.Result<Omit<Settings, "loopbackHosts">, InvalidLockOptions> => {
  if (!isRecord(options as unknown)) {
    return Result.fail(
      invalidOptions([{ field: "options", reason: `expected an object, got ${describeValue(options)}` }])
    )
  }
  const issues: Array<{ readonly field: string; readonly reason: string }> = []
  const prefix = Schema.decodeUnknownResult(Schema.UndefinedOr(PrefixSchema))(options.prefix)
  if (Result.isFailure(prefix)) issues.push(...formatIssues(prefix.failure).map((i) => ({ ...i, field: "prefix" })))
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
    issues.push({
      field: "pageSize",
      reason: `expected a whole number from 1 to ${maxPageSize}, got ${describeValue(pageSize)}`
    })
  }
  if (options.trustProxy !== undefined && typeof options.trustProxy !== "boolean") {
    issues.push({ field: "trustProxy", reason: `expected true or false, got ${describeValue(options.trustProxy)}` })
  }
  const secret = options.secret
  if (
    secret !== undefined &&
    (!Redacted.isRedacted(secret) || typeof Redacted.value(secret) !== "string" || Redacted.value(secret).length < 32)
  ) {
    issues.push({ field: "secret", reason: "expected a Redacted string of at least 32 characters" })
  }
  // Decoded as the reaper decodes it, so the UI is refused at build, not at its first pass.
  if (options.reaperGrace !== undefined) {
    const reaper = Effect.runSync(Effect.result(Reaper.make({ grace: options.reaperGrace })))
    if (Result.isFailure(reaper)) {
      for (const issue of reaper.failure.issues) issues.push({ field: "reaperGrace", reason: issue.reason })
    }
  }
  const limit = (field: "concurrency" | "queue") => {
    const { fallback, max, min } = Gate.limits[field]
    const value = options[field] ?? fallback
    if (Number.isSafeInteger(value) && value >= min && value <= max) return value
    const reason = `expected a whole number from ${min} to ${max}, such as ${fallback}; got ${describeValue(value)}`
    issues.push({ field, reason })
    return fallback
  }
  const concurrency = limit("concurrency")
  const queue = limit("queue")
  for (const key of Object.keys(options)) {
    const known = [
      "prefix",
      "readOnly",
      "token",
      "authorize",
      "pageSize",
      "concurrency",
      "queue",
      "trustProxy",
      "secret",
      "reaperGrace",
      "host",
      "port"
    ]
    if (!known.includes(key)) {
      issues.push({ field: key, reason: "is not an option of the admin UI" })
    }
  }
  if (issues.length > 0) return Result.fail(invalidOptions(issues))
  return Result.succeed({
    prefix: options.prefix,
    readOnly: options.readOnly === true,
    token,
    authorize: options.authorize,
    pageSize,
    trustProxy: options.trustProxy === true,
    secret: secret === undefined ? Security.freshSecret() : Buffer.from(Redacted.value(secret)),
    reaperGrace: options.reaperGrace,
    concurrency,
    queue
  })
}

// The mount path: the router's own `url` is what is left of `originalUrl` once the mount's prefix is sliced off.
const baseOf = (request: HttpServerRequest.HttpServerRequest, given: Option.Option<string>): string => {
  if (Option.isSome(given)) return given.value
  const original = request.originalUrl
  const path = /^https?:\/\//.test(original) ? new URL(original).pathname : original
  return mountOf(path, request.url) ?? ""
}

// The client: a trusted proxy's X-Forwarded-For, else the request's own address (the Node bridge's, for `serve` and
// `nodeHandler`, whose web requests carry none).
const clientOf = (
  request: HttpServerRequest.HttpServerRequest,
  bridged: Option.Option<string>,
  trustProxy: boolean
): string | undefined =>
  Security.clientOf(request.headers, trustProxy) ??
    Option.getOrUndefined(Option.orElse(request.remoteAddress, () => bridged))

const infoOf = (request: HttpServerRequest.HttpServerRequest, client: string | undefined): RequestInfo => ({
  method: request.method,
  url: request.url,
  headers: request.headers,
  remoteAddress: client,
  cookies: request.cookies
})

// Who a change is logged as (its log lines, and `who` in the digest's activity log) when `authorize` names no one: this
// UI and the client's address, so a change from `unique-jobs web` reads "web UI (127.0.0.1)", never "unknown".
const anonymousWho = (client: string | undefined): string =>
  client === undefined ? "web UI" : `web UI (${client})`

const principalOf = (answer: Access | Principal): Principal =>
  typeof answer === "string" ? { access: answer } : answer

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
    Effect.catchDefect((defect) => Effect.fail(defect)),
    Effect.mapError(() => new Refusal(500, "Authorization failed", "the authorize hook failed; nothing was done")),
    Effect.flatMap((answer) => {
      const principal = principalOf(answer)
      return principal.access === "full" || principal.access === "read-only" || principal.access === "forbidden"
        ? Effect.succeed(principal)
        : Effect.fail(
            new Refusal(500, "Authorization failed", `authorize answered ${describeValue(answer)}, not an Access`)
          )
    })
  )
}

const makeRoutes = (settings: Settings): ReadonlyArray<HttpRouter.Route<never, RedisService>> => {
  // The stylesheet and the API's description pass the same guards as every page (the token, the Host), and so does
  // a path the UI does not have (404).
  const table: ReadonlyArray<Route> = [
    ...routes(settings.pageSize),
    {
      method: "GET",
      path: "/assets/style.css",
      api: false,
      summary: "the stylesheet",
      handler: () =>
        Effect.succeed(
          withHeaders(HttpServerResponse.text(Pages.stylesheet, { contentType: "text/css; charset=utf-8" }))
        )
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
  // One gate per router: every request that reads Redis takes a turn.
  const gate = Gate.make(settings.concurrency, settings.queue)
  const notFound = (api: boolean): Route => ({
    method: "GET",
    path: "/*",
    api,
    summary: "no such page",
    handler: (context) =>
      Effect.fail(new Refusal(404, "Not found", `the admin UI has no page ${context.request.url.split("?")[0]}`))
  })
  const serve = (route: Route) =>
    Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const base = baseOf(request, yield* Effect.serviceOption(BasePath))
      const url = new URL(request.url, "http://admin")
      // The request's mode, once known: its refusals' pages show it (a read-only server's from the start).
      let canChangeKnown: boolean | undefined = settings.readOnly ? false : undefined
      const answer = (refusal: Refusal) =>
        refusalResponse(refusal, route.api, { base, prefix: settings.prefix ?? "", canChange: canChangeKnown })
      const host = Security.hostOf(request.headers, settings.trustProxy)
      if (settings.loopbackHosts && !Security.hostIsLoopback(host)) {
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
            HttpServerResponse.setCookieUnsafe(Security.tokenCookie, token, cookieOptions(base))
          )
        } else {
          const fromCookie = request.cookies[Security.tokenCookie]
          if (fromCookie === undefined || !Security.same(fromCookie, token)) return unauthorized(route.api)
        }
      }
      const client = clientOf(request, yield* Effect.serviceOption(RemoteAddress), settings.trustProxy)
      const authorized = yield* Effect.result(authorizeWith(settings, infoOf(request, client)))
      if (Result.isFailure(authorized)) return answer(authorized.failure)
      const principal = authorized.success
      if (principal.access === "forbidden")
        return answer(new Refusal(403, "Forbidden", "this request may not see the admin UI"))
      const canChange = principal.access === "full" && !settings.readOnly
      canChangeKnown = canChange
      // The cookie only names the browser; its token is this server's MAC of it, so a planted cookie gets nowhere.
      const cookieCsrf = request.cookies[Security.csrfCookie]
      const newCsrf = Security.isBrowserId(cookieCsrf) ? undefined : Security.freshCsrf()
      const csrf = Security.csrfToken(settings.secret, newCsrf ?? cookieCsrf!, principal.who)
      const locks = yield* Effect.result(Locks.make(settings.prefix === undefined ? {} : { prefix: settings.prefix }))
      if (Result.isFailure(locks)) return answer(failureOf(locks.failure))
      const frame: Pages.Frame = { base, prefix: locks.success.prefix, canChange, csrf }
      const who = principal.who ?? anonymousWho(client)
      const context: RequestContext = {
        request,
        frame,
        who,
        query: url.searchParams,
        locks: locks.success,
        newCsrf,
        secret: settings.secret,
        reaperGrace: settings.reaperGrace
      }
      if (route.method === "POST") {
        const action = route.action ?? "change"
        const refuse = (refusal: Refusal) =>
          Effect.andThen(
            Effect.andThen(
              counted(action, "refused"),
              Effect.logWarning(`admin ${action} refused`).pipe(Effect.annotateLogs({ who, reason: refusal.reason }))
            ),
            Effect.succeed(answer(refusal))
          )
        if (!canChange) {
          return yield* refuse(
            new Refusal(
              403,
              "Read-only",
              settings.readOnly ? "this admin UI is read-only" : "this request may only read"
            )
          )
        }
        const cross = Security.crossOrigin(request.headers, settings.trustProxy)
        if (cross !== undefined)
          return yield* refuse(new Refusal(403, "Cross-origin", `a change from another site is refused: ${cross}`))
        if (!bearer) {
          const fields = yield* Effect.result(fieldsOf(request))
          const sent = request.headers["x-csrf-token"] ?? (Result.isSuccess(fields) ? fields.success._csrf : undefined)
          if (newCsrf !== undefined || sent === undefined || !Security.same(sent, csrf)) {
            return yield* refuse(
              new Refusal(
                403,
                "CSRF token missing",
                "a change carries the CSRF token of a page of this admin UI; reload the page and try again"
              )
            )
          }
        }
      }
      // A change that acted counts itself ("done", or "nothing" when it found nothing to act on).
      const response = yield* Effect.result(gate.run(route.handler(context)))
      if (route.method === "POST" && Result.isFailure(response)) yield* counted(route.action ?? "change", "failed")
      const out = Result.isSuccess(response)
        ? response.success
        : response.failure instanceof Gate.Busy
        ? HttpServerResponse.setHeader(answer(response.failure), "retry-after", String(Gate.retryAfterSeconds))
        : answer(response.failure)
      return newCsrf === undefined
        ? out
        : HttpServerResponse.setCookieUnsafe(out, Security.csrfCookie, newCsrf, cookieOptions(base))
    })
  // The 404s come last in the table only for reading: the router prefers any route that names its path.
  return [
    ...table.map((route) => HttpRouter.route(route.method, route.path, serve(route))),
    HttpRouter.route("*", "/api/*", serve(notFound(true))),
    HttpRouter.route("*", "*", serve(notFound(false)))
  ]
}

// The routes as one handler, for `serve` and `nodeHandler`: a router of their own, built in the scope given.
const appOf = (routes: ReadonlyArray<HttpRouter.Route<never, RedisService>>) =>
  HttpRouter.toHttpEffect(HttpRouter.addAll(routes))

type WebHandler = (request: Request, context?: Context.Context<never>) => Promise<Response>

type AppServices = RedisService | HttpServerRequest.HttpServerRequest | Scope.Scope

// A web handler over the app, with the services it runs on (the store, the caller's logger and JobQueue).
const webHandlerOf = <E>(
  services: Context.Context<RedisService>,
  app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, AppServices>
): WebHandler => HttpEffect.toWebHandlerWith<RedisService, AppServices>(services)(app)

const settingsFrom = (options: Options, loopbackHosts: boolean) =>
  Result.map(decodeSettings(options), (decoded): Settings => ({ ...decoded, loopbackHosts }))

/**
 * The admin UI's routes, to add under a path of your Effect HTTP app's `HttpRouter`:
 * `HttpRouter.addAll(Web.router(options), { prefix: "/admin/locks" })`; its links follow the prefix. Each option is
 * decoded here: a bad one fails with `InvalidLockOptions` naming it.
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { HttpRouter } from "effect/http"
 * import * as Web from "effect-unique-jobs/Web"
 *
 * const Admin = HttpRouter.addAll(Web.router({ readOnly: true }), { prefix: "/admin/locks" })
 * const App = Layer.mergeAll(Admin) // with your own routes, served by HttpRouter.serve
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const router = (
  options: Options = {}
): Effect.Effect<ReadonlyArray<HttpRouter.Route<never, RedisService>>, InvalidLockOptions> =>
  Effect.map(Effect.fromResult(settingsFrom(options, false)), makeRoutes)

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
  const settings = Result.getOrThrowWith(settingsFrom(rest, false), (error) => error)
  const routes = makeRoutes(settings)
  // The store is built at the first request, and again at the next one after a build that failed (Redis was down
  // when the app started): a failed build is answered 503, never kept.
  let built: { readonly scope: Scope.Closeable; readonly handler: WebHandler } | undefined
  let building: Promise<NonNullable<typeof built>> | undefined
  let disposed = false
  const build = (): Promise<NonNullable<typeof built>> => {
    const scope = Scope.makeUnsafe()
    const handler = Effect.gen(function*() {
      const services = yield* Layer.buildWithScope(redis, scope)
      const app = yield* Scope.provide(appOf(routes), scope)
      return webHandlerOf(services, app)
    })
    return Effect.runPromise(handler).then(
      (handler) => (built = { scope, handler }),
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
      const ready = built ?? (await (building ??= build()))
      return await ready.handler(request, context)
    } catch (error) {
      const reason = `the admin UI's store is not ready: ${error instanceof Error ? error.message : String(error)}`
      const api = new URL(request.url).pathname.includes("/api/")
      const base = context === undefined ? "" : Option.getOrElse(Context.getOption(context, BasePath), () => "")
      const refusal = new Refusal(503, "Redis did not answer", reason)
      const { body, contentType } = refusalBody(refusal, api, { base, prefix: settings.prefix ?? "" })
      return new Response(body, { status: 503, headers: { ...securityHeaders, "content-type": contentType } })
    }
  }
  return {
    handle: toNode(web, { basePath }),
    dispose: async () => {
      disposed = true
      const current = built ?? (await building?.catch(() => undefined))
      if (current !== undefined) await Effect.runPromise(Scope.close(current.scope, Exit.void))
    }
  }
}

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
): Effect.Effect<
  { readonly url: string; readonly host: string; readonly port: number },
  WebError | InvalidLockOptions,
  RedisService | Scope.Scope
> =>
  Effect.gen(function*() {
    const host = options.host ?? "127.0.0.1"
    const port = options.port ?? 0
    if (!Number.isSafeInteger(port) || port < 0 || port > 65535) {
      return yield* Effect.fail(
        invalidOptions([
          { field: "port", reason: `expected a whole number from 0 to 65535, got ${describeValue(port)}` }
        ])
      )
    }
    if (typeof host !== "string" || host === "") {
      return yield* Effect.fail(
        invalidOptions([{ field: "host", reason: `expected a host name or address, got ${describeValue(host)}` }])
      )
    }
    const loopback = Security.isLoopback(host)
    if (!loopback && options.token === undefined) {
      return yield* Effect.fail(
        new WebError({
          reason: `serving on ${host} (not the loopback) needs a token: set UNIQUE_JOBS_WEB_TOKEN or pass token`
        })
      )
    }
    const settings = yield* Effect.fromResult(settingsFrom(options, loopback && options.token === undefined))
    const services = yield* Effect.context<RedisService>()
    const app = yield* appOf(makeRoutes(settings))
    const server = createServer(toNode(webHandlerOf(services, app)))
    // Idle keep-alive connections must not hold the process once the scope closes.
    yield* Effect.addFinalizer(() =>
      Effect.callback<void>((resume) => {
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      })
    )
    const address = yield* Effect.callback<AddressInfo, WebError>((resume) => {
      server.once("error", (error) =>
        resume(Effect.fail(new WebError({ reason: `cannot listen on ${host}:${port}: ${error.message}` })))
      )
      server.listen(port, host, () => resume(Effect.succeed(server.address() as AddressInfo)))
    })
    const shown = address.family === "IPv6" ? `[${address.address}]` : address.address
    return { url: `http://${shown}:${address.port}`, host: address.address, port: address.port }
  })
