/**
 * What the admin UI's tests share: a private redis-server and a store on it, run from plain async code, the locks
 * each test seeds under its own prefix, and the UI served three ways (`Web.serve`, an Effect `HttpRouter` mount, the
 * Express example in a child process).
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as HttpEffect from "effect/http/HttpEffect"
import * as HttpRouter from "effect/http/HttpRouter"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import { spawn } from "node:child_process"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { fileURLToPath } from "node:url"
import * as Lock from "../../src/Lock.js"
import * as LockOptions from "../../src/Options.js"
import * as Redis from "../../src/Redis.js"
import * as RedisServer from "../../src/testing/RedisServer.js"
import * as Web from "../../src/Web.js"
import { toNode } from "../../src/web/Node.js"

export interface Harness {
  readonly url: string
  readonly store: Redis.Store
  readonly run: <A, E>(effect: Effect.Effect<A, E, Redis.RedisService | Scope.Scope>) => Promise<A>
  readonly close: () => Promise<void>
}

export const start = async (): Promise<Harness> => {
  const scope = Effect.runSync(Scope.make())
  const source = await Effect.runPromise(Scope.provide(RedisServer.acquire, scope))
  const store = await Effect.runPromise(Scope.provide(Redis.make({ url: source.url }), scope))
  const run = <A, E>(effect: Effect.Effect<A, E, Redis.RedisService | Scope.Scope>) =>
    Effect.runPromise(Scope.provide(Effect.provideService(effect, Redis.RedisService, store), scope))
  return { url: source.url, store, run, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

export const markup = ["<script>alert(1)</script>", "\"><img src=x onerror=alert(1)>"] as const

/**
 * 12 locks under `prefix`: 4 until_executed on queue "mail" by worker "Mailer" (one with markup in its jid and
 * arguments), 3 until_expired whose TTL has passed (stale), 2 while_executing run locks, 3 until_executing on queue
 * "billing".
 */
export const seed = (prefix: string) =>
  Effect.gen(function*() {
    const options = (lock: LockOptions.Options["lock"], more: Partial<LockOptions.Options> = {}) =>
      LockOptions.unsafeMake({ lock, lockPrefix: prefix, lockInfo: true, ...more })
    const mail = options("until_executed", { lockTtl: 3_600_000 })
    const jids = ["m0", markup[0], markup[1], "m3"]
    for (const [i, jid] of jids.entries()) {
      yield* Lock.lock(mail, {
        digest: `${prefix}:mail${i}`,
        jid,
        info: { worker: i === 2 ? `Mailer${markup[1]}` : "Mailer", queue: "mail", args: [markup[0], { note: markup[1] }] }
      })
    }
    const expired = options("until_expired", { lockTtl: 30 })
    for (let i = 0; i < 3; i++) {
      yield* Lock.lock(expired, { digest: `${prefix}:old${i}`, jid: `o${i}`, info: { worker: "Cleaner", queue: "low", args: [] } })
    }
    const running = options("while_executing", { lockLease: 600_000 })
    for (let i = 0; i < 2; i++) {
      yield* Lock.lock(running, { digest: `${prefix}:run${i}`, jid: `r${i}`, phase: "run", info: { worker: "Runner", queue: "fast", args: [] } })
    }
    const billing = options("until_executing")
    for (let i = 0; i < 3; i++) {
      yield* Lock.lock(billing, { digest: `${prefix}:bill${i}`, jid: `b${i}`, info: { worker: "Biller", queue: "billing", args: [i] } })
    }
    // The until_expired locks' TTL passes: their members are what the next reaper pass removes.
    yield* Effect.sleep(80)
  })

/** `n` queue locks with a TTL under `prefix`, sent 256 at a time. */
export const seedMany = (prefix: string, n: number) =>
  Effect.flatMap(Redis.RedisService, (store) =>
    Effect.forEach(
      Array.from({ length: n }, (_, i) => i),
      (i) =>
        store.lock({ prefix, name: `${prefix}:many${i}` }, {
          jid: `j${i}`,
          limit: 1,
          ttlMs: 3_600_000,
          leaseMs: 0,
          info: "",
          fenced: false
        }),
      { concurrency: 256, discard: true }
    ))

const listen = (handler: Parameters<typeof createServer>[1]) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly port: number; readonly close: () => void }>((resume) => {
      const server = createServer(handler)
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          port: (server.address() as AddressInfo).port,
          close: () => {
            server.close()
            server.closeAllConnections()
          }
        })))
    }),
    (server) => Effect.sync(server.close)
  )

/** The UI as an Effect `HttpRouter` mounted under `/admin/locks` of an app, on Node's http: its base URL. */
export const mountedInRouter = (options: Web.Options) =>
  Effect.gen(function*() {
    const app = yield* HttpRouter.toHttpEffect(Layer.mergeAll(
      HttpRouter.add("GET", "/", HttpServerResponse.text("the user's own app")),
      HttpRouter.addAll(Web.router(options), { prefix: "/admin/locks" })
    ))
    const services = yield* Effect.context<Redis.RedisService>()
    const handler = HttpEffect.toWebHandlerWith<
      Redis.RedisService,
      Redis.RedisService | HttpServerRequest.HttpServerRequest | Scope.Scope
    >(services)(app)
    const server = yield* listen(toNode(handler))
    return `http://127.0.0.1:${server.port}/admin/locks`
  })

/** The Express example in a child process on a free port: its base URL, and a stop that waits for its exit. */
export const expressExample = (redisUrl: string, prefix: string) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly url: string; readonly stop: () => Promise<number | null> }, Error>((resume) => {
      const path = fileURLToPath(new URL("../../examples/express.ts", import.meta.url))
      const child = spawn(process.execPath, ["--import", "tsx", path], {
        env: { ...process.env, REDIS_URL: redisUrl, PORT: "0", LOCK_PREFIX: prefix },
        stdio: ["ignore", "pipe", "pipe"]
      })
      let out = ""
      let err = ""
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
      child.stderr.on("data", (chunk: Buffer) => {
        err += chunk.toString()
      })
      child.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString()
        const match = /admin UI at (http:\/\/\S+?)\/?\n/.exec(out)
        if (match !== null) {
          resume(Effect.succeed({
            url: match[1]!,
            stop: () => {
              child.kill("SIGTERM")
              return exited
            }
          }))
        }
      })
      void exited.then((code) => resume(Effect.fail(new Error(`the example exited (${code}) before listening: ${out}${err}`))))
    }),
    (example) => Effect.promise(example.stop)
  )
