/**
 * The admin UI's pages, rendered on the server from what `Locks`, `Reaper` and `History` answered. Every value is
 * put in through `html`, so job arguments, jids and digests show as text whatever they hold; no page has a script,
 * and every change is a POST form carrying the CSRF token.
 *
 * @internal
 */
import * as History from "../History.js"
import { dataCut, type JobDetails, type JobRef, jobStates } from "../JobQueue.js"
import type * as Locks from "../Locks.js"
import type { Holder } from "../Redis.js"
import { type Html, html, type Part } from "./Html.js"

/** What every page needs to know of its request. @internal */
export interface Frame {
  /** The path the UI is mounted under ("" at the root). */
  readonly base: string
  readonly prefix: string
  /**
   * Whether this request may change anything: forms are shown only then, and the "read-only" badge otherwise.
   * Undefined on a refusal answered before the request's access was known: no badge either way.
   */
  readonly canChange: boolean | undefined
  readonly csrf: string
}

/** The filters of the locks page, as decoded from its query. @internal */
export interface Filters {
  readonly pattern: string
  readonly type: string
  readonly queue: string
  readonly worker: string
  /** Part of the arguments `lockInfo` stored (their JSON text); "" for any. */
  readonly args: string
  /** Minutes: only locks whose oldest holder is at least this old. */
  readonly age: number | undefined
  readonly stale: boolean
  /** A job state, or "live" or "over": only locks a holder's job of which is in it (asked of the queue). */
  readonly job: string
  readonly cursor: string
  readonly count: number
}

/** What `?job=` takes: a state, "live" (still to run or running) or "over" (completed, failed or gone). @internal */
export const jobFilters: ReadonlyArray<string> = [...jobStates, "live", "over"]

const overStates: ReadonlySet<string> = new Set(["completed", "failed", "gone"])

/** Whether a job in `state` passes the `?job=` filter `filter`. @internal */
export const jobMatches = (filter: string, state: string): boolean =>
  filter === "live"
    ? !overStates.has(state) && state !== "unknown"
    : filter === "over"
    ? overStates.has(state)
    : state === filter

/**
 * The holders' jobs as the queue told of them, by `jobKey`: undefined for a job not its to tell (another queue's).
 * @internal
 */
export interface JobsView {
  /** Whether a queue that describes jobs is in the UI's context. */
  readonly describer: boolean
  readonly details: ReadonlyMap<string, JobDetails | undefined>
  /** What the queue answered when it failed. */
  readonly error?: string | undefined
}

/** How `JobsView.details` is keyed. @internal */
export const jobKey = (job: JobRef): string => `${job.queue}\0${job.jid}`

/** The job a holder is: its jid and its queue (its entry's, else `lockInfo`'s); undefined when it names none. @internal */
export const jobRefOf = (holder: Holder): JobRef | undefined => {
  const queue = holderQueue(holder)
  return queue !== "" ? { jid: holder.jid, queue } : undefined
}

/** The jobs of `holders`, each once. @internal */
export const jobRefsOf = (holders: Iterable<Holder>): Array<JobRef> => {
  const refs = new Map<string, JobRef>()
  for (const holder of holders) {
    const ref = jobRefOf(holder)
    if (ref !== undefined) refs.set(jobKey(ref), ref)
  }
  return [...refs.values()]
}

/** The states of a row's holders' jobs, each once, as the queue told them. @internal */
export const jobStatesOf = (row: Locks.Row, jobs: JobsView): Array<string> => [
  ...new Set(
    row.lock.holders.flatMap((holder) => {
      const ref = jobRefOf(holder)
      const details = ref === undefined ? undefined : jobs.details.get(jobKey(ref))
      return details === undefined ? [] : [details.state]
    })
  )
]

/** One page of the locks list: the rows that passed the filters, and how many index members the page read. @internal */
export interface LocksView {
  readonly filters: Filters
  readonly rows: ReadonlyArray<Locks.Row>
  readonly scanned: number
  readonly next: string
  /** Index members read but not listed: the UI could not act on them (a name too long for an address). */
  readonly omitted: number
  /** The listed holders' jobs, when the UI has a queue that describes them. */
  readonly jobs?: JobsView | undefined
  /**
   * Locks of the page the arguments filter could not search: no holder read matched, and a holder's stored info was
   * cut (over the per-entry byte cap), its arguments not read. Not listed, counted.
   */
  readonly notSearched: number
}

export const lockTypes = ["until_executed", "until_executing", "until_expired", "while_executing", "until_and_while_executing"]

const layout = (frame: Frame, title: string, active: string, body: Part, refresh?: number): Html =>
  html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
${refresh === undefined ? "" : html`<meta http-equiv="refresh" content="${String(refresh)}">
`}<title>${title} · unique jobs</title>
<link rel="stylesheet" href="${frame.base}/assets/style.css">
</head>
<body>
<header>
<strong>unique jobs</strong> <span class="prefix">prefix ${frame.prefix}</span>
<nav>${
    [["locks", "Locks"], ["reaper", "Reaper"], ["metrics", "Metrics"]].map(([path, name]) =>
      html`<a href="${frame.base}/${path}"${path === active ? html` aria-current="page"` : ""}>${name}</a> `
    )
  }</nav>
${frame.canChange === false ? html`<span class="readonly">read-only</span>` : ""}
</header>
<main>
${body}
</main>
</body>
</html>
`

const csrfField = (frame: Frame) => html`<input type="hidden" name="_csrf" value="${frame.csrf}">`

/** Milliseconds as the largest two units: "2m 05s", "3h 10m", "40ms". */
export const span = (ms: number): string => {
  if (ms < 0) return `-${span(-ms)}`
  if (ms < 1000) return `${Math.round(ms)}ms`
  const s = Math.floor(ms / 1000)
  if (s < 60) return `${s}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`
  const h = Math.floor(m / 60)
  if (h < 48) return `${h}h ${String(m % 60).padStart(2, "0")}m`
  return `${Math.floor(h / 24)}d ${h % 24}h`
}

const time = (ms: number | undefined) => (ms === undefined || ms === 0 ? "-" : new Date(ms).toISOString())

const infoOf = (holder: Holder): Record<string, unknown> =>
  typeof holder.info === "object" && holder.info !== null ? holder.info as Record<string, unknown> : {}

const textOf = (value: unknown): string => (typeof value === "string" ? value : value === undefined ? "" : JSON.stringify(value))

/** The queue a lock's holders name (their entry's `q`, else `lockInfo`'s), or "". @internal */
export const queueOf = (row: Locks.Row): string => {
  for (const holder of row.lock.holders) {
    if (holder.queue !== undefined || infoOf(holder).queue !== undefined) return holderQueue(holder)
  }
  return ""
}

/** A holder's queue: its entry's `q` (a queue lock), else the one `lockInfo` stored (a run lock's too), or "". @internal */
export const holderQueue = (holder: Holder): string => textOf(holder.queue ?? infoOf(holder).queue)

/** A holder's arguments as `lockInfo` stored them, as JSON text; undefined when none were read. @internal */
export const holderArgs = (holder: Holder): string | undefined => {
  const args = infoOf(holder).args
  return args === undefined ? undefined : JSON.stringify(args) ?? String(args)
}

/** The arguments of a lock's first holder that has some, as JSON text, or "". @internal */
export const argsOf = (row: Locks.Row): string => {
  for (const holder of row.lock.holders) {
    const args = holderArgs(holder)
    if (args !== undefined) return args
  }
  return ""
}

/**
 * Whether a lock's arguments contain `needle`: "match" when a holder read has it, "cut" when none has but a holder's
 * stored info was cut (its arguments not read, so not searched), else "no". @internal
 */
export const argsMatch = (row: Locks.Row, needle: string): "match" | "cut" | "no" => {
  if (row.lock.holders.some((h) => holderArgs(h)?.includes(needle) === true)) return "match"
  return row.lock.holders.some((h) => h.truncated !== undefined) ? "cut" : "no"
}

/** Text cut to `max` characters with an ellipsis (by code point: no lone surrogate). @internal */
export const abbreviate = (text: string, max: number): string => {
  const points = Array.from(text)
  return points.length <= max ? text : `${points.slice(0, max - 1).join("")}…`
}

/** The worker `lockInfo` stored, or "". @internal */
export const workerOf = (row: Locks.Row): string => {
  for (const holder of row.lock.holders) {
    const worker = infoOf(holder).worker
    if (worker !== undefined) return textOf(worker)
  }
  return ""
}

/** When the oldest holder took its place, if any holds one. @internal */
export const sinceOf = (row: Locks.Row): number | undefined => {
  const times = row.lock.holders.map((h) => h.lockedAt).filter((t) => t > 0)
  return times.length === 0 ? undefined : Math.min(...times)
}

// What is left of a lock: its holders' nearest lease (a run lock), else its key's TTL.
const leftOf = (lock: Locks.Row["lock"]): string => {
  if (lock.holders.length === 0) return "gone"
  const leases = lock.holders.map((h) => h.leaseUntil).filter((l): l is number => l !== undefined && l > 0)
  if (leases.length > 0) return `lease ${span(Math.min(...leases) - lock.now)}`
  return lock.ttlMs === undefined ? "until released" : `ttl ${span(lock.ttlMs)}`
}

const lockLink = (frame: Frame, digest: string, text: Part) =>
  html`<a href="${frame.base}/lock?digest=${encodeURIComponent(digest)}">${text}</a>`

/** The query of a page of the list: its filters, from `cursor`. @internal */
export const queryOf = (filters: Filters, cursor: string): string => {
  const query = new URLSearchParams()
  query.set("pattern", filters.pattern)
  if (filters.type !== "") query.set("type", filters.type)
  if (filters.queue !== "") query.set("queue", filters.queue)
  if (filters.worker !== "") query.set("worker", filters.worker)
  if (filters.args !== "") query.set("args", filters.args)
  if (filters.age !== undefined) query.set("age", String(filters.age))
  if (filters.stale) query.set("stale", "1")
  if (filters.job !== "") query.set("job", filters.job)
  query.set("count", String(filters.count))
  if (cursor !== "0") query.set("cursor", cursor)
  return query.toString()
}

// The arguments, abbreviated (the whole text in its title, and on the lock page).
const argsCell = (row: Locks.Row): Html => {
  const args = argsOf(row)
  return html`<td class="args"${args.length > 24 ? html` title="${abbreviate(args, 1024)}"` : ""}>${abbreviate(args, 24)}</td>`
}

// Which of a digest's two locks a row is, first in its cell: a long name is cut before its ":RUN" shows, so without it
// the queue lock's row and the run lock's read the same.
const kindLabel = (phase: "queue" | "run") => html`<span class="kind kind-${phase}">${phase}</span>`

/** @internal */
export const locksPage = (frame: Frame, view: LocksView, message?: Html): Html => {
  const f = view.filters
  const jobs = view.jobs
  const describer = jobs?.describer === true
  const form = html`<form method="get" action="${frame.base}/locks" class="filters">
<label>pattern <input name="pattern" value="${f.pattern}" size="32"></label>
<label>type <select name="type"><option value="">any</option>${
    [...lockTypes, "unknown"].map((type) => html`<option${type === f.type ? html` selected` : ""}>${type}</option>`)
  }</select></label>
<label>queue <input name="queue" value="${f.queue}" size="12"></label>
<label>worker <input name="worker" value="${f.worker}" size="12"></label>
<label>arguments <input name="args" value="${f.args}" size="16" maxlength="256"></label>
<label>older than <input name="age" value="${f.age === undefined ? "" : String(f.age)}" size="4" inputmode="numeric"> min</label>
<label><input type="checkbox" name="stale" value="1"${f.stale ? html` checked` : ""}> stale only</label>
${
    describer
      ? html`<label>job <select name="job"><option value="">any</option>${
        jobFilters.map((state) => html`<option${state === f.job ? html` selected` : ""}>${state}</option>`)
      }</select></label>
`
      : ""
  }<label>per page <input name="count" value="${String(f.count)}" size="5" inputmode="numeric"></label>
<button type="submit">Filter</button>
</form>`
  const rows = view.rows.map((row) => {
    const since = sinceOf(row)
    return html`<tr data-name="${row.entry.name}">
<td class="digest" title="${row.entry.name}">${kindLabel(row.entry.phase)} ${lockLink(frame, row.entry.digest, row.entry.name)}</td>
<td>${row.type}</td>
<td class="num">${String(row.lock.size)}${
      row.lock.size > row.lock.holders.length
        ? html` <small>(first ${String(row.lock.holders.length)} read)</small>`
        : ""
    }</td>
<td>${queueOf(row)}</td>
<td>${workerOf(row)}</td>
${argsCell(row)}
<td>${since === undefined ? "-" : html`<time datetime="${time(since)}">${span(row.lock.now - since)} ago</time>`}</td>
<td>${leftOf(row.lock)}</td>
<td>${row.stale ? html`<span class="stale">stale</span>` : ""}${row.notOurs === undefined ? "" : html`<span class="foreign" title="${row.notOurs}">not ours</span>`}</td>
${describer ? html`<td class="job-state">${jobStatesOf(row, jobs!).join(", ") || "-"}</td>\n` : ""}</tr>`
  })
  const paging = html`<p class="paging">read ${String(view.scanned)} index member(s), ${String(view.rows.length)} shown · ${
    view.notSearched === 0
      ? ""
      : html`<span class="not-searched">${String(view.notSearched)} not searched: their stored lock info was cut (over the per-entry byte cap), so their arguments were not read</span> · `
  }${
    view.omitted === 0
      ? ""
      : html`<span class="omitted">${String(view.omitted)} lock(s) on this page not shown: a name too long for an address (the reaper, or <code>unique-jobs locks del PATTERN</code>, acts on them)</span> · `
  }${
    f.cursor === "0" ? "" : html`<a href="${frame.base}/locks?${queryOf(f, "0")}">first page</a> · `
  }${
    view.next === "0"
      ? html`<span class="end">end of the index</span>`
      : html`<a rel="next" href="${frame.base}/locks?${queryOf(f, view.next)}">next page</a>`
  }</p>`
  return layout(
    frame,
    "Locks",
    "locks",
    html`<h1>Locks</h1>
${message ?? ""}
${form}
${jobs?.error === undefined ? "" : html`<p class="error job-error">The queue did not answer about the jobs: ${jobs.error}</p>`}
${bulkLink(frame, view)}
${paging}
<div class="scroll">
<table class="locks">
<thead><tr><th>lock</th><th>type</th><th>holders</th><th>queue</th><th>worker</th><th>arguments</th><th>since</th><th>left</th><th></th>${describer ? html`<th>job</th>` : ""}</tr></thead>
<tbody>
${rows}
</tbody>
</table>
</div>
${view.rows.length === 0 ? html`<p class="empty">No lock on this page matches.</p>` : ""}
${paging}`
  )
}

// The link to a lock's next page of holders (the other lock's holders start again from their first page).
const nextHolders = (frame: Frame, digest: string, phase: "queue" | "run", cursor: string) =>
  cursor === "0"
    ? ""
    : html` · <a rel="next" class="holders-next" href="${frame.base}/lock?digest=${
      encodeURIComponent(digest)
    }&amp;${phase}Cursor=${cursor}">next page of holders</a>`

const holdersTable = (
  frame: Frame,
  digest: string,
  phase: "queue" | "run",
  fetched: Locks.Digest["queue"],
  jobs?: JobsView
): Html => {
  if (fetched.holders.length === 0 && fetched.cursor === "0") return html`<p class="empty">No ${phase} lock held.</p>`
  const rows = fetched.holders.map((holder) =>
    html`<tr data-jid="${holder.jid}">
<td class="jid">${jobLink(holder, jobs)}</td>
<td>${time(holder.lockedAt)}</td>
<td>${holder.expiresAt === undefined ? "-" : html`${time(holder.expiresAt)} (${span(holder.expiresAt - fetched.now)})`}</td>
<td>${holder.leaseUntil === undefined ? "-" : html`${time(holder.leaseUntil)} (${span(holder.leaseUntil - fetched.now)})`}</td>
<td class="num">${holder.fence === 0 ? "-" : String(holder.fence)}</td>
<td>${holder.revokedAt === undefined ? "" : html`<span class="revoked">${time(holder.revokedAt)}</span>`}</td>
<td>${holderQueue(holder)}</td>
<td><pre class="info">${holder.info === undefined ? "" : JSON.stringify(holder.info, null, 2)}</pre>${
      holder.truncated === undefined
        ? ""
        : html`<small class="cut">entry of ${String(holder.truncated)} bytes, cut: its leading fields only</small>`
    }</td>
<td class="actions">${
      // A revoked holder has nothing left to unlock: it keeps its place until it stops.
      frame.canChange && holder.revokedAt === undefined && encodeURIComponent(holder.jid).length <= 4096
        ? html`<form method="post" action="${frame.base}/lock/unlock">${csrfField(frame)}<input type="hidden" name="digest" value="${digest}"><input type="hidden" name="jid" value="${holder.jid}"><button type="submit" class="unlock">Unlock</button></form>`
        : ""
    }</td>
</tr>`
  )
  return html`<p>${
    fetched.ttlMs === undefined ? "no TTL" : `key TTL ${span(fetched.ttlMs)}`
  } · index score ${fetched.indexScore === undefined ? "not in the index" : time(fetched.indexScore)}</p>
<p class="holders-count">${String(fetched.size)} holder(s), showing ${
    fetched.holders.length === fetched.size && fetched.cursor === "0" ? "all" : `${fetched.holders.length} on this page`
  }${nextHolders(frame, digest, phase, fetched.cursor)}</p>
<div class="scroll">
<table class="holders">
<thead><tr><th>jid</th><th>locked at</th><th>expires</th><th>lease until</th><th>fence</th><th>revoked</th><th>queue</th><th>lock info</th><th></th></tr></thead>
<tbody>
${rows}
</tbody>
</table>
</div>`
}

const jobAnchor = (jid: string) => `job-${encodeURIComponent(jid)}`

// A holder's jid, linked to its job's section when the queue told of its job.
const jobLink = (holder: Holder, jobs: JobsView | undefined): Part => {
  const ref = jobRefOf(holder)
  return jobs === undefined || ref === undefined || jobs.details.get(jobKey(ref)) === undefined
    ? holder.jid
    : html`<a class="job-link" href="#${jobAnchor(holder.jid)}">${holder.jid}</a>`
}

const jobRow = (label: string, value: Part) => html`<tr><th>${label}</th><td>${value}</td></tr>`

// expiresAt: when the last of the job's holds ends by itself; undefined when one has no expiry (an orphan once its job
// is gone: only the reaper frees it).
const jobCard = (ref: JobRef, details: JobDetails | undefined, expiresAt: number | undefined): Html =>
  details === undefined
    ? html`<section class="job" id="${jobAnchor(ref.jid)}" data-jid="${ref.jid}" data-state="">
<h3><span class="jid">${ref.jid}</span> · queue ${ref.queue}</h3>
<p class="empty">Not this UI's to tell: its queue is not one it was given.</p>
</section>`
    : html`<section class="job" id="${jobAnchor(ref.jid)}" data-jid="${ref.jid}" data-state="${details.state}">
<h3><span class="jid">${ref.jid}</span> <span class="job-state state-${details.state}">${details.state}</span></h3>
${
      details.state === "gone"
        ? html`<p class="empty">Queue ${ref.queue} holds no such job: it was removed, or never added. ${
          expiresAt === undefined
            ? html`Its lock has no expiry, so it is an orphan: nothing else ends it, and a reaper pass that asks the queue frees it.`
            : html`Its lock is no orphan: it expires at ${time(expiresAt)} (its lockTtl; until_expired keeps a lock past its job on purpose), and the reaper leaves it until then.`
        }</p>`
        : html`<table class="job-details">
${jobRow("queue", ref.queue)}
${details.name === undefined ? "" : jobRow("name", details.name)}
${jobRow("attempts made", String(details.attemptsMade ?? 0))}
${jobRow("added", time(details.addedAt))}
${details.runsAt === undefined ? "" : jobRow("runs at", time(details.runsAt))}
${jobRow("processed", time(details.processedOn))}
${jobRow("finished", time(details.finishedOn))}
${details.failedReason === undefined || details.failedReason === "" ? "" : jobRow("failed reason", html`<pre class="info">${details.failedReason}</pre>`)}
${
          details.data === undefined
            ? ""
            : jobRow(
              "data",
              html`<pre class="info job-data">${details.data}</pre>${
                dataCut(details)
                  ? html`<small class="cut">data of ${String(details.dataBytes)} bytes, cut: its first ${String(Buffer.byteLength(details.data))} shown</small>`
                  : ""
              }`
            )
        }
</table>`
    }
</section>`

// When the job's holds end by themselves: the latest expiry, undefined when one of them has none.
const expiryOf = (ref: JobRef, holders: ReadonlyArray<Holder>): number | undefined => {
  let latest = 0
  for (const holder of holders) {
    const own = jobRefOf(holder)
    if (own === undefined || jobKey(own) !== jobKey(ref)) continue
    if (holder.expiresAt === undefined) return undefined
    latest = Math.max(latest, holder.expiresAt)
  }
  return latest === 0 ? undefined : latest
}

// The holders' jobs: a section each, or why there is none.
const jobSection = (shown: Locks.Digest, jobs: JobsView | undefined): Part => {
  const holders = [...shown.queue.holders, ...shown.run.holders]
  if (jobs === undefined || holders.length === 0) return ""
  if (!jobs.describer) {
    return html`<h2>Job</h2>
<p class="job-none">This UI has no queue to ask about the holders' jobs: serve it with one in its context (<code>BullMQ.layer</code>), or run <code>unique-jobs web --bullmq-queue NAME</code>.</p>`
  }
  const refs = jobRefsOf(holders)
  return html`<h2>Job</h2>
${jobs.error === undefined ? "" : html`<p class="error job-error">The queue did not answer: ${jobs.error}</p>`}
${
    refs.length === 0
      ? html`<p class="job-none">No holder names its queue (the lock was taken without one), so its job cannot be asked for.</p>`
      : jobs.error === undefined
      ? refs.map((ref) => jobCard(ref, jobs.details.get(jobKey(ref)), expiryOf(ref, holders)))
      : ""
  }`
}
// The digest's activity log (lockEvents), newest first: every field through `html`, so a jid shows as text.
const eventsTable = (events: Locks.Digest["events"]): Html =>
  html`<h2>Recent events</h2>
${
    events.length === 0
      ? html`<p class="events-none">none kept: this digest's workers do not set <code>lockEvents</code>, or nothing happened to it lately (its log is kept 24 hours after its last event, 1 hour once the digest is no longer held)</p>`
      : html`<table class="events">
<thead><tr><th>at</th><th>event</th><th>phase</th><th>jid</th><th>holder</th><th>by</th></tr></thead>
<tbody>
${
        events.map((event) =>
          html`<tr><td>${time(event.at)}${
            // Refusals in a row folded into one entry: how many, since when (the row's time and jid are the last's).
            event.count === undefined
              ? ""
              : html` <small class="repeats">(since ${time(event.firstAt)})</small>`
          }</td><td class="event">${event.event}${
            event.count === undefined ? "" : html` <span class="count">×${String(event.count)}</span>`
          }</td><td>${event.phase}</td><td class="jid">${
            event.jid === "" ? html`<small>(its key had expired)</small>` : event.jid
          }</td><td class="jid">${event.holder ?? ""}</td><td>${event.who ?? ""}</td></tr>`
        )
      }
</tbody>
</table>`
  }`

/** @internal */
export const lockPage = (frame: Frame, shown: Locks.Digest, message?: Html, jobs?: JobsView): Html =>
  layout(
    frame,
    shown.digest,
    "locks",
    html`<h1 class="digest">${shown.digest}</h1>
${message ?? ""}
${shown.notOurs.map((n) => html`<p class="foreign">${n.lock}: ${n.reason}</p>`)}
<h2>Queue lock</h2>
${holdersTable(frame, shown.digest, "queue", shown.queue, jobs)}
<h2>Run lock</h2>
${holdersTable(frame, shown.digest, "run", shown.run, jobs)}
${jobSection(shown, jobs)}
${eventsTable(shown.events)}
${
      frame.canChange && (shown.queue.holders.length > 0 || shown.run.holders.length > 0)
        ? html`<p class="danger"><a class="delete" href="${confirmHref(frame, "delete", shown.digest)}">Delete this digest…</a> <small>Asks first, naming what goes. Queue-lock holders go at once; a running holder (live lease) is revoked: it keeps its place until it stops, so no second copy starts.</small></p>`
        : ""
    }
<p><a href="${frame.base}/locks">back to the locks</a></p>`
  )

const confirmHref = (frame: Frame, action: "delete" | "unlock", digest: string, jid?: string) =>
  `${frame.base}/lock/${action}/confirm?digest=${encodeURIComponent(digest)}${
    jid === undefined ? "" : `&jid=${encodeURIComponent(jid)}`
  }`

/**
 * What an unlock or delete did, as the page it redirects to gets it back (signed in its address): a reload shows it
 * again, dated, and repeats nothing. @internal
 */
export interface Result {
  readonly action: "unlock" | "delete"
  /** The jid unlocked (left out when too long for an address). */
  readonly jid?: string | undefined
  /** When it was done (Redis's clock, ms). */
  readonly at: number
  /** It found nothing to act on (a second submit, or gone since): nothing was done. */
  readonly nothing: boolean
  readonly removed: number
  readonly deleted: number
  readonly revoked: number
  /** The latest lease among the revoked holders. */
  readonly until?: number | undefined
  /** A bulk delete: the digests it deleted. */
  readonly locks?: number | undefined
  /** A bulk delete: the digests left alone, found not to be this library's locks by then. */
  readonly refused?: number | undefined
  /** A bulk delete: the digests left alone, their holders changed since the preview (one came or went). */
  readonly changed?: number | undefined
}

/** A change's result, in words. @internal */
export const resultMessage = (result: Result): Html => {
  const what = result.action === "unlock"
    ? `Unlocked ${result.jid ?? "a holder"}`
    : result.locks === undefined
    ? "Deleted"
    : result.nothing
    ? "Bulk delete"
    : `Deleted ${result.locks} digest(s)`
  return html`<div class="message" role="status"><strong>${what}</strong> at <time>${time(result.at)}</time>: ${
    result.nothing
      ? result.locks !== undefined
        ? "found nothing: none of the digests it listed was held any more (a second submit?), so nothing was done"
        : result.action === "delete"
        ? "found nothing: no job held this digest, so nothing was done"
        : "found nothing: it held no lock of this digest, so nothing was done"
      : result.removed === 0 && result.revoked === 0 && result.deleted === 0
        ? "nothing was held"
        : html`removed ${String(result.removed)} holder(s)${
          result.deleted > 0 ? html`, ${String(result.deleted)} lock(s) gone` : ""
        }${
          result.revoked > 0
            ? html`; revoked ${String(result.revoked)} running holder(s): each stops at its next renewal, and its place frees when it does (at ${
              time(result.until)
            } at the latest)`
            : ""
        }`
  }${
    result.refused === undefined || result.refused === 0
      ? ""
      : html`; left ${String(result.refused)} digest(s) alone: not this library's locks by then`
  }${
    result.changed === undefined || result.changed === 0
      ? ""
      : html`; left ${String(result.changed)} digest(s) alone: their holders changed after the preview, so none of them was touched`
  }</div>`
}

/** Whether a run lock's holder still runs: not revoked, and its lease (or expiry) not passed. @internal */
export const isRunning = (holder: Holder, now: number): boolean =>
  holder.revokedAt === undefined && (holder.leaseUntil ?? holder.expiresAt ?? Number.POSITIVE_INFINITY) > now

/**
 * Whether deleting the lock revokes the holder rather than removing it: its lease is live (and its expiry, if any,
 * not passed), as the removal script judges it; a holder revoked already stays revoked. @internal
 */
export const revokedOnDelete = (holder: Holder, now: number): boolean =>
  holder.leaseUntil !== undefined && holder.leaseUntil > now && (holder.expiresAt === undefined || holder.expiresAt > now)

// One digest's holders a confirmation names, each with what happens to it (with the digest, for a bulk preview).
const fateRows = (shown: Locks.Digest, jid: string | undefined, withDigest: boolean): Array<Html> =>
  (["queue", "run"] as const).flatMap((phase) =>
    shown[phase].holders.filter((h) => jid === undefined || h.jid === jid).map((h) => {
      const revoked = revokedOnDelete(h, shown[phase].now)
      return html`<tr data-jid="${h.jid}" data-digest="${shown.digest}" data-phase="${phase}" data-fate="${revoked ? "revoked" : "removed"}">${
        withDigest ? html`<td class="digest">${shown.digest}</td>` : ""
      }<td class="jid">${h.jid}</td><td>${phase}</td><td>${
        !revoked
          ? "removed at once"
          : h.revokedAt === undefined
          ? html`<strong>revoked</strong>: running (lease until ${time(h.leaseUntil)}); it keeps its place until it stops, and is told at its next renewal`
          : html`<strong>revoked</strong> already (at ${time(h.revokedAt)}): it keeps its place until it stops (lease until ${time(h.leaseUntil)})`
      }</td></tr>`
    })
  )

// The holders a confirmation names, each with what happens to it.
const fateTable = (shown: Locks.Digest, jid?: string): Html =>
  html`<table class="holders fates">
<thead><tr><th>jid</th><th>lock</th><th>what happens</th></tr></thead>
<tbody>${fateRows(shown, jid, false)}</tbody>
</table>`

const confirmForm = (frame: Frame, action: string, fields: Record<string, string>, label: string, cancel: string) =>
  html`<form method="post" action="${frame.base}${action}" class="danger">${csrfField(frame)}${
    Object.entries(fields).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`)
  }<button type="submit" class="confirm">${label}</button> <a href="${cancel}">cancel</a></form>`

const changedNote = (changed: boolean) =>
  changed
    ? html`<div class="message changed" role="status">The holders changed since you confirmed: nothing was done. Here is what holds it now.</div>`
    : ""

/** Deleting a digest, to confirm: what goes, and which running holders are revoked. @internal */
export const confirmDeletePage = (frame: Frame, shown: Locks.Digest, confirm: string, changed: boolean): Html => {
  const none = shown.queue.holders.length === 0 && shown.run.holders.length === 0
  const back = `${frame.base}/lock?digest=${encodeURIComponent(shown.digest)}`
  return layout(
    frame,
    `Delete ${shown.digest}?`,
    "locks",
    html`<h1>Delete this digest?</h1>
<p class="digest">${shown.digest}</p>
${changedNote(changed)}
${shown.notOurs.map((n) => html`<p class="foreign">${n.lock}: ${n.reason} (left alone)</p>`)}
${
      none
        ? html`<p class="empty">No job holds this digest: there is nothing to delete.</p>`
        : html`<p>Deleting removes these holders of its queue and run locks. A running holder is revoked, not removed: no second copy starts while it runs. Only the holders named here are confirmed: if another job holds it by then, you are asked again.</p>
${fateTable(shown)}
${frame.canChange ? confirmForm(frame, "/lock/delete", { digest: shown.digest, confirm }, "Delete", back) : ""}`
    }
<p><a href="${back}">back to the lock</a></p>`
  )
}

/** Unlocking a running holder, to confirm: it is revoked, and keeps its place until it stops. @internal */
export const confirmUnlockPage = (
  frame: Frame,
  shown: Locks.Digest,
  jid: string,
  confirm: string,
  changed: boolean
): Html => {
  const held = [...shown.queue.holders, ...shown.run.holders].some((h) => h.jid === jid)
  const back = `${frame.base}/lock?digest=${encodeURIComponent(shown.digest)}`
  return layout(
    frame,
    `Unlock ${jid}?`,
    "locks",
    html`<h1>Unlock <span class="jid">${jid}</span>?</h1>
<p class="digest">${shown.digest}</p>
${changedNote(changed)}
${
      held
        ? html`${fateTable(shown, jid)}
${frame.canChange ? confirmForm(frame, "/lock/unlock", { digest: shown.digest, jid, confirm }, "Unlock", back) : ""}`
        : html`<p class="empty">${jid} holds no lock of this digest: there is nothing to unlock.</p>`
    }
<p><a href="${back}">back to the lock</a></p>`
  )
}

/** The digests a page of the list shows that a bulk delete acts on: each once, none that is not ours. @internal */
export const bulkDigests = (rows: ReadonlyArray<Locks.Row>): Array<string> => [
  ...new Set(rows.filter((row) => row.notOurs === undefined).map((row) => row.entry.digest))
]

// The list page's way to the bulk preview: only where a change is possible and the page shows a lock to act on.
const bulkLink = (frame: Frame, view: LocksView) => {
  const digests = bulkDigests(view.rows)
  return frame.canChange && digests.length > 0
    ? html`<p class="danger bulk"><a class="bulk-delete" href="${frame.base}/locks/bulk/confirm?${
      queryOf(view.filters, view.filters.cursor)
    }">Delete the ${String(digests.length)} digest(s) this page shows…</a> <small>Asks first, naming every lock and the running holders it would revoke.</small></p>`
    : ""
}

/** What a bulk delete would do, as its preview read it: the digests it deletes, and what it leaves alone. @internal */
export interface BulkPreview {
  /** The filters, at the cursor of the page listed (read on past pages that showed nothing to delete). */
  readonly filters: Filters
  /** The cursor of the page after it ("0": the walk of the index ends with this page). */
  readonly next: string
  /** Index members read on the way, on pages before this one that showed nothing to delete. */
  readonly passed: number
  /** Redis's time (ms) before any holder was read: a holder taken after it was never shown, and is never deleted. */
  readonly at: number
  /** Each digest to delete, with every holder of its two locks. */
  readonly shown: ReadonlyArray<Locks.Digest>
  /** Locks on the page that are not this library's (left alone, as a delete refuses them). */
  readonly leftAlone: ReadonlyArray<{ readonly lock: string; readonly reason: string }>
}

/**
 * A bulk delete of what a page of the list shows, to confirm: every lock, every holder and its fate. Confirmed, it goes
 * on to the next page's preview, so a filter of any size is deleted a page at a time. @internal
 */
export const confirmBulkPage = (
  frame: Frame,
  preview: BulkPreview,
  confirm: string,
  changed: boolean,
  message?: Html
): Html => {
  const query = queryOf(preview.filters, preview.filters.cursor)
  const back = `${frame.base}/locks?${queryOf(preview.filters, "0")}`
  const fates = preview.shown.flatMap((shown) =>
    (["queue", "run"] as const).flatMap((phase) =>
      shown[phase].holders.map((h) => revokedOnDelete(h, shown[phase].now))
    )
  )
  const revoked = fates.filter((fate) => fate).length
  const rows = preview.shown.map((shown) =>
    shown.queue.holders.length === 0 && shown.run.holders.length === 0
      ? html`<tr data-digest="${shown.digest}" data-fate="gone"><td class="digest">${shown.digest}</td><td colspan="3">no holder: its index entry goes</td></tr>`
      : fateRows(shown, undefined, true)
  )
  const readOn = html`<a class="read-on" href="${frame.base}/locks/bulk/confirm?${queryOf(preview.filters, preview.next)}">read on from where this stopped</a>`
  return layout(
    frame,
    "Delete these locks?",
    "locks",
    html`<h1>Delete the locks this page shows?</h1>
${message ?? ""}
<p class="bulk-filter">The locks page ${
      [...new URLSearchParams(query)].filter(([name]) => name !== "count").map(([name, value]) => html`<span>${name} <code>${value}</code></span> `)
    }(${String(preview.filters.count)} index members read${preview.filters.cursor === "0" ? "" : ", from its cursor"}${
      preview.passed === 0 ? "" : html`, after ${String(preview.passed)} read on pages with nothing to delete`
    }), read again now. ${
      preview.next === "0"
        ? html`<span class="bulk-last">It is the last page of the index.</span>`
        : html`<span class="bulk-more">More of the index follows: once this page is done, the next page's locks are shown to confirm.</span>`
    }</p>
${changedNote(changed)}
<p class="bulk-summary" data-locks="${String(preview.shown.length)}" data-removed="${String(fates.length - revoked)}" data-revoked="${String(revoked)}">${
      String(preview.shown.length)
    } digest(s), both their queue and run locks: ${String(fates.length - revoked)} holder(s) removed at once, ${
      String(revoked)
    } running holder(s) revoked (each keeps its place until it stops, so no second copy starts).</p>
${preview.leftAlone.map((n) => html`<p class="foreign">${n.lock}: ${n.reason} (left alone)</p>`)}
${
      preview.shown.length === 0
        ? preview.next === "0"
          ? html`<p class="empty">No lock to delete here: the filter's walk of the index is done.</p>`
          : html`<p class="empty">No lock to delete in the ${String(bulkReadOnMembers(preview))} index members read; more of the index follows: ${readOn}.</p>`
        : html`<p>Only the digests and holders named here are confirmed: a digest another job took after this page was read is left whole (and shown again on a later preview if it still matches). A lock that starts to match the filter later is not touched.</p>
<table class="holders fates bulk">
<thead><tr><th>digest</th><th>jid</th><th>lock</th><th>what happens</th></tr></thead>
<tbody>${rows}</tbody>
</table>
${
          frame.canChange
            ? confirmForm(
              frame,
              `/locks/bulk/delete?${query}`,
              {
                digests: preview.shown.map((shown) => shown.digest).join("\n"),
                at: String(preview.at),
                next: preview.next,
                confirm
              },
              `Delete ${preview.shown.length} digest(s)`,
              back
            )
            : ""
        }`
    }
<p><a href="${back}">back to the locks</a></p>`
  )
}

// The members a preview that found nothing read: the pages it passed and its own.
const bulkReadOnMembers = (preview: BulkPreview): number => preview.passed + preview.filters.count

/** A reaper pass for real, to confirm: what it removes (the last dry run's count, when it came from one). @internal */
export const confirmReapPage = (frame: Frame, dryRun: Report | undefined, confirm: string): Html =>
  layout(
    frame,
    "Reap now?",
    "reaper",
    html`<h1>Run a reaper pass now?</h1>
<p>A pass removes index members whose lock is gone and holders whose expiry or lease has passed. It revokes no running holder and removes no live one.</p>
${
      dryRun === undefined || !dryRun.ran
        ? html`<p>Run a dry run first to see what it would remove.</p>`
        : html`<p class="report">The dry run found <span class="members">${String(dryRun.members)}</span> member(s) and ${
          String(dryRun.holders)
        } ended holder(s) to remove (what a pass removes now may differ: locks end and start meanwhile).</p>`
    }
${
      frame.canChange
        ? confirmForm(frame, "/reaper", { dryRun: "0", confirm }, "Reap now", `${frame.base}/reaper`)
        : ""
    }`
  )

const reportTable = (passes: ReadonlyArray<History.PassRecord>) =>
  passes.length === 0
    ? html`<p class="empty">No pass kept yet (a pass is kept for a week).</p>`
    : html`<table class="passes">
<thead><tr><th>ended</th><th>kind</th><th>took</th><th>steps</th><th>walked</th><th>members</th><th>ended holders</th><th>orphans</th><th>runner</th><th></th></tr></thead>
<tbody>${
      passes.map((p) =>
        html`<tr><td>${time(p.at)}</td><td>${p.dryRun ? "dry run" : "reap"}</td><td>${span(p.tookMs)}</td><td class="num">${
          String(p.steps)
        }</td><td class="num">${String(p.scanned)}</td><td class="num">${String(p.members)}</td><td class="num">${
          String(p.holders)
        }</td><td class="num">${String(p.orphans)}</td><td>${p.owner}</td><td>${p.error ?? ""}</td></tr>`
      )
    }</tbody>
</table>`

/** A pass just run from the page. @internal */
export interface Report {
  readonly dryRun: boolean
  readonly ran: boolean
  readonly scanned: number
  readonly members: number
  readonly holders: number
  readonly orphans: number
}

/** @internal */
export const reaperPage = (
  frame: Frame,
  passes: ReadonlyArray<History.PassRecord>,
  shown: { readonly report: Report; readonly result: string } | undefined,
  asksQueue: boolean
): Html => {
  const report = shown?.report
  const reapForm = (dryRun: boolean, label: string) =>
    html`<form method="post" action="${frame.base}/reaper">${csrfField(frame)}<input type="hidden" name="dryRun" value="${
      dryRun ? "1" : "0"
    }"><button type="submit" class="${dryRun ? "dry-run" : "reap"}">${label}</button></form>`
  const reportBlock = report === undefined
    ? ""
    : html`<div class="message report" role="status">${
      report.ran
        ? html`<strong>${report.dryRun ? "Dry run" : "Reaped"}</strong>: walked ${String(report.scanned)} index member(s); ${
          report.dryRun ? "would remove" : "removed"
        } <span class="members">${String(report.members)}</span> member(s), ${String(report.holders)} ended holder(s), ${
          String(report.orphans)
        } orphan(s)`
        : html`Another reaper holds the runner's lease: nothing done.`
    }</div>`
  return layout(
    frame,
    "Reaper",
    "reaper",
    html`<h1>Reaper</h1>
<p>A pass removes index members whose lock is gone and holders whose expiry or lease has passed; never a live holder. ${
      asksQueue
        ? html`It also asks the queue about holders with no expiry older than the grace, and frees those whose job is gone (orphans).`
        : html`Orphans (holders with no expiry whose job is gone) are left alone: this UI has no queue to ask (serve it with a <code>JobQueue</code> in its context, or <code>unique-jobs web --bullmq-queue NAME</code>).`
    }</p>
${reportBlock}
${
      frame.canChange
        ? html`<div class="actions">${reapForm(true, "Dry run")}${
          shown !== undefined && shown.report.dryRun && shown.report.ran
            ? html` <a class="reap" href="${frame.base}/reaper/confirm?result=${shown.result}">Reap now…</a>`
            : ""
        }</div>`
        : ""
    }
<h2>Last passes</h2>
${reportTable(passes)}`
  )
}

const palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]

// A chart's frame, in the SVG's own units: it scales to the page's width (CSS), text with it.
const plot = { width: 960, height: 200, left: 52, right: 16, top: 14, bottom: 34 }
const clock = (ms: number) => new Date(ms).toISOString().slice(11, 16)

// The value axis: 0, the middle and the top, each a grid line with its label.
const valueAxis = (top: number, y: (n: number) => number): Html =>
  html`${
    [0, top / 2, top].map((n) => {
      const label = Number.isInteger(n) ? String(n) : n.toFixed(1)
      return html`<line class="grid" x1="${String(plot.left)}" y1="${y(n).toFixed(1)}" x2="${
        String(plot.width - plot.right)
      }" y2="${y(n).toFixed(1)}" stroke="#ddd"/><text x="${String(plot.left - 6)}" y="${
        (y(n) + 4).toFixed(1)
      }" text-anchor="end" font-size="12" fill="#555">${label}</text>`
    })
  }`

// One chart per event: a line per lock type over the minutes, as inline SVG (no script), with both axes labelled.
const chart = (buckets: ReadonlyArray<History.Bucket>, event: History.Event, types: ReadonlyArray<string>): Html => {
  const values = types.map((type) => buckets.map((b) => b.counts[type]?.[event] ?? 0))
  const peak = Math.max(0, ...values.flat())
  const top = Math.max(1, peak)
  const inner = plot.width - plot.left - plot.right
  const x = (i: number) => plot.left + (buckets.length <= 1 ? 0 : (i / (buckets.length - 1)) * inner)
  const y = (n: number) => plot.height - plot.bottom - (n / top) * (plot.height - plot.top - plot.bottom)
  const total = values.flat().reduce((a, b) => a + b, 0)
  // Time labels: the first minute, every 15th, and the last (the current minute).
  const ticks = buckets.flatMap((b, i) =>
    i === 0 || i === buckets.length - 1 || (b.start / 60_000) % 15 === 0 && i > 3 && i < buckets.length - 4 ? [i] : []
  )
  const first = buckets[0]
  const last = buckets[buckets.length - 1]
  return html`<figure class="chart" data-event="${event}" data-total="${String(total)}">
<figcaption>${event} per minute · ${String(total)} in all · peak ${String(peak)}/min${
    first === undefined || last === undefined ? "" : html` · <time>${clock(first.start)}</time> to <time>${clock(last.start + 60_000)}</time> UTC`
  }</figcaption>
<svg viewBox="0 0 ${String(plot.width)} ${String(plot.height)}" role="img" aria-label="${event} per minute, ${
    first === undefined ? "" : `${clock(first.start)} to ${clock((last?.start ?? first.start) + 60_000)} UTC`
  }, peak ${String(peak)}">
${valueAxis(top, y)}
<line x1="${String(plot.left)}" y1="${String(plot.height - plot.bottom)}" x2="${String(plot.width - plot.right)}" y2="${
    String(plot.height - plot.bottom)
  }" stroke="#999"/>
${
    ticks.map((i) =>
      html`<line x1="${x(i).toFixed(1)}" y1="${String(plot.height - plot.bottom)}" x2="${x(i).toFixed(1)}" y2="${
        String(plot.height - plot.bottom + 5)
      }" stroke="#999"/><text class="tick" x="${x(i).toFixed(1)}" y="${String(plot.height - 10)}" text-anchor="${
        i === 0 ? "start" : i === buckets.length - 1 ? "end" : "middle"
      }" font-size="12" fill="#555">${clock(buckets[i]!.start)}</text>`
    )
  }
${
    values.map((series, t) =>
      html`<polyline fill="none" stroke="${palette[t % palette.length]!}" stroke-width="2" points="${
        series.map((n, i) => `${x(i).toFixed(1)},${y(n).toFixed(1)}`).join(" ")
      }"><title>${types[t]!}</title></polyline>`
    )
  }
</svg>
</figure>`
}

// A hold-time bin's label: "≤ 16ms", "≤ 1m 05s", the last "> 17m 28s".
const binLabel = (bound: string, i: number): string =>
  bound === "Infinity" ? `> ${span(Number(History.holdBounds[i - 1] ?? 0))}` : `≤ ${span(Number(bound))}`

// The hour's hold times as bars, a bin each: how long locks were held from acquire to release.
const holdChart = (buckets: ReadonlyArray<History.Bucket>): Html => {
  const bins = History.holdBounds.map((bound) => buckets.reduce((n, b) => n + (b.hold[bound] ?? 0), 0))
  const total = bins.reduce((a, b) => a + b, 0)
  const top = Math.max(1, ...bins)
  const inner = plot.width - plot.left - plot.right
  const slot = inner / bins.length
  const y = (n: number) => plot.height - plot.bottom - (n / top) * (plot.height - plot.top - plot.bottom)
  return html`<figure class="chart hold" data-total="${String(total)}">
<figcaption>hold time · ${String(total)} lock(s) released in the window, by how long each was held (acquire to release)</figcaption>
${
    total === 0
      ? html`<p class="empty">No hold time recorded in the window (processes flush it with their counts from this version on).</p>`
      : html`<svg viewBox="0 0 ${String(plot.width)} ${String(plot.height)}" role="img" aria-label="locks per hold time">
${valueAxis(top, y)}
${
        bins.map((n, i) =>
          html`<rect class="bin" data-bound="${History.holdBounds[i]!}" data-count="${String(n)}" x="${
            (plot.left + i * slot + 3).toFixed(1)
          }" y="${y(n).toFixed(1)}" width="${(slot - 6).toFixed(1)}" height="${
            (plot.height - plot.bottom - y(n)).toFixed(1)
          }" fill="#1f77b4"><title>${binLabel(History.holdBounds[i]!, i)}: ${String(n)}</title></rect><text x="${
            (plot.left + (i + 0.5) * slot).toFixed(1)
          }" y="${String(plot.height - 10)}" text-anchor="middle" font-size="12" fill="#555">${binLabel(History.holdBounds[i]!, i)}</text>`
        )
      }
</svg>`
  }
</figure>`
}

const refreshLabel = (seconds: number) => (seconds % 60 === 0 ? `${String(seconds / 60)}m` : span(seconds * 1000))

/** The metrics page's refresh choices (seconds), and the bounds `?refresh=` is held to. @internal */
export const refreshChoices = [10, 30, 60, 300] as const
export const refreshBounds = { min: 5, max: 3600 } as const

/** @internal */
export const metricsPage = (
  frame: Frame,
  buckets: ReadonlyArray<History.Bucket>,
  events: ReadonlyArray<History.Event>,
  refresh?: number
): Html => {
  const types = [...new Set(buckets.flatMap((b) => Object.keys(b.counts)))].sort()
  const totals = types.map((type) =>
    html`<tr><td>${type}</td>${
      events.map((event) =>
        html`<td class="num" data-type="${type}" data-event="${event}">${
          String(buckets.reduce((n, b) => n + (b.counts[type]?.[event] ?? 0), 0))
        }</td>`
      )
    }</tr>`
  )
  const refreshLinks = html`<p class="refresh">refresh: ${
    [undefined, ...refreshChoices].map((n, i) => {
      const label = n === undefined ? "off" : refreshLabel(n)
      const href = `${frame.base}/metrics${n === undefined ? "" : `?refresh=${String(n)}`}`
      return html`${i === 0 ? "" : " · "}${
        n === refresh ? html`<strong aria-current="true">${label}</strong>` : html`<a href="${href}">${label}</a>`
      }`
    })
  }${
    refresh !== undefined && !(refreshChoices as ReadonlyArray<number>).includes(refresh)
      ? html` · <strong aria-current="true">${refreshLabel(refresh)}</strong>`
      : ""
  }</p>`
  return layout(
    frame,
    "Metrics",
    "metrics",
    html`<h1>Metrics</h1>
<p>Counts per lock type in one-minute buckets over the last hour (times in UTC), from every process that runs <code>History.layer</code> (each flushes its counts on its interval). Reaped counts are under <code>*</code>.</p>
${refreshLinks}
${types.length === 0 ? html`<p class="empty">Nothing counted in the last hour under this prefix. Add History.layer to the processes that take locks.</p>` : ""}
<p class="legend">${types.map((type, t) => html`<span class="swatch swatch-${String(t % palette.length)}">${type}</span> `)}</p>
<div class="charts">
${events.map((event) => chart(buckets, event, types))}
${holdChart(buckets)}
</div>
<div class="scroll">
<table class="totals">
<thead><tr><th>lock type</th>${events.map((event) => html`<th class="num">${event}</th>`)}</tr></thead>
<tbody>${totals}</tbody>
</table>
</div>`,
    refresh
  )
}

/** A failure, as a page. @internal */
export const errorPage = (frame: Frame, status: number, title: string, message: string): Html =>
  layout(frame, title, "", html`<h1>${title}</h1><p class="error" data-status="${String(status)}">${message}</p><p><a href="${frame.base}/locks">back to the locks</a></p>`)

/** The one stylesheet (CSP: no inline style). @internal */
export const stylesheet = `body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222}
header{display:flex;gap:1.5em;align-items:center;padding:.6em 1em;background:#223;color:#eee}
header a{color:#cde;margin-right:.8em}header a[aria-current]{color:#fff;font-weight:bold}
.prefix{color:#aab}.readonly{background:#a60;color:#fff;padding:0 .4em;border-radius:3px}
main{padding:1em}table{border-collapse:collapse;width:100%;margin:.5em 0}
th,td{border-bottom:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
td.num,th.num{text-align:right}.digest{font-family:ui-monospace,monospace;overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}
td.jid{overflow-wrap:anywhere;min-width:6em}td.actions{position:sticky;right:0;background:#fff}
td.digest{white-space:nowrap}
td.digest a{display:inline-block;max-width:16em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:bottom}
td.args{font-family:ui-monospace,monospace;font-size:12px;white-space:nowrap}
pre.info{margin:0;min-width:26em;max-width:40em;white-space:pre-wrap;overflow-wrap:break-word;font-size:12px}
@media (max-width:600px){td.digest a{max-width:11em}table.locks td{white-space:nowrap}th,td{padding:.2em .3em}}
.kind{display:inline-block;min-width:3.2em;padding:0 .3em;border-radius:3px;font:12px system-ui,sans-serif;text-align:center;vertical-align:bottom}
.kind-queue{background:#eef}.kind-run{background:#efe}
.filters label{margin-right:.8em;white-space:nowrap}.stale{color:#a60}.foreign{color:#a00}
.message{background:#eef6ee;border:1px solid #9c9;padding:.5em;margin:.5em 0}.error{color:#a00}
.actions form,td form{display:inline}.danger{margin-top:1em}button.delete,button.reap,button.confirm,a.delete,a.reap{color:#a00}
figure.chart{margin:.5em 0 1.5em;width:100%}figure.chart svg{display:block;width:100%;height:auto}
figcaption{font-weight:bold;margin-bottom:.2em}.not-searched{color:#a60}.swatch{padding:0 .4em;border-left:1em solid}
.swatch-0{border-color:#1f77b4}.swatch-1{border-color:#d62728}.swatch-2{border-color:#2ca02c}
.job{border:1px solid #ddd;padding:.25em .75em;margin:.5em 0}.job:target{border-color:#36c;background:#f4f8ff}
.job-state{padding:0 .4em;border-radius:3px;background:#eee}.state-active{background:#def}.state-failed,.state-gone{background:#fdd}
.state-completed{background:#dfd}.job-details th{width:9em}
.swatch-3{border-color:#9467bd}.swatch-4{border-color:#ff7f0e}.swatch-5{border-color:#8c564b}.swatch-6{border-color:#17becf}
`
