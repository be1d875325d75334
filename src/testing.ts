/**
 * For tests: a private `redis-server` per test (`RedisServer.start`, `RedisServer.acquire`), on a free loopback
 * port, stopped with its scope. Kept out of the main entry: it spawns processes and reads `process.env`.
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 */
export * as RedisServer from "./RedisServer.js"
