/**
 * `RedisService`: the lock store. One typed method per Lua script, each a single round trip; a memory store
 * with the same semantics for users' own tests and for differential tests.
 *
 * @since 0.1.0
 */
import type { RedisOptions as IORedisOptions } from "ioredis"
import { Redis } from "ioredis"
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Runtime from "effect/Runtime"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Memory from "./internal/memory.js"
import * as Scripts from "./internal/scripts.js"

/**
 * A Redis call failed: connection, script, reply or timeout. Carries the cause.
 *
 * @since 0.1.0
 * @category errors
 */
export class RedisError extends Schema.TaggedError<RedisError>("effect-unique-jobs/RedisError")("RedisError", {
  operation: Schema.String,
  reason: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {
  override get message(): string {
    return `Redis ${this.operation} failed: ${this.reason}`
  }
}

/**
 * Which lock a call is about: its name (`<prefix>:<hex>` or `<prefix>:<hex>:RUN`), which is also its member in
 * the `<prefix>:digests` index.
 *
 * @since 0.1.0
 * @category models
 */
export interface LockKey {
  readonly prefix: string
  readonly name: string
}

/**
 * The Redis keys of a lock: its holders hash and its prefix's index.
 *
 * @since 0.1.0
 * @category keys
 */
export const keysOf = (lock: LockKey): { readonly locked: string; readonly index: string } => ({
  locked: `${lock.name}:LOCKED`,
  index: `${lock.prefix}:digests`
})

/**
 * Who asks for a lock and on what terms. Times in milliseconds; 0 means none.
 *
 * @since 0.1.0
 * @category models
 */
export interface HolderRequest {
  readonly jid: string
  readonly limit: number
  /** The entry counts until Redis time + ttl (and the index score is that expiry). */
  readonly ttlMs: number
  /** The entry counts until Redis time + lease unless renewed. */
  readonly leaseMs: number
  /** Compact JSON stored with the entry (`lockInfo`), or `""`. */
  readonly info: string
}

/**
 * @since 0.1.0
 * @category models
 */
export type LockResult =
  | { readonly _tag: "Acquired"; readonly reentrant: boolean }
  | { readonly _tag: "Conflict"; readonly holders: ReadonlyArray<string> }

/**
 * @since 0.1.0
 * @category models
 */
export type HandoffResult = LockResult & {
  /** Whether the job still held its queue lock; false means its uniqueness lapsed (TTL, manual delete). */
  readonly queueLockHeld: boolean
}

/**
 * One entry of a lock's holders hash, as stored.
 *
 * @since 0.1.0
 * @category models
 */
export interface Holder {
  readonly jid: string
  readonly lockedAt: number
  readonly expiresAt: number | undefined
  readonly leaseUntil: number | undefined
  readonly info: unknown
}

/**
 * @since 0.1.0
 * @category tags
 */
export class RedisService extends Context.Tag("effect-unique-jobs/RedisService")<RedisService, {
  /** Takes a place in the lock, evicting holders whose expiry or lease has passed. */
  readonly lock: (lock: LockKey, request: HolderRequest) => Effect.Effect<LockResult, RedisError>
  /** Removes jid's entry; true when jid held the lock. */
  readonly unlock: (lock: LockKey, jid: string) => Effect.Effect<boolean, RedisError>
  /** Moves jid's lease forward; false when the entry is gone (the lock was lost). */
  readonly renew: (lock: LockKey, jid: string, leaseMs: number) => Effect.Effect<boolean, RedisError>
  /** Takes `to` for the holder and releases jid's entry in `from`, atomically. */
  readonly handoff: (
    from: LockKey,
    to: LockKey,
    request: HolderRequest,
    options: { readonly keepOnConflict: boolean }
  ) => Effect.Effect<HandoffResult, RedisError>
  /** The entries of a lock's holders hash. */
  readonly holders: (lock: LockKey) => Effect.Effect<ReadonlyArray<Holder>, RedisError>
}>() {}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** `redis://[user:password@]host:port/db`; a secret when it carries a password. */
  readonly url?: string | Redacted.Redacted<string> | undefined
  /** Per-call limit; a call still unanswered then fails with `RedisError`. Default 5 seconds. */
  readonly timeout?: Duration.DurationInput | undefined
  /** ioredis' automatic pipelining: many concurrent calls share one write. */
  readonly enableAutoPipelining?: boolean | undefined
  /** Anything else ioredis takes. */
  readonly client?: IORedisOptions | undefined
}

const defaultTimeout = Duration.seconds(5)

const toArray = (reply: unknown, operation: string): ReadonlyArray<unknown> => {
  if (Array.isArray(reply)) return reply
  throw new Error(`unexpected ${operation} reply: ${JSON.stringify(reply)}`)
}

const toLockResult = (reply: ReadonlyArray<unknown>): LockResult =>
  Number(reply[0]) === 1
    ? { _tag: "Acquired", reentrant: Number(reply[1]) === 1 }
    : { _tag: "Conflict", holders: reply.slice(1).map(String) }

const toLockResultReply = (reply: unknown): LockResult => toLockResult(toArray(reply, "lock"))

const isOne = (reply: unknown): boolean => Number(reply) === 1

const isCommandTimeout = (cause: unknown): boolean => cause instanceof Error && cause.message === "Command timed out"

const parseHolder = (jid: string, raw: string): Holder => {
  const entry = JSON.parse(raw) as { t: number; x: number; l: number; i?: unknown }
  return {
    jid,
    lockedAt: entry.t,
    expiresAt: entry.x > 0 ? entry.x : undefined,
    leaseUntil: entry.l > 0 ? entry.l : undefined,
    info: entry.i
  }
}

/**
 * The client surface the store needs: ioredis' `Redis` (and later `Cluster`).
 *
 * @since 0.1.0
 * @category models
 */
export type Client = Scripts.ScriptClient & {
  hgetall(key: string): Promise<Record<string, string>>
  script(subcommand: "LOAD", script: string): Promise<unknown>
}

/**
 * A store over a connected client that the caller owns.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeFromClient = (
  client: Client,
  options?: { readonly timeout?: Duration.DurationInput | undefined }
): Effect.Effect<RedisService["Type"], RedisError> =>
  Effect.gen(function*() {
    const scripts = yield* Effect.try({
      try: Scripts.loadScripts,
      catch: (cause) => new RedisError({ operation: "load scripts", reason: "cannot read the lua/ folder", cause })
    })
    const timeout = Duration.decode(options?.timeout ?? defaultTimeout)
    const timeoutMs = Duration.toMillis(timeout)
    const timedOut = (operation: string) =>
      new RedisError({ operation, reason: `no answer within ${Duration.format(timeout)} (the timeout option)` })
    // The hot path: one callback pair per call, and no timer of its own. A fiber per call (Effect.timeout), a
    // setTimeout per call, or a promise chain per call each cost more Node CPU than the Redis call itself.
    const deadlines = Scripts.makeDeadlines(timeoutMs)
    const finish = <A>(
      resume: (effect: Effect.Effect<A, RedisError>) => void,
      operation: string,
      decode: (reply: unknown) => A,
      reply: unknown
    ) => {
      try {
        resume(Effect.succeed(decode(reply)))
      } catch (cause) {
        resume(Effect.fail(new RedisError({ operation, reason: `unexpected reply: ${String(cause)}`, cause })))
      }
    }
    const failWith = <A>(resume: (effect: Effect.Effect<A, RedisError>) => void, operation: string, cause: unknown) =>
      resume(Effect.fail(
        new RedisError({ operation, reason: cause instanceof Error ? cause.message : String(cause), cause })
      ))
    const call = <A>(operation: string, f: () => Promise<unknown>, decode: (reply: unknown) => A) =>
      Effect.async<A, RedisError>((resume) => {
        const pending = deadlines.add(() => resume(Effect.fail(timedOut(operation))))
        f().then(
          (reply) => {
            if (pending.settle()) finish(resume, operation, decode, reply)
          },
          (cause) => {
            if (pending.settle()) failWith(resume, operation, cause)
          }
        )
        // No canceler: an interrupted call's reply settles its deadline, and resuming then is a no-op.
      })
    // EVALSHA, and EVAL when Redis lost the script (NOSCRIPT): `args` is numkeys, the keys, then ARGV.
    // `compensate` undoes a call that timed out: a stalled Redis still runs what it was sent once it resumes, so a
    // lock whose caller already failed would stay held. The undo goes out on the same connection, which Redis
    // answers in order, so it runs after the late call if that ever runs.
    const script = <A>(
      operation: string,
      script: Scripts.Script,
      args: Array<string | number>,
      decode: (reply: unknown) => A,
      compensate?: () => void
    ) =>
      Effect.async<A, RedisError>((resume) => {
        const pending = deadlines.add(() => {
          compensate?.()
          resume(Effect.fail(timedOut(operation)))
        })
        const done = (reply: unknown) => {
          if (pending.settle()) finish(resume, operation, decode, reply)
        }
        const failed = (cause: unknown) => {
          if (pending.settle()) {
            if (compensate !== undefined && isCommandTimeout(cause)) compensate()
            failWith(resume, operation, cause)
          }
        }
        client.evalsha(script.sha, ...(args as [number, ...Array<string | number>])).then(done, (cause: unknown) => {
          // A NOSCRIPT that comes after the deadline is not answered with EVAL: its caller has already failed.
          if (Scripts.isNoScript(cause) && !pending.settled) {
            client.eval(script.source, ...(args as [number, ...Array<string | number>])).then(done, failed)
          } else {
            failed(cause)
          }
        })
      })
    // The compensation of a lock or handoff: release what the late call may take for jid. Fire and forget.
    const releaseLate = (lock: LockKey, jid: string) => () => {
      const keys = keysOf(lock)
      const args: [number, ...Array<string>] = [2, keys.locked, keys.index, jid, lock.name]
      client.evalsha(scripts.unlock.sha, ...args)
        .catch((cause: unknown) => (Scripts.isNoScript(cause) ? client.eval(scripts.unlock.source, ...args) : undefined))
        .catch(() => undefined)
    }

    // Load once now; a later SCRIPT FLUSH is answered by EVAL on NOSCRIPT.
    yield* Effect.forEach(
      Object.values(scripts),
      (script) => call("load scripts", () => client.script("LOAD", script.source), () => undefined),
      { discard: true }
    )

    return RedisService.of({
      lock: (lock, request) => {
        const keys = keysOf(lock)
        return script(
          "lock",
          scripts.lock,
          [
            2,
            keys.locked,
            keys.index,
            request.jid,
            lock.name,
            request.limit,
            request.ttlMs,
            request.leaseMs,
            request.info
          ],
          toLockResultReply,
          releaseLate(lock, request.jid)
        )
      },
      unlock: (lock, jid) => {
        const keys = keysOf(lock)
        return script("unlock", scripts.unlock, [2, keys.locked, keys.index, jid, lock.name], isOne)
      },
      renew: (lock, jid, leaseMs) =>
        script("renew", scripts.renew, [1, keysOf(lock).locked, jid, leaseMs], isOne),
      handoff: (from, to, request, { keepOnConflict }) =>
        script(
          "handoff",
          scripts.handoff,
          [
            3,
            keysOf(from).locked,
            keysOf(to).locked,
            keysOf(to).index,
            request.jid,
            from.name,
            to.name,
            request.limit,
            request.ttlMs,
            request.leaseMs,
            request.info,
            keepOnConflict ? "1" : "0"
          ],
          (reply) => {
            const [held, ...rest] = toArray(reply, "handoff")
            return { ...toLockResult(rest), queueLockHeld: Number(held) === 1 }
          },
          releaseLate(to, request.jid)
        ),
      holders: (lock) =>
        call(
          "holders",
          () => client.hgetall(keysOf(lock).locked),
          (reply) => Object.entries(reply as Record<string, string>).map(([jid, raw]) => parseHolder(jid, raw))
        )
    })
  })

/**
 * A store that owns its ioredis connection: connected (and checked) when built, closed with its scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: Options = {}): Effect.Effect<RedisService["Type"], RedisError, Scope.Scope> =>
  Effect.gen(function*() {
    const timeout = Duration.decode(options.timeout ?? defaultTimeout)
    const clientOptions: IORedisOptions = {
      // Fail fast while disconnected: a lock call queued offline could run long after its caller gave up.
      enableOfflineQueue: false,
      // Never send a command again after a reconnect: its caller has had its answer (a RedisError) long before.
      autoResendUnfulfilledCommands: false,
      lazyConnect: true,
      // ioredis' command timeout too, beside each call's own deadline (makeFromClient): without it a timed-out
      // command stays pending inside ioredis, which changes what its late reply or a reconnect does with it.
      commandTimeout: Duration.toMillis(timeout),
      connectTimeout: Duration.toMillis(timeout),
      enableAutoPipelining: options.enableAutoPipelining ?? false,
      ...options.client
    }
    const url = options.url === undefined
      ? undefined
      : Redacted.isRedacted(options.url)
      ? Redacted.value(options.url)
      : options.url
    const runtime = yield* Effect.runtime<never>()
    // The connect() rejection only says "Connection is closed"; the error event says why.
    let lastError: Error | undefined
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const client = url === undefined ? new Redis(clientOptions) : new Redis(url, clientOptions)
        // Connection errors surface as RedisError on the calls; the event itself is only worth a debug line.
        client.on("error", (error: Error) => {
          lastError = error
          Runtime.runFork(runtime)(
            Effect.logDebug("Redis connection error", error.message).pipe(
              Effect.annotateLogs({ package: "effect-unique-jobs", module: "Redis" })
            )
          )
        })
        return client
      }),
      (client) =>
        Effect.promise(() => client.quit().catch(() => undefined)).pipe(
          Effect.timeoutOption(timeout),
          Effect.ensuring(Effect.sync(() => client.disconnect()))
        )
    )
    yield* Effect.tryPromise({
      try: () => client.connect(),
      catch: (cause) =>
        new RedisError({
          operation: "connect",
          reason: `cannot reach Redis${url === undefined ? "" : " at the configured url"}: ${
            lastError?.message ?? String(cause)
          }`,
          cause
        })
    }).pipe(
      Effect.timeoutFail({
        duration: timeout,
        onTimeout: () => new RedisError({ operation: "connect", reason: `no connection within ${Duration.format(timeout)}` })
      })
    )
    return yield* makeFromClient(client, { timeout })
  })

/**
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<RedisService, RedisError> =>
  Layer.scoped(RedisService, make(options))

/**
 * Reads the options from `Config`; by default the URL from `REDIS_URL`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Config.Wrap<Options> = { url: Config.redacted("REDIS_URL") }
): Layer.Layer<RedisService, RedisError | import("effect/ConfigError").ConfigError> =>
  Layer.scoped(RedisService, Effect.flatMap(Config.unwrap(config), make))

/**
 * A store over a client the caller owns and closes.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerFromClient = (
  client: Client,
  options?: { readonly timeout?: Duration.DurationInput | undefined }
): Layer.Layer<RedisService, RedisError> => Layer.effect(RedisService, makeFromClient(client, options))

/**
 * An in-process store with the scripts' semantics, on Effect's `Clock` (so `TestClock` drives expiry).
 * For users' own tests and for differential tests; it is not shared between processes. Each build of the layer
 * is a new, empty store: provide it once to everything that must see the same locks.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerMemory: Layer.Layer<RedisService> = Layer.sync(RedisService, () => RedisService.of(Memory.make()))
