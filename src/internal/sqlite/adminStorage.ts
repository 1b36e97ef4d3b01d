import { Effect, Option } from "effect"
import type { AdminStorage, JobFilter, JobRow, LockInfoRow, QueueDepthRow, ScheduleRow } from "../engine.js"
import type { Executor, Param } from "./executor.js"
import { lastJobIdSql } from "./jobIds.js"
import { migrationsTable } from "./migrations.js"

/**
 * Every statement of the SQLite operator reads (better-sqlite3 binds `?` by
 * position only). The listings use the job table's indexes where one fits,
 * and so does the overview: a read, so under WAL it takes no lock and never
 * blocks a worker in another process, but it runs on this process's event loop.
 */

/** A scheduled row whose `run_at` has passed is due: reported as pending, as `stats` does. */
const isDue = `(state = 'pending' OR (state = 'scheduled' AND run_at <= ?))`

/** A job's columns with its state as an operator reads it at the bound instant. */
const jobColumns = `id, queue, payload,
  CASE WHEN state = 'scheduled' AND run_at <= ? THEN 'pending' ELSE state END AS state,
  priority, run_at, attempts, max_attempts, visibility_timeout, backoff_base, expires_at, claimed_until, worker_id,
  claim_token, created_at, last_error, died_at, trace_context`

export const sql = {
  // One aggregate per state over that state's partial index (covering: queue and run_at are in it), then
  // summed by queue. Grouping the whole table read every row, payloads included: 600-690 ms with a million
  // pending jobs, the event loop held throughout, against 80 ms (docs/performance.md). Binds now twice.
  queueDepths: `SELECT queue, sum(pending) AS pending, sum(scheduled) AS scheduled, sum(claimed) AS claimed,
      sum(dead) AS dead, min(oldest) AS oldest_pending_run_at
    FROM (
      SELECT queue, count(*) AS pending, 0 AS scheduled, 0 AS claimed, 0 AS dead, min(run_at) AS oldest
        FROM __alkstore_jobs WHERE state = 'pending' GROUP BY queue
      UNION ALL SELECT queue, count(*), 0, 0, 0, min(run_at)
        FROM __alkstore_jobs WHERE state = 'scheduled' AND run_at <= ? GROUP BY queue
      UNION ALL SELECT queue, 0, count(*), 0, 0, NULL
        FROM __alkstore_jobs WHERE state = 'scheduled' AND run_at > ? GROUP BY queue
      UNION ALL SELECT queue, 0, 0, count(*), 0, NULL FROM __alkstore_jobs WHERE state = 'claimed' GROUP BY queue
      UNION ALL SELECT queue, 0, 0, 0, count(*), NULL FROM __alkstore_jobs WHERE state = 'dead' GROUP BY queue
    ) GROUP BY queue ORDER BY queue`,
  job: `SELECT ${jobColumns} FROM __alkstore_jobs WHERE id = ?`,
  locks: `SELECT name, owner, token, expires_at FROM __alkstore_locks ORDER BY name`,
  schedules: `SELECT * FROM __alkstore_scheduler_tasks ORDER BY name`,
  // The newest job's id, or the floor the deletes of newer ones left (jobIds.ts).
  lastJobId: lastJobIdSql,
  migrations: `SELECT migration_id, name FROM ${migrationsTable} ORDER BY migration_id`
} as const

/** Each state's condition and how many times it binds now. */
const stateCondition: Record<JobRow["state"], { readonly sql: string; readonly nows: number }> = {
  pending: { sql: isDue, nows: 1 },
  scheduled: { sql: `(state = 'scheduled' AND run_at > ?)`, nows: 1 },
  claimed: { sql: `state = 'claimed'`, nows: 0 },
  dead: { sql: `state = 'dead'`, nows: 0 }
}

/**
 * The listing's table, with the index it must read where the planner's choice could cost a pass
 * over every job, named so that no statistics an application's `ANALYZE` leaves can change it: dead
 * jobs from an index in id order (migration 8), none sorted; claimed ones from their index, sorted
 * (as many as leases are held, where reading the table from its newest row looked at every row when
 * few were claimed). Pending and scheduled listings are the planner's: with a queue their claim-order
 * index and a sort of what it matches, across queues the table from its newest row (an index in id
 * order per live state would be one more entry written by every claim and ack).
 */
const listedFrom = (filter: JobFilter) =>
  filter.state === "dead"
    ? `__alkstore_jobs INDEXED BY ${filter.queue === undefined ? "__alkstore_jobs_dead_by_id" : "__alkstore_jobs_dead_queue_id"}`
    : filter.state === "claimed"
    ? "__alkstore_jobs INDEXED BY __alkstore_jobs_claimed"
    : "__alkstore_jobs"

/** `Admin.jobs`' statement for a checked filter, and its parameters (exported for the plan tests). */
export const jobsListing = (filter: JobFilter, now: number): { readonly text: string; readonly params: Array<Param> } => {
  const conditions: Array<string> = []
  const params: Array<Param> = [now]
  if (filter.queue !== undefined) {
    conditions.push("queue = ?")
    params.push(filter.queue)
  }
  if (filter.state !== undefined) {
    const condition = stateCondition[filter.state]
    conditions.push(condition.sql)
    for (let i = 0; i < condition.nows; i++) params.push(now)
  }
  if (filter.beforeId !== undefined) {
    conditions.push("id < ?")
    params.push(filter.beforeId)
  }
  params.push(filter.limit)
  const where = conditions.length === 0 ? "" : `WHERE ${conditions.join(" AND ")}`
  return { text: `SELECT ${jobColumns} FROM ${listedFrom(filter)} ${where} ORDER BY id DESC LIMIT ?`, params }
}

export const makeAdminStorage = (db: Executor): AdminStorage => ({
  queueDepths: (now) => db.all<QueueDepthRow>(sql.queueDepths, [now, now]),
  jobs: (filter, now) => {
    const listing = jobsListing(filter, now)
    return db.all<JobRow>(listing.text, listing.params)
  },
  job: (id, now) => Effect.map(db.all<JobRow>(sql.job, [now, id]), (rows) => Option.fromNullable(rows[0])),
  locks: db.all<LockInfoRow>(sql.locks, []),
  schedules: db.all<ScheduleRow>(sql.schedules, []),
  lastJobId: Effect.map(db.all<{ id: number }>(sql.lastJobId, []), (rows) => rows[0]?.id ?? 0),
  migrations: Effect.map(
    db.all<{ migration_id: number; name: string }>(sql.migrations, []),
    (rows) => rows.map((row) => `${row.migration_id}_${row.name}`)
  )
})
