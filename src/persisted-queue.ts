/**
 * effect-unique-jobs/persisted-queue: unique jobs on Effect's own queue, `PersistedQueue` (`effect/persistence`), on
 * its memory, Redis or SQL store. Only this entry imports `effect/persistence` and `effect/sql`.
 *
 * @module effect-unique-jobs/persisted-queue
 * @since 2.0.0
 */

/**
 * @since 2.0.0
 */
export * as UniquePersistedQueue from "./adapters/PersistedQueue.js"
