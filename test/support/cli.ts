/**
 * The `unique-jobs` command run in-process, as the executable runs it: its answer lines captured.
 */
import type * as Console from "effect/Console"
import * as Effect from "effect/Effect"

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
