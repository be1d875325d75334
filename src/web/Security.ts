/**
 * The admin UI's request checks: who may do what (the token, the `authorize` hook, read-only), the CSRF token of a
 * change, the origin a change comes from, and the Host a loopback server answers to.
 *
 * @internal
 */
import { randomBytes, timingSafeEqual } from "node:crypto"

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

/** A fresh CSRF token: 32 random bytes, hex. @internal */
export const freshCsrf = (): string => randomBytes(32).toString("hex")

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

/**
 * Why a change must be refused for where it comes from, or undefined: an `Origin` other than the request's own, or a
 * `Sec-Fetch-Site` other than same-origin or none (typed into the address bar).
 *
 * @internal
 */
export const crossOrigin = (headers: Readonly<Record<string, string | undefined>>): string | undefined => {
  const site = headers["sec-fetch-site"]
  if (site !== undefined && site !== "same-origin" && site !== "none") return `Sec-Fetch-Site is ${site}`
  const origin = headers["origin"]
  if (origin === undefined) return undefined
  const host = headers["x-forwarded-host"] ?? headers["host"]
  if (host === undefined) return "an Origin without a Host"
  let originHost: string
  try {
    originHost = new URL(origin).host
  } catch {
    return `Origin ${origin} is not a URL`
  }
  return originHost === host ? undefined : `Origin ${origin} is not this server's (${host})`
}

const loopbackNames = new Set(["127.0.0.1", "localhost", "[::1]", "::1"])

/** Whether a host name (or address) is the loopback. @internal */
export const isLoopback = (host: string): boolean => loopbackNames.has(host) || /^127(\.\d{1,3}){3}$/.test(host)

/**
 * Whether a Host header names the loopback: a server bound there answers no other name, so a page of another site
 * that resolves its own name to 127.0.0.1 (DNS rebinding) reaches nothing.
 *
 * @internal
 */
export const hostIsLoopback = (host: string | undefined): boolean => {
  if (host === undefined) return false
  const match = /^(\[[^\]]+\]|[^:[\]]+)(?::\d{1,5})?$/.exec(host)
  return match !== null && isLoopback(match[1]!.toLowerCase())
}
