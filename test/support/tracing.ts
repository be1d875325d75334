/**
 * A tracer that records every span it makes (name, kind, attributes, links, ids), for tests of what a recording
 * tracer sees. Span ids are unique across every recording tracer of the process, so a link made under one tracer
 * names a span another one recorded (a duplicate on one face, its holder on the other).
 */
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"

export interface Recorded {
  readonly name: string
  readonly kind: Tracer.SpanKind
  readonly attributes: Map<string, unknown>
  readonly links: Array<Tracer.SpanLink>
  readonly traceId: string
  readonly spanId: string
}

let made = 0

/** A tracer that keeps every span it makes. */
export const recording = () => {
  const spans: Array<Recorded> = []
  const tracer = Tracer.make({
    span: ({ annotations, kind, links, name, parent, startTime }) => {
      const attributes = new Map<string, unknown>()
      const kept: Array<Tracer.SpanLink> = [...links]
      const traceId = Option.isSome(parent) ? parent.value.traceId : (++made).toString(16).padStart(32, "0")
      const spanId = (++made).toString(16).padStart(16, "0")
      spans.push({ name, kind, attributes, links: kept, traceId, spanId })
      const span: Tracer.Span = {
        _tag: "Span",
        name,
        spanId,
        traceId,
        parent,
        annotations,
        status: { _tag: "Started", startTime },
        attributes,
        links: kept,
        sampled: true,
        kind,
        end: () => {},
        attribute: (key, value) => {
          attributes.set(key, value)
        },
        event: () => {},
        addLinks: (more) => {
          kept.push(...more)
        }
      }
      return span
    }
  })
  return { spans, tracer }
}
