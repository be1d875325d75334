/**
 * Properties of the admin UI's guards and pages. Random requests to change a lock, against servers with and without
 * a token and read-only, each with any mix of bearer header, token cookie, CSRF cookie (a page's, planted, none) and
 * token (right, wrong, missing), Origin, Sec-Fetch-Site, Host and X-Forwarded-* (untrusted): Redis changes exactly
 * when the model of the rules says it may, and the status says so. Any Host name, on a server without a token: every page and change is answered exactly when it
 * names the loopback (no DNS rebinding). Random strings as jids, workers and arguments: every page renders them as
 * text (no markup of theirs survives, and the text reads back as the string). Random arguments, some cut by the
 * per-entry byte cap, and a random needle: the arguments filter lists exactly the whole entries that contain it,
 * page by page, and counts the cut ones. Random locks and filters: a bulk delete removes exactly the locks its
 * preview listed and revokes exactly the running holders it named. More cases:
 * UNIQUE_JOBS_PROPERTY_RUNS=100 npx vitest run test/web.properties.test.ts
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as fc from "fast-check"
import * as Redacted from "effect/Redacted"
import { request as httpRequest } from "node:http"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as History from "../src/History.js"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Web from "../src/Web.js"
import * as Gate from "../src/web/Gate.js"
import * as Security from "../src/web/Security.js"
import { maxBulkDigests, maxNameLength } from "../src/web/Routes.js"
import * as RedisTest from "./support/redis.js"
import * as Harness from "./support/web.js"

const runs = Number(process.env.UNIQUE_JOBS_PROPERTY_RUNS ?? 40)
const tokenValue = "property-token-0123456789abcdef"

let harness: Harness.Harness
beforeAll(async () => {
  harness = await Harness.start()
})
afterAll(() => harness?.close())

const send = (url: string, method: string, headers: Record<string, string>, body?: string) =>
  new Promise<{ status: number; body: string; cookie: string | undefined; location: string | undefined }>((resolve, reject) => {
    const req = httpRequest(url, { method, headers }, (res) => {
      let text = ""
      res.on("data", (chunk: Buffer) => {
        text += chunk.toString()
      })
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, body: text, cookie: res.headers["set-cookie"]?.[0]?.split(";")[0], location: res.headers.location }))
    })
    req.on("error", reject)
    req.end(body)
  })

type Choice = "right" | "wrong" | "none"

interface Case {
  readonly server: { readonly token: boolean; readonly readOnly: boolean }
  readonly bearer: Choice
  readonly tokenCookie: Choice
  /** The browser's CSRF cookie: the one a page set, one planted by another site or service (cookies ignore ports), or none. */
  readonly csrfCookie: "page" | "planted" | "none"
  readonly csrf: Choice
  readonly csrfIn: "form" | "header"
  readonly origin: "same" | "other" | "null" | "none"
  readonly site: "same-origin" | "same-site" | "cross-site" | "none" | "absent"
  readonly host: "loopback" | "foreign"
  /** X-Forwarded-Host/-Proto/-For naming the site of the "other" Origin: ignored, since no server here trusts a proxy. */
  readonly forwarded: boolean
}

/** What the rules say a change request gets. */
const expected = (c: Case): number => {
  if (!c.server.token && c.host === "foreign") return 403
  let bearer = false
  if (c.server.token) {
    if (c.bearer === "wrong") return 401
    if (c.bearer === "right") bearer = true
    else if (c.tokenCookie !== "right") return 401
  }
  if (c.server.readOnly) return 403
  if (c.site !== "absent" && c.site !== "same-origin" && c.site !== "none") return 403
  if (c.origin === "other" || c.origin === "null") return 403
  if (!bearer && (c.csrfCookie !== "page" || c.csrf !== "right")) return 403
  return 200
}

// Each guard passes about half the time, so that requests failing one rule alone (the one a broken guard would let
// through) come up often.
const passing = <A>(pass: ReadonlyArray<A>, fail: ReadonlyArray<A>): fc.Arbitrary<A> =>
  fc.oneof({ arbitrary: fc.constantFrom(...pass), weight: 1 }, { arbitrary: fc.constantFrom(...fail), weight: 1 })
const choice = passing<Choice>(["right"], ["wrong", "none"])
const arbitraryCase: fc.Arbitrary<Case> = fc.record({
  server: fc.record({ token: fc.boolean(), readOnly: fc.boolean() }),
  bearer: fc.constantFrom<Choice>("right", "wrong", "none"),
  tokenCookie: choice,
  csrfCookie: passing(["page" as const], ["planted" as const, "none" as const]),
  csrf: choice,
  csrfIn: fc.constantFrom("form" as const, "header" as const),
  origin: passing(["same" as const, "none" as const], ["other" as const, "null" as const]),
  site: passing(["same-origin" as const, "none" as const, "absent" as const], ["same-site" as const, "cross-site" as const]),
  host: fc.constantFrom("loopback" as const, "foreign" as const),
  forwarded: fc.boolean()
})

// A cookie planted by another site or service and the same value as the token, every other guard passing: the
// one request only the server's MAC of the cookie refuses. Tried every run, with a token cookie and without a token.
const plantedExamples: Array<[Case]> = [false, true].flatMap((token) =>
  (["form", "header"] as const).map((csrfIn): [Case] => [{
    server: { token, readOnly: false },
    bearer: "none",
    tokenCookie: "right",
    csrfCookie: "planted",
    csrf: "right",
    csrfIn,
    origin: "same",
    site: "same-origin",
    host: "loopback",
    forwarded: false
  }])
)

describe("the admin UI's guards, by property", () => {
  it("a change request changes Redis exactly when the rules allow it, and its status says which rule refused", async () => {
    const prefix = RedisTest.uniquePrefix("web-prop")
    const servers = new Map<string, { readonly port: number }>()
    for (const token of [false, true]) {
      for (const readOnly of [false, true]) {
        const served = await harness.run(Web.serve({
          prefix,
          readOnly,
          ...(token ? { host: "0.0.0.0", token: Redacted.make(tokenValue) } : {})
        }))
        servers.set(`${token}/${readOnly}`, served)
      }
    }
    const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
    let n = 0
    await fc.assert(
      fc.asyncProperty(arbitraryCase, async (c) => {
        const digest = `${prefix}:p${++n}`
        await harness.run(Lock.lock(definition, { digest, jid: "j" }))
        const port = servers.get(`${c.server.token}/${c.server.readOnly}`)!.port
        const base = `http://127.0.0.1:${port}`
        const host = c.host === "loopback" ? `127.0.0.1:${port}` : `admin.example:${port}`
        // A page hands out the CSRF cookie (asked with the token, so it is handed out on every server).
        const page = await send(`${base}/api/session`, "GET", { host: `127.0.0.1:${port}`, authorization: `Bearer ${tokenValue}` })
        // "right" with a planted cookie is the planted value itself: all an attacker who chose it could send.
        const planted = "a".repeat(64)
        const csrfValue = c.csrfCookie === "planted" ? planted : (JSON.parse(page.body) as { csrf: string }).csrf
        const cookies: Array<string> = []
        if (c.csrfCookie === "page") cookies.push(page.cookie!)
        if (c.csrfCookie === "planted") cookies.push(`unique_jobs_csrf=${planted}`)
        if (c.tokenCookie !== "none") cookies.push(`unique_jobs_token=${c.tokenCookie === "right" ? tokenValue : "x".repeat(tokenValue.length)}`)
        const headers: Record<string, string> = { host, "content-type": "application/x-www-form-urlencoded" }
        if (cookies.length > 0) headers.cookie = cookies.join("; ")
        if (c.bearer !== "none") headers.authorization = `Bearer ${c.bearer === "right" ? tokenValue : "wrong-token-wrong-token"}`
        if (c.origin !== "none") headers.origin = c.origin === "same" ? `http://${host}` : c.origin === "null" ? "null" : "http://evil.example"
        if (c.site !== "absent") headers["sec-fetch-site"] = c.site
        if (c.forwarded) {
          headers["x-forwarded-host"] = "evil.example"
          headers["x-forwarded-proto"] = "http"
          headers["x-forwarded-for"] = "203.0.113.9"
        }
        const fields: Record<string, string> = { digest, jid: "j" }
        const csrf = c.csrf === "right" ? csrfValue : c.csrf === "wrong" ? "0".repeat(64) : undefined
        if (csrf !== undefined && c.csrfIn === "form") fields._csrf = csrf
        if (csrf !== undefined && c.csrfIn === "header") headers["x-csrf-token"] = csrf
        const answer = await send(`${base}/api/lock/unlock`, "POST", headers, new URLSearchParams(fields).toString())
        const held = (await harness.run(harness.store.fetch({ prefix, name: digest }))).holders.length
        const want = expected(c)
        assert.strictEqual(answer.status, want, `${JSON.stringify(c)}: ${answer.body}`)
        assert.strictEqual(held, want === 200 ? 0 : 1, JSON.stringify(c))
      }),
      { numRuns: runs * 10, examples: plantedExamples }
    )
  })

  it("a server without a token answers a Host exactly when it names the loopback, on every page and change", async () => {
    const prefix = RedisTest.uniquePrefix("web-host")
    const served = await harness.run(Web.serve({ prefix }))
    const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
    const port = fc.option(fc.integer({ min: 1, max: 65535 }).map(String), { nil: undefined })
    const withPort = (name: fc.Arbitrary<string>) => fc.tuple(name, port).map(([n, p]) => p === undefined ? n : `${n}:${p}`)
    const octet = fc.integer({ min: 0, max: 255 })
    const loopback = withPort(fc.oneof(
      fc.tuple(octet, octet, octet).map((o) => `127.${o.join(".")}`),
      fc.constantFrom("localhost", "LocalHost", "LOCALHOST", "[::1]")
    ))
    // Names a rebinding page would send: other hosts, and look-alikes of the loopback.
    const label = fc.stringMatching(/^[a-z0-9-]{1,12}$/)
    const foreign = fc.oneof(
      withPort(fc.tuple(label, fc.constantFrom("example", "evil.example", "nip.io")).map(([l, d]) => `${l}.${d}`)),
      withPort(fc.constantFrom("127.0.0.1.nip.io", "localhost.evil.example", "0.0.0.0", "[::2]", "10.0.0.1", "admin")),
      withPort(fc.constantFrom("evil-localhost", "notlocalhost", "app.localhost", "localhost.", "127.0.0.256")),
      fc.constantFrom("127.0.0.1:abc", "localhost@evil.example", "[::1]evil", "127.0.0.1 evil", "127.0.0.1:"),
      fc.tuple(fc.constantFrom("127.0.0.1", "localhost", "[::1]"), fc.oneof(fc.constant(0), fc.integer({ min: 65536, max: 99999 })))
        .map(([n, p]) => `${n}:${p}`)
    )
    const host = fc.oneof(loopback.map((h) => ({ h, ok: true })), foreign.map((h) => ({ h, ok: false })))
    let n = 0
    await fc.assert(
      fc.asyncProperty(host, fc.constantFrom("/api/session", "/locks", "/api/locks", "change"), async ({ h, ok }, path) => {
        if (path !== "change") {
          const answer = await send(`${served.url}${path}`, "GET", { host: h })
          assert.strictEqual(answer.status, ok ? 200 : 403, `${h} ${path}: ${answer.body.slice(0, 200)}`)
          return
        }
        const digest = `${prefix}:h${++n}`
        await harness.run(Lock.lock(definition, { digest, jid: "j" }))
        // Every other guard passes: the CSRF cookie and token of a page asked on the loopback.
        const page = await send(`${served.url}/api/session`, "GET", { host: `127.0.0.1:${served.port}` })
        const headers = { host: h, cookie: page.cookie!, "x-csrf-token": (JSON.parse(page.body) as { csrf: string }).csrf, "content-type": "application/x-www-form-urlencoded" }
        const answer = await send(`${served.url}/api/lock/unlock`, "POST", headers, new URLSearchParams({ digest, jid: "j" }).toString())
        const held = (await harness.run(harness.store.fetch({ prefix, name: digest }))).holders.length
        assert.deepStrictEqual([answer.status, held], ok ? [200, 0] : [403, 1], `${h}: ${answer.body.slice(0, 200)}`)
      }),
      { numRuns: runs * 2 }
    )
  })

  it("the stale filter shows exactly the locks whose holders have all ended, and the rest show unfiltered", async () => {
    const prefix = RedisTest.uniquePrefix("stale")
    const served = await harness.run(Web.serve({ prefix }))
    let n = 0
    await fc.assert(
      // A wide lock: 30 holders that have ended and one that has not, their entries long enough that Redis keeps the
      // hash as a table, which a row reads a page of: a lock read in part is never called stale.
      fc.asyncProperty(fc.array(fc.record({ ended: fc.boolean(), holders: fc.integer({ min: 1, max: 2 }), wide: fc.boolean() }), { minLength: 1, maxLength: 8 }), async (locks) => {
        const run = `${prefix}:r${++n}`
        const info = JSON.stringify({ type: "until_expired", worker: "Wide", queue: "q", args: ["x".repeat(60)] })
        for (const [i, lock] of locks.entries()) {
          const definition = LockOptions.unsafeMake({ lock: "until_expired", lockPrefix: prefix, lockTtl: lock.ended ? 20 : 3_600_000, lockLimit: 2 })
          for (let h = 0; h < lock.holders; h++) await harness.run(Lock.lock(definition, { digest: `${run}:l${i}`, jid: `h${h}` }))
          if (lock.wide) {
            const key = { prefix, name: `${run}:w${i}` }
            await Promise.all(Array.from({ length: 31 }, (_, h) =>
              harness.run(harness.store.lock(key, { jid: `w${h}`, limit: 40, ttlMs: h === 17 ? 3_600_000 : 20, leaseMs: 0, info, fenced: false }))))
          }
        }
        await new Promise((resolve) => setTimeout(resolve, 50))
        // Every page, to the end of the index.
        const list = async (query: string) => {
          const names: Array<string> = []
          let cursor = "0"
          do {
            const answer = await send(`${served.url}/api/locks?pattern=${encodeURIComponent(`${run}:*`)}&count=1000&cursor=${cursor}${query}`, "GET", {})
            const page = JSON.parse(answer.body) as { next: string; items: Array<{ name: string }> }
            names.push(...page.items.map((item) => item.name))
            cursor = page.next
          } while (cursor !== "0")
          return names.sort()
        }
        const names = locks.map((_, i) => `${run}:l${i}`)
        const wide = locks.flatMap((lock, i) => (lock.wide ? [`${run}:w${i}`] : []))
        assert.deepStrictEqual(await list("&stale=1"), names.filter((_, i) => locks[i]!.ended).sort())
        assert.deepStrictEqual(await list(""), [...names, ...wide].sort())
      }),
      { numRuns: Math.max(5, Math.round(runs / 2)) }
    )
  })

  it("the list says first in each row's lock cell which of its digest's locks the row is, queue or run, whatever its name's length", async () => {
    const prefix = RedisTest.uniquePrefix("kind")
    const served = await harness.run(Web.serve({ prefix }))
    let n = 0
    await fc.assert(
      fc.asyncProperty(fc.array(fc.record({ queue: fc.boolean(), run: fc.boolean(), long: fc.boolean() }), { minLength: 1, maxLength: 6 }), async (digests) => {
        const run = `${prefix}:k${++n}`
        const expected = new Map<string, "queue" | "run">()
        for (const [i, d] of digests.entries()) {
          const digest = `${run}:${d.long ? "x".repeat(120) : ""}d${i}`
          if (d.queue) {
            await harness.run(harness.store.lock({ prefix, name: digest }, { jid: "q", limit: 1, ttlMs: 3_600_000, leaseMs: 0, info: "", fenced: false }))
            expected.set(digest, "queue")
          }
          if (d.run) {
            await harness.run(harness.store.lock({ prefix, name: `${digest}:RUN` }, { jid: "r", limit: 1, ttlMs: 0, leaseMs: 600_000, info: "", fenced: true }))
            expected.set(`${digest}:RUN`, "run")
          }
        }
        const page = await send(`${served.url}/locks?pattern=${encodeURIComponent(`${run}:*`)}&count=1000`, "GET", {})
        const cells = new Map([...page.body.matchAll(/<tr data-name="([^"]+)">\s*<td class="digest"[^>]*>([\s\S]*?)<\/td>/g)].map((m) => [m[1]!, m[2]!]))
        assert.deepStrictEqual([...cells.keys()].sort(), [...expected.keys()].sort())
        for (const [name, phase] of expected) {
          assert.isTrue(cells.get(name)!.startsWith(`<span class="kind kind-${phase}">${phase}</span> `), `${name}: ${cells.get(name)}`)
        }
      }),
      { numRuns: Math.max(5, Math.round(runs / 4)) }
    )
  })

  it("the arguments filter lists exactly the locks whose arguments contain it, over every page; a cut entry is counted, never listed", async () => {
    const prefix = RedisTest.uniquePrefix("args")
    const served = await harness.run(Web.serve({ prefix }))
    const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockInfo: true })
    // A small alphabet, so that needles often match; "z" pads an entry past the per-entry byte cap (1,024).
    const text = fc.string({ unit: fc.constantFrom("a", "b", "\"", ",", " ", "é"), maxLength: 4 })
    const lock = fc.record({ args: fc.array(fc.oneof(text, fc.integer({ min: 0, max: 20 })), { maxLength: 3 }), cut: fc.boolean() })
    let n = 0
    await fc.assert(
      fc.asyncProperty(
        fc.array(lock, { minLength: 1, maxLength: 10 }),
        text.filter((t) => t.length > 0),
        fc.integer({ min: 1, max: 6 }),
        async (locks, needle, count) => {
          const run = `${prefix}:r${++n}`
          const stored = locks.map((l) => (l.cut ? [...l.args, "z".repeat(2000)] : l.args))
          for (const [i, args] of stored.entries()) {
            await harness.run(Lock.lock(definition, { digest: `${run}:l${i}`, jid: `j${i}`, info: { worker: "W", queue: "q", args } }))
          }
          const listed: Array<string> = []
          let notSearched = 0
          let cursor = "0"
          do {
            const answer = await send(
              `${served.url}/api/locks?pattern=${encodeURIComponent(`${run}:*`)}&count=${count}&cursor=${cursor}&args=${encodeURIComponent(needle)}`,
              "GET",
              {}
            )
            assert.strictEqual(answer.status, 200, answer.body)
            const page = JSON.parse(answer.body) as { next: string; notSearched: number; items: Array<{ name: string; args: string }> }
            // Every lock listed matches, by the arguments it shows.
            for (const item of page.items) assert.include(item.args, needle, item.name)
            listed.push(...page.items.map((item) => item.name))
            notSearched += page.notSearched
            cursor = page.next
          } while (cursor !== "0")
          // Over the walk (every member read once): listed exactly the whole entries whose arguments contain the
          // needle; every cut one counted as not searched.
          const names = stored.map((_, i) => `${run}:l${i}`)
          const expected = names.filter((_, i) => !locks[i]!.cut && JSON.stringify(stored[i]).includes(needle))
          assert.deepStrictEqual(listed.sort(), expected.sort())
          assert.strictEqual(notSearched, locks.filter((l) => l.cut).length)
        }
      ),
      { numRuns: runs }
    )
  })

  it("any jid, worker and arguments render as text on every page: no markup of theirs survives", async () => {
    const prefix = RedisTest.uniquePrefix("web-text")
    const served = await harness.run(Web.serve({ prefix }))
    const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockInfo: true })
    const markupish = fc.string({ unit: fc.constantFrom("<", ">", "\"", "'", "`", "&", "=", "/", " ", "a", "x", "script", "img", "onerror", ";", "#", "\u00e9") })
    const decode = (text: string) =>
      text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, "\"").replace(/&#39;/g, "'").replace(/&#96;/g, "`").replace(/&amp;/g, "&")
    let n = 0
    await fc.assert(
      fc.asyncProperty(markupish.filter((s) => s.length > 0), markupish, markupish, async (jid, worker, arg) => {
        const digest = `${prefix}:t${++n}`
        await harness.run(Lock.lock(definition, { digest, jid, info: { worker, queue: "q", args: [arg] } }))
        const lockPage = await send(`${served.url}/lock?digest=${encodeURIComponent(digest)}`, "GET", {})
        const listPage = await send(`${served.url}/locks?pattern=${encodeURIComponent(digest)}`, "GET", {})
        for (const body of [lockPage.body, listPage.body]) {
          // No tag of theirs: every tag in the page is one the page itself writes.
          for (const tag of body.match(/<[a-zA-Z!/][^>]*>/g) ?? []) {
            assert.match(tag, /^<\/?(!doctype|html|head|meta|title|link|body|header|strong|span|nav|a|main|h1|h2|p|table|thead|tbody|tr|th|td|pre|form|input|button|small|time|label|select|option|div|code)[\s>]/i, tag)
          }
          assert.notInclude(body, "<script")
        }
        const cell = /<td class="jid">([\s\S]*?)<\/td>/.exec(lockPage.body)![1]!
        assert.strictEqual(decode(cell), jid)
        const info = /<pre class="info">([\s\S]*?)<\/pre>/.exec(lockPage.body)![1]!
        assert.deepInclude(JSON.parse(decode(info)), { worker, args: [arg] })
      }),
      { numRuns: runs }
    )
  })

  it("any filter's bulk delete removes exactly the locks its preview listed and revokes exactly the running holders it named; a lock that matches later stays", async () => {
    type Kind = "queue" | "run" | "both" | "expired" | "multi"
    const spec = fc.record({
      kind: fc.constantFrom<Kind>("queue", "run", "both", "expired", "multi"),
      name: fc.constantFrom("a", "b"),
      queue: fc.constantFrom("mail", "billing"),
      worker: fc.constantFrom("Alpha", "Beta"),
      // A running holder revoked before the preview: it stays revoked, and is named so.
      revokedBefore: fc.boolean()
    })
    // Each filter is off more often than on, so that most filters leave something to delete.
    const often = <A>(off: A, ...on: ReadonlyArray<A>) =>
      fc.oneof({ arbitrary: fc.constant(off), weight: 3 }, { arbitrary: fc.constantFrom(...on), weight: 2 })
    const filter = fc.record({
      name: fc.constantFrom("", "a", "b"),
      type: often("", "until_executed", "while_executing", "until_and_while_executing", "until_expired", "until_executing"),
      queue: often("", "mail", "bill"),
      worker: often("", "Alpha"),
      stale: often(false, true),
      count: fc.integer({ min: 1, max: 12 })
    })
    const parse = (body: string, pattern: RegExp) => [...body.matchAll(pattern)]
    const unescape = (text: string) => text.replace(/&amp;/g, "&").replace(/&quot;/g, "\"")
    let n = 0
    await fc.assert(
      fc.asyncProperty(fc.array(spec, { minLength: 1, maxLength: 8 }), filter, fc.boolean(), fc.boolean(), async (specs, f, late, newcomer) => {
        const prefix = RedisTest.uniquePrefix(`bulk${++n}`)
        const served = await harness.run(Web.serve({ prefix }))
        const options = (lock: LockOptions.Options["lock"], more: Partial<LockOptions.Options> = {}) =>
          LockOptions.unsafeMake({ lock, lockPrefix: prefix, lockInfo: true, ...more })
        const names: Array<string> = []
        for (const [i, s] of specs.entries()) {
          const digest = `${prefix}:${s.name}${i}`
          names.push(digest, `${digest}:RUN`)
          const info = { worker: s.worker, queue: s.queue, args: [i] }
          const take = (definition: LockOptions.Definition, jid: string, phase: "queue" | "run") =>
            harness.run(Lock.lock(definition, { digest, jid, phase, info }))
          if (s.kind === "queue") await take(options("until_executed"), `q${i}`, "queue")
          if (s.kind === "expired") await take(options("until_expired", { lockTtl: 20 }), `e${i}`, "queue")
          if (s.kind === "multi") {
            const multi = options("until_executing", { lockLimit: 3 })
            await take(multi, `m${i}a`, "queue")
            await take(multi, `m${i}b`, "queue")
          }
          if (s.kind === "run") await take(options("while_executing", { lockLease: 600_000 }), `r${i}`, "run")
          if (s.kind === "both") {
            const both = options("until_and_while_executing", { lockTtl: 3_600_000, lockLease: 600_000 })
            await take(both, `w${i}`, "queue")
            await take(both, `x${i}`, "run")
          }
          if (s.revokedBefore && (s.kind === "run" || s.kind === "both")) {
            await harness.run(harness.store.remove([{ prefix, name: `${digest}:RUN` }], { jid: s.kind === "run" ? `r${i}` : `x${i}` }))
          }
        }
        await new Promise((resolve) => setTimeout(resolve, 30))
        const query = new URLSearchParams({ pattern: `${prefix}:${f.name}*`, count: String(f.count) })
        for (const key of ["type", "queue", "worker"] as const) if (f[key] !== "") query.set(key, f[key])
        if (f.stale) query.set("stale", "1")
        const holders = async () =>
          new Map(await Promise.all(names.map(async (name) =>
            [name, (await harness.run(harness.store.fetch({ prefix, name }))).holders.map((h) => `${h.jid}${h.revokedAt === undefined ? "" : " revoked"}`).sort().join(",")] as const
          )))
        const before = await holders()
        const page = await send(`${served.url}/locks?${query}`, "GET", {})
        const preview = await send(`${served.url}/locks/bulk/confirm?${query}`, "GET", {})
        assert.strictEqual(preview.status, 200, preview.body.slice(0, 500))
        const rows = parse(preview.body, /<tr (?:data-jid="([^"]*)" )?data-digest="([^"]+)"(?: data-phase="(\w+)")? data-fate="(\w+)"/g)
        const listed = [...new Set(rows.map((m) => m[2]!))].sort()
        // The preview lists the digests the list page shows (and the list offers it exactly then), as the API answers
        // them; a first page with none is read on from, to the first page that has some.
        const digestsAt = async (q: string) => {
          const api = JSON.parse((await send(`${served.url}/api/locks?${q}`, "GET", {})).body) as { items: Array<{ digest: string }> }
          return [...new Set(api.items.map((item) => item.digest))].sort()
        }
        const first = await digestsAt(query.toString())
        assert.strictEqual(page.body.includes(`Delete the ${first.length} digest(s) this page shows`), first.length > 0)
        if (listed.length === 0) {
          assert.deepStrictEqual(first, [])
          return
        }
        const named = rows.filter((m) => m[1] !== undefined).map((m) => ({ lock: m[3] === "run" ? `${m[2]}:RUN` : m[2]!, jid: m[1]!, fate: m[4]! }))
        const action = unescape(/<form method="post" action="([^"]+)"/.exec(preview.body)![1]!)
        assert.deepStrictEqual(listed, await digestsAt(action.split("?")[1]!))
        if (first.length > 0) assert.deepStrictEqual(listed, first)
        const field = (name: string) => unescape(new RegExp(`name="${name}" value="([^"]*)"`).exec(preview.body)![1]!)
        assert.deepStrictEqual(field("digests").split("\n").sort(), listed)
        // A lock taken after the preview that the filter matches (when it matches anything of the sort): never deleted.
        const later = `${prefix}:${f.name === "" ? "a" : f.name}late`
        if (late) {
          await harness.run(Lock.lock(options("until_executed"), { digest: later, jid: "late", info: { worker: "Alpha", queue: "mail", args: [] } }))
        }
        // A holder another job took after the preview on a digest it listed (one the operator never saw): that digest
        // is left whole. Redis time moves on first, so the holder's time is after the preview's reads.
        const joined = newcomer
          ? specs.map((s, i) => ({ s, i, digest: `${prefix}:${s.name}${i}` }))
            .find(({ digest, s }) => listed.includes(digest) && (s.kind === "run" || s.kind === "multi"))
          : undefined
        if (joined !== undefined) {
          await new Promise((resolve) => setTimeout(resolve, 2))
          const definition = joined.s.kind === "multi" ? options("until_executing", { lockLimit: 3 }) : options("until_executed")
          const info = { worker: joined.s.worker, queue: joined.s.queue, args: [joined.i] }
          await harness.run(Lock.lock(definition, { digest: joined.digest, jid: `n${joined.i}`, info }))
        }
        const posted = await holders()
        const session = await send(`${served.url}/api/session`, "GET", {})
        const csrf = (JSON.parse(session.body) as { csrf: string }).csrf
        const next = field("next")
        const answer = await send(`${served.url}${action}`, "POST", { cookie: session.cookie!, "content-type": "application/x-www-form-urlencoded" }, new URLSearchParams({ _csrf: csrf, digests: field("digests"), at: field("at"), next, confirm: field("confirm") }).toString())
        assert.strictEqual(answer.status, 303, answer.body)
        // A page with more of the index after it goes on to the preview of the next page, from its cursor; the last, to
        // the list.
        const goesTo = new URL(answer.location!, served.url)
        assert.strictEqual(goesTo.pathname, next === "0" ? "/locks" : "/locks/bulk/confirm", answer.location)
        assert.strictEqual(goesTo.searchParams.get("cursor"), next === "0" ? null : next, answer.location)
        const after = await holders()
        const deleted = listed.filter((digest) => digest !== joined?.digest)
        for (const name of names) {
          const digest = name.replace(/:RUN$/, "")
          const want = deleted.includes(digest)
            // Listed: what stays is exactly the holders it named as revoked, each revoked.
            ? named.filter((h) => h.lock === name && h.fate === "revoked").map((h) => `${h.jid} revoked`).sort().join(",")
            : digest === joined?.digest
            ? posted.get(name)
            : before.get(name)
          assert.strictEqual(after.get(name), want, `${name} (${listed.includes(digest) ? "listed" : "not listed"}, newcomer on ${joined?.digest})`)
          if (deleted.includes(digest) && want === "") {
            assert.isUndefined((await harness.run(harness.store.fetch({ prefix, name }))).indexScore, `${name} left in the index`)
          }
        }
        if (late) assert.strictEqual((await harness.run(harness.store.fetch({ prefix, name: later }))).holders.length, 1)
        // The result says the same: what it removed and what it revoked, and the digest it left alone.
        const result = await send(`${served.url}${answer.location!}`, "GET", {})
        const message = /<div class="message" role="status">([\s\S]*?)<\/div>/.exec(result.body)![1]!
        const acted = named.filter((h) => deleted.includes(h.lock.replace(/:RUN$/, "")))
        const revoked = acted.filter((h) => h.fate === "revoked").length
        assert.include(message, `Deleted ${deleted.length} digest(s)`)
        assert.include(message, acted.length === 0 ? "nothing was held" : `removed ${acted.length - revoked} holder(s)`)
        if (revoked > 0) assert.include(message, `revoked ${revoked} running holder(s)`)
        else assert.notInclude(message, "revoked")
        if (joined !== undefined) assert.include(message, "left 1 digest(s) alone: their holders changed")
      }),
      { numRuns: runs * 2 }
    )
  })

  it("a page's delete, and a running holder's unlock, act only with the confirmation of the holders they named (logged as who did it); else they ask again and change nothing", async () => {
    type Confirm = "none" | "garbage" | "other" | "stale" | "right"
    const prefix = RedisTest.uniquePrefix("web-confirm")
    const served = await harness.run(Web.serve({ prefix }))
    const queued = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockLimit: 3, lockEvents: true })
    const running = LockOptions.unsafeMake({ lock: "while_executing", lockPrefix: prefix, lockLimit: 3, lockLease: 600_000, lockEvents: true })
    const field = (body: string, name: string) => new RegExp(`name="${name}" value="([^"]*)"`).exec(body)?.[1]
    let n = 0
    await fc.assert(
      fc.asyncProperty(
        fc.subarray(["a", "b"]),
        fc.subarray(["r", "s"]),
        // delete, or unlock of a queue holder, a running one, or a jid that holds nothing
        fc.constantFrom("delete", "a", "r", "x"),
        fc.constantFrom<Confirm>("none", "garbage", "other", "stale", "right"),
        async (queue, run, action, confirm) => {
          const digest = `${prefix}:c${++n}`
          for (const jid of queue) await harness.run(Lock.lock(queued, { digest, jid }))
          for (const jid of run) await harness.run(Lock.lock(running, { digest, jid, phase: "run" }))
          const holders = async () =>
            Promise.all([digest, `${digest}:RUN`].map(async (name) =>
              (await harness.run(harness.store.fetch({ prefix, name }))).holders
                .map((h) => `${h.jid}${h.revokedAt === undefined ? "" : " revoked"}`).sort().join(",")))
          const jid = action === "delete" ? undefined : action
          const confirmPage = (target: string | undefined) =>
            send(`${served.url}/lock/${jid === undefined ? "delete" : "unlock"}/confirm?digest=${encodeURIComponent(digest)}${
              target === undefined ? "" : `&jid=${target}`}`, "GET", {})
          let value: string | undefined
          if (confirm === "garbage") value = "0".repeat(64)
          if (confirm === "right" || confirm === "stale") value = field((await confirmPage(jid)).body, "confirm")
          if (confirm === "other") {
            // A confirmation for something else: another digest's delete, another jid's unlock.
            if (jid === undefined) {
              const other = `${digest}-other`
              await harness.run(Lock.lock(queued, { digest: other, jid: "o" }))
              value = field((await send(`${served.url}/lock/delete/confirm?digest=${encodeURIComponent(other)}`, "GET", {})).body, "confirm")
            } else value = field((await confirmPage(jid === "a" ? "r" : "a")).body, "confirm")
          }
          // Stale: the holders changed after the confirmation page was read (the jid's own, for an unlock: the running
          // jid took the queue lock too).
          if (confirm === "stale") {
            if (jid === undefined) await harness.run(Lock.lock(queued, { digest, jid: "late" }))
            else if (run.includes(jid)) await harness.run(Lock.lock(queued, { digest, jid }))
          }
          const before = await holders()
          const session = await send(`${served.url}/api/session`, "GET", {})
          const fields: Record<string, string> = { _csrf: (JSON.parse(session.body) as { csrf: string }).csrf, digest }
          if (jid !== undefined) fields.jid = jid
          if (value !== undefined) fields.confirm = value
          const answer = await send(
            `${served.url}/lock/${jid === undefined ? "delete" : "unlock"}`,
            "POST",
            { cookie: session.cookie!, "content-type": "application/x-www-form-urlencoded" },
            new URLSearchParams(fields).toString()
          )
          assert.strictEqual(answer.status, 303, answer.body)
          const after = await holders()
          // A stale delete's page was read before "late" came: the digest is held by then.
          const late = confirm === "stale" && jid === undefined
          const held = queue.length + run.length > 0 || late ? jid === undefined || queue.includes(jid) || run.includes(jid) : false
          // What asks for a confirmation: a delete of anything held, an unlock of a running holder.
          const asks = held && (jid === undefined || run.includes(jid))
          const acts = held && (!asks || confirm === "right")
          const trace = `${JSON.stringify({ queue, run, action, confirm })}: ${answer.location}`
          if (!acts) {
            assert.deepStrictEqual(after, before, trace)
            if (asks) assert.include(answer.location, "/confirm?", trace)
            if (!held) {
              // Nothing held by what it names (a second submit): it says so plainly.
              const result = await send(`${served.url}${answer.location!}`, "GET", {})
              assert.include(result.body, "found nothing", trace)
            }
            return
          }
          assert.notInclude(answer.location, "/confirm?", trace)
          const kept = (list: ReadonlyArray<string>) => list.filter((h) => jid !== undefined && h !== jid)
          // A queue holder goes; a running one is revoked, keeping its place until it stops.
          assert.deepStrictEqual(after, [
            kept(queue).sort().join(","),
            run.map((h) => (jid === undefined || h === jid ? `${h} revoked` : h)).sort().join(",")
          ], trace)
          // Recent events name who did it: with no authorize, the web UI and the client's address, never unknown.
          const page = await send(`${served.url}/lock?digest=${encodeURIComponent(digest)}`, "GET", {})
          const events = page.body.slice(page.body.indexOf("<h2>Recent events</h2>"))
          const by = [...events.matchAll(/<tr><td>.*?<\/tr>/g)]
            .map((row) => [...row[0].matchAll(/<td[^>]*>(.*?)<\/td>/g)].map((cell) => cell[1]).pop())
            .filter((cell) => cell !== "")
          assert.isAbove(by.length, 0, `${trace}: ${events.slice(0, 500)}`)
          for (const who of by) assert.strictEqual(who, "web UI (127.0.0.1)", trace)
        }
      ),
      { numRuns: runs * 2 }
    )
  })

  it("a bulk delete's POST is refused for its length exactly when it lists more digests than one preview can", async () => {
    // A short prefix: 2,000 digests and more fit the body a change may send.
    const served = await harness.run(Web.serve({ prefix: "ov" }))
    const session = await send(`${served.url}/api/session`, "GET", {})
    const csrf = (JSON.parse(session.body) as { csrf: string }).csrf
    const around = (bound: number) => fc.integer({ min: bound - 2, max: bound + 2 })
    await fc.assert(
      fc.asyncProperty(fc.oneof(around(1000), around(maxBulkDigests), fc.integer({ min: 1, max: maxBulkDigests + 100 })), async (count) => {
        const digests = Array.from({ length: count }, (_, i) => `ov:${i}`).join("\n")
        // No confirmation: a list it takes is asked again (303 to the preview), changing nothing; one too long, a 400.
        const answer = await send(
          `${served.url}/locks/bulk/delete`,
          "POST",
          { cookie: session.cookie!, "content-type": "application/x-www-form-urlencoded" },
          new URLSearchParams({ _csrf: csrf, digests, at: "1", next: "0" }).toString()
        )
        assert.strictEqual(answer.status, count > maxBulkDigests ? 400 : 303, `${count} digests: ${answer.body.slice(0, 300)}`)
      }),
      { numRuns: runs, examples: [[1001], [maxBulkDigests], [maxBulkDigests + 1]] }
    )
  })

  it("the metrics summary, after any activity of any lock types: each number sits under a header aligned as its cells", async () => {
    const types = ["until_executed", "until_executing", "while_executing", "until_and_while_executing", "until_expired"] as const
    let n = 0
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ lock: fc.constantFrom(...types), duplicate: fc.boolean() }), { minLength: 1, maxLength: 5 }),
        async (steps) => {
          const prefix = RedisTest.uniquePrefix(`totals${++n}`)
          const served = await harness.run(Web.serve({ prefix }))
          await harness.run(History.flush(prefix))
          for (const [i, step] of steps.entries()) {
            const definition = LockOptions.unsafeMake({
              lock: step.lock,
              lockPrefix: prefix,
              ...(step.lock === "until_expired" ? { lockTtl: 60_000 } : {})
            })
            const target = { digest: `${prefix}:t${i}`, jid: `t${i}` }
            // A hold taken and let go, and with it, maybe a duplicate refused.
            await harness.run(Effect.scoped(Effect.andThen(
              Lock.acquire(definition, target),
              step.duplicate ? Effect.ignore(Lock.acquire(definition, { ...target, jid: `d${i}` })) : Effect.void
            )))
          }
          await harness.run(History.flush(prefix))
          const body = (await send(`${served.url}/metrics`, "GET", {})).body
          const start = body.indexOf("<table class=\"totals\">")
          const table = body.slice(start, body.indexOf("</table>", start))
          const classesOf = (row: string) => [...row.matchAll(/<t[hd](?=[\s>])(?: class="([^"]*)")?[^>]*>/g)].map((m) => m[1] ?? "")
          const head = classesOf(/<thead>.*?<\/thead>/s.exec(table)![0])
          const rows = [...table.matchAll(/<tr><td>.*?<\/tr>/gs)].map((m) => classesOf(m[0]))
          assert.isAtLeast(rows.length, 1, JSON.stringify(steps))
          assert.strictEqual(head.length, History.events.length + 1)
          for (const row of rows) assert.deepStrictEqual(row, head, JSON.stringify(steps))
        }
      ),
      { numRuns: Math.max(8, Math.round(runs / 4)) }
    )
  })

  it("a bulk delete acts only on the form its preview signed: another time, cursor or list of digests is asked again, nothing deleted", async () => {
    type Tamper = "none" | "a later time" | "an earlier time" | "another cursor" | "a digest dropped"
    const unescape = (text: string) => text.replace(/&amp;/g, "&").replace(/&quot;/g, "\"")
    const field = (body: string, name: string) => unescape(new RegExp(`name="${name}" value="([^"]*)"`).exec(body)![1]!)
    let n = 0
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 4 }),
        fc.constantFrom<Tamper>("none", "a later time", "an earlier time", "another cursor", "a digest dropped"),
        fc.integer({ min: 1, max: 100_000 }),
        async (count, tamper, by) => {
          const prefix = RedisTest.uniquePrefix(`signed${++n}`)
          const served = await harness.run(Web.serve({ prefix }))
          const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
          const digests = Array.from({ length: count }, (_, i) => `${prefix}:d${i}`)
          for (const digest of digests) await harness.run(Lock.lock(definition, { digest, jid: "j" }))
          const preview = await send(`${served.url}/locks/bulk/confirm?${new URLSearchParams({ pattern: `${prefix}:*` })}`, "GET", {})
          const action = unescape(/<form method="post" action="([^"]+)"/.exec(preview.body)![1]!)
          const fields = { digests: field(preview.body, "digests"), at: field(preview.body, "at"), next: field(preview.body, "next") }
          if (tamper === "a later time") fields.at = String(Number(fields.at) + by)
          if (tamper === "an earlier time") fields.at = String(Math.max(0, Number(fields.at) - by))
          if (tamper === "another cursor") fields.next = String(by)
          if (tamper === "a digest dropped") fields.digests = fields.digests.split("\n").slice(1).join("\n") || `${prefix}:other`
          const session = await send(`${served.url}/api/session`, "GET", {})
          const answer = await send(
            `${served.url}${action}`,
            "POST",
            { cookie: session.cookie!, "content-type": "application/x-www-form-urlencoded" },
            new URLSearchParams({ _csrf: (JSON.parse(session.body) as { csrf: string }).csrf, ...fields, confirm: field(preview.body, "confirm") }).toString()
          )
          const trace = `${JSON.stringify({ count, tamper, by })}: ${answer.location}`
          assert.strictEqual(answer.status, 303, trace)
          const left = await Promise.all(digests.map(async (name) => (await harness.run(harness.store.fetch({ prefix, name }))).holders.length))
          if (tamper === "none") {
            assert.deepStrictEqual(left, digests.map(() => 0), trace)
            return
          }
          assert.deepStrictEqual(left, digests.map(() => 1), trace)
          const goesTo = new URL(answer.location!, served.url)
          assert.deepStrictEqual([goesTo.pathname, goesTo.searchParams.get("changed")], ["/locks/bulk/confirm", "1"], trace)
        }
      ),
      { numRuns: runs }
    )
  })

  it("a bulk delete walks a filter of any size once: each confirmed page goes on to the preview of the page after it", async () => {
    const unescape = (text: string) => text.replace(/&amp;/g, "&").replace(/&quot;/g, "\"")
    const field = (body: string, name: string) => unescape(new RegExp(`name="${name}" value="([^"]*)"`).exec(body)![1]!)
    let n = 0
    await fc.assert(
      // Over 128 members the index is a skiplist, which ZSCAN answers a page at a time (a smaller one comes whole): a
      // count below the size makes several pages.
      fc.asyncProperty(fc.integer({ min: 130, max: 300 }), fc.integer({ min: 20, max: 100 }), async (size, count) => {
        const prefix = RedisTest.uniquePrefix(`walk${++n}`)
        const served = await harness.run(Web.serve({ prefix }))
        await harness.run(Harness.seedMany(prefix, size))
        const session = await send(`${served.url}/api/session`, "GET", {})
        const csrf = (JSON.parse(session.body) as { csrf: string }).csrf
        let preview = await send(`${served.url}/locks/bulk/confirm?${new URLSearchParams({ pattern: `${prefix}:*`, count: String(count) })}`, "GET", {})
        let pages = 0
        const deleted = new Set<string>()
        for (;;) {
          assert.strictEqual(preview.status, 200, preview.body.slice(0, 300))
          const form = /<form method="post" action="([^"]+)"/.exec(preview.body)
          // A preview that read on to the end of the index and found nothing left: the walk is done.
          if (form === null) break
          const action = unescape(form[1]!)
          const next = field(preview.body, "next")
          const digests = field(preview.body, "digests")
          for (const digest of digests.split("\n")) deleted.add(digest)
          const answer = await send(
            `${served.url}${action}`,
            "POST",
            { cookie: session.cookie!, "content-type": "application/x-www-form-urlencoded" },
            new URLSearchParams({ _csrf: csrf, digests, at: field(preview.body, "at"), next, confirm: field(preview.body, "confirm") }).toString()
          )
          assert.strictEqual(answer.status, 303, answer.body)
          pages++
          const goesTo = new URL(answer.location!, served.url)
          // The walk resumes at the page's cursor; the last page goes to the list.
          assert.strictEqual(goesTo.pathname, next === "0" ? "/locks" : "/locks/bulk/confirm", `page ${pages}: ${answer.location}`)
          assert.strictEqual(goesTo.searchParams.get("cursor"), next === "0" ? null : next, `page ${pages}: ${answer.location}`)
          if (next === "0") break
          assert.isBelow(pages, size, "the walk does not end")
          preview = await send(`${served.url}${answer.location!}`, "GET", {})
        }
        // Every lock went.
        assert.strictEqual(deleted.size, size)
        const query = new URLSearchParams({ pattern: `${prefix}:*`, count: "1000" })
        const left = JSON.parse((await send(`${served.url}/api/locks?${query}`, "GET", {})).body) as {
          items: Array<unknown>
          next: string
        }
        assert.deepStrictEqual([left.items.length, left.next], [0, "0"])
      }),
      { numRuns: Math.max(4, Math.round(runs / 8)) }
    )
  })

  it("a reaper pass from the page runs for real only with its confirmation; a dry run, or an unconfirmed one, reaps nothing", async () => {
    type Confirm = "none" | "garbage" | "other" | "right"
    const field = (body: string, name: string) => new RegExp(`name="${name}" value="([^"]*)"`).exec(body)?.[1]
    let n = 0
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom<string | undefined>("0", "false", "1", undefined),
        fc.constantFrom<Confirm>("none", "garbage", "other", "right"),
        async (dryRun, confirm) => {
          const prefix = RedisTest.uniquePrefix(`reap${++n}`)
          const served = await harness.run(Web.serve({ prefix }))
          // Locks whose TTL passed: index members a pass for real removes, and a dry run only counts.
          const expired = LockOptions.unsafeMake({ lock: "until_expired", lockPrefix: prefix, lockTtl: 20 })
          const digests = [0, 1].map((i) => `${prefix}:e${i}`)
          for (const digest of digests) await harness.run(Lock.lock(expired, { digest, jid: "e" }))
          const live = `${prefix}:live`
          await harness.run(Lock.lock(LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix }), { digest: live, jid: "l" }))
          await new Promise((resolve) => setTimeout(resolve, 40))
          const indexed = async () =>
            Promise.all([...digests, live].map(async (name) => (await harness.run(harness.store.fetch({ prefix, name }))).indexScore !== undefined))
          const before = await indexed()
          let value: string | undefined
          if (confirm === "garbage") value = "0".repeat(43)
          // A confirmation of this server, but for another change: a delete of the live lock.
          if (confirm === "other") value = field((await send(`${served.url}/lock/delete/confirm?digest=${encodeURIComponent(live)}`, "GET", {})).body, "confirm")
          if (confirm === "right") value = field((await send(`${served.url}/reaper/confirm`, "GET", {})).body, "confirm")
          const session = await send(`${served.url}/api/session`, "GET", {})
          const fields: Record<string, string> = { _csrf: (JSON.parse(session.body) as { csrf: string }).csrf }
          if (dryRun !== undefined) fields.dryRun = dryRun
          if (value !== undefined) fields.confirm = value
          const answer = await send(
            `${served.url}/reaper`,
            "POST",
            { cookie: session.cookie!, "content-type": "application/x-www-form-urlencoded" },
            new URLSearchParams(fields).toString()
          )
          assert.strictEqual(answer.status, 303, answer.body)
          const forReal = dryRun === "0" || dryRun === "false"
          const trace = `${JSON.stringify({ dryRun, confirm })}: ${answer.location}`
          const goesTo = new URL(answer.location!, served.url).pathname
          assert.strictEqual(goesTo, forReal && confirm !== "right" ? "/reaper/confirm" : "/reaper", trace)
          // The expired locks' members go exactly with a pass for real; the live lock stays whatever happens.
          assert.deepStrictEqual(before, [true, true, true], trace)
          assert.deepStrictEqual(await indexed(), forReal && confirm === "right" ? [false, false, true] : [true, true, true], trace)
        }
      ),
      { numRuns: Math.max(8, Math.round(runs / 2)) }
    )
  })

  it("the list shows every lock whose name an address can carry, and counts the others without listing them", async () => {
    const prefix = RedisTest.uniquePrefix("web-long")
    const served = await harness.run(Web.serve({ prefix }))
    // A name's length in its URL encoding, around the bound: a few characters that encode long ("é" to 6, " " to 3),
    // then "a"s to the length wanted.
    const name = fc.record({
      lead: fc.array(fc.constantFrom("a", "\u00e9", " ", "/"), { maxLength: 6 }),
      encoded: fc.oneof(fc.integer({ min: maxNameLength - 3, max: maxNameLength + 3 }), fc.integer({ min: 100, max: maxNameLength + 200 }))
    })
    let n = 0
    await fc.assert(
      fc.asyncProperty(fc.array(name, { minLength: 1, maxLength: 6 }), async (specs) => {
        const run = `${prefix}:r${++n}`
        const names = specs.map((spec, i) => {
          const head = `${run}:${i}${spec.lead.join("")}`
          return head + "a".repeat(Math.max(0, spec.encoded - encodeURIComponent(head).length))
        })
        for (const [i, lockName] of names.entries()) {
          await harness.run(harness.store.lock({ prefix, name: lockName }, { jid: `j${i}`, limit: 1, ttlMs: 3_600_000, leaseMs: 0, info: "", fenced: false }))
        }
        const listed: Array<string> = []
        let omitted = 0
        let cursor = "0"
        do {
          const answer = await send(`${served.url}/api/locks?pattern=${encodeURIComponent(`${run}:*`)}&count=1000&cursor=${cursor}`, "GET", {})
          assert.strictEqual(answer.status, 200, answer.body.slice(0, 300))
          const page = JSON.parse(answer.body) as { next: string; omitted: number; items: Array<{ name: string }> }
          listed.push(...page.items.map((item) => item.name))
          omitted += page.omitted
          cursor = page.next
        } while (cursor !== "0")
        const fits = names.filter((lockName) => encodeURIComponent(lockName).length <= maxNameLength)
        assert.deepStrictEqual(listed.sort(), fits.sort())
        assert.strictEqual(omitted, names.length - fits.length)
      }),
      { numRuns: runs }
    )
  })
})

// The stylesheet's rules at a wide viewport (the @media blocks, for narrow ones, left out): selector → declarations.
const wideRules = (css: string): Array<{ readonly selector: string; readonly declarations: Map<string, string> }> =>
  css.replace(/@media[^{]*\{(?:[^{}]*\{[^{}]*\})*[^{}]*\}/g, "").split("}").flatMap((rule) => {
    const [selectors, body] = rule.split("{")
    if (body === undefined) return []
    const declarations = new Map(body.split(";").filter((d) => d.includes(":")).map((d) => {
      const at = d.indexOf(":")
      return [d.slice(0, at).trim(), d.slice(at + 1).trim()] as const
    }))
    return selectors!.split(",").map((selector) => ({ selector: selector.trim(), declarations }))
  })

/** An element as a selector meets it: its tag and classes. */
interface Element {
  readonly tag: string
  readonly classes: ReadonlyArray<string>
}
const compoundMatches = (compound: string, element: Element) => {
  const [tag, ...classes] = compound.split(".")
  return (tag === "" || tag === element.tag) && classes.every((c) => element.classes.includes(c))
}
// Descendant selectors only (all the stylesheet uses): the last compound is the element, the others its ancestors.
const selectorMatches = (selector: string, element: Element, ancestors: ReadonlyArray<Element>) => {
  const compounds = selector.split(/\s+/)
  if (compounds.some((c) => !/^[a-z0-9]*(\.[a-z0-9-]+)*$/.test(c)) || !compoundMatches(compounds.at(-1)!, element)) return false
  let at = 0
  for (const compound of compounds.slice(0, -1)) {
    while (at < ancestors.length && !compoundMatches(compound, ancestors[at]!)) at++
    if (at++ >= ancestors.length) return false
  }
  return true
}
/** The declarations applying to an element at a wide viewport, later rules winning (no selector here outranks another). */
const declared = (css: string, element: Element, ancestors: ReadonlyArray<Element>) => {
  const out = new Map<string, string>()
  for (const rule of wideRules(css)) {
    if (selectorMatches(rule.selector, element, ancestors)) for (const [k, v] of rule.declarations) out.set(k, v)
  }
  return out
}
const classesOf = (tag: string) => /class="([^"]*)"/.exec(tag)?.[1]?.split(/\s+/) ?? []

describe("the admin UI's layout, by property", () => {
  // At 1280 px the Unlock button stays within its table's box whatever a jid's length: the jid's cell lets its text
  // break anywhere (a jid without a break adds no width beyond the cell's minimum), and the actions cell sticks to the
  // right edge of the table's scroll box. Stated over the lock page's HTML and the stylesheet it links (a browser
  // tier test measures the boxes themselves).
  const layoutProperty = (label: string, check: (cells: Cells, run: string) => void) =>
    async () => {
      const prefix = RedisTest.uniquePrefix(`web-layout-${label}`)
      const served = await harness.run(Web.serve({ prefix }))
      const css = (await send(`${served.url}/assets/style.css`, "GET", {})).body
      const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
      let n = 0
      await fc.assert(
        fc.asyncProperty(fc.stringMatching(/^[a-z0-9:_-]{1,40}$/), fc.integer({ min: 1, max: 200 }), async (unit, times) => {
          const jid = unit.repeat(times).slice(0, 2_000)
          const digest = `${prefix}:l${++n}`
          await harness.run(Lock.lock(definition, { digest, jid }))
          const page = (await send(`${served.url}/lock?digest=${encodeURIComponent(digest)}`, "GET", {})).body
          const run = JSON.stringify({ length: jid.length })
          // The page's one stylesheet is the one read above (CSP: no inline style).
          assert.match(page, /<link rel="stylesheet" href="[^"]*\/assets\/style\.css">/, run)
          assert.notInclude(page, "style=", run)
          check(holderCells(css, page, run), run)
        }),
        { numRuns: Math.min(runs, 15) }
      )
    }

  it("any jid, of any length, is in a cell that breaks it anywhere: its length adds no width to the table", layoutProperty("jid", (cells, run) => {
    assert.include(["anywhere", "break-word"], cells.jid.get("overflow-wrap") ?? cells.jid.get("word-break"), `${run}: ${JSON.stringify([...cells.jid])}`)
    assert.notInclude(["nowrap", "pre"], cells.jid.get("white-space") ?? "normal", run)
  }))

  it("whatever the jid, its Unlock button's cell sticks, opaque, to the right edge of the table's scroll box", layoutProperty("actions", (cells, run) => {
    assert.strictEqual(cells.scroll.get("overflow-x"), "auto", run)
    assert.strictEqual(cells.actions.get("position"), "sticky", `${run}: ${JSON.stringify([...cells.actions])}`)
    assert.strictEqual(cells.actions.get("right"), "0", run)
    // Opaque, so the cells scrolled under it do not show through its button.
    assert.isDefined(cells.actions.get("background") ?? cells.actions.get("background-color"), run)
  }))
})

/** The declarations applying to a holder row's jid cell, its Unlock button's cell, and the table's scroll box. */
interface Cells {
  readonly jid: Map<string, string>
  readonly actions: Map<string, string>
  readonly scroll: Map<string, string>
}
const holderCells = (css: string, page: string, run: string): Cells => {
  const table = /<div class="scroll">\s*(<table[^>]*>)[\s\S]*?<\/table>\s*<\/div>/.exec(page)
  assert.isNotNull(table, run)
  const row = /<tr data-jid="[^"]*">([\s\S]*?)<\/tr>/.exec(table![0])
  assert.isNotNull(row, run)
  const cells = Array.from(row![1]!.matchAll(/(<td[^>]*>)([\s\S]*?)<\/td>/g))
  const jidCell = cells.find(([, tag]) => classesOf(tag!).includes("jid"))
  const unlockCell = cells.find(([, , content]) => content!.includes(">Unlock</button>"))
  assert.isDefined(jidCell, run)
  assert.isDefined(unlockCell, run)
  const ancestors: Array<Element> = [
    { tag: "tr", classes: [] },
    { tag: "tbody", classes: [] },
    { tag: "table", classes: classesOf(table![1]!) },
    { tag: "div", classes: ["scroll"] },
    { tag: "main", classes: [] },
    { tag: "body", classes: [] },
    { tag: "html", classes: [] }
  ]
  return {
    jid: declared(css, { tag: "td", classes: classesOf(jidCell![1]!) }, ancestors),
    actions: declared(css, { tag: "td", classes: classesOf(unlockCell![1]!) }, ancestors),
    scroll: declared(css, ancestors[3]!, ancestors.slice(4))
  }
}

describe("the admin UI's gate, by property", () => {
  type Fate = "succeed" | "fail" | "die" | "drop"
  it("whatever its requests do (served, failed, died, dropped waiting or running), each gives its place back", async () => {
    const settle = async (done: () => boolean) => {
      for (let i = 0; i < 2000 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 1))
    }
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 0, max: 3 }),
        fc.array(fc.constantFrom<Fate>("succeed", "fail", "die", "drop"), { minLength: 1, maxLength: 8 }),
        async (concurrency, queue, fates) => {
          const gate = Gate.make(concurrency, queue)
          const open = Effect.runSync(Deferred.make<void>())
          const ending = (fate: Fate, i: number) =>
            fate === "fail" ? Effect.fail(`failed ${i}`) : fate === "die" ? Effect.die(`died ${i}`) : Effect.succeed(i)
          const fibers = fates.map((fate, i) => Effect.runFork(gate.run(Effect.andThen(Deferred.await(open), ending(fate, i)))))
          const room = Math.min(fates.length, concurrency + queue)
          await settle(() => gate.admitted() === room)
          assert.strictEqual(gate.admitted(), room)
          // Dropped (the client went): those running and those waiting for a turn alike.
          for (const [i, fate] of fates.entries()) if (fate === "drop") await Effect.runPromise(Fiber.interrupt(fibers[i]!))
          Effect.runSync(Deferred.succeed(open, undefined))
          const exits = await Promise.all(fibers.map((fiber) => Effect.runPromise(Fiber.await(fiber))))
          for (const [i, exit] of exits.entries()) {
            if (i >= room) {
              const busy = Exit.isFailure(exit) && exit.cause.reasons.some((r) => r._tag === "Fail" && r.error instanceof Gate.Busy)
              assert.isTrue(busy, `request ${i} beyond the room`)
            } else if (fates[i] === "succeed") assert.deepStrictEqual(exit, Exit.succeed(i))
            else assert.isTrue(Exit.isFailure(exit), `request ${i} (${fates[i]})`)
          }
          // Every place is back: a burst as large as the gate is served whole.
          assert.strictEqual(gate.admitted(), 0)
          const burst = await Promise.all(
            Array.from({ length: concurrency + queue }, (_, i) => Effect.runPromise(gate.run(Effect.succeed(i))))
          )
          assert.strictEqual(burst.length, concurrency + queue)
        }
      ),
      { numRuns: runs * 2 }
    )
  })
})

describe("the admin UI's gate, by property: its turns", () => {
  it("at most `concurrency` requests run at once; the `queue` more it admits wait for a turn, and each gets one", async () => {
    const settle = async (done: () => boolean) => {
      for (let i = 0; i < 2000 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 1))
    }
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 0, max: 3 }), fc.integer({ min: 1, max: 8 }), async (concurrency, queue, n) => {
        const gate = Gate.make(concurrency, queue)
        const open = Effect.runSync(Deferred.make<void>())
        let running = 0
        let most = 0
        const request = (i: number) =>
          Effect.acquireUseRelease(
            Effect.sync(() => {
              running++
              most = Math.max(most, running)
            }),
            () => Effect.as(Deferred.await(open), i),
            () => Effect.sync(() => running--)
          )
        const fibers = Array.from({ length: n }, (_, i) => Effect.runFork(gate.run(request(i))))
        const admitted = Math.min(n, concurrency + queue)
        await settle(() => gate.admitted() === admitted && running === Math.min(n, concurrency))
        const trace = JSON.stringify({ concurrency, queue, n, running, most })
        assert.strictEqual(running, Math.min(n, concurrency), trace)
        Effect.runSync(Deferred.succeed(open, undefined))
        const exits = await Promise.all(fibers.map((fiber) => Effect.runPromise(Fiber.await(fiber))))
        assert.strictEqual(exits.filter((exit) => Exit.isSuccess(exit)).length, admitted, trace)
        assert.isAtMost(most, concurrency, trace)
      }),
      { numRuns: runs * 2, examples: [[1, 1, 2]] }
    )
  })
})

describe("the admin UI's signed results, by property", () => {
  // A change's result rides in the address after its redirect: shown only when this server signed it for that page.
  // Anything else (another server's secret, another page, a body or a MAC altered, no MAC) shows nothing.
  it("a result unseals exactly on the page and server that sealed it, unaltered; anything else is nothing", () => {
    const bytes = fc.uint8Array({ minLength: 32, maxLength: 32 })
    const payload = fc.record({
      action: fc.constantFrom("delete", "unlock", "bulk-delete", "reap"),
      at: fc.nat(),
      removed: fc.nat({ max: 10_000 }),
      note: fc.string({ maxLength: 40 })
    })
    fc.assert(
      fc.property(bytes, bytes, fc.string({ maxLength: 60 }), fc.string({ maxLength: 60 }), payload, fc.nat(), (secret, other, bind, otherBind, value, at) => {
        const sealed = Security.seal(secret, bind, value)
        assert.deepStrictEqual(Security.unseal(secret, bind, sealed), value)
        if (Buffer.compare(Buffer.from(secret), Buffer.from(other)) !== 0) {
          assert.isUndefined(Security.unseal(other, bind, sealed), "another server's secret")
        }
        if (otherBind !== bind) assert.isUndefined(Security.unseal(secret, otherBind, sealed), "another page")
        const dot = sealed.lastIndexOf(".")
        const body = sealed.slice(0, dot)
        const mac = sealed.slice(dot + 1)
        // The body made up (a payload of one's own choosing) under the MAC of another.
        const forged = Buffer.from(JSON.stringify({ ...value, removed: value.removed + 1 })).toString("base64url")
        assert.isUndefined(Security.unseal(secret, bind, `${forged}.${mac}`), "a body altered")
        const flipped = mac.slice(0, at % mac.length) + (mac[at % mac.length] === "A" ? "B" : "A") + mac.slice(at % mac.length + 1)
        assert.isUndefined(Security.unseal(secret, bind, `${body}.${flipped}`), "a MAC altered")
        assert.isUndefined(Security.unseal(secret, bind, `${body}.`), "no MAC")
        assert.isUndefined(Security.unseal(secret, bind, body), "no dot")
      }),
      { numRuns: runs * 5 }
    )
  })
  // A CSRF token is minted for one browser and one principal: another principal (another user behind the same
  // browser's cookie, or none) or another browser's cookie never has the same token.
  it("a CSRF token is one browser's and one principal's: any other browser or principal has another", () => {
    const bytes = fc.uint8Array({ minLength: 32, maxLength: 32 })
    const who = fc.option(fc.string({ minLength: 1, maxLength: 20 }), { nil: undefined })
    fc.assert(
      fc.property(bytes, fc.string({ maxLength: 40 }), fc.string({ maxLength: 40 }), who, who, (secret, browser, otherBrowser, a, b) => {
        const token = Security.csrfToken(secret, browser, a)
        assert.strictEqual(Security.csrfToken(secret, browser, a), token)
        if (a !== b) assert.notStrictEqual(Security.csrfToken(secret, browser, b), token, `principals ${a} and ${b}`)
        if (otherBrowser !== browser) assert.notStrictEqual(Security.csrfToken(secret, otherBrowser, a), token, "another browser")
      }),
      { numRuns: runs * 5, examples: [[new Uint8Array(32), "cookie", "other", "alice", "bob"], [new Uint8Array(32), "cookie", "x", "alice", undefined]] }
    )
  })
})
