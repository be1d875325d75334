// Checks the relative links of the README, the manual (docs/*.md), CONTRIBUTING.md and CHANGELOG.md: every linked
// file exists, every #anchor names a heading of its page (GitHub's slugs), and every link in the README points into
// what package.json's `files` puts in the tarball (npm adds package.json, README and LICENSE itself).
//
//   node scripts/check-links.mjs    (npm run check:links)
//
// Prints each broken link as file:line and exits 1 when there is one.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve, sep } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
const pages = [
  "README.md",
  "CONTRIBUTING.md",
  "CHANGELOG.md",
  ...readdirSync(join(root, "docs")).filter((name) => name.endsWith(".md")).map((name) => `docs/${name}`)
].filter((page) => existsSync(join(root, page)))

/** GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens. */
const slug = (heading) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-")

/** A page's lines outside fenced code blocks, with their numbers. */
const prose = (text) => {
  const lines = []
  let fence = undefined
  text.split("\n").forEach((line, index) => {
    const marker = /^\s*(```|~~~)/.exec(line)
    if (marker !== null) {
      if (fence === undefined) fence = marker[1]
      else if (marker[1] === fence) fence = undefined
      return
    }
    if (fence === undefined) lines.push({ line, number: index + 1 })
  })
  return lines
}

const anchorsCache = new Map()
const anchorsOf = (file) => {
  let anchors = anchorsCache.get(file)
  if (anchors === undefined) {
    anchors = new Set()
    const seen = new Map()
    for (const { line } of prose(readFileSync(file, "utf8"))) {
      const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
      if (heading === null) continue
      const base = slug(heading[1])
      const count = seen.get(base) ?? 0
      seen.set(base, count + 1)
      anchors.add(count === 0 ? base : `${base}-${count}`)
    }
    anchorsCache.set(file, anchors)
  }
  return anchors
}

// What `npm pack` ships: package.json's `files`, plus what npm always adds.
const shipped = [...(pkg.files ?? []), "package.json", "README.md", "LICENSE"]
const inTarball = (path) =>
  shipped.some((entry) => path === entry || path.startsWith(`${entry.replace(/\/$/, "")}/`))

const broken = []
for (const page of pages) {
  const file = join(root, page)
  for (const { line, number } of prose(readFileSync(file, "utf8"))) {
    // Inline code is not a link.
    const text = line.replace(/`[^`]*`/g, (code) => " ".repeat(code.length))
    for (const match of text.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = match[1]
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // http:, https:, mailto:
      const [path, anchor] = target.split("#", 2)
      const linked = path === "" ? file : resolve(dirname(file), decodeURIComponent(path))
      const where = `${page}:${number}: ${target}`
      if (!existsSync(linked)) {
        broken.push(`${where}: no such file`)
        continue
      }
      if (anchor !== undefined && anchor !== "") {
        if (statSync(linked).isDirectory() || !linked.endsWith(".md")) {
          broken.push(`${where}: an anchor into a file that is not a Markdown page`)
        } else if (!anchorsOf(linked).has(anchor)) {
          broken.push(`${where}: no heading with this anchor in ${relative(root, linked)}`)
        }
      }
      if (page === "README.md") {
        const shippedPath = relative(root, linked).split(sep).join("/")
        if (shippedPath.startsWith("..") || !inTarball(shippedPath)) {
          broken.push(`${where}: not in the packed tarball (add it to package.json's files)`)
        }
      }
    }
  }
}

if (broken.length > 0) {
  for (const line of broken) console.error(line)
  console.error(`${broken.length} broken link(s) in ${pages.length} pages`)
  process.exit(1)
}
console.log(`every relative link and anchor resolves in ${pages.length} pages`)
