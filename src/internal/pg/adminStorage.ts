import type { SqlError } from "@effect/sql/SqlError"
import { SqlError as SqlErrorClass } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import type { AdminStorage, JobRow, LockInfoRow, QueueDepthRow, ScheduleRow } from "../engine.js"

/**
 * The PostgreSQL engine's operator reads (the `Admin` service), over the
 * engine's tables in `schema`. Reads only, outside any transaction of the
 * caller's unless one is open. `bigint` columns arrive as strings: every
 * number is decoded strictly (a value past 2^53 is a `SqlError`).
 */
export interface PgReader {
  readonly all: (text: string, params: ReadonlyArray<string | number | null>) => Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError>
}

const int = (value: unknown, field: string): number => {
  const n = typeof value === "number" ? value : typeof value === "string" && /^-?\d+$/.test(value) ? Number(value) : NaN
  if (!Number.isSafeInteger(n)) throw new Error(`column ${field} holds ${String(value)}, which is not a safe integer`)
  return n
}
const intOrNull = (value: unknown, field: string) => (value === null || value === undefined ? null : int(value, field))

const decoded = <A>(rows: Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError>, decode: (row: Record<string, unknown>) => A) =>
  Effect.flatMap(rows, (raw) =>
    Effect.try({
      try: () => raw.map(decode),
      catch: (cause) => new SqlErrorClass({ cause, message: `Failed to decode a row: ${(cause as Error).message}` })
    }))

const toJobRow = (r: Record<string, unknown>): JobRow => ({
  id: int(r.id, "id"),
  queue: r.queue as string,
  payload: r.payload as string,
  state: r.state as JobRow["state"],
  priority: int(r.priority, "priority"),
  run_at: int(r.run_at, "run_at"),
  attempts: int(r.attempts, "attempts"),
  max_attempts: int(r.max_attempts, "max_attempts"),
  visibility_timeout: int(r.visibility_timeout, "visibility_timeout"),
  backoff_base: int(r.backoff_base, "backoff_base"),
  expires_at: intOrNull(r.expires_at, "expires_at"),
  claimed_until: intOrNull(r.claimed_until, "claimed_until"),
  worker_id: (r.worker_id ?? null) as string | null,
  claim_token: int(r.claim_token, "claim_token"),
  created_at: int(r.created_at, "created_at"),
  last_error: (r.last_error ?? null) as string | null,
  died_at: intOrNull(r.died_at, "died_at")
})

const toScheduleRow = (r: Record<string, unknown>): ScheduleRow => ({
  name: r.name as string,
  spec: r.spec as string,
  interval_ms: int(r.interval_ms, "interval_ms"),
  queue: r.queue as string,
  payload: r.payload as string,
  priority: int(r.priority, "priority"),
  max_attempts: int(r.max_attempts, "max_attempts"),
  expires_ms: intOrNull(r.expires_ms, "expires_ms"),
  next_fire_at: int(r.next_fire_at, "next_fire_at"),
  created_at: int(r.created_at, "created_at"),
  updated_at: int(r.updated_at, "updated_at")
})

/** A due scheduled row is pending, as `stats` reports it; `$1` is now. */
const isDue = `(state = 'pending' OR (state = 'scheduled' AND run_at <= $1::bigint))`

const stateCondition: Record<JobRow["state"], string> = {
  pending: isDue,
  scheduled: `(state = 'scheduled' AND run_at > $1::bigint)`,
  claimed: `state = 'claimed'`,
  dead: `state = 'dead'`
}

export const makeAdminStorage = (db: PgReader, schema: string): AdminStorage => {
  const jobs = `${schema}.__alkstore_jobs`
  // The payload as the exact text stored (json, not parsed by the driver).
  const jobColumns = `id, queue, payload::text AS payload,
    CASE WHEN state = 'scheduled' AND run_at <= $1::bigint THEN 'pending' ELSE state END AS state,
    priority, run_at, attempts, max_attempts, visibility_timeout, backoff_base, expires_at, claimed_until, worker_id,
    claim_token, created_at, last_error, died_at`
  const sql = {
    queueDepths: `SELECT queue,
        count(*) FILTER (WHERE ${isDue}) AS pending,
        count(*) FILTER (WHERE state = 'scheduled' AND run_at > $1::bigint) AS scheduled,
        count(*) FILTER (WHERE state = 'claimed') AS claimed,
        count(*) FILTER (WHERE state = 'dead') AS dead,
        min(run_at) FILTER (WHERE ${isDue}) AS oldest_pending_run_at
      FROM ${jobs} GROUP BY queue ORDER BY queue COLLATE "C"`,
    job: `SELECT ${jobColumns} FROM ${jobs} WHERE id = $2::bigint`,
    locks: `SELECT name, owner, token, expires_at FROM ${schema}.__alkstore_locks ORDER BY name COLLATE "C"`,
    schedules: `SELECT name, spec, interval_ms, queue, payload::text AS payload, priority, max_attempts, expires_ms,
        next_fire_at, created_at, updated_at
      FROM ${schema}.__alkstore_scheduler_tasks ORDER BY name COLLATE "C"`,
    // The identity's sequence keeps the high-water mark after the rows are gone.
    lastJobId: `SELECT coalesce((SELECT last_value FROM pg_sequences
        WHERE schemaname = $1 AND sequencename = '__alkstore_jobs_id_seq'), 0) AS id`,
    migrations: `SELECT migration_id, name FROM ${schema}.__alkstore_migrations ORDER BY migration_id`
  } as const
  return {
    queueDepths: (now) =>
      decoded(db.all(sql.queueDepths, [now]), (r): QueueDepthRow => ({
        queue: r.queue as string,
        pending: int(r.pending, "pending"),
        scheduled: int(r.scheduled, "scheduled"),
        claimed: int(r.claimed, "claimed"),
        dead: int(r.dead, "dead"),
        oldest_pending_run_at: intOrNull(r.oldest_pending_run_at, "oldest_pending_run_at")
      })),
    jobs: (filter, now) => {
      const conditions: Array<string> = []
      const params: Array<string | number | null> = [now]
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
      return decoded(
        db.all(`SELECT ${jobColumns} FROM ${jobs} ${where} ORDER BY id DESC LIMIT $${params.length}::bigint`, params),
        toJobRow
      )
    },
    job: (id, now) => Effect.map(decoded(db.all(sql.job, [now, id]), toJobRow), (rows) => Option.fromNullable(rows[0])),
    locks: decoded(db.all(sql.locks, []), (r): LockInfoRow => ({
      name: r.name as string,
      owner: r.owner as string,
      token: int(r.token, "token"),
      expires_at: int(r.expires_at, "expires_at")
    })),
    schedules: decoded(db.all(sql.schedules, []), toScheduleRow),
    lastJobId: Effect.map(decoded(db.all(sql.lastJobId, [schema]), (r) => int(r.id, "id")), (rows) => rows[0] ?? 0),
    migrations: decoded(db.all(sql.migrations, []), (r) => `${int(r.migration_id, "migration_id")}_${r.name as string}`)
  }
}
