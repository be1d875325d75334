/**
 * The `unique-jobs` executable's work, from its argv to its exit code and what it prints: what the bin runs, and what
 * the tests run in-process. The bin keeps only what belongs to the process (its streams' colours, its exit, signals).
 *
 * @internal
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Cli from "../Cli.js"

/**
 * `--log-level`, effect/cli's own option, moved before the subcommand from wherever it was written (up to a `--`),
 * where every command reads it.
 *
 * @internal
 */
export const withLogLevelFirst = (argv: ReadonlyArray<string>): Array<string> => {
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

/**
 * `unique-jobs help [COMMAND…]` as `unique-jobs [COMMAND…] --help`: effect/cli knows only the flag.
 *
 * @internal
 */
export const withHelpCommand = (argv: ReadonlyArray<string>): Array<string> => {
  const first = argv.findIndex((arg, i) => i >= 2 && !arg.startsWith("-"))
  return first !== -1 && argv[first] === "help" && !argv.slice(2, first).some((arg) => arg === "--")
    ? [...argv.slice(0, first), ...argv.slice(first + 1), "--help"]
    : [...argv]
}

/**
 * Whether each stream shows colours: a terminal, with NO_COLOR unset. Where none is seen (output piped to a file or
 * another program) no escape code is printed.
 *
 * @internal
 */
export interface Colours {
  readonly stdout: boolean
  readonly stderr: boolean
}

// Escape codes out of a line written where the stream shows no colours (effect/cli's help is written in colour when
// stdout is a terminal, the logs when it is one too).
const plain = (colours: boolean) => (args: ReadonlyArray<unknown>): Array<unknown> =>
  args.map((arg) => (typeof arg === "string" && !colours ? arg.replace(/\u001b\[[0-9;]*m/g, "") : arg))

// The console in place, its lines without escape codes where the stream shows no colours.
const plainConsole = (colours: Colours) =>
  Console.consoleWith((current) => Effect.succeed<Console.Console>({
    ...current,
    log: (...args) => current.log(...plain(colours.stdout)(args)),
    error: (...args) => current.error(...plain(colours.stderr)(args))
  }))

// Logs go to stderr, through the console in place: stdout carries only the answer (`--json` is parsed by scripts).
const logger = (colours: boolean) =>
  Layer.mergeAll(
    Logger.layer([Logger.consolePretty({ colors: colours, mode: "tty" })]),
    Layer.succeed(Logger.LogToStderr)(true)
  )

/**
 * Runs the command on `argv` (`process.argv`: the node binary and the script first) with the console in place, and
 * answers its exit code: 0, or 1 when it failed. A failure of the command's own is one line on stderr,
 * `unique-jobs: <message>`; the command line's own errors (a value effect/cli cannot parse) are printed by the
 * command, on the console's error, before they reach here.
 *
 * @internal
 */
export const main = (given: ReadonlyArray<string>, colours: Colours): Effect.Effect<number> => {
  const argv = withLogLevelFirst(withHelpCommand(given))
  return Effect.flatMap(plainConsole(colours), (console) =>
    Cli.run(argv).pipe(
      Effect.as(0),
      Effect.catch((error) =>
        Effect.as(error instanceof Cli.CliError ? Console.error(`unique-jobs: ${error.message}`) : Effect.void, 1)
      ),
      Effect.provideService(Console.Console, console)
    )).pipe(
      Effect.provide(logger(colours.stderr)),
      Effect.provide(Cli.platform)
    )
}
