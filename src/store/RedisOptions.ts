/**
 * `Redis.Options` checked once, where they are given: a value ioredis would quietly read otherwise (a number as the
 * options connects to 127.0.0.1:6379; `{ host, port }` beside `url` is ignored) is refused, naming the field.
 *
 * @internal
 */
import type * as Duration from "effect/Duration"
import * as Result from "effect/Result"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Options from "../options/Decoding.js"
import type { ClusterOptions as RedisClusterOptions, Options as RedisOptions } from "./IORedis.js"
import { maxShards } from "./Layout.js"
import { maxWaitersBound } from "./ReleaseWaits.js"

// Each schema here only checks (the input itself is what the store reads), so each is `Unknown` with a filter whose
// message names what was written.
const checked = (check: (u: unknown) => true | string) => Schema.Unknown.check(Schema.makeFilter(check))

const Url = checked((u) => {
  const value = Redacted.isRedacted(u) ? Redacted.value(u) : u
  return (typeof value === "string" && value.length > 0 && !/\s/.test(value)) ||
    `expected redis://[user:password@]host:port[/db] (a string or a Redacted), got ${
      Redacted.isRedacted(u) ? "a Redacted of something else" : Options.describeValue(u)
    }`
})

const whole = (min: number, max: number, what: string) =>
  checked((n) =>
    (typeof n === "number" && Number.isSafeInteger(n) && n >= min && n <= max) ||
    `expected ${what} (a whole number from ${min} to ${max}), got ${Options.describeValue(n)}`
  )

// lockTimeout's caps on the jobs of this process that wait (store/ReleaseWaits).
const waiterCaps = {
  maxLockWaiters: Schema.optional(whole(1, maxWaitersBound, "a number of waiting jobs per lock")),
  maxProcessWaiters: Schema.optional(whole(1, maxWaitersBound, "a number of waiting jobs per process"))
}

// null reads as unset, as ioredis keeps an unset username or password (options copied from a client carry it).
const text = (what: string) =>
  checked((s) => typeof s === "string" || s === null || `expected ${what} (a string), got ${Options.describeValue(s)}`)

// The ioredis options read most often are checked; the rest are ioredis' own to judge.
const Client = Schema.StructWithRest(
  Schema.Struct({
    host: Schema.optional(text("a host name")),
    port: Schema.optional(whole(0, 65_535, "a port")),
    db: Schema.optional(whole(0, 1_000_000, "a database number")),
    username: Schema.optional(text("a user name")),
    password: Schema.optional(text("a password")),
    path: Schema.optional(text("a unix socket path"))
  }),
  [Schema.Record(Schema.String, Schema.Unknown)]
)

const OptionsSchema = Schema.Struct({
  url: Schema.optional(Url),
  timeout: Schema.optional(Options.TimerDuration),
  enableAutoPipelining: Schema.optional(Schema.Boolean),
  ...waiterCaps,
  client: Schema.optional(Client)
})

const decodeStruct = Schema.decodeUnknownResult(OptionsSchema, { errors: "all", onExcessProperty: "error" })

/**
 * Checks the options: fails with `InvalidLockOptions` naming each bad field (under `under`, e.g. `redis`).
 *
 * @internal
 */
export const decode = (
  input: unknown,
  under?: string | undefined
): Result.Result<RedisOptions, Options.InvalidLockOptions> => {
  if (input === undefined) return Result.succeed({})
  if (!Options.isRecord(input)) {
    const reason = `expected Redis options like { url: "redis://127.0.0.1:6379" }, got ${Options.describeValue(input)}`
    return Result.fail(Options.invalidOptions([{ field: "options", reason }], under))
  }
  if (input.client !== undefined && !Options.isRecord(input.client)) {
    const reason = `expected ioredis options like { host: "127.0.0.1", port: 6379 }, got ${
      Options.describeValue(input.client)
    }`
    return Result.fail(Options.invalidOptions([{ field: "client", reason }], under))
  }
  return Result.mapBoth(decodeStruct(input), {
    onFailure: (error) => Options.invalidOptions(issuesOf(error), under),
    // The input itself: the Schema only checked it (a Duration stays as written, Redacted stays Redacted).
    onSuccess: () => input as RedisOptions
  })
}

const excess = /^(Unexpected key|Expected no excess property)/

// An unknown field is most often an ioredis option written beside `url`: say where it goes.
const issuesOf = (error: Schema.SchemaError) =>
  Options.formatIssues(error).map((issue) =>
    excess.test(issue.reason) && !issue.field.startsWith("client")
      ? {
        field: issue.field,
        reason: `is not a Redis option here; ioredis options go under client: { ${issue.field}: … }`
      }
      : issue
  )

const Node = checked((node) =>
    (typeof node === "string" && /^(redis:\/\/)?[^\s/:]+:\d{1,5}$/.test(node)) ||
    (Options.isRecord(node) && typeof node.host === "string" && node.host !== "" && Number.isSafeInteger(node.port) &&
      (node.port as number) > 0 && (node.port as number) <= 65_535) ||
    `expected a node as "host:port" or { host, port } (TLS: client: { redisOptions: { tls: {} } }), got ${
      Options.describeValue(node)
    }`
)

const ClusterSchema = Schema.Struct({
  nodes: Schema.Array(Node).check(
    Schema.makeFilter((nodes) => nodes.length > 0 || "expected at least one node to reach the cluster by")
  ),
  timeout: Schema.optional(Options.TimerDuration),
  shards: Schema.optional(whole(1, maxShards, "a shard count")),
  enableAutoPipelining: Schema.optional(Schema.Boolean),
  ...waiterCaps,
  client: Schema.optional(Schema.Record(Schema.String, Schema.Unknown))
})

const decodeClusterStruct = Schema.decodeUnknownResult(ClusterSchema, { errors: "all", onExcessProperty: "error" })

/**
 * Checks cluster options as `decode` checks `Redis.Options`; ioredis' own `Cluster` options go under `client`.
 *
 * @internal
 */
export const decodeCluster = (
  input: unknown,
  under?: string | undefined
): Result.Result<RedisClusterOptions, Options.InvalidLockOptions> => {
  if (!Options.isRecord(input)) {
    const reason = `expected Redis Cluster options like { nodes: ["127.0.0.1:7000"] }, got ${Options.describeValue(input)}`
    return Result.fail(Options.invalidOptions([{ field: "options", reason }], under))
  }
  return Result.mapBoth(decodeClusterStruct(input), {
    onFailure: (error) => Options.invalidOptions(issuesOf(error), under),
    onSuccess: () => input as unknown as RedisClusterOptions
  })
}

const FromClientSchema = Schema.Struct({
  timeout: Schema.optional(Options.TimerDuration),
  shards: Schema.optional(whole(1, maxShards, "a shard count")),
  ...waiterCaps
})

const decodeFromClientStruct = Schema.decodeUnknownResult(FromClientSchema, { errors: "all", onExcessProperty: "error" })

/** What `Redis.makeFromClient` takes beside the client. @internal */
export interface FromClientOptions {
  readonly timeout?: Duration.Input | undefined
  readonly shards?: number | undefined
  readonly maxLockWaiters?: number | undefined
  readonly maxProcessWaiters?: number | undefined
}

/**
 * Checks what `Redis.makeFromClient` takes beside the client (`timeout`, `shards`, the waiter caps), as `decode`
 * checks `Redis.Options`.
 *
 * @internal
 */
export const decodeFromClient = (input: unknown): Result.Result<FromClientOptions, Options.InvalidLockOptions> =>
  input === undefined
    ? Result.succeed({})
    : Result.mapBoth(decodeFromClientStruct(input), {
      onFailure: (error) => Options.invalidOptions(Options.formatIssues(error)),
      onSuccess: () => input as FromClientOptions
    })
