/**
 * A holder entry a page read cut (`HolderPage.bytes`), read as far as it goes: both stores answer a cut entry through
 * this one reader, so they agree on what is left of it.
 *
 * @internal
 */
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { eventLog, type Holder, type LockEvent } from "./Store.js"

// The lead of an entry (lua/lib/prelude.lua), with no end: t, x and l always fit the smallest cut.
const lead = new RegExp(
  String.raw`^\{"t":(?<t>\d+),"x":(?<x>\d+),"l":(?<l>\d+)(?:,"f":(?<f>\d+))?(?:,"r":(?<r>\d+))?` +
    String.raw`(?:,"q":(?<q>"(?:[^"\\]|\\.)*"))?(?:,"i":(?<i>.*))?`,
  "s"
)

// One `"key":value` of an object whose value is a JSON scalar read whole (followed by `,` or `}`).
const scalar = /"((?:[^"\\]|\\.)*)":("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)(?=[,}])/y

/** The leading scalar fields of a cut JSON object (`{"type":"…","worker":"…","args":[…` gives type and worker). */
const leadingFields = (text: string): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  if (!text.startsWith("{")) return out
  scalar.lastIndex = 1
  for (;;) {
    const match = scalar.exec(text)
    if (match === null) return out
    out[JSON.parse(`"${match[1]!}"`) as string] = JSON.parse(match[2]!)
    if (text[scalar.lastIndex] !== ",") return out
    scalar.lastIndex++
  }
}

/** An entry's queue, stored as a JSON string literal: its name, or undefined when unreadable. @internal */
export const queueOf = (literal: string): string | undefined => {
  if (literal === "") return undefined
  try {
    const name: unknown = JSON.parse(literal)
    return typeof name === "string" ? name : undefined
  } catch {
    return undefined
  }
}

/** A holder from the groups of an entry's pattern (t, x, l, f, r, q) and its info as read. @internal */
export const holderOf = (
  jid: string,
  match: Readonly<Record<string, string | undefined>>,
  info: unknown
): Holder => {
  const queue = match.q === undefined ? undefined : queueOf(match.q)
  return {
    jid,
    lockedAt: Number(match.t),
    expiresAt: Number(match.x) > 0 ? Number(match.x) : undefined,
    leaseUntil: Number(match.l) > 0 ? Number(match.l) : undefined,
    fence: Number(match.f ?? 0),
    info,
    ...(queue === undefined ? {} : { queue }),
    ...(match.r === undefined ? {} : { revokedAt: Number(match.r) })
  }
}

/**
 * A holder from the first bytes of its entry (`head`) and the entry's whole length in bytes: the times, fence, queue
 * and revocation as far as they were read whole, and `info` holding the leading scalar fields of lockInfo. An entry
 * not in this library's shape is `foreign`, as cut.
 *
 * @internal
 */
export const cutHolder = (jid: string, head: string, length: number): Holder => {
  const match = lead.exec(head)?.groups
  if (match === undefined) {
    return {
      jid,
      lockedAt: 0,
      expiresAt: undefined,
      leaseUntil: undefined,
      fence: 0,
      info: undefined,
      foreign: head,
      truncated: length
    }
  }
  return { ...holderOf(jid, match, match.i === undefined ? undefined : leadingFields(match.i)), truncated: length }
}

/**
 * A text of an activity-log entry as `log_event` keeps it: over `eventLog.textBytes` UTF-8 bytes, cut at a character's
 * start and ended with "…", so both stores hold the same bytes.
 *
 * @internal
 */
export const eventTextCut = (text: string): string => {
  const bytes = Buffer.from(text)
  if (bytes.length <= eventLog.textBytes) return text
  let n = eventLog.textBytes
  // Back to a character's first byte (not a UTF-8 continuation byte).
  while (n > 0 && (bytes[n]! & 0xc0) === 0x80) n--
  return `${bytes.subarray(0, n).toString()}\u2026`
}

/**
 * An activity-log entry as `log_event` (lua/lib/prelude.lua) writes it: its fields in a fixed order, so both stores
 * hold the same bytes; its texts cut as `eventTextCut` cuts them.
 *
 * @internal
 */
export const eventText = (event: LockEvent): string =>
  `{"at":${event.at},"event":"${event.event}","jid":${JSON.stringify(eventTextCut(event.jid))},"phase":"${event.phase}"${
    event.holder === undefined ? "" : `,"holder":${JSON.stringify(eventTextCut(event.holder))}`
  }${event.count === undefined ? "" : `,"n":${event.count},"first":${event.firstAt ?? event.at}`}${
    event.who === undefined ? "" : `,"who":${JSON.stringify(eventTextCut(event.who))}`
  }}`

/**
 * A refusal folded into the log's newest entry, as `log_event` folds it: when `head` is a refusal of the same phase
 * naming the same holder, the entry that replaces it (counted, with the first one's time); else undefined.
 *
 * @internal
 */
export const foldRefusal = (head: string | undefined, event: LockEvent): string | undefined => {
  if (head === undefined || event.event !== "refused" || event.holder === undefined) return undefined
  const start = /^\{"at":(\d+),"event":"refused","jid":"/.exec(head)
  if (start === null) return undefined
  const counted = /,"n":(\d+),"first":(\d+)\}$/.exec(head)
  const body = counted === null ? head.slice(0, -1) : head.slice(0, head.length - counted[0].length)
  const tail = `,"phase":"${event.phase}","holder":${JSON.stringify(eventTextCut(event.holder))}`
  if (!body.endsWith(tail)) return undefined
  return eventText({
    ...event,
    count: (counted === null ? 1 : Number(counted[1])) + 1,
    firstAt: Number(counted === null ? start[1] : counted[2])
  })
}

const EventEntry = Schema.fromJsonString(Schema.Struct({
  at: Schema.Number,
  event: Schema.String,
  jid: Schema.String,
  phase: Schema.Literals(["queue", "run"]),
  holder: Schema.optional(Schema.String),
  n: Schema.optional(Schema.Number),
  first: Schema.optional(Schema.Number),
  who: Schema.optional(Schema.String)
}))

const decodeEvent = Schema.decodeUnknownOption(EventEntry)

/** An activity-log entry read back; undefined when it is not in the log's shape (someone else's write). @internal */
export const eventOf = (text: string): LockEvent | undefined =>
  Option.getOrUndefined(
    Option.map(decodeEvent(text), ({ first, n, ...event }): LockEvent =>
      n === undefined ? event : { ...event, count: n, firstAt: first ?? event.at })
  )
