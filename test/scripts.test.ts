/**
 * The Lua scripts ship inside the code (issue 8, item 16): `src/store/lua.generated.ts` is generated from `lua/`
 * (`npm run generate`), matches it byte for byte, and an esbuild bundle of the package runs its scripts from a
 * folder with no `lua/` next to it. A script is the prelude (`lua/lib/`) and its own file, and its errors on Redis
 * name the file and line they were raised at.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import { createHash } from "node:crypto"
import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, relative, sep } from "node:path"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"
import * as Redis from "../src/Redis.js"
import * as Memory from "../src/store/Memory.js"
import * as Scripts from "../src/store/Scripts.js"
import { sources } from "../src/store/lua.generated.js"
import * as RedisTest from "./support/redis.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const luaDir = join(root, "lua")
const regenerate = "src/store/lua.generated.ts is out of date with lua/: run `npm run generate`"

const luaFiles = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    return entry.isDirectory() ? luaFiles(path) : entry.name.endsWith(".lua") ? [path] : []
  })

describe("the generated Lua module", () => {
  it("holds every file of lua/, byte for byte", () => {
    const files = luaFiles(luaDir).map((path) => relative(luaDir, path).split(sep).join("/")).sort()
    assert.deepStrictEqual(Object.keys(sources).sort(), files, `the files differ. ${regenerate}`)
    for (const file of files) {
      const source = (sources as Record<string, string>)[file]
      assert.isTrue(source === readFileSync(join(luaDir, file), "utf8"), `lua/${file} differs. ${regenerate}`)
    }
  })

  it("is exactly what the generator writes", () => {
    const check = spawnSync(process.execPath, [join(root, "scripts", "generate-lua.mjs"), "--check"], {
      encoding: "utf8"
    })
    assert.strictEqual(check.status, 0, check.stderr.trim() || regenerate)
  })

  it("gives every script the prelude's functions it calls (lua/lib/) in front, and knows which lines come from which file", () => {
    const scripts = Scripts.loadScripts()
    assert.deepStrictEqual(Scripts.prelude, ["lib/prelude.lua"])
    const prelude = readFileSync(join(luaDir, "lib/prelude.lua"), "utf8")
    const defined = [...prelude.matchAll(/^local function (\w+)\(/gm)].map((match) => match[1]!)
    for (const [name, script] of Object.entries(scripts)) {
      assert.strictEqual(script.name, name)
      const own = readFileSync(join(luaDir, Scripts.files[name as Scripts.ScriptName]), "utf8")
      // The script's own file last, whole; before it only functions of the prelude, each whole and once.
      assert.isTrue(script.source.endsWith(own))
      assert.strictEqual(script.sha, createHash("sha1").update(script.source).digest("hex"))
      const last = script.parts[script.parts.length - 1]!
      assert.deepStrictEqual(last, {
        file: `lua/${Scripts.files[name as Scripts.ScriptName]}`,
        from: script.source.split("\n").length - own.split("\n").length + 1,
        lines: own.split("\n").length - 1,
        line: 1
      })
      let from = 1
      for (const part of script.parts) {
        assert.strictEqual(part.from, from)
        from += part.lines
      }
      const sourceLines = script.source.split("\n")
      for (let line = 1; line < from; line++) {
        const [file, at] = Scripts.locate(script, line)!.split(":")
        assert.strictEqual(readFileSync(join(root, file!), "utf8").split("\n")[Number(at) - 1], sourceLines[line - 1])
      }
      assert.isUndefined(Scripts.locate(script, from))
      // Every prelude function the script calls (or passes as a value, as batch.lua does) is in it, and no other:
      // Redis makes each anew on every run.
      const held = [...script.source.matchAll(/^local function (\w+)\(/gm)].map((match) => match[1]!)
        .filter((fn) => defined.includes(fn))
      const code = script.source.replace(/--.*$/gm, "")
      const called = defined.filter((fn) =>
        [...code.matchAll(new RegExp(`(^|[^\\w.:])${fn}\\s*[(,}]`, "gm"))].length > (held.includes(fn) ? 1 : 0)
      )
      assert.deepStrictEqual(held, called, `${name} holds the prelude functions it calls`)
      assert.deepStrictEqual(held, defined.filter((fn) => held.includes(fn)), `${name} keeps the prelude's order`)
    }
    // The lock script holds no release, the release no acquire.
    assert.notInclude(scripts.lock.source, "local function release(")
    assert.notInclude(scripts.unlock.source, "local function acquire(")
  })
})

/** The 1-based line of `file` (under lua/) holding `text`; the text must be there exactly once. */
const lineOf = (file: string, text: string): number => {
  const lines = readFileSync(join(luaDir, file), "utf8").split("\n")
  const found = lines.flatMap((line, i) => (line.includes(text) ? [i + 1] : []))
  assert.strictEqual(found.length, 1, `${text} in lua/${file}`)
  return found[0]!
}

layer(RedisTest.layerServer, { excludeTestServices: true })("a script's error on Redis", (it) => {
  it.effect("names the lua/ file and line it was raised at: a refused argument, in the prelude", () =>
    Effect.gen(function*() {
      const { raw } = yield* RedisTest.TestRedis
      const store = yield* Redis.makeFromClient(raw)
      const lock: Redis.LockKey = { prefix: RedisTest.uniquePrefix("where"), name: "refused" }
      const request = { jid: "j", limit: 0, ttlMs: 0, leaseMs: 0, info: "", fenced: false }
      const error = yield* Effect.flip(store.lock(lock, request))
      const at = `lua/lib/prelude.lua:${lineOf("lib/prelude.lua", "error({err = 'ERR ' .. name")}`
      assert.strictEqual(error._tag, "RedisError")
      assert.strictEqual(error.script, at)
      // The reason is the memory store's, word for word; the place is at the end of the message.
      const memory = yield* Effect.flip(Memory.make().lock(lock, request))
      assert.strictEqual(error.reason, memory.reason)
      assert.strictEqual(error.reason, "ERR limit must be a whole number from 1 to 2^50, got 0")
      assert.strictEqual(error.message, `Redis lock failed: ${error.reason} (at ${at})`)
      assert.isUndefined(memory.script)
    }))

  it.effect("a wrong-typed key, in the script's own file; the batch it was in renewed nothing", () =>
    Effect.gen(function*() {
      const { raw } = yield* RedisTest.TestRedis
      const store = yield* Redis.makeFromClient(raw)
      const prefix = RedisTest.uniquePrefix("where")
      const held: Redis.LockKey = { prefix, name: `${prefix}:held` }
      const wrong: Redis.LockKey = { prefix, name: `${prefix}:wrong` }
      const acquired = yield* store.lock(held, { jid: "j", limit: 1, ttlMs: 0, leaseMs: 1000, info: "", fenced: true })
      assert.strictEqual(acquired._tag, "Acquired")
      const entry = () => raw.hget(Redis.keysOf(held).locked, "j")
      const before = yield* Effect.promise(entry)
      yield* Effect.promise(() => raw.rpush(Redis.keysOf(wrong).locked, "x"))
      const error = yield* Effect.flip(
        store.renewAll([
          { lock: held, jid: "j", leaseMs: 60_000, fence: acquired._tag === "Acquired" ? acquired.fence : 0 },
          { lock: wrong, jid: "j", leaseMs: 60_000, fence: 0 }
        ])
      )
      assert.match(error.reason, /^WRONGTYPE /)
      assert.strictEqual(error.script, `lua/renew_all.lua:${lineOf("renew_all.lua", "redis.call('HGET'")}`)
      // All or nothing: the renewable hold before the wrong-typed key kept its lease and its key's TTL.
      assert.strictEqual(yield* Effect.promise(entry), before)
      assert.isAtMost(yield* Effect.promise(() => raw.pttl(Redis.keysOf(held).locked)), 1000)
    }))
})

layer(RedisTest.layerServer, { excludeTestServices: true })("an esbuild bundle", (it) => {
  it.effect("runs its scripts with no lua/ folder beside it", () =>
    Effect.gen(function*() {
      const { raw, source } = yield* RedisTest.TestRedis
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => mkdtempSync(join(tmpdir(), "unique-jobs-bundle-"))),
        (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
      )
      const esbuild = yield* Effect.promise(() => import("esbuild"))
      yield* Effect.promise(() =>
        esbuild.build({
          entryPoints: [join(root, "src", "index.ts")],
          outfile: join(dir, "bundle.mjs"),
          bundle: true,
          platform: "node",
          format: "esm",
          external: ["effect", "ioredis"],
          logLevel: "silent"
        })
      )
      // Only the externals come from node_modules; the scripts must come from the bundle.
      symlinkSync(join(root, "node_modules"), join(dir, "node_modules"), "dir")
      const prefix = RedisTest.uniquePrefix("bundle")
      writeFileSync(
        join(dir, "check.mjs"),
        `import * as Effect from "effect/Effect"
import { Lock, Options, Redis } from "./bundle.mjs"
const definition = Options.unsafeMake({ lock: "until_executed", lockPrefix: ${JSON.stringify(prefix)} })
const program = Effect.gen(function*() {
  const digest = yield* Lock.digest(definition, { worker: "W", queue: "q", args: [1] })
  const acquired = yield* Lock.lock(definition, { digest, jid: "j1" })
  const released = yield* Lock.unlock(definition, { digest, jid: "j1" })
  return { jid: acquired.jid, released }
}).pipe(Effect.provide(Redis.layer({ url: process.argv[2] })))
Effect.runPromise(program).then(
  (result) => process.stdout.write(JSON.stringify(result)),
  (error) => {
    process.stderr.write(String(error))
    process.exitCode = 1
  }
)
`
      )
      const run = spawnSync(process.execPath, [join(dir, "check.mjs"), source.url], {
        cwd: dir,
        encoding: "utf8",
        timeout: 30_000
      })
      assert.strictEqual(run.status, 0, `the bundle failed: ${run.stderr}`)
      assert.deepStrictEqual(JSON.parse(run.stdout), { jid: "j1", released: true })
      // It loaded exactly the scripts the sources give.
      const scripts = Object.values(Scripts.loadScripts())
      const loaded = yield* Effect.promise(() => raw.script("EXISTS", ...scripts.map((script) => script.sha)))
      assert.deepStrictEqual(loaded, scripts.map(() => 1))
    }), 60_000)
})
