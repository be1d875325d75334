/**
 * The Lua scripts: generated from `lua/` into `lua.generated.ts` (so bundles carry them), run by EVALSHA, reloaded
 * by EVAL when Redis lost them (NOSCRIPT).
 *
 * @internal
 */
import { createHash } from "node:crypto"
import { sources } from "./lua.generated.js"

/**
 * One line range of a script's source: `lines` lines from line `from` (1-based) are the file `file`'s, from its line
 * `line`.
 *
 * @internal
 */
export interface Part {
  readonly file: string
  readonly from: number
  readonly lines: number
  /** The line of `file` the part's first line is. */
  readonly line: number
}

/** @internal */
export interface Script {
  readonly name: string
  readonly source: string
  readonly sha: string
  /** Where the source's lines come from: the prelude functions it holds, then the script's own file, in order. */
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
  | "layout"
  | "retire"
  | "batch"

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
  journal: "journal.lua",
  layout: "layout.lua",
  retire: "retire.lua",
  batch: "batch.lua"
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

/** One function of the prelude: from its `local function` line to its closing `end`, and the functions it calls. */
interface Block {
  readonly name: string
  readonly file: string
  readonly line: number
  readonly text: string
  readonly calls: ReadonlyArray<string>
}

// The names of `names` that `code` calls, or passes as a value (`pcall(f, …)`, `{l = f}`), comments left out.
const callsIn = (code: string, names: ReadonlyArray<string>): Array<string> => {
  const bare = code.replace(/--.*$/gm, "")
  return names.filter((name) => new RegExp(`(^|[^\\w.:])${name}\\s*[(,}]`).test(bare))
}

// The prelude's functions in file order. Everything between them is comment: a script carries only code.
const blocksOf = (files: ReadonlyArray<keyof typeof sources>): ReadonlyArray<Block> => {
  const found: Array<Omit<Block, "calls">> = []
  for (const file of files) {
    const lines = linesOf(sources[file]).text.split("\n")
    for (let i = 0; i < lines.length; i++) {
      const head = /^local function (\w+)\(/.exec(lines[i]!)
      if (head === null) continue
      const last = lines.indexOf("end", i)
      if (last < 0) throw new Error(`lua/${file}:${i + 1}: ${head[1]} has no closing 'end' at the start of a line`)
      found.push({ name: head[1]!, file: `lua/${file}`, line: i + 1, text: `${lines.slice(i, last + 1).join("\n")}\n` })
      i = last
    }
  }
  const names = found.map((block) => block.name)
  return found.map((block) => ({ ...block, calls: callsIn(block.text, names) }))
}

/**
 * Every script with the prelude's functions it calls in front (and those they call), in the prelude's order, so
 * each stays one self-contained EVAL; no file system at run time (`npm run generate` copies `lua/` into the generated
 * module). Redis makes each function it holds anew on every run (a closure each), so a script holds no other.
 * Each records which lines come from which file.
 *
 * @internal
 */
export const loadScripts = (): Record<ScriptName, Script> => {
  const blocks = blocksOf(prelude)
  const byName = new Map(blocks.map((block) => [block.name, block]))
  const make = (name: ScriptName): Script => {
    const own = linesOf(sources[files[name]])
    const needed = new Set<string>()
    const reach = (names: ReadonlyArray<string>): void => {
      for (const called of names) {
        if (needed.has(called)) continue
        needed.add(called)
        reach(byName.get(called)!.calls)
      }
    }
    reach(callsIn(own.text, blocks.map((block) => block.name)))
    let source = ""
    let from = 1
    const parts: Array<Part> = []
    const add = (file: string, line: number, text: string, lines: number) => {
      parts.push({ file, from, lines, line })
      source += text
      from += lines
    }
    for (const block of blocks) {
      if (needed.has(block.name)) add(block.file, block.line, block.text, linesOf(block.text).lines)
    }
    add(`lua/${files[name]}`, 1, own.text, own.lines)
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
    journal: make("journal"),
    layout: make("layout"),
    retire: make("retire"),
    batch: make("batch")
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
  return part === undefined ? undefined : `${part.file}:${part.line + line - part.from}`
}

/** The minimal client surface scripts need; ioredis' `Redis` and `Cluster` both have it. @internal */
export interface ScriptClient {
  evalsha(sha: string, numKeys: number, ...args: Array<string | number>): Promise<unknown>
  eval(script: string, numKeys: number, ...args: Array<string | number>): Promise<unknown>
}

/** Whether an error is Redis' NOSCRIPT (the script cache was flushed): answered by EVAL. @internal */
export const isNoScript = (error: unknown): boolean =>
  error instanceof Error && error.message.startsWith("NOSCRIPT")
