/**
 * Job ids on SQLite: never reused, without `AUTOINCREMENT`.
 *
 * A plain rowid table hands out one more than its largest rowid, so deleting
 * the newest job (an ack, a cancel, a purge) would give its id to the next
 * insert, and a stale id or handle could reach a newer job. `AUTOINCREMENT`
 * prevents that by reading and rewriting `sqlite_sequence` in every insert:
 * ~5 µs of a ~20 µs autocommit enqueue (docs/performance.md). Instead the
 * store keeps a floor in `__alkstore_id_floor`: every delete of the store's
 * is followed, in its transaction, by `keepFloor` (the deleted id becomes the
 * floor when no job above it is left; otherwise nothing is written), or, for
 * a delete by condition (a purge), preceded by `raiseFloor` (the floor to the
 * newest id). An insert's id is one more than the larger of the newest job's
 * and the floor (two cached b-tree reads). A trigger would keep the floor for
 * any client's deletes, but it costs every deleted row ~0.65 µs (a trigger
 * program per row): a third of a batched ack's delete.
 *
 * A multi-row insert gives its first row `nextJobId` and the rest NULL: SQLite
 * numbers those one more than the largest rowid, so one statement's ids stay
 * consecutive (jobInsert.ts counts them back from the last).
 */
export const nextJobId = `(SELECT max(coalesce((SELECT max(id) FROM __alkstore_jobs), 0),
      coalesce((SELECT v FROM __alkstore_id_floor), 0)) + 1)`

/** The high-water mark: the largest id ever handed out (0 for a store that never had a job). */
export const lastJobIdSql = `SELECT max(coalesce((SELECT max(id) FROM __alkstore_jobs), 0),
  coalesce((SELECT v FROM __alkstore_id_floor), 0)) AS id`

/** The floor's table (migration `6_job_ids_without_autoincrement`). */
export const idFloorTable = `CREATE TABLE __alkstore_id_floor (
      only INTEGER PRIMARY KEY CHECK (only = 1),
      v INTEGER NOT NULL
    )`

/** After deleting job `?` (bound three times: `keepFloorParams`), in the same transaction. */
export const keepFloorSql = `UPDATE __alkstore_id_floor SET v = ? WHERE v < ?
    AND NOT EXISTS (SELECT 1 FROM __alkstore_jobs WHERE id > ?)`
export const keepFloorParams = (id: number) => [id, id, id]

/** Before a delete by condition, in the same transaction: the floor to the newest id (a write only when it rises). */
export const raiseFloorSql = `UPDATE __alkstore_id_floor SET v = (SELECT max(id) FROM __alkstore_jobs)
    WHERE v < coalesce((SELECT max(id) FROM __alkstore_jobs), 0)`
