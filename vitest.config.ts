import { defineConfig } from "vitest/config"

/**
 * The test tiers (issue 36). `npm test` runs the fast tier: every file not named below, on one private Redis, with no
 * browser, no cluster and no second ioredis. The other tiers are fixed amounts of real time or need more of the
 * machine; `npm run test:full` runs them all, and each runs alone (`npm run test:<tier>`, or
 * `UNIQUE_JOBS_TIER=<tier> npx vitest run`). A file named on the command line runs whatever its tier.
 */
export const tiers = {
  // Real-time work at full size: faults and partitions, leases and the keeper at scale, the multi-process races, the
  // long properties, the command as it ships (a build, then a process per call).
  slow: [
    "test/cli.process.test.ts",
    "test/debounce.properties.test.ts",
    "test/demo.test.ts",
    "test/connection.test.ts",
    "test/faults.test.ts",
    "test/handoff.faults.test.ts",
    "test/keeper.test.ts",
    "test/lease.test.ts",
    "test/lifecycle.properties.test.ts",
    "test/multiprocess.test.ts",
    "test/persistedqueue.race.test.ts",
    "test/properties.redis.test.ts",
    "test/reaper.properties.test.ts",
    "test/release.faults.test.ts",
    "test/release.properties.test.ts",
    "test/store.properties.test.ts"
  ],
  // Debian's Chromium driven by playwright-core.
  browser: ["test/web.browser.test.ts"],
  // A private Redis Cluster (redis-server --cluster-enabled yes, made with redis-cli).
  cluster: ["test/cluster*.test.ts", "test/layout.cluster.test.ts"]
} as const

const others: ReadonlyArray<string> = Object.values(tiers).flat()

/**
 * The store-level, reaper and admin suites again on a private Redis Cluster, the store in its cluster layout
 * (UNIQUE_JOBS_TEST_CLUSTER=1): a second project of the cluster, full and all tiers, in the same pool.
 */
export const clusterStores = [
  "test/conformance.test.ts",
  "test/Middleware.test.ts",
  "test/store.properties.test.ts",
  "test/reaper.test.ts",
  "test/reaper.properties.test.ts",
  "test/store.admin.test.ts",
  "test/locks.test.ts",
  "test/admin.properties.test.ts",
  "test/bullmq.test.ts"
]

// "full": every tier but the fast one, in one pool (the browser's walk beside the slow files); "all": every file.
const chosen: Record<string, ReadonlyArray<string>> = {
  ...tiers,
  full: others,
  all: ["test/**/*.test.ts"],
  "cluster-stores": []
}
const tier = process.env.UNIQUE_JOBS_TIER ?? "fast"
if (tier !== "fast" && chosen[tier] === undefined) {
  throw new Error(`UNIQUE_JOBS_TIER=${tier}: expected one of fast, ${Object.keys(chosen).join(", ")}`)
}
// Files named on the command line (the mutation runs, test:ioredis6, a contributor's one file) run whatever their tier.
const named = process.argv.some((arg) => /\.test\.ts$/.test(arg))
const withClusterStores = !named && ["cluster", "full", "all", "cluster-stores"].includes(tier)
const files = tier === "fast" || named ? ["test/**/*.test.ts"] : [...chosen[tier]!]

export default defineConfig({
  test: {
    setupFiles: ["test/support/setup.ts"],
    // Generous: these only catch hangs. Tests count a fixed amount of work, so a busy machine (or another copy of
    // the suite beside this one) makes them slower, never red; a tight limit would bring the speed back in.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Each file starts its own redis-server; two cores, so keep the pool small. Many files wait on real time (a
    // stalled Redis' timeout, leases, partitions, a browser), so more files than cores share them: one waiting leaves
    // the cores to others (the fast tier took 201 s two at a time on 2 cores, 142 s three at a time).
    // Vitest 5 sets the pool's size with `maxWorkers` (no `poolOptions`); files run in parallel up to it.
    pool: "forks",
    maxWorkers: Number(process.env.UNIQUE_JOBS_TEST_FORKS ?? (tier === "fast" ? 3 : 4)),
    fileParallelism: true,
    reporters: ["default"],
    projects: [
      ...(files.length === 0 ? [] : [{
        extends: true as const,
        test: {
          name: "redis",
          include: files,
          exclude: ["**/node_modules/**", ...(tier === "fast" && !named ? others : [])]
        }
      }]),
      ...(withClusterStores
        ? [{
          extends: true as const,
          test: { name: "cluster-stores", include: clusterStores, env: { UNIQUE_JOBS_TEST_CLUSTER: "1" } }
        }]
        : [])
    ]
  }
})
