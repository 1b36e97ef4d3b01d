/**
 * A review of the application's transactions on `PgStore.layer`'s client: its `SqlClient`/`PgClient`
 * `withTransaction` is the store's own transaction (src/internal/pg/store.ts `layer`; the implementation is
 * `transaction`/`savepoint` in src/internal/pg/executor.ts). Each test here failed on the code before its fix.
 *
 * docs/queues-and-locks.md, "Transactions": "`PgStore.layer`'s `SqlClient` (and `PgClient`) is the store's pool
 * and its `withTransaction` the store's the same way (`BEGIN`, savepoints, a typed `SqlError` for a failed `BEGIN`
 * or `COMMIT`, wakes after the commit)" and "An enqueue inside `sql.withTransaction(...)` commits or rolls back
 * with the application's own writes". docs/engines.md, "Transactions": "The store's own transactions turn a failed
 * `BEGIN` or `COMMIT` into a typed `SqlError` (never a defect) [...] and run the wake signals only after `COMMIT`
 * succeeded; the `SqlClient` `PgStore.layer` provides has them as its `withTransaction`".
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Option } from "effect"
import { pgOwned } from "./contract/harness.js"
import { jobCount, queueOf } from "./contract/support.js"

const outcome = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return "success"
  if (Cause.isDie(exit.cause)) return "defect"
  if (Cause.isInterruptedOnly(exit.cause)) return "interrupted"
  const failure = Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string } | undefined
  return failure?._tag ?? String(failure)
}

const values = (sql: SqlClient.SqlClient, table: string) =>
  Effect.map(sql.unsafe<{ v: number }>(`SELECT v FROM ${table} ORDER BY v`), (rows) => rows.map((r) => r.v))

describe(`the application's transactions on PgStore.layer's client (review) — ${pgOwned.name}`, () => {
  // docs/queues-and-locks.md: "a typed `SqlError` for a failed `BEGIN` or `COMMIT`" and "An enqueue inside
  // `sql.withTransaction(...)` commits or rolls back with the application's own writes"; docs/engines.md: "run the
  // wake signals only after `COMMIT` succeeded". A statement that failed inside the transaction (here a duplicate
  // key the application tolerates with `Effect.either`, an "insert if absent") aborts a PostgreSQL transaction;
  // its `COMMIT` then ends it as a ROLLBACK — PostgreSQL answers without an error, with the command tag `ROLLBACK`.
  // Expected: `withTransaction` never reports success for writes it did not commit (the same program commits
  // them on SqliteStore.layer, where a failed statement does not abort the transaction); on PostgreSQL that means
  // the typed `SqlError`, since nothing can be committed any more. Observed: it SUCCEEDS — the enqueue returned an id, the wake signals ran — and nothing was committed: the job
  // and the row are gone, silently.
  it.effect("a transaction whose COMMIT PostgreSQL turned into a ROLLBACK reports success, its enqueue and writes lost", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE review_orders (v int PRIMARY KEY)`
      yield* sql`INSERT INTO review_orders VALUES (0)`
      const queue = yield* queueOf("review-aborted-commit")
      const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO review_orders VALUES (1)`
        yield* queue.enqueue({ order: 1 })
        yield* Effect.either(sql`INSERT INTO review_orders VALUES (0)`) // already there: tolerated
      })))
      expect({ outcome: outcome(exit), rows: yield* values(sql, "review_orders"), jobs: yield* jobCount })
        .toEqual({ outcome: "SqlError", rows: [0], jobs: 0 })
    }).pipe(Effect.provide(pgOwned.store({ fallbackPoll: "1 hour" }))))

  // docs/queues-and-locks.md: "its `withTransaction` the store's the same way (`BEGIN`, savepoints, ...)"; a nested
  // `withTransaction` is a savepoint, so its failure rolls back its own part only and the outer transaction goes on
  // (as it does for an inner `Effect.fail` or defect). Here the inner effect tolerates a failed statement and
  // succeeds; its `RELEASE SAVEPOINT` then fails (the transaction is aborted) and the inner `withTransaction` fails
  // with that `SqlError` — but `savepoint` (executor.ts) does not roll back to the savepoint when the RELEASE fails.
  // Expected: the inner part rolled back, the outer's later insert runs, [1, 3] committed. Observed: the outer's
  // next statement fails ("current transaction is aborted"), and the whole transaction is lost.
  it.effect("an inner withTransaction whose RELEASE failed is not rolled back: the outer transaction cannot go on", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE review_nested (v int PRIMARY KEY)`
      const inner = yield* Deferred.make<string>()
      const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO review_nested VALUES (1)`
        const nested = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO review_nested VALUES (2)`
          yield* Effect.either(sql`INSERT INTO review_nested VALUES (1)`) // duplicate: tolerated
        })))
        yield* Deferred.succeed(inner, outcome(nested))
        yield* sql`INSERT INTO review_nested VALUES (3)`
      })))
      expect({
        inner: yield* Deferred.await(inner),
        outer: outcome(exit),
        committed: yield* values(sql, "review_nested")
      }).toEqual({ inner: "SqlError", outer: "success", committed: [1, 3] })
    }).pipe(Effect.provide(pgOwned.store({ fallbackPoll: "1 hour" }))))

  // docs/queues-and-locks.md: "An enqueue inside `sql.withTransaction(...)` commits or rolls back with the
  // application's own writes" and "(`BEGIN`, savepoints, ...)". Careful-user expectation: two nested
  // `withTransaction`s run concurrently in one transaction (`Effect.all` with concurrency — their statements share
  // the transaction's connection) each commit or roll back their own part. Every savepoint at one depth is named
  // `alkstore_sp_<depth>` (executor.ts `savepoint`), and PostgreSQL's ROLLBACK TO / RELEASE take the most recent
  // savepoint of a name: the failing sibling's `ROLLBACK TO alkstore_sp_1` rolls back to the OTHER sibling's
  // savepoint (undoing its enqueue, not its own insert), and the other's RELEASE releases the failing one's.
  // Expected: the failed sibling's row absent, the succeeding sibling's job committed. Observed: the failed
  // sibling's row committed, the job whose enqueue returned an id (its `withTransaction` succeeded) gone.
  it.effect("concurrent sibling withTransactions share one savepoint name: a failing one undoes the other's enqueue and keeps its own write", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE review_siblings (v int)`
      const queue = yield* queueOf("review-siblings")
      const aWrote = yield* Deferred.make<void>()
      const bCalled = yield* Deferred.make<void>()
      // A writes, then fails once B has called its own withTransaction (B's SAVEPOINT is then on the wire, after
      // A's: both are `alkstore_sp_1`); B enqueues. Neither body waits on the other's, so taking turns cannot
      // deadlock them: B's savepoint simply starts once A's has ended.
      const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
        const [a, b] = yield* Effect.all([
          Effect.exit(sql.withTransaction(Effect.gen(function*() {
            yield* sql`INSERT INTO review_siblings VALUES (1)`
            yield* Deferred.succeed(aWrote, undefined)
            yield* Deferred.await(bCalled)
            return yield* Effect.fail("a fails")
          }))),
          Effect.zipRight(
            Deferred.await(aWrote),
            Effect.zipRight(
              Deferred.succeed(bCalled, undefined),
              Effect.exit(sql.withTransaction(queue.enqueue({ n: 2 })))
            )
          )
        ], { concurrency: 2 })
        return [outcome(a), outcome(b)]
      })))
      expect({
        outer: Exit.isSuccess(exit) ? exit.value : outcome(exit),
        rows: yield* values(sql, "review_siblings"),
        jobs: yield* jobCount
      }).toEqual({ outer: ["a fails", "success"], rows: [], jobs: 1 })
    }).pipe(Effect.provide(pgOwned.store({ fallbackPoll: "1 hour" }))))
})
