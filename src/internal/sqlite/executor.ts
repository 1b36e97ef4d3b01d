import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import type Sqlite from "better-sqlite3"
import { type Context, Effect, Exit, identity, Scope } from "effect"
import { writeFreeWait } from "../patience.js"
import { otherTransactionError, ownTransaction } from "../transactionOwner.js"
import type { Gate } from "./gate.js"
import { isBusy } from "./busy.js"
import { abandonedTransactionError, makeImmediateTransaction } from "./transaction.js"

export type Param = string | number | bigint | null | Uint8Array

/** Named parameters (`@name`), one object, beside positional ones (better-sqlite3 takes both in one call). */
export type NamedParams = { readonly [name: string]: Param }

/** What a write reports: rows changed, and the rowid of the last insert. */
export interface RunResult {
  readonly changes: number
  readonly lastInsertRowid: number | bigint
}

/**
 * The one seam the SQLite mechanisms run their SQL through. Two sources:
 * the store's own better-sqlite3 connection (prepared statements run in
 * place, no per-statement fiber hops), or any `SqlClient` an application
 * provides. Both join the caller's open transaction when it is on the
 * store's connection, and refuse another client's (`transactionOwner.ts`).
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
  /**
   * Runs `body` synchronously on the store's own connection, as one effect:
   * at once when the fiber's transaction is open on it or nobody holds it,
   * else once it is free. Outside a transaction `SQLITE_BUSY` re-runs the
   * whole `body`, so it must be one statement or open its own transaction.
   * Absent over an application's client, whose driver may be asynchronous:
   * the hot paths take it when it is there and fall back to effects.
   */
  readonly direct?: <A>(body: (conn: DirectConnection) => A) => Effect.Effect<A, SqlError>
  /**
   * `direct` without an effect, for the hottest paths: runs `body` now in
   * the fiber whose context is given, or answers `notNow` when the connection
   * is held by another fiber or the file is busy (use `direct` then). Throws
   * `SqlError`.
   */
  readonly directNow?: <A>(context: Context.Context<never>, body: (conn: DirectConnection) => A) => A | typeof notNow
}

/** `directNow`'s answer when it cannot run now. */
export const notNow: unique symbol = Symbol.for("alkstore/internal/notNow")

/** The store's connection, synchronously; every method throws `SqlError`. */
export interface DirectConnection {
  readonly all: <A = Record<string, unknown>>(sql: string, params: ReadonlyArray<Param>) => ReadonlyArray<A>
  /**
   * `all` with each row as an array of its columns in the statement's order:
   * better-sqlite3 builds a row object property by property from C++, ~80 ns
   * a column, where a caller's object literal of a known shape costs a few.
   */
  readonly values: (sql: string, params: ReadonlyArray<Param>) => ReadonlyArray<ReadonlyArray<unknown>>
  readonly run: (sql: string, params: ReadonlyArray<Param | NamedParams>) => RunResult
  /** `body` in a `BEGIN IMMEDIATE` transaction, or a savepoint inside an open one. */
  readonly transaction: <A>(body: () => A) => A
}

/**
 * An executor over a connection the store owns (`conn`, as its transactions
 * carry it in `SqlClient.TransactionConnection`). `gate` is the permit its
 * `SqlClient` shares with transactions and reserved connections.
 * better-sqlite3 is synchronous, so a statement run while nobody holds the
 * gate cannot interleave with anyone.
 */
export const fromOwnedConnection = (options: {
  readonly conn: Connection
  readonly prepare: (sql: string) => Sqlite.Statement
  readonly gate: Gate
  readonly retryBusy: <A>(effect: Effect.Effect<A, SqlError>) => Effect.Effect<A, SqlError>
  readonly transaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
  /** Whether the connection is inside a transaction (SQLite may end one by itself: transaction.ts). */
  readonly inTransaction: () => boolean
}): Executor => {
  const { conn: own, gate, prepare, retryBusy } = options
  const sqlError = (cause: unknown) =>
    cause instanceof SqlError ? cause : new SqlError({ cause, message: `Failed to execute statement: ${String(cause)}` })
  const all = <A>(sql: string, params: ReadonlyArray<Param>): ReadonlyArray<A> => {
    try {
      const statement = prepare(sql)
      return (statement.reader ? statement.all(...params) : (statement.run(...params), [])) as ReadonlyArray<A>
    } catch (cause) {
      throw sqlError(cause)
    }
  }
  const values = (sql: string, params: ReadonlyArray<Param>): ReadonlyArray<ReadonlyArray<unknown>> => {
    try {
      const statement = prepare(sql)
      statement.raw(true)
      try {
        return statement.all(...params) as ReadonlyArray<ReadonlyArray<unknown>>
      } finally {
        statement.raw(false)
      }
    } catch (cause) {
      throw sqlError(cause)
    }
  }
  const run = (sql: string, params: ReadonlyArray<Param | NamedParams>): RunResult => {
    try {
      return prepare(sql).run(...params)
    } catch (cause) {
      throw sqlError(cause)
    }
  }
  const exec = (sql: string) => run(sql, [])
  const rollingBack = (sql: string, cause: unknown): never => {
    try {
      exec(sql)
    } catch {
      // SQLite may have rolled back already (e.g. after SQLITE_FULL): the cause is the outcome.
    }
    throw cause
  }
  const undoSavepoint = (cause: unknown): never => {
    try {
      exec("ROLLBACK TO alkstore_direct")
    } catch {
      // The cause is the outcome; RELEASE below ends the savepoint either way.
    }
    return rollingBack("RELEASE alkstore_direct", cause)
  }
  // `body` between `open` and `close`; on any failure `undo`, which rethrows the cause.
  const between = (open: string, close: string, undo: (cause: unknown) => never) => <A>(body: () => A): A => {
    exec(open)
    try {
      const result = body()
      exec(close)
      return result
    } catch (cause) {
      return undo(cause)
    }
  }
  const outermost: DirectConnection = {
    all,
    values,
    run,
    transaction: between("BEGIN IMMEDIATE", "COMMIT", (cause) => rollingBack("ROLLBACK", cause))
  }
  const nested: DirectConnection = {
    all,
    values,
    run,
    transaction: between("SAVEPOINT alkstore_direct", "RELEASE alkstore_direct", undoSavepoint)
  }
  const attempt = <A>(body: (conn: DirectConnection) => A, conn: DirectConnection): Effect.Effect<A, SqlError> => {
    try {
      return Effect.succeed(body(conn))
    } catch (cause) {
      return cause instanceof SqlError ? Effect.fail(cause) : Effect.die(cause)
    }
  }
  const waiting = <A>(body: (conn: DirectConnection) => A) =>
    retryBusy(Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(gate.take((wait) => writeFreeWait(wait, restore)), (release) =>
        Effect.ensuring(Effect.suspend(() => attempt(body, outermost)), release))
    ))
  const directNow = <A>(context: Context.Context<never>, body: (conn: DirectConnection) => A): A | typeof notNow => {
    const open = context.unsafeMap.get(SqlClient.TransactionConnection.key) as readonly [Connection, number] | undefined
    if (open !== undefined) {
      if (open[0] === own) {
        if (!options.inTransaction()) throw abandonedTransactionError()
        return body(nested)
      }
      throw otherTransactionError()
    }
    const release = gate.tryTake()
    if (release === undefined) return notNow
    try {
      return body(outermost)
    } catch (cause) {
      if (cause instanceof SqlError && isBusy(cause)) return notNow
      throw cause
    } finally {
      release()
    }
  }
  const direct = <A>(body: (conn: DirectConnection) => A): Effect.Effect<A, SqlError> =>
    Effect.withFiberRuntime((fiber) => {
      let result: A | typeof notNow
      try {
        result = directNow(fiber.currentContext, body)
      } catch (cause) {
        return cause instanceof SqlError ? Effect.fail(cause) : Effect.die(cause)
      }
      return result === notNow ? waiting(body) : Effect.succeed(result)
    })
  const statement = <P, A>(f: (sql: string, params: P) => A) => (sql: string, params: P) =>
    direct(() => f(sql, params))
  return {
    all: statement(all) as Executor["all"],
    run: statement(run),
    runEach: statement((sql: string, params: ReadonlyArray<ReadonlyArray<Param>>) => {
      const results: Array<RunResult> = new Array(params.length)
      for (let i = 0; i < params.length; i++) results[i] = run(sql, params[i]!)
      return results
    }),
    transaction: options.transaction,
    direct,
    directNow
  }
}

/**
 * An executor over an application's `SqlClient` (any SQLite driver).
 *
 * The store joins the application's transactions on this client, which it
 * recognises by their connection: the one(s) the client's `reserve` hands out
 * (SQLite clients have one). A write outside any transaction runs inside a
 * deferred `BEGIN … COMMIT` of its own — what autocommit means anyway — so a
 * connection left inside a transaction (a failed COMMIT, which `@effect/sql`
 * 0.52 never rolls back) fails it loudly instead of taking writes that would
 * never commit. (About 45 µs of CPU per lone write over sql-sqlite-node; a
 * `SELECT` loses nothing there and runs bare.)
 */
export const fromClient = (
  client: SqlClient.SqlClient,
  retryBusy: <A>(effect: Effect.Effect<A, SqlError>) => Effect.Effect<A, SqlError>
): Effect.Effect<Executor, SqlError> =>
  Effect.gen(function*() {
    const sql = client.withoutTransforms()
    const known = new WeakSet<Connection>()
    const owns = (conn: Connection) => known.has(conn)
    // Run in an uninterruptible region, only the wait for the connection inside `wait`: the scope that holds
    // it is made before the wait and closed if the wait ends in failure or interruption (a reserve stopped
    // between getting the connection and returning it kept it for good: every statement of the client waited).
    const acquire = (
      wait: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
    ): Effect.Effect<readonly [release: Effect.Effect<void>, conn: Connection], SqlError> =>
      Effect.flatMap(Scope.make(), (scope) =>
        Effect.flatMap(
          Effect.exit(wait(Scope.extend(sql.reserve, scope))),
          (reserved): Effect.Effect<readonly [release: Effect.Effect<void>, conn: Connection], SqlError> => {
            if (Exit.isFailure(reserved)) return Effect.zipRight(Scope.close(scope, reserved), Effect.failCause(reserved.cause))
            known.add(reserved.value)
            return Effect.succeed([Scope.close(scope, Exit.void), reserved.value] as const)
          }
        ))
    // Learns the client's connection before anybody's transaction can be open on it.
    yield* Effect.uninterruptible(Effect.flatMap(acquire(identity), ([release]) => release))
    // SQLite may end a transaction by itself after an error in it (transaction.ts); the application's
    // driver does not say whether its connection is still inside one. So after a failure inside a joined
    // transaction the store asks with a `BEGIN` (refused inside a transaction, rolled back at once
    // otherwise), and a connection found outside one is asked again before each later statement, until
    // it is inside a transaction again (the application's next one).
    const leftBySqlite = new WeakSet<Connection>()
    const stillInTransaction = (conn: Connection): Effect.Effect<boolean> =>
      Effect.matchEffect(conn.executeUnprepared("BEGIN", [], undefined), {
        onFailure: () => Effect.succeed(true),
        onSuccess: () => Effect.as(Effect.ignore(conn.executeUnprepared("ROLLBACK", [], undefined)), false)
      })
    const joinable = (conn: Connection): Effect.Effect<void, SqlError> =>
      leftBySqlite.has(conn)
        ? Effect.flatMap(stillInTransaction(conn), (inside) => {
          if (!inside) return Effect.fail(abandonedTransactionError())
          leftBySqlite.delete(conn)
          return Effect.void
        })
        : Effect.void
    const joined = <A>(conn: Connection, effect: Effect.Effect<A, SqlError>): Effect.Effect<A, SqlError> =>
      Effect.zipRight(
        joinable(conn),
        Effect.tapError(effect, () =>
          Effect.flatMap(stillInTransaction(conn), (inside) => inside ? Effect.void : Effect.sync(() => leftBySqlite.add(conn))))
      )
    const transaction = makeImmediateTransaction({ acquire, retryBusy, owns, joinable })
    const alone = makeImmediateTransaction({ acquire, retryBusy: identity, owns, begin: "BEGIN" })
    const statement = <A>(effect: Effect.Effect<A, SqlError>, write: boolean): Effect.Effect<A, SqlError> =>
      Effect.withFiberRuntime((fiber) => {
        const open = ownTransaction(fiber.currentContext, owns)
        if (open === "other") return Effect.fail(otherTransactionError())
        if (open !== undefined) return joined(open[0], effect)
        // A read writes nothing: where a claim's waits may end at an interruption, so may its reads.
        return retryBusy(write ? alone(effect) : writeFreeWait(effect, identity))
      })
    const writes = new Map<string, boolean>()
    const isWrite = (text: string) => {
      let write = writes.get(text)
      if (write === undefined) {
        write = !/^\s*SELECT\b/i.test(text)
        writes.set(text, write)
      }
      return write
    }
    const all = <A>(text: string, params: ReadonlyArray<Param>) =>
      statement(
        sql.unsafe<A & object>(text, params as Array<Param>) as unknown as Effect.Effect<ReadonlyArray<A>, SqlError>,
        isWrite(text)
      )
    // `@effect/sql-sqlite-node` reports better-sqlite3's RunResult as the raw
    // result; a driver that does not is asked with `changes()` right after.
    const run = (text: string, params: ReadonlyArray<Param>) =>
      statement(
        Effect.flatMap(sql.unsafe(text, params as Array<Param>).raw, (raw) =>
          isRunResult(raw)
            ? Effect.succeed(raw)
            : Effect.map(
              sql.unsafe<{ changes: number; lastInsertRowid: number }>(
                "SELECT changes() AS changes, last_insert_rowid() AS lastInsertRowid"
              ),
              (rows) => rows[0]!
            )),
        true
      )
    const runEach = (text: string, params: ReadonlyArray<ReadonlyArray<Param>>) =>
      Effect.forEach(params, (one) => run(text, one))
    return { all, run, runEach, transaction }
  })

const isRunResult = (raw: unknown): raw is RunResult =>
  typeof raw === "object" && raw !== null && typeof (raw as { changes?: unknown }).changes === "number"
