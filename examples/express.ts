/**
 * The admin UI mounted in an Express app under /admin/locks, the way Bull Board mounts: `Web.nodeHandler` gives a
 * Node request handler over a store layer. Run with `REDIS_URL=redis://127.0.0.1:6379 npx tsx examples/express.ts`
 * (PORT picks the port, default 3000); a test runs it.
 */
import express from "express"
import { Redis, Web } from "effect-unique-jobs"

const admin = Web.nodeHandler({
  redis: Redis.layer({ url: process.env.REDIS_URL ?? "redis://127.0.0.1:6379" }),
  prefix: process.env.LOCK_PREFIX,
  // Your own authentication decides: here, a header your proxy sets. Read-only for everyone else.
  authorize: (request) => (request.headers["x-admin"] === "yes" ? "full" : "read-only")
})

const app = express()
app.get("/", (_request, response) => {
  response.send(`<a href="/admin/locks/">the lock admin</a>`)
})
app.use("/admin/locks", admin.handle)

const server = app.listen(Number(process.env.PORT ?? 3000), "127.0.0.1", () => {
  const address = server.address()
  const port = typeof address === "object" && address !== null ? address.port : 0
  console.log(`admin UI at http://127.0.0.1:${port}/admin/locks/`)
})

// Closing the server, then the store, lets the process exit.
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    server.close(() => void admin.dispose())
    server.closeAllConnections()
  })
}
