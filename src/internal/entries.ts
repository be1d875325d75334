/**
 * A holder entry a page read cut (`HolderPage.bytes`), read as far as it goes: both stores answer a cut entry through
 * this one reader, so they agree on what is left of it.
 *
 * @internal
 */
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { Holder, LockEvent } from "./models.js"

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
 * An activity-log entry as `log_event` (lua/lib/prelude.lua) writes it: its fields in a fixed order, so both stores
 * hold the same bytes.
 *
 * @internal
 */
export const eventText = (event: LockEvent): string =>
  `{"at":${event.at},"event":"${event.event}","jid":${JSON.stringify(event.jid)},"phase":"${event.phase}"${
    event.holder === undefined ? "" : `,"holder":${JSON.stringify(event.holder)}`
  }${event.who === undefined ? "" : `,"who":${JSON.stringify(event.who)}`}}`

const EventEntry = Schema.parseJson(Schema.Struct({
  at: Schema.Number,
  event: Schema.String,
  jid: Schema.String,
  phase: Schema.Literal("queue", "run"),
  holder: Schema.optional(Schema.String),
  who: Schema.optional(Schema.String)
}))

const decodeEvent = Schema.decodeUnknownOption(EventEntry)

/** An activity-log entry read back; undefined when it is not in the log's shape (someone else's write). @internal */
export const eventOf = (text: string): LockEvent | undefined => Option.getOrUndefined(decodeEvent(text))
