/**
 * The admin UI's guards, over HTTP: a token off the loopback (401 without it, for every route), a change only as a
 * POST with the CSRF token from the same origin, read-only refusing every change, loopback Host names only without a
 * token, a malformed digest, pattern or cursor answered 400, options decoded where given, and every change counted.
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Redacted from "effect/Redacted"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { createServer, request as httpRequest } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as Metrics from "../src/Metrics.js"
import * as Redis from "../src/Redis.js"
import * as RedisServer from "../src/RedisServer.js"
import * as Web from "../src/Web.js"
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

const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString()
const formHeaders = { "content-type": "application/x-www-form-urlencoded" }

const actions = (action: string, outcome: string) =>
  Metric.value(Metric.tagged(Metric.tagged(Metrics.adminActions, "action", action), "outcome", outcome)).pipe(
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
    const allowed = await del({ cookie, origin: served.url, "sec-fetch-site": "same-origin" }, { digest: `${prefix}:mail0`, _csrf: csrf })
    assert.strictEqual(allowed.status, 200)
    assert.include(allowed.body, "removed 1 holder")
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
    assert.strictEqual(done.status, 200)
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
    const server = await Effect.runPromise(Scope.extend(RedisServer.start, scope))
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
    assert.include(answer.body, "no answer within")
    await down.close()
  })
})
