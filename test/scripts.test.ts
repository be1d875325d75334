/**
 * The Lua scripts ship inside the code (issue 8, item 16): `src/internal/lua.generated.ts` is generated from `lua/`
 * (`npm run generate`), matches it byte for byte, and an esbuild bundle of the package runs its scripts from a
 * folder with no `lua/` next to it.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import { createHash } from "node:crypto"
import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, relative, sep } from "node:path"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"
import * as Scripts from "../src/internal/scripts.js"
import { sources } from "../src/internal/lua.generated.js"
import * as RedisTest from "./support/redis.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const luaDir = join(root, "lua")
const regenerate = "src/internal/lua.generated.ts is out of date with lua/: run `npm run generate`"

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

  it("gives every script the prelude in front", () => {
    const scripts = Scripts.loadScripts()
    for (const [name, script] of Object.entries(scripts)) {
      assert.strictEqual(script.name, name)
      const own = readFileSync(join(luaDir, `${name}.lua`), "utf8")
      assert.strictEqual(script.source, `${sources["acquire.lua"]}\n${own}`)
      assert.strictEqual(script.sha, createHash("sha1").update(script.source).digest("hex"))
    }
  })
})

layer(RedisTest.layerServer, { excludeTestServices: true })("an esbuild bundle", (it) => {
  it.scoped("runs its scripts with no lua/ folder beside it", () =>
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
import { Lock, Redis } from "./bundle.mjs"
const definition = Lock.unsafeMake({ lock: "until_executed", lockPrefix: ${JSON.stringify(prefix)} })
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
