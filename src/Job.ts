/**
 * The job envelope: what a queue carries and the lock middleware reads.
 *
 * @since 0.1.0
 */
import { randomBytes } from "node:crypto"
import * as Schema from "effect/Schema"

/**
 * A job. `lockDigest` is written by the client middleware at enqueue and trusted by the server middleware;
 * `at` (epoch ms) marks a scheduled job; `retryCount` counts the queue's retries of the same jid.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Job = Schema.Struct({
  jid: Schema.NonEmptyString,
  worker: Schema.NonEmptyString,
  queue: Schema.NonEmptyString,
  args: Schema.Array(Schema.Unknown),
  at: Schema.optional(Schema.Number),
  lockDigest: Schema.optional(Schema.String),
  retryCount: Schema.optional(Schema.Number)
})

/**
 * @since 0.1.0
 * @category models
 */
export interface Job extends Schema.Schema.Type<typeof Job> {}

// Random bytes for 256 jids at a time: one call to the system's generator instead of one per job.
let jidPool = Buffer.alloc(0)
let jidOffset = 0

/**
 * A new job id: 24 hex characters, as Sidekiq makes them.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeJid = (): string => {
  if (jidOffset + 12 > jidPool.length) {
    jidPool = randomBytes(12 * 256)
    jidOffset = 0
  }
  jidOffset += 12
  return jidPool.toString("hex", jidOffset - 12, jidOffset)
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = (fields: {
  readonly worker: string
  readonly queue?: string | undefined
  readonly args: ReadonlyArray<unknown>
  readonly jid?: string | undefined
  readonly at?: number | undefined
}): Job => ({
  jid: fields.jid ?? makeJid(),
  worker: fields.worker,
  queue: fields.queue ?? "default",
  args: fields.args,
  ...(fields.at === undefined ? {} : { at: fields.at })
})

/**
 * Decodes a job from JSON-like input (a queue's payload), failing with a `SchemaError` that names the field.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decode = Schema.decodeUnknownEffect(Job)
