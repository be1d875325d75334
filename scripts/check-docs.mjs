// Docs that cannot rot: every ```ts block of the README, CONTRIBUTING and the manual (docs/*.md) is type-checked
// against the package's public entry points (the built dist, through the package's own name, as a user imports it),
// and each block marked runnable runs against a private redis-server.
//
//   npm run check:docs                    build, then check every page
//   npm run check:docs -- --no-build      the dist as it is (CI: npm ci has just built it)
//   npm run check:docs -- --pages a.md,b.md
//
// A block is a whole module (its imports included), so a reader can copy it. Marks, an HTML comment on the line
// right above the fence (invisible on the page):
//   <!-- doc-test: run -->      run with `node --import tsx`, REDIS_URL set; it must exit 0 within 60 s
//   <!-- doc-test: vitest -->   run as a vitest file
// A block quoted from examples/ ("This is [`examples/…`]" above it) is run by test/examples.test.ts, which also
// checks that the page quotes the file as it is; here it is type-checked like the rest.
import { spawn, spawnSync } from "node:child_process"
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { fileURLToPath } from "node:url"
import { freePort } from "./free-port.mjs"
import { parseArgs } from "node:util"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const { values: args } = parseArgs({
  options: { "no-build": { type: "boolean", default: false }, pages: { type: "string" } },
  strict: true
})

const fail = (message) => {
  process.stderr.write(`check:docs: ${message}\n`)
  process.exit(1)
}

const pages = args.pages !== undefined
  ? args.pages.split(",").filter((p) => p !== "")
  : [
    "README.md",
    "CONTRIBUTING.md",
    ...readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)
  ]

/** Every ```ts block of a page: where it starts, its text (a list item's indent taken off) and its mark. */
const blocksOf = (page) => {
  const lines = readFileSync(join(root, page), "utf8").split("\n")
  const found = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(ts|typescript)\s*$/.exec(lines[i])
    if (open === null) continue
    const indent = open[1].length
    const start = i + 1
    let end = start
    while (end < lines.length && !/^\s*```\s*$/.test(lines[end])) end++
    if (end === lines.length) fail(`${page}:${i + 1}: a code block that never closes`)
    const above = lines.slice(Math.max(0, i - 3), i).join("\n")
    const mark = /<!-- doc-test: (run|vitest) -->\s*$/.exec(lines[i - 1] ?? "")?.[1]
    const quoted = /This is \[`examples\/[^`]+`\]/.test(above)
    found.push({
      page,
      line: start + 1,
      text: lines.slice(start, end).map((l) => l.slice(Math.min(indent, l.length - l.trimStart().length))).join("\n"),
      mark,
      quoted
    })
    i = end
  }
  return found
}

const blocks = pages.flatMap(blocksOf)
if (blocks.length === 0) fail(`no \`\`\`ts block in ${pages.join(", ")}`)

if (!args["no-build"]) {
  const built = spawnSync("npm", ["run", "build"], { cwd: root, stdio: ["ignore", "ignore", "inherit"] })
  if (built.status !== 0) fail("npm run build failed")
}

// Inside the package, so "effect-unique-jobs" resolves to its own exports (dist), as in a user's app.
// One folder per run: two runs at once (a test beside a contributor's) do not meet.
const dir = join(root, ".doc-check", String(process.pid))
rmSync(dir, { recursive: true, force: true })
mkdirSync(dir, { recursive: true })
process.on("exit", () => rmSync(dir, { recursive: true, force: true }))
const files = blocks.map((block, i) => {
  const name = `${block.page.replace(/[^A-Za-z0-9]+/g, "-")}-${block.line}${block.mark === "vitest" ? ".test" : ""}.ts`
  // Each block its own module, whether or not it imports (isolatedModules).
  writeFileSync(join(dir, name), `${block.text}\nexport {}\n`)
  return { ...block, name, index: i }
})
// The vitest blocks run alone, with none of the project's tiers or setup.
writeFileSync(join(dir, "vitest.config.mjs"), `export default { test: { root: ${JSON.stringify(dir)}, include: ["*.test.ts"] } }\n`)
writeFileSync(
  join(dir, "tsconfig.json"),
  JSON.stringify({
    extends: "../../tsconfig.json",
    // A page's example declares what it shows, whether or not it uses it. The package's name is the built package
    // (its exports, as a user imports it), not the sources the repository's paths map it to.
    compilerOptions: { noUnusedLocals: false, noUnusedParameters: false, rootDir: ".", paths: {} },
    include: ["*.ts"]
  })
)

// Type-check, each error named by its page and line.
const tsc = spawnSync(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", dir, "--pretty", "false"], {
  cwd: root,
  encoding: "utf8"
})
if (tsc.status !== 0) {
  const byName = new Map(files.map((f) => [f.name, f]))
  const errors = `${tsc.stdout}${tsc.stderr}`.split("\n").filter((l) => l.trim() !== "").map((line) => {
    const at = /^(?:.*[\\/])?\.doc-check[\\/]\d+[\\/]([^(]+)\((\d+),(\d+)\): (.*)$/.exec(line)
    const file = at === null ? undefined : byName.get(at[1])
    return file === undefined ? line : `${file.page}:${file.line + Number(at[2]) - 1}:${at[3]}: ${at[4]}`
  })
  fail(`a page's example does not type-check against the package:\n${errors.join("\n")}`)
}


/** Runs a command to its exit, killed after `limit` ms; resolves with its code and output. */
const run = (command, argv, env, limit) =>
  new Promise((resolve) => {
    const child = spawn(command, argv, { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (chunk) => output += chunk)
    child.stderr.on("data", (chunk) => output += chunk)
    const timer = setTimeout(() => child.kill("SIGKILL"), limit)
    child.on("exit", (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, output })
    })
  })

const runnable = files.filter((f) => f.mark !== undefined)
if (runnable.length > 0) {
  const port = await freePort()
  const redis = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
    stdio: "ignore"
  })
  const url = `redis://127.0.0.1:${port}`
  try {
    // Up once it answers a PING.
    for (let tries = 0; ; tries++) {
      const ping = spawnSync("redis-cli", ["-p", String(port), "ping"], { encoding: "utf8" })
      if (ping.stdout.trim() === "PONG") break
      if (tries === 100) fail(`redis-server on port ${port} did not start`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    for (const file of runnable) {
      const path = join(dir, file.name)
      const result = file.mark === "vitest"
        ? await run(process.execPath, [join(root, "node_modules/vitest/vitest.mjs"), "run", "--config", join(dir, "vitest.config.mjs"), path], { REDIS_URL: url }, 120_000)
        // tsx reads the check's tsconfig: the package's name is its exports (dist/), not the repository's paths.
        : await run(process.execPath, ["--import", "tsx", path], {
          REDIS_URL: url,
          TSX_TSCONFIG_PATH: join(dir, "tsconfig.json")
        }, 60_000)
      if (result.code !== 0) {
        fail(`${file.page}:${file.line}: the example ${result.signal === null ? `exited ${result.code}` : `was killed (${result.signal}, no exit within its limit)`}:\n${result.output}`)
      }
    }
  } finally {
    redis.kill("SIGKILL")
  }
}

const quoted = files.filter((f) => f.quoted).length
process.stdout.write(
  `check:docs: ${files.length} ts blocks in ${new Set(files.map((f) => f.page)).size} pages type-checked against the ` +
    `package; ${runnable.length} run here against a private redis-server; ${quoted} quoted from examples/ ` +
    `(run by ${relative(root, join(root, "test/examples.test.ts"))})\n`
)
