/**
 * Spans for the lock steps and the admin calls, made only when a tracer records them: Effect's built-in tracer
 * exports to no one, and a span costs more Node CPU than the Redis call it wraps (bench/ measures both).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Tracer from "effect/Tracer"

/** The tracer a program has when none was installed (`Layer.setTracer`, OpenTelemetry): it records none. @internal */
export const builtInTracer = Effect.runSync(Effect.tracer)

/** What every Redis call's span says of the call (OpenTelemetry's database conventions). @internal */
export const redisAttributes = (script: string) => ({
  "db.system.name": "redis",
  "db.operation.name": "EVALSHA",
  "db.stored_procedure.name": script
})

/**
 * `f` in a client span named `name`, with the span, when a tracer records it; else `f(undefined)`, in the same
 * fiber, with no span made.
 *
 * @internal
 */
export const traced = <A, E, R>(
  name: string,
  attributes: () => Record<string, unknown>,
  f: (span: Tracer.Span | undefined) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) =>
    fiber.getRef(Tracer.Tracer) === builtInTracer
      ? f(undefined)
      : Effect.useSpan(name, { kind: "client", attributes: attributes() }, f)
  )

/** A span's context as stored with a holder (`<trace id>-<span id>`), for a later duplicate to link to. @internal */
export const contextOf = (span: Tracer.Span): string => `${span.traceId}-${span.spanId}`

/** The link to a holder whose stored context is `stored`, if it is one. @internal */
export const linkTo = (stored: unknown, jid: string): Tracer.SpanLink | undefined => {
  if (typeof stored !== "string") return undefined
  const match = /^([0-9A-Za-z]{1,64})-([0-9A-Za-z]{1,64})$/.exec(stored)
  if (match === null) return undefined
  return {
    span: Tracer.externalSpan({ traceId: match[1]!, spanId: match[2]! }),
    attributes: { "unique_jobs.holder.jid": jid }
  }
}
