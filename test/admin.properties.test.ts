/**
 * Properties of the admin surface (issue 18, items 2, 5 and 16). Random runs of lock calls (queue and run locks, take,
 * release, renew) mixed with the admin's calls (`Store.remove`, `Locks.delete`, `Locks.unlock`,
 * `Locks.deleteByPattern`), on the memory store and on the scripts at once: both answer alike, hold the same holders
 * after every step, and the admin's rules hold on both: a run-lock holder whose lease was live is never removed by an
 * admin call, only revoked (so no second copy can start while it runs), a revoked hold is never renewed, what the
 * admin targeted holds no unrevoked holder afterwards, and keys that are not this library's are never touched.
 * Beside them: `unique-jobs locks del` run in-process over any number of locks deletes every one, over every page; a
 * page of a lock's holders (`Store.fetch` with a count) reads about that many, never the whole hash, and cuts each
 * entry longer than its `bytes`, telling its whole length, on both stores; a page of `Locks.list` is read in scans of
 * at most 200, and a row keeps at most `holders` of its holders; `deleteByPattern` removes in scripts of at most 50
 * locks; `Locks.stats` over shards, any of them down, counts those that answer and names the others; after a layout
 * reset, a process that read the old layout is refused every lock.
 * More cases: UNIQUE_JOBS_PROPERTY_RUNS=100 npx vitest run test/admin.properties.test.ts
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Console from "effect/Console"
import * as Exit from "effect/Exit"
import * as fc from "fast-check"
import * as Result from "effect/Result"
import * as Cli from "../src/Cli.js"
import { LayoutMismatch } from "../src/Errors.js"
import * as Locks from "../src/Locks.js"
import * as Redis from "../src/Redis.js"
import * as Layout from "../src/store/Layout.js"
import * as Memory from "../src/store/Memory.js"
import { capturedConsole } from "./support/cli.js"
import * as RedisTest from "./support/redis.js"

const runs = Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? 40)

type Phase = "queue" | "run"
type Command =
  | { readonly _tag: "lock"; readonly digest: number; readonly phase: Phase; readonly jid: string; readonly limit: number }
  | { readonly _tag: "release"; readonly digest: number; readonly phase: Phase; readonly jid: string }
  | { readonly _tag: "renew"; readonly digest: number; readonly jid: string }
  | {
    readonly _tag: "remove"
    readonly digests: ReadonlyArray<number>
    readonly jid: string | undefined
    /** Also ask for the keys that are not this library's (Redis holds them; the memory store has nothing there). */
    readonly foreign: boolean
    readonly expect?: Expectation | undefined
  }
  | { readonly _tag: "delete"; readonly digest: number; readonly expect?: Expectation | undefined }
  | { readonly _tag: "unlock"; readonly digest: number; readonly jid: string; readonly expect?: Expectation | undefined }
  | { readonly _tag: "deleteByPattern"; readonly count: number }

/**
 * The holders a call names as read (`expect`): exactly those it would act on ("read"), one more that is not there
 * ("extra"), or one fewer ("missing"; one that is not there when none is): only "read" lets the call act.
 */
type Expectation = "read" | "extra" | "missing"
const expectation = fc.option(fc.constantFrom<Expectation>("read", "extra", "missing"), { nil: undefined })

const DIGESTS = 2
const digest = fc.integer({ min: 0, max: DIGESTS - 1 })
const jid = fc.constantFrom("a", "b", "c")
const phase = fc.constantFrom<Phase>("queue", "run")
const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ _tag: fc.constant("lock" as const), digest, phase, jid, limit: fc.integer({ min: 1, max: 2 }) }) },
  { weight: 2, arbitrary: fc.record({ _tag: fc.constant("release" as const), digest, phase, jid }) },
  { weight: 2, arbitrary: fc.record({ _tag: fc.constant("renew" as const), digest, jid }) },
  {
    weight: 2,
    arbitrary: fc.record({
      _tag: fc.constant("remove" as const),
      digests: fc.uniqueArray(digest, { minLength: 1, maxLength: DIGESTS }),
      jid: fc.option(jid, { nil: undefined }),
      foreign: fc.boolean(),
      expect: expectation
    })
  },
  { weight: 2, arbitrary: fc.record({ _tag: fc.constant("delete" as const), digest, expect: expectation }) },
  { weight: 2, arbitrary: fc.record({ _tag: fc.constant("unlock" as const), digest, jid, expect: expectation }) },
  { weight: 1, arbitrary: fc.record({ _tag: fc.constant("deleteByPattern" as const), count: fc.integer({ min: 1, max: 3 }) }) }
)

const nameOf = (prefix: string, d: number, p: Phase) => `${prefix}:d${d}${p === "run" ? ":RUN" : ""}`
const keyOf = (prefix: string, d: number, p: Phase): Redis.LockKey => ({ prefix, name: nameOf(prefix, d, p) })
const allLocks = (prefix: string) =>
  Array.from({ length: DIGESTS }, (_, d) => [keyOf(prefix, d, "queue"), keyOf(prefix, d, "run")]).flat()

/** One store's side of a run: the store, and the fencing token each (lock, jid) last got from it. */
interface Side {
  readonly store: Redis.Store
  readonly fences: Map<string, number>
}

type Holders = Record<string, ReadonlyArray<string>>

/** Every holder of the run's locks, as `jid revoked? lease? expiry?`: what must be the same on both stores. */
const holdersOf = (prefix: string, side: Side) =>
  Effect.map(Effect.forEach(allLocks(prefix), (lock) => side.store.holders(lock)), (all): Holders =>
    Object.fromEntries(
      allLocks(prefix).map((lock, i) => [
        lock.name,
        all[i]!.map((h) =>
          `${h.jid}${h.revokedAt === undefined ? "" : " revoked"}${h.leaseUntil === undefined ? "" : " lease"}${
            h.expiresAt === undefined ? "" : " expiry"
          }`
        ).sort()
      ])
    ))

const sortedBy = <A>(items: ReadonlyArray<A>, key: (a: A) => string) => [...items].sort((x, y) => key(x).localeCompare(key(y)))

// A Removal as both stores must give it (times and foreign keys aside: Redis alone can hold a key of another type).
const removalShape = (r: Locks.Removal) => ({
  removed: sortedBy(r.removed.map((x) => `${x.lock} ${x.jid} ${x.live}`), String),
  revoked: sortedBy(r.revoked.map((x) => `${x.lock} ${x.jid}`), String),
  changed: r.refused.filter((x) => x.reason === Redis.holdersChanged).map((x) => x.lock).sort()
})

/** The jids each lock holds (only `jid`'s when given), as the call's expectation makes them. */
const expected = (side: Side, locks: ReadonlyArray<Redis.LockKey>, how: Expectation, jid?: string) =>
  Effect.forEach(locks, (lock) =>
    Effect.map(side.store.holders(lock), (holders) => {
      const read = holders.map((h) => h.jid).filter((h) => jid === undefined || h === jid)
      return how === "read" ? read : how === "extra" ? [...read, "z"] : read.length > 0 ? read.slice(1) : ["z"]
    }))

const run = (prefix: string, side: Side, c: Command): Effect.Effect<unknown, never> => {
  const provided = <A, E>(f: (locks: Locks.Locks["Service"]) => Effect.Effect<A, E>) =>
    Effect.flatMap(Locks.make({ prefix }), f).pipe(Effect.provideService(Redis.RedisService, side.store))
  const answer = (() => {
    switch (c._tag) {
      case "lock": {
        const lock = keyOf(prefix, c.digest, c.phase)
        const request: Redis.HolderRequest = {
          jid: c.jid,
          limit: c.limit,
          ttlMs: c.phase === "queue" && c.jid === "c" ? 60_000 : 0,
          leaseMs: c.phase === "run" ? 60_000 : 0,
          info: "",
          fenced: c.phase === "run"
        }
        return Effect.map(side.store.lock(lock, request), (result) => {
          if (result._tag === "Acquired" && !result.reentrant) side.fences.set(`${lock.name} ${c.jid}`, result.fence)
          return result._tag === "Acquired" ? { acquired: result.reentrant } : { conflict: [...result.holders].sort() }
        })
      }
      case "release": {
        const lock = keyOf(prefix, c.digest, c.phase)
        return side.store.unlock(lock, c.jid, side.fences.get(`${lock.name} ${c.jid}`) ?? 0)
      }
      case "renew": {
        const lock = keyOf(prefix, c.digest, "run")
        return side.store.renew(lock, c.jid, 60_000, side.fences.get(`${lock.name} ${c.jid}`) ?? 0)
      }
      case "remove": {
        const ours = c.digests.flatMap((d) => [keyOf(prefix, d, "queue"), keyOf(prefix, d, "run")])
        const locks = [
          ...ours,
          ...(c.foreign ? [{ prefix, name: `${prefix}:user` }, { prefix, name: `${prefix}:d-listed` }] : [])
        ]
        // The keys that are not this library's get no expectation: Redis alone has them, and refuses them first.
        return Effect.flatMap(
          c.expect === undefined ? Effect.succeed(undefined) : expected(side, ours, c.expect, c.jid),
          (expect) =>
            Effect.map(
              side.store.remove(locks, { jid: c.jid, expect }),
              (r) => ({ ...removalShape(r), deleted: [...r.deleted].sort() })
            )
        )
      }
      case "delete":
      case "unlock": {
        const jid = c._tag === "unlock" ? c.jid : undefined
        return Effect.flatMap(
          c.expect === undefined
            ? Effect.succeed(undefined)
            : Effect.map(
              expected(side, [keyOf(prefix, c.digest, "queue"), keyOf(prefix, c.digest, "run")], c.expect, jid),
              ([queue, run]) => ({ queue: queue ?? [], run: run ?? [] })
            ),
          (expect) =>
            Effect.map(
              provided((locks) =>
                jid === undefined
                  ? locks.delete(nameOf(prefix, c.digest, "queue"), { expect })
                  : locks.unlock(nameOf(prefix, c.digest, "queue"), jid, { expect })
              ),
              removalShape
            )
        )
      }
      case "deleteByPattern":
        return provided((locks) =>
          Effect.gen(function*() {
            let cursor = "0"
            let deleted = 0
            const revoked: Array<string> = []
            do {
              const page = yield* locks.deleteByPattern(`${prefix}:d*`, { cursor, count: c.count })
              deleted += page.deleted
              revoked.push(...page.revoked.map((r) => `${r.lock} ${r.jid}`))
              cursor = page.cursor
            } while (cursor !== "0")
            return { deleted, revoked: revoked.sort() }
          })
        )
    }
  })()
  return Effect.result(answer as Effect.Effect<unknown, { readonly _tag: string }>).pipe(
    Effect.map(Result.match({ onFailure: (e) => ({ failed: e._tag }), onSuccess: (a) => a }))
  )
}

/** What an admin call targeted: the locks, and the one jid (undefined: every holder). */
const targets = (prefix: string, c: Command): { readonly locks: ReadonlyArray<string>; readonly jid?: string } | undefined => {
  const both = (d: number) => [nameOf(prefix, d, "queue"), nameOf(prefix, d, "run")]
  switch (c._tag) {
    case "remove":
      return { locks: c.digests.flatMap(both), ...(c.jid === undefined ? {} : { jid: c.jid }) }
    case "delete":
      return { locks: both(c.digest) }
    case "unlock":
      return { locks: both(c.digest), jid: c.jid }
    case "deleteByPattern":
      return { locks: Array.from({ length: DIGESTS }, (_, d) => both(d)).flat() }
    default:
      return undefined
  }
}


/** The CLI's flags for the Redis under test: `--redis-url`, or `--cluster` with its nodes in cluster mode. */
const whereOf = ({ options, source }: RedisTest.TestRedis["Service"]): ReadonlyArray<string> =>
  "nodes" in options
    ? ["--cluster", options.nodes.map((n) => typeof n === "string" ? n : `${n.host}:${n.port}`).join(",")]
    : ["--redis-url", source.url]

describe("the admin surface (properties)", () => {
  layer(RedisTest.layer(), { excludeTestServices: true })((it) => {
    it.effect("both stores alike; a live run holder is revoked, never removed; nothing unrevoked is left where asked; foreign keys untouched", () =>
      Effect.gen(function*() {
        const redis = yield* Redis.RedisService
        const { raw } = yield* RedisTest.TestRedis
        const services = yield* Effect.context<never>()
        const property = fc.asyncProperty(fc.array(command, { minLength: 1, maxLength: 30 }), (commands) =>
          Effect.runPromiseWith(services)(Effect.gen(function*() {
            const prefix = RedisTest.uniquePrefix("admin-prop")
            const memory: Side = { store: Memory.make(), fences: new Map() }
            const onRedis: Side = { store: redis, fences: new Map() }
            // Keys that are not this library's: a user's hash outside the index, a string inside it.
            const user = RedisTest.keysOf(prefix, `${prefix}:user`)
            const listed = RedisTest.keysOf(prefix, `${prefix}:d-listed`)
            const foreign = () =>
              Effect.promise(async () => JSON.stringify([
                await raw.hgetall(user.locked),
                await raw.get(listed.locked),
                await raw.zscore(listed.index, `${prefix}:d-listed`)
              ]))
            yield* Effect.promise(async () => {
              await raw.hset(user.locked, "a", "bob")
              await raw.zadd(listed.index, 1, `${prefix}:d-listed`)
              await raw.set(listed.locked, "not a lock")
            })
            const foreignBefore = yield* foreign()
            const trace: Array<string> = []
            for (const c of commands) {
              const before = yield* holdersOf(prefix, onRedis)
              const onMemory = yield* run(prefix, memory, c)
              const fromRedis = yield* run(prefix, onRedis, c)
              trace.push(`${JSON.stringify(c)} -> memory ${JSON.stringify(onMemory)} redis ${JSON.stringify(fromRedis)}`)
              const fail = (why: string) => assert.fail(`${why}\n${trace.join("\n")}`)
              if (JSON.stringify(onMemory) !== JSON.stringify(fromRedis)) fail("the stores answered differently")
              const afterMemory = yield* holdersOf(prefix, memory)
              const after = yield* holdersOf(prefix, onRedis)
              if (JSON.stringify(afterMemory) !== JSON.stringify(after)) {
                fail(`the stores hold different holders: memory ${JSON.stringify(afterMemory)} redis ${JSON.stringify(after)}`)
              }
              if ((yield* foreign()) !== foreignBefore) fail("a key that is not this library's was changed")
              const target = targets(prefix, c)
              if (target === undefined) continue
              // A lock whose holders were not the ones expected is left as it was (a delete or unlock: both its locks).
              const untouched = new Set(
                typeof fromRedis === "object" && fromRedis !== null && "changed" in fromRedis
                  ? (fromRedis as { readonly changed: ReadonlyArray<string> }).changed
                  : typeof fromRedis === "object" && fromRedis !== null && "failed" in fromRedis
                  ? target.locks
                  : []
              )
              if ("expect" in c && c.expect !== undefined && c.expect !== "read" && untouched.size === 0) {
                fail(`${c._tag} acted although it expected other holders than the lock held`)
              }
              for (const lock of untouched) {
                if (JSON.stringify(after[lock] ?? []) !== JSON.stringify(before[lock] ?? [])) {
                  fail(`${c._tag} changed ${lock} although its holders were not the ones expected`)
                }
              }
              for (const lock of target.locks.filter((name) => !untouched.has(name))) {
                const asked = (h: string) => target.jid === undefined || h.split(" ")[0] === target.jid
                // Every live run holder (all leases here are far off) is still there, revoked.
                for (const h of before[lock] ?? []) {
                  if (!asked(h) || !h.includes(" lease")) continue
                  const name = h.split(" ")[0]!
                  if (!(after[lock] ?? []).some((a) => a.startsWith(`${name} revoked`))) {
                    fail(`${c._tag} removed ${lock}'s live run holder ${name} instead of revoking it`)
                  }
                }
                // Nothing it was asked to remove is left unrevoked.
                const left = (after[lock] ?? []).filter((h) => asked(h) && !h.includes(" revoked"))
                if (left.length > 0) fail(`${c._tag} left ${lock}'s ${left.join(", ")}`)
              }
            }
          }))
        )
        yield* Effect.promise(() => fc.assert(property, { numRuns: runs }))
      }), { timeout: 300_000 })

    it.effect("a hold an admin call revoked is never renewed, on either store; every other live hold is", () =>
      Effect.gen(function*() {
        const redis = yield* Redis.RedisService
        const admin = fc.constantFrom<ReadonlyArray<Command>>(
          [{ _tag: "remove", digests: [0], jid: undefined, foreign: false }],
          [{ _tag: "delete", digest: 0 }],
          [{ _tag: "deleteByPattern", count: 1 }]
        )
        const property = fc.asyncProperty(
          fc.uniqueArray(jid, { minLength: 1, maxLength: 3 }),
          fc.oneof(admin, jid.map((j): ReadonlyArray<Command> => [{ _tag: "remove", digests: [0], jid: j, foreign: false }]),
            jid.map((j): ReadonlyArray<Command> => [{ _tag: "unlock", digest: 0, jid: j }])),
          fc.integer({ min: 1, max: 2 }),
          (holders, calls, renewals) =>
            Effect.runPromise(Effect.gen(function*() {
              const prefix = RedisTest.uniquePrefix("admin-renew")
              const sides: ReadonlyArray<Side> = [{ store: Memory.make(), fences: new Map() }, { store: redis, fences: new Map() }]
              const steps: ReadonlyArray<Command> = [
                ...holders.map((j): Command => ({ _tag: "lock", digest: 0, phase: "run", jid: j, limit: 3 })),
                ...calls,
                ...Array.from({ length: renewals }, () => holders.map((j): Command => ({ _tag: "renew", digest: 0, jid: j }))).flat()
              ]
              const answers = yield* Effect.forEach(sides, (side) => Effect.forEach(steps, (c) => run(prefix, side, c)))
              assert.deepStrictEqual(answers[0], answers[1], "the stores answered differently")
              const after = yield* holdersOf(prefix, sides[1]!)
              const revoked = new Set((after[nameOf(prefix, 0, "run")] ?? []).filter((h) => h.includes(" revoked")).map((h) => h.split(" ")[0]))
              const target = targets(prefix, calls[0]!)!
              // Live leases are revoked, never removed: every holder the call asked for is there, revoked.
              for (const j of holders) {
                assert.strictEqual(revoked.has(j), target.jid === undefined || target.jid === j, `${j} after ${JSON.stringify(calls)}`)
              }
              // Every renewal of a revoked hold answers false; of an untouched one, true.
              const renewed = answers[1]!.slice(holders.length + calls.length)
              assert.deepStrictEqual(renewed, Array.from({ length: renewals }, () => holders.map((j) => !revoked.has(j))).flat())
            }))
        )
        yield* Effect.promise(() => fc.assert(property, { numRuns: Math.max(8, Math.round(runs / 2)) }))
      }), { timeout: 300_000 })

    it.effect("a page of a lock's holders reads about `count` of them, never the whole hash, each entry over `bytes` cut; the pages walk every holder", () =>
      Effect.gen(function*() {
        const redis = yield* Redis.RedisService
        const { raw } = yield* RedisTest.TestRedis
        const listpack = yield* Effect.promise(() => raw.config("GET", "hash-max-listpack-entries") as Promise<Array<string>>)
        const listpackEntries = Number(listpack[1] ?? 128)
        const property = fc.asyncProperty(
          fc.integer({ min: 1, max: 300 }),
          fc.integer({ min: 1, max: 60 }),
          // Entries over 64 bytes make Redis keep the hash as a table; short ones, up to hash-max-listpack-entries of
          // them (512 by default), a listpack. Long ones vary in length, some over `bytes`.
          fc.boolean(),
          fc.constantFrom(0, 100, 200),
          (size, count, long, bytes) =>
            Effect.runPromise(Effect.gen(function*() {
              const prefix = RedisTest.uniquePrefix("admin-page")
              const lock = keyOf(prefix, 0, "queue")
              const infoOf = (i: number) =>
                long ? JSON.stringify({ worker: "PageWorker", queue: "default", args: ["x".repeat((i * 37) % 250)] }) : ""
              const jids = Array.from({ length: size }, (_, i) => `j${i}`)
              // Each entry's length in bytes, as Redis holds it: the memory store writes the same entry (its times
              // have as many digits), and must cut it where fetch.lua does.
              let entries: Record<string, string> = {}
              for (const store of [redis, Memory.make()]) {
                yield* Effect.forEach(
                  jids,
                  (jid, i) => store.lock(lock, { jid, limit: 300, ttlMs: 60_000, leaseMs: 0, info: infoOf(i), fenced: false }),
                  { concurrency: 16, discard: true }
                )
                const whole = new Map((yield* Effect.orDie(store.fetch(lock))).holders.map((h) => [h.jid, h]))
                if (store === redis) entries = yield* Effect.promise(() => raw.hgetall(RedisTest.keysOf(prefix, lock.name).locked))
                // HSCAN's COUNT is a hint (a few more may come, more while Redis rehashes the table); a listpack comes
                // whole. The memory store answers exactly `count`.
                const most = store === redis ? Math.max(4 * count + 16, !long && size <= listpackEntries ? size : 0) : count
                const seen = new Set<string>()
                let cursor = "0"
                let pages = 0
                do {
                  const page = yield* Effect.orDie(store.fetch(lock, { cursor, count, bytes }))
                  assert.strictEqual(page.size, size)
                  assert.isAtMost(page.holders.length, most, `a page of ${count} of ${size} holders (long: ${long})`)
                  for (const holder of page.holders) {
                    seen.add(holder.jid)
                    const length = Buffer.byteLength(entries[holder.jid]!)
                    const side = store === redis ? "redis" : "memory"
                    if (holder.truncated === undefined) {
                      // Read whole: as a whole read gives it, and within bytes.
                      assert.deepStrictEqual(holder, whole.get(holder.jid))
                      if (bytes > 0) assert.isAtMost(length, bytes, `${side}: ${holder.jid} not cut`)
                    } else {
                      // Cut: its whole length told, over bytes.
                      assert.isAbove(bytes, 0)
                      assert.strictEqual(holder.truncated, length, `${side}: ${holder.jid}`)
                      assert.isAbove(holder.truncated, bytes)
                      assert.strictEqual(holder.lockedAt, whole.get(holder.jid)!.lockedAt)
                    }
                  }
                  cursor = page.cursor
                  pages++
                } while (cursor !== "0" && pages < 1000)
                assert.strictEqual(cursor, "0")
                assert.strictEqual(seen.size, size)
              }
            }))
        )
        yield* Effect.promise(() =>
          fc.assert(property, {
            numRuns: Math.max(6, Math.round(runs / 4)),
            examples: [[300, 50, true, 0], [200, 1, false, 100], [40, 10, true, 200]]
          })
        )
      }), { timeout: 300_000 })

    // Locks.stats over a sharded index with any shards down (issue 47): a stand-in store, the memory store's locks
    // with its index read through a scan of `shards` shards, those in `down` failing as a closed connection does.
    it.effect("stats over any shards, any of them down: the counts of those that answer, partial naming the others; none answering fails", () =>
      Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(
            fc.integer({ min: 1, max: 6 }).chain((shards) =>
              fc.record({
                shards: fc.constant(shards),
                down: fc.uniqueArray(fc.integer({ min: 0, max: shards - 1 }), { maxLength: shards }),
                locks: fc.array(fc.integer({ min: 0, max: shards - 1 }), { maxLength: 12 })
              })
            ),
            ({ down, locks, shards }) =>
              Effect.runPromise(Effect.gen(function*() {
                const prefix = RedisTest.uniquePrefix("stats")
                const names = locks.map((_, i) => `${prefix}:d${i}`)
                const memory = Memory.make()
                yield* Effect.forEach(names, (name) =>
                  memory.lock({ prefix, name }, { jid: `j-${name}`, limit: 1, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false }))
                const store: Redis.Store = {
                  ...memory,
                  layout: () => Effect.succeed({ cluster: true, shards, recorded: true }),
                  scan: (_prefix, cursor) => {
                    const at = Layout.scanCursor.decode({ shards }, cursor)
                    if (down.includes(at.shard)) {
                      return Effect.fail(new Redis.RedisError({ operation: "scan", reason: `Connection is closed (shard ${at.shard})` }))
                    }
                    return Effect.succeed({
                      cursor: at.shard + 1 < shards ? Layout.scanCursor.encode({ shards }, at.shard + 1, "0") : "0",
                      members: names.filter((_, i) => locks[i] === at.shard).map((name, i) => ({ name, score: 1000 + i }))
                    })
                  }
                }
                const stats = yield* Effect.exit(
                  Effect.provideService(Effect.flatMap(Locks.make({ prefix }), (l) => l.stats), Redis.RedisService, store)
                )
                const trace = JSON.stringify({ shards, down, locks })
                if (down.length === shards) {
                  assert.isTrue(Exit.isFailure(stats), `no shard answered, yet an answer: ${trace}`)
                  return
                }
                assert.isTrue(Exit.isSuccess(stats), `${trace}: ${String(stats)}`)
                if (!Exit.isSuccess(stats)) return
                const answered = locks.filter((shard) => !down.includes(shard)).length
                assert.strictEqual(stats.value.indexSize, answered, trace)
                assert.deepStrictEqual(stats.value.byPhase, { queue: answered, run: 0 }, trace)
                if (down.length === 0) {
                  assert.notProperty(stats.value, "partial", trace)
                  assert.notProperty(stats.value, "unanswered", trace)
                } else {
                  assert.strictEqual(stats.value.partial, true, trace)
                  assert.deepStrictEqual(stats.value.unanswered?.map((u) => u.shard), [...down].sort((a, b) => a - b), trace)
                }
              }))
          ),
          { numRuns: runs * 2 }
        )
      ))

    // Locks.list reads a page of the index in ZSCAN calls of at most 200 members, whatever the page's size: no single
    // call is a large page's worth of Redis's time. The calls a store is asked for, counted (the memory store's index).
    it.effect("a page of the list of any size is read in index scans of at most 200 members, and the pages walk every lock", () =>
      Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.integer({ min: 0, max: 1_200 }), fc.integer({ min: 1, max: 1_000 }), (size, count) =>
            Effect.runPromise(Effect.gen(function*() {
              const prefix = RedisTest.uniquePrefix("list")
              const memory = Memory.make()
              const names = Array.from({ length: size }, (_, i) => `${prefix}:d${i}`)
              yield* Effect.forEach(names, (name) =>
                memory.lock({ prefix, name }, { jid: "j", limit: 1, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false }), { discard: true })
              const asked: Array<number> = []
              const store: Redis.Store = {
                ...memory,
                scan: (p, cursor, pattern, n) => Effect.suspend(() => {
                  asked.push(n)
                  return memory.scan(p, cursor, pattern, n)
                })
              }
              const locks = yield* Effect.provideService(Locks.make({ prefix }), Redis.RedisService, store)
              const seen = new Set<string>()
              let cursor = "0"
              let pages = 0
              do {
                const page = yield* Effect.orDie(Effect.provideService(locks.list({ cursor, count }), Redis.RedisService, store))
                for (const item of page.items) seen.add(item.name)
                cursor = page.cursor
                pages++
              } while (cursor !== "0" && pages < 2_000)
              const trace = JSON.stringify({ size, count, most: Math.max(0, ...asked) })
              assert.isAtMost(Math.max(0, ...asked), 200, trace)
              assert.deepStrictEqual([...seen].sort(), [...names].sort(), trace)
            }))),
          { numRuns: Math.max(10, Math.round(runs / 2)), examples: [[1_200, 1_000], [300, 250]] }
        )
      ))

    it.effect("deleteByPattern over any number of matches and any page size removes in scripts of at most 50 locks, and every match goes", () =>
      Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.integer({ min: 0, max: 400 }), fc.integer({ min: 1, max: 1_000 }), (size, count) =>
            Effect.runPromise(Effect.gen(function*() {
              const prefix = RedisTest.uniquePrefix("delpages")
              const memory = Memory.make()
              const names = Array.from({ length: size }, (_, i) => `${prefix}:m${i}`)
              yield* Effect.forEach([...names, `${prefix}:keep`], (name) =>
                memory.lock({ prefix, name }, { jid: "j", limit: 1, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false }), { discard: true })
              const removals: Array<number> = []
              const store: Redis.Store = {
                ...memory,
                remove: (locks, options) => Effect.suspend(() => {
                  removals.push(locks.length)
                  return memory.remove(locks, options)
                })
              }
              const locks = yield* Effect.provideService(Locks.make({ prefix }), Redis.RedisService, store)
              let cursor = "0"
              let deleted = 0
              let pages = 0
              do {
                const page = yield* Effect.orDie(
                  Effect.provideService(locks.deleteByPattern(`${prefix}:m*`, { cursor, count }), Redis.RedisService, store)
                )
                deleted += page.deleted
                cursor = page.cursor
                pages++
              } while (cursor !== "0" && pages < 2_000)
              const trace = JSON.stringify({ size, count, most: Math.max(0, ...removals) })
              assert.isAtMost(Math.max(0, ...removals), 50, trace)
              assert.strictEqual(deleted, size, trace)
              const left = yield* Effect.orDie(Effect.provideService(locks.list({ count: 1_000 }), Redis.RedisService, store))
              assert.deepStrictEqual(left.items.map((item) => item.name), [`${prefix}:keep`], trace)
            }))),
          { numRuns: Math.max(10, Math.round(runs / 2)), examples: [[400, 1_000], [51, 60], [50, 1_000]] }
        )
      ))

    it.effect("a list row keeps at most `holders` of its lock's holders, however many a read answers, and counts them all", () =>
      Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(
            fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 4 }),
            fc.option(fc.integer({ min: 1, max: 100 }), { nil: undefined }),
            (sizes, holders) =>
              Effect.runPromise(Effect.gen(function*() {
                const prefix = RedisTest.uniquePrefix("rowcap")
                const memory = Memory.make()
                for (const [d, n] of sizes.entries()) {
                  for (let i = 0; i < n; i++) {
                    yield* memory.lock(
                      { prefix, name: `${prefix}:d${d}` },
                      { jid: `j${i}`, limit: n, ttlMs: 600_000, leaseMs: 0, info: "", fenced: false }
                    )
                  }
                }
                // A read may answer more than its count (Redis' HSCAN answers a small hash whole): here, always all.
                const store: Redis.Store = {
                  ...memory,
                  fetch: (lock, page) => memory.fetch(lock, page === undefined ? page : { ...page, count: 1_000 })
                }
                const rows = yield* Effect.orDie(Effect.provideService(
                  Effect.flatMap(Locks.make({ prefix }), (locks) =>
                    Effect.flatMap(locks.list({ count: 1_000 }), (page) => locks.rows(page.items, { holders }))),
                  Redis.RedisService,
                  store
                ))
                const trace = JSON.stringify({ sizes, holders })
                assert.strictEqual(rows.length, sizes.length, trace)
                for (const row of rows) {
                  const n = sizes[Number(row.entry.name.slice(`${prefix}:d`.length))]!
                  assert.strictEqual(row.lock.size, n, trace)
                  assert.strictEqual(row.lock.holders.length, Math.min(n, holders ?? 10), trace)
                }
              }))
          ),
          { numRuns: Math.max(10, Math.round(runs / 2)), examples: [[[30], undefined], [[40, 3], 4]] }
        )
      ))

    it.effect("after a layout reset, every lock of a process that read the old layout is refused, typed; only the new one's holders stand", () =>
      Effect.gen(function*() {
        const old = yield* Redis.RedisService
        const { options } = yield* RedisTest.TestRedis
        const hexes = ["a1", "b2", "c3", "d4"]
        const lockOf = (prefix: string, hex: string, run: boolean) => ({ prefix, name: `${prefix}:${hex}${run ? ":RUN" : ""}` })
        const request = (jid: string, run: boolean, limit: number) =>
          run
            ? { jid, limit, ttlMs: 0, leaseMs: 30_000, info: "", fenced: true }
            : { jid, limit, ttlMs: 60_000, leaseMs: 0, info: "", fenced: false }
        const attempt = fc.record({ hex: fc.constantFrom(...hexes), run: fc.boolean(), limit: fc.integer({ min: 1, max: 3 }) })
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.array(attempt, { minLength: 1, maxLength: 3 }),
              fc.subarray(hexes),
              fc.array(attempt, { minLength: 1, maxLength: 4 }),
              (before, taken, after) =>
                Effect.runPromise(Effect.scoped(Effect.gen(function*() {
                  const prefix = RedisTest.uniquePrefix("reset")
                  // The old process locks (its layout read and recorded), then lets go: drained, the reset passes.
                  for (const [i, a] of before.entries()) {
                    const lock = lockOf(prefix, a.hex, a.run)
                    const got = yield* old.lock(lock, request(`o${i}`, a.run, a.limit))
                    if (got._tag === "Acquired") yield* old.unlock(lock, `o${i}`, got.fence)
                  }
                  const fresh = yield* ("nodes" in options ? Redis.makeCluster(options) : Redis.make(options))
                  assert.isTrue(yield* Effect.provideService(Redis.resetLayout(prefix), Redis.RedisService, fresh))
                  // A process started after the reset locks under the new record.
                  for (const hex of taken) {
                    assert.strictEqual((yield* fresh.lock(lockOf(prefix, hex, true), request("n", true, 1)))._tag, "Acquired")
                  }
                  for (const [i, a] of after.entries()) {
                    const refused = yield* Effect.flip(old.lock(lockOf(prefix, a.hex, a.run), request(`s${i}`, a.run, a.limit)))
                    assert.instanceOf(refused.cause, LayoutMismatch, refused.message)
                    assert.isTrue((refused.cause as LayoutMismatch).reset)
                  }
                  for (const hex of hexes) {
                    for (const run of [false, true]) {
                      const holders = (yield* fresh.holders(lockOf(prefix, hex, run))).map((h) => h.jid)
                      assert.deepStrictEqual(holders, run && taken.includes(hex) ? ["n"] : [], `${hex}${run ? ":RUN" : ""}`)
                    }
                  }
                })))
            ),
            { numRuns: Math.max(5, Math.round(runs / 4)) }
          )
        )
      }))

    it.effect("a layout reset goes through exactly when the prefix holds no lock, at its scan or taken after it; refused, nothing is retired", () =>
      Effect.gen(function*() {
        const old = yield* Redis.RedisService
        const { options, raw } = yield* RedisTest.TestRedis
        const names = ["a1", "b2", "c3"].flatMap((hex) => [hex, `${hex}:RUN`])
        const request = (jid: string, run: boolean) =>
          run
            ? { jid, limit: 1, ttlMs: 0, leaseMs: 30_000, info: "", fenced: true }
            : { jid, limit: 1, ttlMs: 60_000, leaseMs: 0, info: "", fenced: false }
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.subarray(names), fc.constantFrom("before", "afterScan"), (held, when) =>
              Effect.runPromise(Effect.scoped(Effect.gen(function*() {
                const prefix = RedisTest.uniquePrefix("drained")
                const lockOf = (name: string) => ({ prefix, name: `${prefix}:${name}` })
                const take = Effect.forEach(held, (name) =>
                  Effect.flatMap(old.lock(lockOf(name), request("h", name.endsWith(":RUN"))), (got) =>
                    Effect.sync(() => assert.strictEqual(got._tag, "Acquired", name))), { discard: true })
                // The process's layout read and recorded by a lock it let go.
                const first = yield* old.lock(lockOf("z9"), request("z", false))
                if (first._tag === "Acquired") yield* old.unlock(lockOf("z9"), "z", first.fence)
                const record = yield* Effect.promise(() => raw.get(`${prefix}:layout`))
                assert.isNotNull(record)
                if (when === "before") yield* take
                const fresh = yield* ("nodes" in options ? Redis.makeCluster(options) : Redis.make(options))
                // After the reset's scan found the prefix empty, the locks come (once): its script meets them.
                let scanned = false
                const operator: Redis.Store = {
                  ...fresh,
                  scan: (p, cursor, pattern, count) =>
                    Effect.tap(fresh.scan(p, cursor, pattern, count), () =>
                      when === "afterScan" && !scanned ? Effect.andThen(Effect.sync(() => (scanned = true)), take) : Effect.void)
                }
                const reset = yield* Effect.result(Effect.provideService(Redis.resetLayout(prefix), Redis.RedisService, operator))
                const trace = JSON.stringify({ held, when, reset })
                if (held.length === 0) {
                  assert.isTrue(Result.isSuccess(reset) && reset.success, trace)
                  return
                }
                assert.isTrue(Result.isFailure(reset), trace)
                if (Result.isFailure(reset)) {
                  // Held at the scan: refused by name before anything is asked of the shards ("drain it first"). Taken
                  // after it: the script meets it ("still runs"); on a cluster the scan of a later shard may find it
                  // first, and refuse by name.
                  if (when === "before") assert.include(reset.failure.message, "drain it first", trace)
                  else assert.match(reset.failure.message, RedisTest.clusterMode ? /still runs|drain it first/ : /still runs/, trace)
                }
                assert.strictEqual(yield* Effect.promise(() => raw.get(`${prefix}:layout`)), record, trace)
                // Nothing retired: the process goes on locking under its layout.
                const again = yield* old.lock(lockOf("y8"), request("y", false))
                assert.strictEqual(again._tag, "Acquired", trace)
              })))
            ),
            { numRuns: Math.max(6, Math.round(runs / 4)), examples: [[["a1"], "afterScan"], [["b2:RUN"], "before"], [[], "afterScan"]] }
          )
        )
      }))

    it.effect("unique-jobs locks del (in-process) deletes every matching lock, over every page, and no other", () =>
      Effect.gen(function*() {
        const test = yield* RedisTest.TestRedis
        const { keys, raw } = test
        const shards = Array.from({ length: RedisTest.layout.shards }, (_, shard) => shard)
        const property = fc.asyncProperty(
          fc.integer({ min: 0, max: 1600 }),
          fc.integer({ min: 0, max: 40 }),
          (count, others) =>
            Effect.runPromise(Effect.gen(function*() {
              const prefix = RedisTest.uniquePrefix("admin-del")
              yield* Effect.promise(async () => {
                const now = Date.now()
                // One pipeline per shard: a cluster's pipeline keeps to one node.
                const pipelines = new Map<string, ReturnType<typeof raw.pipeline>>()
                for (let i = 0; i < count + others; i++) {
                  const name = i < count ? `${prefix}:m${i}` : `${prefix}:keep${i}`
                  const { index, locked } = RedisTest.keysOf(prefix, name)
                  const pipeline = pipelines.get(index) ?? raw.pipeline()
                  pipelines.set(index, pipeline)
                  pipeline.zadd(index, now, name)
                  pipeline.hset(locked, "j", `{"t":${now},"x":0,"l":0}`)
                }
                await Promise.all(Array.from(pipelines.values(), (pipeline) => pipeline.exec()))
              })
              const { capture, lines } = yield* capturedConsole
              const args = ["locks", "del", `${prefix}:m*`, ...whereOf(test), "--prefix", prefix, "--json"]
              yield* Cli.run(["node", "unique-jobs", ...args])
                .pipe(Effect.provideService(Console.Console, capture), Effect.provide(Cli.platform), Effect.orDie)
              const answer = JSON.parse(lines.join("\n")) as { matched: number; deleted: number }
              assert.deepStrictEqual([answer.matched, answer.deleted], [count, count])
              const sizes = yield* Effect.promise(() =>
                Promise.all(shards.map((shard) => raw.zcard(RedisTest.layout.index(prefix, shard))))
              )
              assert.strictEqual(sizes.reduce((sum, size) => sum + size, 0), others)
              // The locks' keys: `<prefix>:m…` on one Redis, `<prefix>:{<tag>}:m…` on a cluster.
              const pattern = RedisTest.clusterMode ? `${prefix}:{*}:m*` : `${prefix}:m*`
              assert.deepStrictEqual(yield* Effect.promise(() => keys(pattern)), [])
            }))
        )
        // The page boundaries get their own cases: none, one page's worth, just past it, several pages.
        yield* Effect.promise(() =>
          fc.assert(property, { numRuns: Math.max(4, Math.round(runs / 8)), examples: [[0, 0], [500, 3], [501, 1], [1500, 5]] })
        )
      }), { timeout: 300_000 })

    it.effect("unique-jobs locks unlock (in-process) fails exactly when the jid held nothing live, and says which", () =>
      Effect.gen(function*() {
        const test = yield* RedisTest.TestRedis
        const redis = yield* Redis.RedisService
        const property = fc.asyncProperty(
          fc.subarray(["a", "b"]),
          fc.boolean(),
          jid,
          (queued, running, asked) =>
            Effect.runPromise(Effect.gen(function*() {
              const prefix = RedisTest.uniquePrefix("admin-unlock")
              const lock = keyOf(prefix, 0, "queue")
              for (const holder of queued) {
                yield* redis.lock(lock, { jid: holder, limit: 3, ttlMs: 0, leaseMs: 0, info: "", fenced: false })
              }
              if (running) {
                yield* redis.lock(keyOf(prefix, 0, "run"), { jid: "c", limit: 1, ttlMs: 0, leaseMs: 60_000, info: "", fenced: true })
              }
              const { capture, lines } = yield* capturedConsole
              const args = ["locks", "unlock", lock.name, asked, ...whereOf(test), "--prefix", prefix, "--json"]
              const ran = yield* Cli.run(["node", "unique-jobs", ...args])
                .pipe(Effect.provideService(Console.Console, capture), Effect.provide(Cli.platform), Effect.result)
              const answer = JSON.parse(lines.join("\n")) as { released: boolean; revoked: Array<{ jid: string }> }
              const held = queued.includes(asked)
              const revoked = running && asked === "c"
              assert.deepStrictEqual([answer.released, answer.revoked.map((r) => r.jid)], [held, revoked ? ["c"] : []])
              assert.strictEqual(Result.isFailure(ran), !held && !revoked, JSON.stringify(ran))
            }))
        )
        yield* Effect.promise(() => fc.assert(property, { numRuns: Math.max(8, Math.round(runs / 4)) }))
      }), { timeout: 300_000 })
  })
})
