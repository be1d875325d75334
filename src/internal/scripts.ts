/**
 * The Lua scripts: generated from `lua/` into `lua.generated.ts` (so bundles carry them), run by EVALSHA, reloaded
 * by EVAL when Redis lost them (NOSCRIPT).
 *
 * @internal
 */
import { createHash } from "node:crypto"
import { sources } from "./lua.generated.js"

/**
 * One line range of a script's source: `lines` lines from line `from` (1-based) are the file `file`'s, from its first.
 *
 * @internal
 */
export interface Part {
  readonly file: string
  readonly from: number
  readonly lines: number
}

/** @internal */
export interface Script {
  readonly name: string
  readonly source: string
  readonly sha: string
  /** Where the source's lines come from: the prelude's files, then the script's own, in order. */
  readonly parts: ReadonlyArray<Part>
}

/** @internal */
export type ScriptName =
  | "lock"
  | "unlock"
  | "renew"
  | "renewAll"
  | "handoff"
  | "fetch"
  | "reap"
  | "remove"
  | "claim"
  | "tally"
  | "journal"

/** Each script's own file under `lua/`. @internal */
export const files: Record<ScriptName, keyof typeof sources> = {
  lock: "lock.lua",
  unlock: "unlock.lua",
  renew: "renew.lua",
  renewAll: "renew_all.lua",
  handoff: "handoff.lua",
  fetch: "fetch.lua",
  reap: "reap.lua",
  remove: "remove.lua",
  claim: "claim.lua",
  tally: "tally.lua",
  journal: "journal.lua"
}

/** The prelude: every file under `lua/lib/`, in path order. @internal */
export const prelude: ReadonlyArray<keyof typeof sources> = (Object.keys(sources) as Array<keyof typeof sources>)
  .filter((file) => file.startsWith("lib/"))
  .sort()

// A file's lines, each ending in a newline (one is added after a last line without), so files join line for line.
const linesOf = (text: string): { readonly text: string; readonly lines: number } => {
  const whole = text === "" || text.endsWith("\n") ? text : `${text}\n`
  return { text: whole, lines: whole.split("\n").length - 1 }
}

/**
 * Every script with the prelude in front, so each stays one self-contained EVAL; no file system at run time
 * (`npm run generate` copies `lua/` into the generated module). Each records which lines come from which file.
 *
 * @internal
 */
export const loadScripts = (): Record<ScriptName, Script> => {
  const make = (name: ScriptName): Script => {
    let source = ""
    let from = 1
    const parts: Array<Part> = []
    for (const file of [...prelude, files[name]]) {
      const { lines, text } = linesOf(sources[file])
      parts.push({ file: `lua/${file}`, from, lines })
      source += text
      from += lines
    }
    return { name, source, sha: createHash("sha1").update(source).digest("hex"), parts }
  }
  return {
    lock: make("lock"),
    unlock: make("unlock"),
    renew: make("renew"),
    renewAll: make("renewAll"),
    handoff: make("handoff"),
    fetch: make("fetch"),
    reap: make("reap"),
    remove: make("remove"),
    claim: make("claim"),
    tally: make("tally"),
    journal: make("journal")
  }
}

/**
 * The file and line (`lua/lib/prelude.lua:21`) of a line of a script's source, as Redis names it in an error
 * (`@user_script:<line>`); undefined for a line outside the source.
 *
 * @internal
 */
export const locate = (script: Script, line: number): string | undefined => {
  const part = script.parts.find((p) => line >= p.from && line < p.from + p.lines)
  return part === undefined ? undefined : `${part.file}:${line - part.from + 1}`
}

/** The minimal client surface scripts need; ioredis' `Redis` and `Cluster` both have it. @internal */
export interface ScriptClient {
  evalsha(sha: string, numKeys: number, ...args: Array<string | number>): Promise<unknown>
  eval(script: string, numKeys: number, ...args: Array<string | number>): Promise<unknown>
}

/** Whether an error is Redis' NOSCRIPT (the script cache was flushed): answered by EVAL. @internal */
export const isNoScript = (error: unknown): boolean =>
  error instanceof Error && error.message.startsWith("NOSCRIPT")
