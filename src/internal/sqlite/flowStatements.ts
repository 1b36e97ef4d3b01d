import { EXTRA_PAGE } from "../flow.js"
import { byGroupState, liveInFlow, liveStates } from "./flowInsert.js"
import { byLiteral, claimSet, jobColumns, numbered } from "./queueStatements.js"

/**
 * Flow control's SQL on SQLite (docs/flow-control.md; run by flowStorage.ts).
 *
 * Page sizes and caps are written into the statements as literals, one
 * cached statement per value (a handful: the claim sizes up to 32, 128, 256,
 * each queue's group cap): a `LIMIT ?` makes SQLite re-plan the statement
 * every time it is bound (its planner reads the bound limit), which cost
 * the page read and the group's head check 3–4× their run time.
 */

const candidateColumns = `id, priority, flow_round AS round, run_at AS runAt, group_key AS "group", state`
// The pending pages read the flow index alone (it holds every column named here).
const pendingColumns = `id, priority, flow_round AS round, run_at AS runAt, group_key AS "group", 'pending' AS state`
const flowOrder = `ORDER BY priority DESC, flow_round, run_at, id`
const pendingWhere = `queue = +?1 AND state = 'pending' AND flow_round IS NOT NULL`
const limitsColumns = `concurrency, rate_limit AS rateLimit, rate_per AS ratePerMillis, group_concurrency AS groupConcurrency,
      group_rate_limit AS groupRateLimit, group_rate_per AS groupRatePerMillis, current_round AS currentRound`
/**
 * What the one-statement claim (`claimFirst`) must know of a queue's limits besides its `concurrency` (read
 * in the statement): its `groupConcurrency` and its rates as `[limit, per millis]`. Its key (`firstShapeKey`)
 * names one statement; the claim writes the log entries and prunes as the walk does with these values.
 */
export interface FirstShape {
  readonly cap: number | null
  readonly rate: readonly [number, number] | null
  readonly groupRate: readonly [number, number] | null
}
export const firstShapeKey = (l: {
  readonly groupConcurrency: number | null
  readonly rateLimit: number | null
  readonly ratePerMillis: number | null
  readonly groupRateLimit: number | null
  readonly groupRatePerMillis: number | null
}) => [l.groupConcurrency, l.rateLimit, l.ratePerMillis, l.groupRateLimit, l.groupRatePerMillis].map((v) => v ?? "").join(":")
const firstShapeOf = (key: string): FirstShape => {
  const [cap, rl, rp, grl, grp] = key.split(":").map((v) => (v === "" ? null : Number(v)))
  return {
    cap: cap ?? null,
    rate: rl == null || rp == null ? null : [rl, rp],
    groupRate: grl == null || grp == null ? null : [grl, grp]
  }
}

// A group's start (live claims, live jobs ahead up to the cap, its log's end), for a group, candidate and
// instant given as parameters or as a page row's columns (`groupStart`, `pendingHead`). Read from
// `__alkstore_jobs_flow_group` (migration 9: a limited queue's live jobs by group, state, round and id, with
// each claim's lease end), one range per state; its predicate is said in full so that it can serve.
// (`queue`: the statement's parameter for the queue, `+?1` unless said.)
const groupInFlightOf = (group: string, now: string, queue = "+?1") => `(SELECT count(*) FROM ${byGroupState}
    WHERE queue = ${queue} AND group_key = ${group} AND state = 'claimed' AND ${liveInFlow} AND claimed_until > ${now})`
const aheadIn = (state: string, cap: number, group: string, round: string, id: string, queue: string) =>
  `(SELECT count(*) FROM (SELECT 1 FROM ${byGroupState} WHERE queue = ${queue} AND group_key = ${group} AND state = '${state}'
    AND ${liveInFlow} AND (flow_round, id) < (${round}, ${id}) LIMIT ${cap}))`
const groupAheadOf = (cap: number, group = "+?2", round = "+?3", id = "+?4", queue = "+?1") =>
  `min(${cap}, ${liveStates.map((state) => aheadIn(state, cap, group, round, id, queue)).join(" + ")})`
/** The end of a scope's claim log (0: empty), the scope an SQL expression, the queue a parameter. */
const logLastOf = (scope: string, queue = "+?1") =>
  `(SELECT coalesce(max(seq), 0) FROM __alkstore_flow_log WHERE queue = ${queue} AND scope = ${scope})`
const groupLastOf = (group: string) => logLastOf(`'#' || ${group}`)

// Parameters in WHERE terms are written `+?`, as on the claim path (sqlite/queueStatements.ts `sql`):
// under STAT4 statistics a bare one is read by the planner, and the statement re-prepared at every bind.
export const flowSql = {
  limits: `SELECT ${limitsColumns} FROM __alkstore_flow_limits WHERE queue = +?`,
  /**
   * The readiness read of a claim under its write lock (`queueStatements.readiness`'s flags) with the
   * queue's limits on the same row: `limited` is 0 and the limits NULL for a queue without. With a
   * `concurrency`, also its live claims (the walk's first count), and with a `rate` the end of its claim
   * log, saving the start a statement each.
   */
  readiness: numbered(`SELECT EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = +?1 AND state = 'scheduled' AND run_at <= +?2) AS due,
      EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = +?1 AND state = 'claimed' AND claimed_until <= +?2) AS lapsed,
      l.queue IS NOT NULL AS limited, ${limitsColumns},
      CASE WHEN l.concurrency IS NOT NULL THEN (SELECT count(*) FROM __alkstore_jobs
        WHERE queue = +?1 AND state = 'claimed' AND claimed_until > +?2) END AS inFlight,
      CASE WHEN l.rate_limit IS NOT NULL THEN ${logLastOf("''")} END AS queueLast
    FROM (SELECT 1) LEFT JOIN __alkstore_flow_limits AS l ON l.queue = +?1`),
  inFlight: `SELECT count(*) AS n FROM __alkstore_jobs WHERE queue = +? AND state = 'claimed' AND claimed_until > +?`,
  pendingFirst: byLiteral((size: number) =>
    numbered(`SELECT ${pendingColumns} FROM __alkstore_jobs WHERE ${pendingWhere} ${flowOrder} LIMIT ${size}`)
  ),
  pendingSame: byLiteral((size: number) =>
    numbered(`SELECT ${pendingColumns} FROM __alkstore_jobs WHERE ${pendingWhere}
      AND priority = +?2 AND (flow_round, run_at, id) > (+?3, +?4, +?5) ${flowOrder} LIMIT ${size}`)
  ),
  pendingLower: byLiteral((size: number) =>
    numbered(`SELECT ${pendingColumns} FROM __alkstore_jobs WHERE ${pendingWhere} AND priority < +?2 ${flowOrder} LIMIT ${size}`)
  ),
  // The lapsed claims and due scheduled rows in walk order, `EXTRA_PAGE` at a time: the first page, and
  // the next after a candidate (`?3`–`?6` its priority, round, run_at and id). Rare rows, sorted.
  lapsed: numbered(`SELECT ${candidateColumns}, (attempts >= max_attempts OR (expires_at IS NOT NULL AND expires_at <= ?2)) AS doomed
    FROM __alkstore_jobs
    WHERE queue = +?1 AND state = 'claimed' AND claimed_until <= +?2 AND flow_round IS NOT NULL ${flowOrder} LIMIT ${EXTRA_PAGE}`),
  lapsedAfter: numbered(`SELECT ${candidateColumns}, (attempts >= max_attempts OR (expires_at IS NOT NULL AND expires_at <= ?2)) AS doomed
    FROM __alkstore_jobs
    WHERE queue = +?1 AND state = 'claimed' AND claimed_until <= +?2 AND flow_round IS NOT NULL
      AND (-priority, flow_round, run_at, id) > (-?3, +?4, +?5, +?6) ${flowOrder} LIMIT ${EXTRA_PAGE}`),
  dueScheduled: byLiteral((size: number) =>
    numbered(`SELECT ${candidateColumns} FROM __alkstore_jobs
      WHERE queue = +?1 AND state = 'scheduled' AND run_at <= +?2 AND flow_round IS NOT NULL ${flowOrder} LIMIT ${size}`)
  ),
  dueAfter: numbered(`SELECT ${candidateColumns} FROM __alkstore_jobs
    WHERE queue = +?1 AND state = 'scheduled' AND run_at <= +?2 AND flow_round IS NOT NULL
      AND (-priority, flow_round, run_at, id) > (-?3, +?4, +?5, +?6) ${flowOrder} LIMIT ${EXTRA_PAGE}`),
  // `?1` queue, `?2` group, `?3`/`?4` the candidate's round and id, `?5` now: one row, what the walk needs.
  groupStart: byLiteral((key: string) => {
    const [cap, log] = key.split(":")
    return numbered(`SELECT ${cap === "" ? "0" : groupInFlightOf("+?2", "+?5")} AS inFlight,
      ${cap === "" ? "0" : groupAheadOf(Number(cap))} AS ahead, ${log === "1" ? groupLastOf("?2") : "0"} AS last`)
  }),
  groupAhead: byLiteral((cap: number) => numbered(`SELECT ${groupAheadOf(cap)} AS n`)),
  // A claim of one job's first page (`?1` queue, `?2` now) with its group's start, one statement for two:
  // the walk asks for that group's start next (the same reads as `groupStart`, on the page's row).
  pendingHead: byLiteral((key: string) => {
    const [cap, log] = key.split(":")
    const group = `p."group"`
    return numbered(`SELECT p.*, ${cap === "" ? "0" : groupInFlightOf(group, "+?2")} AS gInFlight,
        ${cap === "" ? "0" : groupAheadOf(Number(cap), group, "p.round", "p.id")} AS gAhead,
        ${log === "1" ? groupLastOf(group) : "0"} AS gLast
      FROM (SELECT ${pendingColumns} FROM __alkstore_jobs WHERE ${pendingWhere} ${flowOrder} LIMIT 1) AS p`)
  }),
  /**
   * A claim of one job in one statement, inside the claim's transaction (`flowStorage.claimFirstNow`): the
   * first pending job in walk order, claimed when the walk would claim it first — no due scheduled row to
   * promote, no lapsed lease (both are candidates too), the queue under its `concurrency`, the job's group
   * under its `groupConcurrency` with fewer live jobs ahead of it, each rate admitting one more claim
   * (flow.ts `admits` for a walk's first claim). Else nothing, and the walk decides. One statement per
   * shape of limits (`FirstShape`, its key), which the limits row must still have; `undefined` past 64
   * shapes. `?1` now, `?2` the worker, `?3` the queue (`claimSet`'s numbering). Returns the row (`rowOf`),
   * then its round, the queue's current round, its group and the ends of the queue's and the group's logs.
   */
  claimFirst: byLiteral((key: string) => {
    const shape = firstShapeOf(key)
    const { cap, groupRate, rate } = shape
    const is = (value: number | null) => (value === null ? "NULL" : String(value))
    const lastOf = (scope: string) => logLastOf(scope, "+?3")
    const admits = (limit: number, per: number, scope: string, last: string) =>
      `(${last} + 1 - ${limit} <= 0 OR NOT EXISTS (SELECT 1 FROM (SELECT at FROM __alkstore_flow_log
        WHERE queue = +?3 AND scope = ${scope} AND seq >= ${last} + 1 - ${limit} ORDER BY seq LIMIT 1) AS e WHERE e.at > +?1 - ${per}))`
    const group = `h."group"`
    const statement = numbered(`${claimSet} WHERE id = (SELECT h.id FROM (
          SELECT h.*, l.concurrency, ${rate === null ? "0" : lastOf("''")} AS q_last,
            ${groupRate === null ? "0" : lastOf(`'#' || h."group"`)} AS g_last
          FROM (SELECT id, flow_round AS round, group_key AS "group" FROM __alkstore_jobs WHERE queue = +?3 AND state = 'pending'
            AND flow_round IS NOT NULL ${flowOrder} LIMIT 1) AS h, __alkstore_flow_limits AS l
          WHERE l.queue = +?3 AND l.group_concurrency IS ${is(cap)} AND l.rate_limit IS ${is(rate?.[0] ?? null)}
            AND l.rate_per IS ${is(rate?.[1] ?? null)} AND l.group_rate_limit IS ${is(groupRate?.[0] ?? null)}
            AND l.group_rate_per IS ${is(groupRate?.[1] ?? null)}) AS h
        WHERE NOT EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = +?3 AND state = 'scheduled' AND run_at <= +?1)
          AND NOT EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = +?3 AND state = 'claimed' AND claimed_until <= +?1)
          AND (h.concurrency IS NULL
            OR (SELECT count(*) FROM __alkstore_jobs WHERE queue = +?3 AND state = 'claimed' AND claimed_until > +?1) < h.concurrency)
          ${cap === null ? "" : `AND ${groupInFlightOf(group, "+?1", "+?3")} < ${cap}
          AND ${groupAheadOf(cap, group, "h.round", "h.id", "+?3")} < ${cap}`}
          ${groupRate === null ? "" : `AND ${admits(groupRate[0], groupRate[1], `'#' || ${group}`, "h.g_last")}`}
          ${rate === null ? "" : `AND ${admits(rate[0], rate[1], "''", "h.q_last")}`})
      AND state = 'pending'
      RETURNING ${jobColumns}, flow_round, (SELECT current_round FROM __alkstore_flow_limits WHERE queue = +?3), group_key,
        ${rate === null ? "0" : lastOf("''")}, ${groupRate === null ? "0" : lastOf("'#' || group_key")}`)
    return { statement, shape }
  }, { cap: 64, otherwise: undefined }),
  logLast: `SELECT coalesce(max(seq), 0) AS n FROM __alkstore_flow_log WHERE queue = +? AND scope = +?`,
  // Claim `seq`, or when it was pruned the oldest claim logged after it (flow.ts `logAt`).
  logAt: `SELECT at FROM __alkstore_flow_log WHERE queue = +? AND scope = +? AND seq >= +? ORDER BY seq LIMIT 1`,
  claim: numbered(`${claimSet} WHERE id = +?3 AND (state = 'pending' OR (state = 'claimed' AND claimed_until <= +?1))
    RETURNING ${jobColumns}`),
  log: `INSERT INTO __alkstore_flow_log (queue, scope, seq, at) VALUES (?, ?, ?, ?)`,
  // A claim under both a rate and a group rate logs twice: one statement.
  logTwo: `INSERT INTO __alkstore_flow_log (queue, scope, seq, at) VALUES (?, ?, ?, ?), (?, ?, ?, ?)`,
  prune: `DELETE FROM __alkstore_flow_log WHERE queue = +? AND scope = +? AND seq <= +? AND at <= +?`,
  advanceRound: numbered(`UPDATE __alkstore_flow_limits SET current_round = ?1 WHERE queue = +?2 AND current_round < +?1`),
  insertLimits: `INSERT INTO __alkstore_flow_limits
      (queue, concurrency, rate_limit, rate_per, group_concurrency, group_rate_limit, group_rate_per, current_round, updated_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)`,
  updateLimits: `UPDATE __alkstore_flow_limits SET concurrency = ?, rate_limit = ?, rate_per = ?, group_concurrency = ?,
      group_rate_limit = ?, group_rate_per = ?, updated_at = ? WHERE queue = ?`,
  // A queue getting limits numbers its live jobs' rounds, per group in enqueue order (so a backlog rotates
  // too); dead jobs hold no place (round 0: a requeued one goes to the front of its group, as asked).
  numberRounds: `UPDATE __alkstore_jobs SET flow_round = r.n FROM (
      SELECT id, CASE WHEN state = 'dead' THEN 0
        ELSE row_number() OVER (PARTITION BY group_key, state = 'dead' ORDER BY id) - 1 END AS n
      FROM __alkstore_jobs WHERE queue = ?
    ) AS r WHERE __alkstore_jobs.id = r.id`,
  deleteLimits: `DELETE FROM __alkstore_flow_limits WHERE queue = ?`,
  deleteLog: `DELETE FROM __alkstore_flow_log WHERE queue = ?`,
  forgetRounds: `UPDATE __alkstore_jobs SET flow_round = NULL WHERE queue = ? AND flow_round IS NOT NULL`
} as const
