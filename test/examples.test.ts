/**
 * The README's and the manual's examples: each imports the package by its name, each code block quoted from
 * `examples/` is that file as it is (less its header comment), and the runnable ones run as the page says, against a
 * private redis-server.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { spawn } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"
import { runProgram } from "./support/program.js"
import * as RedisTest from "./support/redis.js"

const root = new URL("../", import.meta.url)
const read = (path: string) => readFileSync(new URL(path, root), "utf8")

/** The file as the README shows it: its header comment dropped. */
const quoted = (path: string) => read(path).replace(/^\/\*\*[\s\S]*?\*\/\n/, "").trim()

const examples = readdirSync(new URL("examples/", root)).filter((file) => file.endsWith(".ts")).sort()

/** The ```ts block right after the page's "This is [`<path>`]" line. */
const block = (readme: string, path: string, page = "the README") => {
  const at = readme.indexOf(`This is [\`${path}\`]`)
  assert.isAtLeast(at, 0, `${page} quotes ${path}`)
  const start = readme.indexOf("```ts\n", at) + "```ts\n".length
  return readme.slice(start, readme.indexOf("\n```", start)).trim()
}

describe("README examples", () => {
  const readme = read("README.md")
  // A copied example must run as it is in the user's app: the package by its name (its entries and `./*` modules),
  // never this repository's files. Here the name is the sources (tsconfig.json's paths, which tsc and tsx read).
  it("every example imports the package by its name, nothing by a relative path", () => {
    assert.isAtLeast(examples.length, 7)
    for (const file of examples) {
      const specifiers = [...read(`examples/${file}`).matchAll(/^(?:import|export)\b[^"']*?from\s+["']([^"']+)["']/gm)]
        .map((match) => match[1]!)
      assert.isNotEmpty(specifiers, file)
      const relative = specifiers.filter((specifier) => specifier.startsWith("."))
      assert.deepStrictEqual(relative, [], `examples/${file} imports by a relative path`)
      assert.isTrue(
        specifiers.some((specifier) => /^effect-unique-jobs(\/|$)/.test(specifier)),
        `examples/${file} imports effect-unique-jobs`
      )
    }
  })
  for (const path of ["examples/bullmq-promises.ts", "examples/quickstart.ts", "examples/own-queue.ts"]) {
    it(`${path}: the README quotes it as it is`, () => assert.strictEqual(block(readme, path), quoted(path)))
  }
  // The manual's BullMQ page quotes the program with both faces.
  it("examples/bullmq.ts: docs/bullmq.md quotes it as it is", () => {
    const page = read("docs/bullmq.md")
    assert.strictEqual(block(page, "examples/bullmq.ts", "docs/bullmq.md"), quoted("examples/bullmq.ts"))
  })

  it("the README's first example is BullMQ with Promises, within its first 120 lines", () => {
    const lines = readme.split("\n")
    const at = lines.findIndex((line) => line.includes("This is [`examples/bullmq-promises.ts`]"))
    assert.isAtLeast(at, 0)
    assert.isBelow(at, 120)
    assert.isAtMost(lines.length, 300, "the README is a front page of at most 300 lines")
  })

  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("examples/quickstart.ts runs as the README shows: Enqueued, then Skipped; the report is rebuilt once", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const { code, lingered, stderr, stdout } = yield* runProgram("examples/quickstart.ts", {
          REDIS_URL: source.url
        })
        assert.strictEqual(code, 0, stderr)
        const logged = stdout + stderr
        assert.include(logged, "Enqueued, then Skipped")
        assert.strictEqual(logged.split("rebuilding report 42").length - 1, 1)
        // It exits by itself once its work is done: a lease keeper that kept the process alive held it up to lease / 3
        // (10 s) after its last line. The bound only tells that apart from an exit.
        assert.isBelow(lingered, 5_000, "the program stayed up after its last line")
      }))

    it.effect("a worker started while Redis is down connects once it is up (the first connect is retried)", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        assert.isDefined(source.server, "a private redis-server")
        yield* source.server!.kill
        const child = yield* Effect.acquireRelease(
          Effect.sync(() =>
            spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL("test/support/connectLate.ts", root))], {
              env: { ...process.env, REDIS_URL: source.url },
              stdio: ["ignore", "pipe", "pipe"]
            })
          ),
          (child) => Effect.sync(() => child.kill("SIGKILL"))
        )
        let output = ""
        const exited = new Promise<number | null>((resolve) => child.on("exit", resolve))
        const connecting = new Promise<void>((resolve) => {
          const take = (chunk: unknown) => {
            output += String(chunk)
            if (output.includes("connecting")) resolve()
          }
          child.stdout.on("data", take)
          child.stderr.on("data", take)
        })
        // Redis comes up a second after the worker began to connect.
        yield* Effect.promise(() => connecting)
        yield* Effect.sleep(1000)
        yield* source.server!.restart
        const code = yield* Effect.promise(() => exited)
        assert.strictEqual(code, 0, output)
        assert.include(output, "locked")
      }), 120_000)

    it.effect("a program that took a run lock (60 s lease) exits by itself after its last line", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const { code, lingered, stderr, stdout } = yield* runProgram("test/support/runLockExit.ts", {
          REDIS_URL: source.url
        })
        assert.strictEqual(code, 0, stderr)
        assert.include(stdout + stderr, "run lock: Performed")
        // A keeper that kept the process alive: 20 s (lease / 3).
        assert.isBelow(lingered, 10_000, "the program stayed up after its last line")
      }), 120_000)

    it.effect("examples/otel.ts exports each lock step's client span to the console, the duplicate's linked to the hold", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const { code, stderr, stdout } = yield* runProgram("examples/otel.ts", { REDIS_URL: source.url })
        assert.strictEqual(code, 0, stderr)
        // The console exporter prints one object per span: its name, then its id, then its attributes and links.
        const spans = stdout.split(/\n(?=\{)/).filter((block) => block.includes("name: 'UniqueJobs."))
        const names = spans.map((block) => /name: '(UniqueJobs\.[a-z]+)'/.exec(block)![1])
        assert.deepStrictEqual(names, ["UniqueJobs.lock", "UniqueJobs.lock", "UniqueJobs.unlock"], stdout)
        for (const block of spans) {
          assert.include(block, "'db.system.name': 'redis'")
          assert.include(block, "'unique_jobs.lock_type': 'until_executed'")
        }
        const held = /\n {2}id: '([0-9a-f]{16})'/.exec(spans[0]!)![1]!
        assert.include(spans[1]!, "'unique_jobs.holders': 'first'")
        assert.match(spans[1]!, new RegExp(`links: \\[[\\s\\S]*spanId: '${held}'`))
        assert.include(stdout + stderr, "second: refused, held by first")
      }))

    it.effect("examples/bullmq-promises.ts runs on real BullMQ: adds, skips the duplicate and runs the job once", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const { code, stderr, stdout } = yield* runProgram("examples/bullmq-promises.ts", { REDIS_URL: source.url })
        assert.strictEqual(code, 0, stderr)
        const logged = stdout + stderr
        assert.strictEqual(logged.split("Enqueued, then Skipped").length - 1, 1, logged)
        assert.strictEqual(logged.split("rebuilding report 42").length - 1, 1, logged)
      }))

    it.effect("examples/bullmq.ts runs on real BullMQ: both faces add, skip the duplicate and run the job once", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const { code, stderr, stdout } = yield* runProgram("examples/bullmq.ts", { REDIS_URL: source.url })
        assert.strictEqual(code, 0, stderr)
        const logged = stdout + stderr
        assert.strictEqual(logged.split("Enqueued, then Skipped").length - 1, 2, logged)
        assert.strictEqual(logged.split("rebuilding report 42").length - 1, 1, logged)
        assert.strictEqual(logged.split("charging customer 7").length - 1, 1, logged)
      }))
  })
})
