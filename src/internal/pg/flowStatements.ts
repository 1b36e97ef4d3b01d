import { claimSetOf, fencedRow } from "./claimSql.js"
import { jobColumns } from "./rows.js"

/**
 * Flow control's SQL on PostgreSQL (docs/flow-control.md; used by flowStorage.ts).
 *
 * A limited claim is optimistic first: one autocommit statement reads the
 * limits row with its version (`xmin`: every claim that takes a job rewrites
 * the row, so a new version means a claim committed), everything the walk
 * needs before its first candidate and each first-page group's start; the
 * walk decides in JavaScript; the claim statement then takes the row
 * `FOR UPDATE` only while its version is still the one read, and claims
 * the job in the same statement. A claim that finds the version moved took
 * nothing, and the claim runs again the locked way: a transaction that takes
 * the row `FOR UPDATE` first, so limited claims of one queue serialise there
 * across every host and each later statement reads a snapshot taken after
 * the previous holder committed.
 */
export const flowStatements = (s: string) => {
  const jobs = `${s}.__alkstore_jobs`
  const limits = `${s}.__alkstore_flow_limits`
  const log = `${s}.__alkstore_flow_log`
  const candidate = `id, priority, flow_round AS round, run_at, group_key, state`
  // The pending pages read the flow index alone (an index-only scan: it holds every column named here).
  const pendingCandidate = `id, priority, flow_round AS round, run_at, group_key, 'pending' AS state`
  const order = `ORDER BY priority DESC, flow_round, run_at, id`
  const pending = `queue = $1 AND state = 'pending' AND flow_round IS NOT NULL`
  const limitsColumns = `concurrency, rate_limit, rate_per, group_concurrency, group_rate_limit, group_rate_per, current_round`
  // Candidates as one JSON text (one round trip for several lists; decoded with `toCandidate`).
  const asJson = (select: string, orderBy = "") =>
    `(SELECT coalesce(json_agg(c${orderBy === "" ? "" : ` ${orderBy.replace(/flow_round/g, "round")}`}), '[]')::text FROM (${select}) AS c)`
  const claimedOk = `EXISTS (SELECT 1 FROM claimed WHERE claimed.state = 'claimed')`
  // The reads before the first candidate ($1 queue, $2 now; `limit`, `limited` and `scheduledCap` name the
  // columns or parameters that say what to read).
  const inFlight = (asked: string) =>
    `CASE WHEN ${asked} THEN (SELECT count(*) FROM ${jobs} WHERE queue = $1 AND state = 'claimed'
      AND claimed_until > $2::bigint) ELSE 0 END AS in_flight`
  const queueLast = (asked: string) =>
    `CASE WHEN ${asked} THEN (SELECT coalesce(max(seq), 0) FROM ${log} WHERE queue = $1 AND scope = '') ELSE 0 END
      AS queue_last`
  const lapsed = asJson(`SELECT ${candidate} FROM ${jobs} WHERE queue = $1 AND state = 'claimed'
    AND claimed_until <= $2::bigint AND flow_round IS NOT NULL LIMIT 1000`) + " AS lapsed"
  const due = (cap: string) =>
    `CASE WHEN ${cap} > 0 THEN ${asJson(`SELECT ${candidate} FROM ${jobs} WHERE queue = $1 AND state = 'scheduled'
      AND run_at <= $2::bigint AND flow_round IS NOT NULL LIMIT ${cap}`)} ELSE '[]' END AS due`
  // A group as the walk first meets it: `g` the candidate (group_key, round, id), `cap` the group
  // concurrency or NULL, `logged` whether to read its log.
  const groupColumns = (cap: string, logged: string, group: string, round: string, id: string) =>
    `CASE WHEN ${cap} IS NULL THEN 0 ELSE (SELECT count(*) FROM ${jobs} WHERE queue = $1 AND group_key = ${group}
        AND state = 'claimed' AND flow_round IS NOT NULL AND claimed_until > $2::bigint) END AS in_flight,
      CASE WHEN ${cap} IS NULL THEN 0 ELSE (SELECT count(*) FROM (SELECT 1 FROM ${jobs} WHERE queue = $1
        AND group_key = ${group} AND state <> 'dead' AND flow_round IS NOT NULL AND (flow_round, id) < (${round}, ${id})
        LIMIT ${cap}) AS ahead) END AS ahead,
      CASE WHEN ${logged} THEN (SELECT coalesce(max(seq), 0) FROM ${log} WHERE queue = $1 AND scope = '#' || ${group})
        ELSE 0 END AS last`
  return {
    limits: `SELECT ${limitsColumns} FROM ${limits} WHERE queue = $1`,
    lockRow: `SELECT queue FROM ${limits} WHERE queue = $1 FOR UPDATE`,
    /**
     * The optimistic claim's (and a read-only walk's) one read ($1 queue, $2 now, $3 promote due
     * scheduled rows, $4 the first page's size, $5 due scheduled rows to read): the limits row and
     * its version, the walk's start, and the start of each group of the first page (its first
     * candidate there). Rows it promotes are not in its own snapshot: the caller reads the start
     * again when it promoted any.
     */
    readAhead: `WITH l AS (SELECT ${limitsColumns}, xmin::text AS version FROM ${limits} WHERE queue = $1),
      promoted AS (UPDATE ${jobs} SET state = 'pending' WHERE $3::boolean AND queue = $1 AND state = 'scheduled'
        AND run_at <= $2::bigint AND EXISTS (SELECT 1 FROM l) RETURNING 1),
      page AS (SELECT ${pendingCandidate} FROM ${jobs} WHERE ${pending} ${order} LIMIT $4::bigint)
      SELECT l.*, (SELECT count(*) FROM promoted) AS promoted,
        ${inFlight("l.concurrency IS NOT NULL")}, ${queueLast("l.rate_limit IS NOT NULL")}, ${lapsed},
        ${due("$5::bigint")},
        (SELECT coalesce(json_agg(p ORDER BY priority DESC, round, run_at, id), '[]')::text FROM page AS p) AS page,
        CASE WHEN l.group_concurrency IS NULL AND l.group_rate_limit IS NULL THEN '[]' ELSE
          (SELECT coalesce(json_agg(g), '[]')::text FROM (
            SELECT f.id, ${groupColumns("l.group_concurrency", "l.group_rate_limit IS NOT NULL", "f.group_key", "f.round", "f.id")}
            FROM (SELECT DISTINCT ON (group_key) * FROM page ORDER BY group_key, priority DESC, round, run_at, id) AS f
          ) AS g) END AS groups
      FROM l`,
    // The locked claim's first statement: its queue's limited claims serialise on this row lock. Due
    // scheduled rows are promoted in the same statement (what this claim's snapshot shows; a row
    // committed while it waited for the lock is promoted by the next claim).
    lockLimits: `WITH l AS (SELECT ${limitsColumns} FROM ${limits} WHERE queue = $1 FOR UPDATE),
      promoted AS (UPDATE ${jobs} SET state = 'pending' WHERE queue = $1 AND state = 'scheduled' AND run_at <= $2::bigint
        AND EXISTS (SELECT 1 FROM l))
      SELECT * FROM l`,
    // What the walk needs before its first candidate, in one round trip ($1 queue, $2 now; $3 count the
    // live claims, $4 read the queue's log, $5 due scheduled rows to read, $6 the first page's size).
    start: `SELECT ${inFlight("$3::boolean")}, ${queueLast("$4::boolean")}, ${lapsed}, ${due("$5::bigint")},
        ${asJson(`SELECT ${pendingCandidate} FROM ${jobs} WHERE ${pending} ${order} LIMIT $6::bigint`, order)} AS page`,
    // The next page after ($2 priority, $3 round, $4 run_at, $5 id), $6 rows: the rest of this priority, then lower ones.
    pendingAfter: `SELECT * FROM (
        (SELECT ${pendingCandidate} FROM ${jobs} WHERE ${pending} AND priority = $2::bigint
          AND (flow_round, run_at, id) > ($3::bigint, $4::bigint, $5::bigint) ${order} LIMIT $6::bigint)
        UNION ALL
        (SELECT ${pendingCandidate} FROM ${jobs} WHERE ${pending} AND priority < $2::bigint ${order} LIMIT $6::bigint)
      ) AS p ORDER BY priority DESC, round, run_at, id LIMIT $6::bigint`,
    // A group as the walk first meets it ($1 queue, $2 now, $3 group, $4/$5 the candidate's round and id,
    // $6 the cap or NULL, $7 read its log).
    groupStart: `SELECT ${groupColumns("$6::bigint", "$7::boolean", "$3::text", "$4::bigint", "$5::bigint")}`,
    groupAhead: `SELECT count(*) AS n FROM (SELECT 1 FROM ${jobs} WHERE queue = $1 AND group_key = $2 AND state <> 'dead'
      AND flow_round IS NOT NULL AND (flow_round, id) < ($3::bigint, $4::bigint) LIMIT $5) AS ahead`,
    logAt: `SELECT at FROM ${log} WHERE queue = $1 AND scope = $2 AND seq = $3::bigint`,
    /**
     * The claim and, only when it took the job, its log entries ($5 scopes, $6 sequence numbers) and
     * the queue's round ($7, NULL: unchanged), in one round trip. The limits row is taken `FOR UPDATE`
     * first: when $8 is a version, only while the row still is that version (a claim of another
     * process committed since moves it: then nothing is claimed and `gated` is false); a claim that
     * takes its job always rewrites the row, so its version moves (`version`, the new one).
     */
    claim: `WITH gate AS (
        SELECT 1 FROM ${limits} WHERE queue = $4 AND ($8::text IS NULL OR xmin::text = $8::text) FOR UPDATE
      ), claimed AS (
        ${claimSetOf(jobs)} WHERE j.id = $3::bigint
          AND (j.state = 'pending' OR (j.state = 'claimed' AND j.claimed_until <= $1::bigint))
          AND EXISTS (SELECT 1 FROM gate)
        RETURNING ${jobColumns("j")}
      ), logged AS (
        INSERT INTO ${log} (queue, scope, seq, at)
        SELECT $4, e.scope, e.seq, $1::bigint FROM unnest($5::text[], $6::bigint[]) AS e(scope, seq) WHERE ${claimedOk}
      ), advanced AS (
        UPDATE ${limits} SET current_round = greatest(current_round, coalesce($7::bigint, current_round))
        WHERE queue = $4 AND ${claimedOk} RETURNING xmin::text AS version
      )
      SELECT EXISTS (SELECT 1 FROM gate) AS gated, (SELECT version FROM advanced) AS version, c.*
      FROM (SELECT 1 AS one) AS one LEFT JOIN claimed AS c ON true`,
    prune: `DELETE FROM ${log} WHERE queue = $1 AND scope = $2 AND seq <= $3::bigint AND at <= $4::bigint`,
    // Jobs inserted by transactions still open when a queue first gets limits must be numbered too:
    // the lock waits them out (and holds new writers back) while the backlog is numbered.
    lockJobs: `LOCK TABLE ${jobs} IN SHARE ROW EXCLUSIVE MODE`,
    insertLimits: `INSERT INTO ${limits}
        (queue, concurrency, rate_limit, rate_per, group_concurrency, group_rate_limit, group_rate_per, current_round,
         updated_at)
      VALUES ($1, $2::bigint, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::bigint, 0, $8::bigint)`,
    // (A new version of the row: an optimistic claim that read the old limits claims nothing.)
    updateLimits: `UPDATE ${limits} SET concurrency = $2::bigint, rate_limit = $3::bigint, rate_per = $4::bigint,
        group_concurrency = $5::bigint, group_rate_limit = $6::bigint, group_rate_per = $7::bigint, updated_at = $8::bigint
      WHERE queue = $1`,
    numberRounds: `UPDATE ${jobs} AS j SET flow_round = r.n FROM (
        SELECT id, row_number() OVER (PARTITION BY group_key ORDER BY id) - 1 AS n FROM ${jobs} WHERE queue = $1
      ) AS r WHERE j.id = r.id`,
    deleteLimits: `DELETE FROM ${limits} WHERE queue = $1 RETURNING queue`,
    deleteLog: `DELETE FROM ${log} WHERE queue = $1`,
    forgetRounds: `UPDATE ${jobs} SET flow_round = NULL WHERE queue = $1 AND flow_round IS NOT NULL`,
    notify: `SELECT pg_notify($1::text, CASE WHEN octet_length($2::text) < 7900 THEN $2::text ELSE '*' END)`,
    // The ack of a job of a limited queue with its `notify` ($3 channel, $4 queue), sent only when it acked.
    ackFreeing: `WITH acked AS (DELETE FROM ${jobs} WHERE ${fencedRow("$1", "$2")} RETURNING id)
      SELECT acked.id, (SELECT pg_notify($3::text, CASE WHEN octet_length($4::text) < 7900 THEN $4::text ELSE '*' END))::text
        AS told
      FROM acked`
  } as const
}
