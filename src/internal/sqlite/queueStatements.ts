import type { JobRow } from "../engine.js"
import { flowInsertColumns, flowInsertValues } from "./flowInsert.js"
import { nextJobId } from "./jobIds.js"

/**
 * What a claim writes: SET expressions all read the row as it was, so one
 * CASE per column either claims it or, when the candidate has expired or
 * spent its attempts, moves it to dead. `?1` is now, `?2` the worker.
 */
export const claimSet = `UPDATE __alkstore_jobs SET
  state = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN 'dead' ELSE 'claimed' END,
  last_error = CASE WHEN expires_at IS NOT NULL AND expires_at <= ?1 THEN 'expired'
    WHEN attempts >= max_attempts THEN 'max attempts exceeded' ELSE last_error END,
  died_at = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN ?1 ELSE NULL END,
  claimed_until = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN NULL
    ELSE ?1 + visibility_timeout END,
  worker_id = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN NULL ELSE ?2 END,
  attempts = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN attempts
    ELSE attempts + 1 END,
  claim_token = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN claim_token
    ELSE claim_token + 1 END`

/**
 * The best `limit` claimable ids of queue `?3` in claim order: due pending
 * rows from their index and, when `lapsed`, claimed rows whose lease lapsed.
 * Most claims find no lapsed lease (a read tells), and the pending side alone
 * costs a third less than the union.
 */
export const candidates = (limit: string, lapsed: boolean) =>
  lapsed
    ? `
  SELECT id FROM (
    SELECT id, priority, run_at FROM (
      SELECT id, priority, run_at FROM __alkstore_jobs WHERE queue = +?3 AND state = 'pending'
      ORDER BY priority DESC, run_at, id LIMIT ${limit})
    UNION ALL
    SELECT id, priority, run_at FROM (
      SELECT id, priority, run_at FROM __alkstore_jobs WHERE queue = +?3 AND state = 'claimed' AND claimed_until <= +?1
      ORDER BY priority DESC, run_at, id LIMIT ${limit})
    ORDER BY priority DESC, run_at, id LIMIT ${limit})`
    : `
  SELECT id FROM __alkstore_jobs WHERE queue = +?3 AND state = 'pending'
  ORDER BY priority DESC, run_at, id LIMIT ${limit}`

/**
 * A batch claim's write: the candidates joined to the table by primary key.
 * As `WHERE id IN (candidates)` it is a choice the planner makes from the
 * statistics, and after an `ANALYZE` that saw the table nearly empty (an
 * application's, or `PRAGMA optimize` at close with the queue drained) it
 * chose to scan the whole table and test each row against the list — for
 * as long as those statistics stood, however large the backlog grew. Joined
 * in `FROM`, the materialized candidates drive a primary-key search per row
 * with or without statistics (test/contract/queues-inspection.ts).
 */
const batchClaimText = (limit: string, lapsed: boolean) =>
  `${claimSet} FROM (${candidates(limit, lapsed)}) AS picked WHERE __alkstore_jobs.id = picked.id RETURNING ${claimedColumns}`

/**
 * When a live job counts as expired at `?1` and is swept to dead: its expiry
 * passed and it is not a claim in flight (pending, scheduled, or claimed with
 * a lapsed lease). Maintenance, a keyed insert meeting the key's holder, and
 * `requeueDead` meeting it all use this one rule, so an expired job never
 * holds its key, while a worker that is on it keeps it until its lease ends.
 */
const expiredAt = `expires_at IS NOT NULL AND expires_at <= ?1 AND state <> 'dead'
      AND (state <> 'claimed' OR claimed_until <= ?1)`
const sweepExpired = `UPDATE __alkstore_jobs SET state = 'dead', last_error = 'expired', died_at = ?1,
      claimed_until = NULL, worker_id = NULL`
/**
 * A key's holder that will never run again is no holder: expired (as
 * above), or claimed with its lease lapsed and its attempts spent, which the
 * next claim would move to dead unrun. A keyed insert or `requeueDead`
 * meeting one buries it first, as that claim would (the same `last_error`),
 * so the key's work is not answered with a job that dies without running.
 */
const keyHolderGone = `((${expiredAt}) OR (state = 'claimed' AND claimed_until <= ?1 AND attempts >= max_attempts))`
const sweepKeyHolder = `UPDATE __alkstore_jobs SET state = 'dead',
      last_error = CASE WHEN ${expiredAt} THEN 'expired' ELSE 'max attempts exceeded' END, died_at = ?1,
      claimed_until = NULL, worker_id = NULL`

/**
 * The columns a claim returns, in this order (`claimedRowOf` reads them by
 * position on the owned connection). Not `*`: the idempotency key is
 * nobody's business after a claim, and the columns the claim itself set
 * from its parameters — `queue` (`?3`), `worker_id`, `claimed_until` and
 * `died_at` (each `?2`, `?1 + visibility_timeout` or `?1` by `state`, see
 * `claimSet`) — are rebuilt from them in JS: every column a claim returns
 * costs its copy out of SQLite, a tenth of a batched claim for those four.
 */
const claimedColumns = `id, payload, state, priority, run_at, attempts, max_attempts, visibility_timeout, backoff_base,
  expires_at, claim_token, created_at, last_error, trace_context`

/** Every column of a `JobRow`, in this order (`rowOf` reads them by position): for the flow-control claim. */
export const jobColumns = `id, queue, payload, state, priority, run_at, attempts, max_attempts, visibility_timeout, backoff_base,
  expires_at, claimed_until, worker_id, claim_token, created_at, last_error, died_at, trace_context`

export const rowOf = (v: ReadonlyArray<unknown>): JobRow => ({
  id: v[0] as number,
  queue: v[1] as string,
  payload: v[2] as string,
  state: v[3] as JobRow["state"],
  priority: v[4] as number,
  run_at: v[5] as number,
  attempts: v[6] as number,
  max_attempts: v[7] as number,
  visibility_timeout: v[8] as number,
  backoff_base: v[9] as number,
  expires_at: v[10] as number | null,
  claimed_until: v[11] as number | null,
  worker_id: v[12] as string | null,
  claim_token: v[13] as number,
  created_at: v[14] as number,
  last_error: v[15] as string | null,
  died_at: v[16] as number | null,
  trace_context: v[17] as string | null
})

/** A claimed (or, when it met a candidate expired or spent, buried) row as a `JobRow`, from its returned columns. */
const claimedRow = (
  queue: string,
  workerId: string,
  now: number,
  id: number,
  payload: string,
  state: JobRow["state"],
  priority: number,
  runAt: number,
  attempts: number,
  maxAttempts: number,
  visibilityTimeout: number,
  backoffBase: number,
  expiresAt: number | null,
  claimToken: number,
  createdAt: number,
  lastError: string | null,
  traceContext: string | null
): JobRow => {
  const claimed = state === "claimed"
  return {
    id,
    queue,
    payload,
    state,
    priority,
    run_at: runAt,
    attempts,
    max_attempts: maxAttempts,
    visibility_timeout: visibilityTimeout,
    backoff_base: backoffBase,
    expires_at: expiresAt,
    claimed_until: claimed ? now + visibilityTimeout : null,
    worker_id: claimed ? workerId : null,
    claim_token: claimToken,
    created_at: createdAt,
    last_error: lastError,
    died_at: claimed ? null : now,
    trace_context: traceContext
  }
}

/** A claim's returned row (`claimedColumns` by position) as a `JobRow`. */
export const claimedRowOf = (queue: string, workerId: string, now: number) => (v: ReadonlyArray<unknown>): JobRow =>
  claimedRow(
    queue,
    workerId,
    now,
    v[0] as number,
    v[1] as string,
    v[2] as JobRow["state"],
    v[3] as number,
    v[4] as number,
    v[5] as number,
    v[6] as number,
    v[7] as number,
    v[8] as number,
    v[9] as number | null,
    v[10] as number,
    v[11] as number,
    v[12] as string | null,
    v[13] as string | null
  )

/** The same from a row object (an application's client returns objects): `claimedColumns` by name. */
export type ClaimedColumns = Omit<JobRow, "queue" | "claimed_until" | "worker_id" | "died_at" | "trace_context" | "lapsed"> & {
  readonly trace_context: string | null
}
export const claimedRowOfObject = (queue: string, workerId: string, now: number) => (r: ClaimedColumns): JobRow =>
  claimedRow(
    queue,
    workerId,
    now,
    r.id,
    r.payload,
    r.state,
    r.priority,
    r.run_at,
    r.attempts,
    r.max_attempts,
    r.visibility_timeout,
    r.backoff_base,
    r.expires_at,
    r.claim_token,
    r.created_at,
    r.last_error,
    r.trace_context
  )

/** An insert's columns, up to its last value (flow control's round: a subquery, or NULL); the id from jobIds.ts. */
export const insertColumns = `INSERT INTO __alkstore_jobs
    (id, queue, payload, state, priority, run_at, max_attempts, visibility_timeout, backoff_base, expires_at,
     idempotency_key, created_at, trace_context, ${flowInsertColumns})
    VALUES `
const insertInto = `${insertColumns}(${nextJobId}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, `

/**
 * Every statement of the SQLite queue mechanism (better-sqlite3 binds `?` by
 * position). The claim path's parameters in WHERE terms are written `+?`: a
 * bare parameter there lets SQLite's planner read its bound value once
 * `sqlite_stat4` has samples (better-sqlite3 builds with STAT4; an
 * application's `ANALYZE` or `PRAGMA optimize` writes them), and a statement
 * whose plan read a parameter is re-prepared whenever it is bound again: the
 * readiness read at 18 µs instead of 4, the claim at 52 instead of 13, at
 * every call. `+?` is the same value to SQLite, with no affinity of its own
 * (as a bare parameter) and the same index use (docs/performance.md).
 */
export const sql = {
  insert: `${insertInto}${flowInsertValues})`,
  // A batch's insert when its queue has no limits (read under the same write lock): no round, no probe per row.
  insertUnlimited: `${insertInto}?, NULL)`,
  hasLimits: `SELECT 1 FROM __alkstore_flow_limits WHERE queue = ?`,
  // With a key, a live job holding it wins: nothing is written and its id is looked up
  // (unless that holder has expired: `expireKeyHolder` sweeps it, and the insert runs again).
  insertKeyed: `${insertInto}${flowInsertValues})
    ON CONFLICT DO NOTHING`,
  liveKey: `SELECT id FROM __alkstore_jobs WHERE queue = ? AND idempotency_key = ? AND state <> 'dead'`,
  // `?1` now, `?2` the queue, `?3` the key (on the key's unique index).
  expireKeyHolder: `${sweepKeyHolder} WHERE queue = ?2 AND idempotency_key = ?3 AND ${keyHolderGone} RETURNING last_error`,
  // What a claim must do first: promote due scheduled rows into the claim
  // index (the read keeps idle claims write-free), and whether lapsed leases
  // compete with the pending rows. `?1` is the queue, `?2` now.
  // (Flow control: `limited` routes the claim to the flow walk, docs/flow-control.md; one primary-key probe.)
  readiness: `SELECT EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = +?1 AND state = 'scheduled' AND run_at <= +?2) AS due,
      EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = +?1 AND state = 'claimed' AND claimed_until <= +?2) AS lapsed,
      EXISTS (SELECT 1 FROM __alkstore_flow_limits WHERE queue = +?1) AS limited`,
  promoteDue: `UPDATE __alkstore_jobs SET state = 'pending' WHERE queue = +? AND state = 'scheduled' AND run_at <= +?`,
  // One statement claims the best candidate (pending, or claimed with a lapsed
  // lease), or moves it to dead when it meets it expired or spent. The
  // single-row form (`id = (…)`) matters outside a batch: `id IN (…)` makes
  // SQLite two-pass the update with a statement journal.
  claim: `${claimSet} WHERE id = (${candidates("1", true)}) RETURNING ${claimedColumns}`,
  claimPending: `${claimSet} WHERE id = (${candidates("1", false)}) RETURNING ${claimedColumns}`,
  // A batch inside a transaction (temp_store=MEMORY keeps its statement journal cheap).
  claimMany: batchClaimText("?4", true),
  claimManyPending: batchClaimText("?4", false),
  anyClaimable: `SELECT EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = +? AND state = 'pending')
      OR EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = +? AND state = 'scheduled' AND run_at <= +?)
      OR EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = +? AND state = 'claimed' AND claimed_until <= +?) AS any`,
  // Scalar min() is NULL if any argument is: take the smaller non-null one.
  nextDeadline: `SELECT (SELECT min(run_at) FROM __alkstore_jobs WHERE queue = +?1 AND state = 'scheduled' AND run_at > +?2) AS a,
      (SELECT min(claimed_until) FROM __alkstore_jobs WHERE queue = +?1 AND state = 'claimed' AND claimed_until > +?2) AS b`,
  ack: `DELETE FROM __alkstore_jobs WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  // The same unless the job is the newest, whose delete must leave the id floor (jobIds.ts): one statement.
  ackBelowNewest: `DELETE FROM __alkstore_jobs WHERE id = ? AND claim_token = ? AND state = 'claimed'
    AND id < (SELECT max(id) FROM __alkstore_jobs)`,
  retry: `UPDATE __alkstore_jobs
    SET state = CASE WHEN ? > ? THEN 'scheduled' ELSE 'pending' END, run_at = ?,
      last_error = coalesce(?, last_error), claimed_until = NULL, worker_id = NULL
    WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  bury: `UPDATE __alkstore_jobs
    SET state = 'dead', died_at = ?, last_error = coalesce(?, last_error), claimed_until = NULL, worker_id = NULL
    WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  heartbeat: `UPDATE __alkstore_jobs SET claimed_until = ?
    WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  keepAlive: `UPDATE __alkstore_jobs SET claimed_until = max(claimed_until, ?)
    WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  // Release gives the attempt back and keeps the job's place in line (its runAt is already due).
  release: `UPDATE __alkstore_jobs
    SET state = 'pending', attempts = max(attempts - 1, 0), claimed_until = NULL, worker_id = NULL
    WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  get: `SELECT * FROM __alkstore_jobs WHERE id = ? AND queue = ?`,
  cancel: `DELETE FROM __alkstore_jobs WHERE id = ? AND queue = ? AND state <> 'dead'`,
  stats: `SELECT
      (SELECT count(*) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'pending') AS pending,
      (SELECT count(*) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'scheduled' AND run_at <= ?2) AS due_scheduled,
      (SELECT count(*) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'scheduled' AND run_at > ?2) AS scheduled,
      (SELECT count(*) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'claimed') AS claimed,
      (SELECT count(*) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'dead') AS dead,
      (SELECT min(run_at) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'pending') AS oldest_pending,
      (SELECT min(run_at) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'scheduled' AND run_at <= ?2) AS oldest_due`,
  dead: `SELECT * FROM __alkstore_jobs WHERE queue = ? AND state = 'dead' ORDER BY died_at DESC, id DESC LIMIT ?`,
  // A requeued job whose key a live job took meanwhile stays dead (the key names one live job),
  // unless that holder has expired: `?1` now, `?2` the queue, `?3` the dead job's id.
  requeueExpireHolder: `${sweepKeyHolder} WHERE queue = ?2 AND idempotency_key = (
      SELECT idempotency_key FROM __alkstore_jobs WHERE id = ?3 AND queue = ?2 AND state = 'dead')
      AND ${keyHolderGone} RETURNING last_error`,
  // The expiry is cleared: an operator asked for this job to run (docs/queues-and-locks.md).
  requeueDead: `UPDATE __alkstore_jobs
    SET state = 'pending', run_at = ?1, attempts = 0, died_at = NULL, claimed_until = NULL, worker_id = NULL,
      expires_at = NULL
    WHERE id = ?3 AND queue = ?2 AND state = 'dead'
      AND (idempotency_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM __alkstore_jobs AS live WHERE live.queue = __alkstore_jobs.queue
          AND live.idempotency_key = __alkstore_jobs.idempotency_key AND live.state <> 'dead'))`,
  // `purgeDead`'s rounds, as maintenance's purge: the ids first, then a delete by primary key each.
  deadOfQueue: `SELECT id FROM __alkstore_jobs WHERE queue = ? AND state = 'dead' LIMIT ?`,
  deadOfQueueBefore: `SELECT id FROM __alkstore_jobs WHERE queue = ? AND state = 'dead' AND died_at < ? LIMIT ?`,
  // Maintenance's rounds: at most ?2 rows each, the ids picked first and joined in FROM (a primary-key search
  // per row whatever the statistics, as the batch claim's write); the swept rows' queues for the metrics.
  expireSome: `${sweepExpired} FROM (SELECT id FROM __alkstore_jobs WHERE ${expiredAt} LIMIT ?2) AS picked
    WHERE __alkstore_jobs.id = picked.id RETURNING queue`,
  // The lapsed leases a lapsed-path claim of `?4` rows can pick (`candidates`' lapsed side), to mark them.
  lapsedCandidates: `SELECT id FROM __alkstore_jobs WHERE queue = +?3 AND state = 'claimed' AND claimed_until <= +?1
      ORDER BY priority DESC, run_at, id LIMIT ?4`,
  // The claim logs (flow control) of scopes whose last claim left the window of the rule in force (now; at
  // most so many scopes; a scope whose rate the rule no longer has, at once), then each deleted: a claim prunes
  // only its own scope, and a group that never claims again (a user, an order) kept its entries for good. A
  // full round asks maintenance for another.
  staleFlowScopes: `SELECT f.queue, f.scope FROM __alkstore_flow_log AS f JOIN __alkstore_flow_limits AS l ON l.queue = f.queue
      GROUP BY f.queue, f.scope
      HAVING max(f.at) <= ? - coalesce(max(CASE WHEN f.scope = '' THEN l.rate_per ELSE l.group_rate_per END), 0)
      LIMIT ?`,
  deleteFlowScope: `DELETE FROM __alkstore_flow_log WHERE queue = ? AND scope = ?`,
  // The purge's round: its ids first, then a delete by primary key each (a DELETE has no FROM, and after an
  // ANALYZE of a nearly empty table `WHERE id IN (…)` was planned as a scan of the whole table).
  // Read in `died_at` order (migration 8), named: any other index walks dead jobs kept for longer.
  deadBefore: `SELECT id FROM __alkstore_jobs INDEXED BY __alkstore_jobs_dead_since
    WHERE state = 'dead' AND died_at < ? LIMIT ?`,
  deleteJob: `DELETE FROM __alkstore_jobs WHERE id = ?`
} as const

/**
 * `?N` parameters are not bound by number in better-sqlite3, so statements
 * written with `?N` for readability are rewritten to plain `?` once, with a
 * map from position to argument.
 */
export const numbered = (text: string) => {
  const order: Array<number> = []
  const rewritten = text.replace(/\?(\d+)/g, (_, n: string) => {
    order.push(Number(n) - 1)
    return "?"
  })
  return {
    text: rewritten,
    bind: (args: ReadonlyArray<string | number | null>) => order.map((i) => args[i] ?? null)
  }
}

export const readinessSql = numbered(sql.readiness)
export const claimSql = { lapsed: numbered(sql.claim), pending: numbered(sql.claimPending) }
export const claimManySql = { lapsed: numbered(sql.claimMany), pending: numbered(sql.claimManyPending) }


/**
 * The statements a claim runs, exported for the query-plan test (the claim
 * must stay on its partial indexes). The claims bind `[now, workerId, queue]`,
 * the batch claims `[now, workerId, queue, limit]`, the other two `[queue, now]`.
 */
export const claimStatements = {
  readiness: readinessSql,
  promoteDue: sql.promoteDue,
  claim: claimSql.lapsed,
  claimPending: claimSql.pending,
  claimMany: claimManySql.lapsed,
  claimManyPending: claimManySql.pending,
  /** The batch claims as they run (their row count a literal). */
  batchClaim: (wanted: number) => batchClaimSql(wanted)
} as const
export const statsSql = numbered(sql.stats)
export const nextDeadlineSql = numbered(sql.nextDeadline)

export const claimOrder = (a: JobRow, b: JobRow) => b.priority - a.priority || a.run_at - b.run_at || a.id - b.id

export const minOf = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.min(a, b))
export const expireSomeSql = numbered(sql.expireSome)
export const lapsedCandidatesSql = numbered(sql.lapsedCandidates)

/**
 * A statement (or a set of them) per literal value, written once. With
 * `bounded`, only the first `cap` values get their own; later ones get
 * `otherwise`, so a caller that names every value does not grow the
 * statement cache.
 */
export const byLiteral = <K, V>(make: (k: K) => V, bounded?: { readonly cap: number; readonly otherwise: V }) => {
  const made = new Map<K, V>()
  return (k: K): V => {
    let value = made.get(k)
    if (value === undefined) {
      if (bounded !== undefined && made.size >= bounded.cap) return bounded.otherwise
      made.set(k, value = make(k))
    }
    return value
  }
}

/**
 * A batch claim's statements with its row count written in as a literal. A
 * bound `LIMIT ?` makes SQLite re-prepare the statement at every bind (its
 * planner reads the bound limit, and a statement whose plan read a parameter
 * expires when it is bound again), which cost a batch claim more than its
 * own run. One set per count for the first 32 counts met (a worker asks for
 * the same few sizes; later rounds of a claim that met buried rows ask for
 * fewer); beyond them, the bound forms.
 */
export const batchClaimSql = byLiteral((wanted: number) => {
  const limit = String(wanted)
  return {
    lapsed: numbered(batchClaimText(limit, true)),
    pending: numbered(batchClaimText(limit, false)),
    lapsedCandidates: numbered(sql.lapsedCandidates.replace("LIMIT ?4", `LIMIT ${limit}`))
  }
}, { cap: 32, otherwise: { lapsed: claimManySql.lapsed, pending: claimManySql.pending, lapsedCandidates: lapsedCandidatesSql } })
export const expireKeyHolderSql = numbered(sql.expireKeyHolder)
export const requeueExpireHolderSql = numbered(sql.requeueExpireHolder)
export const requeueDeadSql = numbered(sql.requeueDead)
