/**
 * A program of this repository (an example, a support script) run to its exit as `node --import tsx <path>`, the way
 * `npm start` and the README run them.
 */
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"

const root = new URL("../../", import.meta.url)

/**
 * Runs a program to its exit. `lingered`: how long it stayed up after its last line of output (by this process'
 * clock); a program still up 60 s after its last line is killed (`code` null) so a hang is reported, not waited out.
 */
export const runProgram = (path: string, env: Record<string, string>) =>
  Effect.callback<{
    readonly code: number | null
    readonly stdout: string
    readonly stderr: string
    readonly lingered: number
  }>((resume) => {
    const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL(path, root))], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    let last = Date.now()
    let hang: ReturnType<typeof setTimeout> | undefined
    const output = () => {
      last = Date.now()
      clearTimeout(hang)
      hang = setTimeout(() => child.kill("SIGKILL"), 60_000)
    }
    output()
    child.stdout.on("data", (chunk) => {
      stdout += String(chunk)
      output()
    })
    child.stderr.on("data", (chunk) => {
      stderr += String(chunk)
      output()
    })
    child.on("exit", (code) => {
      clearTimeout(hang)
      resume(Effect.succeed({ code, stdout, stderr, lingered: Date.now() - last }))
    })
    return Effect.sync(() => {
      clearTimeout(hang)
      child.kill("SIGKILL")
    })
  })

