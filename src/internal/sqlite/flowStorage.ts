import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import type { FlowStorage, JobRow } from "../engine.js"
import {
  type Candidate,
  type FlowEffectOps,
  type FlowMemory,
  type FlowMode,
  type FlowOps,
  type FlowOutcome,
  flowWalk,
  type LimitsRow,
  runEffect,
  runSync
} from "../flow.js"
import type { ResolvedLimits } from "../options.js"
import type { DirectConnection, Executor, Param } from "./executor.js"
import { claimSet, jobColumns, numbered, rowOf, sql as queueSql } from "./queueStatements.js"

/**
 * Flow control's SQL on SQLite (docs/flow-control.md). Every limited claim
 * runs inside `BEGIN IMMEDIATE`, which already serialises it against every
 * other writer of the file, so the walk's counts cannot go stale under it.
 */

const candidateColumns = `id, priority, flow_round AS round, run_at AS runAt, group_key AS "group", state`
// The pending pages read the flow index alone (it holds every column named here).
const pendingColumns = `id, priority, flow_round AS round, run_at AS runAt, group_key AS "group", 'pending' AS state`
const flowOrder = `ORDER BY priority DESC, flow_round, run_at, id`
const pendingWhere = `queue = ?1 AND state = 'pending' AND flow_round IS NOT NULL`

const sql = {
  limits: `SELECT concurrency, rate_limit AS rateLimit, rate_per AS ratePerMillis, group_concurrency AS groupConcurrency,
      group_rate_limit AS groupRateLimit, group_rate_per AS groupRatePerMillis, current_round AS currentRound
    FROM __alkstore_flow_limits WHERE queue = ?`,
  inFlight: `SELECT count(*) AS n FROM __alkstore_jobs WHERE queue = ? AND state = 'claimed' AND claimed_until > ?`,
  pendingFirst: numbered(`SELECT ${pendingColumns} FROM __alkstore_jobs WHERE ${pendingWhere} ${flowOrder} LIMIT ?2`),
  pendingSame: numbered(`SELECT ${pendingColumns} FROM __alkstore_jobs WHERE ${pendingWhere}
      AND priority = ?2 AND (flow_round, run_at, id) > (?3, ?4, ?5) ${flowOrder} LIMIT ?6`),
  pendingLower: numbered(`SELECT ${pendingColumns} FROM __alkstore_jobs WHERE ${pendingWhere}
      AND priority < ?2 ${flowOrder} LIMIT ?3`),
  lapsed: `SELECT ${candidateColumns} FROM __alkstore_jobs
    WHERE queue = ? AND state = 'claimed' AND claimed_until <= ? AND flow_round IS NOT NULL LIMIT 1000`,
  dueScheduled: `SELECT ${candidateColumns} FROM __alkstore_jobs
    WHERE queue = ? AND state = 'scheduled' AND run_at <= ? AND flow_round IS NOT NULL LIMIT ?`,
  groupInFlight: `SELECT count(*) AS n FROM __alkstore_jobs
    WHERE queue = ? AND group_key = ? AND state = 'claimed' AND flow_round IS NOT NULL AND claimed_until > ?`,
  groupAhead: numbered(`SELECT count(*) AS n FROM (SELECT 1 FROM __alkstore_jobs
    WHERE queue = ?1 AND group_key = ?2 AND state <> 'dead' AND flow_round IS NOT NULL AND (flow_round, id) < (?3, ?4)
    LIMIT ?5)`),
  logLast: `SELECT coalesce(max(seq), 0) AS n FROM __alkstore_flow_log WHERE queue = ? AND scope = ?`,
  logAt: `SELECT at FROM __alkstore_flow_log WHERE queue = ? AND scope = ? AND seq = ?`,
  claim: numbered(`${claimSet} WHERE id = ?3 AND (state = 'pending' OR (state = 'claimed' AND claimed_until <= ?1))
    RETURNING ${jobColumns}`),
  log: `INSERT INTO __alkstore_flow_log (queue, scope, seq, at) VALUES (?, ?, ?, ?)`,
  prune: `DELETE FROM __alkstore_flow_log WHERE queue = ? AND scope = ? AND seq <= ? AND at <= ?`,
  advanceRound: numbered(`UPDATE __alkstore_flow_limits SET current_round = ?1 WHERE queue = ?2 AND current_round < ?1`),
  insertLimits: `INSERT INTO __alkstore_flow_limits
      (queue, concurrency, rate_limit, rate_per, group_concurrency, group_rate_limit, group_rate_per, current_round, updated_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)`,
  updateLimits: `UPDATE __alkstore_flow_limits SET concurrency = ?, rate_limit = ?, rate_per = ?, group_concurrency = ?,
      group_rate_limit = ?, group_rate_per = ?, updated_at = ? WHERE queue = ?`,
  // A queue getting limits numbers its jobs' rounds, per group in enqueue order (so a backlog rotates too).
  numberRounds: `UPDATE __alkstore_jobs SET flow_round = r.n FROM (
      SELECT id, row_number() OVER (PARTITION BY group_key ORDER BY id) - 1 AS n FROM __alkstore_jobs WHERE queue = ?
    ) AS r WHERE __alkstore_jobs.id = r.id`,
  deleteLimits: `DELETE FROM __alkstore_flow_limits WHERE queue = ?`,
  deleteLog: `DELETE FROM __alkstore_flow_log WHERE queue = ?`,
  forgetRounds: `UPDATE __alkstore_jobs SET flow_round = NULL WHERE queue = ? AND flow_round IS NOT NULL`
} as const

const limitsParams = (l: ResolvedLimits): Array<Param> => [
  l.concurrency,
  l.rateLimit,
  l.ratePerMillis,
  l.groupConcurrency,
  l.groupRateLimit,
  l.groupRatePerMillis
]

type Rows = <A>(text: string, params: ReadonlyArray<Param>) => ReadonlyArray<A>
type Run = (text: string, params: ReadonlyArray<Param>) => void

/** The walk's operations for one queue, instant and worker over a statement runner. */
const opsOver = (all: Rows, run: Run, claimRow: (params: ReadonlyArray<Param>) => JobRow | undefined) =>
(queue: string, workerId: string, now: number, ready: Readiness): FlowOps => {
  const count = (text: string, params: ReadonlyArray<Param>) => all<{ n: number }>(text, params)[0]?.n ?? 0
  return {
    limits: () => all<LimitsRow>(sql.limits, [queue])[0],
    promote: () => {
      if (ready.due) run(queueSql.promoteDue, [queue, now])
    },
    inFlight: () => count(sql.inFlight, [queue, now]),
    pending: (after, size) => {
      if (after === undefined) return all<Candidate>(sql.pendingFirst.text, sql.pendingFirst.bind([queue, size]))
      const same = all<Candidate>(
        sql.pendingSame.text,
        sql.pendingSame.bind([queue, after.priority, after.round, after.runAt, after.id, size])
      )
      if (same.length === size) return same
      const lower = all<Candidate>(sql.pendingLower.text, sql.pendingLower.bind([queue, after.priority, size - same.length]))
      return same.length === 0 ? lower : [...same, ...lower]
    },
    lapsed: () => (ready.lapsed ? all<Candidate>(sql.lapsed, [queue, now]) : []),
    dueScheduled: (size) => all<Candidate>(sql.dueScheduled, [queue, now, size]),
    groupInFlight: (group) => count(sql.groupInFlight, [queue, group, now]),
    groupAhead: (group, round, id, cap) => count(sql.groupAhead.text, sql.groupAhead.bind([queue, group, round, id, cap])),
    logLast: (scope) => count(sql.logLast, [queue, scope]),
    logAt: (scope, seq) => all<{ at: number }>(sql.logAt, [queue, scope, seq])[0]?.at,
    claim: (id) => claimRow(sql.claim.bind([now, workerId, id])),
    log: (scope, seq) => run(sql.log, [queue, scope, seq, now]),
    prune: (scope, seq, before) => run(sql.prune, [queue, scope, seq, before]),
    advanceRound: (round) => run(sql.advanceRound.text, sql.advanceRound.bind([round, queue]))
  }
}

/**
 * What the claim's readiness read already told (inside the same write lock):
 * whether due scheduled rows wait for promotion, and whether any lease
 * lapsed. Unknown: both looked for.
 */
export interface Readiness {
  readonly due: boolean
  readonly lapsed: boolean
}
const unknown: Readiness = { due: true, lapsed: true }

/** The walk on the store's own connection, synchronously (inside the caller's transaction). */
export const flowWalkNow = (
  c: DirectConnection,
  queue: string,
  workerId: string,
  now: number,
  n: number,
  mode: FlowMode,
  ready: Readiness = unknown
) =>
  runSync(
    flowWalk(now, n, mode),
    opsOver(
      c.all,
      (text, params) => void c.run(text, params),
      (params) => {
        const row = c.values(sql.claim.text, params)[0]
        return row === undefined ? undefined : rowOf(row)
      }
    )(queue, workerId, now, ready)
  )

/** The walk's operations as effects, over an application's client. */
const effectOps = (db: Executor, queue: string, workerId: string, now: number): FlowEffectOps => {
  // The same SQL as `opsOver`, one statement effect each.
  const one = <A>(text: string, params: ReadonlyArray<Param>) => db.all<A>(text, params)
  const count = (text: string, params: ReadonlyArray<Param>) => Effect.map(one<{ n: number }>(text, params), (r) => r[0]?.n ?? 0)
  const exec = (text: string, params: ReadonlyArray<Param>) => Effect.asVoid(db.run(text, params))
  return {
    limits: () => Effect.map(one<LimitsRow>(sql.limits, [queue]), (r) => r[0]),
    promote: () => exec(queueSql.promoteDue, [queue, now]),
    inFlight: () => count(sql.inFlight, [queue, now]),
    pending: (after, size) => {
      if (after === undefined) return one<Candidate>(sql.pendingFirst.text, sql.pendingFirst.bind([queue, size]))
      return Effect.flatMap(
        one<Candidate>(sql.pendingSame.text, sql.pendingSame.bind([queue, after.priority, after.round, after.runAt, after.id, size])),
        (same) =>
          same.length === size
            ? Effect.succeed(same)
            : Effect.map(
              one<Candidate>(sql.pendingLower.text, sql.pendingLower.bind([queue, after.priority, size - same.length])),
              (lower) => [...same, ...lower]
            )
      )
    },
    lapsed: () => one<Candidate>(sql.lapsed, [queue, now]),
    dueScheduled: (size) => one<Candidate>(sql.dueScheduled, [queue, now, size]),
    groupInFlight: (group) => count(sql.groupInFlight, [queue, group, now]),
    groupAhead: (group, round, id, cap) => count(sql.groupAhead.text, sql.groupAhead.bind([queue, group, round, id, cap])),
    logLast: (scope) => count(sql.logLast, [queue, scope]),
    logAt: (scope, seq) => Effect.map(one<{ at: number }>(sql.logAt, [queue, scope, seq]), (r) => r[0]?.at),
    claim: (id) => Effect.map(one<JobRow>(sql.claim.text, sql.claim.bind([now, workerId, id])), (r) => r[0]),
    log: (scope, seq) => exec(sql.log, [queue, scope, seq, now]),
    prune: (scope, seq, before) => exec(sql.prune, [queue, scope, seq, before]),
    advanceRound: (round) => exec(sql.advanceRound.text, sql.advanceRound.bind([round, queue]))
  }
}

/** The walk as an effect over any executor (run it inside a transaction when it claims). */
export const flowWalkEffect = (
  db: Executor,
  queue: string,
  workerId: string,
  now: number,
  n: number,
  mode: FlowMode
): Effect.Effect<FlowOutcome, SqlError> => runEffect(() => flowWalk(now, n, mode), effectOps(db, queue, workerId, now))

const fromRow = (row: LimitsRow): ResolvedLimits => ({
  concurrency: row.concurrency,
  rateLimit: row.rateLimit,
  ratePerMillis: row.ratePerMillis,
  groupConcurrency: row.groupConcurrency,
  groupRateLimit: row.groupRateLimit,
  groupRatePerMillis: row.groupRatePerMillis
})

export const makeFlowStorage = (db: Executor, memory: FlowMemory): FlowStorage => {
  // Reads only: on the owned connection in place, else as statements (no transaction: nothing is written).
  const readWalk = (queue: string, now: number, mode: FlowMode) =>
    db.direct !== undefined
      ? db.direct((c) => flowWalkNow(c, queue, "", now, mode === "probe" ? 1 : Number.MAX_SAFE_INTEGER, mode))
      : flowWalkEffect(db, queue, "", now, mode === "probe" ? 1 : Number.MAX_SAFE_INTEGER, mode)
  return {
    memory,
    get: (queue) => Effect.map(db.all<LimitsRow>(sql.limits, [queue]), (rows) => Option.map(Option.fromNullable(rows[0]), fromRow)),
    set: (queue, limits, now) =>
      db.transaction(Effect.gen(function*() {
        const existing = yield* db.all(sql.limits, [queue])
        if (existing.length > 0) {
          yield* db.run(sql.updateLimits, [...limitsParams(limits), now, queue])
        } else {
          yield* db.run(sql.insertLimits, [queue, ...limitsParams(limits), now])
          yield* db.run(sql.numberRounds, [queue])
        }
      })),
    clear: (queue) =>
      db.transaction(Effect.gen(function*() {
        const deleted = yield* db.run(sql.deleteLimits, [queue])
        if (deleted.changes === 0) return false
        yield* db.run(sql.deleteLog, [queue])
        yield* db.run(sql.forgetRounds, [queue])
        return true
      })),
    probe: (queue, now) =>
      Effect.map(readWalk(queue, now, "probe"), (outcome) => {
        memory.saw(queue, outcome.limited)
        return outcome.limited
          ? { limited: true, claimable: outcome.taken > 0, reopenAt: outcome.reopenAt }
          : { limited: false, claimable: false, reopenAt: null }
      }),
    claimablePending: (queue, now) =>
      Effect.map(readWalk(queue, now, "count"), (outcome) => (outcome.limited ? outcome.takenPending : undefined)),
    freed: () => Effect.void
  }
}
