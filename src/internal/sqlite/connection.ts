import * as Reactivity from "@effect/experimental/Reactivity"
import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import * as Statement from "@effect/sql/Statement"
import Sqlite from "better-sqlite3"
import { Effect, Scope } from "effect"
import { type Executor, fromOwnedConnection } from "./executor.js"
import { isBusy } from "./busy.js"
import type { WalSignal } from "./checkpointer.js"
import { makeGate } from "./gate.js"
import { abandonedTransactionError, makeImmediateTransaction } from "./transaction.js"

export interface OwnedConnectionOptions {
  readonly filename: string
  readonly busyTimeoutMillis: number
  readonly retryBusy: <A>(effect: Effect.Effect<A, SqlError>) => Effect.Effect<A, SqlError>
  /**
   * The checkpointer's flags: `wrote` is called as each statement is about to
   * run (it may write), and a request to catch up is met before it (below).
   */
  readonly wal: Pick<WalSignal, "wrote" | "behind" | "caughtUp">
}

export interface OwnedConnection {
  readonly db: Sqlite.Database
  readonly client: SqlClient.SqlClient
  readonly executor: Executor
}

const statementError = (cause: unknown) =>
  new SqlError({ cause, message: `Failed to execute statement: ${String(cause)}` })

/** How many statements of the `SqlClient`'s callers stay prepared (an LRU, as `@effect/sql-sqlite-node`'s 200). */
const clientStatementsMax = 200

/**
 * A standard `SqlClient` over a better-sqlite3 connection the store owns —
 * built with `SqlClient.make` and the SQLite compiler, as
 * `@effect/sql-sqlite-node` does — whose transactions are `BEGIN IMMEDIATE`,
 * plus the fast executor the mechanisms use on the same connection.
 */
export const makeOwnedConnection = (
  options: OwnedConnectionOptions
): Effect.Effect<OwnedConnection, SqlError, Scope.Scope | Reactivity.Reactivity> =>
  Effect.gen(function*() {
    const db = yield* Effect.acquireRelease(
      Effect.try({
        try: () => new Sqlite(options.filename, { timeout: options.busyTimeoutMillis }),
        catch: (cause) => new SqlError({ cause, message: `Failed to open ${options.filename}: ${String(cause)}` })
      }),
      (db) => Effect.sync(() => db.close())
    )
    yield* options.retryBusy(Effect.try({
      try: () => {
        db.pragma("journal_mode = WAL")
        db.pragma("synchronous = NORMAL")
        // Statement journals (any multi-row UPDATE inside a transaction opens
        // one) go to a temp file by default: hundreds of µs per statement.
        db.pragma("temp_store = MEMORY")
      },
      catch: statementError
    }))

    const statements = new Map<string, Sqlite.Statement>()
    const { wal } = options
    let catchUp: Sqlite.Statement | undefined
    // The checkpointer could not keep up with a steady stream of commits
    // (checkpointer.ts): a checkpoint between two of this connection's
    // transactions copies the WAL's last frames, and the next write restarts it.
    // RESTART, not PASSIVE: when another process writes too, one of its commits
    // lands between this checkpoint and the next write often enough that the WAL
    // restarted only by chance (to 1.3 GB); RESTART takes the write lock for the
    // copy (waiting out the other writer within `busy_timeout`) and leaves the
    // WAL to restart at the next write, whoever makes it.
    // Inside a transaction it waits for the next statement outside one.
    const wrote = () => {
      wal.wrote()
      if (!wal.behind() || db.inTransaction) return
      wal.caughtUp()
      try {
        catchUp ??= db.prepare("PRAGMA wal_checkpoint(RESTART)")
        catchUp.get()
      } catch {
        // Another connection's checkpoint holds the file's checkpoint lock: the thread asks again.
      }
    }
    // Every statement passes here (it is about to run): reads mark too, which
    // costs an idle store one spare checkpoint per read, and saves telling them apart.
    const prepare = (sql: string): Sqlite.Statement => {
      wrote()
      let statement = statements.get(sql)
      if (statement === undefined) {
        statement = db.prepare(sql)
        statements.set(sql, statement)
      }
      return statement
    }
    // Statements through the `SqlClient` (the application's, a migration's): the texts are anybody's, so the
    // cache is bounded (the least recently used go past `clientStatementsMax`), as `@effect/sql-sqlite-node`'s
    // own. The store's statements are a known, bounded set (`prepare`, above).
    const clientStatements = new Map<string, Sqlite.Statement>()
    const prepareForClient = (sql: string): Sqlite.Statement => {
      wrote()
      let statement = clientStatements.get(sql)
      if (statement !== undefined) {
        clientStatements.delete(sql)
      } else {
        statement = db.prepare(sql)
        if (clientStatements.size >= clientStatementsMax) clientStatements.delete(clientStatements.keys().next().value!)
      }
      clientStatements.set(sql, statement)
      return statement
    }
    const runNow = (sql: string, params: ReadonlyArray<unknown>, raw: boolean, safeIntegers: boolean) => {
      try {
        const statement = prepareForClient(sql)
        // Set either way: a cached statement keeps the mode its last run asked for.
        statement.safeIntegers(safeIntegers)
        if (statement.reader) return Effect.succeed(statement.all(...params))
        const result = statement.run(...params)
        return Effect.succeed(raw ? result as unknown as ReadonlyArray<any> : [])
      } catch (cause) {
        return Effect.fail(statementError(cause))
      }
    }
    // A transaction of the fiber's on this connection that SQLite itself ended (transaction.ts).
    const abandoned = (context: Map<string, unknown>) =>
      !db.inTransaction && (context.get(SqlClient.TransactionConnection.key) as readonly [Connection] | undefined)?.[0] === connection
    // Outside a transaction a statement may meet another process's write lock:
    // wait it out on the busy schedule, as the store's own statements do.
    const run = (sql: string, params: ReadonlyArray<unknown>, raw: boolean) =>
      Effect.withFiberRuntime<ReadonlyArray<any>, SqlError>((fiber) => {
        const context = fiber.currentContext.unsafeMap
        const safeIntegers = context.get(SqlClient.SafeIntegers.key) === true
        if (context.has(SqlClient.TransactionConnection.key)) {
          return abandoned(context) ? Effect.fail(abandonedTransactionError()) : runNow(sql, params, raw, safeIntegers)
        }
        return options.retryBusy(Effect.suspend(() => runNow(sql, params, raw, safeIntegers)))
      })
    const unlessAbandoned = <A>(effect: Effect.Effect<A, SqlError>) =>
      Effect.withFiberRuntime<A, SqlError>((fiber) =>
        abandoned(fiber.currentContext.unsafeMap) ? Effect.fail(abandonedTransactionError()) : effect
      )
    const connection: Connection = {
      execute: (sql, params, transformRows) =>
        transformRows ? Effect.map(run(sql, params, false), transformRows) : run(sql, params, false),
      executeRaw: (sql, params) => run(sql, params, true),
      executeValues: (sql, params) =>
        unlessAbandoned(Effect.try({
          try: () => {
            wrote()
            const statement = db.prepare(sql)
            if (!statement.reader) {
              statement.run(...params)
              return []
            }
            return statement.raw(true).all(...params) as ReadonlyArray<ReadonlyArray<unknown>>
          },
          catch: statementError
        })),
      executeUnprepared: (sql, params, transformRows) => {
        const effect = Effect.try({
          try: () => {
            wrote()
            const statement = db.prepare(sql)
            return statement.reader ? statement.all(...(params ?? [])) : (statement.run(...(params ?? [])), [])
          },
          catch: statementError
        })
        const guarded = unlessAbandoned(effect)
        return transformRows ? Effect.map(guarded, (rows) => transformRows(rows as Array<object>)) : guarded
      },
      executeStream: () => Effect.dieMessage("executeStream is not implemented for SQLite") as never
    }

    // One permit guards the connection while a transaction (or a reserved
    // connection) has it; the fast path runs statements at once when it is free.
    const gate = makeGate()
    const acquirer = Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(gate.take(restore), (release) => Effect.as(release, connection))
    )
    const transactionAcquirer = Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(gate.take(restore), (release) => Effect.as(Effect.addFinalizer(() => release), connection))
    )

    const transaction = makeImmediateTransaction({
      acquire: (wait) => Effect.map(gate.take(wait), (release) => [release, connection] as const),
      // BEGIN and COMMIT run outside the body's context, so `run` already retries them.
      retryBusy: (effect) => effect,
      owns: (conn) => conn === connection,
      direct: {
        conn: connection,
        tryAcquire: gate.tryTake,
        exec: (sql) => {
          try {
            prepare(sql).run()
            return undefined
          } catch (cause) {
            return statementError(cause)
          }
        },
        isBusy
      }
    })
    const client = yield* SqlClient.make({
      acquirer,
      transactionAcquirer,
      compiler: Statement.makeCompilerSqlite(),
      spanAttributes: [["db.system.name", "sqlite"]],
      beginTransaction: "BEGIN IMMEDIATE"
    })
    Object.assign(client, { withTransaction: transaction })

    const executor = fromOwnedConnection({
      conn: connection,
      prepare,
      gate,
      retryBusy: options.retryBusy,
      transaction,
      inTransaction: () => db.inTransaction
    })
    return { db, client, executor }
  })
