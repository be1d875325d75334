/**
 * Every public option, exercised through `UniqueJob.make` and the middleware (`enqueue`, `client`, `server`, `died`)
 * on a real MemoryQueue, on both stores: each test asserts what the option changes that a user can see (outcomes,
 * digests, the holders in the store, the queue's schedule), so an option dropped between decoding and the lock
 * steps (`Lock.digest` ignoring `uniqueAcrossQueues`, say) turns a test red. On the memory store TestClock moves time;
 * on Redis time is real, so TTLs there are long and judged by the times stored with each holder.
 */
import { createHash } from "node:crypto"
import { assert, describe, it, layer } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as MemoryQueue from "../src/adapters/MemoryQueue.js"
import * as Digest from "../src/Digest.js"
import * as BullOptions from "../src/adapters/bullmq/Options.js"
import * as Waits from "../src/store/ReleaseWaits.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as Locks from "../src/Locks.js"
import * as LockOptions from "../src/Options.js"
import * as LockType from "../src/LockType.js"
import * as Redis from "../src/Redis.js"
import * as Strategy from "../src/Strategy.js"
import * as UniqueJob from "../src/UniqueJob.js"
import { gated } from "./support/gated.js"
import * as RedisTest from "./support/redis.js"
import { stores } from "./support/stores.js"

const prefix = () => RedisTest.uniquePrefix("opt")

/** A worker under a prefix of its own (unless the options name one). */
const define = (options: UniqueJob.Options) => UniqueJob.make({ lockPrefix: prefix(), ...options })

/** Runs `body` with a fresh MemoryQueue provided as the JobQueue. */
const withQueue = <A, E, R>(body: (queue: MemoryQueue.MemoryQueue) => Effect.Effect<A, E, R>) =>
  Effect.scoped(
    Effect.flatMap(
      MemoryQueue.make({ backoff: () => 30 }),
      (queue) => Effect.provideService(body(queue), JobQueue, queue)
    )
  )

const holdersOf = (uj: UniqueJob.UniqueJob, digest: string, phase: LockType.Phase) =>
  Effect.flatMap(Redis.RedisService, (redis) => redis.holders(Lock.keyOf(uj.definition, digest, phase)))

const jidsOf = (uj: UniqueJob.UniqueJob, digest: string, phase: LockType.Phase) =>
  Effect.map(holdersOf(uj, digest, phase), (hs) => hs.map((h) => h.jid).sort())

const holderOf = (uj: UniqueJob.UniqueJob, digest: string, phase: LockType.Phase, jid: string) =>
  Effect.map(holdersOf(uj, digest, phase), (hs) => {
    const holder = hs.find((h) => h.jid === jid)
    assert.isDefined(holder, `${jid} holds ${digest} (${phase})`)
    return holder!
  })

/** Keys matching `pattern` in the test's redis-server; None on the memory store. */
const rawKeys = (pattern: string) =>
  Effect.flatMap(
    Effect.serviceOption(RedisTest.TestRedis),
    Option.match({
      onNone: () => Effect.succeed(Option.none<ReadonlyArray<string>>()),
      onSome: ({ raw }) => Effect.map(Effect.promise(() => raw.keys(pattern)), (keys) => Option.some(keys.sort()))
    })
  )

/** A key's PTTL in the test's redis-server; None on the memory store. */
const rawPttl = (key: string) =>
  Effect.flatMap(
    Effect.serviceOption(RedisTest.TestRedis),
    Option.match({
      onNone: () => Effect.succeed(Option.none<number>()),
      onSome: ({ raw }) => Effect.map(Effect.promise(() => raw.pttl(key)), Option.some)
    })
  )


/** Real time, whatever the Clock: a bound on a wait that must not happen at all. */
const realSleep = (ms: number) =>
  Effect.callback<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), ms)
    return Effect.sync(() => clearTimeout(timer))
  })

const tagOf = (outcome: { readonly _tag: string }) => outcome._tag

for (const store of stores) {
  describe(`options through the middleware: ${store.name}`, () => {
    layer(store.layer, { excludeTestServices: store.live })((it) => {
      // ---------------------------------------------------------------------------------------------------------
      // Digest options
      // ---------------------------------------------------------------------------------------------------------

      it.effect("uniqueAcrossQueues: the same job on two queues collides with it, not without it", () =>
        withQueue(() =>
          Effect.gen(function*() {
            // Both on one prefix: they must find each other's lock.
            const shared = prefix()
            const [a, b] = yield* Effect.forEach(
              ["reports", "mailers"],
              (queue) =>
                define({
                  worker: "ExportJob",
                  queue,
                  lock: "until_executed",
                  uniqueAcrossQueues: true,
                  lockPrefix: shared
                })
            )
            const first = yield* a!.enqueue([1])
            const second = yield* b!.enqueue([1])
            assert.strictEqual(first._tag, "Enqueued")
            assert.strictEqual(second._tag, "Skipped")
            assert.deepStrictEqual(second._tag === "Skipped" && second.holders, [first.job.jid])
            assert.strictEqual(second.digest, first.digest)
            const pfx = shared
            const expected = yield* Digest.make(
              { worker: "ExportJob", queue: "any-queue", args: [1] },
              { uniqueAcrossQueues: true, prefix: pfx }
            )
            assert.strictEqual(first.digest, expected)
            assert.strictEqual(yield* a!.digest([1]), expected)
            assert.strictEqual(yield* b!.digest([1]), expected)
            assert.notStrictEqual(
              first.digest,
              yield* Digest.make({ worker: "ExportJob", queue: "reports", args: [1] }, { prefix: pfx })
            )
            assert.deepStrictEqual(yield* jidsOf(a!, first.digest, "queue"), [first.job.jid])

            // Without the option, on one prefix too: two locks, each the digest with its queue.
            const apart = prefix()
            const [c, d] = yield* Effect.forEach(
              ["reports", "mailers"],
              (queue) => define({ worker: "ExportJob", queue, lock: "until_executed", lockPrefix: apart })
            )
            const third = yield* c!.enqueue([1])
            const fourth = yield* d!.enqueue([1])
            assert.deepStrictEqual([third, fourth].map(tagOf), ["Enqueued", "Enqueued"])
            assert.strictEqual(
              third.digest,
              yield* Digest.make({ worker: "ExportJob", queue: "reports", args: [1] }, { prefix: apart })
            )
            assert.strictEqual(
              fourth.digest,
              yield* Digest.make({ worker: "ExportJob", queue: "mailers", args: [1] }, { prefix: apart })
            )
            assert.deepStrictEqual(yield* jidsOf(c!, third.digest, "queue"), [third.job.jid])
            assert.deepStrictEqual(yield* jidsOf(d!, fourth.digest, "queue"), [fourth.job.jid])
          })
        ))

      it.effect("uniqueAcrossQueues on the server: a job that never met the client collides across queues", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const shared = prefix()
            const [a, b] = yield* Effect.forEach(["q1", "q2"], (queue) =>
              define({
                worker: "IndexJob",
                queue,
                lock: "while_executing",
                uniqueAcrossQueues: true,
                lockPrefix: shared
              }))
            // Jobs built without the client: the server computes their digests through Lock.digest.
            const holder = yield* gated(a!.server, a!.job(["x"]))
            const duplicate = yield* b!.server(b!.job(["x"]), Effect.succeed("ran"))
            assert.strictEqual(duplicate._tag, "Skipped")
            assert.strictEqual(
              duplicate.digest,
              yield* Digest.make(
                { worker: "IndexJob", queue: "q", args: ["x"] },
                { uniqueAcrossQueues: true, prefix: shared }
              )
            )
            const done = yield* holder.finish
            assert.strictEqual(done._tag, "Performed")
            assert.strictEqual(done.digest, duplicate.digest)

            const apart = prefix()
            const [c, d] = yield* Effect.forEach(["q1", "q2"], (queue) =>
              define({ worker: "IndexJob", queue, lock: "while_executing", lockPrefix: apart }))
            const other = yield* gated(c!.server, c!.job(["x"]))
            const notDuplicate = yield* d!.server(d!.job(["x"]), Effect.succeed("ran"))
            assert.strictEqual(notDuplicate._tag, "Performed")
            yield* other.finish
          })
        ))

      it.effect("uniqueAcrossWorkers: two workers with the same args collide with it, not without it", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const shared = prefix()
            const make = (worker: string, uniqueAcrossWorkers: boolean | undefined, lockPrefix: string) =>
              define({ worker, lock: "until_executing", uniqueAcrossWorkers, lockPrefix })
            const a = yield* make("EmailJob", true, shared)
            const b = yield* make("SmsJob", true, shared)
            const first = yield* a.enqueue([{ user: 7 }])
            const second = yield* b.enqueue([{ user: 7 }])
            assert.deepStrictEqual([first, second].map(tagOf), ["Enqueued", "Skipped"])
            assert.deepStrictEqual(second._tag === "Skipped" && second.holders, [first.job.jid])
            const expected = yield* Digest.make(
              { worker: "AnyWorker", queue: "default", args: [{ user: 7 }] },
              { uniqueAcrossWorkers: true, prefix: shared }
            )
            assert.strictEqual(first.digest, expected)
            assert.strictEqual(second.digest, expected)
            // Other args still pass.
            assert.strictEqual((yield* b.enqueue([{ user: 8 }]))._tag, "Enqueued")

            const apart = prefix()
            const c = yield* make("EmailJob", undefined, apart)
            const d = yield* make("SmsJob", false, apart)
            const third = yield* c.enqueue([{ user: 7 }])
            const fourth = yield* d.enqueue([{ user: 7 }])
            assert.deepStrictEqual([third, fourth].map(tagOf), ["Enqueued", "Enqueued"])
            assert.strictEqual(
              third.digest,
              yield* Digest.make({ worker: "EmailJob", queue: "default", args: [{ user: 7 }] }, { prefix: apart })
            )
            assert.strictEqual(
              fourth.digest,
              yield* Digest.make({ worker: "SmsJob", queue: "default", args: [{ user: 7 }] }, { prefix: apart })
            )

            // On the server, for jobs that never met the client.
            const runShared = prefix()
            const runOn = (worker: string) =>
              define({ worker, lock: "while_executing", uniqueAcrossWorkers: true, lockPrefix: runShared })
            const e = yield* runOn("EmailJob")
            const f = yield* runOn("SmsJob")
            const holder = yield* gated(e.server, e.job([1]))
            assert.strictEqual((yield* f.server(f.job([1]), Effect.succeed("ran")))._tag, "Skipped")
            yield* holder.finish
            const runApart = prefix()
            const g = yield* define({ worker: "EmailJob", lock: "while_executing", lockPrefix: runApart })
            const h = yield* define({ worker: "SmsJob", lock: "while_executing", lockPrefix: runApart })
            const holder2 = yield* gated(g.server, g.job([1]))
            assert.strictEqual((yield* h.server(h.job([1]), Effect.succeed("ran")))._tag, "Performed")
            yield* holder2.finish
          })
        ))

      it.effect("lockArgs: args differing outside the selection collide, inside do not; a throw is a DigestError", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const job = yield* define({
              worker: "ChargeJob",
              lock: "until_executed",
              lockArgs: (args) => [args[0]]
            })
            const pfx = job.definition.lockPrefix
            const first = yield* job.enqueue([1, "first try"])
            const outside = yield* job.enqueue([1, "second try"])
            const inside = yield* job.enqueue([2, "first try"])
            assert.deepStrictEqual([first, outside, inside].map(tagOf), ["Enqueued", "Skipped", "Enqueued"])
            assert.deepStrictEqual(outside._tag === "Skipped" && outside.holders, [first.job.jid])
            // The digest is the one of the selected args.
            const charge = (id: number) =>
              Digest.make({ worker: "ChargeJob", queue: "default", args: [id] }, { prefix: pfx })
            assert.strictEqual(first.digest, yield* charge(1))
            assert.strictEqual(inside.digest, yield* charge(2))
            assert.deepStrictEqual(yield* jidsOf(job, first.digest, "queue"), [first.job.jid])
            assert.deepStrictEqual(yield* jidsOf(job, inside.digest, "queue"), [inside.job.jid])

            // On the server, for jobs that never met the client.
            const run = yield* define({ worker: "ChargeJob", lock: "while_executing", lockArgs: (args) => [args[0]] })
            const holder = yield* gated(run.server, run.job([1, "a"]))
            assert.strictEqual((yield* run.server(run.job([1, "b"]), Effect.succeed("ran")))._tag, "Skipped")
            assert.strictEqual((yield* run.server(run.job([2, "a"]), Effect.succeed("ran")))._tag, "Performed")
            yield* holder.finish

            // A lockArgs that throws: a DigestError from enqueue, server and died, and nothing pushed or locked.
            const boom = new Error("no such field")
            const broken = yield* define({
              worker: "BrokenJob",
              lock: "until_executed",
              lockArgs: () => {
                throw boom
              }
            })
            const before = (yield* queue.snapshot).ready.length
            const enqueueError = yield* Effect.flip(broken.enqueue([1]))
            assert.strictEqual(enqueueError._tag, "DigestError")
            assert.strictEqual(enqueueError._tag === "DigestError" && enqueueError.path, "lockArgs")
            assert.strictEqual(enqueueError._tag === "DigestError" && enqueueError.cause, boom)
            assert.strictEqual((yield* queue.snapshot).ready.length, before)
            const ran = yield* Ref.make(false)
            const serverError = yield* Effect.flip(broken.server(broken.job([1]), Ref.set(ran, true)))
            assert.strictEqual(serverError._tag, "DigestError")
            assert.isFalse(yield* Ref.get(ran))
            assert.strictEqual((yield* Effect.flip(broken.died(broken.job([1]))))._tag, "DigestError")
            const keys = yield* rawKeys(`${broken.definition.lockPrefix}:*`)
            if (Option.isSome(keys)) assert.deepStrictEqual(keys.value, [])
          })
        ))

      it.effect("lockPrefix: the locks live under the prefix, and nothing under the default one", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const pfx = prefix()
            const job = yield* UniqueJob.make({
              worker: "PrefixedJob",
              lock: "until_and_while_executing",
              lockPrefix: pfx,
              lockLease: 60_000
            })
            const outcome = yield* job.enqueue(["p"])
            assert.strictEqual(outcome._tag, "Enqueued")
            assert.isTrue(outcome.digest.startsWith(`${pfx}:`), outcome.digest)
            const input = { worker: "PrefixedJob", queue: "default", args: ["p"] }
            assert.strictEqual(outcome.digest, yield* Digest.make(input, { prefix: pfx }))
            const hex = outcome.digest.slice(pfx.length + 1)
            assert.match(hex, /^[0-9a-f]{32}$/)
            const redis = yield* Redis.RedisService
            assert.deepStrictEqual(
              (yield* redis.holders({ prefix: pfx, name: outcome.digest })).map((h) => h.jid),
              [outcome.job.jid]
            )
            // The same job under the default prefix holds nothing.
            const unprefixed = `${Digest.defaultPrefix}:${hex}`
            assert.strictEqual(unprefixed, yield* Digest.make(input))
            assert.deepStrictEqual(yield* redis.holders({ prefix: Digest.defaultPrefix, name: unprefixed }), [])
            const queued = yield* rawKeys(`${pfx}:*`)
            if (Option.isSome(queued)) {
              assert.deepStrictEqual(queued.value, [`${outcome.digest}:LOCKED`, `${pfx}:digests`, `${pfx}:layout`].sort())
            }
            // The run lock too, while the job runs.
            const holder = yield* gated(job.server, outcome.job)
            assert.deepStrictEqual(
              (yield* redis.holders({ prefix: pfx, name: `${outcome.digest}:RUN` })).map((h) => h.jid),
              [outcome.job.jid]
            )
            assert.deepStrictEqual(
              yield* redis.holders({ prefix: Digest.defaultPrefix, name: `${unprefixed}:RUN` }),
              []
            )
            const runKeys = yield* rawKeys(`${pfx}:*`)
            if (Option.isSome(runKeys)) {
              assert.deepStrictEqual(
                runKeys.value,
                [`${outcome.digest}:RUN:LOCKED`, `${pfx}:digests`, `${pfx}:fence`, `${pfx}:layout`].sort()
              )
            }
            assert.strictEqual((yield* holder.finish)._tag, "Performed")
            const defaults = yield* rawKeys(`${Digest.defaultPrefix}*`)
            if (Option.isSome(defaults)) assert.deepStrictEqual(defaults.value, [])
          })
        ))

      it.effect("digestAlgorithm: modern is SHA3-256 (64 hex), legacy MD5 (32), and the lock is held under it", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const pfx = prefix()
            const hashing = (digestAlgorithm: Digest.Algorithm) =>
              define({ worker: "HashJob", lock: "until_executed", digestAlgorithm, lockPrefix: pfx })
            const modern = yield* hashing("modern")
            const legacy = yield* hashing("legacy")
            const byDefault = yield* define({ worker: "HashJob", lock: "until_executed", lockPrefix: pfx })
            const m = yield* modern.enqueue([{ b: 2, a: 1 }])
            const l = yield* legacy.enqueue([{ b: 2, a: 1 }])
            assert.deepStrictEqual([m, l].map(tagOf), ["Enqueued", "Enqueued"])
            // The default is legacy: a duplicate of l.
            const d = yield* byDefault.enqueue([{ a: 1, b: 2 }])
            assert.strictEqual(d._tag, "Skipped")
            assert.strictEqual(d.digest, l.digest)

            const input = { worker: "HashJob", queue: "default", args: [{ a: 1, b: 2 }] }
            const text = yield* Digest.hashedText(input)
            assert.match(m.digest, new RegExp(`^${pfx}:[0-9a-f]{64}$`))
            assert.match(l.digest, new RegExp(`^${pfx}:[0-9a-f]{32}$`))
            assert.strictEqual(m.digest, `${pfx}:${createHash("sha3-256").update(text, "utf8").digest("hex")}`)
            assert.strictEqual(l.digest, `${pfx}:${createHash("md5").update(text, "utf8").digest("hex")}`)
            assert.strictEqual(m.digest, yield* Digest.make(input, { algorithm: "modern", prefix: pfx }))
            assert.strictEqual(m.digest, yield* modern.digest([{ a: 1, b: 2 }]))
            assert.deepStrictEqual(yield* jidsOf(modern, m.digest, "queue"), [m.job.jid])
            assert.deepStrictEqual(yield* jidsOf(legacy, l.digest, "queue"), [l.job.jid])
            // A modern duplicate is a duplicate of the modern lock.
            const again = yield* modern.enqueue([{ a: 1, b: 2 }])
            assert.deepStrictEqual(again._tag === "Skipped" && again.holders, [m.job.jid])
            // The server finds it under the same digest, and releases it there.
            const performed = yield* modern.server(m.job, Effect.succeed("done"))
            assert.strictEqual(performed._tag, "Performed")
            assert.strictEqual(performed.digest, m.digest)
            assert.deepStrictEqual(yield* jidsOf(modern, m.digest, "queue"), [])
            assert.deepStrictEqual(yield* jidsOf(legacy, l.digest, "queue"), [l.job.jid])
          })
        ))

      it.effect("worker and queue: the digest changes with them; the queue defaults to `default`", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const pfx = prefix()
            const defs = yield* Effect.forEach(
              [["ReportJob", undefined], ["ReportJob", "critical"], ["InvoiceJob", undefined]] as const,
              ([worker, queue]) => define({ worker, queue, lock: "until_executing", lockPrefix: pfx })
            )
            const outcomes = yield* Effect.forEach(defs, (d) => d.enqueue(["same"]))
            assert.deepStrictEqual(outcomes.map(tagOf), ["Enqueued", "Enqueued", "Enqueued"])
            assert.strictEqual(new Set(outcomes.map((o) => o.digest)).size, 3)
            assert.deepStrictEqual(outcomes.map((o) => o.job.queue), ["default", "critical", "default"])
            assert.deepStrictEqual(outcomes.map((o) => o.job.worker), ["ReportJob", "ReportJob", "InvoiceJob"])
            const expected = yield* Effect.forEach(
              [["ReportJob", "default"], ["ReportJob", "critical"], ["InvoiceJob", "default"]] as const,
              ([worker, queue]) => Digest.make({ worker, queue, args: ["same"] }, { prefix: pfx })
            )
            assert.deepStrictEqual(outcomes.map((o) => o.digest), expected)
            for (const [i, o] of outcomes.entries()) {
              assert.deepStrictEqual(yield* jidsOf(defs[i]!, o.digest, "queue"), [o.job.jid])
            }
          })
        ))

      // ---------------------------------------------------------------------------------------------------------
      // Lock options
      // ---------------------------------------------------------------------------------------------------------

      it.effect("lockInfo: each holder carries worker, queue, args, type, limit, ttl, timeout; nothing when off", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const on = yield* define({
              worker: "InfoJob",
              queue: "reports",
              lock: "until_and_while_executing",
              lockInfo: true,
              lockTtl: 3_600_000,
              lockTimeout: 250,
              lockLimit: 2,
              lockLease: 60_000
            })
            const args = [7, { nested: ["x"] }]
            const queued = yield* on.enqueue(args)
            assert.strictEqual(queued._tag, "Enqueued")
            const expected = {
              type: "until_and_while_executing",
              limit: 2,
              ttl: 3_600_000,
              timeout: 250,
              worker: "InfoJob",
              queue: "reports",
              args
            }
            assert.deepStrictEqual((yield* holderOf(on, queued.digest, "queue", queued.job.jid)).info, expected)
            // The run lock's holder, taken by the server.
            const holder = yield* gated(on.server, queued.job)
            assert.deepStrictEqual((yield* holderOf(on, queued.digest, "run", queued.job.jid)).info, expected)
            yield* holder.finish

            // Defaults in the info: no TTL, timeout 0, limit 1.
            const defaults = yield* define({ worker: "InfoJob", lock: "while_executing", lockInfo: true })
            const job = defaults.job(["y"])
            const runningDefaults = yield* gated(defaults.server, job)
            const digest = yield* defaults.digest(["y"])
            assert.deepStrictEqual((yield* holderOf(defaults, digest, "run", job.jid)).info, {
              type: "while_executing",
              limit: 1,
              ttl: null,
              timeout: 0,
              worker: "InfoJob",
              queue: "default",
              args: ["y"]
            })
            yield* runningDefaults.finish

            for (const lockInfo of [false, undefined]) {
              const off = yield* define({ worker: "InfoJob", lock: "until_executed", lockInfo })
              const outcome = yield* off.enqueue(args)
              const entry = yield* holderOf(off, outcome.digest, "queue", outcome.job.jid)
              assert.isUndefined(entry.info)
              assert.isUndefined(entry.foreign)
            }
          })
        ))

      it.effect("lockTtl: the queue lock lives lockTtl from enqueue, and from the run time for a scheduled job", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const ttl = 600_000
            const job = yield* define({ worker: "TtlJob", lock: "until_executed", lockTtl: ttl })
            const now = yield* Clock.currentTimeMillis
            const first = yield* job.enqueue([1])
            const entry = yield* holderOf(job, first.digest, "queue", first.job.jid)
            assert.strictEqual(entry.expiresAt! - entry.lockedAt, ttl)
            assert.isUndefined(entry.leaseUntil)
            const pttl = yield* rawPttl(`${first.digest}:LOCKED`)
            if (Option.isSome(pttl)) {
              assert.isAbove(pttl.value, 0)
              assert.isAtMost(pttl.value, ttl)
            }

            // Scheduled 300 s ahead: the TTL counts from then.
            const delay = 300_000
            const t0 = yield* Clock.currentTimeMillis
            const at = t0 + delay
            const scheduled = yield* job.enqueue([2], { at })
            const t1 = yield* Clock.currentTimeMillis
            assert.strictEqual(scheduled._tag, "Enqueued")
            const later = yield* holderOf(job, scheduled.digest, "queue", scheduled.job.jid)
            // The middleware counts the delay from its own clock, between t0 and t1.
            const lived = later.expiresAt! - later.lockedAt
            assert.isAtMost(lived, ttl + delay)
            assert.isAtLeast(lived, ttl + delay - (t1 - t0) - 1)
            const laterPttl = yield* rawPttl(`${scheduled.digest}:LOCKED`)
            if (Option.isSome(laterPttl)) {
              // Redis expires the key no sooner than the entry.
              assert.isAbove(laterPttl.value, ttl)
              assert.isAtMost(laterPttl.value, ttl + delay)
            }

            if (!store.live) {
              // TestClock: the locks end exactly then, each on its own.
              assert.strictEqual(entry.lockedAt, now)
              assert.strictEqual(lived, ttl + delay)
              yield* store.advance(ttl - 1)
              assert.strictEqual((yield* job.enqueue([1]))._tag, "Skipped")
              yield* store.advance(1)
              assert.strictEqual((yield* job.enqueue([1]))._tag, "Enqueued")
              // The scheduled job's lock still holds for its delay more.
              assert.strictEqual((yield* job.enqueue([2]))._tag, "Skipped")
              yield* store.advance(delay)
              assert.strictEqual((yield* job.enqueue([2]))._tag, "Enqueued")
            }
          })
        ))

      it.effect("lockLimit: that many holders of one digest, then Skipped (client and server)", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const job = yield* define({ worker: "LimitJob", lock: "until_executed", lockLimit: 3 })
            const outcomes = yield* Effect.forEach(Array.from({ length: 4 }), () => job.enqueue(["same"]))
            assert.deepStrictEqual(outcomes.map(tagOf), ["Enqueued", "Enqueued", "Enqueued", "Skipped"])
            const holders = outcomes.slice(0, 3).map((o) => o.job.jid).sort()
            const last = outcomes[3]!
            assert.deepStrictEqual(last._tag === "Skipped" && [...last.holders].sort(), holders)
            assert.deepStrictEqual(yield* jidsOf(job, last.digest, "queue"), holders)
            // One finishes: a place is free again.
            yield* job.server(outcomes[0]!.job, Effect.void)
            assert.strictEqual((yield* job.enqueue(["same"]))._tag, "Enqueued")
            assert.strictEqual((yield* job.enqueue(["same"]))._tag, "Skipped")

            const run = yield* define({ worker: "LimitJob", lock: "while_executing", lockLimit: 2, lockLease: 60_000 })
            const a = yield* gated(run.server, run.job(["same"]))
            const b = yield* gated(run.server, run.job(["same"]))
            const third = yield* run.server(run.job(["same"]), Effect.succeed("ran"))
            assert.strictEqual(third._tag, "Skipped")
            assert.strictEqual(third._tag === "Skipped" && third.holders.length, 2)
            yield* a.finish
            assert.strictEqual((yield* run.server(run.job(["same"]), Effect.succeed("ran")))._tag, "Performed")
            yield* b.finish
          })
        ))

      it.effect("lockLease: the run lock's holder is leased for lockLease (30 s by default)", () =>
        withQueue(() =>
          Effect.gen(function*() {
            // Long leases: no renewal (every lease/3) comes between the acquisition and the reading.
            const cases = [
              ["while_executing", 90_000],
              ["while_executing", undefined],
              ["until_and_while_executing", 120_000]
            ] as const
            for (const [lock, lockLease] of cases) {
              const job = yield* define({ worker: "LeaseJob", lock, lockLease })
              const outcome = yield* job.enqueue(["l"])
              assert.strictEqual(outcome._tag, "Enqueued")
              const holder = yield* gated(job.server, outcome.job)
              const entry = yield* holderOf(job, outcome.digest, "run", outcome.job.jid)
              assert.strictEqual(entry.leaseUntil! - entry.lockedAt, lockLease ?? 30_000, `${lock} ${lockLease}`)
              assert.isUndefined(entry.expiresAt)
              assert.isAbove(entry.fence, 0)
              assert.strictEqual((yield* holder.finish)._tag, "Performed")
              assert.deepStrictEqual(yield* jidsOf(job, outcome.digest, "run"), [])
            }
            if (!store.live) {
              // TestClock: a run lock whose holder stopped renewing frees itself after the lease.
              const job = yield* define({ worker: "LeaseJob", lock: "while_executing", lockLease: 1_000 })
              const digest = yield* job.digest(["crash"])
              const redis = yield* Redis.RedisService
              // A holder that took the lock and never renews it (a crashed worker).
              yield* redis.lock(Lock.keyOf(job.definition, digest, "run"), {
                jid: "crashed",
                limit: 1,
                ttlMs: 0,
                leaseMs: 1_000,
                info: "",
                fenced: true
              })
              assert.strictEqual((yield* job.server(job.job(["crash"]), Effect.void))._tag, "Skipped")
              yield* store.advance(1_000)
              assert.strictEqual((yield* job.server(job.job(["crash"]), Effect.void))._tag, "Performed")
            }
          })
        ))

      it.effect("lockTimeout: stored with lockInfo; an enqueue never waits, a run-lock duplicate waits and runs after", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const job = yield* define({
              worker: "TimeoutJob",
              lock: "until_executed",
              lockTimeout: "1 hour",
              lockInfo: true
            })
            const first = yield* job.enqueue([1])
            const entry = yield* holderOf(job, first.digest, "queue", first.job.jid)
            assert.strictEqual((entry.info as { timeout: number }).timeout, 3_600_000)
            // Were the duplicate to wait for the lock, the real-time bound would win the race.
            const start = yield* Clock.currentTimeMillis
            const duplicate = yield* Effect.raceFirst(
              Effect.map(job.enqueue([1]), Option.some),
              Effect.as(realSleep(20_000), Option.none())
            )
            assert.isTrue(Option.isSome(duplicate), "the duplicate enqueue waited")
            assert.strictEqual(Option.isSome(duplicate) && duplicate.value._tag, "Skipped")
            if (!store.live) assert.strictEqual(yield* Clock.currentTimeMillis, start)

            // A run lock is waited for: the duplicate lines up, and runs once the holder has released it.
            const run = yield* define({ worker: "TimeoutJob", lock: "while_executing", lockTimeout: "1 hour" })
            const holder = yield* gated(run.server, run.job([1]))
            const waiter = yield* Effect.forkChild(run.server(run.job([1]), Effect.succeed("ran")))
            const redis = yield* Redis.RedisService
            const key = Lock.keyOf(run.definition, yield* run.digest([1]), "run")
            while (Waits.waiting(redis, key) === 0) yield* realSleep(5)
            yield* holder.finish
            const after = yield* Fiber.join(waiter)
            assert.strictEqual(after._tag, "Performed")
            assert.strictEqual(after._tag === "Performed" && after.value, "ran")
            assert.strictEqual(Waits.waiting(redis, key), 0)
          })
        ))

      it.effect("rescheduleDelay: a duplicate execution is scheduled at now + the delay (5 s by default)", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const cases = [7_000, 13_000, undefined] as const
            const ats: Array<number> = []
            for (const rescheduleDelay of cases) {
              const job = yield* define({
                worker: "RescheduleJob",
                lock: "while_executing",
                onConflict: "reschedule",
                rescheduleDelay
              })
              const delay = rescheduleDelay ?? 5_000
              const holder = yield* gated(job.server, job.job(["r"]))
              const duplicate = job.job(["r"])
              const t0 = yield* Clock.currentTimeMillis
              const outcome = yield* job.server(duplicate, Effect.succeed("ran"))
              const t1 = yield* Clock.currentTimeMillis
              assert.strictEqual(outcome._tag, "Rescheduled")
              const at = outcome._tag === "Rescheduled" ? outcome.at : NaN
              assert.isAtLeast(at, t0 + delay)
              assert.isAtMost(at, t1 + delay)
              if (!store.live) assert.strictEqual(at, t0 + delay)
              ats.push(at - t0)
              // The queue holds it for then, same jid.
              const snapshot = yield* queue.snapshot
              const entry = snapshot.scheduled.find((s) => s.job.jid === duplicate.jid)
              assert.isDefined(entry)
              assert.strictEqual(entry!.at, at)
              assert.strictEqual(entry!.job.at, at)
              const events = yield* queue.events
              const scheduledEvent = events.find((e) => e.type === "scheduled" && e.job.jid === duplicate.jid)
              assert.strictEqual(scheduledEvent?.detail, new Date(at).toISOString())
              yield* holder.finish
              yield* queue.remove(duplicate.jid)
            }
            // Different delays, different times.
            if (!store.live) assert.deepStrictEqual(ats, [7_000, 13_000, 5_000])
            assert.strictEqual(new Set(ats).size, 3)

            // A strategy of your own reads the decoded delay.
            const seen = yield* Ref.make<Array<number>>([])
            const custom = yield* define({
              worker: "RescheduleJob",
              lock: "until_and_while_executing",
              lockLease: 60_000,
              rescheduleDelay: "9 seconds",
              onConflict: {
                server: (c) =>
                  Effect.gen(function*() {
                    const ms = (yield* Clock.currentTimeMillis) + Duration.toMillis(c.rescheduleDelay)
                    yield* Ref.update(seen, (s) => [...s, ms])
                    yield* (yield* JobQueue).schedule({ ...c.job, at: ms }, ms)
                    return Strategy.ServerOutcome.Rescheduled({
                      digest: c.conflict.digest,
                      job: c.job,
                      holders: c.conflict.holders,
                      at: ms
                    })
                  })
              }
            })
            const a = yield* custom.enqueue(["c"])
            const holder = yield* gated(custom.server, a.job)
            const b = yield* custom.enqueue(["c"])
            assert.strictEqual(b._tag, "Enqueued")
            const t0 = yield* Clock.currentTimeMillis
            const outcome = yield* custom.server(b.job, Effect.succeed("ran"))
            assert.strictEqual(outcome._tag, "Rescheduled")
            const at = outcome._tag === "Rescheduled" ? outcome.at : NaN
            assert.deepStrictEqual(yield* Ref.get(seen), [at])
            assert.isAtLeast(at, t0 + 9_000)
            // Rescheduled keeps the queue lock: the job comes back still unique.
            assert.deepStrictEqual(yield* jidsOf(custom, b.digest, "queue"), [b.job.jid])
            assert.strictEqual((yield* custom.enqueue(["c"]))._tag, "Skipped")
            yield* holder.finish
          })
        ))

      // ---------------------------------------------------------------------------------------------------------
      // Strategies and callbacks
      // ---------------------------------------------------------------------------------------------------------

      it.effect("onConflict, client side: each built-in gives its outcome", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const holderAndDuplicate = (onConflict: Strategy.OnConflict) =>
              Effect.gen(function*() {
                const job = yield* define({ worker: "ClientJob", lock: "until_executed", onConflict })
                const first = yield* job.enqueue(["c"])
                assert.strictEqual(first._tag, "Enqueued")
                return { job, first, duplicate: job.job(["c"]) }
              })

            for (const onConflict of ["log", { client: "log" }, {}] as const) {
              const { duplicate, first, job } = yield* holderAndDuplicate(onConflict)
              const outcome = yield* job.client(duplicate, () => Effect.die("must not enqueue"))
              assert.strictEqual(outcome._tag, "Skipped", JSON.stringify(onConflict))
              assert.deepStrictEqual(outcome._tag === "Skipped" && outcome.holders, [first.job.jid])
            }

            {
              const { duplicate, first, job } = yield* holderAndDuplicate("raise")
              const error = yield* Effect.flip(job.client(duplicate, () => Effect.die("must not enqueue")))
              assert.strictEqual(error._tag, "DuplicateJob")
              assert.deepStrictEqual(error._tag === "DuplicateJob" && error.holders, [first.job.jid])
            }

            {
              const { duplicate, first, job } = yield* holderAndDuplicate({ client: "reject" })
              const outcome = yield* job.client(duplicate, () => Effect.die("must not enqueue"))
              assert.strictEqual(outcome._tag, "Rejected")
              const dead = (yield* queue.snapshot).dead.map((d) => d.job.jid)
              assert.include(dead, duplicate.jid)
              assert.deepStrictEqual(yield* jidsOf(job, first.digest, "queue"), [first.job.jid])
            }

            {
              const { duplicate, first, job } = yield* holderAndDuplicate("replace")
              const outcome = yield* job.enqueue(duplicate.args, { jid: duplicate.jid })
              assert.strictEqual(outcome._tag, "Replaced")
              assert.deepStrictEqual(outcome._tag === "Replaced" && outcome.replaced, [first.job.jid])
              const ready = (yield* queue.snapshot).ready.map((j) => j.jid)
              assert.notInclude(ready, first.job.jid)
              assert.include(ready, duplicate.jid)
              assert.deepStrictEqual(yield* jidsOf(job, first.digest, "queue"), [duplicate.jid])
            }

            {
              // A function of your own.
              const { duplicate, job } = yield* holderAndDuplicate({
                client: (c) => Effect.succeed(Strategy.rejected(c, "mine"))
              })
              const outcome = yield* job.client(duplicate, () => Effect.die("must not enqueue"))
              assert.strictEqual(outcome._tag === "Rejected" && outcome.reason, "mine")
            }
          })
        ))

      it.effect("onConflict, server side: each built-in gives its outcome", () =>
        withQueue((queue) =>
          Effect.gen(function*() {
            const conflictWith = (
              lock: "while_executing" | "while_executing_reject",
              onConflict?: Strategy.OnConflict
            ) =>
              Effect.gen(function*() {
                const job = yield* define({ worker: "ServerJob", lock, onConflict, lockLease: 60_000 })
                const holder = yield* gated(job.server, job.job(["s"]))
                const duplicate = job.job(["s"])
                const exit = yield* Effect.exit(job.server(duplicate, Effect.die("must not run")))
                yield* holder.finish
                return { exit, duplicate }
              })
            const outcomeOf = <A, E>(exit: Exit.Exit<A, E>): A => {
              assert.isTrue(Exit.isSuccess(exit), String(exit))
              return (exit as Exit.Success<A, E>).value
            }

            for (const onConflict of [undefined, "log", { server: "log" }] as const) {
              const { exit } = yield* conflictWith("while_executing", onConflict)
              assert.strictEqual(outcomeOf(exit)._tag, "Skipped", JSON.stringify(onConflict))
            }
            {
              const { exit } = yield* conflictWith("while_executing", "raise")
              assert.isTrue(Exit.isFailure(exit))
              const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.findErrorOption(exit.cause)) : undefined
              assert.strictEqual((error as { _tag?: string } | undefined)?._tag, "ExecutionConflict")
            }
            const rejecting = [["while_executing", "reject"], ["while_executing_reject", undefined]] as const
            for (const [lock, onConflict] of rejecting) {
              const { duplicate, exit } = yield* conflictWith(lock, onConflict)
              assert.strictEqual(outcomeOf(exit)._tag, "Rejected", lock)
              assert.include((yield* queue.snapshot).dead.map((d) => d.job.jid), duplicate.jid)
            }
            {
              const { duplicate, exit } = yield* conflictWith("while_executing", { server: "reschedule" })
              assert.strictEqual(outcomeOf(exit)._tag, "Rescheduled")
              assert.include((yield* queue.snapshot).scheduled.map((s) => s.job.jid), duplicate.jid)
              yield* queue.remove(duplicate.jid)
            }
          })
        ))

      it.effect("afterUnlock: once per release through the middleware, after it, with digest, jid, type, phase", () =>
        withQueue(() =>
          Effect.gen(function*() {
            const redis = yield* Redis.RedisService
            const calls = yield* Ref.make<Array<LockOptions.Unlocked & { readonly holdersLeft: number }>>([])
            // Records the call and how many holders the released lock still had then: 0 proves it ran after.
            const afterUnlock = (key: (u: LockOptions.Unlocked) => Redis.LockKey) => (u: LockOptions.Unlocked) =>
              Effect.flatMap(
                Effect.orDie(redis.holders(key(u))),
                (hs) =>
                  Ref.update(calls, (cs) => [...cs, { ...u, holdersLeft: hs.filter((h) => h.jid === u.jid).length }])
              )
            const take = Ref.getAndSet(calls, [])
            const defineWith = (options: Omit<UniqueJob.Options, "worker" | "afterUnlock">) =>
              Effect.gen(function*() {
                const lockPrefix = prefix()
                return yield* UniqueJob.make({
                  worker: "CallbackJob",
                  lockPrefix,
                  ...options,
                  afterUnlock: afterUnlock((u) => ({
                    prefix: lockPrefix,
                    name: u.phase === "queue" ? u.digest : `${u.digest}:RUN`
                  }))
                })
              })

            // until_executing: before perform.
            {
              const job = yield* defineWith({ lock: "until_executing" })
              const queued = yield* job.enqueue([1])
              assert.deepStrictEqual(yield* Ref.get(calls), [])
              const seenInPerform = yield* job.server(queued.job, Effect.map(Ref.get(calls), (cs) => cs.length))
              assert.strictEqual(seenInPerform._tag === "Performed" && seenInPerform.value, 1)
              assert.deepStrictEqual(yield* take, [
                {
                  digest: queued.digest,
                  jid: queued.job.jid,
                  lockType: "until_executing",
                  phase: "queue",
                  holdersLeft: 0
                }
              ])
            }

            // until_executed: not on failure; after success; on death.
            {
              const job = yield* defineWith({ lock: "until_executed" })
              const queued = yield* job.enqueue([1])
              yield* Effect.flip(job.server(queued.job, Effect.fail("boom")))
              assert.deepStrictEqual(yield* take, [])
              const retried = { ...queued.job, retryCount: 1 }
              const seenInPerform = yield* job.server(retried, Effect.map(Ref.get(calls), (cs) => cs.length))
              assert.strictEqual(seenInPerform._tag === "Performed" && seenInPerform.value, 0)
              assert.deepStrictEqual(yield* take, [
                {
                  digest: queued.digest,
                  jid: queued.job.jid,
                  lockType: "until_executed",
                  phase: "queue",
                  holdersLeft: 0
                }
              ])
              const dying = yield* job.enqueue([2])
              assert.isTrue(yield* job.died(dying.job))
              assert.isFalse(yield* job.died(dying.job))
              assert.deepStrictEqual(yield* take, [
                { digest: dying.digest, jid: dying.job.jid, lockType: "until_executed", phase: "queue", holdersLeft: 0 }
              ])
              // A duplicate that never held the lock releases nothing.
              const held = yield* job.enqueue([3])
              const skipped = yield* job.enqueue([3])
              assert.strictEqual(skipped._tag, "Skipped")
              assert.isFalse(yield* job.died(skipped.job))
              assert.deepStrictEqual(yield* take, [])
              yield* job.server(held.job, Effect.void)
              assert.strictEqual((yield* take).length, 1)
            }

            // while_executing: the run lock, after perform.
            {
              const job = yield* defineWith({ lock: "while_executing", lockLease: 60_000 })
              const j = job.job([1])
              const performed = yield* job.server(j, Effect.map(Ref.get(calls), (cs) => cs.length))
              assert.strictEqual(performed._tag === "Performed" && performed.value, 0)
              assert.deepStrictEqual(yield* take, [
                { digest: performed.digest, jid: j.jid, lockType: "while_executing", phase: "run", holdersLeft: 0 }
              ])
              // A duplicate skipped by the server releases nothing.
              const holder = yield* gated(job.server, job.job([1]))
              assert.strictEqual((yield* job.server(job.job([1]), Effect.void))._tag, "Skipped")
              assert.deepStrictEqual(yield* take, [])
              yield* holder.finish
              assert.strictEqual((yield* take).length, 1)
            }

            // until_and_while_executing: twice, for the queue lock the handoff releases (before perform) and for the
            // run lock after perform.
            {
              const job = yield* defineWith({ lock: "until_and_while_executing", lockLease: 60_000 })
              const queued = yield* job.enqueue([1])
              const performed = yield* job.server(queued.job, Effect.map(Ref.get(calls), (cs) => cs.length))
              assert.strictEqual(performed._tag === "Performed" && performed.value, 1)
              assert.deepStrictEqual(yield* jidsOf(job, queued.digest, "queue"), [])
              const unlocked = (phase: string) => ({
                digest: queued.digest,
                jid: queued.job.jid,
                lockType: "until_and_while_executing",
                phase,
                holdersLeft: 0
              })
              assert.deepStrictEqual(yield* take, [unlocked("queue"), unlocked("run")])
              // A duplicate execution drops its queue lock in the handoff under log: that release counts too.
              const holder = yield* gated(job.server, (yield* job.enqueue([2])).job)
              const duplicate = yield* job.enqueue([2])
              assert.strictEqual((yield* take).length, 1) // the holder's queue lock, at its handoff
              assert.strictEqual((yield* job.server(duplicate.job, Effect.void))._tag, "Skipped")
              assert.deepStrictEqual((yield* take).map((c) => c.phase), ["queue"])
              yield* holder.finish
              assert.deepStrictEqual((yield* take).map((c) => c.phase), ["run"])
            }

            // until_expired: never, not even when its TTL passes.
            {
              const job = yield* defineWith({ lock: "until_expired", lockTtl: 1_000 })
              const queued = yield* job.enqueue([1])
              assert.strictEqual((yield* job.server(queued.job, Effect.void))._tag, "Performed")
              assert.isFalse(yield* job.died(queued.job))
              // Neither perform nor death released it: only its TTL does.
              assert.deepStrictEqual(yield* jidsOf(job, queued.digest, "queue"), [queued.job.jid])
              if (!store.live) {
                yield* store.advance(1_000)
                assert.strictEqual((yield* job.enqueue([1]))._tag, "Enqueued")
              }
              assert.deepStrictEqual(yield* take, [])
            }
          })
        ))
    })
  })
}

describe("options of the other constructors: decoded once, each field named", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("Redis.make refuses bad options before connecting, naming the field and what to write", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const url = source.url
        const cases: ReadonlyArray<readonly [unknown, string, string]> = [
          [5, "options", "expected Redis options"],
          [{ url, timeout: 0 }, "timeout", "got 0 ms"],
          [{ url, timeout: -1 }, "timeout", "got -1 ms"],
          [{ url, timeout: Number.NaN }, "timeout", "NaN"],
          [{ url, timeout: 1.5 }, "timeout", "use 2"],
          [{ url, timeout: 1e20 }, "timeout", "at most"],
          [{ url, timeout: "abc" }, "timeout", "a string like"],
          [{ url: 5 }, "url", "redis://"],
          [{ url: "" }, "url", "redis://"],
          [{ url, enableAutoPipelining: "yes" }, "enableAutoPipelining", "boolean"],
          [{ url, maxLockWaiters: 0 }, "maxLockWaiters", "from 1 to 1000000"],
          [{ url, maxLockWaiters: -1 }, "maxLockWaiters", "got number -1"],
          [{ url, maxLockWaiters: Number.NaN }, "maxLockWaiters", "got number NaN"],
          [{ url, maxLockWaiters: 1.5 }, "maxLockWaiters", "whole number"],
          [{ url, maxLockWaiters: 1e7 }, "maxLockWaiters", "from 1 to 1000000"],
          [{ url, maxLockWaiters: "5" }, "maxLockWaiters", "the string"],
          [{ url, maxProcessWaiters: 0 }, "maxProcessWaiters", "from 1 to 1000000"],
          [{ url, maxProcessWaiters: Number.POSITIVE_INFINITY }, "maxProcessWaiters", "Infinity"],
          [{ url, maxProcessWaiters: 2.5 }, "maxProcessWaiters", "whole number"],
          [{ url, client: 5 }, "client", "expected ioredis options"],
          [{ url, client: { port: 70_000 } }, "client.port", "a port"],
          [{ url, client: { db: -1 } }, "client.db", "database"],
          // Written beside url, ioredis would never see it: it belongs under client.
          [{ url, host: "elsewhere" }, "host", "under client"]
        ]
        for (const [options, field, says] of cases) {
          const error = yield* Effect.flip(Effect.scoped(Redis.make(options as Redis.Options)))
          assert.strictEqual(error.operation, "options", `${JSON.stringify(options)}: ${error.reason}`)
          assert.isTrue(error.reason.startsWith(`${field}: `), error.reason)
          assert.include(error.reason, says)
          assert.instanceOf(error.cause, LockOptions.InvalidLockOptions)
        }
        // A client the caller owns: its timeout is checked the same way, before the client is touched.
        for (const timeout of [0, -1, Number.NaN, 1.5, "abc"]) {
          const error = yield* Effect.flip(Redis.makeFromClient({} as never, { timeout: timeout as never }))
          assert.strictEqual(error.operation, "options", String(timeout))
          assert.isTrue(error.reason.startsWith("timeout: "), error.reason)
        }
        // lockTimeout's waiter caps, the same on each constructor that takes them.
        for (const [field, value] of [["maxLockWaiters", 0], ["maxProcessWaiters", -1], ["maxLockWaiters", 1.5]] as const) {
          const fromClient = yield* Effect.flip(Redis.makeFromClient({} as never, { [field]: value }))
          assert.strictEqual(fromClient.operation, "options")
          assert.isTrue(fromClient.reason.startsWith(`${field}: `), fromClient.reason)
          const cluster = yield* Effect.flip(Effect.scoped(Redis.makeCluster({ nodes: ["127.0.0.1:1"], [field]: value })))
          assert.strictEqual(cluster.operation, "options")
          assert.isTrue(cluster.reason.startsWith(`${field}: `), cluster.reason)
        }
        // What checks still connects.
        const capped = Redis.make({ url, maxLockWaiters: 1, maxProcessWaiters: 1_000_000 })
        assert.strictEqual(yield* Effect.scoped(Effect.map(capped, () => "ok")), "ok")
        const store = yield* Effect.scoped(Effect.map(Redis.make({ url, timeout: "2 seconds", client: { db: 0 } }), () => "ok"))
        assert.strictEqual(store, "ok")
      }))
  })

  it.effect("Locks.make refuses a prefix no lock can have, naming prefix; a good one works", () =>
    Effect.gen(function*() {
      for (const options of [{ prefix: "a b" }, { prefix: "*" }, { prefix: "" }, { prefix: "x:" }, { prefix: 5 }, { prfix: "x" }, 5]) {
        const error = yield* Effect.flip(Locks.make(options as never))
        assert.strictEqual(error._tag, "InvalidLockOptions", JSON.stringify(options))
        assert.include(["prefix", "prfix", "options"], error.field)
      }
      const locks = yield* Locks.make({ prefix: "good-prefix" })
      assert.strictEqual(locks.prefix, "good-prefix")
    }).pipe(Effect.provide(Redis.layerMemory)))

  it("BullMQ job options that cannot work with the locks are named, with what to write instead", () => {
    const fields = (opts: unknown, source: BullOptions.Source) =>
      BullOptions.issues(opts, "opts", source).map((issue) => issue.field)
    assert.deepStrictEqual(fields({ deduplication: { id: "x" } }, "add"), ["opts.deduplication"])
    assert.deepStrictEqual(fields({ debounce: { id: "x" } }, "add"), ["opts.debounce"])
    assert.deepStrictEqual(fields({ repeat: { every: 1 } }, "add"), ["opts.repeat"])
    assert.deepStrictEqual(fields({ jobId: "" }, "add"), ["opts.jobId"])
    assert.deepStrictEqual(fields({ jobId: 7 }, "add"), ["opts.jobId"])
    assert.deepStrictEqual(fields({ jobId: "order-7" }, "add"), [])
    assert.deepStrictEqual(fields({ jobId: "order-7" }, "defaults"), ["opts.jobId"])
    for (const delay of [-1, Number.NaN, 1.5, Infinity, 1e20, "5"]) {
      assert.deepStrictEqual(fields({ delay }, "add"), ["opts.delay"], String(delay))
    }
    assert.deepStrictEqual(fields({ delay: 0, attempts: 3, priority: 2, removeOnComplete: true }, "add"), [])
    assert.deepStrictEqual(fields(undefined, "add"), [])
    assert.deepStrictEqual(fields(5, "add"), ["opts"])
    for (const issue of BullOptions.issues({ deduplication: { id: "x" }, repeat: {} }, "opts", "add")) {
      assert.isAbove(issue.reason.length, 40, `${issue.field} says what to write instead`)
    }
  })
})
