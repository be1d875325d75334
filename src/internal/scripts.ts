/**
 * The Lua scripts: generated from `lua/` into `lua.generated.ts` (so bundles carry them), run by EVALSHA, reloaded
 * by EVAL when Redis lost them (NOSCRIPT).
 *
 * @internal
 */
import { createHash } from "node:crypto"
import { sources } from "./lua.generated.js"

/** @internal */
export interface Script {
  readonly name: string
  readonly source: string
  readonly sha: string
}

/** @internal */
export type ScriptName = "lock" | "unlock" | "renew" | "handoff"

// No file system at run time: `npm run generate` copies lua/ into the generated module.
const read = (file: keyof typeof sources): string => sources[file]

/** Every script with the shared prelude in front, so each stays one self-contained EVAL. @internal */
export const loadScripts = (): Record<ScriptName, Script> => {
  const prelude = read("acquire.lua")
  const make = (name: ScriptName): Script => {
    const source = `${prelude}\n${read(`${name}.lua`)}`
    return { name, source, sha: createHash("sha1").update(source).digest("hex") }
  }
  return { lock: make("lock"), unlock: make("unlock"), renew: make("renew"), handoff: make("handoff") }
}

/** The minimal client surface scripts need; ioredis' `Redis` and `Cluster` both have it. @internal */
export interface ScriptClient {
  evalsha(sha: string, numKeys: number, ...args: Array<string | number>): Promise<unknown>
  eval(script: string, numKeys: number, ...args: Array<string | number>): Promise<unknown>
}

/** Whether an error is Redis' NOSCRIPT (the script cache was flushed): answered by EVAL. @internal */
export const isNoScript = (error: unknown): boolean =>
  error instanceof Error && error.message.startsWith("NOSCRIPT")
