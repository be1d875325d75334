/**
 * The `unique-jobs` command, built as it ships (tsc of src/, run with node) against a private Redis: what only a
 * process shows. bullmq loaded by the built package's own import; no colour codes where the output is a pipe; an exit
 * not held up by a Redis that never answers; Ctrl-C. The rest of the command is tested in-process, in cli.test.ts.
 */
import { execFile, execFileSync, spawn } from "node:child_process"
import { rmSync } from "node:fs"
import { createServer, type Socket } from "node:net"
import { fileURLToPath } from "node:url"
import { afterAll, assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import * as Bull from "./support/bullmq.js"
import type { Ran } from "./support/cli.js"
import * as RedisTest from "./support/redis.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const out = `scratch/cli-test-${process.pid}`
const bin = `${root}${out}/bin/unique-jobs.js`

// Built once for the file, from the sources, as `npm run build` builds the package; removed when the file is done.
let built = false
const build = Effect.suspend(() => {
  if (built) return Effect.void
  built = true
  return Effect.sync(() => {
    execFileSync(process.execPath, [`${root}node_modules/typescript/bin/tsc`, "-p", "tsconfig.build.json", "--outDir", out], {
      cwd: root
    })
  })
})
afterAll(() => rmSync(`${root}${out}`, { recursive: true, force: true }))

const cli = (...args: Array<string>) =>
  Effect.callback<Ran>((resume) => {
    execFile(process.execPath, [bin, ...args], { env: { ...process.env, REDIS_URL: "", REDIS_CLUSTER_NODES: "" }, timeout: 60_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1
      resume(Effect.succeed({ code, stdout, stderr }))
    })
  })

describe("unique-jobs (the command, as a process)", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("reap --bullmq-queue, as it ships (bullmq loaded only then): the lock of a job its queue no longer has is freed", () =>
      Effect.gen(function*() {
        yield* build
        const { source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("cli-bullmq")
        const queue = yield* Bull.queue(Bull.uniqueName("cli-reap"))
        yield* Effect.promise(() => queue.waitUntilReady().then(() => queue.getJobCounts()))
        const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
        // Locks whose jobs are not in their queue: one of the named queue, one of a queue not named.
        yield* Lock.lock(definition, { digest: `${prefix}:gone`, jid: "gone", info: { queue: queue.name } })
        yield* Lock.lock(definition, { digest: `${prefix}:other`, jid: "other", info: { queue: "not-named" } })
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 20))) // past the grace (real time)
        const ran = yield* cli("reap", "--redis-url", source.url, "--prefix", prefix, "--bullmq-queue", queue.name, "--grace", "10ms", "--json")
        assert.strictEqual(ran.code, 0, ran.stderr)
        const pass = JSON.parse(ran.stdout) as { orphans: number; freed: Array<{ lock: string; jid: string }> }
        assert.deepStrictEqual(pass.freed.map((f) => [f.lock, f.jid]), [[`${prefix}:gone`, "gone"]])
        assert.strictEqual(pass.orphans, 1)
      }), { timeout: 180_000 })

    it.effect("no colour codes in a pipe: help and an unknown subcommand, as the executable detects a pipe", () =>
      Effect.gen(function*() {
        yield* build
        // Help piped to a program: no escape codes.
        for (const args of [["--help"], ["locks", "--help"], ["locks", "del", "--help"]]) {
          const help = yield* cli(...args)
          assert.strictEqual(help.code, 0, help.stderr)
          assert.include(help.stdout, "unique-jobs")
          assert.notMatch(help.stdout, /\u001b\[/)
        }
        const unknown = yield* cli("locks", "nope")
        assert.notMatch(unknown.stdout + unknown.stderr, /\u001b\[/)
      }), { timeout: 180_000 })

    it.effect("a stalled Redis (connected, never answering): the one-line error and exit 1", () =>
      Effect.gen(function*() {
        yield* build
        // Accepts connections and never answers, as a Redis stuck in a long script or DEBUG SLEEP.
        const sockets: Array<Socket> = []
        const server = createServer((socket) => {
          sockets.push(socket)
          socket.on("error", () => {})
        })
        const port = yield* Effect.promise(() =>
          new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as { port: number }).port)))
        )
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            for (const socket of sockets) socket.destroy()
            server.close()
          })
        )
        const stalled = yield* cli("stats", "--redis-url", `redis://127.0.0.1:${port}`, "--json")
        assert.strictEqual(stalled.code, 1)
        assert.strictEqual(stalled.stdout, "")
        assert.strictEqual(stalled.stderr.trim(), "unique-jobs: Redis connect failed: no connection within 3s")
        assert.isAtLeast(sockets.length, 1, "it did connect")
      }), { timeout: 180_000 })

    it.effect("web: serves the admin UI on the loopback until Ctrl-C (exit 130)", () =>
      Effect.gen(function*() {
        yield* build
        const { source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("cli-web")
        const definition = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockInfo: true })
        yield* Lock.lock(definition, { digest: `${prefix}:a`, jid: "<b>a</b>" })
        const child = spawn(process.execPath, [bin, "web", "--port", "0", "--prefix", prefix, "--read-only", "--redis-url", source.url], {
          env: { ...process.env, REDIS_URL: "", UNIQUE_JOBS_WEB_TOKEN: "" },
          stdio: ["ignore", "pipe", "pipe"]
        })
        const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
        const url = yield* Effect.promise(() =>
          new Promise<string>((resolve, reject) => {
            let out = ""
            child.stdout.on("data", (chunk: Buffer) => {
              out += chunk.toString()
              const match = /unique-jobs web: (http:\/\/\S+?)\/ /.exec(out)
              if (match !== null) resolve(match[1]!)
            })
            void exited.then((code) => reject(new Error(`exited ${code}: ${out}`)))
          })
        )
        assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/)
        const page = yield* Effect.promise(() => fetch(`${url}/locks`).then((r) => r.text()))
        assert.include(page, `${prefix}:a`)
        assert.include(page, "read-only")
        const posted = yield* Effect.promise(() => fetch(`${url}/lock/delete`, { method: "POST", body: new URLSearchParams({ digest: `${prefix}:a` }) }))
        assert.strictEqual(posted.status, 403)
        child.kill("SIGINT")
        assert.strictEqual(yield* Effect.promise(() => exited), 130)

      }), { timeout: 180_000 })
  })
})
