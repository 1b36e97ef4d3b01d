/**
 * Schema migrations and upgrades (docs/operations.md "Upgrades and migrations", docs/engines.md "Tables and
 * migrations", docs/decisions.md "Migrations"): each test is a defect found in review, failing on the code
 * before its fix.
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option } from "effect"
import { Admin, Queues, SqliteStore } from "../src/index.js"
import { migrationRecord, migrationsTable } from "../src/internal/sqlite/migrations.js"
import { freshFile } from "./contract/harness.js"

/**
 * A SQLite file at migration level 5 (before `6_job_ids_without_autoincrement`), made with the library's own
 * statements and bookkeeping (`@effect/sql`'s Migrator and table), holding one pending job.
 */
const fileAtLevel5 = (filename: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const upTo5 = Object.fromEntries(
      Object.entries(migrationRecord).filter(([key]) => Number(key.slice(0, key.indexOf("_"))) <= 5)
    )
    yield* Migrator.make({})({ loader: Migrator.fromRecord(upTo5), table: migrationsTable })
    yield* sql.unsafe(`INSERT INTO __alkstore_jobs (queue, payload, state, priority, run_at, max_attempts,
      visibility_timeout, backoff_base, created_at) VALUES ('old', '{"n":1}', 'pending', 0, 0, 3, 300000, 5000, 0)`)
  }).pipe(Effect.provide(SqliteClient.layer({ filename })), Effect.scoped)

describe("migrations", () => {
  // docs/operations.md "Upgrades and migrations": "**Opening a store applies any pending migration**"; the
  // layer's error channel carries `SqlError | MigrationError` for a migration that cannot be applied.
  // On a connection that cannot write (a read-only file, mount or client), the Migrator's insert of the
  // migration rows fails, @effect/sql maps any failure of that insert to `MigrationError { reason: "locked" }`
  // ("Migrations already running") and swallows it: the layer builds on an un-migrated file, and then every
  // operation that needs the missing migrations fails ("no such table: __alkstore_id_floor", "no such index:
  // __alkstore_jobs_dead_by_id"). The same path makes `alkstore migrate` on a read-only old file print
  // "schema up to date: 1_…, 5_effect_stores" and exit 0.
  it.live("a store opened read-only on a file that needs migrations fails to open with a typed error, not an un-migrated store", () => {
    const filename = freshFile("readonly-old")
    return Effect.gen(function*() {
      yield* fileAtLevel5(filename)
      const readOnlyStore = SqliteStore.layerFromClient().pipe(
        Layer.provideMerge(SqliteClient.layer({ filename, readonly: true }))
      )
      const exit = yield* Effect.exit(Effect.scoped(Effect.gen(function*() {
        // what the store, opened, answers: the migrations it says are applied, and an enqueue
        const context = yield* Layer.build(readOnlyStore)
        const applied = yield* Effect.provide(Effect.flatMap(Admin.Admin, (admin) => admin.migrations), context)
        const enqueued = yield* Effect.exit(Effect.provide(
          Effect.flatMap(Effect.flatMap(Queues.Queues, (queues) => queues.queue("old")), (queue) => queue.enqueue({ n: 2 })),
          context
        ))
        return { applied, enqueue: Exit.isSuccess(enqueued) ? "ok" : Cause.pretty(enqueued.cause).split("\n")[0] }
      })))
      const outcome = Exit.isSuccess(exit)
        ? `opened: ${JSON.stringify(exit.value)}`
        : Option.match(Cause.failureOption(exit.cause), {
          onNone: () => `defect: ${Cause.pretty(exit.cause).split("\n")[0]}`,
          onSome: (error) => `failed: ${(error as { _tag?: string })._tag}`
        })
      expect(["failed: SqlError", "failed: MigrationError"], outcome).toContain(outcome)
    })
  })
})
