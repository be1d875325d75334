/**
 * One suite, two stores: the Lua scripts on a private redis-server and the in-process memory store must agree.
 * Time moves with TestClock on the memory store and with real sleeps on Redis: TTLs and leases there are a second or
 * more, so that a check meant to fall within one does so however busy the machine.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Lock from "../src/Lock.js"
import * as Errors from "../src/Errors.js"
import * as LockOptions from "../src/Options.js"
import * as LockType from "../src/LockType.js"
import * as Redis from "../src/Redis.js"
import * as RedisTest from "./support/redis.js"
import { stores } from "./support/stores.js"

const setup = (options: LockOptions.Options) =>
  Effect.map(LockOptions.make({ ...options, lockPrefix: RedisTest.uniquePrefix() }), (definition) => ({
    definition,
    digest: `${definition.lockPrefix}:0123456789abcdef`
  }))

const holders = (definition: LockOptions.Definition, digest: string, phase: LockType.Phase) =>
  Effect.flatMap(Redis.RedisService, (redis) => redis.holders(Lock.keyOf(definition, digest, phase)))

/** The conflict a lock step failed with (any other failure fails the test). */
const conflictOf = <A, R>(self: Effect.Effect<A, Errors.LockConflict | Redis.RedisError, R>) =>
  Effect.flatMap(Effect.flip(self), (e) => (e._tag === "LockConflict" ? Effect.succeed(e) : Effect.die(e)))

/** The store's clock: Redis time on Redis, Effect's Clock (TestClock) on the memory store. */
const storeNow: Effect.Effect<number> = Effect.flatMap(
  Effect.serviceOption(RedisTest.TestRedis),
  Option.match({
    onNone: () => Clock.currentTimeMillis,
    onSome: ({ raw }) =>
      Effect.promise(async () => {
        const [s, us] = await raw.time()
        return Number(s) * 1000 + Math.floor(Number(us) / 1000)
      })
  })
)

const jids = (definition: LockOptions.Definition, digest: string, phase: LockType.Phase) =>
  Effect.map(holders(definition, digest, phase), (hs) => hs.map((h) => h.jid).sort())

for (const store of stores) {
  describe(`conformance: ${store.name}`, () => {
    layer(store.layer, { excludeTestServices: store.live })((it) => {
      const race = (limit: number) =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_executed", lockLimit: limit })
          const results = yield* Effect.forEach(
            Array.from({ length: 64 }, (_, i) => `jid-${i}`),
            (jid) => Effect.result(Lock.lock(definition, { digest, jid })),
            { concurrency: "unbounded" }
          )
          const won = results.filter(Result.isSuccess).map((r) => r.success.jid).sort()
          const lost = results.filter(Result.isFailure).map((r) => r.failure)
            .flatMap((e) => (e._tag === "LockConflict" ? [e] : []))
          assert.strictEqual(won.length, limit)
          assert.strictEqual(lost.length, 64 - limit)
          for (const conflict of lost) {
            assert.strictEqual(conflict._tag, "LockConflict")
            assert.strictEqual(conflict.holders.length, limit)
          }
          assert.deepStrictEqual(yield* jids(definition, digest, "queue"), won)
        })

      it.effect("64 concurrent attempts, lockLimit 1: exactly one holder", () => race(1))
      it.effect("64 concurrent attempts, lockLimit 3: exactly three holders", () => race(3))

      it.effect("the holder locking again succeeds and stays the one holder", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_executed" })
          const first = yield* Lock.lock(definition, { digest, jid: "a" })
          const again = yield* Lock.lock(definition, { digest, jid: "a" })
          assert.isFalse(first.reentrant)
          assert.isTrue(again.reentrant)
          assert.deepStrictEqual(yield* jids(definition, digest, "queue"), ["a"])
          const other = yield* conflictOf(Lock.lock(definition, { digest, jid: "b" }))
          assert.deepStrictEqual(other.holders, ["a"])
        }))

      it.effect("releasing: only the holder's unlock counts, and the last one empties the lock", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_executed", lockLimit: 2 })
          yield* Lock.lock(definition, { digest, jid: "a" })
          yield* Lock.lock(definition, { digest, jid: "b" })
          assert.isFalse(yield* Lock.unlock(definition, { digest, jid: "c" }))
          assert.isTrue(yield* Lock.unlock(definition, { digest, jid: "a" }))
          assert.deepStrictEqual(yield* jids(definition, digest, "queue"), ["b"])
          assert.isTrue(yield* Lock.unlock(definition, { digest, jid: "b" }))
          assert.isFalse(yield* Lock.unlock(definition, { digest, jid: "b" }))
          assert.deepStrictEqual(yield* jids(definition, digest, "queue"), [])
          yield* Lock.lock(definition, { digest, jid: "c" })
          assert.deepStrictEqual(yield* jids(definition, digest, "queue"), ["c"])
        }))

      it.effect("with lockTtl the lock expires and another jid can lock", () =>
        Effect.gen(function*() {
          // A TTL of a second: the conflict check right after locking falls within it however busy the machine.
          const { definition, digest } = yield* setup({ lock: "until_expired", lockTtl: 1000 })
          yield* Lock.lock(definition, { digest, jid: "a" })
          const [holder] = yield* holders(definition, digest, "queue")
          assert.strictEqual(holder!.expiresAt! - holder!.lockedAt, 1000)
          assert.isTrue(Result.isFailure(yield* Effect.result(Lock.lock(definition, { digest, jid: "b" }))))
          yield* store.advance(1100)
          assert.isFalse((yield* Lock.lock(definition, { digest, jid: "b" })).reentrant)
          assert.deepStrictEqual(yield* jids(definition, digest, "queue"), ["b"])
        }))

      it.effect("a scheduled job's TTL counts from its run time", () =>
        Effect.gen(function*() {
          // Past the bare TTL (200 ms) the lock still holds: it ends 3.2 s after locking, far from the check.
          const { definition, digest } = yield* setup({ lock: "until_executed", lockTtl: 200 })
          yield* Lock.lock(definition, { digest, jid: "a", delay: 3000 })
          const [holder] = yield* holders(definition, digest, "queue")
          assert.strictEqual(holder!.expiresAt! - holder!.lockedAt, 3200)
          yield* store.advance(300)
          assert.isTrue(Result.isFailure(yield* Effect.result(Lock.lock(definition, { digest, jid: "b" }))))
        }))

      it.effect("with lockLimit > 1 each holder expires on its own", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_executed", lockLimit: 2, lockTtl: 1500 })
          yield* Lock.lock(definition, { digest, jid: "a" })
          yield* store.advance(1100)
          yield* Lock.lock(definition, { digest, jid: "b" })
          yield* store.advance(500)
          // a's 1500 ms have passed, b's have a second to go: c takes a's place, not b's.
          yield* Lock.lock(definition, { digest, jid: "c" })
          assert.deepStrictEqual(yield* jids(definition, digest, "queue"), ["b", "c"])
        }))

      it.effect("a holder whose lease has passed is evicted by another jid's attempt", () =>
        Effect.gen(function*() {
          // A lease of a second: the conflict check right after locking falls within it however busy the machine.
          const { definition, digest } = yield* setup({ lock: "while_executing", lockLease: 1000 })
          yield* Lock.lock(definition, { digest, jid: "crashed" })
          const [holder] = yield* holders(definition, digest, "run")
          assert.strictEqual(holder!.leaseUntil! - holder!.lockedAt, 1000)
          assert.isTrue(Result.isFailure(yield* Effect.result(Lock.lock(definition, { digest, jid: "next" }))))
          yield* store.advance(1100)
          yield* Lock.lock(definition, { digest, jid: "next" })
          assert.deepStrictEqual(yield* jids(definition, digest, "run"), ["next"])
        }))

      it.effect("renewal keeps a lease alive past its first expiry; a deleted entry is LockLost", () =>
        Effect.gen(function*() {
          // Renewed every 400 ms, a 1.5 s lease has 1.1 s to spare at each renewal.
          const { definition, digest } = yield* setup({ lock: "while_executing", lockLease: 1500 })
          yield* Lock.lock(definition, { digest, jid: "a" })
          const [first] = yield* holders(definition, digest, "run")
          for (let i = 0; i < 4; i++) {
            yield* store.advance(400)
            yield* Lock.renew(definition, { digest, jid: "a" })
          }
          // By the store's own clock the first lease has ended; the renewed one has not.
          const now = yield* storeNow
          assert.isAbove(now, first!.leaseUntil!)
          const [renewed] = yield* holders(definition, digest, "run")
          assert.isAbove(renewed!.leaseUntil!, now)
          assert.isTrue(Result.isFailure(yield* Effect.result(Lock.lock(definition, { digest, jid: "b" }))))
          yield* Lock.unlock(definition, { digest, jid: "a" })
          const lost = yield* Effect.flip(Lock.renew(definition, { digest, jid: "a" }))
          assert.strictEqual(lost._tag, "LockLost")
        }))

      it.effect("afterUnlock runs once per release", () =>
        Effect.gen(function*() {
          const calls = yield* Ref.make<Array<string>>([])
          const { definition, digest } = yield* setup({
            lock: "until_executed",
            afterUnlock: (u) => Ref.update(calls, (cs) => [...cs, `${u.jid}:${u.phase}:${u.lockType}`])
          })
          yield* Lock.lock(definition, { digest, jid: "a" })
          yield* Lock.unlock(definition, { digest, jid: "a" })
          yield* Lock.unlock(definition, { digest, jid: "a" })
          yield* Lock.unlock(definition, { digest, jid: "never-held" })
          assert.deepStrictEqual(yield* Ref.get(calls), ["a:queue:until_executed"])
        }))

      it.effect("afterUnlock never runs for until_expired", () =>
        Effect.gen(function*() {
          const calls = yield* Ref.make(0)
          const { definition, digest } = yield* setup({
            lock: "until_expired",
            lockTtl: 1000,
            afterUnlock: () => Ref.update(calls, (n) => n + 1)
          })
          yield* Lock.lock(definition, { digest, jid: "a" })
          assert.isTrue(yield* Lock.unlock(definition, { digest, jid: "a" }))
          assert.strictEqual(yield* Ref.get(calls), 0)
        }))

      it.effect("a failing afterUnlock is logged, not raised", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_executed", afterUnlock: () => Effect.fail("boom") })
          yield* Lock.lock(definition, { digest, jid: "a" })
          assert.isTrue(yield* Lock.unlock(definition, { digest, jid: "a" }))
        }))

      it.effect("interrupting a fiber that holds a scoped lock releases it", () =>
        Effect.gen(function*() {
          const released = yield* Ref.make(0)
          const { definition, digest } = yield* setup({
            lock: "while_executing",
            afterUnlock: () => Ref.update(released, (n) => n + 1)
          })
          const held = yield* Deferred.make<void>()
          const fiber = yield* Effect.forkChild(
            Lock.withLock(definition, { digest, jid: "a" })(Effect.andThen(Deferred.succeed(held, undefined), Effect.never))
          )
          yield* Deferred.await(held)
          assert.deepStrictEqual(yield* jids(definition, digest, "run"), ["a"])
          yield* Fiber.interrupt(fiber)
          assert.deepStrictEqual(yield* jids(definition, digest, "run"), [])
          assert.strictEqual(yield* Ref.get(released), 1)
        }))

      it.effect("withLock releases after success and after failure, and refuses a held lock", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "while_executing" })
          const result = yield* Lock.withLock(definition, { digest, jid: "a" })(
            Effect.gen(function*() {
              const inner = yield* Effect.flip(Lock.withLock(definition, { digest, jid: "b" })(Effect.succeed(1)))
              assert.strictEqual(inner._tag, "LockConflict")
              return 42
            })
          )
          assert.strictEqual(result, 42)
          const failed = yield* Effect.flip(Lock.withLock(definition, { digest, jid: "c" })(Effect.fail("nope" as const)))
          assert.strictEqual(failed, "nope")
          assert.deepStrictEqual(yield* jids(definition, digest, "run"), [])
        }))

      it.effect("withLock fails with LockLost when the lock is taken away while running", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "while_executing", lockLease: 300 })
          const held = yield* Deferred.make<void>()
          const fiber = yield* Effect.forkChild(
            Lock.withLock(definition, { digest, jid: "a" })(Effect.andThen(Deferred.succeed(held, undefined), Effect.never))
          )
          yield* Deferred.await(held)
          yield* Effect.flatMap(
            Redis.RedisService,
            (redis) => redis.unlock(Lock.keyOf(definition, digest, "run"), "a")
          )
          yield* store.advance(150)
          const exit = yield* Fiber.await(fiber)
          assert.isTrue(exit._tag === "Failure")
          const error = yield* Effect.flip(Fiber.join(fiber))
          assert.strictEqual(error._tag, "LockLost")
        }))

      it.effect("handoff takes :RUN and releases the queue lock in one step", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_and_while_executing" })
          yield* Lock.lock(definition, { digest, jid: "a" })
          const handed = yield* Lock.handoff(definition, { digest, jid: "a" }, { keepQueueLock: true })
          assert.isTrue(handed.queueLockHeld)
          assert.deepStrictEqual(yield* jids(definition, digest, "queue"), [])
          assert.deepStrictEqual(yield* jids(definition, digest, "run"), ["a"])
          // b is enqueued while a runs, then its handoff conflicts: its queue lock is kept for a reschedule.
          yield* Lock.lock(definition, { digest, jid: "b" })
          const conflict = yield* conflictOf(Lock.handoff(definition, { digest, jid: "b" }, { keepQueueLock: true }))
          assert.deepStrictEqual(conflict.holders, ["a"])
          assert.deepStrictEqual(yield* jids(definition, digest, "queue"), ["b"])
          // Without keepQueueLock the loser's queue lock goes.
          yield* Effect.flip(Lock.handoff(definition, { digest, jid: "b" }, { keepQueueLock: false }))
          assert.deepStrictEqual(yield* jids(definition, digest, "queue"), [])
          // A job whose queue lock vanished still gets :RUN, and says so.
          yield* Lock.unlock(definition, { digest, jid: "a", phase: "run" })
          const lapsed = yield* Lock.handoff(definition, { digest, jid: "c" }, { keepQueueLock: true })
          assert.isFalse(lapsed.queueLockHeld)
          assert.deepStrictEqual(yield* jids(definition, digest, "run"), ["c"])
        }))

      it.effect("lockInfo stores worker, queue, args and options with the holder", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_executed", lockInfo: true, lockTtl: 5000 })
          yield* Lock.lock(definition, { digest, jid: "a", info: { worker: "W", queue: "q", args: [1, { k: "v" }] } })
          const [holder] = yield* holders(definition, digest, "queue")
          assert.deepStrictEqual(holder!.info, {
            type: "until_executed",
            limit: 1,
            ttl: 5000,
            timeout: 0,
            worker: "W",
            queue: "q",
            args: [1, { k: "v" }]
          })
        }))

      // The activity log (lockEvents): what happened to a digest, newest first, written by the call that made it.
      const events = (definition: LockOptions.Definition, digest: string) =>
        Effect.flatMap(Redis.RedisService, (redis) => redis.events(Lock.keyOf(definition, digest, "queue"), 100))
      const kinds = (definition: LockOptions.Definition, digest: string) =>
        Effect.map(events(definition, digest), (log) =>
          log.map((e) => [e.event, e.jid, e.phase, e.holder, e.who].filter((part) => part !== undefined).join(" ")))

      it.effect("lockEvents: taken, reentered, refused with the holder, released and missed, newest first", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_executed", lockEvents: true })
          const before = yield* storeNow
          yield* Lock.lock(definition, { digest, jid: "a" })
          yield* Lock.lock(definition, { digest, jid: "a" })
          yield* conflictOf(Lock.lock(definition, { digest, jid: "b\"\n/é" }))
          yield* Lock.unlock(definition, { digest, jid: "a" })
          yield* Lock.unlock(definition, { digest, jid: "a" })
          assert.deepStrictEqual(yield* kinds(definition, digest), [
            "missed a queue",
            "released a queue",
            "refused b\"\n/é queue a",
            "reentered a queue",
            "taken a queue"
          ])
          const [newest] = yield* events(definition, digest)
          assert.isAtLeast(newest!.at, before)
          assert.isAtMost(newest!.at, yield* storeNow)
        }))

      it.effect("lockEvents off (the default) keeps no log", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_executed" })
          yield* Lock.lock(definition, { digest, jid: "a" })
          yield* conflictOf(Lock.lock(definition, { digest, jid: "b" }))
          yield* Lock.unlock(definition, { digest, jid: "a" })
          assert.deepStrictEqual(yield* events(definition, digest), [])
        }))

      it.effect("lockEvents: a handoff logs its run lock taken or refused and its queue lock released", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_and_while_executing", lockEvents: true })
          yield* Lock.lock(definition, { digest, jid: "a" })
          yield* Lock.handoff(definition, { digest, jid: "a" }, { keepQueueLock: true })
          yield* Lock.lock(definition, { digest, jid: "b" })
          yield* conflictOf(Lock.handoff(definition, { digest, jid: "b" }, { keepQueueLock: true }))
          assert.deepStrictEqual(yield* kinds(definition, digest), [
            "refused b run a",
            "taken b queue",
            "released a queue",
            "taken a run",
            "taken a queue"
          ])
        }))

      it.effect("lockEvents: an admin's removal logs revoked and removed with who; the renewal after it logs lost", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_and_while_executing", lockEvents: true })
          const redis = yield* Redis.RedisService
          yield* Lock.lock(definition, { digest, jid: "q" })
          yield* Lock.lock(definition, { digest, jid: "r", phase: "run" })
          const removal = yield* redis.remove(
            [Lock.keyOf(definition, digest, "queue"), Lock.keyOf(definition, digest, "run")],
            { who: "ops" }
          )
          assert.strictEqual(removal.revoked.length, 1)
          const lost = yield* Effect.flip(Lock.renew(definition, { digest, jid: "r" }))
          assert.strictEqual(lost._tag, "LockLost")
          assert.deepStrictEqual(yield* kinds(definition, digest), [
            "lost r run",
            "revoked r run ops",
            "removed q queue ops",
            "taken r run",
            "taken q queue"
          ])
          // A digest that keeps no log gets none from an admin's removal.
          const off = yield* setup({ lock: "until_executed" })
          yield* Lock.lock(off.definition, { digest: off.digest, jid: "x" })
          yield* redis.remove([Lock.keyOf(off.definition, off.digest, "queue")], { who: "ops" })
          assert.deepStrictEqual(yield* events(off.definition, off.digest), [])
        }))

      it.effect("a revoked run hold: a renewal refuses it; one with keep (its holder runs on) moves its lease, still revoked; a gone hold refuses both", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "while_executing", lockLease: 60_000, lockEvents: true })
          const redis = yield* Redis.RedisService
          const lock = Lock.keyOf(definition, digest, "run")
          const taken = yield* Lock.lock(definition, { digest, jid: "r", phase: "run" })
          const removal = yield* redis.remove([lock], { who: "ops" })
          assert.deepStrictEqual(removal.revoked.map((r) => r.jid), ["r"])
          const renewal = { lock, jid: "r", leaseMs: 120_000, fence: taken.fence, events: true }
          assert.deepStrictEqual(yield* redis.renewAll([renewal]), [false])
          const before = (yield* holders(definition, digest, "run"))[0]!
          assert.deepStrictEqual(yield* redis.renewAll([{ ...renewal, keep: true }]), [true])
          const [after] = yield* holders(definition, digest, "run")
          assert.isAbove(after!.leaseUntil!, before.leaseUntil!, "the lease moved")
          assert.strictEqual(after!.revokedAt, before.revokedAt, "still revoked")
          // The place still blocks another copy; a stale acquisition's keep renews nothing; a keep refusal logs nothing.
          yield* conflictOf(Lock.lock(definition, { digest, jid: "other", phase: "run" }))
          assert.deepStrictEqual(yield* redis.renewAll([{ ...renewal, fence: taken.fence + 1, keep: true }]), [false])
          assert.isTrue(yield* redis.unlock(lock, "r", taken.fence, true))
          assert.deepStrictEqual(yield* redis.renewAll([{ ...renewal, keep: true }]), [false])
          assert.deepStrictEqual(yield* kinds(definition, digest), [
            "released r run",
            "refused other run r",
            "lost r run",
            "revoked r run ops",
            "taken r run"
          ])
        }))

      it.effect("lockEvents: the reaper logs each ended holder it removes as reaped, only where a log exists", () =>
        Effect.gen(function*() {
          const options = { lock: "while_executing", lockLease: 1000, lockLimit: 2 } as const
          const { definition, digest } = yield* setup({ ...options, lockEvents: true })
          const off = yield* setup(options)
          const redis = yield* Redis.RedisService
          const reap = (d: LockOptions.Definition) =>
            redis.reap({ prefix: d.lockPrefix, start: 0, batch: 100, orphansBefore: 0, dryRun: false })
          for (const d of [definition, off.definition]) {
            yield* Lock.lock(d, { digest: `${d.lockPrefix}:0123456789abcdef`, jid: "crashed" })
          }
          yield* store.advance(600)
          for (const d of [definition, off.definition]) {
            yield* Lock.lock(d, { digest: `${d.lockPrefix}:0123456789abcdef`, jid: "alive" })
          }
          // Past the first lease, within the second: the reaper removes the ended holder from a live lock.
          yield* store.advance(500)
          for (const d of [definition, off.definition]) {
            assert.deepStrictEqual((yield* reap(d)).removedHolders.map((h) => h.jid), ["crashed"])
          }
          // Past both: the lock's key is gone with its lease, and the reaper drops its member (no jid to name).
          yield* store.advance(600)
          for (const d of [definition, off.definition]) assert.strictEqual((yield* reap(d)).removedMembers.length, 1)
          assert.deepStrictEqual(yield* kinds(definition, digest), [
            "reaped  run",
            "reaped crashed run",
            "taken alive run",
            "taken crashed run"
          ])
          assert.deepStrictEqual(yield* events(off.definition, off.digest), [])
        }))

      // The log's TTL as Redis holds it (the memory store's is its own map's: the differential compares the entries).
      const logTtl = (definition: LockOptions.Definition, digest: string, fallback: number) =>
        Effect.serviceOption(RedisTest.TestRedis).pipe(
          Effect.flatMap(Option.match({
            onNone: () => Effect.succeed(fallback),
            onSome: ({ cluster, raw }) =>
              cluster !== undefined
                ? Effect.succeed(fallback)
                : Effect.promise(() => raw.pttl(Redis.keysOf(Lock.keyOf(definition, digest, "queue")).events))
          }))
        )

      it.effect("lockEvents: the log keeps its newest 100 events, for 24 hours after the last while a lock of the digest is held, 1 hour once none is", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_executed", lockEvents: true })
          for (let i = 0; i < 51; i++) {
            yield* Lock.lock(definition, { digest, jid: `j${i}` })
            yield* Lock.unlock(definition, { digest, jid: `j${i}` })
          }
          const log = yield* events(definition, digest)
          assert.strictEqual(log.length, Redis.eventLog.keep)
          assert.strictEqual(log[0]!.jid, "j50")
          assert.strictEqual(log[99]!.event, "taken")
          assert.strictEqual(log[99]!.jid, "j1")
          // The last release left the digest with no lock: its log is kept for a look back, not a day.
          const gone = yield* logTtl(definition, digest, Redis.eventLog.goneTtlMs)
          assert.isAbove(gone, Redis.eventLog.goneTtlMs - 60_000)
          assert.isAtMost(gone, Redis.eventLog.goneTtlMs)
          yield* Lock.lock(definition, { digest, jid: "again" })
          const held = yield* logTtl(definition, digest, Redis.eventLog.ttlMs)
          assert.isAbove(held, Redis.eventLog.ttlMs - 60_000)
          assert.isAtMost(held, Redis.eventLog.ttlMs)
          // A release of the run lock while the queue lock is held (by the next job) keeps the day.
          const both = yield* setup({ lock: "until_and_while_executing", lockEvents: true })
          yield* Lock.lock(both.definition, { digest: both.digest, jid: "a" })
          yield* Lock.handoff(both.definition, { digest: both.digest, jid: "a" }, { keepQueueLock: true })
          yield* Lock.lock(both.definition, { digest: both.digest, jid: "b" })
          yield* Lock.unlock(both.definition, { digest: both.digest, jid: "a", phase: "run" })
          assert.strictEqual((yield* events(both.definition, both.digest))[0]!.event, "released")
          assert.isAbove(yield* logTtl(both.definition, both.digest, Redis.eventLog.ttlMs), Redis.eventLog.ttlMs - 60_000)
        }))

      it.effect("lockEvents: refusals in a row of one holder and phase are one entry, counted from the first's time; another holder or phase starts a new one", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_and_while_executing", lockEvents: true, lockTtl: 3_600_000 })
          const before = yield* storeNow
          yield* Lock.lock(definition, { digest, jid: "a" })
          for (let i = 0; i < 250; i++) yield* conflictOf(Lock.lock(definition, { digest, jid: `dup${i}` }))
          const log = yield* events(definition, digest)
          assert.deepStrictEqual(log.map((e) => [e.event, e.jid, e.holder, e.count]), [
            ["refused", "dup249", "a", 250],
            ["taken", "a", undefined, undefined]
          ])
          assert.isAtLeast(log[0]!.firstAt!, before)
          assert.isAtMost(log[0]!.firstAt!, log[0]!.at)
          // A single refusal has no count; the log keeps what came before a burst, whatever its length.
          yield* Lock.handoff(definition, { digest, jid: "a" }, { keepQueueLock: true })
          yield* Lock.lock(definition, { digest, jid: "b" })
          yield* conflictOf(Lock.handoff(definition, { digest, jid: "b" }, { keepQueueLock: true }))
          yield* conflictOf(Lock.handoff(definition, { digest, jid: "b" }, { keepQueueLock: true }))
          yield* conflictOf(Lock.lock(definition, { digest, jid: "c" }))
          assert.deepStrictEqual(yield* kinds(definition, digest), [
            "refused c queue b",
            "refused b run a",
            "taken b queue",
            "released a queue",
            "taken a run",
            "refused dup249 queue a",
            "taken a queue"
          ])
          assert.deepStrictEqual((yield* events(definition, digest)).map((e) => e.count), [undefined, 2, undefined, undefined, undefined, 250, undefined])
        }))

      it.effect("lockEvents: a jid, holder or who over 128 bytes is kept cut at a character's start, ending with an ellipsis", () =>
        Effect.gen(function*() {
          const { definition, digest } = yield* setup({ lock: "until_executed", lockEvents: true })
          const redis = yield* Redis.RedisService
          // 20 kB each, with a 2-byte character across the cut.
          const holder = `h${"é".repeat(10_000)}`
          const jid = `j${"x".repeat(20_000)}`
          yield* Lock.lock(definition, { digest, jid: holder })
          yield* conflictOf(Lock.lock(definition, { digest, jid }))
          yield* redis.remove([Lock.keyOf(definition, digest, "queue")], { who: "w".repeat(20_000) })
          const log = yield* events(definition, digest)
          assert.deepStrictEqual(log.map((e) => e.event), ["removed", "refused", "taken"])
          assert.strictEqual(log[1]!.jid, `j${"x".repeat(127)}…`)
          assert.strictEqual(log[1]!.holder, `h${"é".repeat(63)}…`)
          assert.strictEqual(log[2]!.jid, `h${"é".repeat(63)}…`)
          assert.strictEqual(log[0]!.who, `${"w".repeat(128)}…`)
          for (const e of log) assert.isAtMost(Buffer.byteLength(JSON.stringify(e)), 500)
        }))
    })
  })
}
