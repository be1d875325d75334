/**
 * Where a lock's keys live. Standalone Redis keeps the spec's names (`<lock>:LOCKED`, `<prefix>:digests`,
 * `<prefix>:fence`). Redis Cluster refuses a script whose keys are in more than one hash slot, so there the index and
 * the fencing counter are split into shards, and every key of a lock carries its shard's hash tag right after the
 * prefix: `<prefix>:{<tag>}:<hex>:LOCKED`, `<prefix>:{<tag>}:digests`, `<prefix>:{<tag>}:fence`. A lock's queue and run
 * phases (`<hex>` and `<hex>:RUN`) share a shard, so the handoff stays one script call. Index members stay the lock
 * names in either layout, so digests read the same everywhere.
 *
 * @internal
 */
import { randomBytes } from "node:crypto"

/** A lock's prefix and name (`<prefix>:<hex>` or `<prefix>:<hex>:RUN`), as `models.LockKey` holds them. */
interface LockKey {
  readonly prefix: string
  readonly name: string
}

/**
 * @internal
 */
export interface Keys {
  readonly locked: string
  readonly index: string
  readonly fence: string
  /**
   * The digest's activity log (`lockEvents`): one list for both phases, `<digest>:EVENTS`, in the lock's shard (the
   * queue and run locks of a digest share it), so a script that writes it stays in one slot.
   */
  readonly events: string
  /**
   * The epochs of this lock's shard that a layout reset retired (`<prefix>:resets`, `<prefix>:{<tag>}:resets`), in the
   * lock's slot: a lock script refuses a process that still sends one (acquire's layout_current).
   */
  readonly resets: string
  /**
   * The jids a debounced enqueue took the place of (`<digest>:REPLACED`, a set kept an hour), in the lock's slot: a
   * superseded job that lands in its queue late and starts after the window's own job is skipped, not run.
   */
  readonly replaced: string
}

/**
 * @internal
 */
export interface Layout {
  /** 1 for standalone. */
  readonly shards: number
  readonly cluster: boolean
  readonly shardOf: (lock: LockKey) => number
  readonly keysOf: (lock: LockKey) => Keys
  /** The index of `prefix`'s `shard`. */
  readonly index: (prefix: string, shard: number) => string
  /** The retired epochs of `prefix`'s `shard` (`Keys.resets`). */
  readonly resets: (prefix: string, shard: number) => string
}

/** The spec's names, one index and one counter per prefix. @internal */
export const standalone: Layout = {
  shards: 1,
  cluster: false,
  shardOf: () => 0,
  keysOf: (lock) => ({
    locked: `${lock.name}:LOCKED`,
    index: `${lock.prefix}:digests`,
    fence: `${lock.prefix}:fence`,
    events: `${lock.name.endsWith(":RUN") ? lock.name.slice(0, -4) : lock.name}:EVENTS`,
    resets: `${lock.prefix}:resets`,
    replaced: `${lock.name.endsWith(":RUN") ? lock.name.slice(0, -4) : lock.name}:REPLACED`
  }),
  index: (prefix) => `${prefix}:digests`,
  resets: (prefix) => `${prefix}:resets`
}

/** The most shards a cluster layout takes: a scan cursor carries the shard beside ZSCAN's own cursor. @internal */
export const maxShards = 1024

/**
 * The default: 24 shards, their slots evenly spaced, split evenly over masters that split the slots evenly: 8 each on 3
 * masters, 6 on 4, 4 on 6. @internal
 */
export const defaultShards = 24

const slots = 16384

// CRC16/XMODEM, the checksum Redis Cluster maps keys to slots with (polynomial 0x1021, initial value 0).
const table = (() => {
  const out = new Uint16Array(256)
  for (let byte = 0; byte < 256; byte++) {
    let crc = byte << 8
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
    out[byte] = crc
  }
  return out
})()

/**
 * The hash slot of a key as Redis Cluster computes it: of the text between the first `{` and the next `}` when that is
 * not empty, else of the whole key (UTF-8 bytes).
 *
 * @internal
 */
export const slotOf = (key: string): number => {
  const open = key.indexOf("{")
  let hashed = key
  if (open >= 0) {
    const close = key.indexOf("}", open + 1)
    if (close > open + 1) hashed = key.slice(open + 1, close)
  }
  let crc = 0
  for (const byte of Buffer.from(hashed, "utf8")) crc = ((crc << 8) & 0xffff) ^ table[((crc >> 8) ^ byte) & 0xff]!
  return crc % slots
}

/**
 * Shard i's tag: the first `<i>-<n>` whose slot falls in the i-th of `shards` equal runs of slots. Clusters hand out
 * slots in runs (`redis-cli --cluster create` gives each master one), so evenly spaced slots spread the shards over
 * every master, whatever the prefix.
 *
 * @internal
 */
export const tagsOf = (shards: number): ReadonlyArray<string> => {
  const tags: Array<string> = []
  for (let shard = 0; shard < shards; shard++) {
    const from = Math.floor((shard * slots) / shards)
    const to = Math.floor(((shard + 1) * slots) / shards)
    for (let n = 0; ; n++) {
      const tag = `${shard}-${n}`
      const slot = slotOf(`{${tag}}`)
      if (slot >= from && slot < to) {
        tags.push(tag)
        break
      }
    }
  }
  return tags
}

// FNV-1a over the lock's name less its prefix and `:RUN`: both phases of a digest land in one shard.
const hashOf = (text: string): number => {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193)
  return hash >>> 0
}

const restOf = (lock: LockKey): string =>
  lock.name.startsWith(`${lock.prefix}:`) ? lock.name.slice(lock.prefix.length + 1) : lock.name

const baseOf = (lock: LockKey): string => {
  const rest = restOf(lock)
  return rest.endsWith(":RUN") ? rest.slice(0, -4) : rest
}

const made = new Map<number, Layout>()

/** The cluster layout over `shards` shards (1 to `maxShards`), made once per shard count. @internal */
export const cluster = (shards: number = defaultShards): Layout => {
  let layout = made.get(shards)
  if (layout === undefined) made.set(shards, layout = makeCluster(shards))
  return layout
}

const makeCluster = (shards: number): Layout => {
  const tags = tagsOf(shards)
  const shardOf = (lock: LockKey) => hashOf(baseOf(lock)) % shards
  return {
    shards,
    cluster: true,
    shardOf,
    keysOf: (lock) => {
      const tagged = `${lock.prefix}:{${tags[shardOf(lock)]}}`
      return {
        locked: `${tagged}:${restOf(lock)}:LOCKED`,
        index: `${tagged}:digests`,
        fence: `${tagged}:fence`,
        events: `${tagged}:${baseOf(lock)}:EVENTS`,
        resets: `${tagged}:resets`,
        replaced: `${tagged}:${baseOf(lock)}:REPLACED`
      }
    },
    index: (prefix, shard) => `${prefix}:{${tags[shard]}}:digests`,
    resets: (prefix, shard) => `${prefix}:{${tags[shard]}}:resets`
  }
}

/**
 * A scan position over every shard: ZSCAN's cursor times the shard count plus the shard, as one decimal number; "0"
 * starts at the first shard and ends the last, and with one shard it is ZSCAN's cursor unchanged.
 *
 * @internal
 */
export const scanCursor = {
  encode: (layout: Pick<Layout, "shards">, shard: number, cursor: string): string =>
    (BigInt(cursor) * BigInt(layout.shards) + BigInt(shard)).toString(),
  decode: (layout: Pick<Layout, "shards">, text: string): { readonly shard: number; readonly cursor: string } => {
    const n = /^\d+$/.test(text) ? BigInt(text) : 0n
    const shards = BigInt(layout.shards)
    return { shard: Number(n % shards), cursor: (n / shards).toString() }
  }
}

/**
 * A reap position over every shard: the shard times 2^32 plus the rank in its index; with one shard, the rank.
 *
 * @internal
 */
export const reapStart = {
  encode: (shard: number, rank: number): number => shard * 2 ** 32 + rank,
  decode: (start: number): { readonly shard: number; readonly rank: number } => ({
    shard: Math.floor(start / 2 ** 32),
    rank: start % 2 ** 32
  })
}

/**
 * The key that records where a prefix's keys live: `<prefix>:layout`, a string no lock, index or counter of any
 * prefix is named (a lock's keys end in `:LOCKED`, and a digest is hexadecimal). It is never in an index, so the
 * admin API, the CLI and the reaper never list, reap or delete it.
 *
 * @internal
 */
export const recordKey = (prefix: string): string => `${prefix}:layout`

/**
 * A layout as Redis records it, with the epoch of that recording: a random name written with the record, so that a
 * layout recorded again after a reset (even the same one) is another epoch, and a process that read the old one is
 * refused (`resets`). A record written before epochs has the epoch "". @internal
 */
export interface Recorded {
  readonly layout: Layout
  readonly epoch: string
}

/** A new epoch, for a record about to be written. @internal */
export const newEpoch = (): string => randomBytes(8).toString("hex")

/**
 * What `recordKey` holds: `{"layout":"standalone","epoch":"<hex>"}` or `{"layout":"cluster","shards":24,"epoch":"<hex>"}`
 * (without `epoch` when it is "", as records were written before epochs). @internal
 */
export const encode = (layout: Layout, epoch: string): string =>
  JSON.stringify({
    layout: layout.cluster ? "cluster" : "standalone",
    ...(layout.cluster ? { shards: layout.shards } : {}),
    ...(epoch === "" ? {} : { epoch })
  })

/** A recorded layout read back; undefined when the text is not one `encode` writes (someone else's key). @internal */
export const decodeRecord = (text: string): Recorded | undefined => {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return undefined
  }
  if (typeof value !== "object" || value === null) return undefined
  const { epoch = "", layout, shards } = value as {
    readonly layout?: unknown
    readonly shards?: unknown
    readonly epoch?: unknown
  }
  if (typeof epoch !== "string" || !/^[0-9a-f]{0,64}$/.test(epoch)) return undefined
  if (layout === "standalone" && shards === undefined) return { layout: standalone, epoch }
  // A cluster of any shard count a store can be configured with, one shard included (Redis.layerCluster's shards).
  return layout === "cluster" && typeof shards === "number" && Number.isSafeInteger(shards) && shards >= 1 &&
      shards <= maxShards
    ? { layout: cluster(shards), epoch }
    : undefined
}

/** A recorded layout read back, its epoch aside. @internal */
export const decode = (text: string): Layout | undefined => decodeRecord(text)?.layout

/** Whether two layouts put every key in the same place. @internal */
export const same = (a: Layout, b: Layout): boolean => a.cluster === b.cluster && a.shards === b.shards

/** A layout in words, as errors and the CLI name it. @internal */
export const describe = (layout: Layout): string =>
  layout.cluster ? `Redis Cluster with ${layout.shards} shard${layout.shards === 1 ? "" : "s"}` : "one Redis (standalone)"
