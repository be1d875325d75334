/**
 * The reaper over a large index (issue 11): N index members (1,000,000 by default) of which 1% are stale — locks whose
 * key is gone (their TTL passed), holders whose expiry passed inside a lock another holder keeps alive, and no-TTL
 * holders whose job the queue no longer knows — filled by a Lua loader that calls the scripts' own `acquire`. One
 * reaper pass must remove every stale member and holder and nothing else, with no script call over 5 ms of Redis
 * time (SLOWLOG at 5 ms stays empty). Reports members walked and reaped per second.
 *
 *   npm run bench -- --reaper [--members=1000000]     writes bench/results/reaper.md
 */
import { readFileSync, writeFileSync } from "node:fs"
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { JobQueue } from "../dist/JobQueue.js"
import * as Reaper from "../dist/Reaper.js"
import * as Redis from "../dist/Redis.js"
import * as RedisServer from "../dist/testing/RedisServer.js"

const prefix = "reap"
const hourMs = 3_600_000

// Kind of lock i, by i % 200: 0 → its TTL is 1 ms (the key is gone: a stale member); 1 → two holders, one whose
// expiry passes (a stale holder); 2 → no TTL and a job the queue forgot (an orphan); else a live lock (1 h TTL).
const loader = () => `${readFileSync(new URL("../lua/lib/prelude.lua", import.meta.url), "utf8")}
-- KEYS[1] <prefix>:digests   ARGV prefix, from, to
local ms, micros = now()
for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  local digest = ARGV[1] .. ':' .. string.sub(redis.sha1hex('d' .. i), 1, 32)
  local key = digest .. ':LOCKED'
  local kind = i % 200
  if kind == 0 then
    acquire(key, KEYS[1], digest, 'gone' .. i, 1, 1, 0, '', '', ms, micros)
  elseif kind == 1 then
    acquire(key, KEYS[1], digest, 'live' .. i, 2, ${hourMs}, 0, '', '', ms, micros)
    acquire(key, KEYS[1], digest, 'ended' .. i, 2, 1, 0, '', '', ms, micros)
  elseif kind == 2 then
    acquire(key, KEYS[1], digest, 'orphan' .. i, 1, 0, 0, '', '', ms - 60000, micros, '"default"')
  else
    acquire(key, KEYS[1], digest, 'live' .. i, 1, ${hourMs}, 0, '', '', ms, micros)
  end
end
return 1`

export const main = async (log: (line: string) => void, members: number): Promise<void> => {
  const scope = Effect.runSync(Scope.make())
  try {
    const server = await Effect.runPromise(Scope.provide(RedisServer.start, scope))
    const admin = new IORedis(server.url, { lazyConnect: true })
    await admin.connect()
    const sha = String(await admin.script("LOAD", loader()))
    const started = performance.now()
    const chunk = 5000
    for (let from = 0; from < members; from += chunk) {
      await admin.evalsha(sha, 1, `${prefix}:digests`, prefix, from, Math.min(members, from + chunk) - 1)
    }
    log(`filled ${members} index members in ${((performance.now() - started) / 1000).toFixed(1)} s`)
    // The 1 ms TTLs pass.
    await new Promise((resolve) => setTimeout(resolve, 50))
    const stale = { members: 0, holders: 0, orphans: 0 }
    for (let i = 0; i < members; i++) {
      const kind = i % 200
      if (kind === 0) stale.members++
      else if (kind === 1) stale.holders++
      else if (kind === 2) stale.orphans++
    }
    const client = new IORedis(server.url, { lazyConnect: true, enableOfflineQueue: false })
    await client.connect()
    const store = await Effect.runPromise(Redis.makeFromClient(client, { timeout: "30 seconds" }))
    // Counted from here: the pass alone (not the fill, not the scripts' load).
    await admin.config("SET", "slowlog-log-slower-than", "5000")
    await admin.slowlog("RESET")
    await admin.config("RESETSTAT")
    // The queue knows every job but the orphans.
    const queue = JobQueue.of({
      push: () => Effect.void,
      schedule: () => Effect.void,
      remove: () => Effect.succeed(false),
      kill: () => Effect.void,
      exists: (jobs) => Effect.succeed(jobs.map(({ jid }) => (jid.startsWith("orphan") ? "gone" : "exists")))
    })
    const t0 = performance.now()
    const pass = await Effect.runPromise(
      Reaper.runOnce({ prefix, grace: "30 seconds" }).pipe(
        Effect.provideService(Redis.RedisService, store),
        Effect.provideService(JobQueue, queue)
      )
    )
    const seconds = (performance.now() - t0) / 1000
    const slowlog = (await admin.slowlog("GET", 100)) as Array<[number, number, number, Array<string>]>
    // Reap steps are `EVALSHA <sha> 1 <prefix>:digests …`; the rest are the lease claims and the orphans' unlocks.
    const slowSteps = slowlog.filter(([, , , command]) => command[2] === "1" && command[3] === `${prefix}:digests`).length
    const slow = slowlog.length
    for (const [, , usec, command] of slowlog) log(`  slow: ${usec} µs ${command.slice(0, 1).concat(command.slice(2)).join(" ")}`)
    const stats = String(await admin.info("commandstats"))
    const evalsha = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats)
    const evalshaCalls = Number(evalsha?.[1] ?? 0)
    // The control, on the same server right after: as many calls of a script that does nothing but read the clock.
    // Calls of it over 5 ms are the machine's, not the reaper's.
    await admin.slowlog("RESET")
    const trivial = String(await client.script("LOAD", "return redis.call('TIME')"))
    for (let i = 0; i < pass.steps; i += 50) {
      await Promise.all(Array.from({ length: Math.min(50, pass.steps - i) }, () => client.evalsha(trivial, 0)))
    }
    const controlSlow = ((await admin.slowlog("GET", 100)) as Array<unknown>).length
    const left = await admin.zcard(`${prefix}:digests`)
    const reaped = pass.members + pass.holders + pass.orphans
    const exact = pass.members === stale.members && pass.holders === stale.holders &&
      pass.orphans === stale.orphans && left === members - stale.members - stale.orphans
    const lines = [
      `Run ${new Date().toISOString()}: ${members} index members, 1% stale: ${stale.members} whose lock is gone, ` +
      `${stale.holders} ended holders in live locks, ${stale.orphans} orphans (no TTL, job unknown to the queue).`,
      "",
      "| measure | value |",
      "| --- | --- |",
      `| one pass | ${seconds.toFixed(1)} s, ${pass.steps} steps of 100 members |`,
      `| members walked per second | ${Math.round(pass.scanned / seconds)} |`,
      `| reaped per second (members + holders + orphans) | ${Math.round(reaped / seconds)} |`,
      `| removed | ${pass.members} members whose lock was gone, ${pass.holders} ended holders, ${pass.orphans} ` +
      "orphans (each with its lock and member) |",
      `| exactly the stale ones | ${exact ? "yes" : "**no**"} (index left: ${left}) |`,
      `| script calls over 5 ms of Redis time (SLOWLOG at 5 ms) | ${slowSteps} of ${pass.steps} reap steps; ${slow - slowSteps} ` +
      `of the other ${evalshaCalls - pass.steps} calls (lease claims, orphans' unlocks); control: ${controlSlow} of ` +
      `${pass.steps} calls of a script that only reads TIME |`,
      `| EVALSHA calls, mean Redis time per call | ${evalsha?.[1] ?? "?"}, ${evalsha?.[3] ?? "?"} µs |`
    ]
    for (const line of lines) log(line)
    writeFileSync(new URL("./results/reaper.md", import.meta.url), `# Reaper over a large index\n\n${lines.join("\n")}\n`)
    client.disconnect()
    admin.disconnect()
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
