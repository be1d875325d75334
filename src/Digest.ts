/**
 * The digest: what "the same job" means. Worker, queue and the lock arguments are hashed into one key,
 * exactly as sidekiq-unique-jobs v9 does for JSON-native arguments, so both libraries agree on a digest.
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

/**
 * The digest could not be computed: an argument JSON cannot carry faithfully, or a `lockArgs` function that threw.
 *
 * @since 0.1.0
 * @category errors
 */
export class DigestError extends Schema.TaggedError<DigestError>("effect-unique-jobs/DigestError")("DigestError", {
  worker: Schema.String,
  path: Schema.String,
  reason: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {
  override get message(): string {
    return `Cannot compute the lock digest of ${this.worker}: ${this.path} ${this.reason}. ` +
      "Pass only JSON values (strings, finite numbers, booleans, null, arrays, plain objects), " +
      "or select the values that identify the job with `lockArgs`."
  }
}

/**
 * `legacy` is MD5 (the gem's default); `modern` is SHA3-256. They give different digests: pick one and keep it.
 *
 * @since 0.1.0
 * @category models
 */
export type Algorithm = "legacy" | "modern"

/**
 * What identifies a job.
 *
 * @since 0.1.0
 * @category models
 */
export interface Input {
  readonly worker: string
  readonly queue: string
  readonly args: ReadonlyArray<unknown>
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Selects the arguments that count for uniqueness (the gem's `lock_args_method`). */
  readonly lockArgs?: ((args: ReadonlyArray<unknown>) => unknown) | undefined
  /** Leave the queue out, so the same arguments collide on every queue. */
  readonly uniqueAcrossQueues?: boolean | undefined
  /** Leave the worker out, so different workers with the same arguments collide. */
  readonly uniqueAcrossWorkers?: boolean | undefined
  readonly algorithm?: Algorithm | undefined
  /** The key prefix, `uniquejobs` by default. */
  readonly prefix?: string | undefined
}

/**
 * @since 0.1.0
 * @category constants
 */
export const defaultPrefix = "uniquejobs"

/**
 * The text that is hashed: JSON of the sorted `[key, value]` pairs of `{ class, lock_args, queue }`, with object
 * keys inside the arguments sorted. Exposed so users can check a digest against the gem's.
 *
 * @since 0.1.0
 * @category constructors
 */
export const hashedText = (input: Input, options?: Options): Effect.Effect<string, DigestError> =>
  Effect.suspend(() => {
    const text = textOf(input, options)
    return typeof text === "string" ? Effect.succeed(text) : Effect.fail(text)
  })

// One synchronous step, the error as a value: the digest is computed at every enqueue (and at every perform of a job
// that did not carry it), and each Effect step costs more than the hash.
const textOf = (input: Input, options: Options | undefined): string | DigestError => {
  let selected: unknown = input.args
  if (options?.lockArgs !== undefined) {
    try {
      selected = options.lockArgs(input.args)
    } catch (cause) {
      return new DigestError({ worker: input.worker, path: "lockArgs", reason: "threw", cause })
    }
  }
  let canonical: unknown
  try {
    canonical = canonicalize(selected, "lock_args", new Set())
  } catch (cause) {
    return cause instanceof NotJson
      ? new DigestError({ worker: input.worker, path: cause.path, reason: cause.reason })
      : new DigestError({ worker: input.worker, path: "lock_args", reason: "could not be read", cause })
  }
  // Pairs already in key order: class < lock_args < queue.
  const pairs: Array<[string, unknown]> = []
  if (options?.uniqueAcrossWorkers !== true) pairs.push(["class", input.worker])
  pairs.push(["lock_args", canonical])
  if (options?.uniqueAcrossQueues !== true) pairs.push(["queue", input.queue])
  return JSON.stringify(pairs)
}

/**
 * The digest, computed at once: the key, or the `DigestError` as a value. For hot paths that cannot afford an
 * Effect step of their own.
 *
 * @internal
 */
export const compute = (input: Input, options?: Options): string | DigestError => {
  const text = textOf(input, options)
  return typeof text === "string"
    ? `${options?.prefix ?? defaultPrefix}:${hash(text, options?.algorithm ?? "legacy")}`
    : text
}

/**
 * Computes `<prefix>:<hex>` for a job.
 *
 * @example
 * ```ts
 * import { Digest } from "effect-unique-jobs"
 * // "uniquejobs:ace64a5ce1899f22b3c3cb97985a733d"
 * Digest.make({ worker: "ChargeCustomerJob", queue: "default", args: [1] })
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (input: Input, options?: Options): Effect.Effect<string, DigestError> =>
  Effect.suspend(() => {
    const digest = compute(input, options)
    return typeof digest === "string" ? Effect.succeed(digest) : Effect.fail(digest)
  })

/**
 * @since 0.1.0
 * @category utils
 */
export const hash = (text: string, algorithm: Algorithm): string =>
  createHash(algorithm === "legacy" ? "md5" : "sha3-256").update(text, "utf8").digest("hex")

class NotJson {
  constructor(readonly path: string, readonly reason: string) {}
}

const isPlainObject = (u: object): boolean => {
  const proto = Object.getPrototypeOf(u)
  return proto === Object.prototype || proto === null
}

/** A copy of `value` with object keys sorted, or a `NotJson` thrown at the first value JSON would alter. */
const canonicalize = (value: unknown, path: string, seen: Set<object>): unknown => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return value
    case "number":
      if (!Number.isFinite(value)) throw new NotJson(path, `is ${value}, which JSON cannot carry`)
      return value
    case "bigint":
      throw new NotJson(path, "is a BigInt; pass it as a string")
    case "undefined":
      throw new NotJson(path, "is undefined; JSON would drop it or turn it into null")
    case "function":
      throw new NotJson(path, "is a function")
    case "symbol":
      throw new NotJson(path, "is a symbol")
  }
  if (value === null) return null
  const object = value as object
  if (seen.has(object)) throw new NotJson(path, "refers back to itself (a cycle)")
  seen.add(object)
  let out: unknown
  if (Array.isArray(object)) {
    out = object.map((item, i) => canonicalize(item, `${path}[${i}]`, seen))
  } else if (isPlainObject(object)) {
    // Null prototype and defineProperty: assigning "__proto__" (an own key of JSON.parse's output) would set the
    // prototype and drop the key from the digest, so `{"__proto__":{...}}` would collide with `{}`.
    const sorted: Record<string, unknown> = Object.create(null)
    for (const key of Object.keys(object).sort()) {
      Object.defineProperty(sorted, key, {
        value: canonicalize((object as Record<string, unknown>)[key], `${path}.${key}`, seen),
        enumerable: true
      })
    }
    out = sorted
  } else {
    const name = (object as { constructor?: { name?: string } }).constructor?.name ?? "object"
    throw new NotJson(path, `is a ${name}, not a plain object; convert it to JSON values first`)
  }
  seen.delete(object)
  return out
}
