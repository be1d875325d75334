/**
 * Effect's `Redis` service (`effect/persistence/Redis`) on an ioredis client: `send` as `client.call` within a
 * timeout, `subscribe` and `reserve` on `duplicate()` connections, scripts through Effect's own cache (SCRIPT LOAD,
 * then EVALSHA). On a `Cluster`, SCRIPT LOAD goes to every master, so an EVALSHA routed to any of them finds it.
 *
 * @internal
 */
import type { RedisOptions as IORedisOptions } from "ioredis"
import { Cluster, Redis } from "ioredis"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as PersistenceRedis from "effect/persistence/Redis"
import type * as Scope from "effect/Scope"
import { RedisError } from "./Store.js"

/**
 * An ioredis `Redis` or `Cluster` (a `Cluster` loads scripts on every master).
 *
 * @internal
 */
export type Client = Redis | Cluster

/**
 * `timeout`: how long a command may go unanswered (a blocking command: that long past its own block time); default 5
 * seconds, as the lock store's calls. `pool`: the connections behind `reserve` (Effect's `PoolOptions`).
 *
 * @internal
 */
export interface Options {
  readonly timeout?: Duration.Input | undefined
  readonly pool?: PersistenceRedis.PoolOptions | undefined
}

const defaultTimeout = Duration.seconds(5)

/** The one-slot connection a command is sent on: the shared client, a reserved or a subscriber duplicate. */
type Connection = Pick<Redis, "call"> | Pick<Cluster, "call">

// How long a blocking command may block by its own arguments, in milliseconds (Infinity: until it is answered), or
// undefined when the command does not block. Its deadline is the timeout past that.
const blockedMs = (command: string, args: ReadonlyArray<string>): number | undefined => {
  const seconds = (text: string | undefined) => {
    const value = Number(text)
    return !Number.isFinite(value) || value <= 0 ? Infinity : value * 1000
  }
  const millis = (text: string | undefined) => {
    const value = Number(text)
    return !Number.isFinite(value) || value <= 0 ? Infinity : value
  }
  switch (command.toUpperCase()) {
    case "BLPOP":
    case "BRPOP":
    case "BRPOPLPUSH":
    case "BLMOVE":
    case "BZPOPMIN":
    case "BZPOPMAX":
      return seconds(args[args.length - 1])
    case "BLMPOP":
    case "BZMPOP":
      return seconds(args[0])
    case "XREAD":
    case "XREADGROUP": {
      const at = args.findIndex((arg) => arg.toUpperCase() === "BLOCK")
      return at === -1 ? undefined : millis(args[at + 1])
    }
    case "WAIT":
      return millis(args[1])
    case "WAITAOF":
      return millis(args[2])
    default:
      return undefined
  }
}

const reasonOf = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)

/**
 * A command on `connection`, bounded: Redis' error answer, a closed connection or no answer within `timeout` (past a
 * blocking command's own block time) fail with Effect's `RedisError`, whose cause is this package's `RedisError`
 * naming the command (so `String(cause)` carries Redis' words, NOSCRIPT included, as Effect's script cache reads them).
 */
const sendOn = (connection: Connection, timeout: Duration.Duration) =>
<A = unknown>(command: string, ...args: ReadonlyArray<string>): Effect.Effect<A, PersistenceRedis.RedisError> => {
  const blocked = blockedMs(command, args)
  return bounded(
    command,
    blocked === Infinity ? undefined : blocked === undefined ? timeout : Duration.sum(timeout, Duration.millis(blocked)),
    () => connection.call(command, ...args) as Promise<A>
  )
}

/** Effect's `RedisError`, its cause this package's, naming the operation. */
const failure = (operation: string, reason: string, cause?: unknown) =>
  new PersistenceRedis.RedisError({ cause: new RedisError({ operation, reason, cause }) })

/**
 * A promise of ioredis, bounded by `limit` (none: unbounded): its rejection, or no answer within `limit`, fails with
 * Effect's `RedisError` naming `operation` (`what`, when given, says which connection).
 */
const bounded = <A>(
  operation: string,
  limit: Duration.Duration | undefined,
  call: () => Promise<A>,
  what?: string
): Effect.Effect<A, PersistenceRedis.RedisError> => {
  const named = (reason: string) => (what === undefined ? reason : `${what}: ${reason}`)
  const sent = Effect.tryPromise({ try: call, catch: (cause) => failure(operation, named(reasonOf(cause)), cause) })
  return limit === undefined ? sent : Effect.timeoutOrElse(sent, {
    duration: limit,
    orElse: () =>
      Effect.fail(
        failure(
          operation,
          named(`no ${what === undefined ? "answer" : "connection"} within ${Duration.format(limit)} (the timeout option)`)
        )
      )
  })
}

const isCluster = (client: Client): client is Cluster => (client as { readonly isCluster?: boolean }).isCluster === true

// A second connection like the client's: connected only when asked (after its listeners are on), commands queued while
// it connects, and no ioredis command timeout (a reserved connection's blocking command has its own deadline).
const duplicateOf = (client: Client): Redis | Cluster => {
  if (isCluster(client)) {
    const redisOptions = { ...client.options.redisOptions, commandTimeout: undefined }
    return client.duplicate([], { lazyConnect: true, enableOfflineQueue: true, redisOptions })
  }
  return client.duplicate({ lazyConnect: true, enableOfflineQueue: true, commandTimeout: undefined } as Partial<
    IORedisOptions
  >)
}

// A duplicate, connected within the timeout; disconnected again when it cannot connect (or the caller gives up).
const openDuplicate = (client: Client, timeout: Duration.Duration, what: string) =>
  Effect.suspend(() => {
    const connection = duplicateOf(client)
    // Its errors show as failed commands; without a listener ioredis would print them.
    connection.on("error", () => undefined)
    return bounded("connect", timeout, () => connection.connect(), what).pipe(
      Effect.onExit((exit) => exit._tag === "Success" ? Effect.void : Effect.sync(() => connection.disconnect())),
      Effect.as(connection)
    )
  })

// A reserved connection: closing it fails at once every command still in flight on it (ioredis would only reject them
// once the socket's close is seen), then disconnects it.
const reserved = (timeout: Duration.Duration) => (connection: Redis | Cluster) => {
  let closed = false
  const inFlight = new Set<(error: Error) => void>()
  const guarded: Connection = {
    call: ((command: string, ...args: Array<string>) =>
      new Promise<unknown>((resolve, reject) => {
        if (closed) return reject(new Error("the reserved connection is closed; the command was not sent"))
        inFlight.add(reject)
        connection.call(command, ...args).then((reply) => {
          inFlight.delete(reject)
          resolve(reply)
        }, (error) => {
          inFlight.delete(reject)
          reject(error)
        })
      })) as Connection["call"]
  }
  return {
    send: sendOn(guarded, timeout),
    close: Effect.sync(() => {
      closed = true
      for (const reject of inFlight) reject(new Error("the reserved connection was closed with the command in flight"))
      inFlight.clear()
      connection.disconnect()
    })
  }
}

const isScriptLoad = (command: string, args: ReadonlyArray<string>): boolean =>
  command.toUpperCase() === "SCRIPT" && args.length === 2 && args[0]!.toUpperCase() === "LOAD"

/**
 * Effect's `Redis` service over `client`, which the caller owns (it is not closed here). The subscriber and reserved
 * connections it opens are closed with the scope.
 *
 * @internal
 */
export const make = (
  client: Client,
  options?: Options
): Effect.Effect<PersistenceRedis.Redis["Service"], never, Scope.Scope> =>
  Effect.suspend(() => {
    const timeout = Duration.fromInputUnsafe(options?.timeout ?? defaultTimeout)
    const plain = sendOn(client, timeout)
    const cluster = isCluster(client) ? client : undefined
    // A cluster's scripts by their sha, as loaded here: an EVALSHA that a master answers NOSCRIPT (a replica promoted
    // since the load) runs as EVAL on the same node instead, before Effect's cache loads it again.
    const scripts = new Map<string, string>()
    const send = cluster === undefined ? plain : <A = unknown>(
      command: string,
      ...args: ReadonlyArray<string>
    ): Effect.Effect<A, PersistenceRedis.RedisError> => {
      if (isScriptLoad(command, args)) {
        // Without keys, ioredis would send it to one node at random: every master gets it, so EVALSHA (routed by its
        // first key) finds it wherever the key lives.
        const masters = cluster.nodes("master")
        if (masters.length === 0) return plain<A>(command, ...args)
        return Effect.forEach(masters, (node) => sendOn(node, timeout)<string>(command, ...args), {
          concurrency: "unbounded"
        }).pipe(
          Effect.map((shas) => {
            scripts.set(shas[0]!, args[1]!)
            return shas[0] as A
          })
        )
      }
      if (command.toUpperCase() !== "EVALSHA") return plain<A>(command, ...args)
      const lua = scripts.get(args[0] ?? "")
      return lua === undefined ? plain<A>(command, ...args) : plain<A>(command, ...args).pipe(
        Effect.catchIf(
          (error) => String(error.cause).includes("NOSCRIPT"),
          () => plain<A>("EVAL", lua, ...args.slice(1))
        )
      )
    }

    return PersistenceRedis.make({
      send,
      // One connection per subscription: it ends with its scope, and one subscriber's reconnect never touches another.
      subscribe: (channel, onMessage) =>
        Effect.gen(function*() {
          const subscriber = yield* Effect.acquireRelease(
            openDuplicate(client, timeout, `the subscriber of ${channel}`),
            // UNSUBSCRIBE first: once answered, Redis has dropped the subscription (a bare disconnect is seen later).
            (subscriber) =>
              Effect.promise(() => subscriber.unsubscribe(channel).catch(() => undefined)).pipe(
                Effect.timeoutOption(timeout),
                Effect.ensuring(Effect.sync(() => subscriber.disconnect()))
              )
          )
          subscriber.on("message", (from: string, message: string) => {
            if (from === channel) onMessage({ channel: from, message })
          })
          // ioredis subscribes again by itself after a reconnect (autoResubscribe); the subscription ends when the
          // connection ends for good.
          yield* bounded("SUBSCRIBE", timeout, () => subscriber.subscribe(channel))
          return Effect.callback<void, PersistenceRedis.RedisError>((resume) => {
            const ended = () =>
              resume(Effect.fail(failure("SUBSCRIBE", `the subscriber of ${channel} lost its connection for good`)))
            subscriber.once("end", ended)
            return Effect.sync(() => subscriber.off("end", ended))
          })
        }),
      connect: Effect.map(openDuplicate(client, timeout, "a reserved connection"), reserved(timeout)),
      pool: options?.pool
    })
  })
