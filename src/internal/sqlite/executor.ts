import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import type Sqlite from "better-sqlite3"
import { Effect, Exit, Scope } from "effect"
import type { Gate } from "./gate.js"
import { inTransaction, makeImmediateTransaction } from "./transaction.js"

export type Param = string | number | bigint | null | Uint8Array

/** What a write reports: rows changed, and the rowid of the last insert. */
export interface RunResult {
  readonly changes: number
  readonly lastInsertRowid: number | bigint
}

/**
 * The one seam the SQLite mechanisms run their SQL through. Two sources:
 * the store's own better-sqlite3 connection (prepared statements run in
 * place, no per-statement fiber hops), or any `SqlClient` an application
 * provides. Both join the caller's open transaction when there is one.
 */
export interface Executor {
  /** Runs one statement and returns its rows (use RETURNING for writes). */
  readonly all: <A = Record<string, unknown>>(sql: string, params: ReadonlyArray<Param>) => Effect.Effect<ReadonlyArray<A>, SqlError>
  /** Runs one write and reports what it changed (cheaper than RETURNING). */
  readonly run: (sql: string, params: ReadonlyArray<Param>) => Effect.Effect<RunResult, SqlError>
  /** Runs one write once per parameter list, in order (inside a transaction for atomicity). */
  readonly runEach: (
    sql: string,
    params: ReadonlyArray<ReadonlyArray<Param>>
  ) => Effect.Effect<ReadonlyArray<RunResult>, SqlError>
  /** A `BEGIN IMMEDIATE` transaction, or a savepoint inside an open one. */
  readonly transaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
}

/**
 * An executor over a connection the store owns. `gate` is the permit its
 * `SqlClient` shares with transactions and reserved connections.
 * better-sqlite3 is synchronous, so a statement run while nobody holds the
 * gate cannot interleave with anyone.
 */
export const fromOwnedConnection = (options: {
  readonly prepare: (sql: string) => Sqlite.Statement
  readonly gate: Gate
  readonly retryBusy: <A>(effect: Effect.Effect<A, SqlError>) => Effect.Effect<A, SqlError>
  readonly transaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
}): Executor => {
  const { gate, prepare, retryBusy } = options
  const failure = (cause: unknown) =>
    Effect.fail(new SqlError({ cause, message: `Failed to execute statement: ${String(cause)}` }))
  const allNow = <A>(sql: string, params: ReadonlyArray<Param>): Effect.Effect<ReadonlyArray<A>, SqlError> => {
    try {
      const statement = prepare(sql)
      return Effect.succeed(
        (statement.reader ? statement.all(...params) : (statement.run(...params), [])) as ReadonlyArray<A>
      )
    } catch (cause) {
      return failure(cause)
    }
  }
  const runNow = (sql: string, params: ReadonlyArray<Param>): Effect.Effect<RunResult, SqlError> => {
    try {
      return Effect.succeed(prepare(sql).run(...params))
    } catch (cause) {
      return failure(cause)
    }
  }
  // One synchronous loop over one prepared statement: no effect per row.
  const runEachNow = (
    sql: string,
    params: ReadonlyArray<ReadonlyArray<Param>>
  ): Effect.Effect<ReadonlyArray<RunResult>, SqlError> => {
    try {
      const statement = prepare(sql)
      const results: Array<RunResult> = new Array(params.length)
      for (let i = 0; i < params.length; i++) results[i] = statement.run(...params[i]!)
      return Effect.succeed(results)
    } catch (cause) {
      return failure(cause)
    }
  }
  const onConnection = <P, A>(statement: (sql: string, params: P) => Effect.Effect<A, SqlError>) =>
  (sql: string, params: P): Effect.Effect<A, SqlError> =>
    Effect.withFiberRuntime((fiber) => {
      if (fiber.currentContext.unsafeMap.has(SqlClient.TransactionConnection.key)) return statement(sql, params)
      const outside = Effect.suspend(() => statement(sql, params))
      if (!gate.held()) return retryBusy(outside)
      return retryBusy(Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(restore(gate.take), (release) => Effect.ensuring(restore(outside), release))
      ))
    })
  return {
    all: onConnection(allNow) as Executor["all"],
    run: onConnection(runNow),
    runEach: onConnection(runEachNow),
    transaction: options.transaction
  }
}

/** An executor over an application's `SqlClient` (any SQLite driver). */
export const fromClient = (
  client: SqlClient.SqlClient,
  retryBusy: <A>(effect: Effect.Effect<A, SqlError>) => Effect.Effect<A, SqlError>
): Executor => {
  const sql = client.withoutTransforms()
  const transaction = makeImmediateTransaction({
    acquire: Effect.flatMap(Scope.make(), (scope) =>
      Effect.map(
        Scope.extend(sql.reserve, scope),
        (conn) => [Scope.close(scope, Exit.void), conn] as const
      )),
    retryBusy
  })
  const outsideRetry = <A>(statement: Effect.Effect<A, SqlError>) =>
    Effect.flatMap(inTransaction, (open) => open ? statement : retryBusy(statement))
  const all = <A>(text: string, params: ReadonlyArray<Param>) =>
    outsideRetry(
      sql.unsafe<A & object>(text, params as Array<Param>) as unknown as Effect.Effect<ReadonlyArray<A>, SqlError>
    )
  // `@effect/sql-sqlite-node` reports better-sqlite3's RunResult as the raw
  // result; a driver that does not is asked with `changes()` right after.
  const run = (text: string, params: ReadonlyArray<Param>) =>
    outsideRetry(
      Effect.flatMap(sql.unsafe(text, params as Array<Param>).raw, (raw) =>
        isRunResult(raw)
          ? Effect.succeed(raw)
          : Effect.map(
            sql.unsafe<{ changes: number; lastInsertRowid: number }>(
              "SELECT changes() AS changes, last_insert_rowid() AS lastInsertRowid"
            ),
            (rows) => rows[0]!
          ))
    )
  const runEach = (text: string, params: ReadonlyArray<ReadonlyArray<Param>>) =>
    Effect.forEach(params, (one) => run(text, one))
  return { all, run, runEach, transaction }
}

const isRunResult = (raw: unknown): raw is RunResult =>
  typeof raw === "object" && raw !== null && typeof (raw as { changes?: unknown }).changes === "number"
