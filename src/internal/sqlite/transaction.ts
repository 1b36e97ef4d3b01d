import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import { Cause, Context, Effect, Exit, FiberRef } from "effect"
import { writeFreeWait } from "../patience.js"
import { inTurn } from "../savepointTurns.js"
import { type OwnsConnection, otherTransactionError, ownTransaction } from "../transactionOwner.js"

/**
 * Callbacks to run once the outermost transaction commits (wake signals must
 * never fire for work that rolled back). Present only in transactions opened
 * by alkstore's own `withTransaction`; a transaction the application opened
 * with its own client's `withTransaction` (`layerFromClient`) has none, and
 * its commits are seen by the change watcher instead.
 */
export class CommitHooks extends Context.Tag("alkstore/internal/CommitHooks")<CommitHooks, Array<() => void>>() {}

/**
 * The transaction open in `context`: `undefined` when none, `"foreign"` for
 * one the application opened on the store's client (its commit cannot be
 * hooked: the change watcher sees it), else the hooks to run once it commits.
 * (Another client's transaction never gets here: the executor refuses it.)
 */
export const openTransaction = (context: Context.Context<never>): Array<() => void> | "foreign" | undefined => {
  if (!context.unsafeMap.has(SqlClient.TransactionConnection.key)) return undefined
  return (context.unsafeMap.get(CommitHooks.key) as Array<() => void> | undefined) ?? "foreign"
}

/**
 * Wakes waiters after the transaction in `context` commits (at once outside
 * one). Signals of one transaction are summed per topic, so a transaction of
 * a thousand enqueues registers one hook, not a thousand. In a foreign
 * transaction `foreign` is told (the change watcher sees its commit, where
 * there is one).
 */
export const makeCommitSignals = (signal: (topic: string, count: number) => void, foreign?: () => void) => {
  const pending = new WeakMap<Array<() => void>, Map<string, number>>()
  return (context: Context.Context<never>, topic: string, count: number): void => {
    const open = openTransaction(context)
    if (open === undefined) return signal(topic, count)
    if (open === "foreign") return foreign?.()
    let counts = pending.get(open)
    if (counts === undefined) {
      const topics = new Map<string, number>()
      counts = topics
      pending.set(open, topics)
      open.push(() => {
        for (const [name, n] of topics) signal(name, n)
      })
    }
    counts.set(topic, (counts.get(topic) ?? 0) + count)
  }
}

const exec = (conn: Connection, sql: string) => Effect.asVoid(conn.execute(sql, [], undefined))

/**
 * What a statement fails with when the fiber's transaction is open in its
 * context but SQLite already ended it: after some errors (`SQLITE_FULL`,
 * `SQLITE_IOERR`, `SQLITE_NOMEM`…) SQLite rolls the whole transaction back
 * by itself, and the connection is back in autocommit. Every later statement
 * of that transaction would commit on its own — what a caller who caught the
 * first error and carried on would never see — so none runs.
 */
export const abandonedTransactionError = (): SqlError =>
  new SqlError({
    cause: new Error("SQLite rolled back the transaction"),
    message: "SQLite rolled back this transaction after an earlier error in it (e.g. SQLITE_FULL): its later " +
      "statements would each commit on their own, so none runs. Let the transaction fail and retry it whole."
  })

/**
 * A BEGIN that fails with "cannot start a transaction within a transaction"
 * on a connection nobody holds: the application's connection was left inside
 * a transaction (`@effect/sql` 0.52 turns a failed COMMIT into a defect and
 * never rolls back). Every write would join it and never commit: say so.
 */
const beginFailed = (error: SqlError): SqlError =>
  /within a transaction/i.test(String((error.cause as { message?: unknown } | undefined)?.message ?? error.message))
    ? new SqlError({
      cause: error,
      message: "alkstore found the application's connection inside a transaction that no fiber holds " +
        "(after a failed COMMIT, @effect/sql 0.52 does not roll back): writes there would never commit. " +
        "Roll it back (ROLLBACK on that connection) when a COMMIT fails; see docs/decisions.md."
    })
    : error

/**
 * `BEGIN IMMEDIATE` transactions over `SqlClient.TransactionConnection`
 * (nested calls become savepoints), unlike `@effect/sql`'s own in two ways:
 * a failed BEGIN (SQLITE_BUSY) is retried and then surfaces as that
 * `SqlError` rather than as the defect of a ROLLBACK with no transaction, and
 * a failed COMMIT is a typed `SqlError` after rolling back, not a defect.
 * Waiting for the connection and waiting out a busy BEGIN are interruptible
 * (where the caller is); the body runs as the caller's region does, and the
 * COMMIT or ROLLBACK after it always runs.
 */
export const makeImmediateTransaction = (options: {
  /**
   * Takes the connection exclusively; the effect returned releases it. Run uninterruptibly, with only the
   * wait for the connection inside `wait`, so a connection taken always reaches its release.
   */
  readonly acquire: (
    wait: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  ) => Effect.Effect<readonly [release: Effect.Effect<void>, conn: Connection], SqlError>
  readonly retryBusy: <A>(effect: Effect.Effect<A, SqlError>) => Effect.Effect<A, SqlError>
  /** Whether a transaction open on `conn` is the store's to join (see `transactionOwner.ts`). */
  readonly owns: OwnsConnection
  /**
   * The outermost BEGIN; `"BEGIN"` (deferred) only for wrapping one
   * statement, where it means what autocommit means and only adds the check
   * that the connection is not already inside a transaction.
   */
  readonly begin?: "BEGIN" | "BEGIN IMMEDIATE"
  /**
   * Fails with `abandonedTransactionError` when the open transaction on
   * `conn` was ended by SQLite itself: a SAVEPOINT there would open a
   * transaction of its own, and its RELEASE commit it. (The store's own
   * connection refuses every statement of such a transaction already.)
   */
  readonly joinable?: (conn: Connection) => Effect.Effect<void, SqlError>
  /**
   * A connection the store owns can do better: take it synchronously when
   * free and run BEGIN/COMMIT/ROLLBACK in place (each returns its error, if
   * any). A busy BEGIN falls back to the waiting path above.
   */
  readonly direct?: {
    readonly conn: Connection
    readonly tryAcquire: () => (() => void) | undefined
    readonly exec: (sql: "BEGIN IMMEDIATE" | "COMMIT" | "ROLLBACK") => SqlError | undefined
    readonly isBusy: (error: SqlError) => boolean
  }
}) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.withFiberRuntime<A, E | SqlError, R>((fiber) => {
      const context = fiber.currentContext
      const open = ownTransaction(context, options.owns)
      if (open === "other") return Effect.fail(otherTransactionError())
      if (open !== undefined) {
        const [conn, depth] = open
        const id = depth + 1
        const name = `alkstore_sp_${id}`
        const parentHooks = context.unsafeMap.get(CommitHooks.key) as Array<() => void> | undefined
        const hooks: Array<() => void> = []
        // In a transaction the store did not begin (the application's), hooks released with the savepoint would
        // have no transaction's hooks to join: the signals inside go where the application's own go (`foreign`).
        const joined = Context.add(context, SqlClient.TransactionConnection, [conn, id] as const)
        const inner = parentHooks === undefined ? joined : Context.add(joined, CommitHooks, hooks)
        const savepoint = exec(conn, `SAVEPOINT ${name}`)
        const undo = Effect.zipRight(exec(conn, `ROLLBACK TO SAVEPOINT ${name}`), exec(conn, `RELEASE SAVEPOINT ${name}`))
        return inTurn(
          conn,
          id,
          restore,
          (options.joinable === undefined ? savepoint : Effect.zipRight(options.joinable(conn), savepoint)).pipe(
            Effect.zipRight(Effect.exit(Effect.locally(restore(effect), FiberRef.currentContext, inner))),
            Effect.flatMap((exit): Effect.Effect<A, E | SqlError> =>
              Exit.isSuccess(exit)
                ? exec(conn, `RELEASE SAVEPOINT ${name}`).pipe(
                  // A RELEASE refused: its work is undone, so the enclosing transaction can go on without it.
                  Effect.tapError(() => Effect.ignore(undo)),
                  Effect.map(() => {
                    if (parentHooks !== undefined) parentHooks.push(...hooks)
                    return exit.value
                  })
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
      const direct = options.direct
      const releaseNow = direct?.tryAcquire()
      if (direct !== undefined && releaseNow !== undefined) {
        const begun = direct.exec("BEGIN IMMEDIATE")
        if (begun === undefined) {
          const hooks: Array<() => void> = []
          const inner = Context.add(context, SqlClient.TransactionConnection, [direct.conn, 0] as const).pipe(
            Context.add(CommitHooks, hooks)
          )
          return Effect.flatMap(
            Effect.exit(Effect.locally(restore(effect), FiberRef.currentContext, inner)),
            (exit): Effect.Effect<A, E | SqlError> => {
              if (Exit.isFailure(exit)) {
                direct.exec("ROLLBACK")
                releaseNow()
                return exit
              }
              const failed = direct.exec("COMMIT")
              if (failed !== undefined) direct.exec("ROLLBACK")
              releaseNow()
              if (failed !== undefined) return Effect.fail(failed)
              for (const hook of hooks) hook()
              return Effect.succeed(exit.value)
            }
          )
        }
        releaseNow()
        if (!direct.isBusy(begun)) return Effect.fail(begun)
      }
      return Effect.flatMap(options.acquire((wait) => writeFreeWait(wait, restore)), ([release, conn]) => {
        const hooks: Array<() => void> = []
        const inner = Context.add(context, SqlClient.TransactionConnection, [conn, 0] as const).pipe(
          Context.add(CommitHooks, hooks)
        )
        const rollback = exec(conn, "ROLLBACK")
        const body = Effect.exit(Effect.locally(restore(effect), FiberRef.currentContext, inner)).pipe(
          Effect.flatMap((exit): Effect.Effect<A, E | SqlError> => {
            if (Exit.isFailure(exit)) {
              // SQLite may already have rolled back (e.g. after SQLITE_FULL); the
              // body's own failure is the outcome either way.
              return Effect.zipRight(Effect.ignore(rollback), exit)
            }
            return exec(conn, "COMMIT").pipe(
              Effect.tapError(() => Effect.ignore(rollback)),
              Effect.as(exit.value),
              Effect.tap(() => {
                for (const hook of hooks) hook()
              })
            )
          })
        )
        // The BEGIN waits out a busy file interruptibly (its waits are Effect sleeps, see
        // `busy.ts`), so a stop does not sit out the store's patience. Everything after it
        // is uninterruptible again until the body's COMMIT or ROLLBACK is in place. An
        // interrupted BEGIN normally opened nothing (its last attempt was busy), but the
        // interruption may also be seen just after a BEGIN that succeeded: then the ROLLBACK
        // ends that transaction, and otherwise fails harmlessly ("no transaction is active").
        return Effect.exit(restore(options.retryBusy(exec(conn, options.begin ?? "BEGIN IMMEDIATE")))).pipe(
          Effect.flatMap((begun): Effect.Effect<A, E | SqlError, R> => {
            if (Exit.isSuccess(begun)) return body
            if (Cause.isInterrupted(begun.cause)) return Effect.zipRight(Effect.ignore(rollback), Effect.failCause(begun.cause))
            return Effect.failCause(Cause.map(begun.cause, beginFailed))
          }),
          Effect.ensuring(release)
        )
      })
    })
  )
