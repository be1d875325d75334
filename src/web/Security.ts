/**
 * The admin UI's request checks: who may do what (the token, the `authorize` hook, read-only), the CSRF token of a
 * change, the origin a change comes from, and the Host a loopback server answers to.
 *
 * @internal
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"

/**
 * What a request may do: read and change, only read, or nothing.
 *
 * @since 0.1.0
 * @category models
 */
export type Access = "full" | "read-only" | "forbidden"

/** The cookies the UI sets: the token given once in the URL, and the browser's CSRF token. @internal */
export const tokenCookie = "unique_jobs_token"
/** @internal */
export const csrfCookie = "unique_jobs_csrf"

/** A fresh browser id for the CSRF cookie: 32 random bytes, hex. @internal */
export const freshCsrf = (): string => randomBytes(32).toString("hex")

/** Whether a CSRF cookie is one this UI could have set (a fresh one is set otherwise). @internal */
export const isBrowserId = (value: string | undefined): value is string =>
  value !== undefined && /^[0-9a-f]{64}$/.test(value)

/** A server's signing secret when none is given: 32 random bytes, made when the router is. @internal */
export const freshSecret = (): Uint8Array => randomBytes(32)

/** An HMAC-SHA256 of `data` for one `purpose` (so a MAC made for one use is never valid for another). @internal */
export const sign = (secret: Uint8Array, purpose: string, data: string): string =>
  createHmac("sha256", secret).update(purpose).update("\0").update(data).digest("base64url")

/**
 * The CSRF token of a browser: the server's MAC of the browser's cookie and of who `authorize` said it is. A page of
 * another site (or another service on this host: cookies ignore ports) can plant a cookie, but cannot make its token.
 *
 * @internal
 */
export const csrfToken = (secret: Uint8Array, browser: string, who: string | undefined): string =>
  sign(secret, "csrf", `${browser}\0${who ?? ""}`)

/**
 * A value carried in an address (a change's result), signed and bound to `bind` (the page it is shown on): base64url
 * JSON, a dot, its MAC. @internal
 */
export const seal = (secret: Uint8Array, bind: string, payload: unknown): string => {
  const body = Buffer.from(JSON.stringify(payload)).toString("base64url")
  return `${body}.${sign(secret, "sealed", `${bind}\0${body}`)}`
}

/** What `seal` sealed for `bind`, or undefined for anything else (not ours, altered, another page's). @internal */
export const unseal = (secret: Uint8Array, bind: string, sealed: string | null): unknown => {
  if (sealed === null || sealed.length > 8192) return undefined
  const dot = sealed.lastIndexOf(".")
  const body = sealed.slice(0, dot)
  if (dot < 0 || !same(sealed.slice(dot + 1), sign(secret, "sealed", `${bind}\0${body}`))) return undefined
  try {
    return JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as unknown
  } catch {
    return undefined
  }
}

/** Equal strings, compared in time that does not depend on where they differ. @internal */
export const same = (a: string, b: string): boolean => {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

/** The bearer token of an `Authorization` header, if it has one. @internal */
export const bearerOf = (authorization: string | undefined): string | undefined => {
  const match = authorization === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization)
  return match === null ? undefined : match[1]
}

type Headers = Readonly<Record<string, string | undefined>>

// A proxy appends to a forwarded header: the first value is what the client's side of the first proxy saw.
const firstOf = (value: string | undefined): string | undefined => value?.split(",")[0]?.trim() || undefined

/** The Host the request was sent to: `X-Forwarded-Host` only when the app trusts its proxy. @internal */
export const hostOf = (headers: Headers, trustProxy: boolean): string | undefined =>
  (trustProxy ? firstOf(headers["x-forwarded-host"]) : undefined) ?? headers["host"]

/** The client's address by `X-Forwarded-For`, only when the app trusts its proxy. @internal */
export const clientOf = (headers: Headers, trustProxy: boolean): string | undefined =>
  trustProxy ? firstOf(headers["x-forwarded-for"]) : undefined

/**
 * Why a change must be refused for where it comes from, or undefined: an `Origin` other than the request's own host
 * (and scheme, when a trusted proxy names it), or a `Sec-Fetch-Site` other than same-origin or none (typed into the
 * address bar). Forwarded headers count only with `trustProxy`: anyone can send them.
 *
 * @internal
 */
export const crossOrigin = (headers: Headers, trustProxy: boolean): string | undefined => {
  const site = headers["sec-fetch-site"]
  if (site !== undefined && site !== "same-origin" && site !== "none") return `Sec-Fetch-Site is ${site}`
  const origin = headers["origin"]
  if (origin === undefined) return undefined
  const host = hostOf(headers, trustProxy)?.toLowerCase()
  if (host === undefined) return "an Origin without a Host"
  let url: URL
  try {
    url = new URL(origin)
  } catch {
    return `Origin ${origin} is not a URL`
  }
  if (url.host !== host) return `Origin ${origin} is not this server's (${host})`
  const proto = trustProxy ? firstOf(headers["x-forwarded-proto"])?.toLowerCase() : undefined
  return proto === undefined || url.protocol === `${proto}:` ? undefined : `Origin ${origin} is not ${proto}://${host}`
}

const loopbackNames = new Set(["127.0.0.1", "localhost", "[::1]", "::1"])

/** Whether a host name (or address) is the loopback. @internal */
export const isLoopback = (host: string): boolean =>
  loopbackNames.has(host) ||
  (/^127(\.\d{1,3}){3}$/.test(host) && host.split(".").every((octet) => Number(octet) <= 255))

/**
 * Whether a Host header names the loopback: a server bound there answers no other name, so a page of another site
 * that resolves its own name to 127.0.0.1 (DNS rebinding) reaches nothing.
 *
 * @internal
 */
export const hostIsLoopback = (host: string | undefined): boolean => {
  if (host === undefined) return false
  const match = /^(\[[^\]]+\]|[^:[\]]+)(?::(\d{1,5}))?$/.exec(host)
  if (match === null) return false
  // A port is 1 to 65535, in digits: anything else is no address a browser sent.
  const port = match[2] === undefined ? 1 : Number(match[2])
  return port >= 1 && port <= 65535 && isLoopback(match[1]!.toLowerCase())
}
