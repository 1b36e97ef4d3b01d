import type * as SqlClient from "@effect/sql/SqlClient"
import { Duration, Effect, Exit, Runtime, Scope } from "effect"
import { realClock } from "../realClock.js"

/** What the store uses of a `pg` client: its query call, its backend's process id, and the driver's health flags. */
export interface Driver {
  readonly query: (
    config: unknown,
    values: ReadonlyArray<unknown>,
    callback: (error: Error | null | undefined, result: unknown) => void
  ) => unknown
  readonly processID?: number | null
  // `pg`'s own flags, which `pg-pool` reads too when a client comes back: a client that lost its connection
  // is no longer queryable.
  readonly _queryable?: boolean
  readonly _ending?: boolean
  readonly _ended?: boolean
}

const healthy = (driver: Driver) => driver._queryable !== false && driver._ending !== true && driver._ended !== true

/**
 * One connection of the store's own pool, kept for the store's statements
 * outside a transaction (docs/performance-pg.md, "A kept connection").
 *
 * Through the pool every such statement checked a connection out and back
 * in (`pg-pool`'s checkout, its idle timer cleared and set again, an error
 * listener added and removed by `@effect/sql-pg`): ~60 µs of client CPU of an
 * enqueue's ~550 in a fresh process. The kept connection runs one statement
 * at a time and only when free: a statement that finds it busy goes through
 * the pool as before, so nothing waits for it and concurrency is unchanged.
 * A transaction takes it first when it is free (the pool is one short of
 * `maxConnections` while a connection is kept), else one from the pool.
 *
 * A connection that broke is given back to the pool (which discards it) and
 * another is kept in the background; until then statements use the pool. A
 * statement interrupted on it is cancelled as `@effect/sql-pg` cancels one,
 * and the connection takes no other statement until both the statement's
 * answer and the cancel's have come: a cancel that reached the server late
 * would otherwise stop the next statement instead.
 */
export interface KeptConnection {
  /** The kept connection's driver, now busy, when it is free and healthy; otherwise `undefined`: use the pool. */
  readonly take: () => Driver | undefined
  /** The statement run on `driver` (from `take`) was answered. */
  readonly answered: (driver: Driver) => void
  /**
   * Cancels the statement running on `driver`, as an interrupted statement's
   * canceler. Only for a statement not yet answered: once answered, the
   * connection may run another one, which this would stop.
   */
  readonly cancel: (driver: Driver) => Effect.Effect<void>
}

/** Statements between two attempts to keep a connection after one failed (the server was unreachable, say). */
const takesBeforeRetry = 1_000

export const keepConnection = (client: SqlClient.SqlClient): Effect.Effect<KeptConnection, never, Scope.Scope> =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    const run = Runtime.runFork(runtime)
    let held: { readonly driver: Driver; readonly scope: Scope.CloseableScope } | undefined
    let busy = false
    let cancelling = 0
    let keeping = false
    let skip = 0
    let closed = false

    const giveBack = (scope: Scope.CloseableScope) => void run(Scope.close(scope, Exit.void))
    const drop = () => {
      const dropped = held
      held = undefined
      busy = false
      if (dropped !== undefined) giveBack(dropped.scope)
    }
    // `@effect/sql-pg`'s reserve cannot be interrupted (its wait has no canceler): it runs to its end, and a
    // connection that arrives after the store closed goes straight back.
    const keep = () => {
      keeping = true
      run(Effect.uninterruptible(Effect.flatMap(Scope.make(), (scope) =>
        Effect.match(Scope.extend(client.reserve, scope), {
          onFailure: () => {
            keeping = false
            skip = takesBeforeRetry
            giveBack(scope)
          },
          onSuccess: (connection) => {
            keeping = false
            const driver = (connection as { readonly pg?: Driver }).pg
            if (closed || driver === undefined || held !== undefined) giveBack(scope)
            else held = { driver, scope }
          }
        }))))
    }

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        const last = held
        held = undefined
        return last === undefined ? Effect.void : Scope.close(last.scope, Exit.void)
      })
    )
    yield* Effect.sync(keep)

    const sql = client.withoutTransforms()
    return {
      take: () => {
        const kept = held
        if (kept !== undefined) {
          if (busy || cancelling > 0) return undefined
          if (healthy(kept.driver)) {
            busy = true
            return kept.driver
          }
          drop()
        }
        if (!keeping && !closed && skip-- <= 0) keep()
        return undefined
      },
      answered: (driver) => {
        if (held?.driver !== driver) return
        busy = false
        if (!healthy(driver)) drop()
      },
      cancel: (driver) =>
        Effect.suspend(() => {
          const pid = driver.processID
          if (held?.driver !== driver || !busy || typeof pid !== "number") return Effect.void
          cancelling++
          return sql.unsafe("SELECT pg_cancel_backend($1)", [pid]).pipe(
            Effect.ignore,
            Effect.interruptible,
            Effect.timeoutOption(Duration.seconds(5)),
            Effect.withClock(realClock),
            Effect.ensuring(Effect.sync(() => cancelling--)),
            Effect.asVoid
          )
        })
    }
  })
