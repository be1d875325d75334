// Checks the package as users get it, in scratch projects under the OS temp dir (removed at the end):
//
//   pack   `npm pack` of this working tree: its package.json has no install script (no `prepare`: dist/ is built)
//          and the working tree's is as it was; installed with its peers from the registry, each install printing
//          no `npm warn install-scripts` for this package, into
//          esm    an ESM project: `import` of every entry point (`.`, testing, bullmq, each module `./*` maps), the bin
//          cjs    a CommonJS project: `require` of each gives the import's export names (Node 20.19+ require(esm))
//          ts7    a new app (`npm init -y`) with TypeScript 7's `tsc --init`, plus what the README's Install section
//                 says to add: refused with TS1295 until `"type": "module"`, as the README says, then type-checks the
//                 README's BullMQ and Effect examples (examples/bullmq-promises.ts, examples/quickstart.ts, copied as
//                 they are) and BullMQ's `UniqueQueue.make(new Queue(...))`; then runs the two copies with tsx against
//                 a private redis-server (when there is one on PATH)
//   git    `npm install git+file://<this repo>`: its committed HEAD, built by `prepare`; then `import`
//
//   node scripts/package-check.mjs    (npm run check:package; .ci/run runs it after the tests)
//
// One line per check; exit 1 when one fails. Every child process has a time limit. Installs use npm's own cache.
import { spawn, spawnSync } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { freePort } from "./free-port.mjs"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
const name = pkg.name
const started = Date.now()
const windows = process.platform === "win32"

// What the README's Install section tells a TypeScript 7 `tsc --init` app to add.
const tsDevDependencies = ["typescript@7", "@types/node", "tsx"]
const tsTypes = `"types": ["node"]`
// The peers as package.json asks for them (effect 4 from 2.0.0).
const peers = [`effect@${pkg.peerDependencies.effect}`, "ioredis"]

const minute = 60_000
const limits = { pack: 5 * minute, install: 5 * minute, gitInstall: 6 * minute, node: 2 * minute, total: 12 * minute }

const tmp = mkdtempSync(join(tmpdir(), `${name}-package-check-`))
const cleanup = () => rmSync(tmp, { recursive: true, force: true, maxRetries: 3 })
const children = new Set()
const stop = () => {
  for (const child of children) killTree(child)
  cleanup()
  process.exit(1)
}
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, stop)

// npm run passes its own settings down (npm_config_local_prefix names this repo): the scratch installs get none of
// them, only the user's and CI's own npm configuration.
const childEnv = Object.fromEntries(
  Object.entries(process.env).filter(([key]) =>
    !/^(npm_package_|npm_lifecycle_|npm_command$|npm_config_local_prefix$|npm_config_loglevel$|INIT_CWD$)/i.test(key)
  )
)
childEnv.npm_config_audit = "false"
childEnv.npm_config_fund = "false"
childEnv.npm_config_update_notifier = "false"

function killTree(child) {
  try {
    if (windows) spawnSync("taskkill", ["/pid", String(child.pid), "/t", "/f"])
    else process.kill(-child.pid, "SIGKILL")
  } catch {
    // already gone
  }
}

/** Runs a command in its own process group; on timeout the whole group is killed. Never rejects. */
const run = (command, args, { cwd, timeout, env = {} }) =>
  new Promise((resolve) => {
    const child = spawn(windows && command === "npm" ? "npm.cmd" : command, args, {
      cwd,
      env: { ...childEnv, ...env },
      detached: !windows,
      shell: windows,
      stdio: ["ignore", "pipe", "pipe"]
    })
    children.add(child)
    let stdout = ""
    let stderr = ""
    let timedOut = false
    child.stdout.on("data", (chunk) => (stdout += chunk))
    child.stderr.on("data", (chunk) => (stderr += chunk))
    const timer = setTimeout(() => {
      timedOut = true
      killTree(child)
    }, timeout)
    const done = (code, error) => {
      clearTimeout(timer)
      children.delete(child)
      resolve({ code, stdout, stderr, timedOut, error, what: `${command} ${args.join(" ")}`, timeout })
    }
    child.on("error", (error) => done(null, error))
    child.on("close", (code) => done(code))
  })

/** Why a run failed, in one line: the time limit, or the first error-looking lines of its output. */
const why = (result) => {
  if (result.timedOut) return `${result.what}: no answer within ${result.timeout / 1000} s, killed`
  if (result.error) return `${result.what}: ${result.error.message}`
  const lines = `${result.stderr}\n${result.stdout}`.split("\n").map((line) => line.trim()).filter((line) =>
    line !== ""
  )
  const errors = lines.filter((line) => /error|ERR_|cannot|not found|failed/i.test(line) && !/^npm warn/i.test(line))
  const shown = (errors.length > 0 ? errors : lines.slice(-3)).slice(0, 4).join(" | ")
  return `${result.what}: exit ${result.code}${shown === "" ? "" : `: ${shown}`}`.slice(0, 900)
}

let failures = 0
const seconds = (since) => `${Math.round((Date.now() - since) / 1000)} s`
const report = (check, since, failure) => {
  if (failure === undefined) process.stdout.write(`ok      ${check} (${seconds(since)})\n`)
  else {
    failures++
    const line = String(failure).trim().replace(/\s*\n\s*/g, " | ").split(tmp).join("<tmp>")
    process.stdout.write(`FAILED  ${check} (${seconds(since)}): ${line}\n`)
  }
}

/** A check: `body` returns undefined when it passes, or the reason it fails; a throw is a failure too. */
const check = async (label, body) => {
  const since = Date.now()
  let failure
  try {
    failure = await body()
  } catch (error) {
    failure = error instanceof Error ? error.message : String(error)
  }
  report(typeof label === "function" ? label() : label, since, failure)
  return failure === undefined
}

const project = (dir, type) => {
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: `scratch-${type}`, private: true, type }, null, 2))
  return dir
}

const npmInstall = (cwd, specs, timeout = limits.install) =>
  run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", ...specs], { cwd, timeout })

/** The versions an install chose, e.g. "effect 3.22.4, ioredis 5.11.1". */
const versions = (cwd, names) =>
  names.flatMap((dependency) => {
    const file = join(cwd, "node_modules", dependency, "package.json")
    return existsSync(file) ? [`${dependency} ${JSON.parse(readFileSync(file, "utf8")).version}`] : []
  }).join(", ")

/** An installed bin of a scratch project (not `npx`, which asks the registry for a name it does not find). */
const bin = (cwd, command) => join(cwd, "node_modules", ".bin", windows ? `${command}.cmd` : command)

/** Runs a Node script and parses the JSON it prints. */
const nodeJson = async (cwd, file, args) => {
  const result = await run(process.execPath, [file, ...args], { cwd, timeout: limits.node })
  if (result.code !== 0 || result.timedOut) throw new Error(why(result))
  return JSON.parse(result.stdout)
}

const importAll = `const specs = JSON.parse(process.argv[2])
const out = {}
for (const spec of specs) {
  try {
    out[spec] = { keys: Object.keys(await import(spec)).sort() }
  } catch (error) {
    out[spec] = { error: \`\${error.code ?? error.name}: \${String(error.message).split("\\n")[0]}\` }
  }
}
process.stdout.write(JSON.stringify(out))
`
const requireAll = `const specs = JSON.parse(process.argv[2])
const out = {}
for (const spec of specs) {
  try {
    out[spec] = { keys: Object.keys(require(spec)).sort() }
  } catch (error) {
    out[spec] = { error: \`\${error.code ?? error.name}: \${String(error.message).split("\\n")[0]}\` }
  }
}
process.stdout.write(JSON.stringify(out))
`

/** `.`, then every module the `./*` export maps, as the tarball's dist/ has them (not store/, cli/ or the other internal folders, not bin/). */
const entryPoints = (installed) => {
  const dist = join(installed, "dist")
  if (!existsSync(dist)) throw new Error(`the tarball has no dist/ (was it built before packing?)`)
  const modules = (dir, prefix) =>
    readdirSync(join(dist, dir)).filter((file) => file.endsWith(".js")).map((file) => prefix + file.slice(0, -3))
  const adapters = existsSync(join(dist, "adapters")) ? modules("adapters", "adapters/") : []
  const subpaths = [...modules(".", ""), ...adapters]
  const missing = [
    ...readdirSync(join(root, "src")).filter((file) => file.endsWith(".ts")).map((file) => file.slice(0, -3)),
    ...readdirSync(join(root, "src", "adapters")).filter((file) => file.endsWith(".ts")).map((file) =>
      `adapters/${file.slice(0, -3)}`
    )
  ].filter((module) => !subpaths.includes(module))
  if (missing.length > 0) throw new Error(`dist/ lacks modules that src/ has: ${missing.join(", ")}`)
  const untyped = subpaths.filter((module) => !existsSync(join(dist, `${module}.d.ts`)))
  if (untyped.length > 0) throw new Error(`dist/ has no .d.ts for ${untyped.join(", ")}`)
  return [name, ...subpaths.map((module) => `${name}/${module}`)]
}

/** An example as a user copies it: as it is, importing the package by its name. */
const example = (file) => {
  const source = readFileSync(join(root, "examples", file), "utf8")
  const relative = source.match(/^(?:import|export)\b[^"']*?from\s+(["']\.[^"']*["'])/m)
  if (relative !== null) throw new Error(`examples/${file} imports ${relative[1]}: a copy of it would not run`)
  return source
}

const bullmqQueue = `import { Queue } from "bullmq"
import { UniqueQueue } from "${name}/bullmq"

// The call that failed on a TypeScript 7 \`tsc --init\` app without @types/node (a Queue backend type mismatch).
export const queue = UniqueQueue.make(new Queue("q"), { lock: "until_executed" })
`
const commonJs = `// A CommonJS module of the app (.cts), requiring the package's ESM entries.
import bullmq = require("bullmq")
import uniqueJobs = require("${name}")
import adapter = require("${name}/bullmq")

const queue = adapter.UniqueQueue.make(new bullmq.Queue("q"), { lock: "until_executed" })
export = { queue, store: uniqueJobs.Redis.layerMemory }
`

/** The first few problems of a list, and how many more there are. */
const summary = (problems) =>
  problems.length === 0
    ? undefined
    : problems.slice(0, 3).join("; ") + (problems.length > 3 ? `; and ${problems.length - 3} more like it` : "")

const compare = (imported, required) => {
  const problems = []
  for (const [spec, got] of Object.entries(required)) {
    const want = imported[spec]
    if (got.error !== undefined) problems.push(`${spec}: ${got.error}`)
    else if (want?.keys === undefined) problems.push(`${spec}: no import result to compare with`)
    else if (got.keys.join() !== want.keys.join()) {
      problems.push(`${spec}: require gives [${got.keys.join(", ")}], import [${want.keys.join(", ")}]`)
    }
  }
  return problems
}

/** An `npm install` check; the label ends with the versions it chose. This package must be no install script. */
const installCheck = (project, dir, specs, shown, timeout) => {
  const label = specs.map((spec) => (spec.startsWith(tmp) ? "<tarball>" : spec)).join(" ")
  const what = () => `${project}: npm install ${label} (${versions(dir, shown)}), no install-scripts warning of it`
  return check(what, async () => {
    const result = await npmInstall(dir, specs, timeout)
    if (result.code !== 0 || result.timedOut) return why(result)
    const warned = `${result.stderr}\n${result.stdout}`.split("\n").filter((line) =>
      /install-scripts/.test(line) && line.includes(`${name}@`)
    )
    if (warned.length > 0) return `npm listed this package's install scripts: ${warned.join(" | ")}`
  })
}

/** The packed package.json: no script npm runs at install (a registry install never runs `prepare`, but npm 11 lists
 * one of a tarball file). The working tree's package.json is as it was (prepack changed it, postpack put it back). */
const packedManifest = (tgz, before) => {
  const listed = spawnSync("tar", ["-xzOf", tgz, "package/package.json"], { encoding: "utf8", timeout: 30_000 })
  if (listed.status !== 0) return `tar could not read package/package.json: ${listed.stderr}`
  const scripts = JSON.parse(listed.stdout).scripts ?? {}
  const install = ["preinstall", "install", "postinstall", "prepare"].filter((script) => scripts[script] !== undefined)
  if (install.length > 0) return `the tarball's package.json has ${install.join(", ")}: npm lists it at install`
  if (readFileSync(join(root, "package.json"), "utf8") !== before) return "npm pack left package.json changed"
  if (existsSync(join(root, ".package.json.packing"))) return "npm pack left .package.json.packing behind"
}

const tarballChecks = async () => {
  let tarball
  const manifestBefore = readFileSync(join(root, "package.json"), "utf8")
  const packLabel = () => `pack: npm pack of the working tree${tarball ? `: ${tarball}` : ""}, no install script`
  const packed = await check(packLabel, async () => {
    const result = await run("npm", ["pack", "--pack-destination", tmp], { cwd: root, timeout: limits.pack })
    if (result.code !== 0 || result.timedOut) return why(result)
    tarball = readdirSync(tmp).find((file) => file.endsWith(".tgz"))
    if (tarball === undefined) return "npm pack wrote no .tgz"
    return packedManifest(join(tmp, tarball), manifestBefore)
  })
  if (!packed) return
  const tgz = join(tmp, tarball)
  const esm = project(join(tmp, "esm"), "module")
  const cjs = project(join(tmp, "cjs"), "commonjs")
  // The TypeScript app starts as a new user's does: `npm init -y`.
  const ts = join(tmp, "ts7")
  mkdirSync(ts)
  const created = await check("ts7: npm init -y", async () => {
    const init = await run("npm", ["init", "-y"], { cwd: ts, timeout: limits.node })
    if (init.code !== 0 || init.timedOut) return why(init)
  })
  if (!created) return
  const runtime = ["effect", "ioredis", "bullmq"]
  const [esmInstalled, cjsInstalled, tsInstalled] = await Promise.all([
    installCheck("esm", esm, [tgz, ...peers, "bullmq"], runtime),
    installCheck("cjs", cjs, [tgz, ...peers, "bullmq"], runtime),
    installCheck("ts7", ts, [tgz, ...peers, "bullmq", ...tsDevDependencies], ["typescript", "@types/node", "tsx"])
  ])

  let imported
  if (esmInstalled) {
    let count = ""
    await check(() => `esm: import every entry point${count}, each with exports; store/* refused`, async () => {
      const specs = entryPoints(join(esm, "node_modules", name))
      count = ` (${specs.length})`
      const internal = `${name}/store/Memory`
      writeFileSync(join(esm, "import-all.js"), importAll)
      const { [internal]: refused, ...entries } = await nodeJson(esm, "import-all.js", [
        JSON.stringify([...specs, internal])
      ])
      imported = entries
      const problems = Object.entries(entries).flatMap(([spec, got]) =>
        got.error !== undefined ? [`${spec}: ${got.error}`] : got.keys.length === 0 ? [`${spec}: no exports`] : []
      )
      if (refused.error === undefined || !refused.error.includes("ERR_PACKAGE_PATH_NOT_EXPORTED")) {
        problems.push(`${internal} must not be importable (${refused.error ?? "it imports"})`)
      }
      return summary(problems)
    })
    await check(`esm: the unique-jobs bin runs (unique-jobs --help)`, async () => {
      const result = await run(bin(esm, "unique-jobs"), ["--help"], { cwd: esm, timeout: limits.node })
      if (result.code !== 0 || result.timedOut) return why(result)
      if (!/USAGE/.test(result.stdout)) return `unique-jobs --help printed no usage: ${result.stdout.slice(0, 200)}`
    })
  }
  if (cjsInstalled) {
    await check(`cjs: require() of every entry point gives the import's export names`, async () => {
      const specs = entryPoints(join(cjs, "node_modules", name))
      writeFileSync(join(cjs, "require-all.js"), requireAll)
      return summary(compare(imported ?? {}, await nodeJson(cjs, "require-all.js", [JSON.stringify(specs)])))
    })
  }
  if (tsInstalled) {
    const tsc = bin(ts, "tsc")
    let version = ""
    const initialised = await check(() => `ts7: tsc --init${version}, strict, plus ${tsTypes}`, async () => {
      const init = await run(tsc, ["--init"], { cwd: ts, timeout: limits.node })
      if (init.code !== 0 || init.timedOut) return why(init)
      const shown = (await run(tsc, ["--version"], { cwd: ts, timeout: limits.node })).stdout.trim()
      version = ` (${shown})`
      if (!/^Version 7\./.test(shown)) return `expected TypeScript 7, got ${shown}`
      const file = join(ts, "tsconfig.json")
      const config = readFileSync(file, "utf8")
      if (!/^\s*"strict":\s*true/m.test(config)) return `tsc --init's tsconfig.json is not strict`
      if (!/^\s*"types":\s*\[\s*\]/m.test(config)) {
        return `tsc --init's tsconfig.json has no "types": [] line to change: see what a new app needs, then update ` +
          `the README's Install section and this check`
      }
      writeFileSync(file, config.replace(/^(\s*)"types":\s*\[\s*\]/m, `$1${tsTypes}`))
    })
    if (initialised) {
      const typeOf = () => JSON.parse(readFileSync(join(ts, "package.json"), "utf8")).type
      const commonjs = `ts7: as npm init -y leaves it ("type": "commonjs"), tsc refuses an import with TS1295`
      const refused = await check(commonjs, async () => {
        if (typeOf() !== "commonjs") {
          return `npm init -y wrote "type": ${JSON.stringify(typeOf())}: see the README's note`
        }
        writeFileSync(join(ts, "quickstart.ts"), example("quickstart.ts"))
        writeFileSync(join(ts, "bullmq-promises.ts"), example("bullmq-promises.ts"))
        writeFileSync(join(ts, "bullmq-queue.ts"), bullmqQueue)
        writeFileSync(join(ts, "require.cts"), commonJs)
        const result = await run(tsc, ["--noEmit", "-p", "."], { cwd: ts, timeout: limits.node })
        if (result.timedOut || result.code === 0 || !result.stdout.includes("TS1295")) {
          return `expected TS1295, as the README's Install section says: ${why(result)}`
        }
      })
      const what = "examples/quickstart.ts and bullmq-promises.ts, UniqueQueue.make(new Queue(...)), a .cts require"
      const esm = `ts7: npm pkg set type=module, then tsc --noEmit type-checks ${what}`
      const typed = refused && await check(esm, async () => {
        const set = await run("npm", ["pkg", "set", "type=module"], { cwd: ts, timeout: limits.node })
        if (set.code !== 0 || set.timedOut) return why(set)
        const result = await run(tsc, ["--noEmit", "-p", "."], { cwd: ts, timeout: limits.node })
        if (result.code !== 0 || result.timedOut) return why(result)
      })
      if (typed) await copiedExamples(ts)
    }
  }
}


/** The README's two first examples, copied as they are into the app, run with `npx tsx` against a private Redis. */
const copiedExamples = async (dir) => {
  const label = "ts7: the copied examples run with tsx against the tarball (a private redis-server)"
  if (spawnSync("redis-server", ["--version"], { timeout: 30_000 }).status !== 0) {
    process.stdout.write(`skipped ${label}: no redis-server on PATH\n`)
    return
  }
  const port = await freePort()
  const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
  const server = spawn("redis-server", args, { detached: !windows, stdio: "ignore" })
  children.add(server)
  try {
    await check(label, async () => {
      const env = { REDIS_URL: `redis://127.0.0.1:${port}` }
      const problems = []
      for (const file of ["quickstart.ts", "bullmq-promises.ts"]) {
        const result = await run(bin(dir, "tsx"), [file], { cwd: dir, timeout: limits.node, env })
        const output = `${result.stdout}\n${result.stderr}`
        if (result.code !== 0 || result.timedOut) problems.push(`${file}: ${why(result)}`)
        else if (!output.includes("Enqueued, then Skipped") || !output.includes("rebuilding report 42")) {
          problems.push(`${file} printed not both "Enqueued, then Skipped" and "rebuilding report 42": ${output.slice(0, 300)}`)
        }
      }
      return summary(problems)
    })
  } finally {
    killTree(server)
    children.delete(server)
  }
}

const gitChecks = async () => {
  const git = (args) => spawnSync("git", args, { cwd: root, encoding: "utf8", timeout: 30_000 })
  const head = git(["rev-parse", "--short", "HEAD"])
  const status = git(["status", "--porcelain"])
  const changes = status.status === 0 ? status.stdout.split("\n").filter((line) => line !== "").length : 0
  process.stdout.write(
    `package-check: the git install takes the committed HEAD${head.status === 0 ? ` ${head.stdout.trim()}` : ""}: ` +
      `uncommitted changes are not part of it${changes > 0 ? ` (${changes} now)` : ""}\n`
  )
  const dir = project(join(tmp, "git"), "module")
  const installed = await check(`git: npm install git+file://<repo> ${peers.join(" ")}`, async () => {
    if (head.status !== 0) return `${root} is not a git repository: ${(head.stderr ?? "").trim()}`
    const result = await npmInstall(dir, [`git+${pathToFileURL(root).href}`, ...peers], limits.gitInstall)
    if (result.code !== 0 || result.timedOut) return why(result)
  })
  if (!installed) return
  await check(`git: import "${name}" from the git install`, async () => {
    writeFileSync(join(dir, "import-all.js"), importAll)
    const got = (await nodeJson(dir, "import-all.js", [JSON.stringify([name])]))[name]
    if (got.error !== undefined) return `${got.error} (no dist/: the git install did not build)`
    if (got.keys.length === 0) return "no exports"
  })
}

process.stdout.write(`package-check: ${name}@${pkg.version}, scratch projects in ${tmp}\n`)
// Each child has its own limit; this one bounds the whole run should the limits add up.
const deadline = setTimeout(() => {
  process.stdout.write(`FAILED  package-check: not done within ${limits.total / 1000} s, stopped\n`)
  stop()
}, limits.total)
deadline.unref()
try {
  await Promise.all([tarballChecks(), gitChecks()])
} finally {
  clearTimeout(deadline)
  cleanup()
}
const total = seconds(started)
process.stdout.write(
  failures === 0 ? `package-check: all ok in ${total}\n` : `package-check: ${failures} FAILED in ${total}\n`
)
process.exitCode = failures === 0 ? 0 : 1
