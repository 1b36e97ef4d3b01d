/**
 * `SqliteStore.layerFromClient` after the application's COMMIT failed.
 * `@effect/sql` 0.52 turns a failed COMMIT into a defect and never rolls
 * back, so the application's connection stays inside the open transaction.
 * The store must not take writes there (they would be visible to that
 * connection and never commit): it fails with a typed `SqlError` until the
 * application rolls back. SQLite-specific: a failed COMMIT leaves the
 * transaction open on SQLite (PostgreSQL ends it either way).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import Sqlite from "better-sqlite3"
import { Cause, Effect, Exit } from "effect"
import { freshFile, sqliteFromClient } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"
import { expectSqlError } from "./contract/transactions.js"

/** Jobs a separate connection sees: committed ones only. */
const committedJobs = (filename: string) => {
  const db = new Sqlite(filename, { readonly: true })
  try {
    return (db.prepare("SELECT count(*) AS n FROM __alkstore_jobs").get() as { n: number }).n
  } finally {
    db.close()
  }
}

/** Makes the application's COMMIT fail: a deferred foreign key left violated. */
const failedCommit = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`PRAGMA foreign_keys = ON`
  yield* sql`CREATE TABLE parent (id INTEGER PRIMARY KEY)`
  yield* sql`CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)`
  const exit = yield* Effect.exit(sql.withTransaction(sql`INSERT INTO child (parent) VALUES (42)`))
  // @effect/sql 0.52: a defect, and no ROLLBACK.
  expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
})

describe("layerFromClient after the application's COMMIT failed", () => {
  it.effect("writes fail with a typed SqlError naming the open transaction instead of joining it; after ROLLBACK they work again", () => {
    const filename = freshFile("failed-commit")
    return Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const queue = yield* queueOf("after-failed-commit")
      yield* failedCommit
      const writes: ReadonlyArray<Effect.Effect<unknown, unknown>> = [
        queue.enqueue({ n: 1 }),
        queue.enqueueBatch([{ n: 2 }, { n: 3 }]),
        queue.claim("w")
      ]
      for (const write of writes) {
        expectSqlError(yield* Effect.exit(write), "inside a transaction that no fiber holds")
      }
      expect(committedJobs(filename)).toBe(0)
      // What the application must do after a failed COMMIT.
      yield* sql`ROLLBACK`
      const id = yield* queue.enqueue({ n: 4 })
      expect(id).toBeGreaterThan(0)
      expect(committedJobs(filename)).toBe(1)
    }).pipe(Effect.provide(sqliteFromClient.store({ filename })))
  })
})
