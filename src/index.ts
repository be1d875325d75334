/**
 * effect-unique-jobs: unique-job locks for any job queue, on Effect and Redis.
 *
 * @module effect-unique-jobs
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 */
export * as Defaults from "./Defaults.js"

/**
 * @since 0.1.0
 */
export * as Digest from "./Digest.js"

/**
 * @since 0.1.0
 */
export * as Errors from "./Errors.js"

/**
 * @since 0.1.0
 */
export * as History from "./History.js"

/**
 * @since 0.1.0
 */
export * as Job from "./Job.js"

/**
 * @since 0.1.0
 */
export * as JobQueue from "./JobQueue.js"

/**
 * @since 0.1.0
 */
export * as Lock from "./Lock.js"

/**
 * @since 0.1.0
 */
export * as Locks from "./Locks.js"

/**
 * @since 0.1.0
 */
export * as LockType from "./LockType.js"

/**
 * @since 0.1.0
 */
export * as MemoryQueue from "./adapters/MemoryQueue.js"

/**
 * @since 0.1.0
 */
export * as Metrics from "./Metrics.js"

/**
 * @since 0.1.0
 */
export * as Middleware from "./Middleware.js"

/**
 * @since 0.1.0
 */
export * as Options from "./Options.js"

/**
 * @since 0.1.0
 */
export * as Reaper from "./Reaper.js"

/**
 * @since 0.1.0
 */
export * as Redis from "./Redis.js"

/**
 * @since 0.1.0
 */
export * as Strategy from "./Strategy.js"

/**
 * @since 0.1.0
 */
export * as UniqueJob from "./UniqueJob.js"

/**
 * @since 0.1.0
 */
export * as Web from "./Web.js"
