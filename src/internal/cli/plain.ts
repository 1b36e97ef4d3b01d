import { DateTime, Duration, Option } from "effect"
import type * as Admin from "../../Admin.js"
import type { Schedule } from "../../Scheduler.js"

/**
 * Plain JSON views of the operator's data (the CLI's `--json` and the
 * dashboard's): instants as ISO-8601 strings, durations in milliseconds,
 * absent values as `null`.
 */
const iso = (instant: DateTime.DateTime) => DateTime.formatIso(instant)
const optionalIso = (instant: Option.Option<DateTime.DateTime>) => Option.getOrNull(Option.map(instant, iso))
const millis = (duration: Duration.Duration) => Duration.toMillis(duration)

export const plainQueue = (q: Admin.QueueSummary) => ({
  name: q.name,
  pending: q.pending,
  scheduled: q.scheduled,
  claimed: q.claimed,
  dead: q.dead,
  oldestPendingAgeMs: Option.getOrNull(Option.map(q.oldestPendingAge, millis))
})

export const plainJob = (job: Admin.JobInfo) => ({
  id: job.id,
  queue: job.queue,
  state: job.state,
  payload: job.payload,
  priority: job.priority,
  attempts: job.attempts,
  maxAttempts: job.maxAttempts,
  runAt: iso(job.runAt),
  createdAt: iso(job.createdAt),
  claimedUntil: optionalIso(job.claimedUntil),
  workerId: Option.getOrNull(job.workerId),
  expiresAt: optionalIso(job.expiresAt),
  diedAt: optionalIso(job.diedAt),
  lastError: Option.getOrNull(job.lastError),
  visibilityTimeoutMs: millis(job.visibilityTimeout),
  backoffBaseMs: millis(job.backoffBase),
  traceContext: Option.getOrNull(job.traceContext)
})

export const plainSchedule = (s: Schedule) => ({
  name: s.name,
  spec: s.spec,
  intervalMs: millis(s.interval),
  queue: s.queue,
  payload: s.payload,
  priority: s.opts.priority,
  maxAttempts: s.opts.maxAttempts,
  expiresMs: Option.getOrNull(Option.map(s.opts.expires, millis)),
  nextFireAt: iso(s.nextFireAt)
})

export const plainLock = (l: Admin.LockInfo) => ({
  name: l.name,
  owner: l.owner,
  token: l.token,
  expiresAt: iso(l.expiresAt),
  held: l.held
})

/** A compact age: `850ms`, `12s`, `5m 3s`, `2h 10m`, `3d 4h`. */
export const shortDuration = (ms: number): string => {
  const sign = ms < 0 ? "-" : ""
  const a = Math.abs(ms)
  if (a < 1000) return `${sign}${Math.round(a)}ms`
  const s = Math.floor(a / 1000)
  if (s < 60) return `${sign}${s}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${sign}${m}m${s % 60 === 0 ? "" : ` ${s % 60}s`}`
  const h = Math.floor(m / 60)
  if (h < 24) return `${sign}${h}h${m % 60 === 0 ? "" : ` ${m % 60}m`}`
  const d = Math.floor(h / 24)
  return `${sign}${d}d${h % 24 === 0 ? "" : ` ${h % 24}h`}`
}

/** An instant relative to now: `in 5m`, `3s ago`. */
export const relative = (at: number, now: number): string =>
  at >= now ? `in ${shortDuration(at - now)}` : `${shortDuration(now - at)} ago`

/**
 * Rates between two readings of the store: enqueues from the id high-water
 * mark, and completions (acked, cancelled or purged: rows that left) as
 * enqueues minus the growth of the table. Per second.
 */
export interface Reading {
  readonly at: number
  readonly totals: Admin.Totals
  readonly queues: ReadonlyArray<Admin.QueueSummary>
}

export const ratesBetween = (before: Reading, after: Reading) => {
  const seconds = (after.at - before.at) / 1000
  if (seconds <= 0) return undefined
  const enqueued = after.totals.lastJobId - before.totals.lastJobId
  const left = enqueued - (after.totals.live - before.totals.live)
  return { enqueuedPerSec: enqueued / seconds, completedPerSec: Math.max(0, left) / seconds }
}

/** Per-queue change of the due depth per second between readings (positive: the backlog grows). */
export const depthDeltas = (before: Reading, after: Reading): ReadonlyMap<string, number> => {
  const seconds = (after.at - before.at) / 1000
  const previous = new Map(before.queues.map((q) => [q.name, q.pending]))
  return new Map(after.queues.map((q) => [q.name, seconds > 0 ? (q.pending - (previous.get(q.name) ?? 0)) / seconds : 0]))
}
