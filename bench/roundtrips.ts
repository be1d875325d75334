/**
 * Round trips per lifecycle for every lock type: the Middleware's client (no-op enqueue) and server (no-op perform)
 * run one job at a time, counted twice: the commands our ioredis client sent (a spy on `sendCommand`) and the
 * top-level commands Redis ran (INFO commandstats `calls` of EVALSHA/EVAL; the commands inside the scripts show up
 * separately, as script calls). Also each lifecycle's Redis time (script usec) and how many `redis.call`s it made.
 */
import { Redis as IORedis } from "ioredis"
import * as Effect from "effect/Effect"
import type { Job } from "../dist/Job.js"
import { JobQueue } from "../dist/JobQueue.js"
import * as LockOptions from "../dist/Options.js"
import * as LockType from "../dist/LockType.js"
import * as Middleware from "../dist/Middleware.js"
import * as Redis from "../dist/Redis.js"
import { jidFor, noQueue } from "./contenders.js"
import { delta, type Probe, round, split, spyCommands } from "./harness.js"

export interface Row {
  readonly lockType: LockType.LockType
  /** Lock phases of one lifecycle: lock at enqueue, handoff, lock before perform, release(s). */
  readonly phases: ReadonlyArray<string>
  readonly clientCommandsPerLifecycle: number
  readonly serverRoundTripsPerLifecycle: number
  readonly scriptCallsPerLifecycle: number
  readonly redisUsecPerLifecycle: number
  readonly commands: Readonly<Record<string, number>>
}

const phasesOf: Record<LockType.LockType, ReadonlyArray<string>> = {
  until_executing: ["lock (enqueue)", "release (before perform)"],
  until_executed: ["lock (enqueue)", "release (after perform)"],
  until_expired: ["lock (enqueue)"],
  while_executing: ["lock :RUN (before perform)", "release :RUN (after perform)"],
  while_executing_reject: ["lock :RUN (before perform)", "release :RUN (after perform)"],
  until_and_while_executing: ["lock (enqueue)", "handoff to :RUN (before perform)", "release :RUN (after perform)"]
}


export const run = async (options: {
  readonly url: string
  readonly probe: Probe
  readonly lifecycles: number
  readonly log: (line: string) => void
}): Promise<Array<Row>> => {
  const client = new IORedis(options.url, { lazyConnect: true, enableOfflineQueue: false })
  await client.connect()
  const sent = spyCommands(client)
  const redis = await Effect.runPromise(Redis.makeFromClient(client))
  const rows: Array<Row> = []
  try {
    let run = 0
    for (const lockType of Object.keys(phasesOf) as Array<LockType.LockType>) {
      const definition = LockOptions.unsafeMake({
        lock: lockType,
        // A type with no queue lock refuses lockTtl.
        lockTtl: LockType.phases(lockType).queue ? "30 seconds" : undefined,
        lockPrefix: `rt-${lockType}`
      })
      const r = ++run
      const job = (i: number): Job => ({ jid: jidFor(r, 0, i), worker: "BenchJob", queue: "default", args: [i] })
      sent.clear()
      const before = await options.probe.snapshot()
      await Effect.runPromise(
        Effect.forEach(
          Array.from({ length: options.lifecycles }, (_, i) => i),
          (i) =>
            Effect.flatMap(
              Middleware.client(definition)(job(i), () => Effect.void),
              (outcome) => Middleware.server(definition)(outcome.job, Effect.void)
            ),
          { discard: true }
        ).pipe(Effect.provideService(Redis.RedisService, redis), Effect.provideService(JobQueue, noQueue))
      )
      const after = await options.probe.snapshot()
      const d = delta(before, after)
      const parts = split(d, new Set(["evalsha", "eval"]))
      const clientCommands = Array.from(sent.values()).reduce((a, b) => a + b, 0)
      const row: Row = {
        lockType,
        phases: phasesOf[lockType],
        clientCommandsPerLifecycle: round(clientCommands / options.lifecycles, 3),
        serverRoundTripsPerLifecycle: round(parts.trips / options.lifecycles, 3),
        scriptCallsPerLifecycle: round(parts.inner / options.lifecycles, 2),
        redisUsecPerLifecycle: round(parts.tripUsec / options.lifecycles, 2),
        commands: Object.fromEntries(
          Object.entries(d.commands).map(([name, stat]) => [name, round(stat.calls / options.lifecycles, 2)])
        )
      }
      rows.push(row)
      options.log(
        `  ${lockType.padEnd(26)} phases ${row.phases.length}  sent ${row.clientCommandsPerLifecycle}  round trips ${row.serverRoundTripsPerLifecycle}  redis.calls ${row.scriptCallsPerLifecycle}  ${row.redisUsecPerLifecycle} us`
      )
    }
    return rows
  } finally {
    await client.quit()
  }
}
