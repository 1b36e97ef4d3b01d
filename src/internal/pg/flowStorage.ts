import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import type { FlowStorage } from "../engine.js"
import {
  type Candidate,
  type FlowEffectOps,
  type FlowMemory,
  type FlowMode,
  type FlowOutcome,
  flowWalk,
  type LimitsRow,
  runEffect
} from "../flow.js"
import type { ResolvedLimits } from "../options.js"
import type { Param, PgExecutor, Row } from "./executor.js"
import type { Notifier } from "./notify.js"
import { claimSetOf } from "./claimSql.js"
import { decoded, int, intOrNull, jobColumns, toJobRow } from "./rows.js"

/**
 * Flow control's SQL on PostgreSQL (docs/flow-control.md). A limited claim
 * first takes its queue's limits row `FOR UPDATE`: limited claims of one
 * queue serialise there, across every host, and each later statement of the
 * walk reads a snapshot taken after the previous holder committed, so two
 * hosts can never both take the last slot or the last place in a window.
 */
const statements = (s: string) => {
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
  const claimed = `EXISTS (SELECT 1 FROM claimed WHERE claimed.state = 'claimed')`
  return {
    limits: `SELECT ${limitsColumns} FROM ${limits} WHERE queue = $1`,
    lockRow: `SELECT queue FROM ${limits} WHERE queue = $1 FOR UPDATE`,
    // The claim's first statement: its queue's limited claims serialise on this row lock. Due scheduled
    // rows are promoted in the same statement (what this claim's snapshot shows; a row committed while
    // it waited for the lock is promoted by the next claim).
    lockLimits: `WITH l AS (SELECT ${limitsColumns} FROM ${limits} WHERE queue = $1 FOR UPDATE),
      promoted AS (UPDATE ${jobs} SET state = 'pending' WHERE queue = $1 AND state = 'scheduled' AND run_at <= $2::bigint
        AND EXISTS (SELECT 1 FROM l))
      SELECT * FROM l`,
    // What the walk needs before its first candidate, in one round trip ($1 queue, $2 now; $3 count the
    // live claims, $4 read the queue's log, $5 due scheduled rows to read, $6 the first page's size).
    start: `SELECT
        CASE WHEN $3::boolean THEN (SELECT count(*) FROM ${jobs} WHERE queue = $1 AND state = 'claimed'
          AND claimed_until > $2::bigint) ELSE 0 END AS in_flight,
        CASE WHEN $4::boolean THEN (SELECT coalesce(max(seq), 0) FROM ${log} WHERE queue = $1 AND scope = '') ELSE 0 END
          AS queue_last,
        ${asJson(`SELECT ${candidate} FROM ${jobs} WHERE queue = $1 AND state = 'claimed' AND claimed_until <= $2::bigint
          AND flow_round IS NOT NULL LIMIT 1000`)} AS lapsed,
        CASE WHEN $5::bigint > 0 THEN ${asJson(`SELECT ${candidate} FROM ${jobs} WHERE queue = $1 AND state = 'scheduled'
          AND run_at <= $2::bigint AND flow_round IS NOT NULL LIMIT $5::bigint`)} ELSE '[]' END AS due,
        ${asJson(`SELECT ${pendingCandidate} FROM ${jobs} WHERE ${pending} ${order} LIMIT $6::bigint`, order)} AS page`,
    // The next page after ($2 priority, $3 round, $4 run_at, $5 id), $6 rows: the rest of this priority, then lower ones.
    pendingAfter: `SELECT * FROM (
        (SELECT ${pendingCandidate} FROM ${jobs} WHERE ${pending} AND priority = $2::bigint
          AND (flow_round, run_at, id) > ($3::bigint, $4::bigint, $5::bigint) ${order} LIMIT $6::bigint)
        UNION ALL
        (SELECT ${pendingCandidate} FROM ${jobs} WHERE ${pending} AND priority < $2::bigint ${order} LIMIT $6::bigint)
      ) AS p ORDER BY priority DESC, round, run_at, id LIMIT $6::bigint`,
    // A group as the walk first meets it ($1 queue, $2 group, $3/$4 the candidate's round and id, $5 the cap
    // or NULL, $6 read its log, $7 now).
    groupStart: `SELECT
        CASE WHEN $5::bigint IS NULL THEN 0 ELSE (SELECT count(*) FROM ${jobs} WHERE queue = $1 AND group_key = $2
          AND state = 'claimed' AND flow_round IS NOT NULL AND claimed_until > $7::bigint) END AS in_flight,
        CASE WHEN $5::bigint IS NULL THEN 0 ELSE (SELECT count(*) FROM (SELECT 1 FROM ${jobs} WHERE queue = $1
          AND group_key = $2 AND state <> 'dead' AND flow_round IS NOT NULL AND (flow_round, id) < ($3::bigint, $4::bigint)
          LIMIT $5::bigint) AS ahead) END AS ahead,
        CASE WHEN $6::boolean THEN (SELECT coalesce(max(seq), 0) FROM ${log} WHERE queue = $1 AND scope = '#' || $2)
          ELSE 0 END AS last`,
    groupAhead: `SELECT count(*) AS n FROM (SELECT 1 FROM ${jobs} WHERE queue = $1 AND group_key = $2 AND state <> 'dead'
      AND flow_round IS NOT NULL AND (flow_round, id) < ($3::bigint, $4::bigint) LIMIT $5) AS ahead`,
    logAt: `SELECT at FROM ${log} WHERE queue = $1 AND scope = $2 AND seq = $3::bigint`,
    // The claim and, only when it took the job, its log entries ($5 scopes, $6 sequence numbers) and the
    // queue's round ($7, NULL: unchanged): one round trip.
    claim: `WITH claimed AS (
        ${claimSetOf(jobs)} WHERE j.id = $3::bigint
          AND (j.state = 'pending' OR (j.state = 'claimed' AND j.claimed_until <= $1::bigint))
        RETURNING ${jobColumns("j")}
      ), logged AS (
        INSERT INTO ${log} (queue, scope, seq, at)
        SELECT $4, e.scope, e.seq, $1::bigint FROM unnest($5::text[], $6::bigint[]) AS e(scope, seq) WHERE ${claimed}
      ), advanced AS (
        UPDATE ${limits} SET current_round = $7::bigint WHERE queue = $4 AND current_round < $7::bigint AND ${claimed}
      )
      SELECT * FROM claimed`,
    prune: `DELETE FROM ${log} WHERE queue = $1 AND scope = $2 AND seq <= $3::bigint AND at <= $4::bigint`,
    // Jobs inserted by transactions still open when a queue first gets limits must be numbered too:
    // the lock waits them out (and holds new writers back) while the backlog is numbered.
    lockJobs: `LOCK TABLE ${jobs} IN SHARE ROW EXCLUSIVE MODE`,
    insertLimits: `INSERT INTO ${limits}
        (queue, concurrency, rate_limit, rate_per, group_concurrency, group_rate_limit, group_rate_per, current_round,
         updated_at)
      VALUES ($1, $2::bigint, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::bigint, 0, $8::bigint)`,
    updateLimits: `UPDATE ${limits} SET concurrency = $2::bigint, rate_limit = $3::bigint, rate_per = $4::bigint,
        group_concurrency = $5::bigint, group_rate_limit = $6::bigint, group_rate_per = $7::bigint, updated_at = $8::bigint
      WHERE queue = $1`,
    numberRounds: `UPDATE ${jobs} AS j SET flow_round = r.n FROM (
        SELECT id, row_number() OVER (PARTITION BY group_key ORDER BY id) - 1 AS n FROM ${jobs} WHERE queue = $1
      ) AS r WHERE j.id = r.id`,
    deleteLimits: `DELETE FROM ${limits} WHERE queue = $1 RETURNING queue`,
    deleteLog: `DELETE FROM ${log} WHERE queue = $1`,
    forgetRounds: `UPDATE ${jobs} SET flow_round = NULL WHERE queue = $1 AND flow_round IS NOT NULL`,
    notify: `SELECT pg_notify($1::text, CASE WHEN octet_length($2::text) < 7900 THEN $2::text ELSE '*' END)`
  } as const
}

const toLimitsRow = (r: Row): LimitsRow => ({
  concurrency: intOrNull(r.concurrency, "concurrency"),
  rateLimit: intOrNull(r.rate_limit, "rate_limit"),
  ratePerMillis: intOrNull(r.rate_per, "rate_per"),
  groupConcurrency: intOrNull(r.group_concurrency, "group_concurrency"),
  groupRateLimit: intOrNull(r.group_rate_limit, "group_rate_limit"),
  groupRatePerMillis: intOrNull(r.group_rate_per, "group_rate_per"),
  currentRound: int(r.current_round, "current_round")
})

const toCandidate = (r: Row): Candidate => ({
  id: int(r.id, "id"),
  priority: int(r.priority, "priority"),
  round: int(r.round, "round"),
  runAt: int(r.run_at, "run_at"),
  group: r.group_key as string,
  state: r.state as Candidate["state"]
})

const limitsParams = (queue: string, l: ResolvedLimits, now: number): Array<Param> => [
  queue,
  l.concurrency,
  l.rateLimit,
  l.ratePerMillis,
  l.groupConcurrency,
  l.groupRateLimit,
  l.groupRatePerMillis,
  now
]

export interface PgFlow {
  readonly storage: FlowStorage
  /** A limited claim (run it inside a transaction). */
  readonly claim: (queue: string, workerId: string, now: number, n: number) => Effect.Effect<FlowOutcome, SqlError>
}

export const makeFlowStorage = (db: PgExecutor, schema: string, notifier: Notifier, memory: FlowMemory): PgFlow => {
  const sql = statements(schema)
  const rows = <A>(text: string, params: ReadonlyArray<Param>, decode: (row: Row) => A) => decoded(db.all(text, params), decode)
  const count = (text: string, params: ReadonlyArray<Param>) =>
    Effect.map(rows(text, params, (r) => int(r.n, "n")), (r) => r[0] ?? 0)
  const exec = (text: string, params: ReadonlyArray<Param>) => Effect.asVoid(db.all(text, params))
  const candidates = (text: string, params: ReadonlyArray<Param>) => rows(text, params, toCandidate)

  const candidatesOf = (json: unknown): ReadonlyArray<Candidate> => (JSON.parse(json as string) as Array<Row>).map(toCandidate)

  /**
   * The walk's operations, a round trip each: the lock with the promotion,
   * then `start` (counts, lapsed leases and the first page in one read),
   * one read per group met, and the claim with its bookkeeping.
   */
  const ops = (queue: string, workerId: string, now: number): FlowEffectOps => ({
    limits: (lock) =>
      Effect.map(rows(lock ? sql.lockLimits : sql.limits, lock ? [queue, now] : [queue], toLimitsRow), (r) => r[0]),
    promote: () => Effect.void, // in `lockLimits`
    start: (request) =>
      Effect.map(
        rows(
          sql.start,
          [queue, now, request.inFlight, request.queueLast, request.dueScheduled, request.pageSize] as Array<Param>,
          (r) => ({
            inFlight: int(r.in_flight, "in_flight"),
            queueLast: int(r.queue_last, "queue_last"),
            lapsed: candidatesOf(r.lapsed),
            dueScheduled: candidatesOf(r.due),
            page: candidatesOf(r.page)
          })
        ),
        (r) => r[0]!
      ),
    pending: (after, size) => candidates(sql.pendingAfter, [queue, after.priority, after.round, after.runAt, after.id, size]),
    groupStart: (group, round, id, cap, log) =>
      Effect.map(
        rows(sql.groupStart, [queue, group, round, id, cap, log, now] as Array<Param>, (r) => ({
          inFlight: int(r.in_flight, "in_flight"),
          ahead: int(r.ahead, "ahead"),
          last: int(r.last, "last")
        })),
        (r) => r[0]!
      ),
    groupAhead: (group, round, id, cap) => count(sql.groupAhead, [queue, group, round, id, cap]),
    logAt: (scope, seq) => Effect.map(rows(sql.logAt, [queue, scope, seq], (r) => int(r.at, "at")), (r) => r[0]),
    claim: (id, writes) =>
      Effect.map(
        rows(sql.claim, [
          now,
          workerId,
          id,
          queue,
          writes.log.map(([scope]) => scope) as unknown as Param,
          writes.log.map(([, seq]) => seq) as unknown as Param,
          writes.round
        ], toJobRow),
        (r) => r[0]
      ),
    prune: (scope, seq, before) => exec(sql.prune, [queue, scope, seq, before])
  })

  const walk = (queue: string, workerId: string, now: number, n: number, mode: FlowMode) =>
    runEffect(() => flowWalk(now, n, mode), ops(queue, workerId, now))
  const freed = (queue: string) => exec(sql.notify, [notifier.channel, queue])

  const storage: FlowStorage = {
    memory,
    get: (queue) =>
      Effect.map(rows(sql.limits, [queue], toLimitsRow), (r) =>
        Option.map(Option.fromNullable(r[0]), ({ currentRound: _, ...limits }) => limits)),
    set: (queue, limits, now) =>
      db.transaction(Effect.gen(function*() {
        if ((yield* db.all(sql.lockRow, [queue])).length > 0) {
          return yield* exec(sql.updateLimits, limitsParams(queue, limits, now))
        }
        yield* exec(sql.lockJobs, [])
        yield* exec(sql.insertLimits, limitsParams(queue, limits, now))
        yield* exec(sql.numberRounds, [queue])
      })),
    clear: (queue) =>
      db.transaction(Effect.gen(function*() {
        if ((yield* db.all(sql.deleteLimits, [queue])).length === 0) return false
        yield* exec(sql.deleteLog, [queue])
        yield* exec(sql.forgetRounds, [queue])
        return true
      })),
    probe: (queue, now) =>
      Effect.map(walk(queue, "", now, 1, "probe"), (outcome) => {
        memory.saw(queue, outcome.limited)
        return outcome.limited
          ? { limited: true, claimable: outcome.taken > 0, reopenAt: outcome.reopenAt }
          : { limited: false, claimable: false, reopenAt: null }
      }),
    claimablePending: (queue, now) =>
      Effect.map(
        walk(queue, "", now, Number.MAX_SAFE_INTEGER, "count"),
        (outcome) => (outcome.limited ? outcome.takenPending : undefined)
      ),
    freed
  }
  return { storage, claim: (queue, workerId, now, n) => walk(queue, workerId, now, n, "claim") }
}
