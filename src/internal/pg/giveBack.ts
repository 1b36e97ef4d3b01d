import { Effect } from "effect"
import type { JobRow } from "../engine.js"
import type { Param, PgExecutor } from "./executor.js"

/**
 * A claim of several statements outside a transaction (PostgreSQL's rounds
 * after candidates met dead, and a limited claim's optimistic walk: each
 * statement commits on its own) whose later statement fails: `effect`'s
 * error, with the claims its earlier statements committed (`claimed()`)
 * given back — pending again, the attempt returned, waiters told — so the
 * call's `SqlError` leaves no job claimed without a handle
 * (docs/guarantees.md). Best effort: a give-back that fails too (the server
 * is down, or the application's transaction is aborted and rolls the claims
 * back itself) is logged, and those claims return when their lease lapses.
 * A claim made under a rate keeps its place in the window (it was made).
 */
export const givingBackOnError = <A, E, R>(
  db: PgExecutor,
  /** The release statement ($1 id, $2 token, then `tail`). */
  release: string,
  tail: ReadonlyArray<Param>,
  claimed: () => ReadonlyArray<JobRow>,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.onError(effect, () => giveBackClaims(db, release, tail, claimed(), "after a failed claim"))

/**
 * The claims among `rows` given back (pending again, the attempt returned,
 * waiters told), best effort: a give-back that fails is logged, and those
 * claims return when their lease lapses. `when` says why, for the log.
 */
export const giveBackClaims = (
  db: PgExecutor,
  release: string,
  tail: ReadonlyArray<Param>,
  rows: ReadonlyArray<JobRow>,
  when: string
): Effect.Effect<void> => {
  const claims = rows.filter((row) => row.state === "claimed")
  if (claims.length === 0) return Effect.void
  return Effect.forEach(claims, (row) => db.all(release, [row.id, row.claim_token, ...tail]), { discard: true }).pipe(
    Effect.catchAll((error) =>
      Effect.logWarning(`alkstore: giving back ${claims.length} claims ${when} failed; they return when their lease lapses`, error)
    )
  )
}
