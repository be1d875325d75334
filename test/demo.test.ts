/**
 * The demo (`npm start`, examples/demo.ts) as a newcomer runs it: it exits 0, each scenario is named for what it
 * does, and the scenarios of debounce, one more run after the active one and a wait for the running copy show what
 * the manual says of them. Slow tier: the demo runs for real time (tens of seconds on a busy machine).
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { runProgram } from "./support/program.js"
import * as RedisTest from "./support/redis.js"

/** The checks the demo printed as `ok`, and those it printed as `FAIL`. */
const checks = (stdout: string) => ({
  ok: [...stdout.matchAll(/ check {3}ok {4}(.*)$/gm)].map((m) => m[1]!),
  failed: [...stdout.matchAll(/ check {3}FAIL {2}(.*)$/gm)].map((m) => m[1]!)
})

/** What every run of the demo must show, on Redis or on the memory store. */
const scenarios = (stdout: string, stderr: string) => {
  const { failed, ok } = checks(stdout)
  assert.deepStrictEqual(failed, [], stdout + stderr)
  // The first scenario keeps the first job: it is named for that, not for debounce.
  assert.include(stdout, "== 1. Enqueue once (throttle): the first job is kept: until_executing")
  assert.include(ok, "2 runs: the burst's first job (edit 1), then the one enqueued during its run")
  // debounce: { delay, maxWait }: the last job of a burst runs once; maxWait bounds a steady stream.
  assert.match(stdout, /== \d+\. Debounce: the LAST job of a burst runs, once: until_executing/)
  assert.include(ok, "a burst of 5 edits: the first enqueued, each later one replaced the waiting job")
  assert.include(ok, "one run, with the last enqueue's data (edit 5)")
  assert.isTrue(ok.some((text) => text.startsWith("it ran during the stream: maxWait bounded the window")), stdout)
  // until_and_while_executing with { client: "replace", server: "reschedule" }: one more run, the newest data.
  assert.include(ok, "2 runs: the active one, then one more with the newest data (change 4), never at once")
  // lockTimeout: the copies wait for the running one and run, one at a time.
  assert.include(ok, "all 3 ran, one at a time, and none was skipped")
  assert.match(stdout, /All \d+ invariants held\./)
}

describe("the demo (npm start)", () => {
  layer(RedisTest.layerServer, { excludeTestServices: true })((it) => {
    it.effect("on a Redis: every scenario's checks hold, the BullMQ one too, and it exits 0", () =>
      Effect.gen(function*() {
        const { source } = yield* RedisTest.TestRedis
        const { code, stderr, stdout } = yield* runProgram("examples/demo.ts", { REDIS_URL: source.url })
        assert.strictEqual(code, 0, stdout + stderr)
        scenarios(stdout, stderr)
        assert.include(stdout, "each feed: accepted when idle, accepted while it runs")
        assert.notInclude(stdout, "skipped (BullMQ needs a Redis server)")
      }), 240_000)
  })

  it.effect("without Redis (the memory store): the same scenarios hold, BullMQ's is skipped, and it exits 0", () =>
    Effect.gen(function*() {
      const { code, stderr, stdout } = yield* runProgram("examples/demo.ts", {
        REDIS_URL: "",
        REDIS_SERVER_BIN: "/nonexistent"
      })
      assert.strictEqual(code, 0, stdout + stderr)
      assert.include(stdout, "Redis: in-process memory store")
      scenarios(stdout, stderr)
    }), 240_000)
})
