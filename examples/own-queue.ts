/**
 * The README's "Your own queue": the two wrappers around a queue you already run. `npm run typecheck` checks
 * it; `Broker` stands for your queue's client.
 */
import * as Effect from "effect/Effect"
import { type Job, JobQueue, UniqueJob } from "effect-unique-jobs"

/** Your queue's client, reduced to what the wrappers need. */
export interface Broker {
  /** Stores `payload` as the job with id `id`; the worker later receives `payload` as it was stored. */
  readonly add: (id: string, payload: Job.Job) => Promise<void>
}

const RebuildReport = UniqueJob.unsafeMake({ worker: "RebuildReportJob", lock: "until_and_while_executing" })

/** Producer: push the stamped job (it carries `lockDigest`) under the stamped jid. */
export const enqueue = (broker: Broker, reportId: number) =>
  RebuildReport.client(RebuildReport.job([reportId]), (stamped) =>
    Effect.tryPromise({
      try: () => broker.add(stamped.jid, stamped),
      catch: (cause) => new JobQueue.QueueError({ operation: "push", jid: stamped.jid, reason: "add failed", cause })
    }))

/** Worker: the job exactly as the queue delivered it, same jid and `lockDigest`. */
export const perform = (stamped: Job.Job) =>
  RebuildReport.server(stamped, Effect.log(`rebuilding report ${String(stamped.args[0])}`))

/** When the queue gives a job up for good (retries exhausted): frees the lock it would otherwise keep. */
export const died = (stamped: Job.Job) => RebuildReport.died(stamped)
