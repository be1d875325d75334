#!/usr/bin/env node
/**
 * The `unique-jobs` executable.
 *
 * @since 0.1.0
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Logger from "effect/Logger"
import * as Cli from "../Cli.js"

// --log-level is @effect/cli's own option, read only before the subcommand: move it there from wherever it was written.
const withLogLevelFirst = (argv: ReadonlyArray<string>): Array<string> => {
  const moved: Array<string> = []
  const rest: Array<string> = []
  for (let i = 2; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === "--") {
      rest.push(...argv.slice(i))
      break
    }
    if (arg.startsWith("--log-level=")) moved.push(arg)
    else if (arg === "--log-level" && i + 1 < argv.length) moved.push(arg, argv[++i]!)
    else rest.push(arg)
  }
  return [...argv.slice(0, 2), ...moved, ...rest]
}

// No colour codes where no one sees colours: output piped to a file or another program, or NO_COLOR set.
const colours = (stream: NodeJS.WriteStream) => stream.isTTY === true && process.env.NO_COLOR === undefined
const plain = (stream: NodeJS.WriteStream) => (args: ReadonlyArray<unknown>): Array<unknown> =>
  colours(stream) ? [...args] : args.map((arg) => (typeof arg === "string" ? arg.replace(/\u001b\[[0-9;]*m/g, "") : arg))

const plainConsole = Effect.map(Effect.console, (current): Console.Console => {
  const out = plain(process.stdout)
  const err = plain(process.stderr)
  return {
    ...current,
    log: (...args) => current.log(...out(args)),
    error: (...args) => current.error(...err(args)),
    unsafe: {
      ...current.unsafe,
      log: (...args) => current.unsafe.log(...out(args)),
      error: (...args) => current.unsafe.error(...err(args))
    }
  }
})

// Logs go to stderr: stdout carries only the answer (`--json` is parsed by scripts).
const logger = Logger.replace(
  Logger.defaultLogger,
  Logger.prettyLogger({ stderr: true, colors: colours(process.stderr) })
)

// A failure is one line on stderr and exit code 1. The command line's own errors (an unknown option, a missing
// argument) are printed by @effect/cli before they reach here. Once the answer is out the process exits: nothing
// (a connection closing in the background) holds it up. Ctrl-C or a SIGTERM interrupts the command, which closes
// what it opened, and exits 130 or 143.
const main = Effect.flatMap(plainConsole, (console) =>
  Cli.run(withLogLevelFirst(process.argv)).pipe(
    Effect.catchAll((error) =>
      Effect.zipRight(
        error instanceof Cli.CliError ? Console.error(`unique-jobs: ${error.message}`) : Effect.void,
        Effect.sync(() => {
          process.exitCode = 1
        })
      )
    ),
    Effect.withConsole(console)
  )).pipe(
    Effect.onExit((exit) =>
      Effect.sync(() => {
        if (Exit.isFailure(exit) && process.exitCode === undefined) process.exitCode = 1
        process.stdout.write("", () => process.exit())
      })
    ),
    Effect.provide(logger),
    Effect.provide(Cli.platform)
  )

const fiber = Effect.runFork(main)
for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143]] as const) {
  process.once(signal, () => {
    process.exitCode = code
    Effect.runFork(Fiber.interrupt(fiber))
  })
}
