/**
 * Several stores and clients in one application: review tests that fail on the current code.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Layer, Option } from "effect"
import { freshFile, pgOwned, sqliteOwned } from "./contract/harness.js"

const failedWith = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return "succeeded"
  if (Cause.isDie(exit.cause)) return "died"
  const failure = Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string; message?: string } | undefined
  return failure?._tag === "SqlError" && failure.message?.includes("inside another SqlClient's transaction")
    ? "refused: SqlError"
    : `failed otherwise: ${failure?._tag}`
}

describe("PgStore.layer's own SqlClient inside another client's transaction", () => {
  // docs/decisions.md, row "Another `SqlClient`'s transaction": "The store's own client's `withTransaction` inside
  // another client's transaction fails the same way (it would otherwise send `SAVEPOINT` to that client's
  // connection)" — "the same way" being "fails with `SqlError` ("alkstore was called inside another SqlClient's
  // transaction") before it runs a statement". engines.md: `PgStore.layer` is "A pool of the store's own, which
  // provides SqlClient (and PgClient) for your tables too".
  // Observed: SqliteStore.layer's client refuses (its `withTransaction` is the store's), but PgStore.layer hands
  // out the bare `@effect/sql-pg` client, whose `withTransaction` takes the shared `TransactionConnection` tag at
  // its word: it succeeds, sending `SAVEPOINT effect_sql_1` to the other client's connection, and the PG store's
  // "transaction" (its statements included) runs on that connection — here a SQLite file's, or another pool's
  // PostgreSQL backend (the `pg_backend_pid()` seen inside it is the outer transaction's).
  it.scoped("inside a SQLite store's transaction: fails with a typed SqlError instead of savepointing the SQLite connection", () =>
    Effect.gen(function*() {
      const pg = yield* Layer.build(pgOwned.store({ filename: freshFile("pg"), fallbackPoll: "1 hour" }))
      const sqlite = yield* Layer.build(sqliteOwned.store({ filename: freshFile("sqlite"), fallbackPoll: "1 hour" }))
      const pgSql = Context.get(pg, SqlClient.SqlClient)
      const sqliteSql = Context.get(sqlite, SqlClient.SqlClient)
      const [exit, answeredBySqlite] = yield* sqliteSql.withTransaction(Effect.gen(function*() {
        let answeredBySqlite = false
        const exit = yield* Effect.exit(pgSql.withTransaction(Effect.gen(function*() {
          // A PostgreSQL client's statement inside "its" transaction: SQLite answers it.
          const rows = yield* Effect.either(pgSql.unsafe<{ v: string }>("SELECT sqlite_version() AS v"))
          answeredBySqlite = rows._tag === "Right"
        })))
        return [exit, answeredBySqlite] as const
      }))
      expect({ outcome: failedWith(exit), answeredBySqlite }).toEqual({
        outcome: "refused: SqlError",
        answeredBySqlite: false
      })
    }))

  it.scoped("inside another PgStore.layer's transaction: fails with a typed SqlError instead of running on that pool's connection", () =>
    Effect.gen(function*() {
      const a = yield* Layer.build(pgOwned.store({ filename: freshFile("pg-a"), fallbackPoll: "1 hour" }))
      const b = yield* Layer.build(pgOwned.store({ filename: freshFile("pg-b"), fallbackPoll: "1 hour" }))
      const aSql = Context.get(a, SqlClient.SqlClient)
      const bSql = Context.get(b, SqlClient.SqlClient)
      const [exit, onOuterConnection] = yield* bSql.withTransaction(Effect.gen(function*() {
        const [outer] = yield* bSql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
        let onOuterConnection = false
        const exit = yield* Effect.exit(aSql.withTransaction(Effect.gen(function*() {
          const [inner] = yield* aSql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
          onOuterConnection = inner!.pid === outer!.pid
        })))
        return [exit, onOuterConnection] as const
      }))
      expect({ outcome: failedWith(exit), onOuterConnection }).toEqual({
        outcome: "refused: SqlError",
        onOuterConnection: false
      })
    }))
})
