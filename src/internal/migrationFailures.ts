import { MigrationError } from "@effect/sql/Migrator"
import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"

/** The ids of a migrations record (`"7_name"` → 7). */
export const migrationIdsOf = (record: Record<string, unknown>): ReadonlyArray<number> =>
  Object.keys(record).map((key) => Number(key.slice(0, key.indexOf("_"))))

/** Whether every id of `wanted` is among the migrations table's rows. */
export const allApplied = (rows: ReadonlyArray<{ readonly migration_id: unknown }>, wanted: ReadonlyArray<number>) => {
  const applied = new Set(rows.map((row) => Number(row.migration_id)))
  return wanted.every((id) => applied.has(id))
}

/**
 * Fails unless every migration is recorded once the Migrator returned, read
 * in its transaction. The Migrator takes a failure to record its rows for
 * another process migrating meanwhile ("locked"), logs it at debug level and
 * returns as if nothing were to do — but the store's own lock (SQLite's
 * `BEGIN IMMEDIATE`, PostgreSQL's advisory lock) rules that out, so such a
 * failure is a database that cannot be written (a read-only file, a full
 * disk, a cancelled statement), and the store must not open on the old schema.
 */
export const checkRecorded = <E, R>(
  rows: Effect.Effect<ReadonlyArray<{ readonly migration_id: unknown }>, E, R>,
  wanted: ReadonlyArray<number>
) =>
  Effect.flatMap(rows, (applied) =>
    allApplied(applied, wanted) ? Effect.void : Effect.fail(
      new MigrationError({
        reason: "failed",
        message: "alkstore: the schema's migrations could not be applied or recorded (a read-only database, a full disk?)"
      })
    ))

/**
 * A store's migration, with its storage failures in the error channel.
 * `@effect/sql`'s Migrator turns a migration statement that fails into a
 * defect (`orDieWith`, as a `MigrationError`), and its savepoint's
 * `ROLLBACK TO` that fails (the connection killed under it) into one too
 * (`orDie`, the `SqlError`): a server restart or a failover during a start
 * killed the host with a defect. Both are failures here; any other defect
 * stays one.
 */
export const migrationFailures = <A, E, R>(migration: Effect.Effect<A, E, R>) =>
  Effect.catchAllDefect(migration, (defect) =>
    defect instanceof SqlError || defect instanceof MigrationError ? Effect.fail(defect) : Effect.die(defect))
