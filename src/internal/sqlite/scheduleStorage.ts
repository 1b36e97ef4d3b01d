import { Effect, Option } from "effect"
import { newScheduleValues, type ScheduleRow, type ScheduleStorage } from "../engine.js"
import type { Executor } from "./executor.js"

/**
 * Every statement of the SQLite scheduler. Its tick runs inside one
 * `BEGIN IMMEDIATE` transaction, which serializes writers: that is SQLite's
 * row lock on the schedule rows.
 */
const sql = {
  upsert: `INSERT INTO __alkstore_scheduler_tasks
      (name, spec, interval_ms, queue, payload, priority, max_attempts, expires_ms, next_fire_at, created_at, updated_at,
       group_key)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (name) DO UPDATE SET
      next_fire_at = CASE WHEN __alkstore_scheduler_tasks.spec = excluded.spec
        THEN __alkstore_scheduler_tasks.next_fire_at ELSE excluded.next_fire_at END,
      spec = excluded.spec,
      interval_ms = excluded.interval_ms,
      queue = excluded.queue,
      payload = excluded.payload,
      priority = excluded.priority,
      max_attempts = excluded.max_attempts,
      expires_ms = excluded.expires_ms,
      group_key = excluded.group_key,
      updated_at = excluded.updated_at
    RETURNING *`,
  remove: `DELETE FROM __alkstore_scheduler_tasks WHERE name = ? RETURNING name`,
  due: `SELECT * FROM __alkstore_scheduler_tasks WHERE next_fire_at <= ? ORDER BY next_fire_at, name LIMIT ?`,
  advance: `UPDATE __alkstore_scheduler_tasks SET next_fire_at = ? WHERE name = ?`,
  next: `SELECT min(next_fire_at) AS at FROM __alkstore_scheduler_tasks`
} as const

export const makeScheduleStorage = (db: Executor): ScheduleStorage => ({
  upsert: (s, now) =>
    Effect.map(
      db.all<ScheduleRow>(sql.upsert, [...newScheduleValues(s, now), s.group]),
      (rows) => rows[0]!
    ),
  remove: (name) => Effect.map(db.all(sql.remove, [name]), (rows) => rows.length > 0),
  due: (now, limit) => db.all<ScheduleRow>(sql.due, [now, limit]),
  // one prepared statement run per row, in one go (a few microseconds each on the store's own connection)
  advance: (moves) => moves.length === 0 ? Effect.void : Effect.asVoid(db.runEach(sql.advance, moves.map(([name, next]) => [next, name]))),
  nextFireAt: Effect.map(db.all<{ at: number | null }>(sql.next, []), (rows) => Option.fromNullable(rows[0]?.at))
})
