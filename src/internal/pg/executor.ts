import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Deferred, Effect, Exit } from "effect"
import { giveBackAfterStop, type StatementStop, statementStop, stoppableApart } from "../stoppableClaim.js"
import { otherTransactionError } from "../transactionOwner.js"
import type { KeptConnection } from "./keptConnection.js"
import type { SizeClasses } from "./planSize.js"
import { lostPreparedStatement, makeStatements } from "./preparedStatements.js"
import { getOpen, makeTransaction } from "./transactions.js"

export type Param = string | number | bigint | boolean | null | ReadonlyArray<string | number | null>
export type Row = Record<string, unknown>

/** A statement `allStoppable` sent on the kept connection: how, and its answer once it came. */
interface Sent<A> {
  named: boolean
  answer: Exit.Exit<ReadonlyArray<A>, SqlError> | undefined
  /** Where the answer goes once the caller was stopped before it came. */
  late: Deferred.Deferred<ReadonlyArray<A>, SqlError> | undefined
}

/**
 * The one seam the PostgreSQL mechanisms run their SQL through, over the
 * store's `SqlClient` (an `@effect/sql-pg` client).
 *
 * `SqlClient.TransactionConnection` is one tag shared by every `@effect/sql`
 * client, so a statement must never simply take whatever transaction is
 * open: it joins the open transaction only when that transaction's
 * connection is this client's (`isMine`: the store's own transaction or the
 * application's `sql.withTransaction` on the same client); inside another
 * client's transaction it fails with a typed `SqlError` before running
 * anything (the rule of src/internal/transactionOwner.ts). Its transactions
 * are made in transactions.ts.
 */
export interface PgExecutor {
  /** Runs one statement (RETURNING for writes) and returns its rows. */
  readonly all: <A = Row>(text: string, params: ReadonlyArray<Param>) => Effect.Effect<ReadonlyArray<A>, SqlError>
  /**
   * `all` for a claim's statement (a take's, a worker's fused ack +
   * claim): where the caller set `statementStop` or passed `stop` (outside
   * a transaction) its wait for the answer ends at an interruption, and
   * `giveBack` gets what the statement answered after it
   * (src/internal/stoppableClaim.ts).
   */
  readonly allStoppable: <A = Row>(
    text: string,
    params: ReadonlyArray<Param>,
    giveBack: (rows: ReadonlyArray<A>) => Effect.Effect<void>,
    /** The stop to use instead of the fiber's `statementStop` (a worker's fused ack + claim). */
    stop?: StatementStop
  ) => Effect.Effect<ReadonlyArray<A>, SqlError>
  /** A transaction on this client, or a savepoint inside one of its own that is open. */
  readonly transaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
  /** Whether `context` has a transaction of this client open (the application's or the store's). */
  readonly openTransaction: (context: Context.Context<never>) => "none" | "store" | "application"
  /** The hooks the store's transaction open in `context` runs once it commits (`undefined` outside one). */
  readonly commitHooks: (context: Context.Context<never>) => Array<() => void> | undefined
  readonly client: SqlClient.SqlClient
  /** Statements (BEGIN and COMMIT included) on their way to the server now, and transactions waiting for a connection. */
  readonly inFlight: () => number
  /**
   * The engine tables' size classes now (src/internal/pg/planSize.ts): from
   * the next call on, each statement is the prepared statement of the
   * classes of the tables it names.
   */
  readonly planFor: (classes: SizeClasses) => void
  /** Whether statements still run as named prepared statements (preparedStatements.ts). */
  readonly prepared: () => boolean
}

/**
 * The constructor of the client's connections: `@effect/sql-pg` builds one
 * class per client, so `instanceof` tells this client's connections (its own
 * transactions and the application's `sql.withTransaction`) from any other.
 */
const connectionClass = (client: SqlClient.SqlClient) =>
  Effect.scoped(Effect.map(client.reserve, (conn) => (conn as object).constructor))

export const makeExecutor = (
  client: SqlClient.SqlClient,
  storeId: string,
  options: {
    readonly prepare?: boolean
    /** A connection of the pool kept for the statements outside a transaction (keptConnection.ts). */
    readonly kept?: KeptConnection | undefined
  } = {}
): Effect.Effect<PgExecutor, SqlError> =>
  Effect.gen(function*() {
    const statements = makeStatements(options.prepare ?? true)
    const sql = client.withoutTransforms()
    const Class = yield* connectionClass(client)
    const isMine = (conn: Connection) => conn instanceof Class
    // The store's own transactions carry their commit hooks under a key of this store alone.
    const Hooks = Context.GenericTag<Array<() => void>>(`alkstore/internal/pg/CommitHooks/${storeId}`)
    let inFlight = 0
    // The count and its decrement are put in place in one step: an interruption landing between an
    // increment and its `ensuring` counted a statement that never ran, for good (the close's `untilIdle`
    // then waited for it).
    const counted = <A, E, R>(statement: Effect.Effect<A, E, R>) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.suspend(() => {
          inFlight++
          return Effect.ensuring(restore(statement), Effect.sync(() => inFlight--))
        })
      )
    const transaction = makeTransaction({ Class, Hooks, client, counted, isMine, kept: options.kept })

    // Outside a transaction, statements run on the pool through a connection of the client's own
    // class without a reserved driver connection — what `@effect/sql-pg` 0.53 itself acquires for
    // every statement — skipping the Statement layer (compilation, a span per statement): a
    // third of an enqueue's cost. Any other client falls back to `sql.unsafe`.
    const onPool = (() => {
      try {
        const conn = new (Class as new(pg?: unknown) => Connection)(undefined)
        return typeof conn.execute === "function" ? conn : undefined
      } catch {
        return undefined
      }
    })()

    // A named statement the connection's server session did not keep was not run: from now on the
    // store's statements are unprepared, and outside a transaction this one runs again so (see
    // preparedStatements.ts); inside one the transaction is aborted and its caller meets the SqlError.
    const unprepare = (error: SqlError) =>
      statements.unprepare()
        ? Effect.logWarning(
          "alkstore: the PostgreSQL session behind a pooled connection did not keep the store's prepared " +
            "statements (a pooler in transaction mode, or DEALLOCATE / DISCARD ALL on a shared connection): " +
            "the store runs its statements unprepared from now on; set prepare: false to start that way",
          error
        )
        : Effect.void
    const run = <A>(
      conn: Connection,
      text: string,
      params: ReadonlyArray<Param>,
      again: boolean
    ): Effect.Effect<ReadonlyArray<A>, SqlError> => {
      const statement = statements.statement(text, params)
      const attempt = counted(conn.execute(statement, params as Array<Param>, undefined)) as Effect.Effect<
        ReadonlyArray<A>,
        SqlError
      >
      if (statement === text) return attempt
      return Effect.catchIf(attempt, lostPreparedStatement, (error) =>
        unpreparedAgain(error, again ? () => run<A>(conn, text, params, false) : undefined))
    }
    /**
     * After a named statement the session did not keep: unprepared from now on, then `again` (else the error).
     * `again` is made only after the switch, so it is built as the unprepared statement.
     */
    const unpreparedAgain = <A>(error: SqlError, again: (() => Effect.Effect<A, SqlError>) | undefined) =>
      Effect.zipRight(unprepare(error), Effect.suspend(() => again?.() ?? Effect.fail(error)))

    const { kept } = options
    /**
     * Sends `text` on the kept connection's `driver` (from `kept.take()`);
     * `done` gets the answer once. The driver's callback counts the statement
     * done, frees the connection and decodes the answer (no pool checkout,
     * no `counted` wrapper). Counted in flight until the server answered;
     * `named`: sent as a named prepared statement.
     */
    const sendOnKept = <A>(
      kept: KeptConnection,
      driver: NonNullable<ReturnType<KeptConnection["take"]>>,
      text: string,
      params: ReadonlyArray<Param>,
      done: (exit: Exit.Exit<ReadonlyArray<A>, SqlError>, named: boolean) => void
    ): void => {
      const statement = statements.statement(text, params)
      const named = statement !== text
      const answered = (error: unknown, result: unknown) => {
        inFlight--
        kept.answered(driver)
        if (error === null || error === undefined) {
          // A text without parameters runs on the simple protocol, which answers a multi-statement text with
          // one result each (as @effect/sql-pg's own connection reads it).
          const rows = Array.isArray(result)
            ? result.map((r: { rows?: unknown }) => r.rows ?? [])
            : (result as { rows?: ReadonlyArray<A> } | undefined)?.rows ?? []
          return done(Exit.succeed(rows as ReadonlyArray<A>), named)
        }
        done(Exit.fail(new SqlError({ cause: error, message: "Failed to execute statement" })), named)
      }
      inFlight++
      try {
        driver.query(statement, params, answered)
      } catch (cause) {
        answered(cause ?? new Error("the driver refused the statement"), undefined)
      }
    }
    /** A named statement the session did not keep: unprepared from now on, and `text` again so. */
    const againIfLost = <A>(named: boolean, text: string, params: ReadonlyArray<Param>) => (error: SqlError) =>
      named && lostPreparedStatement(error) ? unpreparedAgain(error, () => all<A>(text, params)) : Effect.fail(error)

    /**
     * A statement on the kept connection when it is free, else through the
     * pool: one `Effect.async` (see `sendOnKept`). The connection is taken
     * inside the registration, the statement sent in the same step: an
     * interruption landing between a take and its statement would have left
     * the connection busy for good.
     */
    const onKept = <A>(kept: KeptConnection, text: string, params: ReadonlyArray<Param>) =>
      Effect.async<ReadonlyArray<A>, SqlError>((resume) => {
        const driver = kept.take()
        if (driver === undefined) {
          resume(viaPool<A>(text, params))
          return
        }
        let answered = false
        sendOnKept<A>(kept, driver, text, params, (exit, named) => {
          answered = true
          resume(Exit.isSuccess(exit) ? exit : Effect.catchAll(exit, againIfLost<A>(named, text, params)))
        })
        // Once answered, the connection may already run another statement: a cancel now would stop that one.
        return Effect.suspend(() => (answered ? Effect.void : kept.cancel(driver)))
      })

    /** A statement outside a transaction through the pool: named on a pooled connection, else `sql.unsafe`. */
    const viaPool = <A>(text: string, params: ReadonlyArray<Param>): Effect.Effect<ReadonlyArray<A>, SqlError> =>
      onPool !== undefined
        ? run<A>(onPool, text, params, true)
        : counted(sql.unsafe<A & object>(text, params as Array<Param>) as unknown as Effect.Effect<ReadonlyArray<A>, SqlError>)

    const all = <A>(text: string, params: ReadonlyArray<Param>): Effect.Effect<ReadonlyArray<A>, SqlError> =>
      Effect.withFiberRuntime((fiber) => {
        const open = getOpen(fiber.currentContext)
        if (open !== undefined && isMine(open[0])) return run<A>(open[0], text, params, false)
        // Another client's transaction: neither joinable (another database) nor to be quietly
        // escaped (the caller believes the write is part of it). See src/internal/transactionOwner.ts.
        if (open !== undefined) return Effect.fail(otherTransactionError())
        return kept !== undefined ? onKept<A>(kept, text, params) : viaPool<A>(text, params)
      })

    // See `PgExecutor.allStoppable`: on the kept connection the caller's wait is interruptible and a stop's handler
    // gives the answer back; through the pool (the kept connection busy) the statement runs in a fiber of its own.
    // The statement always runs to its end.
    const allStoppable = <A>(
      text: string,
      params: ReadonlyArray<Param>,
      giveBack: (rows: ReadonlyArray<A>) => Effect.Effect<void>,
      given?: StatementStop
    ): Effect.Effect<ReadonlyArray<A>, SqlError> =>
      Effect.withFiberRuntime((fiber) => {
        const stop = given ?? fiber.getFiberRef(statementStop)
        if (stop === undefined || getOpen(fiber.currentContext) !== undefined) return all<A>(text, params)
        if (kept === undefined) return stoppableApart(viaPool<A>(text, params), giveBack, stop)
        // The take and the send in the wait's registration, as in `onKept`; the wait ends at an interruption
        // (`stop.restore`), and the stop's handler, outside it in the caller's uninterruptible region, gives the
        // answer back: at once when it came before the caller resumed, else once it comes. The statement is not
        // cancelled (it may have committed).
        let sent: Sent<A> | undefined
        const wait = stop.restore(Effect.async<ReadonlyArray<A>, SqlError>((resume) => {
          const driver = kept.take()
          if (driver === undefined) {
            resume(stoppableApart(viaPool<A>(text, params), giveBack, stop))
            return
          }
          const on: Sent<A> = (sent = { named: false, answer: undefined, late: undefined })
          sendOnKept<A>(kept, driver, text, params, (exit, named) => {
            on.named = named
            on.answer = exit
            if (on.late !== undefined) Deferred.unsafeDone(on.late, exit)
            else resume(exit)
          })
        }))
        const stopped = Effect.suspend(() => {
          if (sent === undefined) return Effect.void
          if (sent.answer !== undefined) return giveBackAfterStop(stop, Effect.succeed(sent.answer), giveBack)
          const late = (sent.late = Deferred.unsafeMake<ReadonlyArray<A>, SqlError>(fiber.id()))
          return giveBackAfterStop(stop, Effect.exit(Deferred.await(late)), giveBack)
        })
        const stoppable = Effect.catchAll(
          Effect.onInterrupt(wait, () => stopped),
          (error) => (sent === undefined ? Effect.fail(error) : againIfLost<A>(sent.named, text, params)(error))
        )
        return Effect.checkInterruptible((interruptible) => (interruptible ? Effect.uninterruptible(stoppable) : stoppable))
      })

    const openTransaction = (context: Context.Context<never>) => {
      const open = getOpen(context)
      if (open === undefined || !isMine(open[0])) return "none" as const
      return context.unsafeMap.has(Hooks.key) ? "store" as const : "application" as const
    }

    const commitHooks = (context: Context.Context<never>) =>
      context.unsafeMap.get(Hooks.key) as Array<() => void> | undefined

    return {
      all,
      allStoppable,
      transaction,
      openTransaction,
      commitHooks,
      client,
      inFlight: () => inFlight,
      planFor: statements.planFor,
      prepared: statements.prepared
    }
  }).pipe(
    Effect.mapError((cause) =>
      cause instanceof SqlError ? cause : new SqlError({ cause, message: "Failed to reach the database" })
    )
  )
