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
  Effect.onError(effect, () => {
    const rows = claimed().filter((row) => row.state === "claimed")
    if (rows.length === 0) return Effect.void
    return Effect.forEach(rows, (row) => db.all(release, [row.id, row.claim_token, ...tail]), { discard: true }).pipe(
      Effect.catchAll((error) =>
        Effect.logWarning(`alkstore: giving back ${rows.length} claims after a failed claim failed; they return when their lease lapses`, error)
      )
    )
  })
