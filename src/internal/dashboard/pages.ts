import { DateTime, Duration, Option } from "effect"
import type * as Admin from "../../Admin.js"
import type { Schedule } from "../../Scheduler.js"
import { depthDeltas, type Reading, ratesBetween, relative, shortDuration } from "../cli/plain.js"
import { depthChart } from "./chart.js"
import { html, type Html, queueHref, segment } from "./html.js"

/** The dashboard's pages as HTML, from the operator's data. */

const ms = (instant: DateTime.DateTime) => DateTime.toEpochMillis(instant)
const when = (instant: DateTime.DateTime, now: number) =>
  html`<span title="${DateTime.formatIso(instant)}">${relative(ms(instant), now)}</span>`
const optionalWhen = (instant: Option.Option<DateTime.DateTime>, now: number) =>
  Option.match(instant, { onNone: () => html`<span class="muted">–</span>`, onSome: (i) => when(i, now) })
const state = (s: string) => html`<span class="state state-${s}">${s}</span>`
const clip = (text: string, max: number) => ([...text].length <= max ? text : `${[...text].slice(0, max - 1).join("")}…`)
const payloadText = (payload: unknown) => JSON.stringify(payload) ?? "undefined"
const rate = (v: number) => (v < 10 ? v.toFixed(1) : Math.round(v).toString())

/** What a POST did, shown after its redirect (fixed texts: nothing from the request is reflected). */
export const notices = {
  requeued: "Job requeued: it is pending again with its attempts reset.",
  cancelled: "Job cancelled (deleted).",
  purged: "Dead jobs purged."
} as const
export type Notice = keyof typeof notices

const notice = (done: Notice | undefined) => (done === undefined ? "" : html`<div class="notice">${notices[done]}</div>`)

const postButton = (action: string, label: string, writes: boolean) =>
  writes ? html`<form class="inline" method="post" action="${action}"><button type="submit">${label}</button></form>` : ""

export const overviewPage = (readings: ReadonlyArray<Reading>, live: ReadonlyArray<Admin.QueueSummary>, now: number) => {
  const latest = readings[readings.length - 1]
  const previous = readings.length > 1 ? readings[readings.length - 2] : undefined
  const rates = latest !== undefined && previous !== undefined ? ratesBetween(previous, latest) : undefined
  const deltas = latest !== undefined && previous !== undefined ? depthDeltas(previous, latest) : new Map<string, number>()
  const rows = live.map((q) =>
    html`<tr><td><a href="${queueHref(q.name)}">${q.name}</a></td><td class="n">${q.pending}</td>
<td class="n">${deltas.has(q.name) ? `${deltas.get(q.name)! > 0 ? "+" : ""}${rate(deltas.get(q.name)!)}` : "–"}</td>
<td class="n">${q.scheduled}</td><td class="n">${q.claimed}</td>
<td class="n">${q.dead > 0 ? html`<a href="/dead?queue=${segment(q.name)}">${q.dead}</a>` : 0}</td>
<td>${Option.match(q.oldestPendingAge, { onNone: () => "–", onSome: (d) => shortDuration(Duration.toMillis(d)) })}</td></tr>`
  )
  return html`<h1>Queues</h1>
<div class="rates"><div>enqueued <b>${rates === undefined ? "–" : rate(rates.enqueuedPerSec)}</b>/s</div>
<div>completed <b>${rates === undefined ? "–" : rate(rates.completedPerSec)}</b>/s</div>
<div>jobs in store <b>${latest?.totals.live ?? 0}</b></div><div class="muted">as of ${new Date(now).toISOString().slice(0, 19)} UTC</div></div>
${live.length === 0
    ? html`<p class="muted">No queues yet.</p>`
    : html`<table id="queues"><thead><tr><th>Queue</th><th>Pending</th><th>Δ/s</th><th>Scheduled</th><th>Claimed</th><th>Dead</th><th>Oldest pending</th></tr></thead>
<tbody>${rows}</tbody></table>`}
<h2>Pending over time</h2>${depthChart(readings, live.map((q) => q.name))}`
}

const jobRows = (jobs: ReadonlyArray<Admin.JobInfo>, now: number, showQueue: boolean) =>
  jobs.map((j) =>
    html`<tr><td><a href="/jobs/${j.id}">${j.id}</a></td>${showQueue ? html`<td>${j.queue}</td>` : ""}<td>${state(j.state)}</td>
<td class="n">${j.attempts}/${j.maxAttempts}</td><td>${when(j.runAt, now)}</td><td><code>${clip(payloadText(j.payload), 60)}</code></td>
<td>${clip(Option.getOrElse(j.lastError, () => ""), 80)}</td></tr>`
  )

export const queuePage = (
  queue: string,
  filter: Admin.JobState | undefined,
  jobs: ReadonlyArray<Admin.JobInfo>,
  summary: Admin.QueueSummary | undefined,
  now: number,
  done: Notice | undefined
) => {
  const tab = (s: Admin.JobState | undefined, label: string) =>
    s === filter
      ? html`<b>${label}</b> `
      : html`<a href="${queueHref(queue, s)}">${label}</a> `
  return html`${notice(done)}<h1>Queue ${queue}</h1>
<p class="muted">${summary === undefined ? "No jobs." : `${summary.pending} pending, ${summary.scheduled} scheduled, ${summary.claimed} claimed, ${summary.dead} dead`}</p>
<p class="tabs">${tab(undefined, "all")}${tab("pending", "pending")}${tab("scheduled", "scheduled")}${tab("claimed", "claimed")}${tab("dead", "dead")}</p>
${jobs.length === 0 ? html`<p class="muted">No jobs here.</p>` : html`<table id="jobs"><thead><tr><th>Id</th><th>State</th><th>Attempts</th><th>Run at</th><th>Payload</th><th>Last error</th></tr></thead>
<tbody>${jobRows(jobs, now, false)}</tbody></table>`}`
}

export const jobPage = (job: Admin.JobInfo, now: number, writes: boolean, done: Notice | undefined) => {
  const at = (label: string, instant: Option.Option<DateTime.DateTime>) =>
    Option.match(instant, {
      onNone: () => "",
      onSome: (i) => html`<tr><td>${label}</td><td>${DateTime.formatIso(i)}</td><td>${relative(ms(i), now)}</td></tr>`
    })
  return html`${notice(done)}<h1>Job ${job.id} <span id="job-state">${state(job.state)}</span></h1>
<dl><dt>Queue</dt><dd><a href="${queueHref(job.queue)}">${job.queue}</a></dd>
<dt>Attempts</dt><dd>${job.attempts} of ${job.maxAttempts}</dd><dt>Priority</dt><dd>${job.priority}</dd>
<dt>Worker</dt><dd>${Option.getOrElse(job.workerId, () => "–")}</dd>
<dt>Visibility timeout</dt><dd>${shortDuration(Duration.toMillis(job.visibilityTimeout))}</dd>
<dt>Backoff base</dt><dd>${shortDuration(Duration.toMillis(job.backoffBase))}</dd>
<dt>Last error</dt><dd><pre id="last-error">${Option.getOrElse(job.lastError, () => "–")}</pre></dd>
<dt>Enqueued in trace</dt><dd id="trace">${Option.match(job.traceContext, {
    onNone: () => "–",
    onSome: (t) => html`<code>${t.traceId}</code> span <code>${t.spanId}</code>${t.sampled ? "" : " (not sampled)"}`
  })}</dd></dl>
<h2>History</h2><table><thead><tr><th>Event</th><th>At</th><th></th></tr></thead><tbody>
${at("created", Option.some(job.createdAt))}${at(job.state === "scheduled" ? "due" : "run at", Option.some(job.runAt))}
${at("lease until", job.claimedUntil)}${at("expires", job.expiresAt)}${at("died", job.diedAt)}</tbody></table>
<h2>Payload</h2><pre id="payload">${JSON.stringify(job.payload, null, 2) ?? "undefined"}</pre>
${writes
    ? html`<h2>Actions</h2>${job.state === "dead" ? postButton(`/jobs/${job.id}/requeue`, "Requeue", true) : ""}
${job.state !== "dead" ? postButton(`/jobs/${job.id}/cancel`, "Cancel", true) : ""}`
    : ""}`
}

export const deadPage = (
  queue: string | undefined,
  jobs: ReadonlyArray<Admin.JobInfo>,
  now: number,
  writes: boolean,
  done: Notice | undefined
) =>
  html`${notice(done)}<h1>Dead jobs${queue === undefined ? "" : html` in ${queue}`}</h1>
${jobs.length === 0 ? html`<p class="muted">No dead jobs.</p>` : html`<table id="dead"><thead><tr><th>Id</th><th>Queue</th><th>Attempts</th><th>Died</th><th>Last error</th><th>Payload</th><th></th></tr></thead><tbody>
${jobs.map((j) => html`<tr><td><a href="/jobs/${j.id}">${j.id}</a></td><td>${j.queue}</td><td class="n">${j.attempts}/${j.maxAttempts}</td>
<td>${optionalWhen(j.diedAt, now)}</td><td><pre>${Option.getOrElse(j.lastError, () => "–")}</pre></td><td><code>${clip(payloadText(j.payload), 60)}</code></td>
<td>${postButton(`/jobs/${j.id}/requeue`, "Requeue", writes)}</td></tr>`)}</tbody></table>`}
${writes && queue !== undefined
    ? html`<h2>Purge</h2><form method="post" action="/purge?queue=${segment(queue)}">Delete dead jobs of ${queue} that died more than
<input name="older_than" value="7d" size="6" aria-label="older than"> ago (empty: all) <button type="submit">Purge</button></form>`
    : ""}`

export const schedulesPage = (schedules: ReadonlyArray<Schedule>, now: number) =>
  html`<h1>Schedules</h1>${schedules.length === 0 ? html`<p class="muted">No schedules.</p>` : html`<table id="schedules"><thead><tr><th>Name</th><th>Spec</th><th>Queue</th><th>Next fire</th><th>Priority</th><th>Max attempts</th><th>Payload</th></tr></thead><tbody>
${schedules.map((s) => html`<tr><td>${s.name}</td><td>${s.spec}</td><td><a href="${queueHref(s.queue)}">${s.queue}</a></td>
<td>${DateTime.formatIso(s.nextFireAt)} (${relative(ms(s.nextFireAt), now)})</td><td class="n">${s.opts.priority}</td><td class="n">${s.opts.maxAttempts}</td>
<td><code>${clip(payloadText(s.payload), 60)}</code></td></tr>`)}</tbody></table>`}`

export const locksPage = (locks: ReadonlyArray<Admin.LockInfo>, now: number) =>
  html`<h1>Locks</h1>${locks.length === 0 ? html`<p class="muted">No locks.</p>` : html`<table id="locks"><thead><tr><th>Name</th><th>Held</th><th>Holder</th><th>Token</th><th>Lease</th></tr></thead><tbody>
${locks.map((l) => html`<tr><td>${l.name}</td><td>${l.held ? "yes" : "no (lapsed or released)"}</td><td>${l.owner}</td><td class="n">${l.token}</td>
<td>${l.held ? "expires " : "expired "}${when(l.expiresAt, now)}</td></tr>`)}</tbody></table>`}`

export const errorPage = (status: number, message: string): Html =>
  html`<div class="error"><b>${status}</b> ${message}</div><p><a href="/">Back to the queues</a></p>`
