/**
 * The admin UI's pages, rendered on the server from what `Locks`, `Reaper` and `History` answered. Every value is
 * put in through `html`, so job arguments, jids and digests show as text whatever they hold; no page has a script,
 * and every change is a POST form carrying the CSRF token.
 *
 * @internal
 */
import type * as History from "../History.js"
import type * as Locks from "../Locks.js"
import type { Holder } from "../Redis.js"
import { type Html, html, type Part } from "./Html.js"

/** What every page needs to know of its request. @internal */
export interface Frame {
  /** The path the UI is mounted under ("" at the root). */
  readonly base: string
  readonly prefix: string
  /** Whether this request may change anything: forms are shown only then. */
  readonly canChange: boolean
  readonly csrf: string
}

/** The filters of the locks page, as decoded from its query. @internal */
export interface Filters {
  readonly pattern: string
  readonly type: string
  readonly queue: string
  readonly worker: string
  /** Minutes: only locks whose oldest holder is at least this old. */
  readonly age: number | undefined
  readonly stale: boolean
  readonly cursor: string
  readonly count: number
}

/** One page of the locks list: the rows that passed the filters, and how many index members the page read. @internal */
export interface LocksView {
  readonly filters: Filters
  readonly rows: ReadonlyArray<Locks.Row>
  readonly scanned: number
  readonly next: string
  /** Index members read but not listed: the UI could not act on them (a name too long for an address). */
  readonly omitted: number
}

export const lockTypes = ["until_executed", "until_executing", "until_expired", "while_executing", "until_and_while_executing"]

const layout = (frame: Frame, title: string, active: string, body: Part): Html =>
  html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · unique jobs</title>
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
${frame.canChange ? "" : html`<span class="readonly">read-only</span>`}
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
    const queue = holder.queue ?? infoOf(holder).queue
    if (queue !== undefined) return textOf(queue)
  }
  return ""
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

const queryOf = (filters: Filters, cursor: string): string => {
  const query = new URLSearchParams()
  query.set("pattern", filters.pattern)
  if (filters.type !== "") query.set("type", filters.type)
  if (filters.queue !== "") query.set("queue", filters.queue)
  if (filters.worker !== "") query.set("worker", filters.worker)
  if (filters.age !== undefined) query.set("age", String(filters.age))
  if (filters.stale) query.set("stale", "1")
  query.set("count", String(filters.count))
  if (cursor !== "0") query.set("cursor", cursor)
  return query.toString()
}

/** @internal */
export const locksPage = (frame: Frame, view: LocksView): Html => {
  const f = view.filters
  const form = html`<form method="get" action="${frame.base}/locks" class="filters">
<label>pattern <input name="pattern" value="${f.pattern}" size="32"></label>
<label>type <select name="type"><option value="">any</option>${
    [...lockTypes, "unknown"].map((type) => html`<option${type === f.type ? html` selected` : ""}>${type}</option>`)
  }</select></label>
<label>queue <input name="queue" value="${f.queue}" size="12"></label>
<label>worker <input name="worker" value="${f.worker}" size="12"></label>
<label>older than <input name="age" value="${f.age === undefined ? "" : String(f.age)}" size="4" inputmode="numeric"> min</label>
<label><input type="checkbox" name="stale" value="1"${f.stale ? html` checked` : ""}> stale only</label>
<label>per page <input name="count" value="${String(f.count)}" size="5" inputmode="numeric"></label>
<button type="submit">Filter</button>
</form>`
  const rows = view.rows.map((row) => {
    const since = sinceOf(row)
    return html`<tr data-name="${row.entry.name}">
<td class="digest">${lockLink(frame, row.entry.digest, row.entry.name)}</td>
<td>${row.type}</td>
<td>${row.entry.phase}</td>
<td class="num">${String(row.lock.size)}${
      row.lock.size > row.lock.holders.length
        ? html` <small>(first ${String(row.lock.holders.length)} read)</small>`
        : ""
    }</td>
<td>${queueOf(row)}</td>
<td>${workerOf(row)}</td>
<td>${since === undefined ? "-" : html`<time datetime="${time(since)}">${span(row.lock.now - since)} ago</time>`}</td>
<td>${leftOf(row.lock)}</td>
<td>${row.stale ? html`<span class="stale">stale</span>` : ""}${row.notOurs === undefined ? "" : html`<span class="foreign" title="${row.notOurs}">not ours</span>`}</td>
</tr>`
  })
  const paging = html`<p class="paging">read ${String(view.scanned)} index member(s), ${String(view.rows.length)} shown · ${
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
${form}
${paging}
<table class="locks">
<thead><tr><th>lock</th><th>type</th><th>phase</th><th>holders</th><th>queue</th><th>worker</th><th>since</th><th>left</th><th></th></tr></thead>
<tbody>
${rows}
</tbody>
</table>
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

const holdersTable = (frame: Frame, digest: string, phase: "queue" | "run", fetched: Locks.Digest["queue"]): Html => {
  if (fetched.holders.length === 0 && fetched.cursor === "0") return html`<p class="empty">No ${phase} lock held.</p>`
  const rows = fetched.holders.map((holder) =>
    html`<tr data-jid="${holder.jid}">
<td class="jid">${holder.jid}</td>
<td>${time(holder.lockedAt)}</td>
<td>${holder.expiresAt === undefined ? "-" : html`${time(holder.expiresAt)} (${span(holder.expiresAt - fetched.now)})`}</td>
<td>${holder.leaseUntil === undefined ? "-" : html`${time(holder.leaseUntil)} (${span(holder.leaseUntil - fetched.now)})`}</td>
<td class="num">${holder.fence === 0 ? "-" : String(holder.fence)}</td>
<td>${holder.revokedAt === undefined ? "" : html`revoked ${time(holder.revokedAt)}`}</td>
<td>${holder.queue ?? ""}</td>
<td><pre class="info">${holder.info === undefined ? "" : JSON.stringify(holder.info, null, 2)}</pre>${
      holder.truncated === undefined
        ? ""
        : html`<small class="cut">entry of ${String(holder.truncated)} bytes, cut: its leading fields only</small>`
    }</td>
<td>${
      frame.canChange && encodeURIComponent(holder.jid).length <= 4096
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
<table class="holders">
<thead><tr><th>jid</th><th>locked at</th><th>expires</th><th>lease until</th><th>fence</th><th></th><th>queue</th><th>lock info</th><th></th></tr></thead>
<tbody>
${rows}
</tbody>
</table>`
}

/** @internal */
export const lockPage = (frame: Frame, shown: Locks.Digest, message?: Html): Html =>
  layout(
    frame,
    shown.digest,
    "locks",
    html`<h1 class="digest">${shown.digest}</h1>
${message ?? ""}
${shown.notOurs.map((n) => html`<p class="foreign">${n.lock}: ${n.reason}</p>`)}
<h2>Queue lock</h2>
${holdersTable(frame, shown.digest, "queue", shown.queue)}
<h2>Run lock</h2>
${holdersTable(frame, shown.digest, "run", shown.run)}
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
}

/** A change's result, in words. @internal */
export const resultMessage = (result: Result): Html => {
  const what = result.action === "delete" ? "Deleted" : `Unlocked ${result.jid ?? "a holder"}`
  return html`<div class="message" role="status"><strong>${what}</strong> at <time>${time(result.at)}</time>: ${
    result.nothing
      ? result.action === "delete"
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
  }</div>`
}

/** Whether a run lock's holder still runs: not revoked, and its lease (or expiry) not passed. @internal */
export const isRunning = (holder: Holder, now: number): boolean =>
  holder.revokedAt === undefined && (holder.leaseUntil ?? holder.expiresAt ?? Number.POSITIVE_INFINITY) > now

// The holders a confirmation names, each with what happens to it.
const fateTable = (shown: Locks.Digest, jid?: string): Html => {
  const rows = (["queue", "run"] as const).flatMap((phase) =>
    shown[phase].holders.filter((h) => jid === undefined || h.jid === jid).map((h) => {
      const running = phase === "run" && isRunning(h, shown[phase].now)
      return html`<tr data-jid="${h.jid}" data-fate="${running ? "revoked" : "removed"}"><td class="jid">${h.jid}</td><td>${phase}</td><td>${
        running
          ? html`<strong>revoked</strong>: running (lease until ${time(h.leaseUntil)}); it keeps its place until it stops, and is told at its next renewal`
          : "removed at once"
      }</td></tr>`
    })
  )
  return html`<table class="holders fates">
<thead><tr><th>jid</th><th>lock</th><th>what happens</th></tr></thead>
<tbody>${rows}</tbody>
</table>`
}

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
        : html`Orphans (holders whose job is gone) are left alone: this UI has no queue to ask (serve it with a <code>JobQueue</code> in its context, or <code>unique-jobs web --bullmq-queue NAME</code>).`
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

// One small chart per event: a line per lock type over the minutes, as inline SVG (no script).
const chart = (buckets: ReadonlyArray<History.Bucket>, event: History.Event, types: ReadonlyArray<string>): Html => {
  const width = 600
  const height = 120
  const values = types.map((type) => buckets.map((b) => b.counts[type]?.[event] ?? 0))
  const peak = Math.max(0, ...values.flat())
  const top = Math.max(1, peak)
  const x = (i: number) => (buckets.length <= 1 ? 0 : (i / (buckets.length - 1)) * width)
  const y = (n: number) => height - (n / top) * (height - 10)
  const total = values.flat().reduce((a, b) => a + b, 0)
  return html`<figure class="chart" data-event="${event}" data-total="${String(total)}">
<figcaption>${event} · ${String(total)} in the last hour · peak ${String(peak)}/min</figcaption>
<svg viewBox="0 0 ${String(width)} ${String(height)}" width="${String(width)}" height="${String(height)}" role="img" aria-label="${event} per minute">
<line x1="0" y1="${String(height)}" x2="${String(width)}" y2="${String(height)}" stroke="#999"/>
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

/** @internal */
export const metricsPage = (frame: Frame, buckets: ReadonlyArray<History.Bucket>, events: ReadonlyArray<History.Event>): Html => {
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
  return layout(
    frame,
    "Metrics",
    "metrics",
    html`<h1>Metrics</h1>
<p>Counts per lock type in one-minute buckets over the last hour, from every process that runs <code>History.layer</code> (each flushes its counts on its interval). Reaped counts are under <code>*</code>.</p>
${types.length === 0 ? html`<p class="empty">Nothing counted in the last hour under this prefix. Add History.layer to the processes that take locks.</p>` : ""}
<p class="legend">${types.map((type, t) => html`<span class="swatch swatch-${String(t % palette.length)}">${type}</span> `)}</p>
${events.map((event) => chart(buckets, event, types))}
<table class="totals">
<thead><tr><th>lock type</th>${events.map((event) => html`<th>${event}</th>`)}</tr></thead>
<tbody>${totals}</tbody>
</table>`
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
td.num{text-align:right}.digest{font-family:ui-monospace,monospace;word-break:break-all}
pre.info{margin:0;max-width:32em;white-space:pre-wrap;word-break:break-all;font-size:12px}
.filters label{margin-right:.8em;white-space:nowrap}.stale{color:#a60}.foreign{color:#a00}
.message{background:#eef6ee;border:1px solid #9c9;padding:.5em;margin:.5em 0}.error{color:#a00}
.actions form,td form{display:inline}.danger{margin-top:1em}button.delete,button.reap,button.confirm,a.delete,a.reap{color:#a00}
figure.chart{margin:.5em 0}.swatch{padding:0 .4em;border-left:1em solid}
.swatch-0{border-color:#1f77b4}.swatch-1{border-color:#d62728}.swatch-2{border-color:#2ca02c}
.swatch-3{border-color:#9467bd}.swatch-4{border-color:#ff7f0e}.swatch-5{border-color:#8c564b}.swatch-6{border-color:#17becf}
`
