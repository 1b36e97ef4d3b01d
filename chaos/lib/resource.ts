/**
 * A resource that checks fencing tokens, as a user's would: a row that
 * accepts a write only with a token at least as high as the last accepted
 * one. Plain SQL through the application's `SqlClient`, in the store's
 * transaction (so SQLite's busy handling applies).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export const createResource = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql.withTransaction(Effect.gen(function*() {
    yield* sql`CREATE TABLE chaos_resource (id INTEGER PRIMARY KEY, token BIGINT NOT NULL, writes BIGINT NOT NULL)`
    yield* sql`INSERT INTO chaos_resource (id, token, writes) VALUES (1, 0, 0)`
  })))

/** `true` when the resource accepted the write. */
export const fencedWrite = (token: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(
      sql<{ token: number }>`UPDATE chaos_resource SET token = ${token}, writes = writes + 1
        WHERE id = 1 AND token <= ${token} RETURNING token`
    )).pipe(Effect.map((rows) => rows.length === 1))

export const readResource = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ token: number | string; writes: number | string }>`SELECT token, writes FROM chaos_resource WHERE id = 1`).pipe(
    Effect.map(([row]) => ({ token: Number(row!.token), writes: Number(row!.writes) }))
  )
