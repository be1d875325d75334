/**
 * Conflict strategies: what a lost race turns into, on the client (a duplicate enqueue) and on the server
 * (a duplicate execution).
 *
 * @since 0.1.0
 */
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"

/**
 * @since 0.1.0
 * @category models
 */
export type Name = "log" | "raise" | "reject" | "replace" | "reschedule"

/**
 * Strategies that mean something for a duplicate enqueue.
 *
 * @since 0.1.0
 * @category models
 */
export type ClientName = "log" | "raise" | "reject" | "replace"

/**
 * Strategies that mean something for a duplicate execution.
 *
 * @since 0.1.0
 * @category models
 */
export type ServerName = "log" | "raise" | "reject" | "reschedule"

/**
 * One name for both sides, or a name per side.
 *
 * @since 0.1.0
 * @category models
 */
export type OnConflict = Name | { readonly client?: ClientName | undefined; readonly server?: ServerName | undefined }

/**
 * @since 0.1.0
 * @category models
 */
export interface Resolved {
  readonly client: ClientName
  readonly server: ServerName
}

/**
 * @since 0.1.0
 * @category constants
 */
export const names: ReadonlyArray<Name> = ["log", "raise", "reject", "replace", "reschedule"]

/**
 * @since 0.1.0
 * @category constants
 */
export const clientNames: ReadonlyArray<ClientName> = ["log", "raise", "reject", "replace"]

/**
 * @since 0.1.0
 * @category constants
 */
export const serverNames: ReadonlyArray<ServerName> = ["log", "raise", "reject", "reschedule"]

const isClientName = (u: unknown): u is ClientName => clientNames.includes(u as ClientName)
const isServerName = (u: unknown): u is ServerName => serverNames.includes(u as ServerName)

const sideMessage = (side: "client" | "server", actual: unknown): string => {
  const valid = side === "client" ? clientNames : serverNames
  const hint = side === "client" && actual === "reschedule"
    ? " (reschedule re-enqueues a duplicate execution: put it under server)"
    : side === "server" && actual === "replace"
    ? " (replace swaps a queued duplicate: put it under client)"
    : ""
  return `${JSON.stringify(actual)} is not a ${side} strategy${hint}; use one of ${valid.join(", ")}`
}

/**
 * Decodes `onConflict` into a strategy per side. A single name applies where it has a meaning and `log` elsewhere;
 * a name given explicitly for a side where it has none is refused, naming that side.
 *
 * @since 0.1.0
 * @category schemas
 */
export const OnConflictSchema: Schema.Schema<Resolved, unknown> = Schema.transformOrFail(
  Schema.Unknown,
  Schema.Struct({
    client: Schema.Literal(...clientNames),
    server: Schema.Literal(...serverNames)
  }),
  {
    strict: true,
    decode: (input, _, ast) => {
      if (typeof input === "string") {
        if (!names.includes(input as Name)) {
          return ParseResult.fail(
            new ParseResult.Type(ast, input, `unknown strategy ${JSON.stringify(input)}; use one of ${names.join(", ")}`)
          )
        }
        return ParseResult.succeed({
          client: isClientName(input) ? input : "log",
          server: isServerName(input) ? input : "log"
        })
      }
      if (typeof input !== "object" || input === null || Array.isArray(input)) {
        return ParseResult.fail(
          new ParseResult.Type(ast, input, "expected a strategy name or { client?, server? }")
        )
      }
      const sides = input as Record<string, unknown>
      const issues: Array<ParseResult.ParseIssue> = []
      for (const key of Object.keys(sides)) {
        if (key !== "client" && key !== "server") {
          issues.push(new ParseResult.Pointer(key, input, new ParseResult.Unexpected(sides[key], "only client and server")))
        }
      }
      const client = sides.client ?? "log"
      const server = sides.server ?? "log"
      if (!isClientName(client)) {
        issues.push(new ParseResult.Pointer("client", input, new ParseResult.Type(ast, client, sideMessage("client", client))))
      }
      if (!isServerName(server)) {
        issues.push(new ParseResult.Pointer("server", input, new ParseResult.Type(ast, server, sideMessage("server", server))))
      }
      const [first, ...rest] = issues
      if (first !== undefined) {
        return ParseResult.fail(rest.length === 0 ? first : new ParseResult.Composite(ast, input, [first, ...rest]))
      }
      return ParseResult.succeed({ client: client as ClientName, server: server as ServerName })
    },
    encode: (resolved) => ParseResult.succeed(resolved)
  }
)
