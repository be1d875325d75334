/**
 * Worker processes for the multi-process and crash tests: `test/support/worker-process.ts` in child processes of
 * their own. A process is a scoped resource, SIGKILLed when its scope closes while it still runs, so a failed or
 * timed-out test never leaves one behind; a process whose run failed or timed out is killed at once.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import type * as Job from "../../src/Job.js"
import type { Config, Result } from "./worker-process.js"

export type { Config, Execution, Result } from "./worker-process.js"

const script = fileURLToPath(new URL("./worker-process.ts", import.meta.url))
const root = fileURLToPath(new URL("../..", import.meta.url))

export interface Started {
  readonly job: Job.Job
  readonly digest: string
}

export interface Exited {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

/** A running worker process and its line protocol. */
export interface Process {
  readonly pid: number
  readonly alive: () => boolean
  readonly send: (line: string) => Effect.Effect<void>
  /**
   * The first line not yet taken that starts with one of `heads` (whole words): which head, and the rest of the line.
   * Fails when the process exits first.
   */
  readonly take: (
    ...heads: ReadonlyArray<string>
  ) => Effect.Effect<{ readonly head: string; readonly rest: string }, Error>
  readonly exited: Effect.Effect<Exited>
  readonly kill: (signal: NodeJS.Signals) => Effect.Effect<void>
}

let runs = 0

/** Starts a worker process; it is SIGKILLed, if still running, when the scope closes. */
export const spawnProcess: Effect.Effect<Process, Error, Scope.Scope> = Effect.acquireRelease(
  Effect.sync(() => {
    const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", script, "120000"], {
      cwd: root,
      stdio: ["pipe", "pipe", "pipe"]
    })
    let output = ""
    let buffer = ""
    const lines: Array<string> = []
    const waiters = new Set<() => void>()
    const wake = () => {
      for (const waiter of [...waiters]) waiter()
    }
    child.stdout!.setEncoding("utf8")
    child.stdout!.on("data", (chunk: string) => {
      buffer += chunk
      let newline = buffer.indexOf("\n")
      while (newline >= 0) {
        const line = buffer.slice(0, newline)
        output = (output + line.slice(0, 500) + "\n").slice(-8000)
        lines.push(line)
        buffer = buffer.slice(newline + 1)
        newline = buffer.indexOf("\n")
      }
      wake()
    })
    child.stderr!.setEncoding("utf8")
    child.stderr!.on("data", (chunk: string) => {
      output = (output + chunk).slice(-8000)
    })
    let exit: Exited | undefined
    const exited = new Promise<Exited>((resolve) =>
      child.once("exit", (code, signal) => {
        exit = { code, signal }
        resolve(exit)
        wake()
      })
    )
    const alive = () => child.exitCode === null && child.signalCode === null
    const take = (heads: ReadonlyArray<string>) =>
      new Promise<{ head: string; rest: string }>((resolve, reject) => {
        const match = (line: string) => heads.find((h) => line === h || line.startsWith(`${h} `))
        const check = () => {
          const i = lines.findIndex((l) => match(l) !== undefined)
          if (i >= 0) {
            waiters.delete(check)
            const line = lines.splice(i, 1)[0]!
            const head = match(line)!
            resolve({ head, rest: line.slice(head.length).trim() })
          } else if (exit !== undefined) {
            waiters.delete(check)
            const how = exit.code ?? exit.signal
            reject(new Error(`worker ${child.pid} exited (${how}) before "${heads[0]}":\n${output}`))
          }
        }
        waiters.add(check)
        check()
      })
    const proc: Process & { readonly exitedP: Promise<Exited>; readonly child: ChildProcess } = {
      child,
      exitedP: exited,
      pid: child.pid ?? -1,
      alive,
      send: (line) =>
        Effect.sync(() => {
          if (alive()) child.stdin!.write(`${line}\n`)
        }),
      take: (...heads) => Effect.tryPromise({ try: () => take(heads), catch: (e) => e as Error }),
      exited: Effect.promise(() => exited),
      kill: (signal) =>
        Effect.sync(() => {
          if (alive()) child.kill(signal)
        })
    }
    return proc
  }),
  (proc) =>
    Effect.promise(() => {
      if (proc.alive()) proc.child.kill("SIGKILL")
      proc.child.stdin?.destroy()
      return proc.exitedP
    })
).pipe(Effect.tap((proc) => proc.take("UP")))

/** Starts a run in a process and waits until it is connected; `go` lets it start. */
export const prepare = (proc: Process, config: Config) =>
  Effect.gen(function*() {
    const id = `r${++runs}`
    yield* proc.send(`RUN ${id} ${JSON.stringify(config)}`)
    yield* proc.take(`READY ${id}`)
    return {
      id,
      go: proc.send(`GO ${id}`),
      started: Effect.map(proc.take(`STARTED ${id}`), ({ rest }) => JSON.parse(rest) as Started),
      /** When a `hold` run's perform was interrupted, by the worker's clock (ms). */
      stopped: Effect.map(proc.take(`STOPPED ${id}`), ({ rest }) => Number(rest)),
      result: Effect.flatMap(proc.take(`RESULT ${id}`, `ERROR ${id}`), ({ head, rest }) =>
        head.startsWith("RESULT")
          ? Effect.succeed(JSON.parse(rest) as Result)
          : Effect.fail(new Error(`worker ${proc.pid} run ${id}: ${rest}`)))
    }
  })

/**
 * A few worker processes shared by the tests of a file. `run` gives each process one config, lets them all go at
 * once and collects the results; a run that fails or times out kills every process (the next run starts new ones).
 */
export class Pool extends Context.Service<Pool, {
  readonly size: number
  readonly run: (configs: ReadonlyArray<Config>, timeoutMs: number) => Effect.Effect<ReadonlyArray<Result>, Error>
}>()("test/Workers/Pool") {}

export const layerPool = (size: number): Layer.Layer<Pool> =>
  Layer.effect(
    Pool,
    Effect.gen(function*() {
      const scope = yield* Effect.scope
      let procs: ReadonlyArray<Process> = []
      const fresh = Effect.suspend(() =>
        procs.length === size && procs.every((p) => p.alive())
          ? Effect.succeed(procs)
          : Effect.gen(function*() {
            yield* Effect.forEach(procs, (p) => p.kill("SIGKILL"), { discard: true })
            procs = yield* Effect.forEach(Array.from({ length: size }), () => spawnProcess, {
              concurrency: "unbounded"
            }).pipe(Scope.provide(scope))
            return procs
          })
      )
      const run = (configs: ReadonlyArray<Config>, timeoutMs: number) =>
        Effect.gen(function*() {
          const ps = yield* fresh
          const prepared = yield* Effect.forEach(configs, (config, i) => prepare(ps[i % ps.length]!, config), {
            concurrency: "unbounded"
          })
          yield* Effect.forEach(prepared, (p) => p.go, { discard: true })
          return yield* Effect.forEach(prepared, (p) => p.result, { concurrency: "unbounded" })
        }).pipe(
          Effect.timeoutOrElse({
            duration: timeoutMs,
            orElse: () => Effect.fail(new Error(`the workers did not finish within ${timeoutMs} ms`))
          }),
          Effect.tapError(() => Effect.forEach(procs, (p) => p.kill("SIGKILL"), { discard: true }))
        )
      return { size, run }
    })
  )
