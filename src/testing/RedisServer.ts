/**
 * A private `redis-server` on a free loopback port, for tests, demos and benchmarks: started in a scope,
 * stopped with it, and able to be killed and restarted on the same port to inject faults.
 *
 * @since 0.1.0
 */
import type { ChildProcess } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { freePort, notInstalled, spawnServer, stop } from "./RedisProcess.js"

/**
 * No Redis could be had: neither a `redis-server` binary nor a `REDIS_URL`.
 *
 * @since 0.1.0
 * @category errors
 */
export class RedisServerError extends Schema.TaggedError<RedisServerError>("effect-unique-jobs/RedisServerError")(
  "RedisServerError",
  { reason: Schema.String, cause: Schema.optional(Schema.Defect()) }
) {
  override get message(): string {
    return `${this.reason}. Install Redis (Debian/Ubuntu: apt-get install -y redis-server) so a private ` +
      "redis-server can be started, or set REDIS_URL=redis://host:port to use a server you run."
  }
}

/**
 * A running private server.
 *
 * @since 0.1.0
 * @category models
 */
export interface Server {
  readonly url: string
  readonly port: number
  /** SIGKILLs the process (the data is lost: nothing is persisted). */
  readonly kill: Effect.Effect<void>
  /** Starts it again on the same port, empty. */
  readonly restart: Effect.Effect<void, RedisServerError>
}

/**
 * Where a Redis came from.
 *
 * @since 0.1.0
 * @category models
 */
export interface Source {
  readonly url: string
  readonly source: "private" | "REDIS_URL"
  /** Present for a private server. */
  readonly server: Server | undefined
}

/**
 * Starts a private server on a free loopback port; it is killed when the scope closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const start: Effect.Effect<Server, RedisServerError, Scope.Scope> = Effect.gen(function*() {
  const dir = mkdtempSync(join(tmpdir(), "unique-jobs-redis-"))
  const launch = (port: number) =>
    Effect.tryPromise({
      try: () => spawnServer(port, dir),
      catch: (cause) =>
        new RedisServerError({
          reason: (cause as NodeJS.ErrnoException).code === "ENOENT"
            ? notInstalled
            : `redis-server did not start: ${String(cause)}`,
          cause
        })
    })
  const state: { child: ChildProcess | undefined } = { child: undefined }
  const kill = Effect.promise(() => (state.child === undefined ? Promise.resolve() : stop(state.child)))
  yield* Effect.addFinalizer(() =>
    kill.pipe(Effect.ensuring(Effect.sync(() => rmSync(dir, { recursive: true, force: true }))))
  )
  const port = yield* Effect.gen(function*() {
    const port = yield* Effect.promise(freePort)
    state.child = yield* launch(port)
    return port
  }).pipe(Effect.retry({ times: 2, while: (e) => e.reason !== notInstalled }))
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    kill,
    restart: Effect.flatMap(kill, () =>
      Effect.map(launch(port), (child) => {
        state.child = child
      }))
  }
})

/**
 * A private server when `redis-server` is installed, else `REDIS_URL`, else a `RedisServerError` that says how
 * to get Redis.
 *
 * @since 0.1.0
 * @category constructors
 */
export const acquire: Effect.Effect<Source, RedisServerError, Scope.Scope> = start.pipe(
  Effect.map((server): Source => ({ url: server.url, source: "private", server })),
  Effect.catch((error) => {
    const url = process.env.REDIS_URL
    return url !== undefined && url !== ""
      ? Effect.succeed<Source>({ url, source: "REDIS_URL", server: undefined })
      : Effect.fail(error)
  })
)
