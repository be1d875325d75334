/**
 * One meaning of "orphan" (issue 47, observation 6): a lock with no expiry (no lockTtl) whose job is gone, which
 * nothing but a reaper pass that asks the queue ends. A lock with a lockTtl whose job is gone is no orphan: it ends at
 * its expiry (until_expired keeps its lock past its job on purpose), and the reaper, the admin UI and the CLI all say
 * and do so.
 */
import * as Effect from "effect/Effect"
import { request as httpRequest } from "node:http"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Reaper from "../src/Reaper.js"
import * as Web from "../src/Web.js"
import { cli } from "./support/cli.js"
import * as RedisTest from "./support/redis.js"
import * as Harness from "./support/web.js"

let harness: Harness.Harness
beforeAll(async () => {
  harness = await Harness.start()
})
afterAll(() => harness?.close())

const get = (url: string) =>
  new Promise<string>((resolve, reject) => {
    httpRequest(url, (res) => {
      let body = ""
      res.on("data", (chunk: Buffer) => (body += chunk.toString()))
      res.on("end", () => resolve(body))
    }).on("error", reject).end()
  })

// A queue for which every job is gone.
const everyJobGone: JobQueue["Service"] = {
  push: () => Effect.void,
  schedule: () => Effect.void,
  remove: () => Effect.succeed(false),
  kill: () => Effect.void,
  exists: (jobs) => Effect.succeed(jobs.map(() => "gone" as const)),
  describe: (jobs) => Effect.succeed(jobs.map((job) => ({ ...job, state: "gone" as const })))
}

describe("an orphan is a lock with no expiry whose job is gone (issue 47, observation 6)", () => {
  it("the reaper frees the no-expiry lock and leaves the until_expired one; the lock page calls only the first an orphan; the CLI says the same", async () => {
    const prefix = RedisTest.uniquePrefix("orphan")
    const endless = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
    const expiring = LockOptions.unsafeMake({ lock: "until_expired", lockPrefix: prefix, lockTtl: 600_000 })
    await harness.run(Lock.lock(endless, { digest: `${prefix}:endless`, jid: "e-1", info: { queue: "jobs" } }))
    await harness.run(Lock.lock(expiring, { digest: `${prefix}:expiring`, jid: "x-1", info: { queue: "jobs" } }))

    const served = await harness.run(Web.serve({ prefix }).pipe(Effect.provideService(JobQueue, everyJobGone)))
    const page = (name: string) => get(`${served.url}/lock?digest=${encodeURIComponent(`${prefix}:${name}`)}`)
    const endlessPage = await page("endless")
    assert.include(endlessPage, "Its lock has no expiry, so it is an orphan")
    const expiringPage = await page("expiring")
    assert.include(expiringPage, "Its lock is no orphan: it expires at")
    assert.notInclude(expiringPage, "is an orphan", "a lock with a lockTtl is called an orphan the reaper then leaves")

    // A pass that asks the queue (no grace: every lock is old enough) frees exactly the orphan.
    const pass = await harness.run(
      Effect.flatMap(Reaper.make({ prefix, grace: "1 millis" }), (runner) => runner.pass()).pipe(
        Effect.provideService(JobQueue, everyJobGone)
      )
    )
    assert.strictEqual(pass.orphans, 1)
    const left = await harness.run(Effect.flatMap(Effect.succeed(harness.store), (store) =>
      Effect.all([store.holders({ prefix, name: `${prefix}:endless` }), store.holders({ prefix, name: `${prefix}:expiring` })])))
    assert.deepStrictEqual(left.map((holders) => holders.length), [0, 1])

    // The command's glossary says which locks are orphans.
    const help = await Effect.runPromise(cli("--help"))
    assert.match(help.stdout.replace(/\s+/g, " "), /orphan: a lock with no expiry \(no lockTtl\) whose job is gone/)
    assert.include(help.stdout.replace(/\s+/g, " "), "A lock with a lockTtl ends at its expiry and is never an orphan")
  })
})
