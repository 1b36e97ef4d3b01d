/**
 * Crash consistency (CONTRACT §8, docs/guarantees.md, docs/engines.md): operations cut off mid-way. Each test is a
 * defect found in review, failing on the code before its fix.
 *
 * Checked and holding (no test kept): real child processes SIGKILLed in the middle of an `enqueueBatch` of 5 000,
 * inside application transactions that insert and enqueue (keyed and batched), in `ackAll` of 8 000 claims, while
 * `process` / outbox handlers run, during `setLimits` numbering 40 000 jobs, during maintenance purging 30 000 dead
 * jobs, holding `withLock`, during scheduler ticks of 200–300 schedules (6 leaders killed in turn), during the first
 * start's migration, and a SQLite deployment SIGKILLed before `PgStore.importSqlite` (hot WAL) — on SQLite and
 * PostgreSQL: all or nothing, nothing lost or duplicated, keys dedupe, crashed attempts counted, ids not reused,
 * tokens increase, every boundary once, flow counts (heldBack, lapsed slots) consistent, `integrity_check` ok.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Effect, Layer, Option } from "effect"
import { PgStore, Queues } from "../src/index.js"
import { freshFile, pgOwned, pgSchemaFor, sqliteOwned } from "./contract/harness.js"

/**
 * A SQLite store of three jobs and a fresh, migrated PostgreSQL store whose import has its connection cut off
 * while it commits — what a server restart, a killed backend (`pg_terminate_backend`) or a dropped link at that
 * moment does (docs/engines.md, "When the server restarts or a connection is killed"); also the window a SIGKILL
 * of the importing process between the sequence's `setval` and `COMMIT` lands in. A deferred constraint trigger
 * on the jobs table terminates the importing backend at COMMIT, so the cut falls there deterministically.
 */
const withCutOffImport = <A>(
  f: (run: Effect.Effect<PgStore.Imported, unknown>, sql: SqlClient.SqlClient, schema: string) => Effect.Effect<A, unknown>
) => {
  const sqliteFile = freshFile("cut-import")
  const target = freshFile("cut-import-pg")
  const schema = pgSchemaFor(target)
  return Effect.runPromise(
    Effect.scoped(Effect.gen(function*() {
      yield* Effect.provide(
        Effect.flatMap(
          Effect.flatMap(Queues.Queues, (queues) => queues.queue("m")),
          (q) => q.enqueueBatch([{ a: 1 }, { a: 2 }, { a: 3 }])
        ),
        sqliteOwned.store({ filename: sqliteFile })
      )
      const context = yield* Layer.build(pgOwned.store({ filename: target }))
      const sql = Context.get(context, SqlClient.SqlClient)
      yield* sql.unsafe(`CREATE FUNCTION ${schema}.cut_off() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$`)
      yield* sql.unsafe(`CREATE CONSTRAINT TRIGGER cut_off AFTER INSERT ON ${schema}.__alkstore_jobs
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ${schema}.cut_off()`)
      return yield* f(Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema }), context), sql, schema)
    })) as Effect.Effect<A, unknown, never>
  )
}

describe("PgStore.importSqlite cut off at its commit", () => {
  // CONTRACT §2: "No mechanism throws, and none turns a storage failure into a defect"; docs/engines.md (a restart
  // or killed backend): "It is never a defect and never crashes the process"; `PgStore.importSqlite`'s type says
  // `SqlError | InvalidOptions`. The import runs in `@effect/sql`'s `sql.withTransaction`, which `orDie`s a failed
  // COMMIT: the lost connection arrives as a defect, which a caller's `catchTag("SqlError")` / retry never sees.
  it("an import whose connection is cut off at COMMIT fails with a typed SqlError, not a defect", async () => {
    const outcome = await withCutOffImport((run) =>
      Effect.map(Effect.exit(run), (exit) =>
        exit._tag === "Success"
          ? "succeeded"
          : Option.match(Cause.failureOption(exit.cause), {
            onNone: () => `defect: ${Cause.pretty(exit.cause).split("\n")[0]}`,
            onSome: (e) => (e as { _tag: string })._tag
          }))
    )
    expect(outcome).toBe("SqlError")
  }, 30_000)
})
