/**
 * The admin UI in headless Chromium (Debian's, driven by playwright-core), served three ways: `Web.serve`, mounted
 * under /admin/locks of an Effect `HttpRouter`, and mounted under /admin/locks of the Express example. The same walk
 * runs on each: the seeded locks listed, each filter narrowing them, markup in jids and arguments shown as text with
 * no dialog, unlock and delete changing Redis, a dry run then a reap removing the stale members, and the metrics
 * chart moving after a burst. On `serve`: paging walks 100,000 locks to the end (over HTTP; its first pages and its
 * last in Chromium), and browsing every page leaves Redis byte for byte as it was; a bulk delete goes from a filtered
 * list to its preview, its confirmation and its result.
 * Screenshots of each page go to test-output/web/.
 */
import * as Effect from "effect/Effect"
import { mkdirSync } from "node:fs"
import { chromium, type Browser, type Page } from "playwright-core"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { Queue } from "bullmq"
import * as BullMQ from "../src/adapters/BullMQ.js"
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

/** What the issue 38 checks read of a page in the browser (the tests are type-checked without the DOM's types). */
interface Dom {
  readonly document: {
    readonly documentElement: { readonly scrollWidth: number }
    readonly querySelector: (selector: string) => { readonly clientWidth: number; readonly scrollWidth: number }
    readonly createRange: () => {
      setStart: (node: unknown, offset: number) => void
      setEnd: (node: unknown, offset: number) => void
      getClientRects: () => { readonly length: number }
      selectNodeContents: (node: unknown) => void
      getBoundingClientRect: () => { readonly left: number; readonly right: number }
    }
  }
  readonly getComputedStyle: (element: unknown) => { readonly lineHeight: string; readonly wordBreak: string; readonly overflowWrap: string }
}

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

    // 100,000 locks under their own prefix, walked to the end through the next links, about 1,000 a page (ZSCAN's COUNT
    // is a hint): every page over HTTP (the HTML Chromium gets; laying out a 1,000-row page costs it about a second,
    // most of this file's time when it walked all 100), then the first pages through their links in Chromium, and
    // the last page there. A cursor's page is not compared with the walk's: ZSCAN's pages shift while the index's
    // table is rehashed, and reads step that rehash on.
    const many = RedisTest.uniquePrefix("web-many")
    await harness.run(Harness.seedMany(many, 100_000))
    const big = await harness.run(Web.serve({ prefix: many, pageSize: 1000 }))
    const seen = new Set<string>()
    let last = `${big.url}/locks`
    let pages = 0
    for (let url: string | undefined = last; url !== undefined; pages++) {
      last = url
      const html = await (await fetch(url)).text()
      for (const row of html.matchAll(/<tr data-name="([^"]*)"/g)) seen.add(row[1]!)
      const next = /<a rel="next" href="([^"]*)"/.exec(html)
      url = next === null ? undefined : new URL(next[1]!.replaceAll("&amp;", "&"), url).toString()
    }
    assert.strictEqual(seen.size, 100_000)
    assert.isAtLeast(pages, 50)
    const walker = await open()
    // The rows shown are the walk's; only the last page may have none (the index's last buckets may hold none).
    const shown = async (orNone = false) => {
      const names = await rowNames(walker.page)
      if (!orNone) assert.isAbove(names.length, 0, walker.page.url())
      for (const name of names) assert.isTrue(seen.has(name), name)
    }
    const followNext = async () => {
      const next = walker.page.locator("a[rel=next]").first()
      const href = new URL((await next.getAttribute("href"))!, walker.page.url()).toString()
      await Promise.all([walker.page.waitForURL(href), next.click()])
    }
    await walker.page.goto(`${big.url}/locks`)
    for (let i = 0; i < 3; i++) {
      await shown()
      await followNext()
    }
    await shown()
    // The walk's last page; should the rehash have moved its cursor on, a page or two more reach the end.
    await walker.page.goto(last)
    for (let more = 0; (await walker.page.locator("a[rel=next]").count()) > 0; more++) {
      assert.isBelow(more, 5, "the end is a few pages from the walk's last at most")
      await followNext()
    }
    assert.strictEqual(await walker.page.locator(".end").first().textContent(), "end of the index")
    await shown(true)
    await walker.close()
  }, 600_000) // a fixed amount of work (100,000 locks paged): only a hang may end it

  it("a bulk delete: filter, preview naming each lock and its holders' fate, confirm, result; a reload or back posts nothing; read-only offers none", async () => {
    const prefix = RedisTest.uniquePrefix("web-bulk")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const { page, dialogs, close } = await open()
    const posts: Array<string> = []
    page.on("request", (request) => {
      if (request.method() === "POST") posts.push(request.url())
    })
    const fates = () =>
      page.locator("table.fates tbody tr").evaluateAll((rows) =>
        rows.map((r) => `${r.getAttribute("data-digest")} ${r.getAttribute("data-jid")} ${r.getAttribute("data-fate")}`).sort()
      )
    const bills = [0, 1, 2].map((i) => `${prefix}:bill${i}`)
    assert.deepStrictEqual(await filter(page, served.url, (p) => p.fill("input[name=queue]", "billing")), bills)
    assert.strictEqual(await page.locator("a.bulk-delete").textContent(), "Delete the 3 digest(s) this page shows…")
    await Promise.all([page.waitForURL(/\/locks\/bulk\/confirm\?.*queue=billing/), page.locator("a.bulk-delete").click()])
    assert.deepStrictEqual(await fates(), bills.map((digest, i) => `${digest} b${i} removed`))
    assert.include(await page.locator(".bulk-summary").textContent(), "3 holder(s) removed at once, 0 running holder(s) revoked")
    await page.screenshot({ path: new URL("serve-bulk-confirm.png", shots).pathname, fullPage: true })
    assert.strictEqual(posts.length, 0)
    // A lock that starts to match after the preview: the confirmation does not reach it.
    const billing = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix, lockInfo: true })
    await harness.run(Lock.lock(billing, { digest: `${prefix}:bill9`, jid: "b9", info: { worker: "Biller", queue: "billing", args: [] } }))
    await Promise.all([page.waitForURL(/\/locks\?.*queue=billing.*&result=/), page.locator("button.confirm").click()])
    assert.include(await page.locator(".message").textContent(), "Deleted 3 digest(s)")
    assert.include(await page.locator(".message").textContent(), "removed 3 holder(s), 3 lock(s) gone")
    assert.deepStrictEqual(await rowNames(page), [`${prefix}:bill9`])
    for (const name of bills) assert.deepStrictEqual(await holdersOf(prefix, name), [])
    assert.deepStrictEqual(await holdersOf(prefix, `${prefix}:bill9`), ["b9"])
    await page.screenshot({ path: new URL("serve-bulk-result.png", shots).pathname, fullPage: true })
    // Reload, back and forward: nothing posted again, b9 kept.
    assert.strictEqual(posts.length, 1)
    await page.reload()
    assert.include(await page.locator(".message").textContent(), "Deleted 3 digest(s)")
    await page.goBack()
    await page.goForward()
    assert.strictEqual(posts.length, 1, "a reload or back posted")
    assert.deepStrictEqual(await holdersOf(prefix, `${prefix}:bill9`), ["b9"])

    // Running holders: the preview names them revoked, and they keep their place.
    await filter(page, served.url, (p) => p.selectOption("select[name=type]", "while_executing").then(() => {}))
    await Promise.all([page.waitForURL(/\/locks\/bulk\/confirm\?/), page.locator("a.bulk-delete").click()])
    assert.deepStrictEqual(await fates(), [0, 1].map((i) => `${prefix}:run${i} r${i} revoked`))
    await Promise.all([page.waitForURL(/\/locks\?.*&result=/), page.locator("button.confirm").click()])
    assert.include(await page.locator(".message").textContent(), "revoked 2 running holder(s)")
    for (let i = 0; i < 2; i++) assert.deepStrictEqual(await holdersOf(prefix, `${prefix}:run${i}:RUN`), [`r${i}`])
    assert.deepStrictEqual(dialogs, [])
    await close()

    // Read-only: no bulk link on the list, no form on the preview.
    const readOnly = await harness.run(Web.serve({ prefix, readOnly: true }))
    const reader = await open()
    await reader.page.goto(`${readOnly.url}/locks`)
    assert.isAbove((await rowNames(reader.page)).length, 0)
    assert.strictEqual(await reader.page.locator("a.bulk-delete").count(), 0)
    await reader.page.goto(`${readOnly.url}/locks/bulk/confirm?worker=Mailer`)
    assert.strictEqual(await reader.page.locator("table.fates tbody tr").count(), 4)
    assert.strictEqual(await reader.page.locator("form[method=post]").count(), 0)
    await reader.close()
  })

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

  it("issue 38: at 390 px digests stay on a line or two and tables scroll in their box; the metrics charts take the full width and refresh on their own", async () => {
    const prefix = RedisTest.uniquePrefix("web-narrow")
    await harness.run(Harness.seed(prefix))
    // Digests as an app makes them: 64 hex characters after the prefix, one a run lock's.
    const hex = (i: number) => `${i}`.repeat(64).slice(0, 64)
    const definition = LockOptions.unsafeMake({ lock: "until_and_while_executing", lockPrefix: prefix, lockInfo: true, lockTtl: 3_600_000, lockLease: 600_000 })
    for (const i of [1, 2, 3]) {
      const info = { worker: "SyncCrm", queue: "sync", args: [{ account: i, note: "until_and_while_executing".repeat(3) }] }
      await harness.run(Lock.lock(definition, { digest: `${prefix}:${hex(i)}`, jid: `q${i}`, info }))
      await harness.run(Lock.lock(definition, { digest: `${prefix}:${hex(i)}`, jid: `w${i}`, phase: "run", info }))
    }
    const served = await harness.run(Web.serve({ prefix }))
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } })
    const page = await context.newPage()
    await page.goto(`${served.url}/locks`)
    const cells = await page.locator("table.locks td.digest").evaluateAll((tds) =>
      tds.map((td) => ({
        // The digest's own box (the row may be taller for another cell's sake).
        height: td.querySelector("a")!.getBoundingClientRect().height,
        line: parseFloat((globalThis as unknown as Dom).getComputedStyle(td).lineHeight) || 20,
        title: td.getAttribute("title"),
        // The name's own text (the cell starts with its lock's kind, issue 47).
        text: (td.querySelector("a") as { readonly textContent: string | null } | null)?.textContent ?? ""
      }))
    )
    assert.isAtLeast(cells.length, 15)
    for (const cell of cells) {
      // One or two lines (and the padding), never three characters to a line; the whole name in the title.
      assert.isAtMost(cell.height, cell.line * 2 + 2, `${cell.text}: ${cell.height}px`)
      assert.isTrue(cell.title !== null && cell.title.length >= cell.text.length)
    }
    assert.include(cells.map((c) => c.title).join(" "), `${prefix}:${hex(2)}:RUN`)
    // The page itself does not scroll sideways: the table does, inside its box.
    const widths = await page.evaluate(() => ({
      page: (globalThis as unknown as Dom).document.documentElement.scrollWidth,
      box: (globalThis as unknown as Dom).document.querySelector("div.scroll").clientWidth,
      table: (globalThis as unknown as Dom).document.querySelector("table.locks").scrollWidth
    }))
    assert.isAtMost(widths.page, 391)
    assert.isAtMost(widths.box, 390)
    assert.isAbove(widths.table, widths.box)
    await page.screenshot({ path: new URL("narrow-locks.png", shots).pathname, fullPage: true })
    // The lock page at 390 px: the holders table scrolls too; the run holder shows its queue, and the lock info
    // breaks between words, never inside one.
    await page.goto(`${served.url}/lock?digest=${encodeURIComponent(`${prefix}:${hex(1)}`)}`)
    assert.isAtMost(await page.evaluate(() => (globalThis as unknown as Dom).document.documentElement.scrollWidth), 391)
    const runRow = page.locator("table.holders tr[data-jid=w1]")
    assert.strictEqual(await runRow.locator("td").nth(6).textContent(), "sync")
    assert.deepStrictEqual(
      await page.locator("table.holders thead").first().locator("th").allTextContents(),
      ["jid", "locked at", "expires", "lease until", "fence", "revoked", "queue", "lock info", ""]
    )
    const wrap = await page.locator("pre.info").first().evaluate((pre) => ({
      wordBreak: (globalThis as unknown as Dom).getComputedStyle(pre).wordBreak,
      overflowWrap: (globalThis as unknown as Dom).getComputedStyle(pre).overflowWrap,
      // Each line of the rendered text: a word cut across lines shows as a line ending mid-word.
      typeLine: (() => {
        const range = (globalThis as unknown as Dom).document.createRange()
        const node = pre.firstChild!
        const at = node.textContent!.indexOf("until_and_while_executing")
        range.setStart(node, at)
        range.setEnd(node, at + "until_and_while_executing".length)
        return range.getClientRects().length
      })()
    }))
    assert.notStrictEqual(wrap.wordBreak, "break-all")
    assert.strictEqual(wrap.overflowWrap, "break-word")
    assert.strictEqual(wrap.typeLine, 1, "the lock type broke across lines")
    await context.close()

    // The metrics page at a desktop width: every chart as wide as the page's content, with its time labels, and the
    // hold times of a few locks taken and released.
    const held = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix })
    await harness.run(Effect.scoped(Effect.forEach([1, 2, 3], (i) => Lock.acquire(held, { digest: `${prefix}:held${i}`, jid: `h${i}` }))))
    await harness.run(History.flush(prefix))
    const wide = await open()
    await wide.page.goto(`${served.url}/metrics`)
    const main = await wide.page.locator("main").evaluate((m) => m.clientWidth)
    const charts = await wide.page.locator("figure.chart svg").evaluateAll((svgs) => svgs.map((svg) => svg.getBoundingClientRect().width))
    assert.isAtLeast(charts.length, 5)
    for (const width of charts) assert.isAtLeast(width, main * 0.9)
    assert.isAtLeast(await wide.page.locator("figure[data-event=acquired] text.tick").count(), 2)
    assert.isAtLeast(await wide.page.locator("figure.hold rect.bin").count(), 12)
    await wide.page.screenshot({ path: new URL("wide-metrics.png", shots).pathname, fullPage: true })
    // ?refresh=5: the page reloads itself (a meta refresh: the CSP allows no script).
    await wide.page.goto(`${served.url}/metrics?refresh=5`)
    let loads = 0
    wide.page.on("load", () => loads++)
    await wide.page.waitForEvent("load", { timeout: 60_000 })
    assert.isAtLeast(loads, 1)
    assert.strictEqual(new URL(wide.page.url()).search, "?refresh=5")
    assert.deepStrictEqual(wide.dialogs, [])
    await wide.close()
  }, 120_000)

  it("issue 38: a lock page's Recent events, newest first: taken, then refused naming its holder; markup in a jid is text", async () => {
    const prefix = RedisTest.uniquePrefix("web-events")
    const served = await harness.run(Web.serve({ prefix }))
    const digest = `${prefix}:0123abcd`
    const logged = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockEvents: true })
    await harness.run(Lock.lock(logged, { digest, jid: "first" }))
    await harness.run(Effect.flip(Lock.lock(logged, { digest, jid: Harness.markup[1] })))
    const { page, dialogs, close } = await open()
    await page.goto(`${served.url}/lock?digest=${encodeURIComponent(digest)}`)
    const rows = await page.locator("table.events tbody tr").evaluateAll((trs) =>
      trs.map((tr) => Array.from(tr.querySelectorAll("td"), (td) => (td as { readonly textContent: string | null }).textContent).slice(1, 5))
    )
    assert.deepStrictEqual(rows, [["refused", "queue", Harness.markup[1], "first"], ["taken", "queue", "first", ""]])
    await page.screenshot({ path: new URL("lock-events.png", shots).pathname, fullPage: true })
    assert.strictEqual(await page.locator("img").count(), 0)
    assert.deepStrictEqual(dialogs, [])
    await close()
  })
})

describe("what only the layout shows (issue 47)", () => {
  it("at 1280 px every Unlock button is within its table's box whatever the jid; at 390 px a digest's two rows read apart; the metrics summary's numbers sit under their headers", async () => {
    const prefix = RedisTest.uniquePrefix("web-layout47")
    const hex = "6f1c2b9e0d4a8f37c5e1b2a09d8c7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d"
    const definition = LockOptions.unsafeMake({ lock: "until_and_while_executing", lockPrefix: prefix, lockInfo: true, lockTtl: 3_600_000, lockLease: 600_000 })
    const info = { worker: "SyncCrm", queue: "sync", args: [{ account: 42 }] }
    // Jids as apps make them: a digest-like id without a break, a run holder's with its fence and lease beside it.
    await harness.run(Lock.lock(definition, { digest: `${prefix}:${hex}`, jid: `report:${hex}`, info }))
    await harness.run(Lock.lock(definition, { digest: `${prefix}:${hex}`, jid: `sync:${hex.slice(0, 32)}`, phase: "run", info }))
    await harness.run(Effect.scoped(Lock.acquire(LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix }), { digest: `${prefix}:held`, jid: "h" })))
    await harness.run(History.flush(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } })
    const page = await context.newPage()
    await page.goto(`${served.url}/lock?digest=${encodeURIComponent(`${prefix}:${hex}`)}`)
    const boxes = await page.locator("button.unlock").evaluateAll((buttons) =>
      buttons.map((button) => {
        const own = button.getBoundingClientRect()
        const box = button.closest("div.scroll")!.getBoundingClientRect()
        return { left: own.left, right: own.right, boxLeft: box.left, boxRight: box.right }
      })
    )
    assert.strictEqual(boxes.length, 2)
    for (const b of boxes) {
      assert.isAtLeast(b.left, b.boxLeft, JSON.stringify(b))
      assert.isAtMost(b.right, b.boxRight, `the Unlock button is cut off: ${JSON.stringify(b)}`)
      assert.isAtMost(b.right, 1280)
    }
    await page.screenshot({ path: new URL("wide-lock-1280.png", shots).pathname, fullPage: true })

    // The metrics summary: each number's right edge under its own header's, not nearer the next one.
    await page.goto(`${served.url}/metrics`)
    const columns = await page.locator("table.totals").evaluate((table) => {
      const edge = (cell: unknown) => {
        const range = (globalThis as unknown as Dom).document.createRange()
        range.selectNodeContents(cell)
        const r = range.getBoundingClientRect()
        return { left: r.left, right: r.right }
      }
      const heads = Array.from(table.querySelectorAll("thead th"), edge)
      const cells = Array.from(table.querySelectorAll("tbody tr:first-child td"), edge)
      return { heads, cells }
    })
    assert.strictEqual(columns.heads.length, columns.cells.length)
    for (let i = 1; i < columns.heads.length; i++) {
      assert.approximately(columns.cells[i]!.right, columns.heads[i]!.right, 2, `column ${i}: ${JSON.stringify(columns)}`)
    }
    await context.close()

    // At 390 px the name is cut before its ":RUN": the label in front of it says which lock a row is.
    const narrow = await browser.newContext({ viewport: { width: 390, height: 844 } })
    const phone = await narrow.newPage()
    await phone.goto(`${served.url}/locks?pattern=${encodeURIComponent(`${prefix}:6*`)}`)
    const rows = await phone.locator("table.locks td.digest").evaluateAll((tds) =>
      tds.map((td) => {
        const label = td.querySelector(".kind")
        const rect = label?.getBoundingClientRect()
        return { text: (label as { textContent: string | null } | null)?.textContent ?? "", right: rect?.right ?? Infinity, title: td.getAttribute("title") }
      })
    )
    assert.deepStrictEqual(rows.map((r) => [r.title?.endsWith(":RUN") ? "run" : "queue", r.text]).sort(), [["queue", "queue"], ["run", "run"]])
    for (const r of rows) assert.isAtMost(r.right, 390)
    await phone.screenshot({ path: new URL("narrow-kinds.png", shots).pathname, fullPage: true })
    await narrow.close()
  }, 120_000)
})

describe("the job behind a lock in Chromium, against a real BullMQ queue (issue 38)", () => {
  it("the lock page shows the job's state; the holder's jid links to its section; the list filtered by job=gone shows only the orphaned lock", async () => {
    const prefix = RedisTest.uniquePrefix("web-job")
    const name = `web-job-${process.pid}`
    const queue = new Queue(name, { connection: { url: harness.url } })
    try {
      const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockInfo: true })
      const added = await queue.add("Report", { account: 42 }, { jobId: "report-42", delay: 3_600_000 })
      await harness.run(Lock.lock(definition, { digest: `${prefix}:report`, jid: added.id!, info: { queue: name, worker: "Report", args: [{ account: 42 }] } }))
      await harness.run(Lock.lock(definition, { digest: `${prefix}:orphan`, jid: "orphan-1", info: { queue: name, worker: "Report", args: [] } }))
      const served = await harness.run(Web.serve({ prefix }).pipe(Effect.provide(BullMQ.layer(queue))))
      const { page, dialogs, close } = await open()
      await page.goto(`${served.url}/lock?digest=${encodeURIComponent(`${prefix}:report`)}`)
      assert.strictEqual(await page.locator("section.job .job-state").textContent(), "delayed")
      assert.include(await page.locator("section.job pre.job-data").textContent(), "\"account\":42")
      await page.locator("a.job-link").first().click()
      await page.waitForURL(/#job-report-42$/)
      assert.isTrue(await page.locator("section.job:target").isVisible())
      assert.strictEqual(await page.locator("section.job:target").getAttribute("data-jid"), "report-42")
      await page.screenshot({ path: new URL("job-lock.png", shots).pathname, fullPage: true })

      await page.goto(`${served.url}/lock?digest=${encodeURIComponent(`${prefix}:orphan`)}`)
      assert.strictEqual(await page.locator("section.job").getAttribute("data-state"), "gone")

      await page.goto(`${served.url}/locks`)
      await page.selectOption("select[name=job]", "gone")
      await Promise.all([page.waitForURL(/job=gone/), page.getByRole("button", { name: "Filter" }).click()])
      assert.deepStrictEqual(await rowNames(page), [`${prefix}:orphan`])
      assert.strictEqual(await page.locator("td.job-state").first().textContent(), "gone")
      assert.deepStrictEqual(dialogs, [])
      await close()
    } finally {
      await queue.obliterate({ force: true }).catch(() => undefined)
      await queue.close()
    }
  })
})
