/**
 * The bridge between Node's `http` request handlers and a web handler (`(Request) => Promise<Response>`), for
 * mounting the admin UI in Express, Fastify, Koa or a bare `http.Server`, and the path it is mounted under.
 *
 * @internal
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { pipeline, Readable } from "node:stream"
import * as Context from "effect/Context"

/** The path the UI is mounted under ("" at the root), given by the bridge to every request. @internal */
export class BasePath extends Context.Service<BasePath, string>()("effect-unique-jobs/web/BasePath") {}

/**
 * The client's address as the Node socket saw it, given by the bridge to every request: a web `Request` has none, so
 * without it a change made through `serve` or `nodeHandler` would name no one. @internal
 */
export class RemoteAddress extends Context.Service<RemoteAddress, string>()("effect-unique-jobs/web/RemoteAddress") {}

/** A Node request handler, Express-style: `next` (when given) gets what the handler could not do. */
export type NodeHandler = (request: IncomingMessage, response: ServerResponse, next?: (error?: unknown) => void) => void

/** The largest request body read: the UI's forms are a few fields. @internal */
export const maxBodyBytes = 64 * 1024

const bodyOf = (request: IncomingMessage): Promise<Buffer | undefined> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    request.on("data", (chunk: Buffer) => {
      if (size > maxBodyBytes) return
      size += chunk.length
      if (size > maxBodyBytes) {
        // Answered at once; the rest is read and dropped, so the answer reaches the client.
        chunks.length = 0
        reject(new RangeError(`a request body over ${maxBodyBytes} bytes`))
        return
      }
      chunks.push(chunk)
    })
    request.on("end", () => resolve(chunks.length === 0 ? undefined : Buffer.concat(chunks)))
    request.on("error", reject)
  })

/**
 * The path a handler is mounted under, from the request's whole path and the part left to the handler: `/admin/locks`
 * for `/admin/locks/lock` and `/lock`, and for `/admin/locks` or `/admin/locks/` and `/`. Undefined when the two do
 * not fit (no mount to tell).
 *
 * @internal
 */
export const mountOf = (original: string, own: string): string | undefined => {
  const whole = original.split("?")[0]!
  const rest = own.split("?")[0]!
  if (rest === "/" || rest === "") return whole.replace(/\/+$/, "")
  return whole.endsWith(rest) ? whole.slice(0, whole.length - rest.length).replace(/\/+$/, "") : undefined
}

// Where the handler is mounted: Express gives it as `baseUrl`; otherwise the difference of `originalUrl` (Express,
// Fastify's middie, Koa's mount) and `url`; else the option, if given (an Effect router mounted inside finds its own).
const baseOf = (request: IncomingMessage, fallback: string | undefined): string | undefined => {
  const withBase = request as IncomingMessage & { readonly baseUrl?: unknown; readonly originalUrl?: unknown }
  if (typeof withBase.baseUrl === "string") return withBase.baseUrl.replace(/\/$/, "")
  if (typeof withBase.originalUrl === "string" && request.url !== undefined) {
    const mounted = mountOf(withBase.originalUrl, request.url)
    if (mounted !== undefined) return mounted
  }
  return fallback
}

/**
 * A Node handler over a web handler. The request's body is read whole (at most `maxBodyBytes`, else 413); the
 * answer's is streamed, with the socket's backpressure; a handler that fails answers 500 (or goes to `next`).
 *
 * @internal
 */
export const toNode =
  (
    web: (request: Request, context?: Context.Context<never>) => Promise<Response>,
    options: { readonly basePath?: string | undefined } = {}
  ): NodeHandler =>
  (request, response, next) => {
    const fail = (status: number, text: string) => {
      if (!response.headersSent) {
        response.writeHead(status, {
          "content-type": "text/plain; charset=utf-8",
          "cache-control": "no-store",
          connection: "close"
        })
      }
      response.end(text)
    }
    const run = async () => {
      const method = request.method ?? "GET"
      const body = method === "GET" || method === "HEAD" ? undefined : await bodyOf(request)
      const headers = new Headers()
      for (const [name, value] of Object.entries(request.headers)) {
        if (value === undefined) continue
        for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one)
      }
      // The Host header is read by the handler's own checks; the URL needs only the path (a Host that is no host name
      // must not throw here).
      const url = new URL(request.url ?? "/", "http://localhost")
      const base = baseOf(request, options.basePath)
      const remote = request.socket?.remoteAddress
      let context: Context.Context<never> = Context.empty()
      if (base !== undefined) context = Context.add(context, BasePath, base) as Context.Context<never>
      if (remote !== undefined) context = Context.add(context, RemoteAddress, remote) as Context.Context<never>
      const answer = await web(new Request(url, { method, headers, ...(body === undefined ? {} : { body }) }), context)
      const out: Record<string, string | Array<string>> = {}
      answer.headers.forEach((value, name) => {
        if (name !== "set-cookie") out[name] = value
      })
      const cookies = answer.headers.getSetCookie()
      if (cookies.length > 0) out["set-cookie"] = cookies
      response.writeHead(answer.status, out)
      if (answer.body === null || method === "HEAD") {
        response.end()
        return
      }
      // `pipeline`, not `pipe`: a client that goes away cancels the body (a streamed one stops being produced), and a
      // body that fails mid-way cuts the response short (the client sees it incomplete) instead of an unhandled
      // 'error' and a response left open. The headers are sent by then: there is nothing left to answer either.
      pipeline(Readable.fromWeb(answer.body as import("node:stream/web").ReadableStream), response, () => {})
    }
    run().catch((error: unknown) => {
      if (error instanceof RangeError) return fail(413, `${error.message} is refused`)
      if (next !== undefined) return next(error)
      fail(500, "internal error")
    })
  }
