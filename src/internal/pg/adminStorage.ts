import { Effect, Option } from "effect"
import type { AdminStorage, JobFilter, JobRow, LockInfoRow, QueueDepthRow } from "../engine.js"
import type { Param, PgExecutor } from "./executor.js"
import { migrationsTable } from "./migrations.js"
import { decoded, int, intOrNull, jobColumns, scheduleColumns, toJobRow, toScheduleRow } from "./rows.js"

const isDue = `(state = 'pending' OR (state = 'scheduled' AND run_at <= $1::bigint))`
// A job's columns with its state as an operator reads it at $1.
const columns = jobColumns().replace(
  /(^|, )state(?=,)/,
  (_, head: string) => `${head}CASE WHEN state = 'scheduled' AND run_at <= $1::bigint THEN 'pending' ELSE state END AS state`
)
const stateCondition: Record<JobRow["state"], string> = {
  pending: isDue,
  scheduled: `(state = 'scheduled' AND run_at > $1::bigint)`,
  claimed: `state = 'claimed'`,
  dead: `state = 'dead'`
}

/**
 * `Admin.jobs`' statement for a checked filter in schema `s`, and its parameters (exported for the
 * plan tests). Dead jobs have indexes in id order (migration 8); the other states' listings are the
 * planner's choice between their claim-order indexes and the primary key (an index in id order per
 * live state would be one more entry written by every claim and ack).
 */
export const jobsListing = (s: string) => (filter: JobFilter, now: number) => {
  const conditions: Array<string> = []
  const params: Array<Param> = [now]
  if (filter.queue !== undefined) {
    params.push(filter.queue)
    conditions.push(`queue = $${params.length}`)
  }
  if (filter.state !== undefined) conditions.push(stateCondition[filter.state])
  if (filter.beforeId !== undefined) {
    params.push(filter.beforeId)
    conditions.push(`id < $${params.length}::bigint`)
  }
  params.push(filter.limit)
  const where = conditions.length === 0 ? "" : `WHERE ${conditions.join(" AND ")}`
  return {
    text: `SELECT ${columns} FROM ${s}.__alkstore_jobs ${where} ORDER BY id DESC LIMIT $${params.length}`,
    params
  }
}

/**
 * Every statement of the PostgreSQL operator reads (CLI, dashboard), for the
 * tables of schema `s`; reads only, so they never block a worker. As on
 * SQLite, a scheduled row whose `run_at` has passed is reported as pending.
 */
export const makeAdminStorage = (db: PgExecutor, s: string): AdminStorage => {
  const jobs = `${s}.__alkstore_jobs`
  const listJobs = jobsListing(s)
  return {
    queueDepths: (now) =>
      decoded(
        db.all(
          `SELECT queue,
            count(*) FILTER (WHERE ${isDue}) AS pending,
            count(*) FILTER (WHERE state = 'scheduled' AND run_at > $1::bigint) AS scheduled,
            count(*) FILTER (WHERE state = 'claimed') AS claimed,
            count(*) FILTER (WHERE state = 'dead') AS dead,
            min(run_at) FILTER (WHERE ${isDue}) AS oldest_pending_run_at
          FROM ${jobs} GROUP BY queue ORDER BY queue`,
          [now]
        ),
        (row): QueueDepthRow => ({
          queue: row.queue as string,
          pending: int(row.pending, "pending"),
          scheduled: int(row.scheduled, "scheduled"),
          claimed: int(row.claimed, "claimed"),
          dead: int(row.dead, "dead"),
          oldest_pending_run_at: intOrNull(row.oldest_pending_run_at, "oldest_pending_run_at")
        })
      ),
    jobs: (filter, now) => {
      const listing = listJobs(filter, now)
      return decoded(db.all(listing.text, listing.params), toJobRow)
    },
    job: (id, now) =>
      Effect.map(
        decoded(db.all(`SELECT ${columns} FROM ${jobs} WHERE id = $2::bigint`, [now, id]), toJobRow),
        (rows) => Option.fromNullable(rows[0])
      ),
    locks: decoded(
      db.all(`SELECT name, owner, token, expires_at FROM ${s}.__alkstore_locks ORDER BY name`, []),
      (row): LockInfoRow => ({
        name: row.name as string,
        owner: row.owner as string,
        token: int(row.token, "token"),
        expires_at: int(row.expires_at, "expires_at")
      })
    ),
    schedules: decoded(
      db.all(`SELECT ${scheduleColumns} FROM ${s}.__alkstore_scheduler_tasks ORDER BY name`, []),
      toScheduleRow
    ),
    // The identity's high-water mark survives the rows (0 before the first job). Not yet called, the
    // sequence's next value is `last_value` itself: its start (1), or where an import restarted it.
    lastJobId: Effect.map(
      decoded(
        db.all(
          `SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END AS id
           FROM ${s}.__alkstore_jobs_id_seq`,
          []
        ),
        (row) => int(row.id, "id")
      ),
      (rows) => rows[0] ?? 0
    ),
    migrations: Effect.map(
      decoded(
        db.all(`SELECT migration_id, name FROM ${s}.${migrationsTable} ORDER BY migration_id`, []),
        (row) => `${int(row.migration_id, "migration_id")}_${row.name as string}`
      ),
      (rows) => rows
    )
  }
}
