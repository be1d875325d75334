/**
 * The `unique-jobs` command, run in this process as the executable runs it (`CliMain.main`: its argv, its console and
 * logs, its exit code) against a private Redis: every subcommand, `--json` that parses, and one-line errors with a
 * non-zero exit for bad arguments and a Redis that is not there. What only a process shows (the built package, a
 * pipe, a signal, an exit not held up) is in cli.process.test.ts.
 */
import { readFileSync } from "node:fs"
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Lock from "../src/Lock.js"
import * as LockOptions from "../src/Options.js"
import { cli, cliWith, closedPort, type Ran } from "./support/cli.js"
import { inTurn, isLockLost, probe } from "./support/probe.js"
import * as RedisTest from "./support/redis.js"

describe("unique-jobs (the command)", () => {
  layer(RedisTest.layer())((it) => {
    it.effect("every subcommand against a private Redis, as a table and as JSON", () =>
      Effect.gen(function*() {
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
        const listed = (JSON.parse(list.stdout) as { items: Array<{ name: string }> }).items
        assert.deepStrictEqual(listed.map((e) => e.name).sort(), [1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19].map((i) => `${prefix}:d${i}`).sort())
        const limited = yield* cli("locks", "list", ...url, ...p, "--limit", "5", "--json")
        assert.strictEqual((JSON.parse(limited.stdout) as { items: Array<unknown> }).items.length, 5)
        const table = yield* cli("locks", "list", `${prefix}:d2`, ...url, ...p)
        assert.include(table.stdout, `${prefix}:d2`)

        const show = yield* cli("locks", "show", `${prefix}:d3`, ...url, ...p, "--json")
        assert.strictEqual(show.code, 0, show.stderr)
        const shown = JSON.parse(show.stdout) as { queue: { holders: Array<{ jid: string; info: { worker: string } }> } }
        assert.strictEqual(shown.queue.holders[0]?.jid, "j3")
        assert.strictEqual(shown.queue.holders[0]?.info.worker, "CliJob")
        assert.include((yield* cli("locks", "show", `${prefix}:d3`, ...url, ...p)).stdout, "j3")

        const unlocked = yield* cli("locks", "unlock", `${prefix}:d3`, "j3", ...url, ...p, "--json")
        assert.strictEqual(unlocked.code, 0, unlocked.stderr)
        assert.deepStrictEqual(JSON.parse(unlocked.stdout), {
          released: true,
          removed: [{ lock: `${prefix}:d3`, jid: "j3", live: true }],
          revoked: []
        })
        // A jid that holds nothing: the answer, and a non-zero exit (nothing that was asked was done).
        const again = yield* cli("locks", "unlock", `${prefix}:d3`, "j3", ...url, ...p, "--json")
        assert.deepStrictEqual(JSON.parse(again.stdout), { released: false, removed: [], revoked: [] })
        assert.strictEqual(again.code, 1)
        assert.strictEqual(again.stderr.trim(), `unique-jobs: j3 held no live lock on ${prefix}:d3`)

        const dry = yield* cli("locks", "del", `${prefix}:d2*`, "--dry-run", ...url, ...p, "--json")
        const wouldGo = JSON.parse(dry.stdout) as { matched: number; deleted: number; locks: Array<{ lock: string }>; wouldRevoke: Array<unknown> }
        assert.deepStrictEqual([wouldGo.matched, wouldGo.deleted, wouldGo.wouldRevoke], [11, 0, []])
        assert.deepStrictEqual(wouldGo.locks.map((l) => l.lock).sort(), [2, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29].map((i) => `${prefix}:d${i}`).sort())
        const del = yield* cli("locks", "del", `${prefix}:d2*`, ...url, ...p, "--json")
        assert.deepStrictEqual(JSON.parse(del.stdout), { matched: 11, deleted: 11, dryRun: false, revoked: [], refused: [] })

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

    it.effect("mistakes are said, naming what was meant, with a non-zero exit; nothing is asked of Redis", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const url = ["--redis-url", source.url]
        const prefix = RedisTest.uniquePrefix("cli-mistakes")
        const p = ["--prefix", prefix]
        const queued = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix })
        yield* Lock.lock(queued, { digest: `${prefix}:abc123`, jid: "j1" })
        const said = (ran: Ran) => {
          assert.strictEqual(ran.code, 1, ran.stdout)
          const lines = ran.stderr.trim().split("\n")
          assert.strictEqual(lines.length, 1, ran.stderr)
          return lines[0]!
        }
        // The hash without its prefix: a hint naming the full name.
        assert.strictEqual(
          said(yield* cli("locks", "show", "abc123", ...url, ...p)),
          `unique-jobs: abc123 is not a lock under --prefix ${prefix}: a digest includes its prefix: ${prefix}:abc123`
        )
        // A lock of another prefix, named without --prefix (issue 47, item 7): the hint list gives, and exit 1, though
        // its key holds a holder (before: its holder printed beside "not one of this library's locks", exit 0).
        for (const name of [`${prefix}:abc123`, `${prefix}:abc123:RUN`]) {
          const other = yield* cli("locks", "show", name, ...url)
          assert.strictEqual(
            said(other),
            `unique-jobs: ${name} is not a lock under --prefix uniquejobs: lock names under --prefix uniquejobs start ` +
              `with uniquejobs: (for prefix ${prefix}, pass --prefix ${prefix})`
          )
          assert.strictEqual(other.stdout, "")
        }
        // A prefix with inner ':' is named whole.
        assert.match(said(yield* cli("locks", "show", "app:jobs:abc123", ...url)), /\(for prefix app:jobs, pass --prefix app:jobs\)$/)
        // A pattern under another prefix: named.
        assert.strictEqual(
          said(yield* cli("locks", "del", "nu-del:*", ...url, ...p)),
          `unique-jobs: PATTERN nu-del:* matches no lock: lock names under --prefix ${prefix} start with ${prefix}: ` +
            "(for prefix nu-del, pass --prefix nu-del)"
        )
        assert.match(said(yield* cli("locks", "list", "other:*", ...url, ...p)), /pass --prefix other\)$/)
        // A word with a single '-' where an argument goes is a mistyped option, not a short flag nor a name.
        assert.strictEqual(
          said(yield* cli("locks", "show", "-x", ...url, ...p)),
          "unique-jobs: unknown option -x (see unique-jobs locks show --help); a digest never starts with '-'"
        )
        // A mistyped flag is not a pattern: named, with the one meant, and the command's usage.
        const usage = (ran: Ran) => {
          assert.strictEqual(ran.code, 1, ran.stdout)
          const lines = ran.stderr.trim().split("\n")
          assert.strictEqual(lines.length, 2, ran.stderr)
          assert.match(lines[1]!, /^usage: unique-jobs /)
          return lines[0]!
        }
        assert.strictEqual(
          usage(yield* cli("locks", "list", ...url, ...p, "--jsno")),
          "unique-jobs: unknown option --jsno for unique-jobs locks list: did you mean --json?"
        )
        assert.strictEqual(usage(yield* cli("locks", "list", "--limit", "-3", ...url, ...p)), "unique-jobs: --limit must be a whole number from 1 to 100000, got -3")
        assert.strictEqual(usage(yield* cli("locks", "list", "--limit", "0", ...url, ...p)), "unique-jobs: --limit must be a whole number from 1 to 100000, got 0")
        for (const bad of ["a b", "*", ""]) {
          assert.match(said(yield* cli("locks", "list", ...url, "--prefix", bad)), /^unique-jobs: --prefix ".*" is not a lock prefix/)
          assert.match(said(yield* cli("stats", ...url, "--prefix", bad)), /is not a lock prefix/)
          // digest answers only digests a job can have: the same prefixes as the lock commands.
          assert.match(said(yield* cli("digest", "--worker", "W", "--args", "[1]", "--prefix", bad)), /is not a lock prefix/)
        }
        // An empty worker or queue is refused where a worker is defined: no job has such a digest.
        assert.match(said(yield* cli("digest", "--worker", "", "--args", "[1]")), /^unique-jobs: --worker must not be empty/)
        assert.match(said(yield* cli("digest", "--worker", "W", "--queue", "", "--args", "[1]")), /^unique-jobs: --queue must not be empty/)
        // An empty queue name, or none, is refused by name (the reap would ask about no queue).
        assert.strictEqual(said(yield* cli("reap", ...url, ...p, "--bullmq-queue", "")), "unique-jobs: --bullmq-queue \"\" is not a queue name")
        assert.strictEqual(said(yield* cli("reap", ...url, ...p, "--bullmq-queue", "q", "--bullmq-queue", "")), "unique-jobs: --bullmq-queue \"\" is not a queue name")
        assert.strictEqual(said(yield* cli("reap", ...url, ...p, "--bullmq-queue", " \t")), "unique-jobs: --bullmq-queue \" \\t\" is not a queue name")
        assert.strictEqual(said(yield* cli("reap", ...url, ...p, "--bullmq-queue")), "unique-jobs: --bullmq-queue needs a value: a queue name")
        // A jid that holds nothing, and a name that is not a lock of ours.
        assert.strictEqual(said(yield* cli("locks", "unlock", `${prefix}:abc123`, "j2", ...url, ...p)), `unique-jobs: j2 held no live lock on ${prefix}:abc123`)
        const { raw } = yield* RedisTest.TestRedis
        yield* Effect.promise(() => raw.hset(`${prefix}:user:LOCKED`, "name", "bob"))
        assert.match(said(yield* cli("locks", "unlock", `${prefix}:user`, "name", ...url, ...p)), /not a lock of this library; nothing was changed$/)
        const foreign = yield* cli("locks", "show", `${prefix}:user`, ...url, ...p)
        assert.strictEqual(foreign.code, 1)
        assert.notInclude(foreign.stdout, "1970")
        assert.include(foreign.stdout, "not one of this library's locks")
        assert.deepStrictEqual(yield* Effect.promise(() => raw.hgetall(`${prefix}:user:LOCKED`)), { name: "bob" })
        // The right names still work.
        const shown = yield* cli("locks", "show", `${prefix}:abc123`, ...url, ...p)
        assert.strictEqual(shown.code, 0, shown.stderr)
        assert.include(shown.stdout, "j1")
      }), { timeout: 180_000 })

    it.effect("a mistake is answered with what was meant (did you mean) and that command's own usage line", () =>
      Effect.gen(function*() {
        const said = (ran: Ran): [string, string] => {
          assert.strictEqual(ran.code, 1, ran.stdout)
          const lines = ran.stderr.trim().split("\n")
          assert.strictEqual(lines.length, 2, ran.stderr)
          return [lines[0]!, lines[1]!]
        }
        // An unknown subcommand: that command's own subcommands, the nearest one, its usage (not the top level's).
        assert.deepStrictEqual(said(yield* cli("locks", "lst")), [
          "unique-jobs: unknown command `lst` for unique-jobs locks: did you mean `list`? (its commands: list, show, del, unlock)",
          "usage: unique-jobs locks <list | show | del | unlock> … (see unique-jobs locks --help)"
        ])
        assert.match(said(yield* cli("lcks", "list"))[0], /unknown command `lcks` for unique-jobs: did you mean `locks`\?/)
        assert.match(said(yield* cli("layout", "shw"))[0], /for unique-jobs layout: did you mean `show`\? \(its commands: show, reset\)$/)
        // An unknown flag: the flag (not its value), the nearest real flag of that command, its usage.
        const limt = said(yield* cli("locks", "list", "--limt", "5"))
        assert.strictEqual(limt[0], "unique-jobs: unknown option --limt for unique-jobs locks list: did you mean --limit?")
        assert.match(limt[1], /^usage: unique-jobs locks list \[<PATTERN>\] \[--limit N\] \[--cursor CURSOR\]/)
        assert.deepStrictEqual(said(yield* cli("stats", "--jsno")), [
          "unique-jobs: unknown option --jsno for unique-jobs stats: did you mean --json?",
          "usage: unique-jobs stats [--redis-url URL] [--cluster NODES] [--prefix PREFIX] [--json]"
        ])
        const dryrun = said(yield* cli("reap", "--dryrun"))
        assert.strictEqual(dryrun[0], "unique-jobs: unknown option --dryrun for unique-jobs reap: did you mean --dry-run?")
        assert.match(dryrun[1], /^usage: unique-jobs reap \[--dry-run\]/)
        assert.match(said(yield* cli("locks", "del", "--dryrun", "x:*"))[0], /for unique-jobs locks del: did you mean --dry-run\?$/)
        assert.match(said(yield* cli("web", "--tokn", "x"))[0], /for unique-jobs web: did you mean --token\?$/)
        // Nothing near: the command's options are named instead.
        assert.match(said(yield* cli("stats", "--zzzzzz"))[0], /unknown option --zzzzzz for unique-jobs stats \(its options: --redis-url, --cluster, --prefix, --json\)$/)
        assert.match(said(yield* cli("locks", "show", "a", "b"))[0], /unexpected argument "b": unique-jobs locks show takes <DIGEST>$/)
        // Every numeric flag: 0, -1, not a number, huge, missing, each refused naming the flag.
        for (const bad of ["0", "-1", "NaN", "abc", "1.5", "99999999999999999999"]) {
          assert.strictEqual(said(yield* cli("locks", "list", "--limit", bad))[0], `unique-jobs: --limit must be a whole number from 1 to 100000, got ${bad}`)
        }
        for (const bad of ["-1", "NaN", "65536", "99999999999999999999"]) {
          assert.strictEqual(said(yield* cli("web", "--port", bad))[0], `unique-jobs: --port must be a whole number from 0 to 65535, got ${bad}`)
        }
        assert.strictEqual(said(yield* cli("locks", "list", "--limit"))[0], "unique-jobs: --limit must be a whole number from 1 to 100000; none was given")
        // What a command cannot run without, named with the command and its usage, as the other mistakes are.
        assert.deepStrictEqual(said(yield* cli("locks", "show")), [
          "unique-jobs: unique-jobs locks show needs <DIGEST>",
          "usage: unique-jobs locks show <DIGEST> [--redis-url URL] [--cluster NODES] [--prefix PREFIX] [--json]"
        ])
        assert.strictEqual(said(yield* cli("digest", "--worker", "W"))[0], "unique-jobs: unique-jobs digest needs --args JSON")
        assert.strictEqual(
          said(yield* cli("digest"))[0],
          "unique-jobs: unique-jobs digest needs --worker NAME and --args JSON"
        )
        assert.strictEqual(said(yield* cli("locks", "unlock", "uniquejobs:x"))[0], "unique-jobs: unique-jobs locks unlock needs <JID>")
        assert.strictEqual(
          said(yield* cli("digest", "--worker", "W", "--args", "[1]", "--algorithm", "modrn"))[0],
          "unique-jobs: --algorithm modrn is not one of legacy, modern: did you mean modern?"
        )
        // A log level that is none: said as such, with the one meant where one is near.
        const verbose = yield* cli("stats", "--log-level", "verbose")
        assert.strictEqual(verbose.code, 1)
        assert.strictEqual(
          verbose.stderr.trim(),
          "unique-jobs: --log-level verbose is not a level: use one of all, trace, debug, info, warning, error, fatal, none"
        )
        assert.include((yield* cli("stats", "--log-level=warn")).stderr, "(did you mean warning?)")
        // --wizard, effect/cli's prompt, waits for key presses: refused where there is no terminal, never a hang.
        const wizard = yield* cli("locks", "--wizard")
        assert.strictEqual(wizard.code, 1)
        assert.match(wizard.stderr, /^unique-jobs: --wizard asks for each option at a terminal/)
      }), { timeout: 180_000 })

    it.effect("help: every command and flag described with an example; no generic type lines, no --wizard", () =>
      Effect.gen(function*() {
        const commands = [
          ["digest"], ["locks"], ["locks", "list"], ["locks", "show"], ["locks", "del"], ["locks", "unlock"],
          ["reap"], ["stats"], ["layout"], ["layout", "show"], ["layout", "reset"], ["web"]
        ]
        const top = yield* cli("--help")
        assert.strictEqual(top.code, 0)
        // The words every command uses, said once at the top, in the description the page opens with.
        for (const word of ["digest:", "holder:", "lease:", "revoke:", "index:", "orphan:", "layout:"]) {
          assert.include(top.stdout, `  ${word} `)
        }
        assert.isTrue(top.stdout.startsWith("DESCRIPTION\n  inspect and clean the unique-job locks"), top.stdout)
        assert.include(top.stdout, "\nUSAGE\n  unique-jobs <subcommand> [flags]\n")
        // The version the command says is the package's own (effect/cli's help page names none: --version does).
        const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }
        const shown = yield* cli("--version")
        assert.strictEqual(shown.code, 0, shown.stderr)
        assert.strictEqual(shown.stdout, `unique-jobs v${version}\n`)
        // `help COMMAND` is the command's --help.
        const helpCommand = yield* cli("help", "locks", "show")
        assert.strictEqual(helpCommand.code, 0, helpCommand.stderr)
        assert.strictEqual(helpCommand.stdout, (yield* cli("locks", "show", "--help")).stdout)
        for (const command of [[], ...commands]) {
          const help = command.length === 0 ? top : yield* cli(...command, "--help")
          assert.strictEqual(help.code, 0, help.stderr)
          assert.include(help.stdout, "Example: unique-jobs", command.join(" "))
          assert.notInclude(help.stdout, "A user-defined piece of text", command.join(" "))
          assert.notInclude(help.stdout, "--wizard", command.join(" "))
          // A repeated flag may be left out: it reads as optional.
          assert.notMatch(help.stdout, /[^[]--bullmq-queue QUEUE\.\.\./, command.join(" "))
          assert.include(help.stdout, "--log-level <all|trace|debug|info|warn|warning|error|fatal|none>", command.join(" "))
          assert.notInclude(help.stdout, "This setting is optional", command.join(" "))
          // The usage line names the command as it is typed, from the top (`show` could be locks' or layout's).
          if (command.length > 0) {
            assert.include(help.stdout, `\nUSAGE\n  unique-jobs ${command.join(" ")} `, command.join(" "))
          }
          // Each of the command's own flags is described beside it; each (but the booleans') gives an example of its
          // value.
          const options = /\nFLAGS\n([\s\S]*?)(?:\n\n|$)/.exec(help.stdout)?.[1]
          if (options === undefined) continue
          const rows = options.split("\n")
          assert.isAbove(rows.length, 0, command.join(" "))
          for (const row of rows) assert.match(row, /^ {2}--[a-z-]+( \S+)? {2,}\S/, `${command.join(" ")}: ${row}`)
          for (const [, flag, valued, text] of options.matchAll(/^ {2}(--[a-z-]+)( \S+)? {2,}(\S.*)$/gm)) {
            assert.isAbove(text!.length, 20, `${command.join(" ")} ${flag}`)
            if (valued !== undefined && !flag!.startsWith("--algorithm")) assert.include(text!, "e.g.", `${command.join(" ")} ${flag}`)
          }
        }
      }), { timeout: 180_000 })

    it.effect("locks show prints the digest's recent events (lockEvents), newest first, and --json holds them", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const url = ["--redis-url", source.url]
        const prefix = RedisTest.uniquePrefix("cli-events")
        const p = ["--prefix", prefix]
        const logged = LockOptions.unsafeMake({ lock: "until_executed", lockPrefix: prefix, lockEvents: true })
        const digest = `${prefix}:e1`
        yield* Lock.lock(logged, { digest, jid: "first" })
        yield* Effect.flip(Lock.lock(logged, { digest, jid: "second" }))
        const unlocked = yield* cli("locks", "unlock", digest, "first", ...url, ...p)
        assert.strictEqual(unlocked.code, 0, unlocked.stderr)
        const shown = yield* cli("locks", "show", digest, ...url, ...p, "--json")
        assert.strictEqual(shown.code, 0, shown.stderr)
        assert.deepStrictEqual(
          (JSON.parse(shown.stdout) as { events: Array<{ event: string; jid: string; holder?: string; who?: string }> })
            .events.map((e) => [e.event, e.jid, e.holder ?? "", e.who ?? ""]),
          [["removed", "first", "", "unique-jobs CLI"], ["refused", "second", "first", ""], ["taken", "first", "", ""]]
        )
        const table = yield* cli("locks", "show", digest, ...url, ...p)
        assert.strictEqual(table.code, 0, table.stderr)
        assert.include(table.stdout, "recent events, newest first:")
        assert.match(table.stdout, /refused\s+queue\s+second\s+first/)
      }))

    it.effect("locks list pages with a cursor: --json {items, cursor, more}, the next page said on stderr, every lock once", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("cli-cursor")
        const where = ["--redis-url", source.url, "--prefix", prefix]
        const names = Array.from({ length: 450 }, (_, i) => `${prefix}:p${i}`)
        yield* Effect.promise(async () => {
          const pipeline = raw.pipeline()
          for (const [i, name] of names.entries()) {
            pipeline.zadd(`${prefix}:digests`, i, name)
            pipeline.hset(`${name}:LOCKED`, "j", `{"t":${i},"x":0,"l":0}`)
          }
          await pipeline.exec()
        })
        const seen: Array<string> = []
        let cursor = "0"
        let pages = 0
        for (;;) {
          const page = yield* cli("locks", "list", ...where, "--limit", "70", "--cursor", cursor, "--json")
          assert.strictEqual(page.code, 0, page.stderr)
          const answer = JSON.parse(page.stdout) as { items: Array<{ name: string }>; cursor: string; more: boolean }
          seen.push(...answer.items.map((e) => e.name))
          pages++
          assert.strictEqual(answer.more, answer.cursor !== "0")
          if (!answer.more) break
          assert.strictEqual(answer.items.length, 70)
          cursor = answer.cursor
        }
        assert.strictEqual(pages, 7)
        assert.deepStrictEqual([...seen].sort(), [...names].sort(), "every lock once, none twice")
        // As a table: the hint on stderr names the next page's --cursor; stdout is the table alone.
        const table = yield* cli("locks", "list", ...where, "--limit", "2")
        assert.strictEqual(table.code, 0, table.stderr)
        assert.strictEqual(table.stdout.trim().split("\n").length, 4)
        assert.match(table.stderr.trim(), /^more locks may match \(2 shown\): the next page is unique-jobs locks list … --cursor \d+(\.\d+)?$/)
        const last = yield* cli("locks", "list", ...where, "--limit", "1000")
        assert.strictEqual(last.stderr, "")
        const bad = yield* cli("locks", "list", ...where, "--cursor", "abc")
        assert.strictEqual(bad.code, 1)
        assert.strictEqual(bad.stderr.trim(), "unique-jobs: --cursor must be a cursor a previous page gave (like 1234 or 1234.5), got abc")
      }), { timeout: 180_000 })

    it.effect("locks del --dry-run lists the locks and the running holders it would revoke; locks show of a :RUN name shows the run lock", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("cli-dry")
        const where = ["--redis-url", source.url, "--prefix", prefix]
        const now = Date.now()
        const lease = now + 600_000
        yield* Effect.promise(async () => {
          const pipeline = raw.pipeline()
          pipeline.zadd(`${prefix}:digests`, now, `${prefix}:a`, now, `${prefix}:a:RUN`, now, `${prefix}:b`)
          pipeline.hset(`${prefix}:a:LOCKED`, "q1", `{"t":${now},"x":0,"l":0}`)
          pipeline.hset(`${prefix}:a:RUN:LOCKED`, "r1", `{"t":${now},"x":0,"l":${lease},"f":1}`)
          // A run holder whose lease has passed is removed, not revoked.
          pipeline.hset(`${prefix}:a:RUN:LOCKED`, "r0", `{"t":${now - 60_000},"x":0,"l":${now - 30_000},"f":1}`)
          pipeline.hset(`${prefix}:b:LOCKED`, "q2", `{"t":${now},"x":0,"l":0}`)
          await pipeline.exec()
        })
        const dry = yield* cli("locks", "del", `${prefix}:*`, ...where, "--dry-run", "--json")
        assert.strictEqual(dry.code, 0, dry.stderr)
        const answer = JSON.parse(dry.stdout) as {
          matched: number
          deleted: number
          dryRun: boolean
          locks: Array<{ lock: string; phase: string; holders: number }>
          wouldRevoke: Array<{ lock: string; jid: string; leaseUntil: number }>
        }
        assert.deepStrictEqual([answer.matched, answer.deleted, answer.dryRun], [3, 0, true])
        assert.deepStrictEqual([...answer.locks].sort((x, y) => x.lock.localeCompare(y.lock)), [
          { lock: `${prefix}:a`, phase: "queue", holders: 1 },
          { lock: `${prefix}:a:RUN`, phase: "run", holders: 2 },
          { lock: `${prefix}:b`, phase: "queue", holders: 1 }
        ])
        assert.deepStrictEqual(answer.wouldRevoke, [{ lock: `${prefix}:a:RUN`, jid: "r1", leaseUntil: lease }])
        const text = yield* cli("locks", "del", `${prefix}:*`, ...where, "--dry-run")
        assert.strictEqual(text.code, 0, text.stderr)
        assert.include(text.stdout, "3 lock(s) match")
        assert.match(text.stdout, new RegExp(`${prefix}:a:RUN +run +2 +r1`))
        assert.include(text.stdout, `and revoke 1 running holder(s), each told at its next lease renewal: r1 on ${prefix}:a:RUN`)
        // Nothing changed; the delete then revokes exactly the holder the dry run named.
        assert.strictEqual(yield* Effect.promise(() => raw.zcard(`${prefix}:digests`)), 3)
        const del = JSON.parse((yield* cli("locks", "del", `${prefix}:*`, ...where, "--json")).stdout) as {
          revoked: Array<{ lock: string; jid: string }>
        }
        assert.deepStrictEqual(del.revoked.map((r) => [r.lock, r.jid]), [[`${prefix}:a:RUN`, "r1"]])

        // locks show of a run lock's name as locks list prints it: its holders under run, not queue.
        const listed = JSON.parse((yield* cli("locks", "list", ...where, "--json")).stdout) as { items: Array<{ name: string }> }
        assert.deepStrictEqual(listed.items.map((e) => e.name), [`${prefix}:a:RUN`])
        const shown = yield* cli("locks", "show", `${prefix}:a:RUN`, ...where, "--json")
        assert.strictEqual(shown.code, 0, shown.stderr)
        const digest = JSON.parse(shown.stdout) as { digest: string; queue: { holders: Array<unknown> }; run: { holders: Array<{ jid: string }> } }
        assert.strictEqual(digest.digest, `${prefix}:a`)
        assert.deepStrictEqual(digest.queue.holders, [])
        assert.deepStrictEqual(digest.run.holders.map((h) => h.jid), ["r1"])
        const table = yield* cli("locks", "show", `${prefix}:a:RUN`, ...where)
        assert.match(table.stdout, /^run +r1 /m)
        assert.notMatch(table.stdout, /^queue /m)
      }), { timeout: 180_000 })

    it.effect("locks del walks every page of matches: 1,200 locks, pages of 500", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("cli-pages")
        yield* Effect.promise(async () => {
          const pipeline = raw.pipeline()
          for (let i = 0; i < 1200; i++) {
            pipeline.zadd(`${prefix}:digests`, i, `${prefix}:m${i}`)
            pipeline.hset(`${prefix}:m${i}:LOCKED`, "j", `{"t":${i},"x":0,"l":0}`)
          }
          await pipeline.exec()
        })
        const del = yield* cli("locks", "del", `${prefix}:*`, "--redis-url", source.url, "--prefix", prefix, "--json")
        assert.strictEqual(del.code, 0, del.stderr)
        assert.deepStrictEqual(JSON.parse(del.stdout), { matched: 1200, deleted: 1200, dryRun: false, revoked: [], refused: [] })
        assert.strictEqual(yield* Effect.promise(() => raw.zcard(`${prefix}:digests`)), 0)
        assert.deepStrictEqual(yield* Effect.promise(() => raw.keys(`${prefix}:m*`)), [])
      }), { timeout: 180_000 })

    it.effect("locks del of a pattern beyond one page among others (issue 47): 1,500 of 3,000 go, the other 1,500 stay held", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const prefix = RedisTest.uniquePrefix("cli-filter")
        yield* Effect.promise(async () => {
          const pipeline = raw.pipeline()
          for (let i = 0; i < 3000; i++) {
            const name = `${prefix}:${i % 2 === 0 ? "del" : "keep"}${i}`
            pipeline.zadd(`${prefix}:digests`, i, name)
            pipeline.hset(`${name}:LOCKED`, `j${i}`, `{"t":${i},"x":0,"l":0}`)
          }
          await pipeline.exec()
        })
        const del = yield* cli("locks", "del", `${prefix}:del*`, "--redis-url", source.url, "--prefix", prefix, "--json")
        assert.strictEqual(del.code, 0, del.stderr)
        assert.deepStrictEqual(JSON.parse(del.stdout), { matched: 1500, deleted: 1500, dryRun: false, revoked: [], refused: [] })
        const left = yield* Effect.promise(() => raw.zrange(`${prefix}:digests`, 0, -1))
        assert.deepStrictEqual(left.filter((name) => name.startsWith(`${prefix}:del`)), [])
        assert.strictEqual(left.length, 1500)
        assert.strictEqual((yield* Effect.promise(() => raw.keys(`${prefix}:keep*:LOCKED`))).length, 1500)
        assert.deepStrictEqual(yield* Effect.promise(() => raw.keys(`${prefix}:del*`)), [])
      }), { timeout: 180_000 })

    it.effect("stdout carries only the answer: reap --json parses when the pass logged; --log-level after the subcommand", () =>
      Effect.gen(function*() {
        const { raw, source } = yield* RedisTest.TestRedis
        const url = ["--redis-url", source.url]
        const prefix = RedisTest.uniquePrefix("cli-stdout")
        // Members whose lock key is gone: the pass removes them and logs it (at Info).
        yield* Effect.promise(() => raw.zadd(`${prefix}:digests`, 1, `${prefix}:gone1`, 2, `${prefix}:gone2`))
        const reap = yield* cli("reap", ...url, "--prefix", prefix, "--json")
        assert.strictEqual(reap.code, 0, reap.stderr)
        const pass = JSON.parse(reap.stdout) as { ran: boolean; members: number }
        assert.deepStrictEqual([pass.ran, pass.members], [true, 2])
        assert.include(reap.stderr, "removed", "the log line goes to stderr")
        // --log-level is read wherever it is written.
        const debug = yield* cli("stats", ...url, "--prefix", prefix, "--json", "--log-level", "debug")
        assert.strictEqual(debug.code, 0, debug.stderr)
        assert.strictEqual((JSON.parse(debug.stdout) as { indexSize: number }).indexSize, 0)
        const quiet = yield* cli("locks", "list", ...url, "--prefix", prefix, "--log-level=none", "--json")
        assert.strictEqual(quiet.code, 0, quiet.stderr)
        assert.deepStrictEqual(JSON.parse(quiet.stdout), { items: [], cursor: "0", more: false })
      }), { timeout: 180_000 })

    it.effect("the overlap probe through the command: unlock and del of a running job's run lock revoke it; 0 overlap", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const url = ["--redis-url", source.url]
        const commands: ReadonlyArray<(digest: string, jid: string) => Array<string>> = [
          (digest, jid) => ["locks", "unlock", digest, jid],
          (digest) => ["locks", "del", `${digest.split(":")[0]}:*`]
        ]
        for (const command of commands) {
          for (const asJson of [false, true]) {
            const run = yield* probe("cli-probe", (digest, jid, prefix) =>
              cli(...command(digest, jid), ...url, "--prefix", prefix, ...(asJson ? ["--json"] : [])))
            assert.deepStrictEqual(run.events, inTurn, run.answer.stderr)
            assert.strictEqual(run.most, 1)
            assert.isTrue(isLockLost(run.firstExit))
            assert.strictEqual(run.answer.code, 0, run.answer.stderr)
            if (asJson) {
              const answer = JSON.parse(run.answer.stdout) as { revoked: Array<{ jid: string; leaseUntil: number }> }
              assert.deepStrictEqual(answer.revoked.map((r) => r.jid), ["jid-1"])
              assert.isAbove(answer.revoked[0]!.leaseUntil, 0)
            } else {
              // It says what it did: revoked, not released; when the holder is told; when the place frees.
              assert.match(run.answer.stdout, /revoked 1 running holder\(s\) instead of removing them/)
              assert.match(run.answer.stdout, /told at its next lease renewal .* stops with LockLost/)
              assert.match(run.answer.stdout, /its place frees when it lets go, or at \d{4}-\d\d-\d\dT[\d:.]+Z at the latest/)
            }
          }
        }
      }), { timeout: 180_000 })

    it.effect("bad arguments and a Redis that is not there: a non-zero exit and one line saying why", () =>
      Effect.gen(function*() {
        const notJson = yield* cli("digest", "--worker", "W", "--args", "nope")
        assert.notStrictEqual(notJson.code, 0)
        assert.strictEqual(notJson.stderr.trim(), "unique-jobs: --args is not JSON: nope (write a JSON array, like '[1, \"a\"]')")
        const missing = yield* cli("locks", "show")
        assert.notStrictEqual(missing.code, 0)
        assert.include(missing.stdout + missing.stderr, "DIGEST")
        const noUrl = yield* cli("stats")
        assert.notStrictEqual(noUrl.code, 0)
        assert.strictEqual(
          noUrl.stderr.trim(),
          "unique-jobs: no Redis: pass --redis-url redis://host:port (or --cluster host:port,…), or set REDIS_URL (or REDIS_CLUSTER_NODES)"
        )
        const port = yield* closedPort
        const down = yield* cli("stats", "--redis-url", `redis://127.0.0.1:${port}`)
        assert.notStrictEqual(down.code, 0)
        const lines = down.stderr.trim().split("\n")
        assert.strictEqual(lines.length, 1, down.stderr)
        assert.match(lines[0]!, /^unique-jobs: Redis connect failed: cannot reach Redis/)
        // A cluster that is not there: one line, at once (one try), never a wait for a reconnect.
        const clusterDown = yield* cli("stats", "--cluster", `127.0.0.1:${port}`)
        assert.notStrictEqual(clusterDown.code, 0)
        assert.strictEqual(clusterDown.stderr.trim().split("\n").length, 1, clusterDown.stderr)
        assert.match(clusterDown.stderr, /^unique-jobs: Redis connect failed/)
        const both = yield* cli("stats", "--redis-url", `redis://127.0.0.1:${port}`, "--cluster", `127.0.0.1:${port}`)
        assert.notStrictEqual(both.code, 0)
        assert.strictEqual(both.stderr.trim(), "unique-jobs: --redis-url and --cluster name two places for the locks: pass one")
      }), { timeout: 180_000 })

    it.effect("web: off the loopback only with a token; no Redis, said; a short shared secret refused", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const open = yield* cli("web", "--host", "0.0.0.0", "--port", "0", "--redis-url", source.url)
        assert.strictEqual(open.code, 1)
        assert.strictEqual(
          open.stderr.trim(),
          "unique-jobs: --host 0.0.0.0 is not the loopback: the admin UI there needs a token every request carries; " +
            "pass --token TOKEN (16 characters or more) or set UNIQUE_JOBS_WEB_TOKEN"
        )
        // --token (or the variable) lets it bind elsewhere: past the token check, a bad token is named.
        const shortToken = yield* cli("web", "--host", "0.0.0.0", "--port", "0", "--token", "short", "--redis-url", source.url)
        assert.strictEqual(shortToken.code, 1)
        assert.include(shortToken.stderr, "token")
        assert.include(shortToken.stderr, "at least 16 characters")
        // The flag is named, not "lock options".
        assert.include(shortToken.stderr, "--token (or UNIQUE_JOBS_WEB_TOKEN): ")
        assert.notInclude(shortToken.stderr, "lock options")
        const fromEnv = yield* cliWith({ UNIQUE_JOBS_WEB_TOKEN: "short" }, "web", "--host", "0.0.0.0", "--port", "0", "--redis-url", source.url)
        assert.include(fromEnv.stderr, "at least 16 characters")
        const noUrl = yield* cli("web", "--port", "0")
        assert.strictEqual(noUrl.code, 1)
        assert.include(noUrl.stderr, "no Redis")
        // The CSRF key replicas share comes from the environment, never the command line (ps shows that); a short one
        // is refused naming it, before anything is served.
        const short = yield* cliWith({ UNIQUE_JOBS_WEB_SECRET: "too short" }, "web", "--port", "0", "--trust-proxy", "--redis-url", source.url)
        assert.strictEqual(short.code, 1)
        assert.include(short.stderr, "UNIQUE_JOBS_WEB_SECRET: ")
        assert.include(short.stderr, "at least 32 characters")
        assert.notInclude(short.stdout, "Ctrl-C stops")
      }), { timeout: 180_000 })
  })
})
