/**
 * SQL fragments the PostgreSQL claim statements share (src/internal/pg/queueStatements.ts, flowStatements.ts).
 */

/**
 * What a claim writes, as on SQLite: one CASE per column claims the row, or
 * moves a candidate met expired or with its attempts spent to dead. $1 is
 * now, $2 the worker. (Shared with flow control's claim, flowStorage.ts.)
 */
export const claimSetOf = (jobs: string) => {
  const gone = `((j.expires_at IS NOT NULL AND j.expires_at <= $1::bigint) OR j.attempts >= j.max_attempts)`
  return `UPDATE ${jobs} AS j SET
    state = CASE WHEN ${gone} THEN 'dead' ELSE 'claimed' END,
    last_error = CASE WHEN j.expires_at IS NOT NULL AND j.expires_at <= $1::bigint THEN 'expired'
      WHEN j.attempts >= j.max_attempts THEN 'max attempts exceeded' ELSE j.last_error END,
    died_at = CASE WHEN ${gone} THEN $1::bigint ELSE NULL END,
    claimed_until = CASE WHEN ${gone} THEN NULL ELSE $1::bigint + j.visibility_timeout END,
    worker_id = CASE WHEN ${gone} THEN NULL ELSE $2::text END,
    attempts = CASE WHEN ${gone} THEN j.attempts ELSE j.attempts + 1 END,
    claim_token = CASE WHEN ${gone} THEN j.claim_token ELSE j.claim_token + 1 END`
}

// A fenced write's row, found by primary key. `(state || '')` is `state`, but the planner cannot
// prove the partial index of claimed rows from it: when statistics were taken before a burst of
// claims that index looks empty, and `state = 'claimed'` made the planner scan every claim in flight
// and filter them by id — an ack, heartbeat or retry cost O(claims in flight) (test/pg-claim-plan.test.ts).
export const fencedRow = (id: string, token: string) =>
  `id = ${id}::bigint AND claim_token = ${token}::bigint AND (state || '') = 'claimed'`
