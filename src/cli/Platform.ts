/**
 * What @effect/cli needs of the platform (a Path, a FileSystem, a Terminal), on Node's own modules. It stands in for
 * @effect/platform-node, whose dependencies (@effect/sql, @effect/experimental) ask for ioredis 5 alone and would make
 * a project on ioredis 6 unable to install this package. The commands read no files: the file system refuses.
 *
 * @internal
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import { SystemError } from "@effect/platform/Error"
import * as Terminal from "@effect/platform/Terminal"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Readline from "node:readline"

const stdin = process.stdin
const stdout = process.stdout

// Key presses while the scope lasts (prompts, `--wizard`): raw mode on a terminal, restored when the scope closes.
const readInput = Effect.gen(function*() {
  const mailbox = yield* Mailbox.make<Terminal.UserInput>()
  const onKey = (input: string | undefined, key: Readline.Key | undefined) => {
    mailbox.unsafeOffer({
      input: Option.fromNullable(input),
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
        mailbox.shutdown
      )
  )
  return mailbox
})

const readLine = Effect.callback<string, Terminal.QuitException>((resume) => {
  const lines = Readline.createInterface({ input: stdin })
  let answered = false
  lines.once("line", (line) => {
    answered = true
    lines.close()
    resume(Effect.succeed(line))
  })
  // Ctrl-C, Ctrl-D or the end of the input: the user left.
  lines.once("close", () => {
    if (!answered) resume(Effect.fail(new Terminal.QuitException()))
  })
  return Effect.sync(() => lines.close())
})

const display = (text: string) =>
  Effect.callback<void, SystemError>((resume) => {
    stdout.write(text, (error) =>
      resume(
        error === undefined || error === null
          ? Effect.void
          : Effect.fail(new SystemError({ reason: "Unknown", module: "Terminal", method: "display", cause: error }))
      ))
  })

const terminal: Terminal.Terminal = {
  columns: Effect.sync(() => stdout.columns ?? 80),
  rows: Effect.sync(() => stdout.rows ?? 24),
  isTTY: Effect.sync(() => stdout.isTTY === true),
  readInput,
  readLine,
  display
}

/** @internal */
export const layer: Layer.Layer<FileSystem.FileSystem | Path.Path | Terminal.Terminal> = Layer.mergeAll(
  FileSystem.layerNoop({}),
  Path.layer,
  Layer.succeed(Terminal.Terminal, terminal)
)
