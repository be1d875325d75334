// npm run docs: the documentation site, static HTML in docs-site/ (VitePress: the manual is plain Markdown that reads
// the same on GitHub and in the tarball, and VitePress builds it as it is, with navigation and local search).
//
// 1. Every public export carries @since (the entry points' modules: src/*.ts and src/adapters/*.ts).
// 2. TypeDoc writes the API reference as Markdown from the sources' doc comments (src/index.ts, bullmq.ts, testing.ts).
// 3. The user's pages: the README (the home page), docs/ and the changelog are staged under .site/src with their
//    links as they are (a README.md becomes the folder's index.md), the examples beside them as files and the license
//    as a page; the sidebar comes from the manual's index (docs/README.md). What is the project's own (CONTRIBUTING,
//    the bench's README and results) is not published: a link to it is left as its text, saying it is in the
//    repository.
// 4. VitePress builds it (a dead link fails the build); then every local link and anchor of every built page is
//    checked against the files built.
import { spawnSync } from "node:child_process"
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs"
import { dirname, join, posix, relative } from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const stage = join(root, ".site")
const src = join(stage, "src")
const out = join(root, "docs-site")

const fail = (message) => {
  process.stderr.write(`docs: ${message}\n`)
  process.exit(1)
}
const step = (label) => process.stdout.write(`docs: ${label}\n`)

// 1. @since on every export of a public module (an overload's signatures count once: the first carries the doc).
const publicModules = [
  ...readdirSync(join(root, "src")).filter((f) => f.endsWith(".ts")).map((f) => `src/${f}`),
  ...readdirSync(join(root, "src/adapters")).filter((f) => f.endsWith(".ts")).map((f) => `src/adapters/${f}`),
  // The harnesses the `effect-unique-jobs/testing` entry exports (RedisProcess is theirs, not public).
  "src/testing/RedisServer.ts",
  "src/testing/RedisCluster.ts"
]
const undated = []
let exported = 0
for (const file of publicModules) {
  const source = ts.createSourceFile(file, readFileSync(join(root, file), "utf8"), ts.ScriptTarget.Latest, true)
  const seen = new Set()
  for (const statement of source.statements) {
    if (!ts.canHaveModifiers(statement)) continue
    if (!(ts.getModifiers(statement) ?? []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword)) continue
    const names = ts.isVariableStatement(statement)
      ? statement.declarationList.declarations.map((d) => d.name.getText(source))
      : [statement.name?.getText(source) ?? "default"]
    const key = names.join(",")
    if (seen.has(key)) continue
    seen.add(key)
    exported += names.length
    const tags = (statement.jsDoc ?? []).flatMap((doc) => (doc.tags ?? []).map((tag) => tag.tagName.text))
    if (!tags.includes("since") && !tags.includes("internal")) {
      const { line } = source.getLineAndCharacterOfPosition(statement.getStart(source))
      undated.push(`${file}:${line + 1}: ${key}`)
    }
  }
}
if (undated.length > 0) fail(`public exports without @since (say which version brought them):\n${undated.join("\n")}`)
step(`${exported} public exports in ${publicModules.length} modules, each with @since`)

rmSync(stage, { recursive: true, force: true })
mkdirSync(join(src, ".vitepress"), { recursive: true })

// 2. The API reference.
const typedoc = spawnSync(
  process.execPath,
  [
    join(root, "node_modules/typedoc/bin/typedoc"),
    "--options",
    join(root, "typedoc.json"),
    "--out",
    join(src, "api"),
    "--docsRoot",
    src
  ],
  { cwd: root, stdio: "inherit" }
)
if (typedoc.status !== 0) fail("TypeDoc failed (see above)")

// 3. The user's pages, staged with their links as written, but for links to what is not published.
const asIndex = (path) => path.replace(/(^|\/)README\.md$/, "$1index.md")
/** Repository paths the site publishes (as pages or files); anything else a page links to stays in the repository. */
const published = (path) =>
  ["README.md", "CHANGELOG.md", "LICENSE"].includes(path) || /^(docs|examples)(\/|$)/.test(path)
const unpublished = new Set()
/** `[text](target)` to a repository file the site leaves out: the text, and where the file is when it does not say. */
const unlink = (from) => (link, text, target) => {
  if (/^(?:[a-z][a-z0-9+.-]*:|\/\/|#)/i.test(target)) return link
  const path = posix.normalize(posix.join(posix.dirname(from), target.split("#")[0])).replace(/\/$/, "")
  if (published(path)) return link
  unpublished.add(path)
  return text.includes(posix.basename(path)) ? text : `${text} (\`${path}\` in the repository)`
}
/** The page's prose (not its fenced code, nor inline code) through `edit`. */
const inProse = (text, edit) => {
  let fence
  return text.split("\n").map((line) => {
    const marker = /^\s*(```|~~~)/.exec(line)
    if (marker !== null) {
      if (fence === undefined) fence = marker[1]
      else if (marker[1] === fence) fence = undefined
      return line
    }
    return fence === undefined ? edit(line) : line
  }).join("\n")
}
const stagePage = (from, to) => {
  const text = inProse(
    readFileSync(join(root, from), "utf8"),
    (line) =>
      line.replace(
        /(`+)[^`]*?\1|\[((?:[^[\]]|\[[^\]]*\])*)\]\(([^()\s]+)\)/g,
        (match, code, text, target) => code !== undefined ? match : unlink(from)(match, text, target)
      )
  )
    // A link to a folder's README is a link to its index page.
    .replace(/(\]\((?:[^()\s#]*\/)?)README\.md(?=[)#])/g, "$1index.md")
  mkdirSync(dirname(join(src, to)), { recursive: true })
  writeFileSync(join(src, to), text)
}
stagePage("README.md", "index.md")
stagePage("CHANGELOG.md", "CHANGELOG.md")
for (const file of readdirSync(join(root, "docs"))) {
  if (file.endsWith(".md")) stagePage(`docs/${file}`, asIndex(`docs/${file}`))
  else cpSync(join(root, "docs", file), join(src, "docs", file))
}
step(`links to what the site does not publish left as text: ${[...unpublished].sort().join(", ") || "none"}`)
// Folders the pages link to: an index page listing their files.
const listing = (title, intro, entries) =>
  `# ${title}\n\n${intro}\n\n${entries.map(([text, link]) => `- [${text}](${link})`).join("\n")}\n`
// The examples as files (public/: copied as they are), and a page listing them.
const examples = readdirSync(join(root, "examples")).filter((f) => f.endsWith(".ts")).sort()
mkdirSync(join(src, "public/examples"), { recursive: true })
mkdirSync(join(src, "examples"), { recursive: true })
for (const file of examples) cpSync(join(root, "examples", file), join(src, "public/examples", file))
// The license as a page (a link to LICENSE is a link to a page here).
writeFileSync(join(src, "LICENSE.md"), `# License\n\n\`\`\`text\n${readFileSync(join(root, "LICENSE"), "utf8").trim()}\n\`\`\`\n`)
writeFileSync(
  join(src, "examples/index.md"),
  listing(
    "Examples",
    "Whole programs, each run by the test suite against a private Redis; the pages quote them as they are.",
    examples.map((f) => [f, f])
  )
)

// The sidebar: the manual's index as staged (its links to unpublished files are text), section by section.
const manualIndex = readFileSync(join(src, "docs/index.md"), "utf8")
const manual = []
for (const line of manualIndex.split("\n")) {
  const section = /^## (.+)$/.exec(line)
  if (section !== null) manual.push({ text: section[1], items: [] })
  const item = /^- \[([^\]]+)\]\(([^)]+)\)/.exec(line)
  if (item !== null && manual.length > 0) {
    const target = posix.normalize(posix.join("/docs", asIndex(item[2]))).replace(/\.md$/, "").replace(/\/index$/, "/")
    manual.at(-1).items.push({ text: item[1], link: target })
  }
}
manual.unshift({ text: "Overview", items: [{ text: "Home", link: "/" }, { text: "The manual", link: "/docs/" }] })
const apiSidebar = JSON.parse(readFileSync(join(src, "api/typedoc-sidebar.json"), "utf8"))
// A page named `X-1.md` is TypeDoc giving way to another reflection that took `X.md` (site/typedoc-router.mjs).
const renamed = JSON.stringify(apiSidebar).match(/[^"/]+-\d+\.md/g)
if (renamed !== null) fail(`TypeDoc named API pages with a number, as when two want one file: ${renamed.join(", ")}`)
writeFileSync(
  join(src, ".vitepress/sidebar.mjs"),
  `export const manual = ${JSON.stringify(manual, null, 2)}\nexport const api = ${JSON.stringify(apiSidebar, null, 2)}\n`
)
cpSync(join(root, "site/config.mts"), join(src, ".vitepress/config.mts"))

// 4. Build, then walk every built page's local links and anchors.
rmSync(out, { recursive: true, force: true })
const built = spawnSync(
  process.execPath,
  [join(root, "node_modules/vitepress/bin/vitepress.js"), "build", src, "--outDir", out],
  { cwd: root, stdio: "inherit" }
)
if (built.status !== 0) fail("VitePress failed (see above)")

const pagesBuilt = []
const walk = (dir) => {
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry)
    if (statSync(path).isDirectory()) walk(path)
    else if (entry.endsWith(".html")) pagesBuilt.push(path)
  }
}
walk(out)
const idsOf = new Map()
const ids = (file) => {
  if (!idsOf.has(file)) {
    const html = readFileSync(file, "utf8")
    idsOf.set(file, new Set([...html.matchAll(/\sid="([^"]+)"/g)].map((m) => m[1])))
  }
  return idsOf.get(file)
}
const decode = (text) => text.replace(/&amp;/g, "&").replace(/&quot;/g, "\"").replace(/&#39;/g, "'")
const broken = []
let links = 0
for (const page of pagesBuilt) {
  const html = readFileSync(page, "utf8")
  for (const match of html.matchAll(/\s(?:href|src)="([^"]*)"/g)) {
    const link = decode(match[1])
    if (/^(?:[a-z][a-z0-9+.-]*:|\/\/)/i.test(link) || link === "") continue
    links++
    const [pathPart, anchor] = link.split("#")
    const base = pathPart === "" ? page : pathPart.startsWith("/")
      ? join(out, decodeURIComponent(pathPart))
      : join(dirname(page), decodeURIComponent(pathPart))
    const target = [base, `${base}.html`, join(base, "index.html")].find((p) => existsSync(p) && statSync(p).isFile())
    if (target === undefined) {
      broken.push(`${relative(out, page)}: ${link} (no such file)`)
    } else if (anchor !== undefined && anchor !== "" && target.endsWith(".html") && !ids(target).has(decodeURIComponent(anchor))) {
      broken.push(`${relative(out, page)}: ${link} (no such anchor)`)
    }
  }
}
if (broken.length > 0) fail(`broken links in the built site:\n${broken.join("\n")}`)
step(`${pagesBuilt.length} pages built into ${relative(root, out)}/, ${links} local links and anchors resolved`)
