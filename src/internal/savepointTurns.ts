import type { Connection } from "@effect/sql/SqlConnection"
import { Effect } from "effect"

/**
 * Nested transactions of one transaction take turns, one level at a time.
 * Every savepoint at one depth has the same name, and PostgreSQL's and
 * SQLite's `ROLLBACK TO` and `RELEASE` act on the newest savepoint of that
 * name: two siblings run at once (`Effect.all` with concurrency, inside one
 * `withTransaction`) rolled back or released each other's — a failing one
 * undid the other's enqueue and kept its own write. Distinct names would not
 * be enough either: rolling back to an earlier savepoint undoes every later
 * one's work too. So a savepoint waits for its siblings (the savepoints of the
 * same depth on the same connection), and its own children wait for each
 * other on the next depth, never on it.
 *
 * A side table of the connection (a `WeakMap` keyed by it), not state of the
 * store: it lives as long as the connection, and holds one semaphore per
 * depth that nested transactions reached.
 */
const turns = new WeakMap<Connection, Array<Effect.Semaphore>>()

/** The turn of a savepoint at `depth` (1 for the first level inside a transaction) on `conn`. */
export const savepointTurn = (conn: Connection, depth: number): Effect.Semaphore => {
  let levels = turns.get(conn)
  if (levels === undefined) {
    levels = []
    turns.set(conn, levels)
  }
  return (levels[depth] ??= Effect.unsafeMakeSemaphore(1))
}

/**
 * `savepoint` in its turn: the wait is as interruptible as the caller
 * (`restore`); once taken, the turn is given back however the savepoint ends.
 */
export const inTurn = <A, E, R>(
  conn: Connection,
  depth: number,
  restore: <X, Y, Z>(effect: Effect.Effect<X, Y, Z>) => Effect.Effect<X, Y, Z>,
  savepoint: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  const turn = savepointTurn(conn, depth)
  return Effect.zipRight(restore(turn.take(1)), Effect.ensuring(savepoint, turn.release(1)))
}
