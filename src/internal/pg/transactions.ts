/**
 * The PostgreSQL executor's transactions (src/internal/pg/executor.ts): BEGIN and COMMIT as typed errors, the
 * savepoints of a transaction already open on the store's client, and the wait for a connection.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import { Cause, Context, Effect, Exit, Fiber, FiberRef, Scope } from "effect"
import { inTurn } from "../savepointTurns.js"
import { otherTransactionError } from "../transactionOwner.js"
import type { KeptConnection } from "./keptConnection.js"

export type Open = readonly [conn: Connection, depth: number]

/** The transaction open in `context` (any `@effect/sql` client's: `SqlClient.TransactionConnection` is one tag). */
export const getOpen = (context: Context.Context<never>): Open | undefined =>
  context.unsafeMap.get(SqlClient.TransactionConnection.key) as Open | undefined

/** Ends the driver's connection so the pool discards it instead of reusing it mid-transaction. */
const discard = (conn: Connection) => {
  const pg = (conn as { pg?: { end?: () => Promise<void> } }).pg
  try {
    void pg?.end?.().catch(() => {})
  } catch {
    // already gone
  }
}

/** What the PostgreSQL executor's transactions are made of (src/internal/pg/executor.ts). */
export interface TransactionParts {
  readonly client: SqlClient.SqlClient
  readonly kept: KeptConnection | undefined
  /** The constructor of this client's connections. */
  readonly Class: Function
  readonly isMine: (conn: Connection) => boolean
  /** Where the store's own transaction open in a context keeps its commit hooks. */
  readonly Hooks: Context.Tag<Array<() => void>, Array<() => void>>
  /** A statement (or a wait for a connection) counted in flight while it runs. */
  readonly counted: <A, E, R>(statement: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

/**
 * The executor's `transaction`: a transaction of the store's own on a
 * connection of this client (the kept connection when it is free), or a
 * savepoint inside one of this client's that is open (the store's, or the
 * application's `sql.withTransaction`); inside another client's it fails
 * with a typed `SqlError` before running anything.
 */
export const makeTransaction = ({ Class, Hooks, client, counted, isMine, kept }: TransactionParts) => {
  const exec = (conn: Connection, sql: string) => counted(Effect.asVoid(conn.execute(sql, [], undefined)))
  // PostgreSQL answers the COMMIT of a transaction that an earlier failed statement aborted (one whose
  // failure the body caught and went on) with the tag ROLLBACK and no error: nothing was committed.
  const commit = (conn: Connection) =>
    counted(Effect.flatMap(conn.executeRaw("COMMIT", []), (result) =>
      (result as { readonly command?: unknown } | undefined)?.command === "ROLLBACK"
        ? Effect.fail(
          new SqlError({
            cause: new Error("COMMIT answered ROLLBACK"),
            message: "the transaction was rolled back, not committed: a statement in it failed earlier and " +
              "aborted it (PostgreSQL answers such a COMMIT with ROLLBACK)"
          })
        )
        : Effect.void))

  const savepoint = <A, E, R>(
    context: Context.Context<never>,
    [conn, depth]: Open,
    effect: Effect.Effect<A, E, R>,
    restore: <X, Y, Z>(e: Effect.Effect<X, Y, Z>) => Effect.Effect<X, Y, Z>
  ): Effect.Effect<A, E | SqlError, R> => {
    const name = `alkstore_sp_${depth + 1}`
    const parent = context.unsafeMap.get(Hooks.key) as Array<() => void> | undefined
    const hooks: Array<() => void> = []
    const inner = Context.add(context, SqlClient.TransactionConnection, [conn, depth + 1] as const).pipe(
      Context.add(Hooks, hooks)
    )
    const undo = Effect.zipRight(exec(conn, `ROLLBACK TO SAVEPOINT ${name}`), exec(conn, `RELEASE SAVEPOINT ${name}`))
    return inTurn(
      conn,
      depth + 1,
      restore,
      exec(conn, `SAVEPOINT ${name}`).pipe(
        Effect.zipRight(Effect.exit(Effect.locally(restore(effect), FiberRef.currentContext, inner))),
        Effect.flatMap((exit): Effect.Effect<A, E | SqlError> =>
          Exit.isSuccess(exit)
            ? Effect.as(exec(conn, `RELEASE SAVEPOINT ${name}`), exit.value).pipe(
              // A RELEASE refused (an earlier statement in it failed and aborted the transaction): its work
              // is undone, so the enclosing transaction can go on without it.
              Effect.tapError(() => Effect.ignore(undo)),
              // Work of an application transaction wakes through NOTIFY on its commit.
              Effect.tap(() => parent?.push(...hooks))
            )
            : undo.pipe(
              Effect.matchCauseEffect({
                onSuccess: () => exit,
                onFailure: (cause) => Exit.failCause(Cause.sequential(exit.cause, cause))
              })
            )
        )
      )
    )
  }

  /**
   * A pooled connection for a transaction, whose wait may be interrupted.
   * `@effect/sql-pg`'s reserve cannot: its wait has no canceler, so a
   * connection the pool hands over after an interruption was never given
   * back (an exhausted pool, every later operation waiting). The take runs
   * in a fiber of its own that always finishes: a connection arriving after
   * the caller gave up lands in `scope`, already closed, and is released.
   * The kept connection, when free, is taken first: the pool is one
   * connection short of `maxConnections` while a connection is kept, and
   * transactions can still have as many open at once.
   */
  const reserveIn = (scope: Scope.Scope): Effect.Effect<Connection, SqlError> =>
    // The kept connection's take and its return in `scope` in one uninterruptible step.
    Effect.uninterruptibleMask((restore) =>
      Effect.suspend(() => {
        const driver = kept?.take()
        if (driver !== undefined) {
          return Effect.as(
            Scope.addFinalizer(scope, Effect.sync(() => kept!.answered(driver))),
            new (Class as new(pg: unknown) => Connection)(driver)
          )
        }
        return restore(Effect.flatMap(
          Effect.forkDaemon(Effect.uninterruptible(Scope.extend(client.reserve, scope))),
          Fiber.join
        ))
      })
    )

  /**
   * Unlike `@effect/sql`'s own, a failed BEGIN or COMMIT is the typed
   * `SqlError` it is (never a defect), a connection whose ROLLBACK failed is
   * discarded rather than pooled mid-transaction, and the commit hooks (wake
   * signals) run only after COMMIT succeeded.
   */
  const transaction = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.withFiberRuntime<A, E | SqlError, R>((fiber) => {
        const context = fiber.currentContext
        const open = getOpen(context)
        if (open !== undefined && isMine(open[0])) return savepoint(context, open, effect, restore)
        if (open !== undefined) return Effect.fail(otherTransactionError())
        return Effect.flatMap(Scope.make(), (scope) => {
          // The wait for a connection counts as in flight: a new one is a TCP connect and a login away (the
          // store's close, and tests that settle until nothing is in flight, wait for it).
          const body = Effect.flatMap(restore(counted(reserveIn(scope))), (conn) => {
            const hooks: Array<() => void> = []
            const inner = Context.add(context, SqlClient.TransactionConnection, [conn, 0] as const).pipe(
              Context.add(Hooks, hooks)
            )
            const rollback = Effect.catchAll(exec(conn, "ROLLBACK"), () => Effect.sync(() => discard(conn)))
            return exec(conn, "BEGIN").pipe(
              Effect.tapError(() => Effect.sync(() => discard(conn))),
              Effect.zipRight(Effect.exit(Effect.locally(restore(effect), FiberRef.currentContext, inner))),
              Effect.flatMap((exit): Effect.Effect<A, E | SqlError> =>
                Exit.isFailure(exit)
                  ? Effect.zipRight(rollback, exit)
                  : commit(conn).pipe(
                    // A failed COMMIT has ended the transaction; a broken connection is discarded.
                    Effect.tapError(() => rollback),
                    Effect.map(() => {
                      for (const hook of hooks) hook()
                      return exit.value
                    })
                  )
              )
            )
          })
          return Effect.ensuring(body, Scope.close(scope, Exit.void))
        })
      })
    )

  return transaction
}
