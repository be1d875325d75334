/**
 * The `unique-jobs` command run in-process, as the executable runs it: its answer lines captured.
 */
import type * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import { createServer } from "node:net"

/** A console whose `log` lines (the CLI's answers) are kept, for `Effect.withConsole`. */
export const capturedConsole = Effect.map(Effect.console, (console) => {
  const lines: Array<string> = []
  const capture: Console.Console = {
    ...console,
    log: (...args) => Effect.sync(() => void lines.push(args.join(" "))),
    unsafe: { ...console.unsafe, log: (...args) => void lines.push(args.join(" ")) }
  }
  return { capture, lines }
})

/** A loopback port nothing listens on. */
export const closedPort = Effect.promise(() =>
  new Promise<number>((resolve) => {
    const server = createServer()
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
)
