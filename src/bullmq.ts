/**
 * effect-unique-jobs/bullmq: the BullMQ adapter (`BullMQ`, for Effect) and its Promise face (`UniqueQueue`).
 * `bullmq` is an optional peer dependency: only this entry imports it.
 *
 * @module effect-unique-jobs/bullmq
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 */
export * as BullMQ from "./adapters/BullMQ.js"

/**
 * @since 0.1.0
 */
export * as UniqueQueue from "./adapters/UniqueQueue.js"
