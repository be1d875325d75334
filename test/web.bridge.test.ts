/**
 * The Node bridge of the admin UI (`web/Node.ts`) at the edges a page's body meets: a body that fails mid-way, a
 * client that goes away mid-page, a client that stops reading. Counted, never timed.
 */
import { createServer, get, type Server } from "node:http"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { toNode } from "../src/web/Node.js"

const chunk = 64 * 1024

describe("the admin UI's Node bridge", () => {
  let server: Server
  let port = 0
  let cancelled = 0
  let pulled = 0
  const uncaught: Array<unknown> = []
  const onUncaught = (error: unknown) => void uncaught.push(error)

  beforeAll(async () => {
    process.on("uncaughtException", onUncaught)
    server = createServer(toNode(async (request: Request) => {
      const path = new URL(request.url).pathname
      if (path === "/fail") {
        let n = 0
        return new Response(
          new ReadableStream({
            pull(controller) {
              if (n++ < 2) controller.enqueue(new TextEncoder().encode("chunk\n"))
              else controller.error(new Error("the page failed mid-way"))
            }
          })
        )
      }
      // Produces as fast as it is read: a bridge that ignored backpressure would read all of it.
      return new Response(
        new ReadableStream({
          pull(controller) {
            pulled++
            controller.enqueue(new Uint8Array(chunk))
          },
          cancel() {
            cancelled++
          }
        }, { highWaterMark: 0 })
      )
    }))
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    port = (server.address() as { port: number }).port
  })
  afterAll(() => {
    process.off("uncaughtException", onUncaught)
    server.closeAllConnections()
    server.close()
  })

  const until = async (done: () => boolean) => {
    for (let i = 0; i < 500 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
  }

  it("a body that fails mid-way cuts the response short: the client sees it incomplete, and nothing is thrown", async () => {
    const seen = await new Promise<{ readonly body: string; readonly complete: boolean }>((resolve, reject) => {
      // A response left open (the body's failure lost) never closes: answered as a hang instead of waiting on it.
      setTimeout(() => resolve({ body: "(the response was left open)", complete: false }), 10_000).unref()
      get({ host: "127.0.0.1", port, path: "/fail" }, (response) => {
        let body = ""
        response.on("data", (data) => (body += data))
        response.on("error", () => resolve({ body, complete: response.complete }))
        response.on("close", () => resolve({ body, complete: response.complete }))
      }).on("error", reject)
    })
    assert.isFalse(seen.complete)
    // What was sent before the failure, and nothing more.
    assert.include(["chunk\n", "chunk\nchunk\n"], seen.body)
    assert.deepStrictEqual(uncaught, [])
  })

  it("a client that stops reading holds the body back, and one that goes away cancels it", async () => {
    let read = 0
    const request = get({ host: "127.0.0.1", port, path: "/endless" }, (response) => {
      response.on("data", (data: Buffer) => {
        read += data.length
        if (read > 1_000_000) response.pause()
      })
    })
    request.on("error", () => undefined)
    await until(() => read > 1_000_000)
    // Stalled: the bridge stops pulling once the socket's buffers are full (a few MB), far short of the 64 MB below.
    let before = -1
    await until(() => {
      const settled = pulled === before
      before = pulled
      return settled
    })
    assert.isBelow(pulled * chunk, 64 * 1024 * 1024)
    request.destroy()
    await until(() => cancelled > 0)
    assert.strictEqual(cancelled, 1)
    assert.deepStrictEqual(uncaught, [])
  })
})
