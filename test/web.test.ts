/**
 * The admin UI's guards, over HTTP: a token off the loopback (401 without it, for every route), a change only as a
 * POST with the CSRF token from the same origin, read-only refusing every change, loopback Host names only without a
 * token, a malformed digest, pattern or cursor answered 400, options decoded where given, and every change counted.
 */
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as Metric from "effect/Metric"
import * as Redacted from "effect/Redacted"
import * as References from "effect/References"
import * as Result from "effect/Result"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { createServer, request as httpRequest } from "node:http"
import type { AddressInfo } from "node:net"
import { Queue } from "bullmq"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as BullMQ from "../src/adapters/BullMQ.js"
import * as History from "../src/History.js"
import { JobQueue } from "../src/JobQueue.js"
import * as Lock from "../src/Lock.js"
import * as Metrics from "../src/Metrics.js"
import * as LockOptions from "../src/Options.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/testing/RedisServer.js"
import * as Web from "../src/Web.js"
import * as Pages from "../src/web/Pages.js"
import * as RedisTest from "./support/redis.js"
import * as Harness from "./support/web.js"

let harness: Harness.Harness
beforeAll(async () => {
  harness = await Harness.start()
})
afterAll(() => harness?.close())

const token = Redacted.make("a-token-of-32-characters-or-so-x")

/** A raw request (fetch will not send a Host of our choosing). */
const send = (url: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}) =>
  new Promise<{ status: number; headers: Record<string, string | Array<string> | undefined>; body: string }>((resolve, reject) => {
    const req = httpRequest(url, { method: options.method ?? "GET", headers: options.headers ?? {} }, (res) => {
      let body = ""
      res.on("data", (chunk: Buffer) => {
        body += chunk.toString()
      })
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }))
    })
    req.on("error", reject)
    req.end(options.body)
  })

/** The CSRF cookie and token a page hands out. */
const session = async (base: string, headers: Record<string, string> = {}) => {
  const answer = await send(`${base}/api/session`, { headers })
  const cookie = String(answer.headers["set-cookie"] ?? "").split(";")[0]!
  return { cookie, csrf: (JSON.parse(answer.body) as { csrf: string }).csrf, canChange: (JSON.parse(answer.body) as { canChange: boolean }).canChange }
}

/** The page of a form: the value of its hidden field `name`. */
const hidden = (body: string, name: string) => {
  const match = new RegExp(`name="${name}" value="([^"]*)"`).exec(body)
  assert.isNotNull(match, `no ${name} field in ${body.slice(0, 2000)}`)
  return match![1]!.replace(/&amp;/g, "&").replace(/&quot;/g, "\"").replace(/&#39;/g, "'")
}

/** A bulk preview's form: every hidden field it posts (the digests, when they were read, where the walk goes on, the confirmation). */
const bulkFields = (body: string) => ({
  digests: hidden(body, "digests"),
  at: hidden(body, "at"),
  next: hidden(body, "next"),
  confirm: hidden(body, "confirm")
})

const raw = <A>(f: (redis: import("ioredis").Redis) => Promise<A>) =>
  harness.run(Effect.promise(async () => {
    const { Redis: IORedis } = await import("ioredis")
    const redis = new IORedis(harness.url)
    try {
      return await f(redis)
    } finally {
      redis.disconnect()
    }
  }))

const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString()
const formHeaders = { "content-type": "application/x-www-form-urlencoded" }

const actions = (action: string, outcome: string) =>
  Metric.value(Metric.withAttributes(Metrics.adminActions, { action, outcome })).pipe(
    Effect.map((state) => state.count),
    Effect.runSync
  )

describe("the admin UI's guards", () => {
  it("off the loopback a token is required for every request, by header, or once in the address (then a cookie)", async () => {
    const prefix = RedisTest.uniquePrefix("web-token")
    await harness.run(Harness.seed(prefix))
    const refused = await harness.run(Effect.flip(Web.serve({ host: "0.0.0.0", prefix })))
    assert.strictEqual(refused._tag, "WebError")
    assert.include(refused.message, "needs a token")
    const served = await harness.run(Web.serve({ host: "0.0.0.0", prefix, token }))
    const base = `http://127.0.0.1:${served.port}`
    for (const path of ["/", "/locks", `/lock?digest=${prefix}:mail0`, "/reaper", "/metrics", "/api/locks", "/api/openapi.json", "/assets/style.css", "/api/session", "/nothing/here"]) {
      const answer = await send(`${base}${path}`)
      assert.strictEqual(answer.status, 401, path)
      assert.strictEqual(answer.headers["www-authenticate"], "Bearer")
      assert.strictEqual((await send(`${base}${path}`, { headers: { authorization: "Bearer wrong" } })).status, 401, path)
    }
    for (const path of ["/lock/unlock", "/lock/delete", "/reaper", "/api/reaper"]) {
      assert.strictEqual((await send(`${base}${path}`, { method: "POST", headers: formHeaders, body: form({ digest: `${prefix}:mail0` }) })).status, 401, path)
    }
    const bearer = { authorization: `Bearer ${Redacted.value(token)}` }
    assert.strictEqual((await send(`${base}/locks`, { headers: bearer })).status, 200)
    // Once in the address: a cookie, and the token taken out of the address.
    const once = await send(`${base}/locks?token=${Redacted.value(token)}&type=until_executed`)
    assert.strictEqual(once.status, 303)
    assert.strictEqual(once.headers["location"], "/locks?type=until_executed")
    const cookie = String(once.headers["set-cookie"]).split(";")[0]!
    assert.include(String(once.headers["set-cookie"]), "HttpOnly")
    assert.include(String(once.headers["set-cookie"]), "SameSite=Strict")
    assert.strictEqual((await send(`${base}/locks`, { headers: { cookie } })).status, 200)
    // With the bearer header a change needs no CSRF token (a browser never sends it on its own), but still the origin.
    const unlocked = await send(`${base}/api/lock/unlock`, {
      method: "POST",
      headers: { ...bearer, "content-type": "application/json" },
      body: JSON.stringify({ digest: `${prefix}:mail0`, jid: "m0" })
    })
    assert.strictEqual(unlocked.status, 200, unlocked.body)
    assert.deepStrictEqual((JSON.parse(unlocked.body) as { removed: Array<{ jid: string }> }).removed.map((r) => r.jid), ["m0"])
    const crossSite = await send(`${base}/api/lock/delete`, {
      method: "POST",
      headers: { ...bearer, "content-type": "application/json", origin: "http://evil.example", host: `127.0.0.1:${served.port}` },
      body: JSON.stringify({ digest: `${prefix}:mail3` })
    })
    assert.strictEqual(crossSite.status, 403)
    // With the cookie alone, a change needs the CSRF token.
    const noCsrf = await send(`${base}/lock/delete`, { method: "POST", headers: { ...formHeaders, cookie }, body: form({ digest: `${prefix}:mail3` }) })
    assert.strictEqual(noCsrf.status, 403)
    assert.strictEqual((await harness.run(harness.store.fetch({ prefix, name: `${prefix}:mail3` }))).holders.length, 1)
    const badToken = await harness.run(Effect.flip(Web.router({ token: Redacted.make("short") })))
    assert.include(badToken.message, "token")
  })

  it("a change is a POST with the CSRF token from the same origin; read-only refuses every change; GET never changes", async () => {
    const prefix = RedisTest.uniquePrefix("web-csrf")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const { cookie, csrf, canChange } = await session(served.url)
    assert.isTrue(canChange)
    const refusedBefore = actions("delete", "refused")
    const doneBefore = actions("delete", "done")
    const del = (headers: Record<string, string>, fields: Record<string, string>) =>
      send(`${served.url}/lock/delete`, { method: "POST", headers: { ...formHeaders, ...headers }, body: form(fields) })
    const held = async (name: string) => (await harness.run(harness.store.fetch({ prefix, name }))).holders.length
    assert.strictEqual((await del({}, { digest: `${prefix}:mail0` })).status, 403, "no cookie, no token")
    assert.strictEqual((await del({ cookie }, { digest: `${prefix}:mail0` })).status, 403, "no token")
    assert.strictEqual((await del({ cookie }, { digest: `${prefix}:mail0`, _csrf: "0".repeat(64) })).status, 403, "a wrong token")
    assert.strictEqual((await del({ cookie, origin: "http://evil.example" }, { digest: `${prefix}:mail0`, _csrf: csrf })).status, 403, "another origin")
    assert.strictEqual((await del({ cookie, "sec-fetch-site": "cross-site" }, { digest: `${prefix}:mail0`, _csrf: csrf })).status, 403, "another site")
    assert.strictEqual(await held(`${prefix}:mail0`), 1)
    assert.strictEqual(actions("delete", "refused") - refusedBefore, 5)
    const confirm = await send(`${served.url}/lock/delete/confirm?digest=${prefix}:mail0`, { headers: { cookie } })
    const allowed = await del(
      { cookie, origin: served.url, "sec-fetch-site": "same-origin" },
      { digest: `${prefix}:mail0`, _csrf: csrf, confirm: hidden(confirm.body, "confirm") }
    )
    assert.strictEqual(allowed.status, 303)
    assert.include((await send(`${served.url}${String(allowed.headers["location"])}`, { headers: { cookie } })).body, "removed 1 holder")
    assert.strictEqual(await held(`${prefix}:mail0`), 0)
    assert.strictEqual(actions("delete", "done") - doneBefore, 1)
    // The token in a header works as well as in the form (the JSON API).
    const api = await send(`${served.url}/api/lock/unlock`, {
      method: "POST",
      headers: { cookie, "x-csrf-token": csrf, "content-type": "application/json" },
      body: JSON.stringify({ digest: `${prefix}:mail3`, jid: "m3" })
    })
    assert.strictEqual(api.status, 200)
    // GET on a change's path changes nothing: there is no such route.
    assert.strictEqual((await send(`${served.url}/lock/delete?digest=${prefix}:bill0&_csrf=${csrf}`, { headers: { cookie } })).status, 404)
    assert.strictEqual(await held(`${prefix}:bill0`), 1)
    // A foreign Host (DNS rebinding) reaches nothing on a loopback server without a token.
    assert.strictEqual((await send(`${served.url}/locks`, { headers: { host: "evil.example" } })).status, 403)
    assert.strictEqual((await send(`${served.url}/locks`, { headers: { host: `localhost:${served.port}` } })).status, 200)

    const readOnly = await harness.run(Web.serve({ prefix, readOnly: true }))
    const ro = await session(readOnly.url)
    assert.isFalse(ro.canChange)
    assert.notInclude((await send(`${readOnly.url}/lock?digest=${prefix}:bill1`)).body, "<form method=\"post\"")
    for (const path of ["/lock/unlock", "/lock/delete", "/reaper", "/api/lock/delete", "/api/lock/unlock", "/api/reaper"]) {
      const answer = await send(`${readOnly.url}${path}`, {
        method: "POST",
        headers: { ...formHeaders, cookie: ro.cookie },
        body: form({ digest: `${prefix}:bill1`, jid: "b1", _csrf: ro.csrf, dryRun: "0" })
      })
      assert.strictEqual(answer.status, 403, path)
    }
    assert.strictEqual(await held(`${prefix}:bill1`), 1)
  })

  it("authorize decides per request: forbidden, read-only or full, and who is logged; a hook that throws refuses", async () => {
    const prefix = RedisTest.uniquePrefix("web-authorize")
    await harness.run(Harness.seed(prefix))
    const base = await harness.run(Harness.mountedInRouter({
      prefix,
      authorize: (request) => {
        const role = request.headers["x-role"]
        if (role === "boom") throw new Error("the hook broke")
        if (role === "admin") return Promise.resolve({ access: "full" as const, who: "alice" })
        if (role === "viewer") return Effect.succeed("read-only" as const)
        return "forbidden"
      }
    }))
    assert.strictEqual((await send(`${base}/locks`)).status, 403)
    assert.strictEqual((await send(`${base}/locks`, { headers: { "x-role": "boom" } })).status, 500)
    assert.isFalse((await session(base, { "x-role": "viewer" })).canChange)
    const admin = await session(base, { "x-role": "admin" })
    assert.isTrue(admin.canChange)
    const done = await send(`${base}/lock/unlock`, {
      method: "POST",
      headers: { ...formHeaders, cookie: admin.cookie, "x-role": "admin" },
      body: form({ digest: `${prefix}:bill2`, jid: "b2", _csrf: admin.csrf })
    })
    assert.strictEqual(done.status, 303)
    assert.strictEqual((await harness.run(harness.store.fetch({ prefix, name: `${prefix}:bill2` }))).holders.length, 0)
  })

  it("a CSRF token minted for one principal is refused for another on the same browser cookie", async () => {
    const prefix = RedisTest.uniquePrefix("web-csrf-who")
    await harness.run(Harness.seed(prefix))
    // Two admins, both with full access, told apart by the hook alone (as a proxy's user header would).
    const base = await harness.run(Harness.mountedInRouter({
      prefix,
      authorize: (request) => ({ access: "full" as const, who: String(request.headers["x-user"] ?? "nobody") })
    }))
    const alice = await session(base, { "x-user": "alice" })
    const bob = await session(base, { "x-user": "bob", cookie: alice.cookie })
    assert.notStrictEqual(bob.csrf, alice.csrf, "one cookie, two principals: two tokens")
    const held = async (name: string) => (await harness.run(harness.store.fetch({ prefix, name }))).holders.length
    for (const [user, csrf] of [["bob", alice.csrf], ["alice", bob.csrf]] as const) {
      const answer = await send(`${base}/api/lock/unlock`, {
        method: "POST",
        headers: { ...formHeaders, cookie: alice.cookie, "x-user": user, "x-csrf-token": csrf },
        body: form({ digest: `${prefix}:bill2`, jid: "b2" })
      })
      assert.strictEqual(answer.status, 403, `${user} with the other's token: ${answer.body}`)
    }
    assert.strictEqual(await held(`${prefix}:bill2`), 1)
    const own = await send(`${base}/api/lock/unlock`, {
      method: "POST",
      headers: { ...formHeaders, cookie: alice.cookie, "x-user": "bob", "x-csrf-token": bob.csrf },
      body: form({ digest: `${prefix}:bill2`, jid: "b2" })
    })
    assert.strictEqual(own.status, 200, own.body)
    assert.strictEqual(await held(`${prefix}:bill2`), 0)
  })

  it("a malformed digest, pattern, cursor or filter is a 400 naming it; options are decoded where given", async () => {
    const prefix = RedisTest.uniquePrefix("web-input")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    for (const [path, says] of [
      ["/lock", "give the digest"],
      ["/lock?digest=nope", `starts with ${prefix}:`],
      [`/lock?digest=${prefix}:`, "empty"],
      [`/lock?digest=${prefix}:a%00b`, "control"],
      [`/locks?pattern=other:*`, "matches no lock"],
      [`/locks?cursor=abc`, "cursor"],
      [`/locks?cursor=-1`, "cursor"],
      [`/locks?count=0`, "count"],
      [`/locks?count=1.5`, "count"],
      [`/locks?count=100000`, "count"],
      [`/locks?age=-1`, "age"],
      [`/locks?age=NaN`, "age"],
      [`/locks?type=fastest`, "type"],
      [`/api/lock?digest=%3Cscript%3E`, `starts with ${prefix}:`]
    ] as const) {
      const answer = await send(`${served.url}${path}`)
      assert.strictEqual(answer.status, 400, path)
      assert.include(answer.body.replace(/&#39;/g, "'"), says, path)
      assert.notInclude(answer.body, "<script>", path)
    }
    // A body over the limit is refused before it is read whole.
    const { cookie, csrf } = await session(served.url)
    const huge = await send(`${served.url}/lock/delete`, {
      method: "POST",
      headers: { ...formHeaders, cookie },
      body: form({ digest: `${prefix}:bill0`, _csrf: csrf, pad: "x".repeat(100_000) })
    })
    assert.strictEqual(huge.status, 413)
    for (const [options, field] of [
      [{ pageSize: 0 }, "pageSize"],
      [{ pageSize: 1.5 }, "pageSize"],
      [{ pageSize: Number.NaN }, "pageSize"],
      [{ pageSize: 5000 }, "pageSize"],
      [{ prefix: "a b" }, "prefix"],
      [{ readOnly: "yes" }, "readOnly"],
      [{ authorize: "admin" }, "authorize"],
      [{ trustProxy: "yes" }, "trustProxy"],
      [{ secret: "a plain string of more than thirty-two characters" }, "secret"],
      [{ secret: Redacted.make("short") }, "secret"],
      [{ colour: "red" }, "colour"]
    ] as ReadonlyArray<readonly [Web.Options, string]>) {
      const error = await harness.run(Effect.flip(Web.router(options)))
      assert.strictEqual(error._tag, "InvalidLockOptions", field)
      assert.include(error.message, field)
    }
    for (const port of [-1, 65536, 1.5, Number.NaN]) {
      const error = await harness.run(Effect.flip(Web.serve({ port })))
      assert.include(error.message, "port", String(port))
    }
    const taken = await harness.run(Effect.flip(Web.serve({ port: served.port })))
    assert.strictEqual(taken._tag, "WebError")
    assert.include(taken.message, "cannot listen")
  })

  it("what an outsider found: no mount without its slash, no cursor past 64 bits, no Host that throws, no stray key", async () => {
    const prefix = RedisTest.uniquePrefix("web-edges")
    await harness.run(Harness.seed(prefix))
    // Mounted in an Effect router and asked without the trailing slash: every link stays under the mount.
    const mounted = await harness.run(Harness.mountedInRouter({ prefix }))
    const bare = await send(mounted)
    assert.strictEqual(bare.status, 200)
    assert.include(bare.body, `href="/admin/locks/assets/style.css"`)
    assert.include(bare.body, `action="/admin/locks/locks"`)
    assert.notInclude(bare.body, `href="/locks"`)
    assert.include(String(bare.headers["set-cookie"]), "Path=/admin/locks")
    const served = await harness.run(Web.serve({ prefix }))
    for (const cursor of ["18446744073709551616", "99999999999999999999"]) {
      const answer = await send(`${served.url}/api/locks?cursor=${cursor}`)
      assert.strictEqual(answer.status, 400, cursor)
      assert.include(answer.body, "cursor")
    }
    assert.strictEqual((await send(`${served.url}/api/locks?cursor=18446744073709551615`)).status, 200)
    for (const count of ["0x10", "%20100", "1e2"]) assert.strictEqual((await send(`${served.url}/api/locks?count=${count}`)).status, 400, count)
    assert.strictEqual((await send(`${served.url}/api/locks?age=0x10`)).status, 400)
    // A Host that is no host name is refused, never an internal error; names are case-insensitive.
    for (const host of ["127.0.0.1:abc", "127.0.0.1:6601:80", "[::1]evil", "localhost@evil.com", "127.0.0.1 evil"]) {
      const answer = await send(`${served.url}/api/session`, { headers: { host } })
      assert.strictEqual(answer.status, 403, host)
      assert.isDefined(answer.headers["content-security-policy"], host)
    }
    assert.strictEqual((await send(`${served.url}/api/session`, { headers: { host: `LOCALHOST:${served.port}` } })).status, 200)
    // A path the UI does not have: 404 with the same headers.
    const missing = await send(`${served.url}/nothing/here`)
    assert.strictEqual(missing.status, 404)
    assert.isDefined(missing.headers["content-security-policy"])
    // A key of another type where a bucket or the pass journal would be: that part reads as empty, the page answers.
    const now = Date.now()
    await harness.run(Effect.promise(async () => {
      const { Redis: IORedis } = await import("ioredis")
      const raw = new IORedis(harness.url)
      await raw.set(`${prefix}:metrics:${now - (now % 60_000)}`, "someone else's")
      await raw.hset(`${prefix}:reaper:passes`, "x", "y")
      raw.disconnect()
    }))
    assert.strictEqual((await send(`${served.url}/metrics`)).status, 200)
    assert.strictEqual((await send(`${served.url}/reaper`)).status, 200)
    // A Redis error that is an answer (not a silence) is a 500 saying Redis refused, not "did not answer".
    await harness.run(Effect.promise(async () => {
      const { Redis: IORedis } = await import("ioredis")
      const raw = new IORedis(harness.url)
      await raw.set(`${prefix}:weird:LOCKED`, "a string")
      await raw.zadd(`${prefix}:digests`, 1, `${prefix}:weird`)
      raw.disconnect()
    }))
    const { cookie, csrf } = await session(served.url)
    const refused = await send(`${served.url}/api/lock/delete`, {
      method: "POST",
      headers: { cookie, "x-csrf-token": csrf, "content-type": "application/json" },
      body: JSON.stringify({ digest: `${prefix}:weird` })
    })
    assert.strictEqual(refused.status, 409, refused.body)
    // An index of another type: Redis refuses the scan, and the page says so (500), not that Redis was silent.
    const broken = RedisTest.uniquePrefix("web-broken")
    await harness.run(Effect.promise(async () => {
      const { Redis: IORedis } = await import("ioredis")
      const raw = new IORedis(harness.url)
      await raw.set(`${broken}:digests`, "not an index")
      raw.disconnect()
    }))
    const brokenServed = await harness.run(Web.serve({ prefix: broken }))
    const scan = await send(`${brokenServed.url}/api/locks`)
    assert.strictEqual(scan.status, 500)
    assert.strictEqual(JSON.parse(scan.body).error, "Redis refused the call")
    assert.include(JSON.parse(scan.body).message, "WRONGTYPE")
  })

  it("a Node handler whose Redis was down at its first request answers 503, and serves once Redis is back", async () => {
    const prefix = RedisTest.uniquePrefix("web-late")
    const scope = Effect.runSync(Scope.make())
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    await Effect.runPromise(server.kill)
    const admin = Web.nodeHandler({ redis: Redis.layer({ url: server.url, timeout: "1 second" }), prefix })
    const http = createServer(admin.handle)
    await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))
    const base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`
    const down = await send(`${base}/api/locks`)
    assert.strictEqual(down.status, 503)
    assert.include(JSON.parse(down.body).message, "not ready")
    const page = await send(`${base}/locks`)
    assert.strictEqual(page.status, 503)
    assert.include(page.body, "Redis did not answer")
    await Effect.runPromise(server.restart)
    const up = await send(`${base}/api/locks`)
    assert.strictEqual(up.status, 200, up.body)
    http.close()
    http.closeAllConnections()
    await admin.dispose()
    assert.strictEqual((await new Promise<number>((resolve) => {
      const again = createServer(admin.handle).listen(0, "127.0.0.1", async () => {
        const answer = await send(`http://127.0.0.1:${(again.address() as AddressInfo).port}/api/locks`)
        again.close()
        resolve(answer.status)
      })
    })), 503, "a disposed handler serves nothing")
    await Effect.runPromise(Scope.close(scope, Exit.void))
  })

  it("a Redis that does not answer is a 503 page naming it, never a hang", async () => {
    const prefix = RedisTest.uniquePrefix("web-down")
    const down = await Harness.start()
    const served = await down.run(Web.serve({ prefix }))
    await down.run(Effect.promise(async () => {
      const { Redis: IORedis } = await import("ioredis")
      const raw = new IORedis(down.url)
      await raw.call("CLIENT", "PAUSE", "8000", "ALL")
      raw.disconnect()
    }))
    const answer = await send(`${served.url}/locks`)
    assert.strictEqual(answer.status, 503)
    // Our deadline or ioredis' commandTimeout, both set to the timeout: whichever fires first on a busy machine.
    assert.match(answer.body, /no answer within|Command timed out/, answer.body)
    await down.close()
  })
})

describe("the admin UI's changes are safe to repeat and to look at first (issue 35)", () => {
  it("a change answers 303 See Other to its result page; reloading that page repeats nothing; a second submit says it found nothing", async () => {
    const prefix = RedisTest.uniquePrefix("web-prg")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const { cookie, csrf } = await session(served.url)
    const before = actions("unlock", "done")
    const nothingBefore = actions("unlock", "nothing")
    const post = () =>
      send(`${served.url}/lock/unlock`, {
        method: "POST",
        headers: { ...formHeaders, cookie },
        body: form({ digest: `${prefix}:mail0`, jid: "m0", _csrf: csrf })
      })
    const first = await post()
    assert.strictEqual(first.status, 303, first.body.slice(0, 500))
    const location = String(first.headers["location"])
    assert.match(location, /^\/lock\?digest=/)
    assert.strictEqual(actions("unlock", "done") - before, 1)
    assert.strictEqual((await harness.run(harness.store.fetch({ prefix, name: `${prefix}:mail0` }))).holders.length, 0)
    // The result page, loaded three times (a reload): the same message, and nothing more done.
    for (let i = 0; i < 3; i++) {
      const page = await send(`${served.url}${location}`, { headers: { cookie } })
      assert.strictEqual(page.status, 200)
      assert.include(page.body, "removed 1 holder")
      assert.include(page.body, "m0")
    }
    assert.strictEqual(actions("unlock", "done") - before, 1)
    // A result message cannot be made up: a result not signed by this server shows nothing.
    const made = Buffer.from(JSON.stringify({ action: "unlock", jid: "FORGED", at: 0, nothing: false, removed: 9, deleted: 0, revoked: 0 }))
    const forged = location.replace(/result=[^&]*/, `result=${made.toString("base64url")}.${"A".repeat(43)}`)
    const shown = await send(`${served.url}${forged}`, { headers: { cookie } })
    assert.strictEqual(shown.status, 200)
    assert.notInclude(shown.body, "FORGED")
    // The same form sent again (a double submit, or back and submit): it says it found nothing, and unlocks nothing.
    const second = await post()
    assert.strictEqual(second.status, 303)
    const again = await send(`${served.url}${String(second.headers["location"])}`, { headers: { cookie } })
    assert.include(again.body, "found nothing")
    assert.deepStrictEqual([actions("unlock", "done") - before, actions("unlock", "nothing") - nothingBefore], [1, 1])
  })

  it("the lock page's Recent events and /api/lock show the digest's activity log (lockEvents), every field as text", async () => {
    const prefix = RedisTest.uniquePrefix("web-events")
    const served = await harness.run(Web.serve({ prefix }))
    const digest = `${prefix}:0123abcd`
    const logged = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockEvents: true })
    await harness.run(Lock.lock(logged, { digest, jid: "first" }))
    await harness.run(Effect.flip(Lock.lock(logged, { digest, jid: "<script>x</script>" })))
    const page = await send(`${served.url}/lock?digest=${encodeURIComponent(digest)}`)
    assert.strictEqual(page.status, 200)
    const section = page.body.slice(page.body.indexOf("<h2>Recent events</h2>"))
    assert.match(section, /<td class="event">refused<\/td><td>queue<\/td><td class="jid">&lt;script&gt;x&lt;\/script&gt;<\/td><td class="jid">first<\/td>/)
    assert.include(section, `<td class="event">taken</td>`)
    assert.notInclude(page.body, "<script>")
    const api = JSON.parse((await send(`${served.url}/api/lock?digest=${encodeURIComponent(digest)}`)).body) as {
      events: Array<{ event: string; jid: string; holder?: string }>
    }
    assert.deepStrictEqual(api.events.map((e) => [e.event, e.jid, e.holder]), [
      ["refused", "<script>x</script>", "first"],
      ["taken", "first", undefined]
    ])
    // An unlock through the API is logged with who asked; a digest without a log says why there is none.
    const { cookie, csrf } = await session(served.url)
    const unlocked = await send(`${served.url}/api/lock/unlock`, {
      method: "POST",
      headers: { ...formHeaders, cookie, origin: served.url },
      body: form({ digest, jid: "first", _csrf: csrf })
    })
    assert.strictEqual(unlocked.status, 200, unlocked.body)
    const after = JSON.parse((await send(`${served.url}/api/lock?digest=${encodeURIComponent(digest)}`)).body) as {
      events: Array<{ event: string; who?: string }>
    }
    assert.strictEqual(after.events[0]!.event, "removed")
    assert.isString(after.events[0]!.who)
    const plain = await send(`${served.url}/lock?digest=${encodeURIComponent(`${prefix}:ffff`)}`)
    assert.include(plain.body, "lockEvents")
  })

  it("issue 47: a change from Web.serve (what unique-jobs web serves) names who made it in Recent events' by column: the web UI and the client's address, never unknown", async () => {
    const prefix = RedisTest.uniquePrefix("web-who")
    const digest = `${prefix}:0123abcd`
    const logged = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockEvents: true })
    await harness.run(Lock.lock(logged, { digest, jid: "first" }))
    const seen: Array<string | undefined> = []
    const served = await harness.run(Web.serve({
      prefix,
      authorize: (request) => {
        seen.push(request.remoteAddress)
        return "full"
      }
    }))
    const { cookie, csrf } = await session(served.url)
    const unlocked = await send(`${served.url}/lock/unlock`, {
      method: "POST",
      headers: { ...formHeaders, cookie, origin: served.url },
      body: form({ digest, jid: "first", _csrf: csrf })
    })
    assert.strictEqual(unlocked.status, 303, unlocked.body)
    const page = await send(`${served.url}/lock?digest=${encodeURIComponent(digest)}`)
    const row = /<tr><td>[^<]*<\/td><td class="event">removed<\/td>.*?<\/tr>/.exec(page.body)
    assert.isNotNull(row, page.body.slice(page.body.indexOf("Recent events")))
    const cells = [...row![0].matchAll(/<td[^>]*>(.*?)<\/td>/g)].map((m) => m[1])
    assert.strictEqual(cells[cells.length - 1], "web UI (127.0.0.1)")
    // authorize is told the client's address too (the Node bridge carries it).
    assert.isAbove(seen.length, 0)
    for (const address of seen) assert.strictEqual(address, "127.0.0.1")
  })

  it("issue 47: Recent events show a burst of refused duplicates as one row, with its count and the first one's time; what came before stays", async () => {
    const prefix = RedisTest.uniquePrefix("web-repeats")
    const digest = `${prefix}:0123abcd`
    const logged = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockEvents: true })
    await harness.run(Lock.lock(logged, { digest, jid: "first" }))
    for (let i = 0; i < 150; i++) await harness.run(Effect.flip(Lock.lock(logged, { digest, jid: `dup${i}` })))
    const served = await harness.run(Web.serve({ prefix }))
    const page = await send(`${served.url}/lock?digest=${encodeURIComponent(digest)}`)
    const section = page.body.slice(page.body.indexOf("<h2>Recent events</h2>"))
    const rows = [...section.matchAll(/<tr><td>(.*?)<\/td><td class="event">(.*?)<\/td><td>(\w+)<\/td><td class="jid">(.*?)<\/td>/g)]
    assert.deepStrictEqual(rows.map((m) => [m[2], m[4]]), [["refused <span class=\"count\">×150</span>", "dup149"], ["taken", "first"]])
    assert.match(rows[0]![1]!, /<small class="repeats">\(since \d{4}-\d\d-\d\dT[\d:.]+Z\)<\/small>/)
  })

  it("deleting a digest asks first on a page of its own naming what goes and which running holders are revoked; a confirmation acts only on what it named", async () => {
    const prefix = RedisTest.uniquePrefix("web-confirm")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const { cookie, csrf } = await session(served.url)
    const held = async (name: string) => (await harness.run(harness.store.fetch({ prefix, name }))).holders.map((h) => h.jid)
    const confirmPage = async (digest: string) => {
      const page = await send(`${served.url}/lock/delete/confirm?digest=${encodeURIComponent(digest)}`, { headers: { cookie } })
      assert.strictEqual(page.status, 200, page.body.slice(0, 500))
      return page.body
    }
    // The lock page's delete leads to the confirmation page; it holds no form that deletes at once.
    const lockPage = await send(`${served.url}/lock?digest=${prefix}:bill0`, { headers: { cookie } })
    assert.include(lockPage.body, `href="/lock/delete/confirm?digest=${encodeURIComponent(`${prefix}:bill0`)}"`)
    assert.notInclude(lockPage.body, `action="/lock/delete"`)
    const running = await confirmPage(`${prefix}:run0`)
    assert.include(running, "r0")
    assert.match(running, /revoked/)
    const queued = await confirmPage(`${prefix}:bill0`)
    assert.include(queued, "b0")
    assert.include(queued, `action="/lock/delete"`)
    const del = (digest: string, fields: Record<string, string> = {}) =>
      send(`${served.url}/lock/delete`, {
        method: "POST",
        headers: { ...formHeaders, cookie },
        body: form({ digest, _csrf: csrf, ...fields })
      })
    // Without the confirmation: nothing is deleted, and the answer is the confirmation page.
    const unconfirmed = await del(`${prefix}:bill0`)
    assert.strictEqual(unconfirmed.status, 303)
    assert.include(String(unconfirmed.headers["location"]), "/lock/delete/confirm?digest=")
    assert.deepStrictEqual(await held(`${prefix}:bill0`), ["b0"])
    // Confirmed, but another job holds the digest by then: it is kept, and the confirmation is asked again.
    const confirmation = hidden(queued, "confirm")
    await harness.run(harness.store.unlock({ prefix, name: `${prefix}:bill0` }, "b0"))
    const other = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix })
    await harness.run(Lock.lock(other, { digest: `${prefix}:bill0`, jid: "newcomer" }))
    const stale = await del(`${prefix}:bill0`, { confirm: confirmation })
    assert.strictEqual(stale.status, 303)
    assert.include(String(stale.headers["location"]), "/lock/delete/confirm?digest=")
    assert.deepStrictEqual(await held(`${prefix}:bill0`), ["newcomer"])
    const asked = await send(`${served.url}${String(stale.headers["location"])}`, { headers: { cookie } })
    assert.include(asked.body, "newcomer")
    assert.include(asked.body, "changed")
    // Confirmed on the current holders: deleted, then 303 to the lock page saying so.
    const done = await del(`${prefix}:bill0`, { confirm: hidden(asked.body, "confirm") })
    assert.strictEqual(done.status, 303)
    assert.deepStrictEqual(await held(`${prefix}:bill0`), [])
    const shown = await send(`${served.url}${String(done.headers["location"])}`, { headers: { cookie } })
    assert.include(shown.body, "Deleted")
    assert.include(shown.body, "removed 1 holder")
    // The same confirmation sent again once a third job holds the digest: that job is kept.
    await harness.run(Lock.lock(other, { digest: `${prefix}:bill0`, jid: "third" }))
    const replay = await del(`${prefix}:bill0`, { confirm: hidden(asked.body, "confirm") })
    assert.strictEqual(replay.status, 303)
    assert.deepStrictEqual(await held(`${prefix}:bill0`), ["third"])
  })

  it("a digest held by more than one page of holders: the confirmation names every one, and each can be unlocked from the UI", async () => {
    const prefix = RedisTest.uniquePrefix("web-wide")
    const digest = `${prefix}:wide`
    const wide = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix, lockLimit: 1_000 })
    // 700 holders: a hash table, not a listpack (HSCAN answers one whole; Redis 7 keeps up to 512 entries in one), so
    // the lock page reads it a page at a time.
    const jids = Array.from({ length: 700 }, (_, i) => `w${i}`)
    await harness.run(Effect.forEach(jids, (jid) => Lock.lock(wide, { digest, jid }), { discard: true }))
    const served = await harness.run(Web.serve({ prefix }))
    const { cookie, csrf } = await session(served.url)
    const rows = (body: string) => [...body.matchAll(/<tr data-jid="([^"]+)"/g)].map((m) => m[1]!)
    const lockPage = await send(`${served.url}/lock?digest=${encodeURIComponent(digest)}`, { headers: { cookie } })
    const firstPage = new Set(rows(lockPage.body))
    assert.isBelow(firstPage.size, jids.length, "the lock page shows a page of the holders")
    const page = await send(`${served.url}/lock/delete/confirm?digest=${encodeURIComponent(digest)}`, { headers: { cookie } })
    assert.strictEqual(page.status, 200, page.body.slice(0, 500))
    assert.deepStrictEqual(rows(page.body).sort(), [...jids].sort(), "the confirmation names every holder it would remove")
    // Holders beyond the lock page's first page are unlocked by their own buttons too (the next pages link to them).
    const later = jids.filter((jid) => !firstPage.has(jid)).slice(0, 20)
    for (const jid of later) {
      const answer = await send(`${served.url}/lock/unlock`, {
        method: "POST",
        headers: { ...formHeaders, cookie },
        body: form({ digest, jid, _csrf: csrf })
      })
      assert.strictEqual(answer.status, 303)
    }
    const left = (await harness.run(harness.store.fetch({ prefix, name: digest }))).holders.map((h) => h.jid)
    assert.deepStrictEqual(left.sort(), jids.filter((jid) => !later.includes(jid)).sort())
  })

  it("unlocking a running holder and a reap for real ask first: without the confirmation nothing changes", async () => {
    const prefix = RedisTest.uniquePrefix("web-ask")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const { cookie, csrf } = await session(served.url)
    const runHolder = async () => (await harness.run(harness.store.fetch({ prefix, name: `${prefix}:run0:RUN` }))).holders[0]!
    const unlock = (fields: Record<string, string> = {}) =>
      send(`${served.url}/lock/unlock`, {
        method: "POST",
        headers: { ...formHeaders, cookie },
        body: form({ digest: `${prefix}:run0`, jid: "r0", _csrf: csrf, ...fields })
      })
    const asked = await unlock()
    assert.strictEqual(asked.status, 303)
    assert.include(String(asked.headers["location"]), "/lock/unlock/confirm?")
    assert.isUndefined((await runHolder()).revokedAt)
    const page = await send(`${served.url}${String(asked.headers["location"])}`, { headers: { cookie } })
    assert.strictEqual(page.status, 200)
    assert.include(page.body, "r0")
    assert.include(page.body, "revoked")
    const done = await unlock({ confirm: hidden(page.body, "confirm") })
    assert.strictEqual(done.status, 303)
    assert.isDefined((await runHolder()).revokedAt)
    // The reaper: a pass for real without its confirmation runs nothing.
    const inIndex = () => raw((redis) => redis.zscore(`${prefix}:digests`, `${prefix}:old0`))
    assert.isNotNull(await inIndex())
    const reap = (fields: Record<string, string>) =>
      send(`${served.url}/reaper`, { method: "POST", headers: { ...formHeaders, cookie }, body: form({ _csrf: csrf, ...fields }) })
    const unconfirmed = await reap({ dryRun: "0" })
    assert.strictEqual(unconfirmed.status, 303)
    assert.include(String(unconfirmed.headers["location"]), "/reaper/confirm")
    assert.isNotNull(await inIndex())
    const dry = await reap({ dryRun: "1" })
    assert.strictEqual(dry.status, 303)
    const report = await send(`${served.url}${String(dry.headers["location"])}`, { headers: { cookie } })
    assert.include(report.body, "Dry run")
    assert.isNotNull(await inIndex())
    const confirm = await send(`${served.url}/reaper/confirm`, { headers: { cookie } })
    assert.strictEqual(confirm.status, 200)
    const reaped = await reap({ dryRun: "0", confirm: hidden(confirm.body, "confirm") })
    assert.strictEqual(reaped.status, 303)
    assert.isNull(await inIndex())
    assert.include((await send(`${served.url}${String(reaped.headers["location"])}`, { headers: { cookie } })).body, "Reaped")
  })

  it("the CSRF token is signed by the server: a planted matching cookie and field change nothing, nor another server's token", async () => {
    const prefix = RedisTest.uniquePrefix("web-forge")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const held = async (name: string) => (await harness.run(harness.store.fetch({ prefix, name }))).holders.length
    const planted = "a".repeat(64)
    for (const [headers, fields] of [
      [{ cookie: `unique_jobs_csrf=${planted}` }, { _csrf: planted }],
      [{ cookie: `unique_jobs_csrf=${planted}`, "x-csrf-token": planted }, {}]
    ] as const) {
      const answer = await send(`${served.url}/api/lock/delete`, {
        method: "POST",
        headers: { ...formHeaders, ...headers },
        body: form({ digest: `${prefix}:mail0`, ...fields })
      })
      assert.strictEqual(answer.status, 403, answer.body)
    }
    assert.strictEqual(await held(`${prefix}:mail0`), 1)
    // Another admin UI on this host (cookies ignore ports): its cookie and token do not work here.
    const other = await harness.run(Web.serve({ prefix }))
    const theirs = await session(other.url)
    const refused = await send(`${served.url}/api/lock/delete`, {
      method: "POST",
      headers: { ...formHeaders, cookie: theirs.cookie, "x-csrf-token": theirs.csrf },
      body: form({ digest: `${prefix}:mail0` })
    })
    assert.strictEqual(refused.status, 403)
    assert.strictEqual(await held(`${prefix}:mail0`), 1)
    // The token this server gives for that same cookie works.
    const ours = await session(served.url, { cookie: theirs.cookie })
    const allowed = await send(`${served.url}/api/lock/delete`, {
      method: "POST",
      headers: { ...formHeaders, cookie: theirs.cookie, "x-csrf-token": ours.csrf },
      body: form({ digest: `${prefix}:mail0` })
    })
    assert.strictEqual(allowed.status, 200, allowed.body)
    assert.strictEqual(await held(`${prefix}:mail0`), 0)
    // Processes given one secret (behind one address) take each other's tokens.
    const secret = Redacted.make("a-secret-shared-by-two-processes-0123")
    const [one, two] = [await harness.run(Web.serve({ prefix, secret })), await harness.run(Web.serve({ prefix, secret }))]
    const given = await session(one.url)
    const shared = await send(`${two.url}/api/lock/unlock`, {
      method: "POST",
      headers: { ...formHeaders, cookie: given.cookie, "x-csrf-token": given.csrf },
      body: form({ digest: `${prefix}:mail3`, jid: "m3" })
    })
    assert.strictEqual(shared.status, 200, shared.body)
    assert.strictEqual(await held(`${prefix}:mail3`), 0)
  })

  it("a change without its CSRF token is refused from the same Origin too, in a form and by the JSON API", async () => {
    const prefix = RedisTest.uniquePrefix("web-origin-no-token")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const { cookie } = await session(served.url)
    const same = { cookie, origin: served.url, "sec-fetch-site": "same-origin" }
    for (const [path, fields] of [
      ["/lock/unlock", { digest: `${prefix}:mail0`, jid: "m0" }],
      ["/api/lock/unlock", { digest: `${prefix}:mail0`, jid: "m0" }],
      ["/api/lock/delete", { digest: `${prefix}:mail0` }]
    ] as const) {
      const answer = await send(`${served.url}${path}`, { method: "POST", headers: { ...formHeaders, ...same }, body: form(fields) })
      assert.strictEqual(answer.status, 403, path)
    }
    assert.strictEqual((await harness.run(harness.store.fetch({ prefix, name: `${prefix}:mail0` }))).holders.length, 1)
  })

  it("X-Forwarded-Host, -Proto and -For count only when the app trusts its proxy (trustProxy)", async () => {
    const prefix = RedisTest.uniquePrefix("web-proxy")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const own = await session(served.url)
    const evil = await send(`${served.url}/api/lock/delete`, {
      method: "POST",
      headers: { ...formHeaders, cookie: own.cookie, "x-csrf-token": own.csrf, origin: "http://evil", "x-forwarded-host": "evil" },
      body: form({ digest: `${prefix}:mail0` })
    })
    assert.strictEqual(evil.status, 403, evil.body)
    // A loopback server without a token reads the name a trusted proxy forwards: a public one is refused.
    assert.strictEqual((await send(`${served.url}/api/session`, { headers: { "x-forwarded-host": "admin.example" } })).status, 200)
    const behind = await harness.run(Web.serve({ prefix, trustProxy: true }))
    assert.strictEqual((await send(`${behind.url}/api/session`, { headers: { "x-forwarded-host": "admin.example" } })).status, 403)
    assert.strictEqual((await send(`${behind.url}/api/session`, { headers: { "x-forwarded-host": "localhost" } })).status, 200)
    const seen: Array<string | undefined> = []
    const mount = (trustProxy: boolean) =>
      harness.run(Harness.mountedInRouter({
        prefix,
        trustProxy,
        authorize: (request) => {
          seen.push(request.remoteAddress)
          return "full"
        }
      }))
    const proxied = { "x-forwarded-host": "admin.example", "x-forwarded-proto": "https", "x-forwarded-for": "203.0.113.7, 10.0.0.1" }
    const change = async (base: string, headers: Record<string, string>, jid: string) => {
      const { cookie, csrf } = await session(base, proxied)
      return (await send(`${base}/api/lock/unlock`, {
        method: "POST",
        headers: { ...formHeaders, cookie, "x-csrf-token": csrf, ...headers },
        body: form({ digest: `${prefix}:bill${jid.slice(1)}`, jid })
      })).status
    }
    const untrusted = await mount(false)
    assert.strictEqual(await change(untrusted, { ...proxied, origin: "https://admin.example" }, "b0"), 403)
    assert.notInclude(seen, "203.0.113.7")
    const trusted = await mount(true)
    assert.strictEqual(await change(trusted, { ...proxied, origin: "http://admin.example" }, "b0"), 403, "another scheme")
    assert.strictEqual(await change(trusted, { origin: "https://admin.example" }, "b0"), 403, "no forwarded host")
    assert.strictEqual(await change(trusted, { ...proxied, origin: "https://admin.example" }, "b0"), 200)
    assert.include(seen, "203.0.113.7")
    const error = await harness.run(Effect.flip(Web.router({ trustProxy: "yes" as unknown as boolean })))
    assert.include(error.message, "trustProxy")
  })

  it("a Host check by example: look-alikes of localhost and ports out of 1-65535 are refused, on pages and changes", async () => {
    const prefix = RedisTest.uniquePrefix("web-hosts")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const { cookie, csrf } = await session(served.url)
    for (const host of ["evil-localhost", "notlocalhost", "app.localhost:3000", "app.localhost", "localhost.", "127.0.0.1:99999", "127.0.0.1:0", "localhost:65536", "127.0.0.1:+80", "127.0.0.1:"]) {
      assert.strictEqual((await send(`${served.url}/api/session`, { headers: { host } })).status, 403, host)
      const change = await send(`${served.url}/api/lock/unlock`, {
        method: "POST",
        headers: { ...formHeaders, host, cookie, "x-csrf-token": csrf },
        body: form({ digest: `${prefix}:bill0`, jid: "b0" })
      })
      assert.strictEqual(change.status, 403, host)
    }
    assert.strictEqual((await harness.run(harness.store.fetch({ prefix, name: `${prefix}:bill0` }))).holders.length, 1)
    for (const host of ["127.0.0.1:65535", "localhost:1", "localhost", "[::1]:80"]) {
      assert.strictEqual((await send(`${served.url}/api/session`, { headers: { host } })).status, 200, host)
    }
  })

  it("a path of the JSON API it does not have answers a JSON 404", async () => {
    const prefix = RedisTest.uniquePrefix("web-api-404")
    const served = await harness.run(Web.serve({ prefix }))
    for (const method of ["GET", "POST"]) {
      const answer = await send(`${served.url}/api/nothing/here`, { method })
      assert.strictEqual(answer.status, 404, method)
      assert.include(String(answer.headers["content-type"]), "application/json")
      assert.strictEqual(JSON.parse(answer.body).error, "Not found")
    }
    assert.include(String((await send(`${served.url}/nothing/here`)).headers["content-type"]), "text/html")
  })

  it("every lock the UI lists can be shown and deleted through it; a name too long for that is counted, not listed", async () => {
    const prefix = RedisTest.uniquePrefix("web-long")
    const served = await harness.run(Web.serve({ prefix }))
    const take = (name: string) =>
      harness.run(harness.store.lock({ prefix, name }, { jid: "j", limit: 1, ttlMs: 3_600_000, leaseMs: 0, info: "", fenced: false }))
    const huge = `${prefix}:${"x".repeat(1_000_000)}`
    const long = `${prefix}:${"y".repeat(3_000)}`
    await take(huge)
    await take(long)
    await take(`${prefix}:short`)
    const listed = JSON.parse((await send(`${served.url}/api/locks?count=1000`)).body) as { items: Array<{ name: string }>; omitted: number }
    assert.deepStrictEqual(listed.items.map((i) => i.name).sort(), [`${prefix}:short`, long].sort())
    assert.strictEqual(listed.omitted, 1)
    const page = await send(`${served.url}/locks?count=1000`)
    assert.notInclude(page.body, "x".repeat(1000))
    assert.include(page.body, "1 lock(s) on this page not shown")
    assert.include(page.body, "<code>unique-jobs locks del PATTERN</code>", "the command that acts on it, as the CLI names it")
    // Every listed one: its page, its confirmation and its deletion, through the UI.
    const { cookie, csrf } = await session(served.url)
    for (const name of listed.items.map((i) => i.name)) {
      assert.strictEqual((await send(`${served.url}/lock?digest=${encodeURIComponent(name)}`, { headers: { cookie } })).status, 200)
      const confirm = await send(`${served.url}/lock/delete/confirm?digest=${encodeURIComponent(name)}`, { headers: { cookie } })
      assert.strictEqual(confirm.status, 200)
      const deleted = await send(`${served.url}/lock/delete`, {
        method: "POST",
        headers: { ...formHeaders, cookie },
        body: form({ digest: name, _csrf: csrf, confirm: hidden(confirm.body, "confirm") })
      })
      assert.strictEqual(deleted.status, 303, name.slice(0, 80))
      assert.strictEqual((await send(`${served.url}${String(deleted.headers["location"])}`, { headers: { cookie } })).status, 200)
      assert.strictEqual((await harness.run(harness.store.fetch({ prefix, name }))).holders.length, 0, name.slice(0, 80))
    }
  })
})

describe("a bulk delete of what a filter shows (issue 38)", () => {
  const rowsOf = (body: string) =>
    [...body.matchAll(/<tr (?:data-jid="([^"]*)" )?data-digest="([^"]+)"(?: data-phase="(\w+)")? data-fate="(\w+)"/g)].map((m) =>
      [m[2]!, m[1] ?? "", m[3] ?? "", m[4]!].join(" ")
    )
  const jidsOf = async (prefix: string, name: string) =>
    (await harness.run(harness.store.fetch({ prefix, name }))).holders.map((h) => [h.jid, h.revokedAt !== undefined])

  it("the list links to a preview naming every lock and its holders' fate; confirmed, exactly those go, logged with who; a reload repeats nothing", async () => {
    const prefix = RedisTest.uniquePrefix("web-bulk")
    await harness.run(Harness.seed(prefix))
    const logs: Array<{ message: string; annotations: Record<string, unknown> }> = []
    const capture = Logger.make(({ fiber, message }) => {
      logs.push({
        message: String(Array.isArray(message) ? message[0] : message),
        annotations: { ...fiber.getRef(References.CurrentLogAnnotations) }
      })
    })
    const base = await harness.run(Harness.mountedInRouter({ prefix, authorize: () => ({ access: "full", who: "alice" }) }).pipe(
      Effect.provide(Logger.layer([capture]))
    ))
    const { cookie, csrf } = await session(base)
    const doneBefore = actions("bulk-delete", "done")
    const list = await send(`${base}/locks?queue=billing`, { headers: { cookie } })
    const link = /<a class="bulk-delete" href="([^"]+)">([^<]*)<\/a>/.exec(list.body)
    assert.isNotNull(link, list.body.slice(0, 3000))
    assert.strictEqual(link![2], "Delete the 3 digest(s) this page shows…")
    const previewUrl = link![1]!.replace(/&amp;/g, "&")
    assert.match(previewUrl, /^\/admin\/locks\/locks\/bulk\/confirm\?pattern=.*&queue=billing&count=100$/)
    const preview = await send(`http://127.0.0.1:${new URL(base).port}${previewUrl}`, { headers: { cookie } })
    assert.strictEqual(preview.status, 200, preview.body.slice(0, 500))
    assert.deepStrictEqual(rowsOf(preview.body).sort(), [0, 1, 2].map((i) => `${prefix}:bill${i} b${i} queue removed`))
    assert.include(preview.body, `data-locks="3" data-removed="3" data-revoked="0"`)
    // Running holders are named as revoked.
    const running = await send(`${base}/locks/bulk/confirm?type=while_executing`, { headers: { cookie } })
    assert.deepStrictEqual(rowsOf(running.body).sort(), [0, 1].map((i) => `${prefix}:run${i} r${i} run revoked`))
    const post = (query: string, fields: Record<string, string>) =>
      send(`${base}/locks/bulk/delete?${query}`, { method: "POST", headers: { ...formHeaders, cookie }, body: form({ _csrf: csrf, ...fields }) })
    const query = previewUrl.split("?")[1]!
    const digests = hidden(preview.body, "digests")
    assert.deepStrictEqual(digests.split("\n").sort(), [0, 1, 2].map((i) => `${prefix}:bill${i}`))
    // Without the CSRF token, or without the confirmation: nothing goes.
    const noCsrf = await send(`${base}/locks/bulk/delete?${query}`, { method: "POST", headers: { ...formHeaders, cookie }, body: form(bulkFields(preview.body)) })
    assert.strictEqual(noCsrf.status, 403)
    const unconfirmed = await post(query, { digests })
    assert.strictEqual(unconfirmed.status, 303)
    assert.strictEqual(String(unconfirmed.headers["location"]), `/admin/locks/locks/bulk/confirm?${query}`)
    // A confirmation for a list other than the one it was made for (one digest more) is asked again.
    const more = await post(query, { ...bulkFields(preview.body), digests: `${digests}\n${prefix}:mail0` })
    assert.strictEqual(String(more.headers["location"]), `/admin/locks/locks/bulk/confirm?${query}&changed=1`)
    assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:mail0`), [["m0", false]])
    for (let i = 0; i < 3; i++) assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:bill${i}`), [[`b${i}`, false]])
    // A lock that starts to match the filter after the preview is never deleted by it.
    const billing = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix, lockInfo: true })
    await harness.run(Lock.lock(billing, { digest: `${prefix}:bill9`, jid: "b9", info: { worker: "Biller", queue: "billing", args: [] } }))
    const done = await post(query, bulkFields(preview.body))
    assert.strictEqual(done.status, 303, done.body)
    const location = String(done.headers["location"])
    assert.match(location, /^\/admin\/locks\/locks\?pattern=.*&queue=billing&count=100&result=/)
    for (let i = 0; i < 3; i++) assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:bill${i}`), [])
    assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:bill9`), [["b9", false]])
    assert.strictEqual(actions("bulk-delete", "done") - doneBefore, 1)
    const deleted = logs.filter((l) => l.message === "admin bulk delete")
    assert.deepStrictEqual(deleted.map((l) => [l.annotations.who, l.annotations.digest, l.annotations.removed]).sort(), [0, 1, 2].map((i) => ["alice", `${prefix}:bill${i}`, 1]))
    assert.deepInclude(logs.find((l) => l.message === "admin bulk delete done")!.annotations, { who: "alice", locks: 3, removed: 3, revoked: 0 })
    // The result page, reloaded: the same message, nothing more done; a forged result shows nothing.
    for (let i = 0; i < 3; i++) {
      const page = await send(`http://127.0.0.1:${new URL(base).port}${location}`, { headers: { cookie } })
      assert.strictEqual(page.status, 200)
      assert.include(page.body, "Deleted 3 digest(s)")
      assert.include(page.body, "removed 3 holder(s), 3 lock(s) gone")
      assert.include(page.body, `data-name="${prefix}:bill9"`)
    }
    assert.strictEqual(actions("bulk-delete", "done") - doneBefore, 1)
    assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:bill9`), [["b9", false]])
    const made = Buffer.from(JSON.stringify({ action: "delete", at: 0, nothing: false, removed: 9, deleted: 9, revoked: 0, locks: 99 }))
    const forged = await send(`${base}/locks?queue=billing&result=${made.toString("base64url")}.${"A".repeat(43)}`, { headers: { cookie } })
    assert.notInclude(forged.body, "Deleted 99")
    // The same form again (a double submit): the digests it named hold nothing now, so nothing is done and b9 stays.
    const nothingBefore = actions("bulk-delete", "nothing")
    const again = await post(query, bulkFields(preview.body))
    assert.strictEqual(again.status, 303)
    assert.match(String(again.headers["location"]), /^\/admin\/locks\/locks\?pattern=.*&queue=billing&count=100&result=/)
    const nothing = await send(`http://127.0.0.1:${new URL(base).port}${String(again.headers["location"])}`, { headers: { cookie } })
    assert.include(nothing.body, "found nothing: none of the digests it listed was held any more")
    assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:bill9`), [["b9", false]])
    assert.strictEqual(actions("bulk-delete", "done") - doneBefore, 1)
    assert.strictEqual(actions("bulk-delete", "nothing") - nothingBefore, 1)

    // Running holders: revoked, not removed (each keeps its place), as one delete does.
    const runQuery = "type=while_executing"
    const revoked = await post(runQuery, bulkFields(running.body))
    assert.strictEqual(revoked.status, 303)
    for (let i = 0; i < 2; i++) assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:run${i}:RUN`), [[`r${i}`, true]])
    const shown = await send(`http://127.0.0.1:${new URL(base).port}${String(revoked.headers["location"])}`, { headers: { cookie } })
    assert.include(shown.body, "revoked 2 running holder(s)")
  })

  it("a digest another job took after the preview is left whole and the others go; the next preview names its new holder", async () => {
    const prefix = RedisTest.uniquePrefix("web-bulk-changed")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const { cookie, csrf } = await session(served.url)
    const preview = await send(`${served.url}/locks/bulk/confirm?worker=Mailer`, { headers: { cookie } })
    assert.strictEqual(rowsOf(preview.body).length, 4)
    // One of the four digests changes hands: its holder goes, another takes it (after the preview's reads: its Redis
    // time is later than theirs).
    await new Promise((resolve) => setTimeout(resolve, 5))
    await harness.run(harness.store.unlock({ prefix, name: `${prefix}:mail3` }, "m3"))
    const mail = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockInfo: true })
    await harness.run(Lock.lock(mail, { digest: `${prefix}:mail3`, jid: "newcomer", info: { worker: "Mailer", queue: "mail", args: [] } }))
    // A forged time (later than the preview's reads) is not the one confirmed: asked again, nothing done.
    const forged = await send(`${served.url}/locks/bulk/delete?worker=Mailer`, {
      method: "POST",
      headers: { ...formHeaders, cookie },
      body: form({ _csrf: csrf, ...bulkFields(preview.body), at: String(Date.now() + 60_000) })
    })
    assert.match(String(forged.headers["location"]), /^\/locks\/bulk\/confirm\?.*worker=Mailer.*&changed=1$/)
    assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:mail0`), [["m0", false]])
    const answer = await send(`${served.url}/locks/bulk/delete?worker=Mailer`, {
      method: "POST",
      headers: { ...formHeaders, cookie },
      body: form({ _csrf: csrf, ...bulkFields(preview.body) })
    })
    assert.strictEqual(answer.status, 303)
    const location = String(answer.headers["location"])
    assert.match(location, /^\/locks\?.*worker=Mailer.*&result=/)
    for (let i = 0; i < 3; i++) assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:mail${i}`), [])
    assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:mail3`), [["newcomer", false]])
    const result = await send(`${served.url}${location}`, { headers: { cookie } })
    assert.include(result.body, "Deleted 3 digest(s)")
    assert.include(result.body, "left 1 digest(s) alone: their holders changed after the preview")
    // The next preview names what holds it now; confirmed, it goes.
    const asked = await send(`${served.url}/locks/bulk/confirm?worker=Mailer`, { headers: { cookie } })
    assert.deepStrictEqual(rowsOf(asked.body), [`${prefix}:mail3 newcomer queue removed`])
    const done = await send(`${served.url}/locks/bulk/delete?worker=Mailer`, {
      method: "POST",
      headers: { ...formHeaders, cookie },
      body: form({ _csrf: csrf, ...bulkFields(asked.body) })
    })
    assert.match(String(done.headers["location"]), /\/locks\?.*&result=/)
    assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:mail3`), [])
  })

  // The handler reads the holders, checks the confirmation against them, then removes: a holder that comes between
  // that read and the remove must not go unnamed. The store here lets one in just before the remove's call.
  it("a holder that comes after the confirmation is checked, before the delete's call: that digest is left whole, and the page says so", async () => {
    const prefix = RedisTest.uniquePrefix("web-late")
    await harness.run(Harness.seed(prefix))
    const late = { prefix, name: `${prefix}:mail3` }
    let letIn = 0
    let comer = "late"
    const store: Redis.Store = {
      ...harness.store,
      remove: (locks, options) =>
        Effect.andThen(
          locks.some((lock) => lock.name === late.name) && letIn++ === 0
            ? harness.store.lock(late, { jid: comer, limit: 3, ttlMs: 0, leaseMs: 0, info: "", fenced: false })
            : Effect.void,
          harness.store.remove(locks, options)
        )
    }
    const served = await harness.run(Effect.provideService(Web.serve({ prefix }), Redis.RedisService, store))
    const { cookie, csrf } = await session(served.url)
    const preview = await send(`${served.url}/locks/bulk/confirm?worker=Mailer`, { headers: { cookie } })
    assert.strictEqual(rowsOf(preview.body).length, 4)
    const answer = await send(`${served.url}/locks/bulk/delete?worker=Mailer`, {
      method: "POST",
      headers: { ...formHeaders, cookie },
      body: form({ _csrf: csrf, ...bulkFields(preview.body) })
    })
    assert.strictEqual(answer.status, 303)
    assert.strictEqual(letIn, 1)
    for (let i = 0; i < 3; i++) assert.deepStrictEqual(await jidsOf(prefix, `${prefix}:mail${i}`), [])
    // Neither the holder it named nor the one it never saw went.
    assert.deepStrictEqual((await jidsOf(prefix, late.name)).map(([jid]) => jid).sort(), ["late", "m3"])
    const result = await send(`${served.url}${String(answer.headers["location"])}`, { headers: { cookie } })
    assert.include(result.body, "Deleted 3 digest(s)")
    assert.include(result.body, "left 1 digest(s) alone: their holders changed after the preview")

    // One digest's delete: asked again on its confirmation page, nothing removed.
    letIn = 0
    comer = "later"
    const confirm = await send(`${served.url}/lock/delete/confirm?digest=${encodeURIComponent(late.name)}`, { headers: { cookie } })
    const single = await send(`${served.url}/lock/delete`, {
      method: "POST",
      headers: { ...formHeaders, cookie },
      body: form({ _csrf: csrf, digest: late.name, confirm: hidden(confirm.body, "confirm") })
    })
    assert.strictEqual(single.status, 303)
    assert.match(String(single.headers["location"]), /^\/lock\/delete\/confirm\?digest=.*&changed=1$/)
    assert.strictEqual(letIn, 1)
    assert.deepStrictEqual((await jidsOf(prefix, late.name)).map(([jid]) => jid).sort(), ["late", "later", "m3"])
  })

  it("read-only shows no bulk link nor form and refuses the POST; a malformed list of digests is a 400", async () => {
    const prefix = RedisTest.uniquePrefix("web-bulk-ro")
    await harness.run(Harness.seed(prefix))
    const readOnly = await harness.run(Web.serve({ prefix, readOnly: true }))
    const ro = await session(readOnly.url)
    assert.notInclude((await send(`${readOnly.url}/locks`, { headers: { cookie: ro.cookie } })).body, "/locks/bulk/confirm")
    const preview = await send(`${readOnly.url}/locks/bulk/confirm?queue=billing`, { headers: { cookie: ro.cookie } })
    assert.strictEqual(preview.status, 200)
    assert.notInclude(preview.body, "<form method=\"post\"")
    const refused = await send(`${readOnly.url}/locks/bulk/delete?queue=billing`, {
      method: "POST",
      headers: { ...formHeaders, cookie: ro.cookie },
      body: form({ _csrf: ro.csrf, digests: `${prefix}:bill0`, confirm: "x" })
    })
    assert.strictEqual(refused.status, 403)
    assert.strictEqual((await harness.run(harness.store.fetch({ prefix, name: `${prefix}:bill0` }))).holders.length, 1)

    const served = await harness.run(Web.serve({ prefix }))
    const { cookie, csrf } = await session(served.url)
    for (const [digests, reason] of [
      ["", "give the digests"],
      [`${prefix}:bill0\n${prefix}:bill0`, "listed twice"],
      [`${prefix}:bill0\nother:bill1`, "starts with"]
    ] as const) {
      const answer = await send(`${served.url}/locks/bulk/delete`, {
        method: "POST",
        headers: { ...formHeaders, cookie },
        body: form({ _csrf: csrf, digests, confirm: "x" })
      })
      assert.strictEqual(answer.status, 400, reason)
      assert.include(answer.body, reason)
    }
    // A page of 1,000 and the few more ZSCAN may answer with it: a list the preview can show is never refused for
    // its length (here unconfirmed, so asked again).
    const page = await send(`${served.url}/locks/bulk/delete`, {
      method: "POST",
      headers: { ...formHeaders, cookie },
      body: form({ _csrf: csrf, digests: Array.from({ length: 1001 }, (_, i) => `${prefix}:x${i}`).join("\n"), confirm: "x" })
    })
    assert.strictEqual(page.status, 303, page.body.slice(0, 300))
    assert.strictEqual((await send(`${served.url}/locks/bulk/confirm?count=0`, { headers: { cookie } })).status, 400)
    assert.strictEqual((await harness.run(harness.store.fetch({ prefix, name: `${prefix}:bill0` }))).holders.length, 1)
  })
})

describe("issue 47, observation 3: a bulk delete finishes a filter of any size, a page at a time", () => {
  // The preview → confirm loop as an operator runs it: each preview's form posted with every field it carries; a
  // confirmed page goes on to the next page's preview, the last to the list, where the loop starts again.
  const loop = async (base: string, first: string, cookie: string, csrf: string) => {
    let preview = first
    const statuses: Array<number> = []
    // Whether each confirmed page went on to the next page's preview (else to the list).
    const onward: Array<boolean> = []
    let rounds = 0
    for (let step = 0; step < 60; step++) {
      const page = await send(`${base}${preview}`, { headers: { cookie } })
      assert.strictEqual(page.status, 200, page.body.slice(0, 600))
      const action = /<form method="post" action="([^"]+)" class="danger">/.exec(page.body)?.[1]?.replace(/&amp;/g, "&")
      if (action === undefined) {
        const on = /<a class="read-on" href="([^"]+)"/.exec(page.body)?.[1]?.replace(/&amp;/g, "&")
        if (on === undefined) break
        preview = on.slice(on.indexOf("/locks/bulk/confirm"))
        continue
      }
      const fields: Record<string, string> = { _csrf: csrf }
      for (const m of page.body.matchAll(/<input type="hidden" name="(\w+)" value="([^"]*)">/g)) {
        fields[m[1]!] = m[2]!.replace(/&#10;/g, "\n").replace(/&amp;/g, "&").replace(/&quot;/g, "\"")
      }
      rounds++
      const posted = await send(`${base}${action.slice(action.indexOf("/locks/bulk/delete"))}`, {
        method: "POST",
        headers: { ...formHeaders, cookie },
        body: form(fields)
      })
      statuses.push(posted.status)
      assert.strictEqual(posted.status, 303, posted.body.slice(0, 600))
      const location = String(posted.headers["location"])
      onward.push(location.includes("/locks/bulk/confirm?"))
      preview = location.includes("/locks/bulk/confirm") ? location.slice(location.indexOf("/locks/bulk/confirm")) : first
    }
    return { rounds, statuses, onward }
  }

  it("600 locks of a queue among 600 others, pages of 250: the loop ends with none of them left and the others untouched", async () => {
    const prefix = RedisTest.uniquePrefix("web-bulk-many")
    const n = 1200
    await harness.run(Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) =>
      harness.store.lock({ prefix, name: `${prefix}:job${i}` }, {
        jid: `j${i}`,
        limit: 1,
        ttlMs: 3_600_000,
        leaseMs: 0,
        info: "",
        fenced: false,
        queue: i % 2 === 0 ? "bulk" : "other"
      }), { concurrency: 256, discard: true }))
    const served = await harness.run(Web.serve({ prefix }))
    const { cookie, csrf } = await session(served.url)
    const { onward, rounds } = await loop(served.url, "/locks/bulk/confirm?queue=bulk&count=250", cookie, csrf)
    const [left, held] = await raw((redis) =>
      Promise.all([
        redis.zrange(`${prefix}:digests`, 0, -1),
        Promise.all(Array.from({ length: n / 2 }, (_, i) => redis.hexists(`${prefix}:job${2 * i + 1}:LOCKED`, `j${2 * i + 1}`)))
      ]))
    const names = new Set(left)
    const matching = Array.from({ length: n / 2 }, (_, i) => `${prefix}:job${2 * i}`)
    assert.deepStrictEqual(matching.filter((name) => names.has(name)), [], "every lock of the filter is gone")
    assert.strictEqual(left.length, n / 2, "the others are all indexed still")
    for (let i = 1; i < n; i += 2) assert.isTrue(names.has(`${prefix}:job${i}`), `job${i}`)
    // And still held, each by its own job.
    assert.strictEqual(held.filter((h) => h === 1).length, n / 2)
    assert.isAbove(rounds, 2, "more than one page's worth, confirmed page by page")
    // Each page confirmed went on from where it was, to the next page's preview; only the index's last went to the list.
    assert.deepStrictEqual(onward, [...Array.from({ length: rounds - 1 }, () => true), false])
  }, 120_000)
})

describe("the admin UI's reap asks the queue when it has one (issue 35)", () => {
  it("served with BullMQ's JobQueue in its context, a pass frees the lock whose job is gone and keeps the live job's; without one, both stay and the page says why", async () => {
    const prefix = RedisTest.uniquePrefix("web-orphans")
    const name = `web-orphans-${process.pid}`
    const queue = new Queue(name, { connection: { url: harness.url } })
    try {
      const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
      const live = await queue.add("Live", { n: 1 }, { jobId: "live-1" })
      await harness.run(Lock.lock(definition, { digest: `${prefix}:live`, jid: live.id!, info: { queue: name } }))
      await harness.run(Lock.lock(definition, { digest: `${prefix}:gone`, jid: "gone-1", info: { queue: name } }))
      const held = async () =>
        (await harness.run(Effect.flatMap(Redis.RedisService, (store) =>
          Effect.forEach(["live", "gone"], (d) => store.fetch({ prefix, name: `${prefix}:${d}` }))))).map((lock) =>
          lock.holders.map((holder) => holder.jid)
        )
      await new Promise((resolve) => setTimeout(resolve, 20))

      const reapWith = async (served: { readonly url: string }) => {
        const { cookie, csrf } = await session(served.url)
        const answer = await send(`${served.url}/api/reaper`, {
          method: "POST",
          headers: { ...formHeaders, cookie, "x-csrf-token": csrf },
          body: form({ dryRun: "0" })
        })
        assert.strictEqual(answer.status, 200, answer.body)
        return {
          orphans: (JSON.parse(answer.body) as { orphans: number }).orphans,
          page: (await send(`${served.url}/reaper`)).body
        }
      }

      // No queue to ask: the holder with no expiry stays whatever became of its job.
      const alone = await reapWith(await harness.run(Web.serve({ prefix, reaperGrace: 1 })))
      assert.strictEqual(alone.orphans, 0)
      assert.include(alone.page, "this UI has no queue to ask")
      assert.deepStrictEqual(await held(), [["live-1"], ["gone-1"]])

      // BullMQ's JobQueue in the UI's context: the job that is gone has its lock freed, the waiting one keeps its own.
      const served = await harness.run(
        Web.serve({ prefix, reaperGrace: 1 }).pipe(Effect.provide(BullMQ.layer(queue)))
      )
      const asked = await reapWith(served)
      assert.strictEqual(asked.orphans, 1)
      assert.include(asked.page, "It also asks the queue")
      assert.deepStrictEqual(await held(), [["live-1"], []])

      // A grace the reaper would refuse is refused when the UI is made, naming it.
      const bad = await harness.run(Effect.result(Web.serve({ prefix, reaperGrace: -5 })))
      assert.isTrue(Result.isFailure(bad) && bad.failure.message.includes("reaperGrace"))
    } finally {
      await queue.obliterate({ force: true }).catch(() => undefined)
      await queue.close()
    }
  })
})

describe("the job behind a lock (issue 38)", () => {
  it("the lock page shows each holder's job and links its jid to it; ?job= filters a page with one describe call; 400 without a queue or for a bad state", async () => {
    const prefix = RedisTest.uniquePrefix("web-job")
    const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockInfo: true })
    const jids = ["live-1", "gone-1", Harness.markup[0]]
    for (const [i, jid] of jids.entries()) {
      await harness.run(Lock.lock(definition, { digest: `${prefix}:d${i}`, jid, info: { queue: "jobs", worker: "W", args: [i] } }))
    }
    await harness.run(Lock.lock(definition, { digest: `${prefix}:noqueue`, jid: "nq-1" }))
    // A queue that describes jobs, counting its calls: live-1 active, the markup jid failed with markup in its data.
    const calls: Array<number> = []
    const fake: JobQueue["Service"] = {
      push: () => Effect.void,
      schedule: () => Effect.void,
      remove: () => Effect.succeed(false),
      kill: () => Effect.void,
      exists: (jobs) => Effect.succeed(jobs.map(() => "unknown" as const)),
      describe: (jobs) =>
        Effect.sync(() => {
          calls.push(jobs.length)
          return jobs.map((job) =>
            job.jid === "live-1"
              ? { ...job, state: "active" as const, attemptsMade: 1, addedAt: 1_700_000_000_000, data: "{\"n\":1}", dataBytes: 7 }
              : job.jid === Harness.markup[0]
              ? { ...job, state: "failed" as const, failedReason: Harness.markup[1], data: Harness.markup[0], dataBytes: 4000 }
              : { ...job, state: "gone" as const }
          )
        })
    }
    const served = await harness.run(Web.serve({ prefix }).pipe(Effect.provideService(JobQueue, fake)))
    const page = await send(`${served.url}/lock?digest=${encodeURIComponent(`${prefix}:d0`)}`)
    assert.strictEqual(page.status, 200)
    assert.include(page.body, `<a class="job-link" href="#job-live-1">live-1</a>`)
    assert.include(page.body, `id="job-live-1" data-jid="live-1" data-state="active"`)
    assert.include(page.body, "{&quot;n&quot;:1}")
    assert.deepStrictEqual(calls, [1])
    const marked = await send(`${served.url}/lock?digest=${encodeURIComponent(`${prefix}:d2`)}`)
    assert.notInclude(marked.body, "<script>alert")
    assert.notInclude(marked.body, "<img")
    assert.include(marked.body, `href="#job-${encodeURIComponent(Harness.markup[0])}"`)
    assert.include(marked.body, "data of 4000 bytes, cut")
    const api = JSON.parse((await send(`${served.url}/api/lock?digest=${prefix}:d1`)).body) as { jobs: Array<{ jid: string; details: { state: string } }> }
    assert.deepStrictEqual(api.jobs.map((j) => [j.jid, j.details.state]), [["gone-1", "gone"]])
    // A lock whose holder names no queue: said so, no call.
    calls.length = 0
    assert.include((await send(`${served.url}/lock?digest=${encodeURIComponent(`${prefix}:noqueue`)}`)).body, "No holder names its queue")
    assert.deepStrictEqual(calls, [])

    // The list: one describe call for the page's holders, the job column, and ?job= keeping the matching rows.
    const names = async (query: string) => {
      const answer = await send(`${served.url}/api/locks?${query}`)
      assert.strictEqual(answer.status, 200, answer.body)
      return (JSON.parse(answer.body) as { items: Array<{ name: string }> }).items.map((i) => i.name).sort()
    }
    calls.length = 0
    assert.deepStrictEqual(await names("job=gone"), [`${prefix}:d1`])
    assert.deepStrictEqual(calls, [3], "one call for the page's three jobs")
    assert.deepStrictEqual(await names("job=over"), [`${prefix}:d1`, `${prefix}:d2`])
    assert.deepStrictEqual(await names("job=live"), [`${prefix}:d0`])
    const list = await send(`${served.url}/locks?job=gone`)
    assert.include(list.body, "<th>job</th>")
    assert.include(list.body, `<td class="job-state">gone</td>`)
    const bad = await send(`${served.url}/api/locks?job=vanished`)
    assert.strictEqual(bad.status, 400)
    assert.include(bad.body, "job: one of waiting")

    // Without a queue: the page says how to get one, the list has no job column, and ?job= is a 400 saying why.
    const plain = await harness.run(Web.serve({ prefix }))
    assert.include((await send(`${plain.url}/lock?digest=${encodeURIComponent(`${prefix}:d0`)}`)).body, "--bullmq-queue NAME")
    assert.notInclude((await send(`${plain.url}/locks`)).body, "<th>job</th>")
    const refused = await send(`${plain.url}/api/locks?job=gone`)
    assert.strictEqual(refused.status, 400)
    assert.include(refused.body, "no queue to ask about jobs")
  })
})

describe("the lock page, the arguments and the metrics an operator reads at a glance (issue 38)", () => {
  const api = async (base: string, path: string) => {
    const answer = await send(`${base}${path}`)
    assert.strictEqual(answer.status, 200, answer.body.slice(0, 500))
    return JSON.parse(answer.body) as { items: Array<{ name: string; args: string }>; notSearched: number }
  }

  it("a revoked holder has its column header and no Unlock; a run holder shows its queue; the lock info is pretty JSON", async () => {
    const prefix = RedisTest.uniquePrefix("web-lockpage")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const { cookie, csrf } = await session(served.url)
    const lockPage = () => send(`${served.url}/lock?digest=${encodeURIComponent(`${prefix}:run0`)}`, { headers: { cookie } })
    const before = await lockPage()
    assert.include(before.body, "<th>revoked</th>")
    const runRow = /<tr data-jid="r0">[\s\S]*?<\/tr>/.exec(before.body)![0]
    // The run lock's holder names its queue (from lockInfo), and may be unlocked while it runs.
    assert.include(runRow, "<td>fast</td>")
    assert.include(runRow, "class=\"unlock\"")
    assert.include(runRow, "\n  &quot;type&quot;: &quot;while_executing&quot;,\n", "the lock info pretty-printed, a field per line")
    const revoked = await send(`${served.url}/api/lock/unlock`, {
      method: "POST",
      headers: { "content-type": "application/json", cookie, "x-csrf-token": csrf },
      body: JSON.stringify({ digest: `${prefix}:run0`, jid: "r0" })
    })
    assert.strictEqual(revoked.status, 200, revoked.body)
    assert.strictEqual((JSON.parse(revoked.body) as { revoked: Array<unknown> }).revoked.length, 1)
    const after = /<tr data-jid="r0">[\s\S]*?<\/tr>/.exec((await lockPage()).body)![0]
    assert.include(after, "class=\"revoked\"")
    assert.notInclude(after, "class=\"unlock\"", "an already revoked holder is not offered Unlock")
    assert.notInclude(after, "/lock/unlock")
  })

  it("400 and 404 pages show the server's real mode: no read-only badge on a full-access server", async () => {
    const prefix = RedisTest.uniquePrefix("web-badge")
    const full = await harness.run(Web.serve({ prefix }))
    const readOnly = await harness.run(Web.serve({ prefix, readOnly: true }))
    for (const path of ["/nothing/here", "/lock?digest=nope", "/locks?count=0", "/metrics?refresh=2"]) {
      const onFull = await send(`${full.url}${path}`)
      assert.oneOf(onFull.status, [400, 404], path)
      assert.notInclude(onFull.body, "class=\"readonly\"", path)
      const onReadOnly = await send(`${readOnly.url}${path}`)
      assert.strictEqual(onReadOnly.status, onFull.status, path)
      assert.include(onReadOnly.body, "class=\"readonly\"", path)
    }
  })

  it("the locks list shows each lock's arguments, abbreviated, and ?args= lists exactly the locks whose arguments contain it", async () => {
    const prefix = RedisTest.uniquePrefix("web-args")
    await harness.run(Harness.seed(prefix))
    const served = await harness.run(Web.serve({ prefix }))
    const page = await send(`${served.url}/locks?count=1000`)
    assert.include(page.body, "<th>arguments</th>")
    assert.include(page.body, "<td class=\"args\">[1]</td>", "bill1's arguments")
    // Markup in the arguments is text, abbreviated with its whole text in the title.
    assert.notInclude(page.body, "<script>alert")
    assert.match(page.body, /<td class="args" title="[^"]*&lt;script&gt;[^"]*">[^<]*…<\/td>/)
    const mail = await api(served.url, `/api/locks?count=1000&args=${encodeURIComponent("\"note\"")}`)
    assert.deepStrictEqual(mail.items.map((i) => i.name).sort(), [0, 1, 2, 3].map((i) => `${prefix}:mail${i}`).sort())
    assert.strictEqual(mail.notSearched, 0)
    assert.deepStrictEqual((await api(served.url, "/api/locks?count=1000&args=%5B2%5D")).items.map((i) => i.name), [`${prefix}:bill2`])
    // The arguments filter with the others, and paged as they are: 300 more locks (no arguments) make the index one
    // ZSCAN pages, and each page reads about `count` members whatever matches.
    await harness.run(Harness.seedMany(prefix, 300))
    assert.deepStrictEqual((await api(served.url, "/api/locks?count=1000&args=note&worker=Biller")).items, [])
    let cursor = "0"
    let pages = 0
    const found: Array<string> = []
    do {
      const answer = JSON.parse((await send(`${served.url}/api/locks?count=40&args=note&cursor=${cursor}`)).body) as {
        items: Array<{ name: string }>
        scanned: number
        next: string
      }
      assert.isAtMost(answer.scanned, 80)
      pages++
      found.push(...answer.items.map((i) => i.name))
      cursor = answer.next
    } while (cursor !== "0")
    assert.deepStrictEqual(found.sort(), mail.items.map((i) => i.name).sort())
    assert.isAtLeast(pages, 4)
    // The form keeps the filter, and the next link carries it.
    const filtered = await send(`${served.url}/locks?count=40&args=note`)
    assert.include(filtered.body, "name=\"args\" value=\"note\"")
    assert.match(filtered.body, /rel="next" href="[^"]*args=note/)
    for (const bad of ["x".repeat(257), "a\u0001b"]) {
      const refused = await send(`${served.url}/locks?args=${encodeURIComponent(bad)}`)
      assert.strictEqual(refused.status, 400)
      assert.include(refused.body, "args: part of the arguments")
      assert.include(refused.body, "at most 256 characters")
    }
    assert.strictEqual((await send(`${served.url}/api/locks?args=${"y".repeat(256)}`)).status, 200)
  })

  it("a lock whose stored info was cut is not searched by ?args=: it is counted and the page says so", async () => {
    const prefix = RedisTest.uniquePrefix("web-args-cut")
    const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockInfo: true, lockTtl: 3_600_000 })
    const take = (digest: string, args: unknown) =>
      harness.run(Lock.lock(definition, { digest: `${prefix}:${digest}`, jid: digest, info: { worker: "W", queue: "q", args } }))
    await take("small", ["needle"])
    await take("big", ["needle", "z".repeat(4000)])
    await take("other", ["hay"])
    const served = await harness.run(Web.serve({ prefix }))
    const answer = await api(served.url, "/api/locks?count=1000&args=needle")
    assert.deepStrictEqual(answer.items.map((i) => i.name), [`${prefix}:small`])
    assert.strictEqual(answer.notSearched, 1)
    const page = await send(`${served.url}/locks?count=1000&args=needle`)
    assert.include(page.body, "1 not searched")
    assert.strictEqual((await api(served.url, "/api/locks?count=1000&args=hay")).notSearched, 1)
    assert.strictEqual((await api(served.url, "/api/locks?count=1000")).notSearched, 0)
  })

  it("issue 47: the metrics summary's headers line up with their numbers: a number column's header is aligned as its cells", async () => {
    const prefix = RedisTest.uniquePrefix("web-totals")
    const served = await harness.run(Web.serve({ prefix }))
    const definition = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix })
    await harness.run(History.flush(prefix))
    await harness.run(Effect.scoped(Lock.acquire(definition, { digest: `${prefix}:t0`, jid: "t0" })))
    await harness.run(History.flush(prefix))
    const body = (await send(`${served.url}/metrics`)).body
    const table = body.slice(body.indexOf("<table class=\"totals\">"), body.indexOf("</table>", body.indexOf("<table class=\"totals\">")))
    const classesOf = (row: string) => [...row.matchAll(/<t[hd](?=[\s>])(?: class="([^"]*)")?[^>]*>/g)].map((m) => m[1] ?? "")
    const head = classesOf(/<thead>.*?<\/thead>/s.exec(table)![0])
    const rows = [...table.matchAll(/<tr><td>.*?<\/tr>/gs)].map((m) => classesOf(m[0]))
    assert.isAtLeast(rows.length, 1)
    assert.strictEqual(head.length, History.events.length + 1)
    // Each column's header takes its cells' alignment (num: right), so a number sits under its own header.
    for (const row of rows) assert.deepStrictEqual(head, row)
    assert.include(Pages.stylesheet, "th.num")
  })

  it("issue 47: a digest's queue-lock and run-lock rows in the list say which they are first in their lock cell, before a name cut short", async () => {
    const prefix = RedisTest.uniquePrefix("web-kind")
    const digest = `${prefix}:${"6f1c2b9e0d4a8f37".repeat(4)}`
    const both = LockOptions.unsafeMake({ lock: "until_and_while_executing", lockPrefix: prefix, lockTtl: 3_600_000, lockLease: 600_000 })
    await harness.run(Lock.lock(both, { digest, jid: "q1" }))
    await harness.run(Lock.lock(both, { digest, jid: "r1", phase: "run" }))
    const served = await harness.run(Web.serve({ prefix }))
    const body = (await send(`${served.url}/locks`)).body
    const cells = [...body.matchAll(/<tr data-name="([^"]+)">\n<td class="digest"[^>]*>(.*?)<\/td>/g)].map((m) => [m[1]!, m[2]!] as const)
    assert.deepStrictEqual(cells.map(([name]) => name).sort(), [digest, `${digest}:RUN`])
    for (const [name, cell] of cells) {
      const kind = name.endsWith(":RUN") ? "run" : "queue"
      // The label comes before the link, whose text the page cuts short (CSS) where the ":RUN" would have told them apart.
      assert.match(cell, new RegExp(`^<span class="kind kind-${kind}">${kind}</span> <a `), name)
    }
  })

  it("the metrics page: a chosen refresh as a meta refresh (5 to 3600 s, else a 400), both axes labelled, the hold-time histogram", async () => {
    const prefix = RedisTest.uniquePrefix("web-metrics38")
    const served = await harness.run(Web.serve({ prefix }))
    const definition = LockOptions.unsafeMake({ lock: "until_executing", lockPrefix: prefix })
    await harness.run(History.flush(prefix))
    await harness.run(Effect.scoped(Effect.gen(function*() {
      for (let i = 0; i < 3; i++) yield* Lock.acquire(definition, { digest: `${prefix}:h${i}`, jid: `h${i}` })
    })))
    await harness.run(History.flush(prefix))
    const plain = await send(`${served.url}/metrics`)
    assert.strictEqual(plain.status, 200)
    assert.notInclude(plain.body, "http-equiv=\"refresh\"")
    assert.include(plain.body, "text-anchor=\"end\" font-size=\"12\" fill=\"#555\">1</text>", "the value scale's top")
    assert.match(plain.body, /class="tick"[^>]*>\d\d:\d\d<\/text>/)
    assert.match(plain.body, /<figure class="chart hold" data-total="(\d+)">/)
    const held = Number(/<figure class="chart hold" data-total="(\d+)">/.exec(plain.body)![1])
    assert.isAtLeast(held, 3)
    assert.match(plain.body, /<rect class="bin" data-bound="1" data-count="\d+"/)
    const refreshed = await send(`${served.url}/metrics?refresh=30`)
    assert.include(refreshed.body, "<meta http-equiv=\"refresh\" content=\"30\">")
    assert.include(refreshed.body, "<strong aria-current=\"true\">30s</strong>")
    assert.include((await send(`${served.url}/metrics?refresh=3600`)).body, "content=\"3600\"")
    for (const bad of ["4", "3601", "abc", "10.5", "-5", "99999"]) {
      const refused = await send(`${served.url}/metrics?refresh=${bad}`)
      assert.strictEqual(refused.status, 400, bad)
      assert.include(refused.body, "refresh: seconds, a whole number from 5 to 3600")
    }
  })
})
