#!/usr/bin/env node
/**
 * The `unique-jobs` executable: `CliMain.main` on the process' argv, and what belongs to the process alone.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as CliMain from "../cli/Main.js"

// No colour codes where no one sees colours: output piped to a file or another program, or NO_COLOR set.
const colours = (stream: NodeJS.WriteStream) => stream.isTTY === true && process.env.NO_COLOR === undefined

// Once the answer is out the process exits: nothing (a connection closing in the background) holds it up. Ctrl-C or a
// SIGTERM interrupts the command, which closes what it opened, and exits 130 or 143.
const main = CliMain.main(process.argv, { stdout: colours(process.stdout), stderr: colours(process.stderr) }).pipe(
  Effect.onExit((exit) =>
    Effect.sync(() => {
      if (process.exitCode === undefined) process.exitCode = Exit.isSuccess(exit) ? exit.value : 1
      process.stdout.write("", () => process.exit())
    })
  )
)

const fiber = Effect.runFork(main)
for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143]] as const) {
  process.once(signal, () => {
    process.exitCode = code
    Effect.runFork(Fiber.interrupt(fiber))
  })
}
