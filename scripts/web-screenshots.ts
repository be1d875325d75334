// The manual's pictures of the admin UI (docs/operations.md), one of every page: the locks page (and at a phone's
// 390 px), one lock's page with its recent events, the confirmations of a delete, an unlock, a bulk delete and a
// reaper pass, a delete's result, the reaper and metrics pages and a 404, over a few locks of each kind on a
// private redis-server, and a lock's page with its BullMQ job (a real queue on the same server), taken in Debian's
// Chromium. The metrics page's past hour is written as History.flush writes a minute (the tally script), from a
// made-up day's shape: a picture cannot wait an hour.
//
//   npm run docs:screenshots        (CHROMIUM_PATH when Chromium is not /usr/bin/chromium)
import { Queue } from "bullmq"
import * as Effect from "effect/Effect"
import { chromium, type Page } from "playwright-core"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as History from "../src/History.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/testing/RedisServer.js"
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
  // A digest as the gem's rule makes it: a hash of the worker, queue and arguments.
  yield* Lock.lock(reports, {
    digest: `${prefix}:6f1c2b9e0d4a8f37c5e1b2a09d8c7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d`,
    jid: "report-all-2211",
    info: { worker: "RebuildReport", queue: "reports", args: [{ account: "all", since: "2026-12-01" }] }
  })
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
  // The sync job keeps its activity log (lockEvents): its lock page shows what happened to it.
  const sync = options("until_and_while_executing", { lockTtl: 3_600_000, lockLease: 30_000, lockEvents: true })
  yield* Lock.lock(sync, {
    digest: `${prefix}:sync-crm`,
    jid: "sync-crm-86",
    info: { worker: "SyncCrm", queue: "sync", args: ["crm"] }
  })
  yield* Lock.unlock(sync, { digest: `${prefix}:sync-crm`, jid: "sync-crm-86" })
  yield* Lock.lock(sync, {
    digest: `${prefix}:sync-crm`,
    jid: "sync-crm-88",
    info: { worker: "SyncCrm", queue: "sync", args: ["crm"] }
  })
  // More triggers while one waits: refused, logged with the holder, the ones in a row as one counted entry.
  for (const n of [89, 90, 91, 92]) {
    yield* Effect.ignore(Lock.lock(sync, {
      digest: `${prefix}:sync-crm`,
      jid: `sync-crm-${n}`,
      info: { worker: "SyncCrm", queue: "sync", args: ["crm"] }
    }))
  }
  yield* Lock.lock(sync, {
    digest: `${prefix}:sync-crm`,
    jid: "sync-crm-87",
    phase: "run",
    info: { worker: "SyncCrm", queue: "sync", args: ["crm"] }
  })
})

// An hour of counts and hold times, minute by minute, as the processes' flushes would have left them.
const history = Effect.gen(function*() {
  const store = yield* Redis.RedisService
  const now = Date.now()
  const current = now - (now % 60_000)
  const shape = [0, 1, 3, 6, 9, 5, 3, 1, 1, 0, 0, 0]
  for (let i = 59; i >= 1; i--) {
    const wave = Math.round(20 + 15 * Math.sin(i / 6) + (i % 7))
    const amounts: Array<readonly [string, number]> = [
      ["until_executed|acquired", wave],
      ["until_executed|released", Math.max(0, wave - 2)],
      ["until_executed|conflicts", Math.round(wave / 4) + (i % 3)],
      ["while_executing|acquired", Math.round(wave / 2)],
      ["while_executing|released", Math.round(wave / 2)],
      ["while_executing|conflicts", i % 11 === 0 ? 9 : i % 2],
      ["*|reaped", i % 15 === 0 ? 6 : 0],
      ["while_executing|lost", i === 23 ? 1 : 0],
      ...History.holdBounds.map((bound, b) => [`~hold|${bound}`, Math.round((wave * shape[b]!) / 6)] as const)
    ]
    yield* store.tally(`${prefix}:metrics:${current - i * 60_000}`, amounts.filter(([, n]) => n > 0), 62 * 60_000)
  }
})

// Opens a path and saves the page as a file.
type At = (path: string, file: string) => Promise<void>

// A browser on `base`, and the steps that take its pictures (`at`: open a path, save the page as a file).
const shoot = (base: string, steps: (page: Page, at: At) => Promise<void>) =>
  Effect.promise(async () => {
    const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium" })
    try {
      const page = await browser.newPage({ viewport: { width: 1200, height: 640 } })
      const at: At = async (path, file) => {
        await page.goto(`${base}${path}`)
        await page.screenshot({ path: file, fullPage: true })
        process.stdout.write(`${file}\n`)
      }
      await steps(page, at)
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
      yield* history
      const served = yield* Web.serve({ prefix, port: 0 })
      yield* shoot(served.url, async (page, at) => {
        await at("/", "docs/web-locks.png")
        await at(`/lock?digest=${encodeURIComponent(`${prefix}:sync-crm`)}`, "docs/web-lock.png")
        await at(`/lock/delete/confirm?digest=${encodeURIComponent(`${prefix}:sync-crm`)}`, "docs/web-confirm-delete.png")
        await at(
          `/lock/unlock/confirm?digest=${encodeURIComponent(`${prefix}:sync-crm`)}&jid=sync-crm-87`,
          "docs/web-confirm-unlock.png"
        )
        await at("/locks/bulk/confirm", "docs/web-bulk-confirm.png")
        await at("/metrics?refresh=30", "docs/web-metrics.png")
        // The reaper page after a dry run (its report, and the pass kept), then the confirmation it links to.
        await page.goto(`${served.url}/reaper`)
        await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Dry run" }).click()])
        await page.screenshot({ path: "docs/web-reaper.png", fullPage: true })
        process.stdout.write("docs/web-reaper.png\n")
        await Promise.all([page.waitForNavigation(), page.getByRole("link", { name: "Reap now…" }).click()])
        await page.screenshot({ path: "docs/web-reaper-confirm.png", fullPage: true })
        process.stdout.write("docs/web-reaper-confirm.png\n")
        await at("/no-such-page", "docs/web-not-found.png")
        // A change's result: the delete confirmed, then the page the 303 leads to (last: the lock is gone after it).
        await page.goto(`${served.url}/lock/delete/confirm?digest=${encodeURIComponent(`${prefix}:digest-team-1`)}`)
        await Promise.all([page.waitForNavigation(), page.locator("form button[type=submit], form input[type=submit]").first().click()])
        await page.screenshot({ path: "docs/web-delete-result.png", fullPage: true })
        process.stdout.write("docs/web-delete-result.png\n")
        await page.setViewportSize({ width: 390, height: 844 })
        await at("/", "docs/web-locks-narrow.png")
      })
      // A lock whose job waits in a real BullMQ queue, delayed, on a UI served with that queue.
      const queue = yield* Effect.acquireRelease(
        Effect.sync(() => new Queue("invoices", { connection: { url: server.url } })),
        (queue) => Effect.promise(() => queue.close())
      )
      const invoice = { customer: 7, month: "2026-11", lines: [{ sku: "plan-pro", cents: 4900 }, { sku: "seats", cents: 1200 }] }
      yield* Effect.promise(() => queue.add("SendInvoice", invoice, { jobId: "invoice-7-2026-11", delay: 900_000 }))
      yield* Lock.lock(options("until_executed", { lockTtl: 86_400_000 }), {
        digest: `${prefix}:invoice-7`,
        jid: "invoice-7-2026-11",
        info: { worker: "SendInvoice", queue: "invoices", args: [invoice] }
      })
      const withQueue = yield* Web.serve({ prefix, port: 0 }).pipe(Effect.provide(BullMQ.layer(queue)))
      yield* shoot(withQueue.url, (_, at) => at(`/lock?digest=${encodeURIComponent(`${prefix}:invoice-7`)}`, "docs/web-lock-job.png"))
    }),
    Redis.RedisService,
    store
  )
})

Effect.runPromise(Effect.scoped(program)).catch((error) => {
  process.exitCode = 1
  process.stderr.write(`${String(error)}\n`)
})
