/**
 * The `unique-jobs` command: digests, locks, the reaper and stats from a shell. Tables for people, `--json` for
 * scripts (stdout carries only the answer; logs go to stderr); `--redis-url` or `REDIS_URL` (Redis Cluster:
 * `--cluster` or `REDIS_CLUSTER_NODES`); a bad argument, an unreachable Redis, or a command that did nothing of what
 * was asked exits non-zero with one line saying why (and what was probably meant).
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as CliConfig from "@effect/cli/CliConfig"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as ValidationError from "@effect/cli/ValidationError"
import type * as FileSystem from "@effect/platform/FileSystem"
import type * as Path from "@effect/platform/Path"
import type * as Terminal from "@effect/platform/Terminal"
import type * as Context from "effect/Context"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Digest from "./Digest.js"
import { JobQueue } from "./JobQueue.js"
import * as CliMistakes from "./cli/Mistakes.js"
import * as CliPlatform from "./cli/Platform.js"
import * as IORedisStore from "./store/IORedis.js"
import * as RedisOptions from "./store/RedisOptions.js"
import * as Locks from "./Locks.js"
import { PrefixSchema } from "./Options.js"
import * as Reaper from "./Reaper.js"
import * as Redis from "./Redis.js"
import * as Security from "./web/Security.js"
import * as Web from "./Web.js"

/**
 * A command line failure: its message is the one line the command prints.
 *
 * @since 0.1.0
 * @category errors
 */
export class CliError extends Error {
  readonly _tag = "CliError"
}

const json = Options.boolean("json").pipe(
  Options.withDescription("print JSON for scripts instead of a table, e.g. --json | jq .")
)
const redisUrl = Options.all({
  url: Options.text("redis-url").pipe(
    Options.withPseudoName("URL"),
    Options.optional,
    Options.withDescription(
      "where the locks are: redis://[:password@]host:port[/db], e.g. --redis-url redis://localhost:6379/0 " +
        "(default: the REDIS_URL environment variable)"
    )
  ),
  cluster: Options.text("cluster").pipe(
    Options.withPseudoName("NODES"),
    Options.optional,
    Options.withDescription(
      "a Redis Cluster instead of --redis-url: some of its nodes, e.g. --cluster 10.0.0.1:7000,10.0.0.2:7000 " +
        "(default: the REDIS_CLUSTER_NODES environment variable)"
    )
  )
})

/** Where the locks are: `--redis-url` or `--cluster`, as given. */
type Connection = { readonly url: Option.Option<string>; readonly cluster: Option.Option<string> }
const prefix = Options.text("prefix").pipe(
  Options.withPseudoName("PREFIX"),
  Options.withDefault(Digest.defaultPrefix),
  Options.withDescription(
    `the lock prefix your workers use (their lockPrefix), e.g. --prefix myapp; default ${Digest.defaultPrefix}`
  )
)
const dryRun = Options.boolean("dry-run").pipe(
  Options.withDescription("show what would go (and which running jobs would be revoked), change nothing")
)

// What revoking does to a running job, said by each command that may do it.
const revokeHelp = "A running job's run lock is revoked, not removed, so no second copy starts while it may still " +
  "run: the job learns it at its next lease renewal (within a third of its lease), its perform is interrupted and " +
  "it fails with LockLost (BullMQ retries it if it has attempts left); then the lock frees. A perform that does not " +
  "stop (a processor's function that ignores its signal) keeps the lock, still revoked, until it returns."

const print = (asJson: boolean, value: unknown, table: () => string) =>
  Console.log(asJson ? JSON.stringify(value) : table())

const fail = (message: string) => Effect.fail(new CliError(message))

// Checks made before Redis is asked anything: a mistake is said at once, naming what was probably meant.
const checkPrefix = (prefix: string): Effect.Effect<void, CliError> =>
  Either.match(Schema.decodeUnknownEither(PrefixSchema)(prefix), {
    onLeft: () =>
      fail(
        `--prefix ${JSON.stringify(prefix)} is not a lock prefix: use letters, digits, '_', '-', '.' and inner ':' ` +
          `only (no spaces, '*', braces, or :LOCKED, :RUN, :digests)`
      ),
    onRight: () => Effect.void
  })

// @effect/cli takes a mistyped flag (`--jsno`) as the positional argument: refuse it instead.
const checkArgument = (what: string, value: string, help: string): Effect.Effect<void, CliError> =>
  value.startsWith("-")
    ? fail(`unknown option ${value} (see unique-jobs ${help} --help); a ${what} never starts with '-'`)
    : Effect.void

// What the name's own prefix looks like, to name it in a hint: all before its last ':' (a run lock's :RUN aside), as
// a prefix may hold inner ':' (app:jobs:ace64…).
const prefixHint = (name: string, prefix: string): string => {
  const base = digestOf(name)
  const colon = base.lastIndexOf(":")
  const own = colon > 0 ? base.slice(0, colon) : undefined
  return own !== undefined && Either.isRight(Schema.decodeUnknownEither(PrefixSchema)(own))
    ? `lock names under --prefix ${prefix} start with ${prefix}: (for prefix ${own}, pass --prefix ${own})`
    : `a digest includes its prefix: ${prefix}:${name}`
}

const checkPattern = (pattern: string, prefix: string, help: string): Effect.Effect<void, CliError> =>
  Effect.andThen(
    checkArgument("pattern", pattern, help),
    Locks.canMatch(pattern, prefix)
      ? Effect.void
      : fail(`PATTERN ${pattern} matches no lock: ${prefixHint(pattern, prefix)}`)
  )

const checkLimit = (limit: number): Effect.Effect<void, CliError> =>
  Number.isSafeInteger(limit) && limit >= limitRange.min && limit <= limitRange.max
    ? Effect.void
    : fail(`--limit must be a whole number from ${limitRange.min} to ${limitRange.max}, got ${limit}`)

// When a revoked holder's place frees at the latest, and how soon it is told.
const revokedLines = (revoked: Locks.Removal["revoked"]): Array<string> => {
  if (revoked.length === 0) return []
  const latest = Math.max(...revoked.map((r) => r.leaseUntil))
  return [
    `revoked ${revoked.length} running holder(s) instead of removing them (their lease is live, so their job may ` +
    `still run): ${revoked.map((r) => `${r.jid} on ${r.lock}`).join(", ")}`,
    `  each is told at its next lease renewal (within a third of its lease) and stops with LockLost; its place frees ` +
    `when it lets go, or at ${time(latest)} at the latest if it died`
  ]
}

const refusedLines = (refused: Locks.Removal["refused"]): Array<string> =>
  refused.map((r) => `left alone, not one of this library's locks: ${r.reason}`)

const columns = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd()
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n")
}

const time = (ms: number | undefined) => (ms === undefined ? "-" : new Date(ms).toISOString())

// Progress on stderr, only for a person at a terminal: scripts read stdout.
const progress = (line: string) =>
  Effect.sync(() => {
    if (process.stderr.isTTY) process.stderr.write(`\r${line}`)
  })
const progressDone = Effect.sync(() => {
  if (process.stderr.isTTY) process.stderr.write("\n")
})

// A flag, else its variable (read through the ConfigProvider: the environment); an empty one is none.
const given = (flag: Option.Option<string>, variable: string): Effect.Effect<Option.Option<string>, CliError> =>
  Effect.map(
    Option.isSome(flag)
      ? Effect.succeed(flag)
      : Effect.mapError(Config.option(Config.string(variable)), (error) => new CliError(`${variable}: ${error.message}`)),
    Option.filter((value) => value !== "")
  )

const noRedis = () =>
  new CliError("no Redis: pass --redis-url redis://host:port (or --cluster host:port,…), or set REDIS_URL (or REDIS_CLUSTER_NODES)")

// The CLI and the web UI read each prefix's layout as Redis records it (one Redis, or a cluster and its shards), so
// they see what the app wrote with no flag; where nothing is recorded yet, the default layout. They record nothing.
const adopting: IORedisStore.Own = { layout: "adopt" }

// Worded as Redis.make words a bad option.
const decoded = <A>(
  options: Either.Either<A, { readonly issues: ReadonlyArray<{ readonly field: string; readonly reason: string }> }>
): Effect.Effect<A, CliError> =>
  Either.match(options, {
    onLeft: (invalid) =>
      fail(`Redis options failed: ${invalid.issues.map((issue) => `${issue.field}: ${issue.reason}`).join("; ")}`),
    onRight: Effect.succeed
  })

/**
 * The store the flags (else the variables) name: one Redis, or a cluster. `oneShot`: a command line tries once and says at
 * once that Redis is not there; a server reconnects, each call still bounded.
 */
const storeOf = (
  connection: Connection,
  oneShot: boolean
): Effect.Effect<Redis.Store, CliError | Redis.RedisError, Scope.Scope> =>
  Effect.gen(function*() {
    if (Option.isSome(connection.url) && Option.isSome(connection.cluster)) {
      return yield* fail("--redis-url and --cluster name two places for the locks: pass one")
    }
    const url = Option.isSome(connection.cluster) ? Option.none() : yield* given(connection.url, "REDIS_URL")
    if (Option.isSome(url)) {
      const options = yield* decoded(RedisOptions.decode({
        url: url.value,
        timeout: connectTimeout,
        ...(oneShot ? { client: { maxRetriesPerRequest: 0, retryStrategy: () => null } } : {})
      }))
      return yield* IORedisStore.make(options, adopting)
    }
    const nodes = yield* given(connection.cluster, "REDIS_CLUSTER_NODES")
    if (Option.isNone(nodes)) return yield* Effect.fail(noRedis())
    const options = yield* decoded(RedisOptions.decodeCluster({
      nodes: nodes.value.split(",").map((node) => node.trim()).filter((node) => node !== ""),
      timeout: connectTimeout
    }))
    // One try too, except while the cluster answers and says it is down: a failover is waited for within the timeout.
    return yield* IORedisStore.makeCluster(options, oneShot ? { ...adopting, oneShot } : adopting)
  })

/** Runs `self` with the store the flags name; a missing or unreachable Redis is a CliError. */
const withRedis = <A>(
  connection: Connection,
  self: Effect.Effect<A, { readonly message: string } | CliError, Redis.RedisService>
): Effect.Effect<A, CliError> =>
  // The connection's scope closes in the background: the answer (or the error) is not held back by a QUIT to a Redis
  // that does not answer, and the executable exits once it has printed.
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const exit = yield* Effect.exit(
      Effect.flatMap(
        Scope.extend(storeOf(connection, true), scope),
        (store) => Effect.provideService(self, Redis.RedisService, store)
      )
    )
    yield* Effect.forkDetach(Scope.close(scope, Exit.void))
    return yield* exit
  }).pipe(Effect.mapError((error) => (error instanceof CliError ? error : new CliError(error.message))))

const connectTimeout = "3 seconds"

/** Runs `self` with the admin API for `--prefix`, on the store `withRedis` gives. */
const withLocks = <A>(
  o: { readonly redisUrl: Connection; readonly prefix: string },
  self: (locks: Context.Tag.Service<Locks.Locks>) => Effect.Effect<A, { readonly message: string } | CliError, Redis.RedisService>
): Effect.Effect<A, CliError> => withRedis(o.redisUrl, Effect.flatMap(Locks.make({ prefix: o.prefix }), self))

const digest = Command.make(
  "digest",
  {
    worker: Options.text("worker").pipe(
      Options.withPseudoName("NAME"),
      Options.withDescription(
        "required: the worker's name as the job is enqueued with; for a BullMQ job, the job's name (queue.add(name, " +
          "data)), e.g. --worker ChargeCustomerJob"
      )
    ),
    queue: Options.text("queue").pipe(
      Options.withPseudoName("QUEUE"),
      Options.withDefault("default"),
      Options.withDescription(
        "the job's queue name, part of the digest unless --across-queues; for a BullMQ job, its queue's name, e.g. " +
          "--queue mailers (default: default, the name a job given no queue gets)"
      )
    ),
    args: Options.text("args").pipe(
      Options.withPseudoName("JSON"),
      Options.withDescription(
        "required: the job's arguments, a JSON array; for a BullMQ job, [data], e.g. --args '[{\"account\": 42}]'"
      )
    ),
    algorithm: Options.choice("algorithm", ["legacy", "modern"]).pipe(
      Options.withDefault("legacy" as const),
      Options.withDescription(
        "the digest algorithm your workers use (their digestAlgorithm option): legacy, MD5 as the Ruby gem " +
          "sidekiq-unique-jobs computes it, the default; modern, SHA3-256"
      )
    ),
    acrossQueues: Options.boolean("across-queues").pipe(
      Options.withDescription("the worker is unique across queues (uniqueAcrossQueues): the queue is left out")
    ),
    acrossWorkers: Options.boolean("across-workers").pipe(
      Options.withDescription("the worker is unique across workers (uniqueAcrossWorkers): the worker is left out")
    ),
    prefix,
    json
  },
  (o) =>
    Effect.gen(function*() {
      // What UniqueJob.make refuses, refused here too: no job has a digest under such a name or prefix.
      if (o.worker === "") return yield* Effect.fail(new CliError("--worker must not be empty (a worker's name)"))
      if (o.queue === "") return yield* Effect.fail(new CliError("--queue must not be empty (leave it out for default)"))
      yield* checkPrefix(o.prefix)
      const args = yield* Effect.try({
        try: () => JSON.parse(o.args) as unknown,
        catch: () => new CliError(`--args is not JSON: ${o.args} (write a JSON array, like '[1, "a"]')`)
      })
      if (!Array.isArray(args)) return yield* Effect.fail(new CliError(`--args must be a JSON array, got ${o.args}`))
      const value = yield* Digest.make({ worker: o.worker, queue: o.queue, args }, {
        algorithm: o.algorithm,
        uniqueAcrossQueues: o.acrossQueues,
        uniqueAcrossWorkers: o.acrossWorkers,
        prefix: o.prefix
      }).pipe(Effect.mapError((error) => new CliError(error.message)))
      yield* print(o.json, { digest: value }, () => value)
    })
).pipe(Command.withDescription(
  "the digest (lock name) of a job, as the client computes it from the worker, queue and arguments; it needs no " +
    "Redis. Example: unique-jobs digest --worker ChargeCustomerJob --args '[1]' prints " +
    "uniquejobs:ace64a5ce1899f22b3c3cb97985a733d; then unique-jobs locks show that digest"
))

// A list's page: ZSCAN's cursor where the page was read, and how many of that read's matches were shown already
// ("<cursor>.<shown>"; "<cursor>" alone when none). Each read asks for `listRead` members, so the same cursor reads
// the same members again while the index is unchanged, whatever --limit the next call gives.
const listRead = 200

const listCursor = {
  encode: (at: string, skip: number): string => (skip === 0 ? at : `${at}.${skip}`),
  decode: (text: string): Option.Option<{ readonly at: string; readonly skip: number }> => {
    const match = /^(\d{1,40})(?:\.(\d{1,6}))?$/.exec(text.trim())
    return match === null ? Option.none() : Option.some({ at: match[1]!, skip: Number(match[2] ?? "0") })
  }
}

/**
 * What `locks list --json` answers: a page of locks, and where the next page starts (`cursor`, "0" when the walk is
 * over; `more` says whether it is).
 */
interface Listed {
  readonly items: ReadonlyArray<Locks.Entry>
  readonly cursor: string
  readonly more: boolean
}

// The ranges of each command's whole-number options, checked before anything runs (see `mistakes`).
const limitRange = { min: 1, max: 100_000 }
const portRange = { min: 0, max: 65_535 }

const list = Command.make(
  "list",
  {
    pattern: Args.text({ name: "PATTERN" }).pipe(
      Args.withDescription("a glob over lock names, e.g. 'uniquejobs:ab*' (default: every lock under --prefix)"),
      Args.optional
    ),
    limit: Options.integer("limit").pipe(
      Options.withPseudoName("N"),
      Options.withDefault(100),
      Options.withDescription(
        `show at most N locks, e.g. --limit 20 (${limitRange.min} to ${limitRange.max}, default 100); when more ` +
          "may match, the command ends with the --cursor of the next page (on stderr)"
      )
    ),
    cursor: Options.text("cursor").pipe(
      Options.withPseudoName("CURSOR"),
      Options.withDefault("0"),
      Options.withDescription(
        "where to start: the cursor the previous page ended with (on stderr, or its --json cursor), e.g. --cursor " +
          "1234 (default: the first page)"
      )
    ),
    redisUrl,
    prefix,
    json
  },
  (o) =>
    Effect.gen(function*() {
      yield* checkPrefix(o.prefix)
      yield* checkLimit(o.limit)
      const start = yield* Option.match(listCursor.decode(o.cursor), {
        onNone: () => fail(`--cursor must be a cursor a previous page gave (like 1234 or 1234.5), got ${o.cursor}`),
        onSome: Effect.succeed
      })
      const pattern = Option.getOrElse(o.pattern, () => `${o.prefix}:*`)
      yield* checkPattern(pattern, o.prefix, "locks list")
      return yield* withLocks(o, (locks) =>
        Effect.gen(function*() {
          const shown: Array<Locks.Entry> = []
          let at = start.at
          let skip = start.skip
          let next = "0"
          for (;;) {
            const page = yield* locks.list({ pattern, cursor: at, count: listRead })
            const taken = page.items.slice(skip, skip + o.limit - shown.length)
            shown.push(...taken)
            if (skip + taken.length < page.items.length) {
              // The limit came within this read: the next page starts inside it.
              next = listCursor.encode(at, skip + taken.length)
              break
            }
            if (page.cursor === "0") break
            at = page.cursor
            skip = 0
            if (shown.length >= o.limit) {
              next = at
              break
            }
          }
          const answer: Listed = { items: shown, cursor: next, more: next !== "0" }
          yield* print(o.json, answer, () =>
            columns(["lock", "phase", "score"], shown.map((e) => [e.name, e.phase, time(e.score)])))
          if (answer.more && !o.json) {
            yield* Console.error(
              `more locks may match (${shown.length} shown): the next page is unique-jobs locks list … --cursor ${next}`
            )
          }
        }))
    })
).pipe(Command.withDescription(
  "list the locks matching PATTERN, a page at a time: a job's queue lock under its digest, its run lock under " +
    "<digest>:RUN. Columns: lock, phase (queue: held from enqueue until it runs; run: held while it runs), score " +
    "(when it expires, for a lock with a TTL; else when it was taken). Example: unique-jobs locks list 'uniquejobs:*' --limit 20, then --cursor C for the next page"
))

// A lock's name as `locks list` prints it: a run lock's (`<digest>:RUN`) names its digest.
const digestOf = (name: string): string => (name.endsWith(":RUN") && name.length > 4 ? name.slice(0, -4) : name)

const digestArg = Args.text({ name: "DIGEST" }).pipe(
  Args.withDescription(
    "a digest, or a lock name as locks list prints it (a run lock's <digest>:RUN names its digest), " +
      "e.g. uniquejobs:ace64a5ce1899f22b3c3cb97985a733d"
  )
)

const show = Command.make(
  "show",
  { digest: digestArg, redisUrl, prefix, json },
  (o) =>
    Effect.gen(function*() {
      yield* checkPrefix(o.prefix)
      yield* checkArgument("digest", o.digest, "locks show")
      // A name outside --prefix is none of the prefix's locks, whatever its key holds (the admin reads only what the
      // prefix's index lists): said before Redis is asked, as locks list says it of a pattern.
      if (!o.digest.startsWith(`${o.prefix}:`)) {
        return yield* fail(`${o.digest} is not a lock under --prefix ${o.prefix}: ${prefixHint(o.digest, o.prefix)}`)
      }
      return yield* withLocks(o, (locks) =>
        Effect.gen(function*() {
          // Both of the digest's locks: a run lock's holders under phase run, its queue lock's under queue.
          const shown = yield* Locks.showAll(locks, digestOf(o.digest))
          // A field in another shape is not a holder: it is listed under notOurs, not as one locked in 1970.
          const rows = (["queue", "run"] as const).flatMap((phase) =>
            shown[phase].holders.filter((h) => h.foreign === undefined).map((h) => [
              phase,
              h.jid,
              time(h.lockedAt),
              time(h.expiresAt),
              time(h.leaseUntil),
              h.revokedAt === undefined ? "" : time(h.revokedAt),
              String(h.fence),
              h.info === undefined ? "" : JSON.stringify(h.info)
            ])
          )
          const notOurs = shown.notOurs.map((n) => `not one of this library's locks: ${n.reason}`)
          // The digest's activity log (lockEvents), newest first; none without it.
          const events = shown.events.length === 0 ? [] : [
            "recent events, newest first:",
            columns(
              ["at", "event", "phase", "jid", "holder", "by"],
              shown.events.map((e) => [
                time(e.at),
                // Refusals in a row are one entry: how many, since when (its time and jid are the last's).
                e.count === undefined ? e.event : `${e.event} ×${e.count} since ${time(e.firstAt ?? e.at)}`,
                e.phase,
                e.jid === "" ? "(key expired)" : e.jid,
                e.holder ?? "",
                e.who ?? ""
              ])
            )
          ]
          yield* print(o.json, shown, () =>
            [
              rows.length === 0
                ? `${o.digest}: not locked (no job holds it; locks list shows what is)`
                : columns(["phase", "jid", "locked at", "expires", "lease until", "revoked at", "fence", "info"], rows),
              ...notOurs,
              ...events
            ].join("\n"))
          if (rows.length === 0 && notOurs.length > 0) {
            return yield* fail(`${o.digest} is not one of this library's locks`)
          }
        }))
    })
).pipe(Command.withDescription(
  "one digest's holders (the job ids holding its queue lock and its run lock): when each took it, when it " +
    "expires, its lease (a running job renews it), its fencing token (a number that grows with each run lock " +
    "taken) and the job's worker, queue and arguments when the workers store them (their lockInfo option); then " +
    "its recent events (taken, refused, released, lost, revoked, reaped) when the workers keep them (lockEvents). " +
    "Example: unique-jobs locks show uniquejobs:ace64a5ce1899f22b3c3cb97985a733d (or …:RUN, as locks list prints it)"
))

// The progress and the answer of a delete by pattern over every page of matches. A dry run names what would go:
// `locks`, and `wouldRevoke`, the running holders the delete would revoke (as it would: a live lease's).
interface Deleted {
  readonly matched: number
  readonly deleted: number
  readonly dryRun: boolean
  readonly revoked: Locks.Removal["revoked"]
  readonly refused: Locks.Removal["refused"]
  readonly locks?: ReadonlyArray<{ readonly lock: string; readonly phase: "queue" | "run"; readonly holders: number }>
  readonly wouldRevoke?: ReadonlyArray<{ readonly lock: string; readonly jid: string; readonly leaseUntil: number }>
}

// What the delete's script revokes rather than removes: a holder with a lease, still live (neither its expiry nor its
// lease passed).
const wouldRevoke = (holder: Redis.Holder, now: number): holder is Redis.Holder & { readonly leaseUntil: number } =>
  holder.foreign === undefined && holder.leaseUntil !== undefined && holder.leaseUntil > 0 &&
  Math.min(holder.leaseUntil, holder.expiresAt ?? Infinity) > now

// Holders read per lock for a dry run: a run lock has its job's one holder (a few with a concurrency limit).
const dryRunHolders = 100

const del = Command.make(
  "del",
  {
    pattern: Args.text({ name: "PATTERN" }).pipe(
      Args.withDescription("required: a glob over lock names, e.g. 'uniquejobs:ab*' or 'uniquejobs:*' for every lock")
    ),
    dryRun,
    redisUrl,
    prefix,
    json
  },
  (o) =>
    Effect.gen(function*() {
      yield* checkPrefix(o.prefix)
      yield* checkPattern(o.pattern, o.prefix, "locks del")
      return yield* withLocks(o, (locks) =>
        Effect.gen(function*() {
          let cursor = "0"
          let matched = 0
          let deleted = 0
          const revoked: Array<Locks.Removal["revoked"][number]> = []
          const refused: Array<Locks.Removal["refused"][number]> = []
          const listed: Array<NonNullable<Deleted["locks"]>[number]> = []
          const revokes: Array<NonNullable<Deleted["wouldRevoke"]>[number]> = []
          do {
            if (o.dryRun) {
              // The same pages the delete walks, each lock's holders read: what would go, and who would be revoked.
              const page = yield* locks.list({ pattern: o.pattern, cursor, count: 500 })
              const rows = yield* locks.rows(page.items, { holders: dryRunHolders, bytes: 256 })
              for (const row of rows) {
                listed.push({ lock: row.entry.name, phase: row.entry.phase, holders: row.lock.size })
                for (const holder of row.lock.holders) {
                  if (wouldRevoke(holder, row.lock.now)) {
                    revokes.push({ lock: row.entry.name, jid: holder.jid, leaseUntil: holder.leaseUntil })
                  }
                }
              }
              matched += page.items.length
              cursor = page.cursor
            } else {
              const page = yield* locks.deleteByPattern(o.pattern, { cursor, count: 500 })
              matched += page.items.length
              deleted += page.deleted
              revoked.push(...page.revoked)
              refused.push(...page.refused)
              cursor = page.cursor
            }
            yield* progress(`${o.dryRun ? "matched" : "deleted"} ${o.dryRun ? matched : deleted}`)
          } while (cursor !== "0")
          yield* progressDone
          const answer: Deleted = o.dryRun
            ? { matched, deleted, dryRun: true, revoked, refused, locks: listed, wouldRevoke: revokes }
            : { matched, deleted, dryRun: false, revoked, refused }
          yield* print(o.json, answer, () =>
            o.dryRun
              ? [
                matched === 0
                  ? `no lock matches ${o.pattern} (dry run: nothing deleted)`
                  : `${matched} lock(s) match ${o.pattern} (dry run: nothing deleted); a delete would remove:`,
                ...(listed.length === 0 ? [] : [columns(
                  ["lock", "phase", "holders", "running (revoked, not removed)"],
                  listed.map((l) => [
                    l.lock,
                    l.phase,
                    String(l.holders),
                    revokes.filter((r) => r.lock === l.lock).map((r) => r.jid).join(", ")
                  ])
                )]),
                matched === 0
                  ? []
                  : revokes.length === 0
                  ? "no running job holds one: none would be revoked"
                  : `and revoke ${revokes.length} running holder(s), each told at its next lease renewal: ${
                    revokes.map((r) => `${r.jid} on ${r.lock} (lease until ${time(r.leaseUntil)})`).join(", ")
                  }`
              ].join("\n")
              : [`deleted ${deleted} lock(s)`, ...revokedLines(revoked), ...refusedLines(refused)].join("\n"))
        }))
    })
).pipe(Command.withDescription(
  `delete every lock matching PATTERN (all of them, walked a page at a time). ${revokeHelp} Example: unique-jobs ` +
    "locks del 'uniquejobs:ab*' --dry-run, to see what would go first"
))

const unlock = Command.make(
  "unlock",
  {
    digest: digestArg,
    jid: Args.text({ name: "JID" }).pipe(
      Args.withDescription("required: the job id holding it (BullMQ's job.id), as locks show prints it")
    ),
    redisUrl,
    prefix,
    json
  },
  (o) =>
    Effect.gen(function*() {
      yield* checkPrefix(o.prefix)
      yield* checkArgument("digest", o.digest, "locks unlock")
      yield* checkArgument("jid", o.jid, "locks unlock")
      return yield* withLocks(o, (locks) =>
        Effect.gen(function*() {
          const removal = yield* locks.unlock(digestOf(o.digest), o.jid, { who: "unique-jobs CLI" })
          const released = removal.removed.filter((r) => r.live)
          const done = released.length > 0 || removal.revoked.length > 0
          yield* print(o.json, { released: released.length > 0, removed: removal.removed, revoked: removal.revoked }, () =>
            [
              ...released.map((r) => `released ${r.jid} on ${r.lock}`),
              ...revokedLines(removal.revoked)
            ].join("\n"))
          if (!done) {
            const hint = o.digest.startsWith(`${o.prefix}:`) ? "" : `; ${prefixHint(o.digest, o.prefix)}`
            return yield* fail(`${o.jid} held no live lock on ${o.digest}${hint}`)
          }
        }))
    })
).pipe(Command.withDescription(
  `release one job's hold on a digest: a waiting job stays queued, and another copy may now be added. ` +
    `${revokeHelp} Example: unique-jobs locks unlock uniquejobs:ace64a5ce1899f22b3c3cb97985a733d 1207`
))

const locksCommand = Command.make("locks").pipe(
  Command.withSubcommands([list, show, del, unlock]),
  Command.withDescription(
    "inspect and clean locks: list (what is held), show (who holds one), del (delete by pattern), unlock (free " +
      "one job's hold). Example: unique-jobs locks list --limit 20"
  )
)

// Where the reap asks about jobs: BullMQ's queues, by name.
const bullmq = Options.all({
  queues: Options.text("bullmq-queue").pipe(
    Options.withPseudoName("QUEUE"),
    Options.repeated,
    Options.withDescription(
      "a BullMQ queue whose jobs' locks to free when the job is gone (drained, removed, obliterated, completed); " +
        "repeat for each queue, e.g. --bullmq-queue emails --bullmq-queue payments. A lock of a queue not named " +
        "here is kept"
    )
  ),
  url: Options.text("bullmq-url").pipe(
    Options.withPseudoName("URL"),
    Options.optional,
    Options.withDescription(
      "the Redis BullMQ keeps the queues in, e.g. --bullmq-url redis://queues:6379 (default: the locks' Redis)"
    )
  ),
  prefix: Options.text("bullmq-prefix").pipe(
    Options.withPseudoName("PREFIX"),
    Options.withDefault("bull"),
    Options.withDescription("BullMQ's key prefix (its prefix option), e.g. --bullmq-prefix myapp; default bull")
  ),
  allowMissing: Options.boolean("bullmq-allow-missing").pipe(
    Options.withDescription(
      "a named queue with no keys in Redis (obliterated) counts as empty, and its locks are freed; without it such a " +
        "queue is refused. Careful: a misspelt queue name has no keys either"
    )
  ),
  grace: Options.text("grace").pipe(
    Options.withPseudoName("DURATION"),
    Options.optional,
    Options.withDescription(
      "with --bullmq-queue: how old a lock must be before its job is asked about (a job just added may not be in " +
        "its queue yet), with its unit, e.g. --grace 90s, 10m, 1h, 500ms (default 10m)"
    )
  )
})

interface Bullmq {
  readonly queues: ReadonlyArray<string>
  readonly url: Option.Option<string>
  readonly prefix: string
  readonly allowMissing: boolean
  readonly grace: Option.Option<string>
}

const checkBullmq = (o: Bullmq): Effect.Effect<void, CliError> => {
  const empty = o.queues.find((name) => name === "" || name.startsWith("-"))
  if (empty !== undefined) return fail(`--bullmq-queue ${JSON.stringify(empty)} is not a queue name`)
  if (o.queues.length > 0) {
    if (Option.isSome(o.grace) && /^\s*\d+(\.\d+)?\s*$/.test(o.grace.value)) {
      return fail(`--grace ${o.grace.value} has no unit: write it with one, e.g. --grace ${o.grace.value.trim()}s or 10m`)
    }
    return o.prefix === "" ? fail("--bullmq-prefix must not be empty (BullMQ's is bull)") : Effect.void
  }
  const given = [Option.isSome(o.url) && "--bullmq-url", o.prefix !== "bull" && "--bullmq-prefix",
    o.allowMissing && "--bullmq-allow-missing", Option.isSome(o.grace) && "--grace"].filter((flag) => flag !== false)
  return given.length === 0 ? Effect.void : fail(`${given.join(", ")} asks about BullMQ's jobs: name the queues with --bullmq-queue`)
}

// The adapter over the named queues: BullMQ's url, else the locks' own Redis.
const queuesOf = (o: Bullmq, connection: Connection) =>
  Effect.gen(function*() {
    const url = Option.filter(o.url, (value) => value !== "")
    const locksUrl = Option.isSome(connection.cluster) ? Option.none() : yield* given(connection.url, "REDIS_URL")
    const nodes = yield* given(connection.cluster, "REDIS_CLUSTER_NODES")
    const where = Option.isSome(url)
      ? { connection: { url: url.value }, where: "--bullmq-url" }
      : Option.isSome(locksUrl)
      ? { connection: { url: locksUrl.value }, where: "the locks' Redis" }
      : Option.isSome(nodes)
      ? { connection: { nodes: nodes.value.split(",").map((n) => n.trim()).filter((n) => n !== "") }, where: "the locks' cluster" }
      : undefined
    if (where === undefined) return yield* Effect.fail(noRedis())
    const queues = yield* Effect.tryPromise({
      try: () => import("./cli/BullMQQueues.js"),
      catch: () => new CliError("--bullmq-queue needs the bullmq package: npm install bullmq")
    })
    return yield* queues.make({
      names: o.queues,
      prefix: o.prefix,
      allowMissing: o.allowMissing,
      timeout: connectTimeout,
      ...where
    }).pipe(Effect.mapError((error) => new CliError(error.message)))
  })

// "90s", "10m", "500ms" as a shell is typed; anything else ("10 minutes") as the Reaper reads it. A bare number is
// refused (by checkBullmq): `--grace 5` could mean seconds or minutes, and read as milliseconds it asks about every
// lock, even one whose job is still on its way.
const graceOf = (text: string): Duration.Input => {
  const compact = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim())
  if (compact === null) return text as Duration.Input
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[compact[2] as "ms"]
  return Number(compact[1]) * unit
}

// The grace as the answer says it: with its unit.
const graceText = (text: string): string => {
  const compact = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim())
  if (compact === null) return text.trim()
  const word = { ms: "ms", s: "s", m: "minute(s)", h: "hour(s)", d: "day(s)" }[compact[2] as "ms"]
  return `${compact[1]} ${word}`
}

const freedLines = (dryRun: boolean, freed: ReadonlyArray<Redis.ReapCandidate>): Array<string> =>
  freed.map((f) => `${dryRun ? "would free" : "freed"} ${f.lock} (job ${f.jid} of queue ${f.queue ?? "-"}: gone)`)

const reap = Command.make("reap", { dryRun, redisUrl, prefix, json, bullmq }, (o) =>
  Effect.andThen(Effect.andThen(checkPrefix(o.prefix), checkBullmq(o.bullmq)), withRedis(
    o.redisUrl,
    Effect.gen(function*() {
      const asks = o.bullmq.queues.length > 0
      const runner = yield* Reaper.make({
        prefix: o.prefix,
        dryRun: o.dryRun,
        ...(Option.isSome(o.bullmq.grace) ? { grace: graceOf(o.bullmq.grace.value) } : {})
      }).pipe(Effect.mapError((error) => new CliError(error.issues.map((i) => `--${i.field}: ${i.reason}`).join("; "))))
      const freed: Array<Redis.ReapCandidate> = []
      const walk = runner.pass((sofar, orphans) =>
        Effect.andThen(
          Effect.sync(() => freed.push(...orphans)),
          progress(`walked ${sofar.scanned}, ${o.dryRun ? "would remove" : "removed"} ${
            sofar.members + sofar.holders + sofar.orphans
          }`)
        )
      ).pipe(Effect.ensuring(runner.release))
      // Told the queues, the pass asks them whether each old enough holder's job is gone.
      const pass = yield* (asks
        ? Effect.scoped(Effect.flatMap(queuesOf(o.bullmq, o.redisUrl), (queue) => Effect.provideService(walk, JobQueue, queue)))
        : walk)
      yield* progressDone
      const grace = Option.match(o.bullmq.grace, { onNone: () => "10 minutes", onSome: graceText })
      yield* print(o.json, asks ? { ...pass, freed } : pass, () =>
        pass.ran
          ? [
            ...freedLines(o.dryRun, freed),
            `${pass.scanned} index entries walked in ${pass.steps} step(s); ${o.dryRun ? "would remove" : "removed"} ` +
            `${pass.members} index entries of gone locks, ${pass.holders} holders whose time ran out, ` +
            `${pass.orphans} orphans (locks with no expiry whose job is gone)`,
            asks
              ? `(a lock younger than ${grace} is not asked about: its job may still be on its way, --grace; a lock ` +
                `with an expiry, a lockTtl, is no orphan: it ends then, and until_expired keeps it past its job on purpose)`
              : "(orphans, locks with no expiry whose job is gone, are freed only with --bullmq-queue)"
          ].join("\n")
          : "another reaper is running; nothing done")
    })
  ))).pipe(Command.withDescription(
    "one pass of the clean-up the workers' reaper runs: removes what no job needs any more (entries of the index, " +
      "the list of locks this command walks, whose lock is gone; holders whose time ran out); with --bullmq-queue, " +
      "also the orphans: locks with no expiry (no lockTtl) whose BullMQ job is gone (removed, completed or failed " +
      "with its lock left); a lock with an expiry ends then, whether its job is gone or not. It stops " +
      "no running job. Example: unique-jobs reap --dry-run --bullmq-queue emails"
  ))

const stats = Command.make("stats", { redisUrl, prefix, json }, (o) =>
  Effect.andThen(checkPrefix(o.prefix), withLocks(o, (locks) =>
    Effect.gen(function*() {
      const s = yield* locks.stats
      yield* print(o.json, s, () =>
        columns(["measure", "value"], [
          ["index size", String(s.indexSize)],
          ["queue locks", String(s.byPhase.queue)],
          ["run locks", String(s.byPhase.run)],
          ...Object.entries(s.byType).map(([type, n]) => [`type ${type}`, String(n)]),
          ["oldest", s.oldest === undefined ? "-" : `${s.oldest.name} (${time(s.oldest.score)})`],
          ["stale (the next reaper pass removes)", String(s.stale)],
          ...(s.unanswered ?? []).map(({ shard }) => [`shard ${shard}`, "did not answer: its locks are not counted"])
        ]))
      // A partial answer is printed, and fails: a script must not take it for the whole index.
      if (s.unanswered !== undefined && s.unanswered.length > 0) {
        return yield* fail(
          `partial answer: ${s.unanswered.length} shard(s) of the index did not answer and their locks are not ` +
            `counted (a master may be down, a failover under way; try again in a few seconds): ${
              s.unanswered.map((u) => u.reason).join("; ")
            }`
        )
      }
      // All zeros may be a prefix mistyped as much as an idle app.
      if (s.indexSize === 0 && !o.json) {
        yield* Console.error(`nothing is locked under --prefix ${o.prefix} (is it your workers' lockPrefix?)`)
      }
    })
  ))).pipe(Command.withDescription(
    "what the index (the list of every lock under --prefix) holds: its size, the queue locks (held from enqueue " +
      "until the job runs) and run locks (held while it runs), the count of each lock type (until_executed, ...), " +
      "the oldest lock, and how many entries the next reaper pass removes. On a cluster with a shard that does not " +
      "answer (a master down), the other shards' counts are printed, naming the shard, and the exit code is 1. " +
      "Example: unique-jobs stats --json"
  ))

const web = Command.make("web", {
  redisUrl,
  prefix,
  host: Options.text("host").pipe(
    Options.withPseudoName("HOST"),
    Options.withDefault("127.0.0.1"),
    Options.withDescription(
      "the address to bind, e.g. --host 0.0.0.0; default 127.0.0.1. Anything but the loopback needs a token " +
        "(--token or UNIQUE_JOBS_WEB_TOKEN)"
    )
  ),
  port: Options.integer("port").pipe(
    Options.withPseudoName("PORT"),
    Options.withDefault(7380),
    Options.withDescription(`the port, e.g. --port 7381 (${portRange.min} to ${portRange.max}, 0: a free one; default 7380)`)
  ),
  token: Options.redacted("token").pipe(
    Options.withPseudoName("TOKEN"),
    Options.optional,
    Options.withDescription(
      "the token every request must carry (Authorization: Bearer TOKEN, or open the address once with " +
        "?token=TOKEN and the browser keeps a session), 16 " +
        "characters or more, e.g. --token \"$(openssl rand -hex 16)\". Others on the machine can read a command line " +
        "(ps): prefer the UNIQUE_JOBS_WEB_TOKEN environment variable, which --token overrides"
    )
  ),
  readOnly: Options.boolean("read-only").pipe(Options.withDescription("serve no change at all: pages and the API only read")),
  trustProxy: Options.boolean("trust-proxy").pipe(
    Options.withDescription(
      "behind a reverse proxy you run: take the Host and client address from X-Forwarded-Host/-For (never without one)"
    )
  ),
  bullmq
}, (o) =>
  Effect.andThen(
    Effect.andThen(checkPrefix(o.prefix), checkBullmq(o.bullmq)),
    Effect.gen(function*() {
      const fromEnv = yield* Config.option(Config.redacted("UNIQUE_JOBS_WEB_TOKEN")).pipe(
        Effect.mapError((error) => new CliError(`UNIQUE_JOBS_WEB_TOKEN: ${error.message}`))
      )
      // The flag, else the variable; an empty one is no token, as if unset.
      const token = Option.filter(Option.orElse(o.token, () => fromEnv), (t) => Redacted.value(t) !== "")
      if (Option.isNone(token) && !Security.isLoopback(o.host)) {
        return yield* fail(
          `--host ${o.host} is not the loopback: the admin UI there needs a token every request carries; pass ` +
            `--token TOKEN (16 characters or more) or set UNIQUE_JOBS_WEB_TOKEN`
        )
      }
      // Replicas behind one load balancer share it, so a form one served is accepted by another.
      const secret = yield* Config.option(Config.redacted("UNIQUE_JOBS_WEB_SECRET")).pipe(
        Effect.mapError((error) => new CliError(`UNIQUE_JOBS_WEB_SECRET: ${error.message}`))
      )
      const store = yield* storeOf(o.redisUrl, false)
      // Told the queues, the page's reaper pass frees the locks whose BullMQ job is gone, as `reap` does.
      const queue = o.bullmq.queues.length > 0 ? yield* queuesOf(o.bullmq, o.redisUrl) : undefined
      const served = yield* Web.serve({
        host: o.host,
        port: o.port,
        prefix: o.prefix,
        readOnly: o.readOnly,
        trustProxy: o.trustProxy,
        ...(Option.isSome(o.bullmq.grace) ? { reaperGrace: graceOf(o.bullmq.grace.value) } : {}),
        ...(Option.isSome(secret) && Redacted.value(secret.value) !== "" ? { secret: secret.value } : {}),
        ...(Option.isSome(token) ? { token: token.value } : {})
      }).pipe(
        Effect.provideService(Redis.RedisService, store),
        (serving) => (queue === undefined ? serving : Effect.provideService(serving, JobQueue, queue))
      )
      const queues = o.bullmq.queues.length > 0 ? `, BullMQ queues ${o.bullmq.queues.join(", ")}` : ""
      yield* Console.log(
        `unique-jobs web: ${served.url}/ (prefix ${o.prefix}${o.readOnly ? ", read-only" : ""}${queues}); Ctrl-C stops`
      )
      return yield* Effect.never
    }).pipe(Effect.scoped, Effect.mapError(webError))
  )).pipe(Command.withDescription(
    "the admin UI in a browser: lists, shows, deletes and unlocks locks and runs a reaper pass on request (it " +
      "runs none by itself; with --bullmq-queue, that pass also frees locks whose job is gone). Binds 127.0.0.1 " +
      "(any other --host needs --token or UNIQUE_JOBS_WEB_TOKEN). UNIQUE_JOBS_WEB_SECRET (32 characters or more) " +
      "signs its forms; without it each start makes a new one, so several replicas behind one balancer must share " +
      "it. Example: unique-jobs web, then open http://127.0.0.1:7380/"
  ))

// Web.serve's options as the command line names them: a short --token is the flag's fault, not "lock options".
const webFlags: Readonly<Record<string, string>> = {
  token: "--token (or UNIQUE_JOBS_WEB_TOKEN)",
  secret: "UNIQUE_JOBS_WEB_SECRET",
  host: "--host",
  port: "--port",
  reaperGrace: "--grace"
}

const webError = (error: { readonly message: string }): CliError => {
  if (error instanceof CliError) return error
  const issues = (error as { readonly issues?: ReadonlyArray<{ readonly field: string; readonly reason: string }> }).issues
  return issues === undefined
    ? new CliError(error.message)
    : new CliError(issues.map((issue) => `${webFlags[issue.field] ?? issue.field}: ${issue.reason}`).join("; "))
}

// The layout Redis records for the prefix, read by the store `withRedis` gives (one that adopts it).
const layoutOf = (prefix: string) =>
  Effect.flatMap(Redis.RedisService, (store) =>
    store.layout === undefined ? Effect.succeed(undefined) : store.layout(prefix))

const describeLayout = (layout: Redis.PrefixLayout): string =>
  `${layout.cluster ? `Redis Cluster, ${layout.shards} shard${layout.shards === 1 ? "" : "s"}` : "one Redis (standalone)"}${
    layout.recorded ? "" : " (nothing recorded yet: the default, recorded by the first lock)"
  }`

const layoutShow = Command.make("show", { redisUrl, prefix, json }, (o) =>
  Effect.andThen(
    checkPrefix(o.prefix),
    withRedis(
      o.redisUrl,
      Effect.flatMap(layoutOf(o.prefix), (layout) =>
        layout === undefined
          ? fail("this store has no layout")
          : print(o.json, layout, () => `${o.prefix}: ${describeLayout(layout)}`))
    )
  )).pipe(
    Command.withDescription(
      "the layout Redis records for the prefix: standalone (one Redis) or cluster (keys spread over N shards, the " +
        "workers' shards option), written by the first lock so that processes configured differently are refused. " +
        "Example: unique-jobs layout show --prefix myapp"
    )
  )

const layoutReset = Command.make("reset", { redisUrl, prefix, json }, (o) =>
  Effect.andThen(
    checkPrefix(o.prefix),
    withRedis(
      o.redisUrl,
      Effect.flatMap(Redis.resetLayout(o.prefix), (reset) =>
        print(o.json, { reset }, () =>
          reset
            ? `${o.prefix}: the layout record is deleted; the next process to lock under the prefix records its own`
            : `${o.prefix}: nothing recorded, nothing to reset`))
    )
  )).pipe(Command.withDescription(
    "forget the prefix's recorded layout, to move it to another (a cluster, or another shards count): refused while " +
      "any lock is held under it (drained: no job queued or running with a lock). Stop its workers, run this, then " +
      "start them with the new Redis options (Redis.layerCluster, shards); the first lock records the new layout. A " +
      "process left running is refused at its next lock under the prefix (LayoutMismatch, reset) until restarted. " +
      "Example: unique-jobs layout reset --prefix myapp"
  ))

const layoutCommand = Command.make("layout").pipe(
  Command.withSubcommands([layoutShow, layoutReset]),
  Command.withDescription(
    "how a prefix's keys are laid out in Redis, standalone or cluster with N shards (show), and forgetting it to " +
      "move to another (reset); only needed when moving an app to Redis Cluster or changing its shards. " +
      "Example: unique-jobs layout show"
  )
)

// What a newcomer meets in every command's help, said once at the top.
const glossary: ReadonlyArray<readonly [string, string]> = [
  ["digest", "a job's lock name, from its worker (BullMQ: the job's name), queue and arguments"],
  ["queue lock, run lock", "held from enqueue until the job starts (phase queue), and while it runs (phase run, " +
  "<digest>:RUN); the lock type says which a job takes"],
  ["holder", "a job id (BullMQ's job.id; jid in the output) holding a lock; a lock with a limit has several"],
  ["lease", "how long a running job's hold lasts unless renewed: a job whose process died stops renewing, and its " +
  "lock frees"],
  ["revoke", "what del and unlock do to a running job's hold: marked, not removed; the job fails with LockLost at " +
  "its next renewal, then the lock frees"],
  ["index", "the sorted set of every lock under a prefix, which list, stats and reap walk"],
  ["orphan", "a lock with no expiry (no lockTtl) whose job is gone (removed, or ended without letting go): nothing " +
  "else ends it, and reap --bullmq-queue frees it. A lock with a lockTtl ends at its expiry and is never an orphan " +
  "(until_expired keeps its lock past its job on purpose)"],
  ["layout", "how a prefix's keys lie: one Redis, or a Redis Cluster with N shards (see layout show)"]
]

/**
 * The whole command.
 *
 * @since 0.1.0
 * @category commands
 */
export const command = Command.make("unique-jobs").pipe(
  Command.withDescription(HelpDoc.blocks([
    HelpDoc.p(
      "inspect and clean the unique-job locks effect-unique-jobs keeps in Redis. Each command's own --help says " +
        "more (or unique-jobs help COMMAND). Example: unique-jobs locks list --redis-url redis://localhost:6379 " +
        "--limit 20"
    ),
    HelpDoc.p("Words the commands use:"),
    ...glossary.map(([word, meaning]) => HelpDoc.p(`  ${word}: ${meaning}`))
  ])),
  Command.withSubcommands([digest, locksCommand, reap, stats, layoutCommand, web])
)

/**
 * Runs the command on `argv` (`process.argv`). Needs a Path, a FileSystem and a Terminal: `platform` provides them
 * on Node (or `NodeContext.layer` of @effect/platform-node, where you have it).
 *
 * @since 0.1.0
 * @category commands
 */
export const run = (
  args: ReadonlyArray<string>
): Effect.Effect<void, CliError | ValidationError.ValidationError, FileSystem.FileSystem | Path.Path | Terminal.Terminal> =>
  Effect.andThen(
    Effect.andThen(checkQueueValues(args), checkMistakes(args)),
    runCommand(args).pipe(
      // What @effect/cli refuses itself (a missing argument, a value not of a choice) it has said; its usage follows.
      Effect.tapError((error) =>
        error instanceof CliError || ValidationError.isHelpRequested(error)
          ? Effect.void
          : Console.error(CliMistakes.usageLine(...commandAt(args)))
      ),
      Effect.provide(CliConfig.layer({ showBuiltIns: false }))
    )
  )

// @effect/cli's own options, shown under each command's help instead of its built-in list (which offers --wizard).
const footer = HelpDoc.p(
  "Every command also takes --help (this text), --log-level LEVEL (all, trace, debug, info, warning, error, fatal, " +
    "none; e.g. --log-level debug, logs go to stderr), --completions SHELL (sh, bash, fish or zsh: prints a " +
    "completion script, e.g. unique-jobs --completions bash > /etc/bash_completion.d/unique-jobs) and --version."
)

const runCommand = Command.run(command, { name: "unique-jobs", version: "1.0.0", footer })

// The command tree as the mistakes check reads it: each command's usage from @effect/cli, with the ranges of its
// whole-number options.
const tree: CliMistakes.Node = CliMistakes.parent("unique-jobs", [
  CliMistakes.leaf("digest", Command.getUsage(digest)),
  CliMistakes.parent("locks", [
    CliMistakes.leaf("list", Command.getUsage(list), { "--limit": limitRange }),
    CliMistakes.leaf("show", Command.getUsage(show)),
    CliMistakes.leaf("del", Command.getUsage(del)),
    CliMistakes.leaf("unlock", Command.getUsage(unlock))
  ]),
  CliMistakes.leaf("reap", Command.getUsage(reap)),
  CliMistakes.leaf("stats", Command.getUsage(stats)),
  CliMistakes.parent("layout", [
    CliMistakes.leaf("show", Command.getUsage(layoutShow)),
    CliMistakes.leaf("reset", Command.getUsage(layoutReset))
  ]),
  CliMistakes.leaf("web", Command.getUsage(web), { "--port": portRange })
])

// The command `args` names (as far as it names one), and its path.
const commandAt = (args: ReadonlyArray<string>): [CliMistakes.Node, ReadonlyArray<string>] => {
  let node = tree
  const path = [tree.name]
  for (const word of args.slice(2)) {
    if (node._tag !== "Parent") break
    const child = node.children.find((c) => c.name === word.toLowerCase())
    if (child === undefined) continue
    node = child
    path.push(child.name)
  }
  return [node, path]
}

// An unknown command or option, a bad number, an argument too many: said with what was meant and the command's usage,
// before @effect/cli answers it less well. `--wizard` (@effect/cli's prompt for a command) waits for key presses:
// refused where there is no terminal to press them on.
const checkMistakes = (args: ReadonlyArray<string>): Effect.Effect<void, CliError> => {
  const end = args.indexOf("--")
  const words = (end === -1 ? args : args.slice(0, end)).slice(2)
  if (words.some((w) => w.toLowerCase() === "--wizard") && process.stdin.isTTY !== true) {
    return fail("--wizard asks for each option at a terminal, and there is none here (stdin is not one): see --help")
  }
  return Option.match(CliMistakes.check(tree, words), {
    onNone: () => Effect.void,
    onSome: (lines) => fail(lines.join("\n"))
  })
}

// @effect/cli drops an empty value of a repeated option (`--bullmq-queue ""`), and one missing at the end: the reap
// would ask about no queue, and free none of the locks it was asked to. So reap's are read from the command line.
const checkQueueValues = (args: ReadonlyArray<string>): Effect.Effect<void, CliError> => {
  const end = args.indexOf("--")
  const given = (end === -1 ? args : args.slice(0, end)).slice(2)
  // The subcommand: the first word that is no option of the command's own (--log-level, --completions take a value).
  let at = 0
  while (at < given.length && given[at]!.startsWith("-")) {
    at += ["--log-level", "--completions"].includes(given[at]!.toLowerCase()) ? 2 : 1
  }
  if (given[at] !== "reap") return Effect.void
  for (let i = at + 1; i < given.length; i++) {
    if (given[i]!.toLowerCase() !== "--bullmq-queue") continue
    const value = given[i + 1]
    if (value === undefined) return fail("--bullmq-queue needs a value: a queue name")
    if (value.trim() === "") return fail(`--bullmq-queue ${JSON.stringify(value)} is not a queue name`)
    i++
  }
  return Effect.void
}

/**
 * What `run` needs of the platform, on Node's own modules: its path module, a file system that refuses (the
 * commands read no files) and the process' terminal.
 *
 * @since 0.1.0
 * @category layers
 */
export const platform: Layer.Layer<FileSystem.FileSystem | Path.Path | Terminal.Terminal> = CliPlatform.layer
