/**
 * The `unique-jobs` command, built as it ships (tsc of src/, run with node) against a private Redis: every
 * subcommand, `--json` that parses, and one-line errors with a non-zero exit for bad arguments and a Redis that is
 * not there.
 */
import { execFile, execFileSync } from "node:child_process"
import { rmSync } from "node:fs"
import { createServer } from "node:net"
import { fileURLToPath } from "node:url"
import { afterAll, assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
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

interface Ran {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

const cli = (...args: Array<string>) =>
  Effect.async<Ran>((resume) => {
    execFile(process.execPath, [bin, ...args], { env: { ...process.env, REDIS_URL: "" }, timeout: 60_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1
      resume(Effect.succeed({ code, stdout, stderr }))
    })
  })

/** A loopback port nothing listens on. */
const closedPort = Effect.promise(() =>
  new Promise<number>((resolve) => {
    const server = createServer()
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
)

describe("unique-jobs (the command)", () => {
  layer(RedisTest.layer())((it) => {
    it.scoped("every subcommand against a private Redis, as a table and as JSON", () =>
      Effect.gen(function*() {
        yield* build
        const { source } = yield* RedisTest.TestRedis
        const url = ["--redis-url", source.url]
        const prefix = RedisTest.uniquePrefix("cli")
        const p = ["--prefix", prefix]

        const help = yield* cli("--help")
        assert.strictEqual(help.code, 0)
        assert.include(help.stdout, "unique-jobs")

        // The README's digest.
        const digest = yield* cli("digest", "--worker", "ChargeCustomerJob", "--queue", "default", "--args", "[1]")
        assert.strictEqual(digest.code, 0, digest.stderr)
        assert.strictEqual(digest.stdout.trim(), "uniquejobs:ace64a5ce1899f22b3c3cb97985a733d")
        const digestJson = yield* cli("digest", "--worker", "ChargeCustomerJob", "--args", "[1]", "--json")
        assert.deepStrictEqual(JSON.parse(digestJson.stdout), { digest: "uniquejobs:ace64a5ce1899f22b3c3cb97985a733d" })
        const modern = yield* cli("digest", "--worker", "ChargeCustomerJob", "--args", "[1]", "--algorithm", "modern")
        assert.match(modern.stdout.trim(), /^uniquejobs:[0-9a-f]{64}$/)

        const queued = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockInfo: true, lockTtl: 60_000 })
        for (let i = 0; i < 30; i++) {
          yield* Lock.lock(queued, { digest: `${prefix}:d${i}`, jid: `j${i}`, info: { worker: "CliJob", args: [i] } })
        }

        const list = yield* cli("locks", "list", `${prefix}:d1*`, ...url, ...p, "--json")
        assert.strictEqual(list.code, 0, list.stderr)
        const listed = JSON.parse(list.stdout) as Array<{ name: string }>
        assert.deepStrictEqual(listed.map((e) => e.name).sort(), [1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19].map((i) => `${prefix}:d${i}`).sort())
        const limited = yield* cli("locks", "list", ...url, ...p, "--limit", "5", "--json")
        assert.strictEqual((JSON.parse(limited.stdout) as Array<unknown>).length, 5)
        const table = yield* cli("locks", "list", `${prefix}:d2`, ...url, ...p)
        assert.include(table.stdout, `${prefix}:d2`)

        const show = yield* cli("locks", "show", `${prefix}:d3`, ...url, ...p, "--json")
        assert.strictEqual(show.code, 0, show.stderr)
        const shown = JSON.parse(show.stdout) as { queue: { holders: Array<{ jid: string; info: { worker: string } }> } }
        assert.strictEqual(shown.queue.holders[0]?.jid, "j3")
        assert.strictEqual(shown.queue.holders[0]?.info.worker, "CliJob")
        assert.include((yield* cli("locks", "show", `${prefix}:d3`, ...url, ...p)).stdout, "j3")

        const unlocked = yield* cli("locks", "unlock", `${prefix}:d3`, "j3", ...url, ...p, "--json")
        assert.deepStrictEqual(JSON.parse(unlocked.stdout), { released: true })
        const again = yield* cli("locks", "unlock", `${prefix}:d3`, "j3", ...url, ...p, "--json")
        assert.deepStrictEqual(JSON.parse(again.stdout), { released: false })

        const dry = yield* cli("locks", "del", `${prefix}:d2*`, "--dry-run", ...url, ...p, "--json")
        assert.deepStrictEqual(JSON.parse(dry.stdout), { matched: 11, deleted: 0, dryRun: true })
        const del = yield* cli("locks", "del", `${prefix}:d2*`, ...url, ...p, "--json")
        assert.deepStrictEqual(JSON.parse(del.stdout), { matched: 11, deleted: 11, dryRun: false })

        const stats = yield* cli("stats", ...url, ...p, "--json")
        assert.strictEqual(stats.code, 0, stats.stderr)
        const counted = JSON.parse(stats.stdout) as { indexSize: number; byType: Record<string, number> }
        assert.strictEqual(counted.indexSize, 30 - 1 - 11)
        assert.deepStrictEqual(counted.byType, { until_executed: 18 })
        assert.include((yield* cli("stats", ...url, ...p)).stdout, "index size")

        const reap = yield* cli("reap", ...url, ...p, "--json")
        assert.strictEqual(reap.code, 0, reap.stderr)
        const pass = JSON.parse(reap.stdout) as { ran: boolean; scanned: number; members: number }
        assert.isTrue(pass.ran)
        assert.strictEqual(pass.scanned, 18)
        assert.strictEqual(pass.members, 0, "live locks stay")
        const dryReap = yield* cli("reap", "--dry-run", ...url, ...p)
        assert.include(dryReap.stdout, "would remove")
      }), { timeout: 180_000 })

    it.scoped("bad arguments and a Redis that is not there: a non-zero exit and one line saying why", () =>
      Effect.gen(function*() {
        yield* build
        const notJson = yield* cli("digest", "--worker", "W", "--args", "nope")
        assert.notStrictEqual(notJson.code, 0)
        assert.strictEqual(notJson.stderr.trim(), "unique-jobs: --args is not JSON: nope (write a JSON array, like '[1, \"a\"]')")
        const missing = yield* cli("locks", "show")
        assert.notStrictEqual(missing.code, 0)
        assert.include(missing.stdout + missing.stderr, "DIGEST")
        const noUrl = yield* cli("stats")
        assert.notStrictEqual(noUrl.code, 0)
        assert.strictEqual(noUrl.stderr.trim(), "unique-jobs: no Redis: pass --redis-url redis://host:port or set REDIS_URL")
        const port = yield* closedPort
        const down = yield* cli("stats", "--redis-url", `redis://127.0.0.1:${port}`)
        assert.notStrictEqual(down.code, 0)
        const lines = down.stderr.trim().split("\n")
        assert.strictEqual(lines.length, 1, down.stderr)
        assert.match(lines[0]!, /^unique-jobs: Redis connect failed: cannot reach Redis/)
      }), { timeout: 180_000 })
  })
})
