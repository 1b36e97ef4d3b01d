/**
 * Nested transactions run side by side inside one transaction take turns (src/internal/savepointTurns.ts):
 * every savepoint at one depth is `alkstore_sp_<depth>`, and SQLite's `ROLLBACK TO` / `RELEASE` act on the
 * newest savepoint of that name, so a failing sibling rolled back to the other one's savepoint — undoing the
 * other's enqueue and keeping its own write. SqliteStore.layer's `withTransaction` is the store's; the same on
 * PgStore.layer is in test/pg-app-transactions-review.test.ts. Failed before the turns.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit } from "effect"
import { sqliteOwned } from "./contract/harness.js"
import { jobCount, queueOf } from "./contract/support.js"

describe(`sibling nested transactions — ${sqliteOwned.name}`, () => {
  // docs/queues-and-locks.md, "Transactions": its `withTransaction` "nests as savepoints" and "An enqueue inside
  // `sql.withTransaction(...)` commits or rolls back with the application's own writes".
  it.effect("a failing sibling rolls back its own write only; the other's enqueue commits", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE siblings (v INTEGER)`
      const queue = yield* queueOf("siblings")
      const aWrote = yield* Deferred.make<void>()
      const aEnded = yield* Deferred.make<void>()
      // A writes, then fails once B called its withTransaction; B enqueues and, inside its savepoint, waits for A
      // to end. Taking turns, B's savepoint starts only once A's ended, so neither waits for ever.
      const bCalled = yield* Deferred.make<void>()
      const exit = yield* Effect.exit(sql.withTransaction(Effect.all([
        Effect.exit(sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO siblings VALUES (1)`
          yield* Deferred.succeed(aWrote, undefined)
          yield* Deferred.await(bCalled)
          return yield* Effect.fail("a fails")
        }))).pipe(Effect.ensuring(Deferred.succeed(aEnded, undefined))),
        Effect.zipRight(
          Deferred.await(aWrote),
          Effect.zipRight(
            Deferred.succeed(bCalled, undefined),
            Effect.exit(sql.withTransaction(Effect.zipRight(queue.enqueue({ n: 2 }), Deferred.await(aEnded))))
          )
        )
      ], { concurrency: 2 })))
      expect(Exit.isSuccess(exit) && exit.value.map((e: Exit.Exit<unknown, unknown>) => Exit.isSuccess(e))).toEqual([false, true])
      const rows = yield* sql<{ v: number }>`SELECT v FROM siblings`
      expect({ rows: rows.map((r) => r.v), jobs: yield* jobCount }).toEqual({ rows: [], jobs: 1 })
    }).pipe(Effect.provide(sqliteOwned.store({ fallbackPoll: "1 hour" }))))
})
