import { EXTRA_PAGE, ROUND_STEP } from "../flow.js"
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
/**
 * A limited queue's pending rows, as `__alkstore_jobs_flow`'s predicate says it (migration 7). `COLLATE "C"`
 * changes nothing an equality sees (the database's collations are deterministic), but the planner cannot
 * prove `state = 'pending'` from it, so the plain pending index is no candidate for the flow reads: before
 * the first `ANALYZE` of a fresh backlog the planner estimated one due row, found that index and a sort as
 * cheap as the flow index, and sorted every due job of the queue at each claim (measured: 20 000 due jobs,
 * 5–7 ms a claim against 0.05 ms, a limited claim+ack 5–8× the unlimited one in wall time).
 */
export const flowPending = `state COLLATE "C" = 'pending' AND flow_round IS NOT NULL`

export const flowStatements = (s: string) => {
  const jobs = `${s}.__alkstore_jobs`
  const limits = `${s}.__alkstore_flow_limits`
  const log = `${s}.__alkstore_flow_log`
  const candidate = `id, priority, flow_round AS round, run_at, group_key, state`
  // The pending pages read the flow index alone (an index-only scan: it holds every column named here).
  const pendingCandidate = `id, priority, flow_round AS round, run_at, group_key, 'pending' AS state`
  const order = `ORDER BY priority DESC, flow_round, run_at, id`
  const pending = `queue = $1 AND ${flowPending}`
  const limitsColumns = `concurrency, rate_limit, rate_per, group_concurrency, group_rate_limit, group_rate_per, current_round`
  // Candidates as one JSON text (one round trip for several lists; decoded with `toCandidate`).
  const asJson = (select: string, orderBy = "") =>
    `(SELECT coalesce(json_agg(c${orderBy === "" ? "" : ` ${orderBy.replace(/flow_round/g, "round")}`}), '[]')::text FROM (${select}) AS c)`
  const claimedOk = `EXISTS (SELECT 1 FROM claimed WHERE claimed.state = 'claimed')`
  // The reads before the first candidate (`q` the queue's parameter, `t` the instant's; `asked` and `cap` name
  // the columns or parameters that say what to read).
  const inFlight = (asked: string, q = "$1", t = "$2::bigint") =>
    `CASE WHEN ${asked} THEN (SELECT count(*) FROM ${jobs} WHERE queue = ${q} AND state = 'claimed'
      AND claimed_until > ${t}) ELSE 0 END AS in_flight`
  const queueLast = (asked: string, q = "$1") =>
    `CASE WHEN ${asked} THEN (SELECT coalesce(max(seq), 0) FROM ${log} WHERE queue = ${q} AND scope = '') ELSE 0 END
      AS queue_last`
  // The lapsed claims and due scheduled rows in walk order, `EXTRA_PAGE` at a time (the walk reads the next
  // page after its last row with `lapsedAfter` / `dueAfter`). Rare rows, sorted.
  const lapsedRows = (q: string, t: string, after = "") =>
    `SELECT ${candidate}, (attempts >= max_attempts OR coalesce(expires_at <= ${t}, false)) AS doomed
    FROM ${jobs} WHERE queue = ${q} AND state = 'claimed'
    AND claimed_until <= ${t} AND flow_round IS NOT NULL${after} ${order} LIMIT ${EXTRA_PAGE}`
  const lapsed = (q = "$1", t = "$2::bigint") => asJson(lapsedRows(q, t), order) + " AS lapsed"
  const dueRows = (cap: string, after = "") =>
    `SELECT ${candidate} FROM ${jobs} WHERE queue = $1 AND state = 'scheduled'
      AND run_at <= $2::bigint AND flow_round IS NOT NULL${after} ${order} LIMIT ${cap}`
  const due = (cap: string) => `CASE WHEN ${cap} > 0 THEN ${asJson(dueRows(cap), order)} ELSE '[]' END AS due`
  // After the candidate ($3 priority, $4 round, $5 run_at, $6 id), in walk order.
  const afterCandidate = ` AND (-priority, flow_round, run_at, id) > (-$3::bigint, $4::bigint, $5::bigint, $6::bigint)`
  // A group as the walk first meets it: `g` the candidate (group_key, round, id), `cap` the group
  // concurrency or NULL, `logged` whether to read its log. The live jobs ahead are read in the order of
  // `__alkstore_jobs_flow_group`: without the ORDER BY the planner, seeing most of the queue in one group,
  // costs a sequential scan stopping at the first match as cheap, and with none ahead (the common case)
  // that scan reads the whole queue (measured: 3.9 ms a claim, one group of 20 000 jobs, after ANALYZE).
  const groupColumns = (
    cap: string,
    logged: string,
    group: string,
    round: string,
    id: string,
    q = "$1",
    t = "$2::bigint",
    prefix = ""
  ) =>
    `CASE WHEN ${cap} IS NULL THEN 0 ELSE (SELECT count(*) FROM ${jobs} WHERE queue = ${q} AND group_key = ${group}
        AND state = 'claimed' AND flow_round IS NOT NULL AND claimed_until > ${t}) END AS ${prefix}in_flight,
      CASE WHEN ${cap} IS NULL THEN 0 ELSE (SELECT count(*) FROM (SELECT 1 FROM ${jobs} WHERE queue = ${q}
        AND group_key = ${group} AND state <> 'dead' AND flow_round IS NOT NULL AND (flow_round, id) < (${round}, ${id})
        ORDER BY flow_round, id LIMIT ${cap}) AS ahead) END AS ${prefix}ahead,
      CASE WHEN ${logged} THEN (SELECT coalesce(max(seq), 0) FROM ${log} WHERE queue = ${q} AND scope = '#' || ${group})
        ELSE 0 END AS ${prefix}last`
  // The instant `logAt` answers for claim `seq` of `scope` (in the statement's snapshot: before its own writes).
  const logAtOf = (scope: string, seq: string, q: string) =>
    `(SELECT at FROM ${log} WHERE queue = ${q} AND scope = ${scope} AND seq >= ${seq} ORDER BY seq LIMIT 1)`
  // Whether a claim of scope `scope` whose log ends at `last` fits `limit` claims per `per` at `t` (flow.ts
  // `admits` for a walk's first claim: the claim `limit` places before it has left the window, or there is none;
  // a pruned one judged by the oldest claim logged after it, as `logAt`).
  const admitsFirst = (limit: string, per: string, scope: string, last: string, q: string, t: string) =>
    `(${limit} IS NULL OR ${last} + 1 - ${limit} <= 0 OR NOT EXISTS (SELECT 1 FROM (SELECT at FROM ${log}
      WHERE queue = ${q} AND scope = ${scope} AND seq >= ${last} + 1 - ${limit} ORDER BY seq LIMIT 1) AS e
      WHERE e.at > ${t} - ${per}))`
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
        ${inFlight("l.concurrency IS NOT NULL")}, ${queueLast("l.rate_limit IS NOT NULL")}, ${lapsed()},
        ${due("$5::bigint")},
        (SELECT coalesce(json_agg(p ORDER BY priority DESC, round, run_at, id), '[]')::text FROM page AS p) AS page,
        CASE WHEN l.group_concurrency IS NULL AND l.group_rate_limit IS NULL THEN '[]' ELSE
          (SELECT coalesce(json_agg(g), '[]')::text FROM (
            SELECT f.id, ${groupColumns("l.group_concurrency", "l.group_rate_limit IS NOT NULL", "f.group_key", "f.round", "f.id")}
            FROM (SELECT DISTINCT ON (group_key) * FROM page ORDER BY group_key, priority DESC, round, run_at, id) AS f
          ) AS g) END AS groups
      FROM l`,
    /**
     * A claim of one job in one round trip, no transaction ($1 now, $2 worker, $3 queue): the
     * read-ahead's reads (the limits row and its version, the walk's start, the head of the flow
     * index with its group's start) and, when that head is the walk's first candidate (no lapsed
     * lease, no due scheduled row to promote) and every limit admits it (flow.ts's rules for a
     * walk's first claim: `fast`), its claim with the bookkeeping the walk writes for it — gated,
     * as `claim` is, on the limits row `FOR UPDATE SKIP LOCKED` while it is still the version this
     * statement's snapshot read (`gated` false: another claim or a change of limits committed
     * meanwhile, or another transaction holds the row — never waited for, so this statement's `$1`
     * is the time of its claim; nothing was claimed). The
     * walk then runs on what was read and must claim exactly that job with exactly those writes
     * (flowStorage.ts checks it); when `fast` is false nothing was written or locked and the walk
     * goes on as after `readAhead` (its claims by `claim`). Due scheduled rows are not promoted here:
     * a statement that held their rows while it waited for the limits row could deadlock with a
     * locked claim promoting them (`lockLimits` takes the row first), so then `readAhead` runs.
     */
    claimFirst: `WITH l AS (SELECT ${limitsColumns}, xmin::text AS version FROM ${limits} WHERE queue = $3),
      head AS (SELECT ${pendingCandidate} FROM ${jobs} WHERE queue = $3 AND ${flowPending}
        ${order} LIMIT 1),
      s AS MATERIALIZED (
        SELECT l.*, EXISTS (SELECT 1 FROM ${jobs} WHERE queue = $3 AND state = 'scheduled' AND run_at <= $1::bigint) AS due_any,
          ${inFlight("l.concurrency IS NOT NULL", "$3", "$1::bigint")}, ${queueLast("l.rate_limit IS NOT NULL", "$3")},
          ${lapsed("$3", "$1::bigint")},
          h.id AS h_id, h.priority AS h_priority, h.round AS h_round, h.run_at AS h_run_at, h.group_key AS h_group,
          ${groupColumns("l.group_concurrency", "l.group_rate_limit IS NOT NULL", "h.group_key", "h.round", "h.id", "$3", "$1::bigint", "g_")}
        FROM l LEFT JOIN head AS h ON true
      ), ok AS MATERIALIZED (
        SELECT * FROM s WHERE NOT s.due_any AND s.lapsed = '[]' AND s.h_id IS NOT NULL
          AND (s.concurrency IS NULL OR s.in_flight < s.concurrency)
          AND (s.group_concurrency IS NULL OR (s.g_in_flight < s.group_concurrency AND s.g_ahead < s.group_concurrency))
          AND ${admitsFirst("s.group_rate_limit", "s.group_rate_per", "'#' || s.h_group", "s.g_last", "$3", "$1::bigint")}
          AND ${admitsFirst("s.rate_limit", "s.rate_per", "''", "s.queue_last", "$3", "$1::bigint")}
      ), gate AS (
        SELECT 1 FROM ${limits} WHERE queue = $3 AND xmin::text = (SELECT version FROM ok) FOR UPDATE SKIP LOCKED
      ), claimed AS (
        ${claimSetOf(jobs)} WHERE j.id = (SELECT h_id FROM ok)
          AND (j.state = 'pending' OR (j.state = 'claimed' AND j.claimed_until <= $1::bigint))
          AND EXISTS (SELECT 1 FROM gate)
        RETURNING ${jobColumns("j")}
      ), logged AS (
        INSERT INTO ${log} (queue, scope, seq, at)
        SELECT $3, e.scope, e.seq, $1::bigint FROM ok CROSS JOIN LATERAL (VALUES
          ('', ok.queue_last + 1, ok.rate_limit IS NOT NULL),
          ('#' || ok.h_group, ok.g_last + 1, ok.group_rate_limit IS NOT NULL)) AS e(scope, seq, wanted)
        WHERE e.wanted AND ${claimedOk}
      ), pruned AS (
        DELETE FROM ${log} AS x USING ok WHERE ${claimedOk} AND x.queue = $3 AND (
          (ok.rate_limit IS NOT NULL AND x.scope = '' AND x.seq <= ok.queue_last + 1 - ok.rate_limit
            AND x.at <= $1::bigint - ok.rate_per)
          OR (ok.group_rate_limit IS NOT NULL AND x.scope = '#' || ok.h_group AND x.seq <= ok.g_last + 1 - ok.group_rate_limit
            AND x.at <= $1::bigint - ok.group_rate_per))
      ), advanced AS (
        UPDATE ${limits} SET current_round = CASE WHEN (SELECT h_round FROM ok) >= current_round + ${ROUND_STEP}
          THEN (SELECT h_round FROM ok) ELSE current_round END
        WHERE queue = $3 AND ${claimedOk} RETURNING xmin::text AS version
      )
      SELECT s.*, EXISTS (SELECT 1 FROM ok) AS fast, EXISTS (SELECT 1 FROM gate) AS gated,
        (SELECT version FROM advanced) AS claimed_version,
        ${logAtOf("''", "s.queue_last + 1 - s.rate_limit", "$3")} AS rate_at,
        ${logAtOf("'#' || s.h_group", "s.g_last + 1 - s.group_rate_limit", "$3")} AS g_rate_at, c.*
      FROM s LEFT JOIN claimed AS c ON true`,
    // The locked claim's first statement: its queue's limited claims serialise on this row lock. Due
    // scheduled rows are promoted in the same statement (what this claim's snapshot shows; a row
    // committed while it waited for the lock is promoted by the next claim).
    lockLimits: `WITH l AS (SELECT ${limitsColumns} FROM ${limits} WHERE queue = $1 FOR UPDATE),
      promoted AS (UPDATE ${jobs} SET state = 'pending' WHERE queue = $1 AND state = 'scheduled' AND run_at <= $2::bigint
        AND EXISTS (SELECT 1 FROM l))
      SELECT * FROM l`,
    // What the walk needs before its first candidate, in one round trip ($1 queue, $2 now; $3 count the
    // live claims, $4 read the queue's log, $5 due scheduled rows to read, $6 the first page's size).
    start: `SELECT ${inFlight("$3::boolean")}, ${queueLast("$4::boolean")}, ${lapsed()}, ${due("$5::bigint")},
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
    // The next page of lapsed claims or due scheduled rows ($1 queue, $2 now, $3–$6 the page's last row).
    lapsedAfter: lapsedRows("$1", "$2::bigint", afterCandidate),
    dueAfter: dueRows(String(EXTRA_PAGE), afterCandidate),
    groupAhead: `SELECT count(*) AS n FROM (SELECT 1 FROM ${jobs} WHERE queue = $1 AND group_key = $2 AND state <> 'dead'
      AND flow_round IS NOT NULL AND (flow_round, id) < ($3::bigint, $4::bigint) ORDER BY flow_round, id LIMIT $5) AS ahead`,
    // Claim `seq`, or when it was pruned the oldest claim logged after it (flow.ts `logAt`).
    logAt: `SELECT at FROM ${log} WHERE queue = $1 AND scope = $2 AND seq >= $3::bigint ORDER BY seq LIMIT 1`,
    /**
     * The claim and, only when it took the job, its log entries ($5 scopes, $6 sequence numbers) and
     * the queue's round ($7, NULL: unchanged), in one round trip. The limits row is taken `FOR UPDATE`
     * first: when $8 is a version, only while the row still is that version and no other transaction
     * holds it (`SKIP LOCKED`: a claim of another process committed since, or still open, moves or
     * holds it: then nothing is claimed and `gated` is false); the locked walk holds the row already
     * (its own lock is never skipped). A claim that takes its job always rewrites the row, so its
     * version moves (`version`, the new one).
     */
    claim: `WITH gate AS (
        SELECT 1 FROM ${limits} WHERE queue = $4 AND ($8::text IS NULL OR xmin::text = $8::text) FOR UPDATE SKIP LOCKED
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
    // Live jobs numbered per group in enqueue order; dead jobs hold no place (round 0: requeued, a job goes to
    // the front of its group, as asked).
    numberRounds: `UPDATE ${jobs} AS j SET flow_round = r.n FROM (
        SELECT id, CASE WHEN state = 'dead' THEN 0
          ELSE row_number() OVER (PARTITION BY group_key, state = 'dead' ORDER BY id) - 1 END AS n
        FROM ${jobs} WHERE queue = $1
      ) AS r WHERE j.id = r.id`,
    deleteLimits: `DELETE FROM ${limits} WHERE queue = $1 RETURNING queue`,
    deleteLog: `DELETE FROM ${log} WHERE queue = $1`,
    forgetRounds: `UPDATE ${jobs} SET flow_round = NULL WHERE queue = $1 AND flow_round IS NOT NULL`,
    notify: `SELECT pg_notify($1::text, CASE WHEN octet_length($2::text) < 7900 THEN $2::text ELSE '*' END)`,
    notifyIfLimited: `SELECT pg_notify($1::text, CASE WHEN octet_length($2::text) < 7900 THEN $2::text ELSE '*' END)
      FROM ${limits} WHERE queue = $2::text`,
    // The ack of a job of a limited queue with its `notify` ($3 channel, $4 queue), sent only when it acked.
    ackFreeing: `WITH acked AS (DELETE FROM ${jobs} WHERE ${fencedRow("$1", "$2")} RETURNING id)
      SELECT acked.id, (SELECT pg_notify($3::text, CASE WHEN octet_length($4::text) < 7900 THEN $4::text ELSE '*' END))::text
        AS told
      FROM acked`
  } as const
}
