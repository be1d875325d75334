/**
 * BullMQ job options checked against the locks: the ones under which BullMQ may store nothing under the lock's jid,
 * or store it under another id, so that the lock would be held for a job that never runs.
 *
 * @internal
 */
import { describeValue, isRecord, maxDurationMs } from "../../options/Decoding.js"

/** @internal */
export interface Issue {
  readonly field: string
  readonly reason: string
}

/**
 * Where the options come from: `add` (the caller's `opts`, whose `jobId` becomes the lock's jid) or `defaults` (an
 * adapter's `jobOptions`, a queue's `defaultJobOptions`: every job gets its own id, so a `jobId` there is refused).
 *
 * @internal
 */
export type Source = "add" | "defaults"

/**
 * The issues of `opts` (named `<field>.<option>`), none when they work with the locks.
 *
 * @internal
 */
export const issues = (opts: unknown, field: string, source: Source): Array<Issue> => {
  if (opts === undefined) return []
  if (!isRecord(opts)) {
    return [{ field, reason: `expected BullMQ job options (an object), got ${describeValue(opts)}` }]
  }
  const found: Array<Issue> = []
  const refuse = (option: string, reason: string) => found.push({ field: `${field}.${option}`, reason })
  if (opts.deduplication !== undefined) {
    refuse(
      "deduplication",
      "BullMQ's deduplication answers an add with another job, under another id, so the lock would be held for a " +
        "job that never runs; the lock already keeps the job unique: leave deduplication out (lockTtl and " +
        "onConflict say how long and what a duplicate does)"
    )
  }
  if (Object.hasOwn(opts, "debounce")) {
    refuse(
      "debounce",
      "BullMQ removed debounce (it was deduplication): give the worker's options debounce: { delay, maxWait } instead"
    )
  }
  if (opts.repeat !== undefined) {
    refuse(
      "repeat",
      "each repetition runs under an id of its own, which no lock holds: make repeating jobs with " +
        "queue.upsertJobScheduler, and add each run through the lock"
    )
  }
  if (Object.hasOwn(opts, "jobId")) {
    const jobId = opts.jobId
    if (source === "defaults") {
      refuse("jobId", "every job gets an id of its own (the lock's jid): pass jobId to add, not as a default")
    } else if (jobId !== undefined && (typeof jobId !== "string" || jobId.length === 0)) {
      refuse(
        "jobId",
        `expected a non-empty string (the lock's jid), got ${describeValue(jobId)}; leave it out for a new one`
      )
    }
  }
  const delay = opts.delay
  const wholeDelay = typeof delay === "number" && Number.isInteger(delay) && delay >= 0 && delay <= maxDurationMs
  if (delay !== undefined && !wholeDelay) {
    refuse(
      "delay",
      `expected whole milliseconds from 0 to ${maxDurationMs}, got ${describeValue(delay)}` +
        (typeof delay === "number" && Number.isFinite(delay) && delay > 0 ? ` (use ${Math.round(delay)})` : "")
    )
  }
  return found
}
