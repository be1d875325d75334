/**
 * The admin UI's guards, over HTTP: a token off the loopback (401 without it, for every route), a change only as a
 * POST with the CSRF token from the same origin, read-only refusing every change, loopback Host names only without a
 * token, a malformed digest, pattern or cursor answered 400, options decoded where given, and every change counted.
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Redacted from "effect/Redacted"
import { request as httpRequest } from "node:http"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as Metrics from "../src/Metrics.js"
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
    for (const path of ["/", "/locks", `/lock?digest=${prefix}:mail0`, "/reaper", "/metrics", "/api/locks", "/api/openapi.json", "/assets/style.css", "/api/session"]) {
      const answer = await send(`${base}${path}`)
      // The stylesheet and the API description are not secrets, but nothing else is served without the token.
      if (path === "/assets/style.css" || path === "/api/openapi.json") continue
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
