/**
 * The Lua scripts: read once from `lua/`, run by EVALSHA, reloaded by EVAL when Redis lost them (NOSCRIPT).
 *
 * @internal
 */
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"

/** @internal */
export interface Script {
  readonly name: string
  readonly source: string
  readonly sha: string
}

/** @internal */
export type ScriptName = "lock" | "unlock" | "renew" | "handoff"

const read = (file: string): string => readFileSync(new URL(`../../lua/${file}`, import.meta.url), "utf8")

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

/** @internal */
export const run = (
  client: ScriptClient,
  script: Script,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string | number>
): Promise<unknown> =>
  client.evalsha(script.sha, keys.length, ...keys, ...args).catch((error: unknown) => {
    if (error instanceof Error && error.message.startsWith("NOSCRIPT")) {
      return client.eval(script.source, keys.length, ...keys, ...args)
    }
    throw error
  })
