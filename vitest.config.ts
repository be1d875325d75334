import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    setupFiles: ["test/support/setup.ts"],
    // Generous: these only catch hangs. Tests count a fixed amount of work, so a busy machine (or another copy of
    // the suite beside this one) makes them slower, never red; a tight limit would bring the speed back in.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Each file starts its own redis-server; two cores, so keep the pool small.
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    reporters: ["default"]
  }
})
