/**
 * The `unique-jobs` command run in-process, as the executable runs it: its answer lines captured.
 */
import * as ConfigProvider from "effect/ConfigProvider"
import type * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { createServer } from "node:net"
import { format } from "node:util"
import * as CliMain from "../../src/cli/Main.js"

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
  ConfigProvider.fromMap(new Map([["REDIS_URL", ""], ["REDIS_CLUSTER_NODES", ""], ...Object.entries(env)])).pipe(
    ConfigProvider.orElse(() => ConfigProvider.fromEnv())
  )

/**
 * Runs `unique-jobs args…` in this process, as the executable runs it (`CliMain.main`, output in a pipe: no colours),
 * on a runtime of its own (the live clock, the default logger and log level, not the test's), with REDIS_URL and
 * REDIS_CLUSTER_NODES blank: its exit code, and its stdout and stderr as the process would have written them (the
 * answers, @effect/cli's own messages, the one-line errors and the logs).
 */
export const cli = (...args: Array<string>): Effect.Effect<Ran> => cliWith({}, ...args)

/** `cli` with these variables set in the command's environment (UNIQUE_JOBS_WEB_TOKEN, …). */
export const cliWith = (env: Record<string, string>, ...args: Array<string>): Effect.Effect<Ran> =>
  Effect.suspend(() => {
    const out = stream()
    const err = stream()
    const capture = Effect.map(Effect.console, (console): Console.Console => ({
      ...console,
      log: (...args) => Effect.sync(() => out.write(args)),
      error: (...args) => Effect.sync(() => err.write(args)),
      group: () => Effect.sync(() => out.group()),
      groupEnd: Effect.sync(() => out.groupEnd()),
      unsafe: {
        ...console.unsafe,
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
      }
    }))
    const ran = Effect.flatMap(capture, (console) =>
      CliMain.main(["node", "unique-jobs", ...args], { stdout: false, stderr: false }).pipe(
        Effect.withConsole(console),
        Effect.withConfigProvider(environment(env))
      ))
    return Effect.map(
      Effect.promise((signal) => Effect.runPromiseExit(ran, { signal })),
      (exit): Ran => ({ code: Exit.isSuccess(exit) ? exit.value : 1, stdout: out.text(), stderr: err.text() })
    )
  })
