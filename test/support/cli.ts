/**
 * The `unique-jobs` command run in-process, as the executable runs it: its answer lines captured.
 */
import * as ConfigProvider from "effect/ConfigProvider"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { createServer } from "node:net"
import { format } from "node:util"
import * as CliMain from "../../src/cli/Main.js"

/** A console whose `log` lines (the CLI's answers) are kept, to provide as `Console.Console`. */
export const capturedConsole = Console.consoleWith((console) => {
  const lines: Array<string> = []
  const capture: Console.Console = {
    ...console,
    log: (...args) => void lines.push(args.join(" "))
  }
  return Effect.succeed({ capture, lines })
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

/** What a run of the command gave: its exit code and what it wrote to stdout and stderr. */
export interface Ran {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** A stream as a console writes to it: each call one line, formatted as Node's console does, indented by groups. */
const stream = () => {
  let text = ""
  let indent = ""
  return {
    write: (args: ReadonlyArray<unknown>) => {
      text += format(...args).split("\n").map((line) => indent + line).join("\n") + "\n"
    },
    group: () => {
      indent += "  "
    },
    groupEnd: () => {
      indent = indent.slice(2)
    },
    text: () => text
  }
}

// REDIS_URL and REDIS_CLUSTER_NODES blank, as the spawned command is run: a command names its Redis by flags. The
// rest of the environment as it is.
const environment = (env: Record<string, string>) =>
  ConfigProvider.fromEnv({
    env: {
      ...Object.fromEntries(Object.entries(process.env).filter((entry): entry is [string, string] => entry[1] !== undefined)),
      REDIS_URL: "",
      REDIS_CLUSTER_NODES: "",
      ...env
    }
  })

/**
 * Runs `unique-jobs args…` in this process, as the executable runs it (`CliMain.main`, output in a pipe: no colours),
 * on a runtime of its own (the live clock, the default logger and log level, not the test's), with REDIS_URL and
 * REDIS_CLUSTER_NODES blank: its exit code, and its stdout and stderr as the process would have written them (the
 * answers, effect/cli's own messages, the one-line errors and the logs).
 */
export const cli = (...args: Array<string>): Effect.Effect<Ran> => cliWith({}, ...args)

/** `cli` with these variables set in the command's environment (UNIQUE_JOBS_WEB_TOKEN, …). */
export const cliWith = (env: Record<string, string>, ...args: Array<string>): Effect.Effect<Ran> =>
  Effect.suspend(() => {
    const out = stream()
    const err = stream()
    const capture = Console.consoleWith((console) =>
      Effect.succeed<Console.Console>({
        ...console,
        log: (...args) => out.write(args),
        error: (...args) => err.write(args),
        // Node's console indents both streams alike: the logger writes a group to stderr.
        group: () => {
          out.group()
          err.group()
        },
        groupEnd: () => {
          out.groupEnd()
          err.groupEnd()
        }
      })
    )
    const ran = Effect.flatMap(capture, (console) =>
      CliMain.main(["node", "unique-jobs", ...args], { stdout: false, stderr: false }).pipe(
        Effect.provideService(Console.Console, console),
        Effect.provideService(ConfigProvider.ConfigProvider, environment(env))
      ))
    return Effect.map(
      Effect.promise((signal) => Effect.runPromiseExit(ran, { signal })),
      (exit): Ran => ({ code: Exit.isSuccess(exit) ? exit.value : 1, stdout: out.text(), stderr: err.text() })
    )
  })
