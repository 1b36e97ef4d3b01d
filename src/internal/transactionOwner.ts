import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, type Fiber, FiberRef } from "effect"

/**
 * "Is this transaction mine?", which every engine answers for itself.
 *
 * `SqlClient.TransactionConnection` is one tag shared by every `@effect/sql`
 * client: inside *any* client's `withTransaction` it holds that client's
 * connection, and a statement of another client run there would go to that
 * connection — another database. So an engine never takes the tag at its
 * word: it asks `owns(conn)` (the store's own connection, or a connection of
 * the application's client the store runs on) and treats a transaction on
 * any other connection as somebody else's.
 *
 * The rule (docs/decisions.md): an alkstore operation inside another
 * client's transaction fails with `SqlError` before it runs a statement. It
 * can be neither atomic with that transaction (another database) nor quietly
 * outside it (an enqueue the caller believes rolls back with their writes).
 */
export type OwnsConnection = (conn: Connection) => boolean

/**
 * Whether the fiber runs inside some `@effect/sql` transaction (whoever's:
 * an operation in another client's is then refused by the engine's executor).
 */
export const inTransactionOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): boolean =>
  fiber.currentContext.unsafeMap.has(SqlClient.TransactionConnection.key)

/** `inTransactionOf` the running fiber, as an effect. */
export const inTransaction: Effect.Effect<boolean> = Effect.withFiberRuntime((fiber) => Effect.succeed(inTransactionOf(fiber)))

/** The transaction open in `context` on a connection the engine owns, `"other"` for anybody else's, or none. */
export const ownTransaction = (
  context: Context.Context<never>,
  owns: OwnsConnection
): readonly [conn: Connection, depth: number] | "other" | undefined => {
  const open = context.unsafeMap.get(SqlClient.TransactionConnection.key) as
    | readonly [conn: Connection, depth: number]
    | undefined
  if (open === undefined) return undefined
  return owns(open[0]) ? open : "other"
}

export const otherTransactionMessage = "alkstore was called inside another SqlClient's transaction"

/** What an operation inside another client's transaction fails with. */
export const otherTransactionError = (): SqlError =>
  new SqlError({
    cause: new Error(otherTransactionMessage),
    message: `${otherTransactionMessage}: its statements cannot run on that client's connection (another ` +
      "database), nor quietly outside a transaction the caller believes they are part of. Call it outside " +
      "that transaction (before it, or after it commits)."
  })

/**
 * `effect` outside any transaction its fiber was started in: long-lived work
 * (a `process` worker, a scheduler runner) forked inside an application's
 * transaction outlives it, and with that transaction's connection in its
 * context its statements would run on that connection in whatever state it
 * is in later — inside another fiber's transaction, or in none (on SQLite the
 * store refused them: such a worker handled nothing, ever).
 */
export const outsideTransactions = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.locallyWith(effect, FiberRef.currentContext, Context.omit(SqlClient.TransactionConnection))
