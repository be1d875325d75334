/**
 * The `unique-jobs` executable's work, from its argv to its exit code and what it prints: what the bin runs, and what
 * the tests run in-process. The bin keeps only what belongs to the process (its streams' colours, its exit, signals).
 *
 * @internal
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as Cli from "../Cli.js"

/**
 * `--log-level` is @effect/cli's own option, read only before the subcommand: moved there from wherever it was
 * written (up to a `--`).
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
 * `unique-jobs help [COMMAND…]` as `unique-jobs [COMMAND…] --help`: @effect/cli knows only the flag.
 *
 * @internal
 */
export const withHelpCommand = (argv: ReadonlyArray<string>): Array<string> => {
  const first = argv.findIndex((arg, i) => i >= 2 && !arg.startsWith("-"))
  return first !== -1 && argv[first] === "help" && !argv.slice(2, first).some((arg) => arg === "--")
    ? [...argv.slice(0, first), ...argv.slice(first + 1), "--help"]
    : [...argv]
}

// The command a help page is of, as its words were typed (`locks show`): @effect/cli's usage line names only the last.
const commandWords = (argv: ReadonlyArray<string>): ReadonlyArray<string> => {
  const words: Array<string> = []
  for (let i = 2; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === "--") break
    if (["--log-level", "--completions"].includes(arg)) i++
    else if (!arg.startsWith("-")) words.push(arg)
  }
  return words
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

// @effect/cli's help names each value's type in words of its own ("A user-defined piece of text.", "An integer.")
// before the description each option has: left out, the usage line already shows the value's name.
const generic =
  /^ *(?:\u001b\[[0-9;]*m)*(?:A user-defined piece of text(?: that is confidential)?|An integer|A true or false value)\.(?:\u001b\[[0-9;]*m)*\n\n/gm

// A repeated option may be given no times (`--bullmq-queue QUEUE...` reads as required): bracketed as optional.
const repeated = /(^|[\s(])(--[a-z][a-z-]* [A-Z]+)\.\.\./gm

// Every optional setting says so under it, and a required one says nothing: the usage line's brackets already tell
// them apart, and each required one's description begins "required".
const optional = /^ *(?:\u001b\[[0-9;]*m)*This setting is optional\.(?:\u001b\[[0-9;]*m)*\n\n?/gm

// The page opens with the name, then the name and version: once is enough.
const doubled = /^((?:\u001b\[[0-9;]*m)*)unique-jobs((?:\u001b\[[0-9;]*m)*)\n\n(?=(?:\u001b\[[0-9;]*m)*unique-jobs \d)/

// The usage line names the command by its last word (`$ show`): written as it is typed, from the top.
const usageOf = (words: ReadonlyArray<string>) => (text: string): string =>
  text.replace(/^((?:\u001b\[[0-9;]*m)*)\$ ([a-z][a-z-]*)\b/m, (line, colour: string, name: string) => {
    if (name === "unique-jobs") return `${colour}$ unique-jobs <command> [options]`
    const at = words.lastIndexOf(name)
    return at === -1 ? line : `${colour}$ unique-jobs ${words.slice(0, at + 1).join(" ")}`
  })

// The list of commands pads each usage to the longest (over 200 columns): each description goes on its own line.
const commandList = /^( {2}- .*?\S) {3,}(\S.*)$/gm

const plain = (colours: boolean, words: ReadonlyArray<string>) => (args: ReadonlyArray<unknown>): Array<unknown> =>
  args.map((arg) =>
    typeof arg === "string"
      ? usageOf(words)(
        (colours ? arg : arg.replace(/\u001b\[[0-9;]*m/g, "")).replace(generic, "").replace(optional, "")
          .replace(doubled, "").replace(repeated, "$1[$2]...").replace(commandList, "$1\n      $2")
      )
      : arg
  )

// The console in place, its lines without escape codes where the stream shows no colours (@effect/cli's help and
// errors are written in colour), and its help without the generic type lines.
const plainConsole = (colours: Colours, words: ReadonlyArray<string>) =>
  Effect.map(Effect.console, (current): Console.Console => {
    const out = plain(colours.stdout, words)
    const err = plain(colours.stderr, words)
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

// Logs go to stderr, through the console in place: stdout carries only the answer (`--json` is parsed by scripts).
const logger = (colours: boolean) =>
  Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true, colors: colours }))

/**
 * Runs the command on `argv` (`process.argv`: the node binary and the script first) with the console in place, and
 * answers its exit code: 0, or 1 when it failed. A failure of the command's own is one line on stderr,
 * `unique-jobs: <message>`; the command line's own errors (an unknown option, a missing argument) are printed by
 * @effect/cli, on the console's error, before they reach here.
 *
 * @internal
 */
export const main = (given: ReadonlyArray<string>, colours: Colours): Effect.Effect<number> => {
  const argv = withLogLevelFirst(withHelpCommand(given))
  return Effect.flatMap(plainConsole(colours, commandWords(argv)), (console) =>
    Cli.run(argv).pipe(
      Effect.as(0),
      Effect.catch((error) =>
        Effect.as(error instanceof Cli.CliError ? Console.error(`unique-jobs: ${error.message}`) : Effect.void, 1)
      ),
      Effect.withConsole(console)
    )).pipe(
      Effect.provide(logger(colours.stderr)),
      Effect.provide(Cli.platform)
    )
}
