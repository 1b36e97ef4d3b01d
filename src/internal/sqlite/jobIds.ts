/**
 * Job ids on SQLite: never reused, without `AUTOINCREMENT`.
 *
 * A plain rowid table hands out one more than its largest rowid, so deleting
 * the newest job (an ack, a cancel, a purge) would give its id to the next
 * insert, and a stale id or handle could reach a newer job. `AUTOINCREMENT`
 * prevents that by reading and rewriting `sqlite_sequence` in every insert:
 * ~5 µs of a ~20 µs autocommit enqueue (docs/performance.md). Instead the
 * table keeps a floor: a trigger records a deleted job's id in
 * `__alkstore_id_floor` when no job above it is left (the only delete that
 * could lead to reuse; any other delete writes nothing), and an insert's id
 * is one more than the larger of the newest job's and the floor (two cached
 * b-tree reads). Every process's deletes run the trigger, so the rule holds
 * across processes and for any client of the file.
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

/** The floor's table and the trigger that keeps it (migration `6_job_ids_without_autoincrement`). */
export const idFloorTable = `CREATE TABLE __alkstore_id_floor (
      only INTEGER PRIMARY KEY CHECK (only = 1),
      v INTEGER NOT NULL
    )`
export const idFloorTrigger = `CREATE TRIGGER __alkstore_jobs_id_floor AFTER DELETE ON __alkstore_jobs
    WHEN old.id > coalesce((SELECT max(id) FROM __alkstore_jobs), 0)
    BEGIN
      UPDATE __alkstore_id_floor SET v = old.id WHERE v < old.id;
    END`
