/**
 * The `unique-jobs` command: digests, locks, the reaper and stats from a shell. Tables for people, `--json` for
 * scripts (stdout carries only the answer; logs go to stderr); `--redis-url` or `REDIS_URL` (Redis Cluster:
 * `--cluster` or `REDIS_CLUSTER_NODES`); a bad argument, an unreachable Redis, or a command that did nothing of what
 * was asked exits non-zero with one line saying why (and what was probably meant).
 *
 * @since 0.1.0
 */
import * as Argument from "effect/cli/Argument"
import type * as CliErrors from "effect/cli/CliError"
import * as CliOutput from "effect/cli/CliOutput"
import * as Command from "effect/cli/Command"
import * as CommandSpec from "effect/cli/CommandSpec"
import * as Flag from "effect/cli/Flag"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
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
export class CliError extends Schema.TaggedError<CliError>("effect-unique-jobs/CliError")("CliError", {
  message: Schema.String
}) {}

const json = Flag.Boolean("json").pipe(
  Flag.withDefault(false),
  Flag.withDescription("print JSON for scripts instead of a table, e.g. --json | jq .")
)
const redisUrl = {
  url: Flag.String("redis-url").pipe(
    Flag.withMetavar("URL"),
    Flag.optional,
    Flag.withDescription(
      "where the locks are: redis://[:password@]host:port[/db], e.g. --redis-url redis://localhost:6379/0 " +
        "(default: the REDIS_URL environment variable)"
    )
  ),
  cluster: Flag.String("cluster").pipe(
    Flag.withMetavar("NODES"),
    Flag.optional,
    Flag.withDescription(
      "a Redis Cluster instead of --redis-url: some of its nodes, e.g. --cluster 10.0.0.1:7000,10.0.0.2:7000 " +
        "(default: the REDIS_CLUSTER_NODES environment variable)"
    )
  )
}

/** Where the locks are: `--redis-url` or `--cluster`, as given. */
type Connection = { readonly url: Option.Option<string>; readonly cluster: Option.Option<string> }
const prefix = Flag.String("prefix").pipe(
  Flag.withMetavar("PREFIX"),
  Flag.withDefault(Digest.defaultPrefix),
  Flag.withDescription(
    `the lock prefix your workers use (their lockPrefix), e.g. --prefix myapp; default ${Digest.defaultPrefix}`
  )
)
const dryRun = Flag.Boolean("dry-run").pipe(
  Flag.withDefault(false),
  Flag.withDescription("show what would go (and which running jobs would be revoked), change nothing")
)

// What revoking does to a running job, said by each command that may do it.
const revokeHelp = "A running job's run lock is revoked, not removed, so no second copy starts while it may still " +
  "run: the job learns it at its next lease renewal (within a third of its lease), its perform is interrupted and " +
  "it fails with LockLost (BullMQ retries it if it has attempts left); then the lock frees. A perform that does not " +
  "stop (a processor's function that ignores its signal) keeps the lock, still revoked, until it returns."

const print = (asJson: boolean, value: unknown, table: () => string) =>
  Console.log(asJson ? JSON.stringify(value) : table())

const fail = (message: string) => Effect.fail(new CliError({ message }))

// Checks made before Redis is asked anything: a mistake is said at once, naming what was probably meant.
const isPrefix = Schema.is(PrefixSchema)

const checkPrefix = (prefix: string): Effect.Effect<void, CliError> =>
  isPrefix(prefix)
    ? Effect.void
    : fail(
      `--prefix ${JSON.stringify(prefix)} is not a lock prefix: use letters, digits, '_', '-', '.' and inner ':' ` +
        `only (no spaces, '*', braces, or :LOCKED, :RUN, :digests)`
    )

// A word after `--` is taken as the argument whatever it looks like: one that starts with '-' is a mistyped option
// (`-- --jsno`), refused as one.
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
  return own !== undefined && isPrefix(own)
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
      : Effect.mapError(
        Config.option(Config.String(variable)),
        (error) => new CliError({ message: `${variable}: ${error.message}` })
      ),
    Option.filter((value) => value !== "")
  )

const noRedis = () =>
  new CliError({
    message: "no Redis: pass --redis-url redis://host:port (or --cluster host:port,…), or set REDIS_URL " +
      "(or REDIS_CLUSTER_NODES)"
  })

// The CLI and the web UI read each prefix's layout as Redis records it (one Redis, or a cluster and its shards), so
// they see what the app wrote with no flag; where nothing is recorded yet, the default layout. They record nothing.
const adopting: IORedisStore.Own = { layout: "adopt" }

// Worded as Redis.make words a bad option.
const decoded = <A>(
  options: Result.Result<A, { readonly issues: ReadonlyArray<{ readonly field: string; readonly reason: string }> }>
): Effect.Effect<A, CliError> =>
  Result.match(options, {
    onFailure: (invalid) =>
      fail(`Redis options failed: ${invalid.issues.map((issue) => `${issue.field}: ${issue.reason}`).join("; ")}`),
    onSuccess: Effect.succeed
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
        Scope.provide(storeOf(connection, true), scope),
        (store) => Effect.provideService(self, Redis.RedisService, store)
      )
    )
    yield* Effect.forkDetach(Scope.close(scope, Exit.void))
    return yield* exit
  }).pipe(Effect.mapError((error) => (error instanceof CliError ? error : new CliError({ message: error.message }))))

const connectTimeout = "3 seconds"

/** Runs `self` with the admin API for `--prefix`, on the store `withRedis` gives. */
const withLocks = <A>(
  o: { readonly redisUrl: Connection; readonly prefix: string },
  self: (locks: Context.Service.Shape<typeof Locks.Locks>) => Effect.Effect<A, { readonly message: string } | CliError, Redis.RedisService>
): Effect.Effect<A, CliError> => withRedis(o.redisUrl, Effect.flatMap(Locks.make({ prefix: o.prefix }), self))

const digest = Command.make(
  "digest",
  {
    worker: Flag.String("worker").pipe(
      Flag.withMetavar("NAME"),
      Flag.withDescription(
        "required: the worker's name as the job is enqueued with; for a BullMQ job, the job's name (queue.add(name, " +
          "data)), e.g. --worker ChargeCustomerJob"
      )
    ),
    queue: Flag.String("queue").pipe(
      Flag.withMetavar("QUEUE"),
      Flag.withDefault("default"),
      Flag.withDescription(
        "the job's queue name, part of the digest unless --across-queues; for a BullMQ job, its queue's name, e.g. " +
          "--queue mailers (default: default, the name a job given no queue gets)"
      )
    ),
    args: Flag.String("args").pipe(
      Flag.withMetavar("JSON"),
      Flag.withDescription(
        "required: the job's arguments, a JSON array; for a BullMQ job, [data], e.g. --args '[{\"account\": 42}]'"
      )
    ),
    algorithm: Flag.Literals("algorithm", ["legacy", "modern"]).pipe(
      Flag.withMetavar("ALGORITHM"),
      Flag.withDefault("legacy" as const),
      Flag.withDescription(
        "the digest algorithm your workers use (their digestAlgorithm option): legacy, MD5 as the Ruby gem " +
          "sidekiq-unique-jobs computes it, the default; modern, SHA3-256"
      )
    ),
    acrossQueues: Flag.Boolean("across-queues").pipe(
      Flag.withDefault(false),
      Flag.withDescription("the worker is unique across queues (uniqueAcrossQueues): the queue is left out")
    ),
    acrossWorkers: Flag.Boolean("across-workers").pipe(
      Flag.withDefault(false),
      Flag.withDescription("the worker is unique across workers (uniqueAcrossWorkers): the worker is left out")
    ),
    prefix,
    json
  },
  (o) =>
    Effect.gen(function*() {
      // What UniqueJob.make refuses, refused here too: no job has a digest under such a name or prefix.
      if (o.worker === "") return yield* fail("--worker must not be empty (a worker's name)")
      if (o.queue === "") return yield* fail("--queue must not be empty (leave it out for default)")
      yield* checkPrefix(o.prefix)
      const args = yield* Effect.try({
        try: () => JSON.parse(o.args) as unknown,
        catch: () => new CliError({ message: `--args is not JSON: ${o.args} (write a JSON array, like '[1, "a"]')` })
      })
      if (!Array.isArray(args)) return yield* fail(`--args must be a JSON array, got ${o.args}`)
      const value = yield* Digest.make({ worker: o.worker, queue: o.queue, args }, {
        algorithm: o.algorithm,
        uniqueAcrossQueues: o.acrossQueues,
        uniqueAcrossWorkers: o.acrossWorkers,
        prefix: o.prefix
      }).pipe(Effect.mapError((error) => new CliError({ message: error.message })))
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
    pattern: Argument.String("PATTERN").pipe(
      Argument.withDescription("a glob over lock names, e.g. 'uniquejobs:ab*' (default: every lock under --prefix)"),
      Argument.optional
    ),
    limit: Flag.Int("limit").pipe(
      Flag.withMetavar("N"),
      Flag.withDefault(100),
      Flag.withDescription(
        `show at most N locks, e.g. --limit 20 (${limitRange.min} to ${limitRange.max}, default 100); when more ` +
          "may match, the command ends with the --cursor of the next page (on stderr)"
      )
    ),
    cursor: Flag.String("cursor").pipe(
      Flag.withMetavar("CURSOR"),
      Flag.withDefault("0"),
      Flag.withDescription(
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

const digestArg = Argument.String("DIGEST").pipe(
  Argument.withDescription(
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
    pattern: Argument.String("PATTERN").pipe(
      Argument.withDescription("required: a glob over lock names, e.g. 'uniquejobs:ab*' or 'uniquejobs:*' for every lock")
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
    jid: Argument.String("JID").pipe(
      Argument.withDescription("required: the job id holding it (BullMQ's job.id), as locks show prints it")
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
const bullmq = {
  queues: Flag.String("bullmq-queue").pipe(
    Flag.withMetavar("QUEUE"),
    Flag.atLeast(0),
    Flag.withDescription(
      "a BullMQ queue whose jobs' locks to free when the job is gone (drained, removed, obliterated, completed); " +
        "repeat for each queue, e.g. --bullmq-queue emails --bullmq-queue payments. A lock of a queue not named " +
        "here is kept"
    )
  ),
  url: Flag.String("bullmq-url").pipe(
    Flag.withMetavar("URL"),
    Flag.optional,
    Flag.withDescription(
      "the Redis BullMQ keeps the queues in, e.g. --bullmq-url redis://queues:6379 (default: the locks' Redis)"
    )
  ),
  prefix: Flag.String("bullmq-prefix").pipe(
    Flag.withMetavar("PREFIX"),
    Flag.withDefault("bull"),
    Flag.withDescription("BullMQ's key prefix (its prefix option), e.g. --bullmq-prefix myapp; default bull")
  ),
  allowMissing: Flag.Boolean("bullmq-allow-missing").pipe(
    Flag.withDefault(false),
    Flag.withDescription(
      "a named queue with no keys in Redis (obliterated) counts as empty, and its locks are freed; without it such a " +
        "queue is refused. Careful: a misspelt queue name has no keys either"
    )
  ),
  grace: Flag.String("grace").pipe(
    Flag.withMetavar("DURATION"),
    Flag.optional,
    Flag.withDescription(
      "with --bullmq-queue: how old a lock must be before its job is asked about (a job just added may not be in " +
        "its queue yet), with its unit, e.g. --grace 90s, 10m, 1h, 500ms (default 10m)"
    )
  )
}

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
      catch: () => new CliError({ message: "--bullmq-queue needs the bullmq package: npm install bullmq" })
    })
    return yield* queues.make({
      names: o.queues,
      prefix: o.prefix,
      allowMissing: o.allowMissing,
      timeout: connectTimeout,
      ...where
    }).pipe(Effect.mapError((error) => new CliError({ message: error.message })))
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
      }).pipe(
        Effect.mapError((error) =>
          new CliError({ message: error.issues.map((i) => `--${i.field}: ${i.reason}`).join("; ") })
        )
      )
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
  host: Flag.String("host").pipe(
    Flag.withMetavar("HOST"),
    Flag.withDefault("127.0.0.1"),
    Flag.withDescription(
      "the address to bind, e.g. --host 0.0.0.0; default 127.0.0.1. Anything but the loopback needs a token " +
        "(--token or UNIQUE_JOBS_WEB_TOKEN)"
    )
  ),
  port: Flag.Int("port").pipe(
    Flag.withMetavar("PORT"),
    Flag.withDefault(7380),
    Flag.withDescription(`the port, e.g. --port 7381 (${portRange.min} to ${portRange.max}, 0: a free one; default 7380)`)
  ),
  token: Flag.Redacted("token").pipe(
    Flag.withMetavar("TOKEN"),
    Flag.optional,
    Flag.withDescription(
      "the token every request must carry (Authorization: Bearer TOKEN, or open the address once with " +
        "?token=TOKEN and the browser keeps a session), 16 " +
        "characters or more, e.g. --token \"$(openssl rand -hex 16)\". Others on the machine can read a command line " +
        "(ps): prefer the UNIQUE_JOBS_WEB_TOKEN environment variable, which --token overrides"
    )
  ),
  readOnly: Flag.Boolean("read-only").pipe(
    Flag.withDefault(false),
    Flag.withDescription("serve no change at all: pages and the API only read")
  ),
  trustProxy: Flag.Boolean("trust-proxy").pipe(
    Flag.withDefault(false),
    Flag.withDescription(
      "behind a reverse proxy you run: take the Host and client address from X-Forwarded-Host/-For (never without one)"
    )
  ),
  bullmq
}, (o) =>
  Effect.andThen(
    Effect.andThen(checkPrefix(o.prefix), checkBullmq(o.bullmq)),
    Effect.gen(function*() {
      const fromEnv = yield* Config.option(Config.Redacted("UNIQUE_JOBS_WEB_TOKEN")).pipe(
        Effect.mapError((error) => new CliError({ message: `UNIQUE_JOBS_WEB_TOKEN: ${error.message}` }))
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
      const secret = yield* Config.option(Config.Redacted("UNIQUE_JOBS_WEB_SECRET")).pipe(
        Effect.mapError((error) => new CliError({ message: `UNIQUE_JOBS_WEB_SECRET: ${error.message}` }))
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
    ? new CliError({ message: error.message })
    : new CliError({
      message: issues.map((issue) => `${webFlags[issue.field] ?? issue.field}: ${issue.reason}`).join("; ")
    })
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
  Command.withDescription(
    [
      "inspect and clean the unique-job locks effect-unique-jobs keeps in Redis. Each command's own --help says " +
      "more (or unique-jobs help COMMAND). Example: unique-jobs locks list --redis-url redis://localhost:6379 " +
      "--limit 20",
      "",
      "Words the commands use:",
      ...glossary.map(([word, meaning]) => `  ${word}: ${meaning}`)
    ].join("\n")
  ),
  Command.withSubcommands([digest, locksCommand, reap, stats, layoutCommand, web])
)

/**
 * Runs the command on `argv` (`process.argv`: the node binary and the script first). Needs what `effect/cli` needs of
 * the platform (`Command.Environment`): `platform` provides it on Node (or `NodeServices.layer` of
 * @effect/platform-node, where you have it).
 *
 * @since 0.1.0
 * @category commands
 */
export const run = (
  args: ReadonlyArray<string>
): Effect.Effect<void, CliError | CliErrors.CliError, Command.Environment> =>
  Effect.andThen(
    Effect.andThen(checkQueueValues(args), checkMistakes(args)),
    Effect.suspend(() => runCommand(args.slice(2))).pipe(
      // What effect/cli refuses itself (a value it cannot parse) it has said; the command's usage follows.
      Effect.tapError((error) =>
        error instanceof CliError || !(error._tag === "ShowHelp" && error.errors.length > 0)
          ? Effect.void
          : Console.error(CliMistakes.usageLine(...commandAt(args)))
      ),
      // A command of commands named alone (`unique-jobs locks`) shows its help, and runs nothing: no failure.
      Effect.catchIf(
        (error) => !(error instanceof CliError) && error._tag === "ShowHelp" && error.errors.length === 0,
        () => Effect.void
      ),
      Effect.provideService(CliOutput.Presenter, presenter),
      // Colours where stdout is a terminal, as effect/cli sees it when it runs.
      (self) =>
        Effect.suspend(() => Effect.provideService(self, CliOutput.Formatter, formatter(CliOutput.defaultFormatter())))
    )
  )

// effect/cli's help, with a description of several lines indented as its first, and without --wizard (its prompt
// for each option of a command: it still works at a terminal, and is refused elsewhere, see checkMistakes).
const formatter = (base: CliOutput.Formatter): CliOutput.Formatter => ({
  ...base,
  formatHelpDoc: (doc) =>
    base.formatHelpDoc({
      ...doc,
      description: doc.description.replace(/\n(?=.)/g, "\n  "),
      ...(doc.globalFlags === undefined ? {} : { globalFlags: doc.globalFlags.filter((flag) => flag.name !== "wizard") })
    })
})

// Help and the version on stdout; a command line effect/cli cannot parse is said on stderr, one line per mistake,
// as the command's own mistakes are (the usage line follows), without the whole help page before it.
const presenter: CliOutput.Presenter = {
  present: Effect.fnUntraced(function*(event) {
    const format = yield* CliOutput.Formatter
    switch (event._tag) {
      case "Help":
        return yield* Console.log(format.formatHelpDoc(event.helpDoc))
      case "Version":
        return yield* Console.log(format.formatVersion(event.name, event.version))
      case "InvalidInvocation":
        return yield* Console.error(event.errors.map((error) => `unique-jobs: ${error.message}`).join("\n"))
    }
  })
}

const runCommand = Command.runWith(command, { version: "2.0.0" })

// The command tree as the mistakes check reads it: each command's flags and arguments from effect/cli, with the
// ranges of its whole-number options.
const specOf = (...path: ReadonlyArray<string>): CommandSpec.Spec =>
  Option.getOrThrow(CommandSpec.resolve(command, ["unique-jobs", ...path]))

const tree: CliMistakes.Node = CliMistakes.parent("unique-jobs", [
  CliMistakes.leaf("digest", specOf("digest")),
  CliMistakes.parent("locks", [
    CliMistakes.leaf("list", specOf("locks", "list"), { "--limit": limitRange }),
    CliMistakes.leaf("show", specOf("locks", "show")),
    CliMistakes.leaf("del", specOf("locks", "del")),
    CliMistakes.leaf("unlock", specOf("locks", "unlock"))
  ]),
  CliMistakes.leaf("reap", specOf("reap")),
  CliMistakes.leaf("stats", specOf("stats")),
  CliMistakes.parent("layout", [
    CliMistakes.leaf("show", specOf("layout", "show")),
    CliMistakes.leaf("reset", specOf("layout", "reset"))
  ]),
  CliMistakes.leaf("web", specOf("web"), { "--port": portRange })
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
// before effect/cli answers it less well. `--wizard` (effect/cli's prompt for a command) waits for key presses:
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

// An empty value of a repeated option (`--bullmq-queue ""`), or one missing at the end, would have the reap ask about
// no queue, and free none of the locks it was asked to: reap's are read from the command line, and said by name.
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
    // effect/cli would read a value starting with "-" as a flag: refused here, as checkBullmq refuses it.
    if (value.trim() === "" || value.startsWith("-")) {
      return fail(`--bullmq-queue ${JSON.stringify(value)} is not a queue name`)
    }
    i++
  }
  return Effect.void
}

/**
 * What `run` needs of the platform, on Node's own modules: its path module, a file system that refuses (the
 * commands read no files), the process' terminal and standard streams, and a spawner that refuses (they run no
 * other program).
 *
 * @since 0.1.0
 * @category layers
 */
export const platform: Layer.Layer<Command.Environment> = CliPlatform.layer
