/**
 * The admin UI in headless Chromium (Debian's, driven by playwright-core), served three ways: `Web.serve`, mounted
 * under /admin/locks of an Effect `HttpRouter`, and mounted under /admin/locks of the Express example. The same walk
 * runs on each: the seeded locks listed, each filter narrowing them, markup in jids and arguments shown as text with
 * no dialog, unlock and delete changing Redis, a dry run then a reap removing the stale members, and the metrics
 * chart moving after a burst. On `serve`: paging walks 100,000 locks to the end, and browsing every page leaves
 * Redis byte for byte as it was. Screenshots of each page go to test-output/web/.
 */
import * as Effect from "effect/Effect"
import { mkdirSync } from "node:fs"
import { chromium, type Browser, type Page } from "playwright-core"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as History from "../src/History.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Web from "../src/Web.js"
import * as RedisTest from "./support/redis.js"
import * as Harness from "./support/web.js"

const shots = new URL("../test-output/web/", import.meta.url)
mkdirSync(shots, { recursive: true })

let harness: Harness.Harness
let browser: Browser

beforeAll(async () => {
  harness = await Harness.start()
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]
  })
})

afterAll(async () => {
  await browser?.close()
  await harness?.close()
})

/** A page that records every dialog it is asked to open (none may open). */
const open = async (headers: Record<string, string> = {}) => {
  const context = await browser.newContext({ extraHTTPHeaders: headers, viewport: { width: 1400, height: 900 } })
  const page = await context.newPage()
  const dialogs: Array<string> = []
  page.on("dialog", (dialog) => {
    dialogs.push(dialog.message())
    void dialog.dismiss()
  })
  return { page, dialogs, close: () => context.close() }
}

const rowNames = (page: Page) => page.locator("table.locks tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-name")!))

const filter = async (page: Page, base: string, set: (page: Page) => Promise<void>) => {
  await page.goto(`${base}/locks`)
  await set(page)
  await Promise.all([page.waitForURL(/\/locks\?/), page.getByRole("button", { name: "Filter" }).click()])
  return (await rowNames(page)).sort()
}

const holdersOf = (prefix: string, name: string) =>
  harness.run(Effect.map(harness.store.fetch({ prefix, name }), (fetched) => fetched.holders.map((h) => h.jid)))

const indexOf = (prefix: string) =>
  harness.run(Effect.gen(function*() {
    const names: Array<string> = []
    let cursor = "0"
    do {
      const page = yield* harness.store.scan(prefix, cursor, "*", 1000)
      names.push(...page.members.map((m) => m.name))
      cursor = page.cursor
    } while (cursor !== "0")
    return names.sort()
  }))

/** The walk every mount passes. */
const walk = async (base: string, prefix: string, label: string, headers: Record<string, string> = {}) => {
  const { page, dialogs, close } = await open(headers)
  const all = [
    ...[0, 1, 2, 3].map((i) => `${prefix}:mail${i}`),
    ...[0, 1, 2].map((i) => `${prefix}:old${i}`),
    ...[0, 1].map((i) => `${prefix}:run${i}:RUN`),
    ...[0, 1, 2].map((i) => `${prefix}:bill${i}`)
  ].sort()
  await page.goto(`${base}/locks`)
  assert.deepStrictEqual((await rowNames(page)).sort(), all)
  await page.screenshot({ path: new URL(`${label}-locks.png`, shots).pathname, fullPage: true })

  // Each filter narrows the list to what it names.
  assert.deepStrictEqual(
    await filter(page, base, (p) => p.selectOption("select[name=type]", "while_executing").then(() => {})),
    [`${prefix}:run0:RUN`, `${prefix}:run1:RUN`]
  )
  assert.deepStrictEqual(await filter(page, base, (p) => p.fill("input[name=queue]", "billing")), [0, 1, 2].map((i) => `${prefix}:bill${i}`))
  assert.deepStrictEqual(await filter(page, base, (p) => p.fill("input[name=worker]", "Mailer")), [0, 1, 2, 3].map((i) => `${prefix}:mail${i}`))
  assert.deepStrictEqual(await filter(page, base, (p) => p.check("input[name=stale]")), [0, 1, 2].map((i) => `${prefix}:old${i}`))
  assert.deepStrictEqual(await filter(page, base, (p) => p.fill("input[name=age]", "600")), [])
  assert.deepStrictEqual(await filter(page, base, (p) => p.fill("input[name=pattern]", `${prefix}:bill*`)), [0, 1, 2].map((i) => `${prefix}:bill${i}`))

  // Markup is text: the jid cell reads as the string itself, and no dialog opened.
  for (const [i, jid] of [[1, Harness.markup[0]], [2, Harness.markup[1]]] as const) {
    await page.goto(`${base}/lock?digest=${encodeURIComponent(`${prefix}:mail${i}`)}`)
    assert.strictEqual(await page.locator("td.jid").first().textContent(), jid)
    assert.include(await page.locator("pre.info").first().textContent(), Harness.markup[0])
    assert.strictEqual(await page.locator("img").count(), 0)
    assert.strictEqual(await page.locator("main script").count(), 0)
  }
  await page.screenshot({ path: new URL(`${label}-lock.png`, shots).pathname, fullPage: true })

  // Every change the browser sends, to tell that a reload or the back button sends none.
  const posts: Array<string> = []
  page.on("request", (request) => {
    if (request.method() === "POST") posts.push(request.url())
  })

  // Unlock one jid: the holder leaves Redis, and the browser lands on the lock page (303), where a reload posts nothing.
  assert.deepStrictEqual(await holdersOf(prefix, `${prefix}:mail1`), [Harness.markup[0]])
  await page.goto(`${base}/lock?digest=${encodeURIComponent(`${prefix}:mail1`)}`)
  await Promise.all([page.waitForURL(/\/lock\?digest=.*&result=/), page.locator("button.unlock").first().click()])
  await page.locator(".message").waitFor()
  assert.include(await page.locator(".message").textContent(), "removed 1 holder")
  assert.deepStrictEqual(await holdersOf(prefix, `${prefix}:mail1`), [])
  assert.strictEqual(posts.length, 1)
  const mail = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
  await harness.run(Lock.lock(mail, { digest: `${prefix}:mail1`, jid: "came-back" }))
  await page.reload()
  assert.include(await page.locator(".message").textContent(), "removed 1 holder")
  assert.strictEqual(posts.length, 1, "a reload posted")
  assert.deepStrictEqual(await holdersOf(prefix, `${prefix}:mail1`), ["came-back"])

  // Delete a digest: a page of its own asks first, naming the holders; then its lock leaves Redis. A running holder
  // is revoked, not removed. Back and reload after it post nothing.
  await page.goto(`${base}/lock?digest=${encodeURIComponent(`${prefix}:bill0`)}`)
  await Promise.all([page.waitForURL(/\/lock\/delete\/confirm\?/), page.locator("a.delete").click()])
  assert.deepStrictEqual(await page.locator("table.fates tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-jid"))), ["b0"])
  assert.deepStrictEqual(await holdersOf(prefix, `${prefix}:bill0`), ["b0"])
  await Promise.all([page.waitForURL(/\/lock\?digest=.*&result=/), page.locator("button.confirm").click()])
  await page.locator(".message").waitFor()
  assert.deepStrictEqual(await holdersOf(prefix, `${prefix}:bill0`), [])
  const billing = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix })
  await harness.run(Lock.lock(billing, { digest: `${prefix}:bill0`, jid: "later" }))
  const sent = posts.length
  await page.reload()
  await page.goBack()
  await page.goForward()
  assert.strictEqual(posts.length, sent, "back or reload posted")
  assert.deepStrictEqual(await holdersOf(prefix, `${prefix}:bill0`), ["later"])
  await page.goto(`${base}/lock?digest=${encodeURIComponent(`${prefix}:run0`)}`)
  await Promise.all([page.waitForURL(/\/lock\/delete\/confirm\?/), page.locator("a.delete").click()])
  assert.strictEqual(await page.locator("table.fates tr[data-jid=r0]").getAttribute("data-fate"), "revoked")
  await page.screenshot({ path: new URL(`${label}-confirm.png`, shots).pathname, fullPage: true })
  await Promise.all([page.waitForURL(/\/lock\?digest=.*&result=/), page.locator("button.confirm").click()])
  await page.locator(".message").waitFor()
  assert.include(await page.locator(".message").textContent(), "revoked 1 running holder")
  assert.deepStrictEqual(await holdersOf(prefix, `${prefix}:run0:RUN`), ["r0"])

  // The reaper: a dry run reports the three stale members and removes nothing; then for real, once confirmed.
  await page.goto(`${base}/reaper`)
  await Promise.all([page.waitForURL(/\/reaper\?result=/), page.getByRole("button", { name: "Dry run" }).click()])
  assert.strictEqual(await page.locator(".report .members").textContent(), "3")
  assert.includeMembers(await indexOf(prefix), [0, 1, 2].map((i) => `${prefix}:old${i}`))
  await page.screenshot({ path: new URL(`${label}-reaper.png`, shots).pathname, fullPage: true })
  await Promise.all([page.waitForURL(/\/reaper\/confirm/), page.getByRole("link", { name: "Reap now…" }).click()])
  assert.strictEqual(await page.locator(".report .members").textContent(), "3")
  assert.includeMembers(await indexOf(prefix), [0, 1, 2].map((i) => `${prefix}:old${i}`))
  await Promise.all([page.waitForURL(/\/reaper\?result=/), page.getByRole("button", { name: "Reap now" }).click()])
  assert.include(await page.locator(".report").textContent(), "Reaped")
  assert.strictEqual(await page.locator(".report .members").textContent(), "3")
  const left = await indexOf(prefix)
  for (let i = 0; i < 3; i++) assert.notInclude(left, `${prefix}:old${i}`)
  assert.isAtLeast(await page.locator("table.passes tbody tr").count(), 2)

  // The metrics chart moves after a burst of jobs, once the process has flushed its counts.
  await harness.run(History.flush(prefix))
  await page.goto(`${base}/metrics`)
  const total = async () => Number(await page.locator("figure[data-event=acquired]").getAttribute("data-total"))
  const before = await total()
  const burst = LockOptions.unsafeMake({ lock: "until_expired", lockPrefix: prefix, lockTtl: 600_000 })
  await harness.run(Effect.forEach(Array.from({ length: 25 }, (_, i) => i), (i) => Lock.lock(burst, { digest: `${prefix}:burst${i}`, jid: `x${i}` })))
  await harness.run(History.flush(prefix))
  await page.reload()
  assert.strictEqual(await total(), before + 25)
  assert.isAtLeast(await page.locator("figure[data-event=acquired] polyline").count(), 1)
  await page.screenshot({ path: new URL(`${label}-metrics.png`, shots).pathname, fullPage: true })

  assert.deepStrictEqual(dialogs, [])
  await close()
}

describe("the admin UI in Chromium", () => {
  it("served by Web.serve: the walk; reads leave Redis as it was; paging walks 100,000 locks to the end", async () => {
    const prefix = RedisTest.uniquePrefix("web")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))

    // Every page and every read of the API, then the same dump: GET never writes.
    const dump = () => harness.run(Effect.promise(async () => {
      const { Redis: IORedis } = await import("ioredis")
      const raw = new IORedis(harness.url)
      const keys = (await raw.keys(`${prefix}*`)).sort()
      const dumps = await Promise.all(keys.map((k) => raw.dumpBuffer(k)))
      raw.disconnect()
      return keys.map((k, i) => `${k}=${dumps[i]?.toString("hex")}`).join("\n")
    }))
    const before = await dump()
    const { page, dialogs, close } = await open()
    for (const path of [
      "/", "/locks", `/locks?type=until_executed&stale=1&age=0&count=5`, `/lock?digest=${encodeURIComponent(`${prefix}:mail1`)}`,
      `/lock?digest=${encodeURIComponent(`${prefix}:run0:RUN`)}`, "/reaper", "/metrics", "/api/locks", `/api/lock?digest=${prefix}:mail0`,
      "/api/reaper", "/api/metrics", "/api/session", "/api/openapi.json", "/assets/style.css",
      `/lock/delete/confirm?digest=${encodeURIComponent(`${prefix}:run0`)}`,
      `/lock/unlock/confirm?digest=${encodeURIComponent(`${prefix}:run0`)}&jid=r0`, "/reaper/confirm"
    ]) {
      const response = await page.goto(`${served.url}${path}`)
      assert.strictEqual(response?.status(), 200, path)
    }
    await close()
    assert.deepStrictEqual(dialogs, [])
    assert.strictEqual(await dump(), before, "browsing wrote to Redis")

    await walk(served.url, prefix, "serve")

    // 100,000 locks under their own prefix, walked to the end through the next links, 1,000 a page.
    const many = RedisTest.uniquePrefix("web-many")
    await harness.run(Harness.seedMany(many, 100_000))
    const big = await harness.run(Web.serve({ prefix: many, pageSize: 1000 }))
    const walker = await open()
    await walker.page.goto(`${big.url}/locks`)
    const seen = new Set<string>()
    let pages = 0
    for (;;) {
      for (const name of await rowNames(walker.page)) seen.add(name)
      pages++
      const next = walker.page.locator("a[rel=next]").first()
      if ((await next.count()) === 0) break
      const href = new URL((await next.getAttribute("href"))!, walker.page.url()).toString()
      await Promise.all([walker.page.waitForURL(href), next.click()])
    }
    assert.strictEqual(await walker.page.locator(".end").first().textContent(), "end of the index")
    assert.strictEqual(seen.size, 100_000)
    assert.isAtLeast(pages, 50)
    await walker.close()
  }, 600_000) // a fixed amount of work (100,000 locks paged in a browser): only a hang may end it

  it("mounted under /admin/locks of an Effect HttpRouter: the same walk", async () => {
    const prefix = RedisTest.uniquePrefix("web-router")
    await harness.run(Harness.seed(prefix))
    const base = await harness.run(Harness.mountedInRouter({ prefix }))
    await walk(base, prefix, "router")
  })

  it("mounted under /admin/locks of the Express example: the same walk, changes only with the header its hook asks", async () => {
    const prefix = RedisTest.uniquePrefix("web-express")
    await harness.run(Harness.seed(prefix))
    const example = await harness.run(Harness.expressExample(harness.url, prefix))
    // Without the header the hook answers read-only: no form, and a POST is refused.
    const reader = await open()
    await reader.page.goto(`${example.url}/lock?digest=${encodeURIComponent(`${prefix}:mail0`)}`)
    assert.strictEqual(await reader.page.locator("button.unlock").count(), 0)
    assert.strictEqual(await reader.page.locator(".readonly").textContent(), "read-only")
    await reader.close()
    await walk(example.url, prefix, "express", { "x-admin": "yes" })
  })
})
