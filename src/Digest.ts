/**
 * The digest: what "the same job" means. Worker, queue and the lock arguments are hashed into one key,
 * exactly as sidekiq-unique-jobs v9 does for JSON-native arguments, so both libraries agree on a digest.
 *
 * @since 0.1.0
 */
import * as Crypto from "node:crypto"
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
  cause: Schema.optional(Schema.Defect())
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
  let canonical: string
  try {
    canonical = canonicalJson(selected, [], [])
  } catch (cause) {
    return cause instanceof NotJson
      ? new DigestError({ worker: input.worker, path: cause.path, reason: cause.reason })
      : new DigestError({ worker: input.worker, path: "lock_args", reason: "could not be read", cause })
  }
  // `JSON.stringify` of the pairs in key order (class < lock_args < queue), written out: the arguments are JSON text.
  const worker = options?.uniqueAcrossWorkers === true ? "" : `["class",${JSON.stringify(input.worker)}],`
  const queue = options?.uniqueAcrossQueues === true ? "" : `,["queue",${JSON.stringify(input.queue)}]`
  return `[${worker}["lock_args",${canonical}]${queue}]`
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
  oneShot !== undefined
    ? oneShot(algorithm === "legacy" ? "md5" : "sha3-256", text, "hex")
    : Crypto.createHash(algorithm === "legacy" ? "md5" : "sha3-256").update(text, "utf8").digest("hex")

// Node's one-shot hash (20.12 and later) costs about half of a Hash object's; older Nodes take the object.
const oneShot = (Crypto as { readonly hash?: (algorithm: string, data: string, encoding: "hex") => string }).hash

class NotJson {
  constructor(readonly path: string, readonly reason: string) {}
}

const isPlainObject = (u: object): boolean => {
  const proto = Object.getPrototypeOf(u)
  return proto === Object.prototype || proto === null
}

// A value JSON writes as itself: a string, a boolean, null or a finite number.
const isScalar = (value: unknown): boolean =>
  typeof value === "string" || typeof value === "boolean" || value === null ||
  (typeof value === "number" && Number.isFinite(value))

// A hole reads as undefined: not a scalar.
const scalarsOnly = (array: ReadonlyArray<unknown>): boolean => {
  for (let i = 0; i < array.length; i++) if (!isScalar(array[i])) return false
  return true
}

const isIndex = (key: string): boolean => /^(?:0|[1-9]\d*)$/.test(key) && Number(key) < 4_294_967_295

// Where a value sits, for the error only: built when one is thrown, not for every value read.
type Step = string | number

const pathOf = (steps: ReadonlyArray<Step>): string =>
  steps.reduce<string>((path, step) => typeof step === "number" ? `${path}[${step}]` : `${path}.${step}`, "lock_args")

// Sorts `keys` from `from` on, in place, in `sort()`'s order (UTF-16 code units, as `<` compares strings): a job's
// few keys by insertion, with none of the copies `sort()` makes (the digest is computed for every job).
const sortFrom = (keys: Array<string>, from: number): void => {
  if (keys.length - from > 16) {
    const sorted = keys.slice(from).sort()
    for (let i = 0; i < sorted.length; i++) keys[from + i] = sorted[i]!
    return
  }
  for (let i = from + 1; i < keys.length; i++) {
    const key = keys[i]!
    let j = i - 1
    while (j >= from && keys[j]! > key) {
      keys[j + 1] = keys[j]!
      j--
    }
    keys[j + 1] = key
  }
}

/**
 * `value` as JSON with object keys sorted (what `JSON.stringify` gives of a copy with sorted keys), or a `NotJson`
 * thrown at the first value JSON would alter. Written straight to text: no copy of the arguments is made, and a key
 * like "__proto__" is text like any other.
 */
const canonicalJson = (value: unknown, steps: Array<Step>, open: Array<object>): string => {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value)
    case "boolean":
      return value ? "true" : "false"
    case "number":
      if (!Number.isFinite(value)) throw new NotJson(pathOf(steps), `is ${value}, which JSON cannot carry`)
      return String(value)
    case "bigint":
      throw new NotJson(pathOf(steps), "is a BigInt; pass it as a string")
    case "undefined":
      throw new NotJson(pathOf(steps), "is undefined; JSON would drop it or turn it into null")
    case "function":
      throw new NotJson(pathOf(steps), "is a function")
    case "symbol":
      throw new NotJson(pathOf(steps), "is a symbol")
  }
  if (value === null) return "null"
  const object = value as object
  // The objects on the way down (a few): the ones a cycle could come back to.
  if (open.includes(object)) throw new NotJson(pathOf(steps), "refers back to itself (a cycle)")
  let out: string
  if (Array.isArray(object)) {
    // Only JSON's own scalars (the common case: ids, numbers): JSON.stringify writes them as the loop below would
    // (unless the array has a toJSON of its own, which it would call).
    if (scalarsOnly(object) && !("toJSON" in object)) return JSON.stringify(object)
    open.push(object)
    const items: Array<string> = new Array(object.length)
    const depth = steps.push(0) - 1
    for (let i = 0; i < object.length; i++) {
      steps[depth] = i
      const item: unknown = object[i]
      // A hole in the array is null in JSON.
      items[i] = item === undefined && !(i in object) ? "null" : canonicalJson(item, steps, open)
    }
    steps.pop()
    out = `[${items.join(",")}]`
  } else if (isPlainObject(object)) {
    open.push(object)
    // JSON.stringify of a sorted copy, as earlier versions hashed, lists array-index keys ("0", "9", "10") first in
    // numeric order, where Object.keys already has them; the other keys sorted. The text keeps that order.
    const keys = Object.keys(object)
    let indices = 0
    while (indices < keys.length && isIndex(keys[indices]!)) indices++
    sortFrom(keys, indices)
    const entries: Array<string> = new Array(keys.length)
    const depth = steps.push("") - 1
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i]!
      steps[depth] = key
      entries[i] = `${JSON.stringify(key)}:${canonicalJson((object as Record<string, unknown>)[key], steps, open)}`
    }
    steps.pop()
    out = `{${entries.join(",")}}`
  } else {
    const name = (object as { constructor?: { name?: string } }).constructor?.name ?? "object"
    throw new NotJson(pathOf(steps), `is a ${name}, not a plain object; convert it to JSON values first`)
  }
  open.pop()
  return out
}
