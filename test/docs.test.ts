/**
 * The docs check (scripts/check-docs.mjs, CI's check:docs) fails a page whose example does not type-check against the
 * package, or whose runnable example fails, naming the page and line: the check of every page is not one that
 * cannot fail.
 */
import { spawnSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import { assert, describe, it } from "vitest"

const root = fileURLToPath(new URL("../", import.meta.url))
const check = (page: string) =>
  spawnSync(process.execPath, ["scripts/check-docs.mjs", "--no-build", "--pages", page], { cwd: root, encoding: "utf8" })

describe("check:docs", () => {
  it("a page's example that does not type-check fails it, named by page and line", () => {
    const result = check("test/fixtures/docs-wrong-type.md")
    assert.strictEqual(result.status, 1, result.stdout)
    assert.match(result.stderr, /test\/fixtures\/docs-wrong-type\.md:6:\d+: error TS\d+/)
    assert.include(result.stderr, "until_executd")
  })

  it("a runnable example that fails when run fails it, with its output; it ran against a private Redis", () => {
    const result = check("test/fixtures/docs-fails-at-run.md")
    assert.strictEqual(result.status, 1, result.stdout)
    assert.include(result.stderr, "test/fixtures/docs-fails-at-run.md:5: the example exited 1")
    // It took its lock before failing: Redis answered.
    assert.include(result.stderr, "this example fails on purpose")
    assert.notInclude(result.stderr, "expected Enqueued")
  })
})
