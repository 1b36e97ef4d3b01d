import type { Notifier } from "./notify.js"
import { flowRoundOf } from "./flowInsert.js"
import { claimSetOf, fencedRow } from "./claimSql.js"
import { plannedEachCall } from "./preparedStatements.js"
import { jobColumns } from "./rows.js"

/** Due scheduled rows a claim promotes per statement (a `backlog` when full: claimRounds in queueStorage.ts). */
const DUE_BATCH = 1000

/**
 * Every statement of the PostgreSQL queue mechanism, for the tables of
 * schema `s`. Claims take their rows with `FOR UPDATE SKIP LOCKED` from the
 * partial indexes of due work (pending rows, and claimed rows whose lease
 * lapsed), so workers on many hosts never wait for each other and never
 * walk dead, acked (deleted) or future (`scheduled`) rows. Writes that make
 * work claimable notify in the same statement (`n.tail`), so the NOTIFY is
 * delivered on commit only.
 */
export const queueStatements = (s: string, n: Notifier) => {
  const jobs = `${s}.__alkstore_jobs`
  // The notification of `w.topic`'s queue when it has limits ($k the channel), as a select-list column.
  const tellIfLimited = (k: number) =>
    `(SELECT ${n.tail(k)} FROM ${s}.__alkstore_flow_limits AS l WHERE l.queue = w.topic)::text AS told`
  const columns = jobColumns()
  // What a claim writes, as on SQLite: one CASE per column claims the row, or
  // moves a candidate met expired or with its attempts spent to dead. $1 is now, $2 the worker.
  const claimSet = claimSetOf(jobs)
  // When a live job counts as expired at $1 and is swept to dead (as on SQLite, one rule for
  // maintenance, a keyed insert meeting the key's holder and requeueDead meeting it): its expiry
  // passed and it is not a claim in flight.
  const expiredAt = `expires_at IS NOT NULL AND expires_at <= $1::bigint AND state <> 'dead'
      AND (state <> 'claimed' OR claimed_until <= $1::bigint)`
  const sweepExpired = `UPDATE ${jobs} SET state = 'dead', last_error = 'expired', died_at = $1::bigint,
      claimed_until = NULL, worker_id = NULL`
  // A key's holder that will never run again is no holder (as on SQLite, sqlite/queueStatements.ts
  // `keyHolderGone`): expired, or claimed with its lease lapsed and its attempts spent, which the next
  // claim would move to dead unrun. A keyed insert or requeueDead meeting one buries it first, as that claim would.
  const keyHolderGone = `((${expiredAt}) OR (state = 'claimed' AND claimed_until <= $1::bigint AND attempts >= max_attempts))`
  const sweepKeyHolder = `UPDATE ${jobs} SET state = 'dead',
      last_error = CASE WHEN ${expiredAt} THEN 'expired' ELSE 'max attempts exceeded' END, died_at = $1::bigint,
      claimed_until = NULL, worker_id = NULL`
  /**
   * The claim's candidates and the promotion of due scheduled rows, as CTEs
   * ($1 now, $3 queue, $4 how many; `exclude` narrows the lapsed leases).
   * Candidates come from the pending index, the lapsed leases' index and a
   * bounded batch of due scheduled rows (the oldest 1000), each taken FOR
   * UPDATE SKIP LOCKED: rows another claimer holds are skipped, never waited
   * for, so no row is claimed twice. `picked` is the best `$4` in contract
   * order (priority, then run_at, then id); the other due scheduled rows move
   * into the claim index (`pending`) in the same statement (a row is modified
   * once: the two sets are disjoint). A full batch (`backlog`: more due rows
   * may lie beyond it, and one of them may come first in that order) picks
   * nothing and only promotes: the caller runs the claim again until every
   * due row is pending, so a claim always chooses among all claimable jobs,
   * as on SQLite (a backlog of due rows forms only while nobody claims).
   * A prepared statement keeps its generic
   * plan until the table's statistics change, and one made while the table
   * was nearly empty, as a store's first claims are, runs on as its backlog
   * grows: with `id = ANY (ARRAY(…))` for both writes that plan scanned the
   * whole table twice per claim until autovacuum's first ANALYZE. So the
   * claim's write finds its rows by primary key (`claimedRows`), and the
   * promotion reads the partial index of scheduled rows up to the latest due
   * one (test/pg-claim-plan.test.ts). A table analyzed while it held a page
   * or two has no such floor (every read there is a sequential scan): those
   * plans are made again once it grows (planSize.ts).
   * (Flow control: a queue with limits claims nothing here; `lim.limited`
   * sends it to the flow walk, docs/flow-control.md — one primary-key probe.)
   */
  // Whether a claimed row came from a lapsed lease (for the lease-lapse metric).
  const lapsedColumn = "j.id IN (SELECT id FROM lapsed) AS lapsed"
  // `limit` is `$4`, or the literal `1` of a claim of one (`$4` then still typed, unused: the
  // parameters stay one list). A generic plan cannot know `LIMIT $4` and costs it as a tenth of the
  // rows: with a million pending the generic plan looks dear, PostgreSQL keeps planning a custom one
  // on every call (~0.4 ms, measured: 0 generic plans in 200 claims at 1M pending, 195 at 1k), and
  // the claim's cost grew with the backlog. With `LIMIT 1` the generic plan is chosen at any size.
  const claimCtes = (exclude: string, limit: "$4" | "1") => `lim AS MATERIALIZED (
        SELECT EXISTS (SELECT 1 FROM ${s}.__alkstore_flow_limits WHERE queue = $3) AS limited, $4::bigint AS wanted
      ), due AS MATERIALIZED (
        SELECT id, priority, run_at FROM ${jobs} WHERE queue = $3 AND state = 'scheduled' AND run_at <= $1::bigint
          AND NOT (SELECT limited FROM lim)
        ORDER BY run_at LIMIT ${DUE_BATCH} FOR UPDATE SKIP LOCKED
      ), pending AS MATERIALIZED (
        SELECT id, priority, run_at FROM ${jobs} WHERE queue = $3 AND state = 'pending' AND NOT (SELECT limited FROM lim)
        ORDER BY priority DESC, run_at, id LIMIT ${limit} FOR UPDATE SKIP LOCKED
      ), lapsed AS MATERIALIZED (
        SELECT id, priority, run_at FROM ${jobs} WHERE queue = $3 AND state = 'claimed' AND claimed_until <= $1::bigint
          AND NOT (SELECT limited FROM lim) ${exclude}
        ORDER BY priority DESC, run_at, id LIMIT ${limit} FOR UPDATE SKIP LOCKED
      ), backlog AS MATERIALIZED (
        SELECT count(*) >= ${DUE_BATCH} AS due_full FROM due
      ), picked AS MATERIALIZED (
        SELECT id FROM (SELECT * FROM pending UNION ALL SELECT * FROM due UNION ALL SELECT * FROM lapsed) AS c
        WHERE NOT (SELECT due_full FROM backlog)
        ORDER BY priority DESC, run_at, id LIMIT ${limit}
      ), promoted AS (
        UPDATE ${jobs} SET state = 'pending'
        WHERE queue = $3 AND state = 'scheduled' AND run_at <= (SELECT max(run_at) FROM due)
          AND id = ANY (ARRAY(SELECT id FROM due WHERE id NOT IN (SELECT id FROM picked))) RETURNING 1
      )`
  // Which rows the claim writes: `picked`'s, found by primary key. A claim of one says so as an equality
  // with a scalar subquery, which every plan serves from the primary key; a batch joins `picked` on it and
  // also names the ids as an array, so the planner can take either the join's probes or the array's.
  // (`id = ANY (ARRAY(…))` alone is costed as ten ids, and against a table costed as ten pages — never
  // analyzed, nearly empty — a sequential scan wins; such a plan ran on as the backlog grew.)
  const claimedRows = (limit: "$4" | "1") =>
    limit === "1"
      ? "WHERE j.id = (SELECT id FROM picked)"
      : "FROM picked WHERE j.id = picked.id AND j.id = ANY (ARRAY(SELECT id FROM picked))"
  // One statement, one round trip (autocommit outside a transaction: one commit):
  // the claim's CTEs (below) then the claim's writes.
  // (A single row of NULL job columns when nothing was claimed, so `limited` always comes back.)
  const claimOf = (limit: "$4" | "1") => `WITH ${claimCtes("", limit)}, claimed AS (
        ${claimSet} ${claimedRows(limit)}
        RETURNING ${jobColumns("j")}, ${lapsedColumn}
      )
      SELECT c.*, lim.limited, (SELECT due_full FROM backlog) AS backlog FROM lim LEFT JOIN claimed AS c ON true`
  // A worker's step between two jobs, one statement (one round trip, one commit): the fenced ack
  // of job $5 under claim token $6 (exactly `ack`: deleted only while claimed under that token), then
  // the claim above. All CTEs see one snapshot, in which the acked row is `claimed`: never a pending
  // or due candidate, and excluded from the lapsed ones by id (its lease may have lapsed while the
  // token is still its own), so no row is both deleted and claimed. One row per claimed job, or a
  // single row of NULL job columns when none was; `acked` (0 or 1) on every row.
  const ackAndClaimOf = (limit: "$4" | "1") => `WITH done AS (
        DELETE FROM ${jobs} WHERE ${fencedRow("$5", "$6")} RETURNING id
      ), ${claimCtes("AND id <> $5::bigint", limit)}, claimed AS (
        ${claimSet} ${claimedRows(limit)}
        RETURNING ${jobColumns("j")}, ${lapsedColumn}
      )
      SELECT (SELECT count(*) FROM done) AS acked, lim.limited, (SELECT due_full FROM backlog) AS backlog, c.*
      FROM lim LEFT JOIN claimed AS c ON true`
  const insertColumns =
    `(queue, payload, state, priority, run_at, max_attempts, visibility_timeout, backoff_base, expires_at, idempotency_key,
      created_at, trace_context, group_key, flow_round)`
  const values = `($1::text, $2::text::json, $3::text, $4::bigint, $5::bigint, $6::bigint, $7::bigint, $8::bigint,
      $9::bigint, $10::text, $11::bigint, $12::text, $13::text, ${flowRoundOf(s, "$1::text", "$13::text", "$4::bigint")})`
  return {
    insert: `WITH w AS (INSERT INTO ${jobs} ${insertColumns} VALUES ${values} RETURNING id, queue AS topic)
      SELECT w.id, ${n.tail(14)} FROM w`,
    // Inserted only while no live job holds the key: a row of VALUES takes its id from the sequence before the
    // key's conflict is found, so every deduplicated enqueue burnt one (Admin's `lastJobId`, read from the
    // sequence, counted it as enqueued). ON CONFLICT stays for a holder committed meanwhile.
    insertKeyed: `WITH w AS (INSERT INTO ${jobs} ${insertColumns} SELECT ${values.slice(1, -1)}
        WHERE NOT EXISTS (SELECT 1 FROM ${jobs} WHERE queue = $1::text AND idempotency_key = $10::text AND state <> 'dead')
        ON CONFLICT DO NOTHING RETURNING id, queue AS topic)
      SELECT w.id, ${n.tail(14)} FROM w`,
    // Many rows in one statement; identities are assigned in ordinality order. The statement reads the table as
    // it was before it, so a group's k-th row here (from 0) takes k + max over the group's rows up to it of
    // (its priority's round − its place): one more than the row before it, and no earlier than its own
    // priority's rotation (rows of one group may differ in priority: a scheduler tick's), in enqueue order.
    insertMany: `WITH w AS (INSERT INTO ${jobs} ${insertColumns}
        SELECT v.queue, v.payload::json, v.state, v.priority, v.run_at, v.max_attempts, v.visibility_timeout,
          v.backoff_base, v.expires_at, NULL, v.created_at, v.trace_context, v.group_key,
          v.k + max(v.base - v.k) OVER (PARTITION BY v.queue, v.group_key ORDER BY v.ord ROWS UNBOUNDED PRECEDING)
        FROM (
          SELECT u.*, ${flowRoundOf(s, "u.queue", "u.group_key", "u.priority")} AS base,
            row_number() OVER (PARTITION BY u.queue, u.group_key ORDER BY u.ord) - 1 AS k
          FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[],
            $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], $12::text[]) WITH ORDINALITY
            AS u(queue, payload, state, priority, run_at, max_attempts, visibility_timeout, backoff_base, expires_at,
              created_at, trace_context, group_key, ord)
        ) AS v
        ORDER BY v.ord
        RETURNING id, queue AS topic)
      SELECT w.id, ${n.tail(13)} FROM w`,
    // A batch whose jobs differ in their payloads alone (one `enqueueBatch`): the shared values bound once as
    // scalars and one array of payloads ($2), the group's round read once (its jobs take consecutive ones).
    // Against `insertMany`: one array to encode and unnest instead of twelve, one limits probe instead of one
    // per row, no window.
    insertShared: `WITH base AS (SELECT ${flowRoundOf(s, "$1::text", "$11::text", "$4::bigint")} AS round),
      w AS (INSERT INTO ${jobs} ${insertColumns}
        SELECT $1::text, u.payload::json, $3::text, $4::bigint, $5::bigint, $6::bigint, $7::bigint, $8::bigint,
          $9::bigint, NULL, $10::bigint, $12::text, $11::text, (SELECT round FROM base) + (u.ord - 1)
        FROM unnest($2::text[]) WITH ORDINALITY AS u(payload, ord)
        ORDER BY u.ord
        RETURNING id, queue AS topic)
      SELECT w.id, ${n.tail(13)} FROM w`,
    liveKey: `SELECT id FROM ${jobs} WHERE queue = $1 AND idempotency_key = $2 AND state <> 'dead'`,
    // The key's holder, swept to dead if it has expired ($1 now, $2 the queue, $3 the key).
    expireKeyHolder: `${sweepKeyHolder} WHERE queue = $2 AND idempotency_key = $3 AND ${keyHolderGone} RETURNING id, last_error`,
    claim: claimOf("$4"),
    claimOne: claimOf("1"),
    ackAndClaim: ackAndClaimOf("$4"),
    ackAndClaimOne: ackAndClaimOf("1"),
    // Each probe is a scalar subquery ordered as its partial index is, so the planner walks that index
    // (an EXISTS drops the order, and may then scan the table for the first match).
    anyClaimable: `SELECT (SELECT id FROM ${jobs} WHERE queue = $1 AND state = 'pending'
          ORDER BY priority DESC, run_at, id LIMIT 1) IS NOT NULL
        OR (SELECT id FROM ${jobs} WHERE queue = $1 AND state = 'scheduled' AND run_at <= $2::bigint
          ORDER BY run_at LIMIT 1) IS NOT NULL
        OR (SELECT id FROM ${jobs} WHERE queue = $1 AND state = 'claimed' AND claimed_until <= $2::bigint
          ORDER BY claimed_until LIMIT 1) IS NOT NULL AS any`,
    nextDeadline: `SELECT LEAST(
        (SELECT min(run_at) FROM ${jobs} WHERE queue = $1 AND state = 'scheduled' AND run_at > $2::bigint),
        (SELECT min(claimed_until) FROM ${jobs} WHERE queue = $1 AND state = 'claimed' AND claimed_until > $2::bigint)
      ) AS at`,
    ack: `DELETE FROM ${jobs} WHERE ${fencedRow("$1", "$2")} RETURNING id`,
    // A death, a cancel and an ack of many free slots of a queue with limits: they tell other processes in the
    // statement itself (sent on commit), so a caller cut off before the answer leaves no waiter uninformed.
    ackMany: `WITH w AS (DELETE FROM ${jobs} AS j USING unnest($1::bigint[], $2::bigint[]) AS f(id, token)
        WHERE j.id = f.id AND j.claim_token = f.token AND (j.state || '') = 'claimed'
        RETURNING j.id, j.claim_token, j.queue AS topic)
      SELECT w.id, w.claim_token, ${tellIfLimited(3)} FROM w`,
    retry: `WITH w AS (UPDATE ${jobs}
        SET state = CASE WHEN $1::bigint > $2::bigint THEN 'scheduled' ELSE 'pending' END, run_at = $1::bigint,
          last_error = coalesce($3::text, last_error), claimed_until = NULL, worker_id = NULL
        WHERE ${fencedRow("$4", "$5")} RETURNING id, queue AS topic)
      SELECT w.id, ${n.tail(6)} FROM w`,
    bury: `WITH w AS (UPDATE ${jobs}
        SET state = 'dead', died_at = $1::bigint, last_error = coalesce($2::text, last_error), claimed_until = NULL,
          worker_id = NULL
        WHERE ${fencedRow("$3", "$4")} RETURNING id, queue AS topic)
      SELECT w.id, ${tellIfLimited(5)} FROM w`,
    heartbeat: `UPDATE ${jobs} SET claimed_until = $1::bigint
      WHERE ${fencedRow("$2", "$3")} RETURNING id`,
    keepAlive: `UPDATE ${jobs} SET claimed_until = greatest(claimed_until, $1::bigint)
      WHERE ${fencedRow("$2", "$3")} RETURNING id`,
    release: `WITH w AS (UPDATE ${jobs}
        SET state = 'pending', attempts = greatest(attempts - 1, 0), claimed_until = NULL, worker_id = NULL
        WHERE ${fencedRow("$1", "$2")} RETURNING id, queue AS topic)
      SELECT w.id, ${n.tail(3)} FROM w`,
    get: `SELECT ${columns} FROM ${jobs} WHERE id = $1::bigint AND queue = $2`,
    cancel: `WITH w AS (DELETE FROM ${jobs} WHERE id = $1::bigint AND queue = $2 AND state <> 'dead' RETURNING id, queue AS topic)
      SELECT w.id, ${tellIfLimited(3)} FROM w`,
    stats: `SELECT
        (SELECT count(*) FROM ${jobs} WHERE queue = $1 AND state = 'pending') AS pending,
        (SELECT count(*) FROM ${jobs} WHERE queue = $1 AND state = 'scheduled' AND run_at <= $2::bigint) AS due_scheduled,
        (SELECT count(*) FROM ${jobs} WHERE queue = $1 AND state = 'scheduled' AND run_at > $2::bigint) AS scheduled,
        (SELECT count(*) FROM ${jobs} WHERE queue = $1 AND state = 'claimed') AS claimed,
        (SELECT count(*) FROM ${jobs} WHERE queue = $1 AND state = 'dead') AS dead,
        (SELECT min(run_at) FROM ${jobs} WHERE queue = $1 AND state = 'pending') AS oldest_pending,
        (SELECT min(run_at) FROM ${jobs} WHERE queue = $1 AND state = 'scheduled' AND run_at <= $2::bigint) AS oldest_due`,
    dead: `SELECT ${columns} FROM ${jobs} WHERE queue = $1 AND state = 'dead' ORDER BY died_at DESC, id DESC LIMIT $2`,
    // A requeued job whose key a live job took meanwhile stays dead (the key names one live job),
    // unless that holder has expired: swept first ($1 now, $2 the queue, $3 the dead job's id).
    requeueExpireHolder: `${sweepKeyHolder} WHERE queue = $2 AND idempotency_key = (
        SELECT idempotency_key FROM ${jobs} WHERE id = $3::bigint AND queue = $2 AND state = 'dead')
        AND ${keyHolderGone} RETURNING id, last_error`,
    // The expiry is cleared: an operator asked for this job to run (docs/queues-and-locks.md).
    requeueDead: `WITH w AS (UPDATE ${jobs} AS d
        SET state = 'pending', run_at = $1::bigint, attempts = 0, died_at = NULL, claimed_until = NULL, worker_id = NULL,
          expires_at = NULL
        WHERE d.id = $3::bigint AND d.queue = $2 AND d.state = 'dead'
          AND (d.idempotency_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM ${jobs} AS live WHERE live.queue = d.queue
              AND live.idempotency_key = d.idempotency_key AND live.state <> 'dead'))
        RETURNING d.id, d.queue AS topic)
      SELECT w.id, ${n.tail(4)} FROM w`,
    // `purgeDead`'s rounds ($2 rows at most), as maintenance's purge below.
    purgeDead: plannedEachCall(`WITH d AS (DELETE FROM ${jobs} USING (
          SELECT ctid AS c FROM ${jobs} WHERE queue = $1 AND state = 'dead' LIMIT $2::bigint) picked
        WHERE ctid = picked.c AND queue = $1 AND state = 'dead' RETURNING 1)
      SELECT count(*) AS n FROM d`),
    purgeDeadBefore: plannedEachCall(`WITH d AS (DELETE FROM ${jobs} USING (
          SELECT ctid AS c FROM ${jobs} WHERE queue = $1 AND state = 'dead' AND died_at < $3::bigint LIMIT $2::bigint) picked
        WHERE ctid = picked.c AND queue = $1 AND state = 'dead' AND died_at < $3::bigint RETURNING 1)
      SELECT count(*) AS n FROM d`),
    // Maintenance's rounds: at most $2 rows each, found by their index and then visited by their tuple
    // ids, joined, and planned on each call (preparedStatements.ts, `plannedEachCall`): as a filter,
    // `ctid = ANY (…)`, a plan made while the table was small checked every row of the dead index against
    // the whole array (16 s for a round of 100 000). The outer condition repeats the inner one, so a row
    // that changed while the statement waited for it (a claim, a requeue) is re-checked and left alone;
    // the swept rows' queues are for the metrics.
    expireSome: plannedEachCall(`WITH d AS (${sweepExpired}
        FROM (SELECT ctid AS c FROM ${jobs} WHERE ${expiredAt} LIMIT $2::bigint) picked
        WHERE ctid = picked.c AND ${expiredAt}
        RETURNING queue)
      SELECT queue, count(*) AS n FROM d GROUP BY queue`),
    // The claim logs (flow control) of scopes whose last claim left the window of the rule in force
    // ($1 now; at most $2 scopes, counted; a scope whose rate the rule no longer has, at once): a claim prunes
    // only its own scope, and a group that never claims again (a user, an order) kept its entries for good.
    pruneFlowLog: `WITH stale AS (
        SELECT f.queue, f.scope FROM ${s}.__alkstore_flow_log AS f JOIN ${s}.__alkstore_flow_limits AS l ON l.queue = f.queue
        GROUP BY f.queue, f.scope
        HAVING max(f.at) <= $1::bigint - coalesce(max(CASE WHEN f.scope = '' THEN l.rate_per ELSE l.group_rate_per END), 0)
        LIMIT $2::bigint
      ), pruned AS (DELETE FROM ${s}.__alkstore_flow_log WHERE (queue, scope) IN (SELECT queue, scope FROM stale))
      SELECT count(*) AS n FROM stale`,
    purgeSomeDeadBefore: plannedEachCall(`WITH d AS (DELETE FROM ${jobs} USING (
          SELECT ctid AS c FROM ${jobs} WHERE state = 'dead' AND died_at < $1::bigint LIMIT $2::bigint) picked
        WHERE ctid = picked.c AND state = 'dead' AND died_at < $1::bigint RETURNING 1)
      SELECT count(*) AS n FROM d`)
  } as const
}
