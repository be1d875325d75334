/**
 * The README's examples: each code block quoted from `examples/` is that file as it is (less its header comment,
 * with the package's import paths), and the runnable ones run as the README says, against a private redis-server.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"
import * as RedisTest from "./support/redis.js"

const root = new URL("../", import.meta.url)
const read = (path: string) => readFileSync(new URL(path, root), "utf8")

/** The file as the README shows it: header comment dropped, `../src/*.js` imports as the package's entries. */
const quoted = (path: string) =>
  read(path)
    .replace(/^\/\*\*[\s\S]*?\*\/\n/, "")
    .replace(/"\.\.\/src\/index\.js"/g, "\"effect-unique-jobs\"")
    .replace(/"\.\.\/src\/bullmq\.js"/g, "\"effect-unique-jobs/bullmq\"")
    .trim()

/** The ```ts block right after the README's "This is [`<path>`]" line. */
const block = (readme: string, path: string) => {
  const at = readme.indexOf(`This is [\`${path}\`]`)
  assert.isAtLeast(at, 0, `the README quotes ${path}`)
  const start = readme.indexOf("```ts\n", at) + "```ts\n".length
  return readme.slice(start, readme.indexOf("\n```", start)).trim()
}

const run = (path: string, url: string) =>
  Effect.async<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>((resume) => {
    const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL(path, root))], {
      env: { ...process.env, REDIS_URL: url },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk) => (stdout += String(chunk)))
    child.stderr.on("data", (chunk) => (stderr += String(chunk)))
    child.on("exit", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

describe("README examples", () => {
  const readme = read("README.md")
  for (const path of ["examples/quickstart.ts", "examples/own-queue.ts", "examples/bullmq.ts"]) {
    it(`${path}: the README quotes it as it is`, () => assert.strictEqual(block(readme, path), quoted(path)))
  }

  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("examples/quickstart.ts runs as the README shows: Enqueued, then Skipped; the report is rebuilt once", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const { code, stderr, stdout } = yield* run("examples/quickstart.ts", source.url)
        assert.strictEqual(code, 0, stderr)
        const logged = stdout + stderr
        assert.include(logged, "Enqueued, then Skipped")
        assert.strictEqual(logged.split("rebuilding report 42").length - 1, 1)
      }))

    it.effect("examples/bullmq.ts runs on real BullMQ: both faces add, skip the duplicate and run the job once", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const { code, stderr, stdout } = yield* run("examples/bullmq.ts", source.url)
        assert.strictEqual(code, 0, stderr)
        const logged = stdout + stderr
        assert.strictEqual(logged.split("Enqueued, then Skipped").length - 1, 2, logged)
        assert.strictEqual(logged.split("rebuilding report 42").length - 1, 1, logged)
        assert.strictEqual(logged.split("charging customer 7").length - 1, 1, logged)
      }))
  })
})
