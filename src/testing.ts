/**
 * For tests: a private `redis-server` per test (`RedisServer.start`, `RedisServer.acquire`) and a private Redis Cluster
 * (`RedisCluster.start`), on free loopback ports, stopped with their scope. Kept out of the main entry: it spawns
 * processes and reads `process.env`.
 *
 * @module effect-unique-jobs/testing
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 */
export * as RedisServer from "./testing/RedisServer.js"

/**
 * @since 0.1.0
 */
export * as RedisCluster from "./testing/RedisCluster.js"
