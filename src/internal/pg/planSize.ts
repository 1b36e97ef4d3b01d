import type { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect, Schedule, type Scope } from "effect"
import { realClock } from "../realClock.js"
import type { PgExecutor } from "./executor.js"

/**
 * Cached plans follow the size of the tables they read.
 *
 * A named prepared statement keeps its generic plan until the table's
 * statistics change (an `ANALYZE`, usually autovacuum's, a minute or more
 * away), and the plan is costed on the table's size when it was made: on a
 * table of a page or two every read is a sequential scan. A queue's table is
 * that small whenever its workers keep up (a fresh store, a drained queue
 * whose empty pages vacuum truncated), and a burst grows it by thousands of
 * rows a second: a claim planned on the small table scanned the grown one
 * several times per call until the next `ANALYZE` (docs/performance-pg.md,
 * "Cached plans follow the table's size"). The locks table is the same for an
 * application with a lock per customer.
 *
 * So a statement's name carries the size class of each engine table its text
 * names, `floor(log2(pages))` of `pg_relation_size` (the heap file: it grows
 * with every insert at once and shrinks only when vacuum truncates it). When a
 * class changes, the next call of each statement that reads that table is a
 * new prepared statement, planned on the table as it is now; a plan runs on a
 * table at most twice the size it was made for. Names are reused when a table
 * returns to a class, so a connection holds at most one prepared statement per
 * statement and combination of classes it has met. From 4 096 pages (32 MB of
 * heap) on the class stays the same: a table that size is planned on its
 * indexes already (a batch of 100 probes against thousands of pages), and
 * each class costs a connection ~0.13 MB per statement (docs/engines.md):
 * thirteen classes a table at most.
 */
export const largestSizeClass = 12

export const sizeClassOf = (pages: number): number =>
  pages < 2 ? 0 : Math.min(largestSizeClass, Math.floor(Math.log2(pages)))

/** Each engine table's size class (by its unqualified name), in name order. */
export type SizeClasses = ReadonlyArray<readonly [table: string, sizeClass: number]>

// The engine's own tables (an application may add tables of its own to the schema).
const engineTable = /^__alkstore_[a-z0-9_]+$/

/** The engine's tables' heaps in pages (the planner's own measure of a table's size), as size classes. */
export const tableSizeClasses = (db: PgExecutor, schema: string): Effect.Effect<SizeClasses, SqlError> =>
  Effect.map(
    db.all<{ name: string; pages: number }>(
      `SELECT c.relname AS name, (pg_relation_size(c.oid) / current_setting('block_size')::int)::float8 AS pages
        FROM pg_class AS c WHERE c.relnamespace = '${schema}'::regnamespace AND c.relkind = 'r' ORDER BY c.relname`,
      []
    ),
    (rows) =>
      rows
        .filter((r) => engineTable.test(String(r.name)))
        .map((r) => [String(r.name), sizeClassOf(Number(r.pages))] as const)
  )

/**
 * Reads the size classes now (a failure is the layer's), then every
 * `everyMillis` of real time in a fiber of the scope (a failure is logged
 * and the next check tries again), telling `db` each time. Only the
 * engine's own tables are followed.
 */
export const followTableSizes = (
  db: PgExecutor,
  schema: string,
  everyMillis: number
): Effect.Effect<void, SqlError, Scope.Scope> => {
  const check = Effect.map(tableSizeClasses(db, schema), db.planFor)
  // statements that went unprepared (preparedStatements.ts) are planned on every call: nothing to follow
  const checks = Effect.suspend(() => db.prepared() ? check : Effect.void).pipe(
    // whatever failed (the server, or a defect), the next check tries again: the fiber never ends early
    Effect.catchAllCause((cause) => Effect.logDebug("alkstore: reading the engine tables' sizes failed", cause)),
    Effect.repeat(Schedule.spaced(Duration.millis(everyMillis))),
    Effect.delay(Duration.millis(everyMillis))
  )
  return Effect.zipRight(check, Effect.asVoid(Effect.forkScoped(Effect.withClock(checks, realClock))))
}
