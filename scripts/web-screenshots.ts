// The manual's pictures of the admin UI (docs/operations.md): the locks page, one lock's page and a delete's
// confirmation, over a few locks of each kind on a private redis-server, taken in Debian's Chromium.
//
//   npm run docs:screenshots        (CHROMIUM_PATH when Chromium is not /usr/bin/chromium)
import * as Effect from "effect/Effect"
import { chromium } from "playwright-core"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/RedisServer.js"
import * as Web from "../src/Web.js"

const prefix = "uniquejobs"
const options = (lock: LockOptions.Options["lock"], more: Partial<LockOptions.Options> = {}) =>
  LockOptions.unsafeMake({ lock, lockPrefix: prefix, lockInfo: true, ...more })

// What an app's locks look like at one moment: reports waiting, payments running, digests that expire, a sync job
// both queued and running.
const seed = Effect.gen(function*() {
  const reports = options("until_executed", { lockTtl: 3_600_000 })
  for (const account of [42, 97, 1203]) {
    yield* Lock.lock(reports, {
      digest: `${prefix}:report-${account}`,
      jid: `report-${account}-${1700 + account}`,
      info: { worker: "RebuildReport", queue: "reports", args: [{ account }] }
    })
  }
  const payments = options("while_executing", { lockLease: 30_000 })
  for (const customer of [7, 19]) {
    yield* Lock.lock(payments, {
      digest: `${prefix}:charge-${customer}`,
      jid: `charge-${customer}-5521`,
      phase: "run",
      info: { worker: "ChargeCustomer", queue: "payments", args: [{ customer, cents: 1299 }] }
    })
  }
  const hourly = options("until_expired", { lockTtl: 3_600_000 })
  yield* Lock.lock(hourly, {
    digest: `${prefix}:digest-team-1`,
    jid: "hourly-team-1",
    info: { worker: "HourlyDigest", queue: "mail", args: ["team-1"] }
  })
  const sync = options("until_and_while_executing", { lockTtl: 3_600_000, lockLease: 30_000 })
  yield* Lock.lock(sync, {
    digest: `${prefix}:sync-crm`,
    jid: "sync-crm-88",
    info: { worker: "SyncCrm", queue: "sync", args: ["crm"] }
  })
  yield* Lock.lock(sync, {
    digest: `${prefix}:sync-crm`,
    jid: "sync-crm-87",
    phase: "run",
    info: { worker: "SyncCrm", queue: "sync", args: ["crm"] }
  })
})

const shoot = (base: string) =>
  Effect.promise(async () => {
    const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium" })
    try {
      const page = await browser.newPage({ viewport: { width: 1200, height: 640 } })
      const at = async (path: string, file: string) => {
        await page.goto(`${base}${path}`)
        await page.screenshot({ path: file, fullPage: true })
        process.stdout.write(`${file}\n`)
      }
      await at("/", "docs/web-locks.png")
      await at(`/lock?digest=${encodeURIComponent(`${prefix}:sync-crm`)}`, "docs/web-lock.png")
      await at(`/lock/delete/confirm?digest=${encodeURIComponent(`${prefix}:sync-crm`)}`, "docs/web-confirm-delete.png")
    } finally {
      await browser.close()
    }
  })

const program = Effect.gen(function*() {
  const server = yield* RedisServer.start
  const store = yield* Redis.make({ url: server.url })
  yield* Effect.provideService(
    Effect.gen(function*() {
      yield* seed
      const served = yield* Web.serve({ prefix, port: 0 })
      yield* shoot(served.url)
    }),
    Redis.RedisService,
    store
  )
})

Effect.runPromise(Effect.scoped(program)).catch((error) => {
  process.exitCode = 1
  process.stderr.write(`${String(error)}\n`)
})
