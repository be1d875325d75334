// scratch: profile one contender (argv[2]) at c=64 for a few seconds; prints the top self-time functions
import { Session } from "node:inspector/promises"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as RedisServer from "../dist/RedisServer.js"
import * as Contenders from "./contenders.js"
const id = process.argv[2] ?? "ours-middleware"
const scope = Effect.runSync(Scope.make())
const server = await Effect.runPromise(Scope.extend(RedisServer.start, scope))
const conns = await Contenders.make(server.url, { enableAutoPipelining: false, bullDb: 1 })
const c = conns.contenders.find((x) => x.id === id)!
await c.run(64, 1500)
const session = new Session()
session.connect()
await session.post("Profiler.enable")
await session.post("Profiler.setSamplingInterval", { interval: 50 })
await session.post("Profiler.start")
const w = await c.run(64, 4000)
const { profile } = await session.post("Profiler.stop") as any
console.log(JSON.stringify(w).slice(0, 300))
const self = new Map<string, number>()
const byId = new Map<number, any>(profile.nodes.map((n: any) => [n.id, n]))
const dt = new Map<number, number>()
profile.samples.forEach((s: number, i: number) => dt.set(s, (dt.get(s) ?? 0) + (profile.timeDeltas[i] ?? 0)))
let total = 0
for (const [nid, t] of dt) {
  const n = byId.get(nid)
  const f = n.callFrame
  const key = `${f.functionName || "(anon)"} ${f.url.replace(/.*node_modules\//, "nm/").replace(/.*\/dist\//, "dist/")}:${f.lineNumber}`
  self.set(key, (self.get(key) ?? 0) + t); total += t
}
const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, 45)
for (const [k, t] of top) console.log((t / total * 100).toFixed(1).padStart(5) + "%", k)
const groups = new Map<string, number>()
for (const [k, t] of self) {
  const g = k.includes("nm/effect/") ? "effect" : k.includes("nm/ioredis") || k.includes("redis-parser") ? "ioredis" : k.includes("dist/") ? "ours" : k.startsWith("(garbage") ? "gc" : k.startsWith("(idle") ? "idle" : "other"
  groups.set(g, (groups.get(g) ?? 0) + t)
}
console.log([...groups].map(([g, t]) => `${g} ${(t / total * 100).toFixed(1)}%`).join("  "))
await conns.close()
await Effect.runPromise(Scope.close(scope, Exit.void))
process.exit(0)
