/**
 * Real storage faults and real write counts for contract tests, without
 * mocks: triggers on the store's own tables, created and dropped by the
 * test through the application's `SqlClient`. A fault trigger makes a
 * statement fail at execution with a genuine `SqlError` from the engine (a
 * stand-in for busy-past-patience or a dropped connection); a counting
 * trigger counts attempted inserts. Each is written per dialect, so the
 * contract files that use them stay engine-agnostic.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

type Event = "INSERT" | "UPDATE" | "DELETE"

const dialectSql = (statements: { readonly sqlite: ReadonlyArray<string>; readonly pg: ReadonlyArray<string> }) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.forEach(
      sql.onDialectOrElse({
        sqlite: () => statements.sqlite,
        pg: () => statements.pg,
        orElse: () => {
          throw new Error("faults.ts: no trigger syntax for this dialect")
        }
      }),
      (statement) => sql.unsafe(statement),
      { discard: true }
    ))

/**
 * While `effect` runs, every `event` statement on `table` fails with a `SqlError` ("storage down"); with `when`
 * (a row condition both dialects read, e.g. `OLD.id = 7`), only those on the rows it holds for.
 */
export const failing = (table: string, event: Event, when?: string) => {
  const name = `test_fault_${table}_${event.toLowerCase()}`
  const condition = when === undefined ? "" : ` WHEN (${when})`
  return {
    start: dialectSql({
      sqlite: [`CREATE TRIGGER ${name} BEFORE ${event} ON ${table}${condition} BEGIN SELECT RAISE(ABORT, 'storage down'); END`],
      pg: [
        `CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'storage down'; END $$`,
        `CREATE TRIGGER ${name} BEFORE ${event} ON ${table} FOR EACH ROW${condition} EXECUTE FUNCTION ${name}()`
      ]
    }),
    stop: dialectSql({
      sqlite: [`DROP TRIGGER ${name}`],
      pg: [`DROP TRIGGER ${name} ON ${table}`, `DROP FUNCTION ${name}()`]
    })
  }
}

/** Runs `effect` while `event` statements on `table` fail; the fault is cleared however it ends. */
export const whileFailing = <A, E, R>(table: string, event: Event, effect: Effect.Effect<A, E, R>) => {
  const fault = failing(table, event)
  return Effect.acquireUseRelease(fault.start, () => effect, () => Effect.orDie(fault.stop))
}

/**
 * Counts the lock acquires of `name` (each attempt, taken or refused): the
 * effect returned reads the count so far. On SQLite an acquire is an upsert,
 * counted by a trigger before each insert of the name whether or not it then
 * conflicts; the counter and its trigger are TEMP: they see the statements of
 * the application's connection only (the store's own), and counting writes
 * nothing to the database file, so it wakes no watcher. On PostgreSQL a
 * refused acquire writes no row at all (src/internal/pg/lockStorage.ts), so a
 * trigger per statement counts the acquire's statement by its text (every
 * connection's: the only lock these tests take is the one counted).
 */
export const countLockAcquires = (name: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const counter = "test_count_lock_acquires"
    yield* dialectSql({
      sqlite: [
        `CREATE TEMP TABLE ${counter} (n INTEGER NOT NULL)`,
        `INSERT INTO ${counter} (n) VALUES (0)`,
        `CREATE TEMP TRIGGER ${counter} BEFORE INSERT ON __alkstore_locks WHEN NEW.name = '${name}'
          BEGIN UPDATE ${counter} SET n = n + 1; END`
      ],
      pg: [
        `CREATE TABLE ${counter} (n INTEGER NOT NULL)`,
        `INSERT INTO ${counter} (n) VALUES (0)`,
        `CREATE FUNCTION ${counter}() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN IF current_query() LIKE '%WITH taken AS%' THEN UPDATE ${counter} SET n = n + 1; END IF; RETURN NULL; END $$`,
        `CREATE TRIGGER ${counter} BEFORE UPDATE ON __alkstore_locks FOR EACH STATEMENT EXECUTE FUNCTION ${counter}()`
      ]
    })
    return Effect.map(sql.unsafe<{ n: number }>(`SELECT n FROM ${counter}`), (rows) => Number(rows[0]!.n))
  })
