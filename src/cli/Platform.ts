/**
 * What `effect/cli` needs of the platform (`Command.Environment`: a FileSystem, a Path, a Terminal, a Stdio and a
 * ChildProcessSpawner), on Node's own modules. It stands in for @effect/platform-node, whose dependencies ask for
 * more than this package does (an ioredis of their own among them). The commands read no files and spawn nothing:
 * the file system refuses, and so does the spawner.
 *
 * @internal
 */
import type * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as PlatformError from "effect/PlatformError"
import * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import * as Queue from "effect/Queue"
import * as Sink from "effect/Sink"
import * as Stdio from "effect/Stdio"
import * as Stream from "effect/Stream"
import * as Terminal from "effect/Terminal"
import * as Readline from "node:readline"

const stdin = process.stdin
const stdout = process.stdout

// Key presses while the scope lasts (prompts, `--wizard`): raw mode on a terminal, restored when the scope closes.
const readInput = Effect.gen(function*() {
  const queue = yield* Queue.make<Terminal.UserInput, Cause.Done>()
  const onKey = (input: string | undefined, key: Readline.Key | undefined) => {
    Queue.offerUnsafe(queue, {
      input: Option.fromUndefinedOr(input),
      key: { name: key?.name ?? "", ctrl: key?.ctrl ?? false, meta: key?.meta ?? false, shift: key?.shift ?? false }
    })
  }
  yield* Effect.acquireRelease(
    Effect.sync(() => {
      Readline.emitKeypressEvents(stdin)
      if (stdin.isTTY) stdin.setRawMode(true)
      stdin.on("keypress", onKey)
    }),
    () =>
      Effect.andThen(
        Effect.sync(() => {
          stdin.off("keypress", onKey)
          if (stdin.isTTY) stdin.setRawMode(false)
          stdin.pause()
        }),
        Queue.end(queue)
      )
  )
  return queue as Queue.Dequeue<Terminal.UserInput, Cause.Done>
})

// The terminal's size as it changes, while the scope lasts.
const size = Effect.gen(function*() {
  const queue = yield* Queue.make<Terminal.Size, Cause.Done>()
  const onResize = () => {
    Queue.offerUnsafe(queue, { columns: stdout.columns ?? 80, rows: stdout.rows ?? 24 })
  }
  yield* Effect.acquireRelease(
    Effect.sync(() => stdout.on("resize", onResize)),
    () => Effect.andThen(Effect.sync(() => stdout.off("resize", onResize)), Queue.end(queue))
  )
  return queue as Queue.Dequeue<Terminal.Size, Cause.Done>
})

const readLine = Effect.callback<string, Terminal.QuitError>((resume) => {
  const lines = Readline.createInterface({ input: stdin })
  let answered = false
  lines.once("line", (line) => {
    answered = true
    lines.close()
    resume(Effect.succeed(line))
  })
  // Ctrl-C, Ctrl-D or the end of the input: the user left.
  lines.once("close", () => {
    if (!answered) resume(Effect.fail(new Terminal.QuitError()))
  })
  return Effect.sync(() => lines.close())
})

const display = (text: string) =>
  Effect.callback<void, PlatformError.PlatformError>((resume) => {
    stdout.write(text, (error) =>
      resume(
        error === undefined || error === null
          ? Effect.void
          : Effect.fail(PlatformError.systemError({ _tag: "Unknown", module: "Terminal", method: "display", cause: error }))
      ))
  })

const terminal: Terminal.Terminal = Terminal.make({
  columns: Effect.sync(() => stdout.columns ?? 80),
  rows: Effect.sync(() => stdout.rows ?? 24),
  size,
  readInput,
  readLine,
  display
})

// A process stream as a sink: each chunk written, in order, once the stream took it.
const writeTo = (stream: NodeJS.WriteStream, method: string): Sink.Sink<void, string | Uint8Array, never, PlatformError.PlatformError> =>
  Sink.forEach((chunk: string | Uint8Array) =>
    Effect.callback<void, PlatformError.PlatformError>((resume) => {
      stream.write(chunk, (error) =>
        resume(
          error === undefined || error === null
            ? Effect.void
            : Effect.fail(PlatformError.systemError({ _tag: "Unknown", module: "Stdio", method, cause: error }))
        ))
    })
  )

const stdio: Stdio.Stdio = Stdio.make({
  args: Effect.sync(() => process.argv.slice(2)),
  stdinIsTerminal: Effect.sync(() => stdin.isTTY === true),
  stdoutIsTerminal: Effect.sync(() => stdout.isTTY === true),
  stderrIsTerminal: Effect.sync(() => process.stderr.isTTY === true),
  stdout: () => writeTo(stdout, "stdout"),
  stderr: () => writeTo(process.stderr, "stderr"),
  // The commands read no input but key presses (the Terminal's).
  stdin: Stream.empty
})

const spawner = ChildProcessSpawner.make(() =>
  Effect.fail(
    PlatformError.badArgument({
      module: "ChildProcessSpawner",
      method: "spawn",
      description: "the unique-jobs command runs no other program"
    })
  )
)

/** @internal */
export const layer: Layer.Layer<
  FileSystem.FileSystem | Path.Path | Terminal.Terminal | Stdio.Stdio | ChildProcessSpawner.ChildProcessSpawner
> = Layer.mergeAll(
  FileSystem.layerNoop({}),
  Path.layer,
  Layer.succeed(Terminal.Terminal, terminal),
  Layer.succeed(Stdio.Stdio, stdio),
  Layer.succeed(ChildProcessSpawner.ChildProcessSpawner, spawner)
)
