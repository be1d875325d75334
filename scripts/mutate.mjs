// Mutation testing (issue 9): applies each mutant of mutants/catalogue.json, one at a time, to a scratch copy of the
// repository and runs the test files that should kill it; a table of mutant -> killing tests goes to
// mutants/last-run.md. Exits 1 when a mutant survives (no test failed), ends in a timeout or an error, or when a
// mutant's `find` no longer occurs exactly once in its file (the catalogue is stale: fix its `find`).
//
//   npm run mutate                       every mutant, after a baseline run of their tests unmutated
//   npm run mutate -- --check            only check that every `find` occurs exactly once (fast; no tests run)
//   npm run mutate -- --list             list the mutants (with --only / --share / --ci: the selected ones)
//   npm run mutate -- --only a,b         the named mutants
//   npm run mutate -- --tests f,g        run the selected mutants against these test files instead of their own
//   npm run mutate -- --share 2/12       the mutants whose catalogue index % 12 == 2
//   npm run mutate -- --ci               the share of this commit (git rev-parse HEAD), stopping each mutant's run at
//                                        its first failing test (--bail), no baseline (npm test ran just before)
// More: --bail (stop each run at its first failing test), --no-baseline, --timeout <seconds per mutant>,
// --out <file.md>, --strict (also fail a mutant killed by fewer than 2 tests or by no property test), --keep (keep the
// scratch copy), --readme (put the run's summary table in CONTRIBUTING.md, between its mutation-run markers).
//
// Mutants run one at a time: vitest already uses both cores. The scratch copy is taken once per run (without
// node_modules, which is symlinked, .git and dist), so edits made to the working tree meanwhile do not leak into it.
import { spawn, spawnSync } from "node:child_process"
import {
  closeSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync
} from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, relative, resolve, sep } from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const cataloguePath = join(root, "mutants", "catalogue.json")
const generated = "src/store/lua.generated.ts"
/** Mutants per CI share: about 5 (the whole catalogue over some 40 commits); with bail on, most die in seconds, so a
 * share takes about two minutes, inside the 12 of `.ci/run`. */
const ciPerShare = 5
const defaultTimeoutSeconds = 20 * 60
const ciTimeoutSeconds = 10 * 60

// ---------------------------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------------------------

const usage = `usage: npm run mutate -- [--check] [--list] [--only id,id] [--tests file,file] [--share N/M] [--ci] [--bail] [--no-baseline]
                          [--timeout seconds] [--out file.md] [--strict] [--keep] [--readme]`

let args
try {
  args = parseArgs({
    options: {
      check: { type: "boolean", default: false },
      list: { type: "boolean", default: false },
      only: { type: "string" },
      tests: { type: "string" },
      share: { type: "string" },
      ci: { type: "boolean", default: false },
      bail: { type: "boolean", default: false },
      "no-baseline": { type: "boolean", default: false },
      timeout: { type: "string" },
      out: { type: "string" },
      strict: { type: "boolean", default: false },
      readme: { type: "boolean", default: false },
      keep: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false }
    },
    strict: true
  }).values
} catch (error) {
  fail(`${error.message}\n${usage}`)
}
if (args.help) {
  process.stdout.write(`${usage}\n`)
  process.exit(0)
}

function fail(message) {
  process.stderr.write(`mutate: ${message}\n`)
  process.exit(1)
}

// ---------------------------------------------------------------------------------------------------------------
// The catalogue
// ---------------------------------------------------------------------------------------------------------------

const occurrences = (text, find) => {
  let count = 0
  for (let at = text.indexOf(find); at !== -1; at = text.indexOf(find, at + 1)) count++
  return count
}

/** The catalogue, and every reason a mutant cannot be applied to the tree at `base` (empty when all can). */
const loadCatalogue = (base) => {
  let catalogue
  try {
    catalogue = JSON.parse(readFileSync(cataloguePath, "utf8"))
  } catch (error) {
    fail(`cannot read ${relative(root, cataloguePath)}: ${error.message}`)
  }
  const mutants = Array.isArray(catalogue.mutants) ? catalogue.mutants : []
  const propertyFiles = Array.isArray(catalogue.propertyFiles) ? catalogue.propertyFiles : []
  const problems = []
  if (mutants.length === 0) problems.push("the catalogue has no mutants")
  const seen = new Set()
  const texts = new Map()
  mutants.forEach((m, index) => {
    const name = typeof m.id === "string" && m.id !== "" ? m.id : `#${index}`
    const problem = (reason) => problems.push(`mutant ${name}: ${reason}`)
    if (typeof m.id !== "string" || !/^[a-z0-9][a-z0-9-]*$/.test(m.id)) problem("id must be kebab-case")
    else if (seen.has(m.id)) problem("id is used twice")
    seen.add(m.id)
    for (const field of ["file", "find", "rule"]) {
      if (typeof m[field] !== "string" || m[field] === "") problem(`${field} must be a non-empty string`)
    }
    if (typeof m.replace !== "string") problem("replace must be a string")
    else if (m.replace === m.find) problem("replace is the same as find")
    if (!Array.isArray(m.tests) || m.tests.length === 0) problem("tests must list at least one test file")
    else {
      for (const test of m.tests) {
        if (typeof test !== "string" || !/^test\/.+\.test\.ts$/.test(test)) problem(`${JSON.stringify(test)} is not test/*.test.ts`)
        else if (!existsSync(join(base, test))) problem(`test file ${test} does not exist`)
      }
    }
    if (typeof m.file !== "string" || typeof m.find !== "string" || m.find === "") return
    if (!/^(lua|src)\//.test(m.file) || m.file === generated) {
      problem(`file ${m.file} is not under lua/ or src/ (or is the generated module: mutate lua/ instead)`)
      return
    }
    if (!texts.has(m.file)) texts.set(m.file, existsSync(join(base, m.file)) ? readFileSync(join(base, m.file), "utf8") : undefined)
    const text = texts.get(m.file)
    if (text === undefined) problem(`file ${m.file} does not exist`)
    else {
      const count = occurrences(text, m.find)
      if (count !== 1) {
        problem(`its find occurs ${count} times in ${m.file} (it must occur exactly once: update the catalogue)\n    find: ${JSON.stringify(m.find)}`)
      }
    }
  })
  return { mutants, propertyFiles, problems }
}

// ---------------------------------------------------------------------------------------------------------------
// Selection
// ---------------------------------------------------------------------------------------------------------------

const git = (...argv) => {
  const result = spawnSync("git", argv, { cwd: root, encoding: "utf8" })
  return result.status === 0 ? result.stdout.trim() : undefined
}

const select = (mutants) => {
  const chosen = [args.only !== undefined, args.share !== undefined, args.ci].filter(Boolean).length
  if (chosen > 1) fail("use one of --only, --share and --ci")
  const indexed = mutants.map((mutant, index) => ({ mutant, index }))
  if (args.only !== undefined) {
    const ids = args.only.split(",").map((id) => id.trim()).filter((id) => id !== "")
    const unknown = ids.filter((id) => !mutants.some((m) => m.id === id))
    if (ids.length === 0 || unknown.length > 0) fail(`--only: no mutant named ${unknown.join(", ") || "(none given)"}; see --list`)
    return { picked: indexed.filter(({ mutant }) => ids.includes(mutant.id)), selection: `only ${ids.join(", ")}` }
  }
  let share
  let selection
  if (args.share !== undefined) {
    const match = /^(\d+)\/(\d+)$/.exec(args.share)
    if (match === null || Number(match[2]) < 1 || Number(match[1]) >= Number(match[2])) {
      fail(`--share takes N/M with 0 <= N < M, got ${args.share}`)
    }
    share = { n: Number(match[1]), m: Number(match[2]) }
    selection = `share ${share.n}/${share.m} (catalogue index % ${share.m} == ${share.n})`
  } else if (args.ci) {
    // ceil(count / ciPerShare) shares; the commit picks one, so successive commits rotate through them.
    const m = Math.ceil(mutants.length / ciPerShare)
    const sha = git("rev-parse", "HEAD")
    const seed = sha !== undefined && /^[0-9a-f]{12}/.test(sha)
      ? BigInt(`0x${sha.slice(0, 12)}`)
      : BigInt(Math.floor(Date.now() / 86_400_000)) // no git: the day picks it
    share = { n: Number(seed % BigInt(m)), m }
    selection = `share ${share.n}/${share.m} (--ci: ${sha === undefined ? "no git commit, today's date" : `commit ${sha.slice(0, 12)}`} ` +
      `picks share ${sha === undefined ? "day" : "sha[0..12]"} % ${m}; catalogue index % ${m} == ${share.n})`
  }
  if (share === undefined) return { picked: indexed, selection: `all ${mutants.length} mutants` }
  return { picked: indexed.filter(({ index }) => index % share.m === share.n), selection }
}

// ---------------------------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------------------------

const seconds = (ms) => {
  const s = Math.round(ms / 1000)
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`
}

const log = (line) => process.stdout.write(`${line}\n`)

let scratch
let running
let interrupted = false

// Also on process.exit (a `fail` midway): stop the tests' processes and remove the copy.
const cleanup = () => {
  if (running !== undefined) killGroup(running, "SIGKILL")
  running = undefined
  if (scratch !== undefined && !args.keep) rmSync(scratch, { recursive: true, force: true })
  scratch = undefined
}
process.on("exit", cleanup)

const killGroup = (child, signal) => {
  try {
    process.kill(-child.pid, signal)
  } catch {
    // already gone
  }
}

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    interrupted = true
    process.stderr.write(`\nmutate: stopped by ${signal}\n`)
    process.exit(130)
  })
}

/** A copy of the repository to mutate, with node_modules linked; the Lua module regenerated from its lua/. */
const makeScratch = () => {
  const dir = mkdtempSync(join(tmpdir(), "unique-jobs-mutate-"))
  const skip = new Set(["node_modules", ".git", "dist", "scratch"])
  cpSync(root, dir, {
    recursive: true,
    filter: (source) => {
      const top = relative(root, source).split(sep)[0]
      return top === "" || !(skip.has(top) || top.startsWith(".redis-"))
    }
  })
  symlinkSync(join(root, "node_modules"), join(dir, "node_modules"), "dir")
  mkdirSync(join(dir, ".mutate"))
  return dir
}

const generateLua = (dir) => {
  const result = spawnSync(process.execPath, ["scripts/generate-lua.mjs"], { cwd: dir, encoding: "utf8" })
  if (result.status !== 0) throw new Error(`generate-lua failed in the scratch copy: ${result.stderr}`)
  return result.stdout.includes("wrote")
}

/**
 * Runs `tests` in the scratch copy. Resolves to { failures: [{ file, name, suite }], exitCode, timedOut, files, error,
 * ms }: every failed test (a file that failed outside any test, e.g. a hook or its import, is one `suite` failure).
 */
const runTests = (tests, label, timeoutMs) =>
  new Promise((resolveRun) => {
    const json = join(scratch, ".mutate", `${label}.json`)
    const logFile = join(scratch, ".mutate", `${label}.log`)
    rmSync(json, { force: true })
    const out = openSync(logFile, "w")
    const argv = [
      join(scratch, "node_modules", "vitest", "vitest.mjs"),
      "run",
      ...tests,
      "--reporter=default",
      "--reporter=json",
      `--outputFile.json=${json}`,
      "--no-cache"
    ]
    if (bail) argv.push("--bail=1")
    const started = Date.now()
    // A mutated run stops each property at its first failure (test/support/setup.ts): no minutes of shrinking.
    const env = { ...process.env, UNIQUE_JOBS_MUTATION: "1" }
    const child = spawn(process.execPath, argv, { cwd: scratch, detached: true, env, stdio: ["ignore", out, out] })
    running = child
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      killGroup(child, "SIGTERM")
      setTimeout(() => killGroup(child, "SIGKILL"), 10_000).unref()
    }, timeoutMs)
    child.on("exit", (code, signal) => {
      clearTimeout(timer)
      running = undefined
      closeSync(out)
      // Whatever the tests started (redis-server, worker processes) goes with the run.
      killGroup(child, "SIGKILL")
      const ms = Date.now() - started
      const result = { exitCode: code ?? signal, timedOut, ms, failures: [], files: [], logFile, error: undefined }
      let report
      try {
        report = JSON.parse(readFileSync(json, "utf8"))
      } catch {
        result.error = timedOut ? undefined : `no JSON report (vitest exited ${code ?? signal})`
        return resolveRun(result)
      }
      for (const file of report.testResults ?? []) {
        const rel = relative(scratch, file.name).split(sep).join("/")
        result.files.push(rel)
        const failed = (file.assertionResults ?? []).filter((a) => a.status === "failed")
        for (const a of failed) result.failures.push({ file: rel, name: a.fullName ?? a.title, suite: false })
        if (failed.length === 0 && file.status === "failed") {
          const reason = String(file.message ?? "failed outside its tests").split("\n")[0].slice(0, 160)
          result.failures.push({ file: rel, name: `(the file failed outside its tests: ${reason})`, suite: true })
        }
      }
      if (!timedOut && result.failures.length === 0 && code !== 0) {
        result.error = `vitest exited ${code ?? signal} with no failing test (an unhandled error? see the log)`
      }
      resolveRun(result)
    })
  })

const tail = (file, lines = 25) => {
  try {
    return readFileSync(file, "utf8").split("\n").slice(-lines).join("\n")
  } catch {
    return "(no log)"
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------------------------------------------

// A table cell: pipes escaped, one line, and a < outside code spans written as &lt; (a rule's "<digest>" is text, not a
// tag that a Markdown renderer drops or a site's build refuses).
const cell = (text) =>
  String(text).replace(/\|/g, "\\|").replace(/\n/g, " ").split("`")
    .map((part, i) => (i % 2 === 0 ? part.replace(/</g, "&lt;") : part)).join("`")
const shortFile = (file) => file.replace(/^test\//, "").replace(/\.test\.ts$/, "")

/** `conformance ×3, properties ×2 (property)`: the killing tests per file. */
const byFile = (killers, propertyFiles) => {
  const counts = new Map()
  for (const k of killers) counts.set(k.file, (counts.get(k.file) ?? 0) + 1)
  return Array.from(counts, ([file, n]) => `${shortFile(file)} ×${n}${propertyFiles.includes(file) ? " (property)" : ""}`)
    .join(", ")
}

const bail = args.bail || args.ci
if (args.strict && bail) fail("--strict counts every killing test: it cannot be used with --bail or --ci")

const markdown = ({ results, selection, started, commit, propertyFiles, baseline }) => {
  const count = (status) => results.filter((r) => r.status === status).length
  const killed = results.filter((r) => r.status === "killed")
  const strong = killed.filter((r) => r.strong).length
  const lines = [
    "# Mutation run",
    "",
    `- Date: ${started.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC")}`,
    `- Commit: ${commit ?? "unknown"}${git("status", "--porcelain") ? " (with uncommitted changes)" : ""}`,
    `- Selection: ${selection}`,
    `- Mode: ${bail ? "bail: each run stops at its first failing test, so a killed mutant lists one or two killing tests" : "full: every listed test file runs to the end"}`,
    `- Result: ${killed.length} killed, ${count("survived")} survived, ${count("timeout")} timed out, ${count("error")} errors ` +
    `of ${results.length}` +
    (bail ? "" : `; ${strong} of ${killed.length} killed by at least two tests of which one is a property (${propertyFiles.join(", ")})`),
    `- Duration: ${seconds(Date.now() - started.getTime())}` +
    `${baseline !== undefined ? ` (baseline, unmutated: ${seconds(baseline.ms)}${baseline.failures.length > 0 ? `, ${baseline.failures.length} tests already failing and not counted as kills` : ""})` : ""}`,
    "",
    "| # | mutant | file | rule it breaks | tests run | status | killing tests | time |",
    "| ---: | --- | --- | --- | --- | --- | --- | ---: |"
  ]
  for (const r of results) {
    const status = r.status === "killed" ? (r.strong || bail ? "killed" : "killed (weak)") : `**${r.status.toUpperCase()}**`
    const kills = r.killers.length === 0 ? "none" : `${r.killers.filter((k) => !k.suite).length}: ${byFile(r.killers, propertyFiles)}`
    lines.push(
      `| ${r.index} | \`${r.mutant.id}\` | ${r.mutant.file} | ${cell(r.mutant.rule)} | ${r.mutant.tests.map(shortFile).join(", ")} | ` +
        `${status} | ${cell(kills)} | ${seconds(r.ms)} |`
    )
  }
  if (!bail) lines.push("", "killed (weak): killed, but by fewer than two tests or by no property test (issue 9 wants both).")
  lines.push("", "## Killing tests", "")
  for (const r of results) {
    lines.push(`### ${r.mutant.id}`, "")
    if (r.killers.length === 0) lines.push(`- none (${r.status}${r.note !== undefined ? `: ${cell(r.note)}` : ""})`)
    for (const k of r.killers) {
      lines.push(`- ${propertyFiles.includes(k.file) && !k.suite ? "**[property]** " : ""}${k.file} › ${cell(k.name)}`)
    }
    lines.push("")
  }
  if (baseline !== undefined && baseline.failures.length > 0) {
    lines.push("## Failing before any mutation (not counted as kills)", "")
    for (const k of baseline.failures) lines.push(`- ${k.file} › ${cell(k.name)}`)
    lines.push("")
  }
  return lines.join("\n")
}

/**
 * CONTRIBUTING.md's copy of the runs: one row per catalogue mutant with the tests that killed it, and when. A run
 * of some mutants (--only) replaces their rows and keeps the others' from earlier runs, so the table always covers
 * the whole catalogue; the summary counts the rows.
 */
const readmeMarkers = { start: "<!-- mutation-run:start -->", end: "<!-- mutation-run:end -->" }
const rowPattern = /^\| `([^`]+)` \| .* \| (.*) \| (\d{4}-\d\d-\d\d \S+) \|$/

const writeReadme = ({ results, started, commit, propertyFiles, mutants }) => {
  const path = join(root, "CONTRIBUTING.md")
  const text = readFileSync(path, "utf8")
  const from = text.indexOf(readmeMarkers.start)
  const to = text.indexOf(readmeMarkers.end)
  if (from < 0 || to < from) fail(`CONTRIBUTING.md has no ${readmeMarkers.start} … ${readmeMarkers.end} section to write the table into`)
  const earlier = new Map()
  for (const line of text.slice(from, to).split("\n")) {
    const match = rowPattern.exec(line)
    if (match !== null) earlier.set(match[1], { kills: match[2], when: match[3] })
  }
  const when = `${started.toISOString().slice(0, 10)} ${commit?.slice(0, 7) ?? "unknown"}`
  const rows = new Map(earlier)
  for (const r of results) {
    const tests = r.killers.filter((k) => !k.suite).length
    const kills = r.killers.length === 0
      ? `**${r.status}**`
      : `${tests}: ${byFile(r.killers, propertyFiles)}${bail || r.strong ? "" : " **(weak)**"}`
    rows.set(r.mutant.id, { kills, when })
  }
  // Read from the row itself, so rows kept from earlier runs (bail mode lists only first killers) count right.
  const strong = (kills) => Number(/^(\d+):/.exec(kills)?.[1] ?? 0) >= 2 && kills.includes("(property)") && !kills.includes("(weak)")
  const listed = mutants.filter((m) => rows.has(m.id))
  const killed = listed.filter((m) => /^\d+:/.test(rows.get(m.id).kills)).length
  const lines = [
    `${killed} of ${mutants.length} mutants killed, ${listed.filter((m) => strong(rows.get(m.id).kills)).length} of them by at least ` +
    `two tests of which one is a property (mode: ${bail ? "bail, which lists only the first killers" : "full"}). Each file ` +
    "counts its failing tests; (property) marks the property suites; the last column is the run's date and commit.",
    "",
    "| mutant | rule it breaks | killed by | run |",
    "| --- | --- | --- | --- |"
  ]
  for (const m of mutants) {
    const row = rows.get(m.id) ?? { kills: "not run yet", when: "-" }
    lines.push(`| \`${m.id}\` | ${cell(m.rule)} | ${cell(row.kills)} | ${row.when} |`)
  }
  writeFileSync(path, `${text.slice(0, from + readmeMarkers.start.length)}\n${lines.join("\n")}\n${text.slice(to)}`)
}

// ---------------------------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------------------------

const main = async () => {
  const { mutants, propertyFiles, problems } = loadCatalogue(root)
  const chosen = select(mutants)
  // --tests: run the selected mutants against these files instead of their own (e.g. the properties alone).
  const override = args.tests?.split(",").map((t) => t.trim()).filter((t) => t !== "")
  const picked = override === undefined
    ? chosen.picked
    : chosen.picked.map(({ mutant, index }) => ({ mutant: { ...mutant, tests: override }, index }))
  const selection = override === undefined ? chosen.selection : `${chosen.selection}; tests ${override.join(", ")}`

  if (args.list) {
    log(`${picked.length} of ${mutants.length} mutants (${selection}):`)
    for (const { mutant, index } of picked) {
      log(`${String(index).padStart(3)}  ${mutant.id}  [${mutant.file}]  tests: ${mutant.tests.map(shortFile).join(", ")}`)
      log(`       ${mutant.rule}`)
    }
  }
  if (problems.length > 0) {
    process.stderr.write(`mutate: the catalogue is stale (${problems.length} problems):\n${problems.map((p) => `  - ${p}`).join("\n")}\n`)
    process.exit(1)
  }
  if (args.check) {
    log(`mutate: all ${mutants.length} mutants apply: each find occurs exactly once in its file`)
    return
  }
  if (args.list) return

  const timeoutMs = (args.timeout === undefined ? (args.ci ? ciTimeoutSeconds : defaultTimeoutSeconds) : Number(args.timeout)) * 1000
  if (!(timeoutMs > 0)) fail(`--timeout takes seconds, got ${args.timeout}`)
  const started = new Date()
  const commit = git("rev-parse", "HEAD")
  // A CI share leaves the full run's table in mutants/last-run.md alone.
  const out = args.out !== undefined
    ? resolve(args.out)
    : args.ci
    ? join(tmpdir(), "unique-jobs-mutate-ci.md")
    : join(root, "mutants", "last-run.md")

  log(`mutate: ${picked.length} mutants (${selection})`)
  scratch = makeScratch()
  log(`mutate: scratch copy ${scratch}`)
  if (generateLua(scratch)) log(`mutate: warning: ${generated} was out of date with lua/ in the tree; regenerated in the copy`)
  const generatedText = readFileSync(join(scratch, generated), "utf8")

  // Unmutated, the same tests must pass: a test that fails anyway would look like a kill of every mutant.
  let baseline
  if (!args.ci && !args["no-baseline"]) {
    const files = [...new Set(picked.flatMap(({ mutant }) => mutant.tests))].sort()
    log(`mutate: baseline: ${files.map(shortFile).join(", ")} unmutated ...`)
    baseline = await runTests(files, "baseline", timeoutMs)
    if (baseline.timedOut || baseline.error !== undefined) {
      fail(`the baseline run ${baseline.timedOut ? "timed out" : `failed: ${baseline.error}`}\n${tail(baseline.logFile)}`)
    }
    log(`mutate: baseline: ${baseline.failures.length === 0 ? "green" : `${baseline.failures.length} FAILING (not counted as kills)`} in ${seconds(baseline.ms)}`)
    for (const k of baseline.failures) log(`         failing unmutated: ${k.file} › ${k.name}`)
  }
  const failingAnyway = new Set((baseline?.failures ?? []).map((k) => `${k.file}\u0000${k.name}`))

  const results = []
  const keptLogs = []
  for (const [i, { mutant, index }] of picked.entries()) {
    const path = join(scratch, mutant.file)
    const original = readFileSync(path, "utf8")
    if (occurrences(original, mutant.find) !== 1) fail(`mutant ${mutant.id}: its find no longer occurs exactly once`)
    writeFileSync(path, original.replace(mutant.find, () => mutant.replace))
    const lua = mutant.file.startsWith("lua/")
    let run
    try {
      if (lua) generateLua(scratch)
      log(`[${i + 1}/${picked.length}] ${mutant.id} (${mutant.file}): ${mutant.tests.map(shortFile).join(", ")} ...`)
      run = await runTests(mutant.tests, mutant.id, timeoutMs)
    } finally {
      writeFileSync(path, original)
      if (lua) generateLua(scratch)
    }
    if (interrupted) return
    if (readFileSync(join(scratch, generated), "utf8") !== generatedText) fail(`restoring ${mutant.id} left ${generated} changed`)

    const killers = run.failures.filter((k) => !failingAnyway.has(`${k.file}\u0000${k.name}`))
    const tests = killers.filter((k) => !k.suite)
    const strong = tests.length >= 2 && tests.some((k) => propertyFiles.includes(k.file))
    const status = run.timedOut ? "timeout" : killers.length > 0 ? "killed" : run.error !== undefined ? "error" : "survived"
    const missing = mutant.tests.filter((t) => !run.files.includes(t))
    const note = run.timedOut
      ? `no result within ${seconds(timeoutMs)}`
      : run.error ?? (missing.length > 0 ? `vitest ran no ${missing.join(", ")}` : undefined)
    results.push({ mutant, index, status, killers, strong, ms: run.ms, note })
    const properties = tests.filter((k) => propertyFiles.includes(k.file)).length
    log(
      `        ${status === "killed" ? `killed by ${tests.length} test${tests.length === 1 ? "" : "s"} (${properties} property)${strong || bail ? "" : ", weak"}` : status.toUpperCase()}` +
        ` in ${seconds(run.ms)}${note !== undefined ? ` — ${note}` : ""}`
    )
    if (status === "killed") rmSync(run.logFile, { force: true })
    else {
      log(tail(run.logFile).replace(/^/gm, "        | "))
      keptLogs.push(run.logFile)
    }
  }

  const text = markdown({ results, selection, started, commit, propertyFiles, baseline })
  writeFileSync(out, `${text}\n`)
  if (args.readme) writeReadme({ results, started, commit, propertyFiles, mutants })
  log("")
  log(text.split("\n## Killing tests")[0].trimEnd())
  log("")
  log(`mutate: wrote ${out.startsWith(root + sep) ? relative(root, out) : out}`)

  if (keptLogs.length > 0) {
    // The logs of the mutants that were not killed outlive the scratch copy.
    const logs = mkdtempSync(join(tmpdir(), "unique-jobs-mutate-logs-"))
    for (const file of keptLogs) cpSync(file, join(logs, file.split(sep).pop()))
    log(`mutate: logs of the mutants not killed: ${logs}`)
  }
  const bad = results.filter((r) => r.status !== "killed" || (args.strict && !r.strong))
  if (bad.length > 0) {
    log(`mutate: FAILED: ${bad.map((r) => `${r.mutant.id} (${r.status === "killed" ? "weak" : r.status})`).join(", ")}`)
    process.exitCode = 1
  } else {
    log(`mutate: every mutant killed (${results.length})`)
  }
}

main().catch((error) => {
  process.stderr.write(`mutate: ${error?.stack ?? error}\n`)
  process.exitCode = 1
})
