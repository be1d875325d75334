/**
 * How the admin UI answers: its security headers on every response, pages and JSON, the refusals (a status, a title,
 * a reason) that failures become, its cookies, and the fields of a POST.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Redacted from "effect/Redacted"
import { type InvalidLockOptions, isRecord } from "../options/Decoding.js"
import type * as Locks from "../Locks.js"
import type { RedisError } from "../Redis.js"
import type { Html } from "./Html.js"
import * as Pages from "./Pages.js"

/** A request refused or failed, with its status: a page or a JSON answer, by the route. */
export class Refusal {
  constructor(
    readonly status: number,
    readonly title: string,
    readonly reason: string
  ) {}
}

export const securityHeaders = {
  "content-security-policy":
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; " +
    "base-uri 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "same-origin",
  "x-frame-options": "DENY",
  "cache-control": "no-store"
}

export const failureOf = (
  error:
    | RedisError
    | InvalidLockOptions
    | Locks.NotALock
    | Locks.HoldersChanged
    | { readonly _tag: "QueueError"; readonly message: string }
) => {
  switch (error._tag) {
    case "InvalidLockOptions":
      return new Refusal(400, "Bad request", error.message)
    case "NotALock":
      return new Refusal(409, "Not a lock", error.message)
    case "HoldersChanged":
      return new Refusal(409, "The lock changed", error.message)
    case "RedisError":
      // Redis answered with an error (a key of another type under the prefix): it is there, but refused the call.
      return /^(WRONGTYPE|ERR|NOSCRIPT|OOM|READONLY|NOPERM)\b/.test(error.reason)
        ? new Refusal(500, "Redis refused the call", error.message)
        : new Refusal(503, "Redis did not answer", error.message)
    default:
      return new Refusal(503, "The queue did not answer", error.message)
  }
}

export const withHeaders = (response: HttpServerResponse.HttpServerResponse) =>
  HttpServerResponse.setHeaders(response, securityHeaders)

export const pageResponse = (page: Html, status = 200) =>
  withHeaders(HttpServerResponse.text(page.value, { status, contentType: "text/html; charset=utf-8" }))

export const jsonResponse = (body: unknown, status = 200) =>
  withHeaders(HttpServerResponse.jsonUnsafe(body, { status }))

/**
 * Where a refusal is answered: the mount, the prefix, and the request's mode when it is known by then (the error page
 * shows the "read-only" badge only for a request that may not change; undefined shows none).
 */
export interface RefusalFrame {
  readonly base: string
  readonly prefix: string
  readonly canChange?: boolean | undefined
}

/** A refusal as a route answers it: a JSON call's `{ error, message }`, or a page's error page. */
export const refusalBody = (
  refusal: Refusal,
  api: boolean,
  frame: RefusalFrame
): { readonly body: string; readonly contentType: string } =>
  api
    ? { body: JSON.stringify({ error: refusal.title, message: refusal.reason }), contentType: "application/json" }
    : {
      body: Pages.errorPage(
        { base: frame.base, prefix: frame.prefix, canChange: frame.canChange, csrf: "" },
        refusal.status,
        refusal.title,
        refusal.reason
      ).value,
      contentType: "text/html; charset=utf-8"
    }

/** `refusalBody` as the response, with its status and the security headers. */
export const refusalResponse = (refusal: Refusal, api: boolean, frame: RefusalFrame) => {
  const { body, contentType } = refusalBody(refusal, api, frame)
  return withHeaders(HttpServerResponse.text(body, { status: refusal.status, contentType }))
}

export const unauthorized = (api: boolean) => {
  const reason = "this admin UI needs its token: an Authorization: Bearer header, or ?token= once in the address"
  const response = api
    ? jsonResponse({ error: "Unauthorized", message: reason }, 401)
    : withHeaders(HttpServerResponse.text(`401 Unauthorized: ${reason}\n`, { status: 401 }))
  return HttpServerResponse.setHeader(response, "www-authenticate", "Bearer")
}

export const cookieOptions = (base: string) => ({
  path: base === "" ? "/" : base,
  httpOnly: true,
  sameSite: "strict" as const
})

/** The string fields of a POST: a form, or a JSON object. */
export const fieldsOf = (
  request: HttpServerRequest.HttpServerRequest
): Effect.Effect<Record<string, string>, Refusal> => {
  const type = request.headers["content-type"] ?? ""
  const bad = (what: string) => new Refusal(400, "Bad request", `the body is not ${what}`)
  if (type.includes("application/json")) {
    return Effect.flatMap(
      Effect.mapError(request.json, () => bad("JSON")),
      (body) =>
        isRecord(body)
          ? Effect.succeed(
              Object.fromEntries(
                Object.entries(body).flatMap(([k, v]) =>
                  typeof v === "string"
                    ? [[k, v]]
                    : typeof v === "boolean" || typeof v === "number"
                      ? [[k, String(v)]]
                      : []
                )
              )
            )
          : Effect.fail(bad("a JSON object"))
    )
  }
  return Effect.map(
    Effect.mapError(request.urlParamsBody, () => bad("a form")),
    (params) => {
      const out: Record<string, string> = {}
      for (const [k, v] of params) if (!(k in out)) out[k] = typeof v === "string" ? v : Redacted.value(v)
      return out
    }
  )
}

/** A store or admin failure as the refusal it is answered with. */
export const mapFailure = <A, R>(
  effect: Effect.Effect<
    A,
    | RedisError
    | InvalidLockOptions
    | Locks.NotALock
    | Locks.HoldersChanged
    | { readonly _tag: "QueueError"; readonly message: string },
    R
  >
) => Effect.mapError(effect, failureOf)
