import { Effect, Option } from "effect"
import { newScheduleValues, type ScheduleStorage } from "../engine.js"
import { registrationsTopic } from "../scheduler.js"
import type { PgExecutor } from "./executor.js"
import type { Notifier } from "./notify.js"
import { decoded, intOrNull, scheduleColumns, toScheduleRow } from "./rows.js"

/**
 * Every statement of the PostgreSQL scheduler. The tick's transaction reads
 * the due rows `FOR UPDATE` (after the lease's `FOR SHARE` re-check), so a
 * second ticker that slipped past its lease waits, then finds them advanced
 * and skips the boundary. Registration changes notify the leader.
 */
const statements = (s: string, n: Notifier) => {
  const tasks = `${s}.__alkstore_scheduler_tasks`
  return {
    upsert: `WITH w AS (INSERT INTO ${tasks} AS t
        (name, spec, interval_ms, queue, payload, priority, max_attempts, expires_ms, next_fire_at, created_at, updated_at,
         group_key)
      VALUES ($1, $2, $3::bigint, $4, $5::text::json, $6::bigint, $7::bigint, $8::bigint, $9::bigint, $10::bigint,
        $11::bigint, $14::text)
      ON CONFLICT (name) DO UPDATE SET
        next_fire_at = CASE WHEN t.spec = excluded.spec THEN t.next_fire_at ELSE excluded.next_fire_at END,
        spec = excluded.spec,
        interval_ms = excluded.interval_ms,
        queue = excluded.queue,
        payload = excluded.payload,
        priority = excluded.priority,
        max_attempts = excluded.max_attempts,
        expires_ms = excluded.expires_ms,
        group_key = excluded.group_key,
        updated_at = excluded.updated_at
      RETURNING ${scheduleColumns}, $13::text AS topic)
      SELECT w.*, ${n.tail(12)} FROM w`,
    remove: `WITH w AS (DELETE FROM ${tasks} WHERE name = $1 RETURNING name, $3::text AS topic)
      SELECT w.name, ${n.tail(2)} FROM w`,
    due: `SELECT ${scheduleColumns} FROM ${tasks} WHERE next_fire_at <= $1::bigint ORDER BY next_fire_at, name
      LIMIT $2::bigint FOR UPDATE`,
    // every due schedule of the tick in one round trip (one per schedule made a tick of 10 000 take seconds)
    advance: `UPDATE ${tasks} AS t SET next_fire_at = m.next
      FROM unnest($1::text[], $2::bigint[]) AS m(name, next) WHERE t.name = m.name`,
    next: `SELECT min(next_fire_at) AS at FROM ${tasks}`
  } as const
}

export const makeScheduleStorage = (db: PgExecutor, schema: string, notifier: Notifier): ScheduleStorage => {
  const sql = statements(schema, notifier)
  return {
    upsert: (s, now) =>
      Effect.map(
        decoded(
          db.all(sql.upsert, [
            ...newScheduleValues(s, now),
            ...notifier.params,
            registrationsTopic,
            s.group
          ]),
          toScheduleRow
        ),
        (rows) => rows[0]!
      ),
    remove: (name) =>
      Effect.map(db.all(sql.remove, [name, ...notifier.params, registrationsTopic]), (rows) => rows.length > 0),
    due: (now, limit) => decoded(db.all(sql.due, [now, limit]), toScheduleRow),
    advance: (moves) =>
      moves.length === 0
        ? Effect.void
        : Effect.asVoid(db.all(sql.advance, [moves.map(([name]) => name), moves.map(([, next]) => next)])),
    nextFireAt: Effect.map(
      decoded(db.all(sql.next, []), (row) => intOrNull(row.at, "at")),
      (rows) => Option.fromNullable(rows[0] ?? null)
    )
  }
}
