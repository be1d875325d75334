/**
 * The BullMQ queues a command line or the admin UI is told the names of, as the `JobQueue` port: read-only (no
 * queue metadata written), on one connection of its own that tries once and never reconnects. Loaded only where
 * queues are named, so that `bullmq` stays an optional peer.
 *
 * @internal
 */
import { Queue } from "bullmq"
import { Cluster, Redis as IORedis } from "ioredis"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as BullMQ from "../adapters/BullMQ.js"
import type * as Context from "effect/Context"
import type { JobQueue } from "../JobQueue.js"

/** @internal */
export interface Options {
  /** The queues' names, as their holders' entries name them. */
  readonly names: ReadonlyArray<string>
  /** Where BullMQ keeps them: a Redis URL, or a cluster's `host:port` nodes. */
  readonly connection: { readonly url: string } | { readonly nodes: ReadonlyArray<string> }
  /** BullMQ's key prefix (its `prefix` option). */
  readonly prefix: string
  /** A named queue with no keys at all (obliterated) is taken as empty, instead of refused. */
  readonly allowMissing: boolean
  /** How long connecting, and each call to a queue, may take. */
  readonly timeout: Duration.Input
  /** What the connection is called in errors (the option that named it, never its URL: it may hold a password). */
  readonly where: string
}

/**
 * A named queue's location is wrong, or BullMQ's Redis cannot be reached: nothing was asked of it.
 *
 * @internal
 */
export class QueuesError extends Error {
  readonly _tag = "QueuesError"
}

const within = (options: Options): string => Duration.format(Duration.fromInputUnsafe(options.timeout))

const connect = (options: Options): Effect.Effect<IORedis | Cluster, QueuesError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      // One try, no reconnect: a command line says at once that BullMQ's Redis is not there.
      const client = "url" in options.connection
        ? new IORedis(options.connection.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
        : new Cluster([...options.connection.nodes], {
          lazyConnect: true,
          clusterRetryStrategy: () => null
        })
      client.on("error", () => {})
      return client
    }),
    (client) => Effect.sync(() => client.disconnect())
  ).pipe(
    Effect.tap((client) =>
      Effect.tryPromise({
        try: () => client.connect(),
        catch: (cause) =>
          new QueuesError(`cannot reach BullMQ's Redis (${options.where}): ${cause instanceof Error ? cause.message : cause}`)
      }).pipe(
        Effect.timeoutOrElse({
          duration: options.timeout,
          orElse: () => Effect.fail(new QueuesError(`BullMQ's Redis (${options.where}) did not answer within ${within(options)}`))
        })
      )
    )
  )

// A queue BullMQ ever used has its metadata, events or id counter: none of them under this prefix is a queue that was
// obliterated, or one asked for at the wrong place, where every job would look gone.
const known = (client: IORedis | Cluster, queue: Queue, options: Options): Effect.Effect<boolean, QueuesError> =>
  Effect.tryPromise({
    try: () => client.exists(queue.keys.meta!, queue.keys.events!, queue.keys.id!),
    catch: (cause) =>
      new QueuesError(`BullMQ's Redis (${options.where}) failed: ${cause instanceof Error ? cause.message : cause}`)
  }).pipe(
    Effect.timeoutOrElse({
      duration: options.timeout,
      orElse: () => Effect.fail(new QueuesError(`BullMQ's Redis (${options.where}) did not answer within ${within(options)}`))
    }),
    Effect.map((found) => found > 0)
  )

/**
 * The adapter over the named queues, with every name checked where BullMQ keeps it.
 *
 * @internal
 */
export const make = (options: Options): Effect.Effect<BullMQ.BullMQ & Context.Service.Shape<typeof JobQueue>, QueuesError, Scope.Scope> =>
  Effect.gen(function*() {
    // BullMQ keeps a queue's keys in one slot only under a hash tag: without one, every call to it fails CROSSSLOT.
    const untagged = "nodes" in options.connection && !/\{[^}]+\}/.test(options.prefix)
      ? options.names.find((name) => !/\{[^}]+\}/.test(name))
      : undefined
    if (untagged !== undefined) {
      return yield* Effect.fail(
        new QueuesError(
          `--bullmq-queue ${JSON.stringify(untagged)} on a Redis Cluster: BullMQ there needs a {hashtag} in its ` +
            `prefix, and --bullmq-prefix ${JSON.stringify(options.prefix)} has none: pass the prefix your queues use, ` +
            `such as --bullmq-prefix "{bull}"`
        )
      )
    }
    const client = yield* connect(options)
    const queues: Array<Queue> = []
    for (const name of new Set(options.names)) {
      const queue = yield* Effect.acquireRelease(
        Effect.try({
          // Read-only: no metadata written, so a name given by mistake leaves no key behind.
          try: () => new Queue(name, { connection: client, prefix: options.prefix, skipMetasUpdate: true, skipVersionCheck: true }),
          catch: (cause) =>
            new QueuesError(`--bullmq-queue ${JSON.stringify(name)}: ${cause instanceof Error ? cause.message : cause}`)
        }),
        // The connection is ours (closed above); the queue lets go of its listeners.
        (queue) => Effect.promise(() => queue.close().catch(() => undefined)).pipe(Effect.timeout("1 second"), Effect.ignore)
      )
      queue.on("error", () => {})
      if (!options.allowMissing && !(yield* known(client, queue, options))) {
        return yield* Effect.fail(
          new QueuesError(
            `BullMQ has no queue ${JSON.stringify(name)} under prefix ${JSON.stringify(options.prefix)} (${options.where}): ` +
              "every job of it would look gone. Check the name, --bullmq-prefix and --bullmq-url; if it was " +
              "obliterated, pass --bullmq-allow-missing to free its locks"
          )
        )
      }
      queues.push(queue)
    }
    return yield* BullMQ.make(queues, { timeout: options.timeout }).pipe(
      Effect.mapError((error) => new QueuesError(error.message))
    )
  })
