import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import type Sqlite from "better-sqlite3"
import { Effect, Exit, Scope } from "effect"
import { inTransaction, makeImmediateTransaction } from "./transaction.js"

export type Param = string | number | bigint | null | Uint8Array

/**
 * The one seam the SQLite mechanisms run their SQL through. Two sources:
 * the store's own better-sqlite3 connection (prepared statements run in
 * place, no per-statement fiber hops), or any `SqlClient` an application
 * provides. Both join the caller's open transaction when there is one.
 */
export interface Executor {
  /** Runs one statement and returns its rows (use RETURNING for writes). */
  readonly all: <A = Record<string, unknown>>(sql: string, params: ReadonlyArray<Param>) => Effect.Effect<ReadonlyArray<A>, SqlError>
  /** A `BEGIN IMMEDIATE` transaction, or a savepoint inside an open one. */
  readonly transaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
}

/**
 * An executor over a connection the store owns. `gate` is the one-permit
 * semaphore its `SqlClient` shares; `held()` says whether a transaction (or a
 * reserved connection) currently owns it. better-sqlite3 is synchronous, so
 * a statement run while nobody holds the gate cannot interleave with anyone.
 */
export const fromOwnedConnection = (options: {
  readonly db: Sqlite.Database
  readonly prepare: (sql: string) => Sqlite.Statement
  readonly gate: Effect.Semaphore
  readonly held: () => boolean
  readonly retryBusy: <A>(effect: Effect.Effect<A, SqlError>) => Effect.Effect<A, SqlError>
  readonly transaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
}): Executor => {
  const { gate, held, prepare, retryBusy } = options
  const runNow = <A>(sql: string, params: ReadonlyArray<Param>): Effect.Effect<ReadonlyArray<A>, SqlError> => {
    try {
      const statement = prepare(sql)
      return Effect.succeed(
        (statement.reader ? statement.all(...params) : (statement.run(...params), [])) as ReadonlyArray<A>
      )
    } catch (cause) {
      return Effect.fail(new SqlError({ cause, message: `Failed to execute statement: ${String(cause)}` }))
    }
  }
  const all = <A>(sql: string, params: ReadonlyArray<Param>): Effect.Effect<ReadonlyArray<A>, SqlError> =>
    Effect.withFiberRuntime((fiber) => {
      if (fiber.currentContext.unsafeMap.has(SqlClient.TransactionConnection.key)) return runNow<A>(sql, params)
      const outside = Effect.suspend(() => runNow<A>(sql, params))
      return retryBusy(held() ? gate.withPermits(1)(outside) : outside)
    })
  return { all, transaction: options.transaction }
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
  const all = <A>(text: string, params: ReadonlyArray<Param>) => {
    const statement = sql.unsafe<A & object>(text, params as Array<Param>) as unknown as Effect.Effect<
      ReadonlyArray<A>,
      SqlError
    >
    return Effect.flatMap(inTransaction, (open) => open ? statement : retryBusy(statement))
  }
  return { all, transaction }
}
