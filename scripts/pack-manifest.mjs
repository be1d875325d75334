// npm pack and npm publish (package.json's prepack and postpack): the tarball's package.json carries no `prepare`.
//
// `prepare` builds dist/ where there is none: a clone's `npm install` and a git install. The tarball has dist/ built,
// and npm 11 lists the `prepare` of a package installed from a tarball file as an install script to approve
// (`npm warn install-scripts effect-unique-jobs@… (prepare: npm run build)`), though it never runs it there.
//
//   node scripts/pack-manifest.mjs prepack    dist/ built afresh, then `prepare` taken out of package.json (the file
//                                             kept as it was in .package.json.packing)
//   node scripts/pack-manifest.mjs postpack   package.json put back as it was
//
// A pack that failed between the two leaves .package.json.packing: the next prepack (or postpack) puts it back first.
import { spawnSync } from "node:child_process"
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const manifest = join(root, "package.json")
const kept = join(root, ".package.json.packing")

const restore = () => {
  if (existsSync(kept)) renameSync(kept, manifest)
}

const step = process.argv[2]
if (step === "prepack") {
  restore()
  rmSync(join(root, "dist"), { recursive: true, force: true })
  const build = spawnSync("npm", ["run", "build"], { cwd: root, stdio: "inherit", shell: process.platform === "win32" })
  if (build.status !== 0) {
    process.stderr.write("pack-manifest: npm run build failed\n")
    process.exit(1)
  }
  const text = readFileSync(manifest, "utf8")
  const pkg = JSON.parse(text)
  delete pkg.scripts.prepare
  writeFileSync(kept, text)
  writeFileSync(manifest, `${JSON.stringify(pkg, null, 2)}\n`)
} else if (step === "postpack") {
  restore()
} else {
  process.stderr.write(`pack-manifest: expected prepack or postpack, got ${step ?? "nothing"}\n`)
  process.exit(1)
}
