import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import type { FlowStorage, JobRow } from "../engine.js"
import {
  type Call,
  type Candidate,
  EXTRA_PAGE,
  type FlowEffectOps,
  type FlowMemory,
  type FlowMode,
  type FlowOps,
  type FlowOutcome,
  flowWalk,
  type GroupStart,
  type LimitsRow,
  runEffect
} from "../flow.js"
import type { ResolvedLimits } from "../options.js"
import type { DirectConnection, Executor, Param } from "./executor.js"
import { byGroupState, liveInFlow, liveStates } from "./flowInsert.js"
import { byLiteral, claimSet, jobColumns, numbered, rowOf, sql as queueSql } from "./queueStatements.js"

/**
 * Flow control's SQL on SQLite (docs/flow-control.md). Every limited claim
 * runs inside `BEGIN IMMEDIATE`, which already serialises it against every
 * other writer of the file, so the walk's counts cannot go stale under it.
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
// A group's start (live claims, live jobs ahead up to the cap, its log's end), for a group, candidate and
// instant given as parameters or as a page row's columns (`groupStart`, `pendingHead`). Read from
// `__alkstore_jobs_flow_group` (migration 9: a limited queue's live jobs by group, state, round and id, with
// each claim's lease end), one range per state; its predicate is said in full so that it can serve.
const groupInFlightOf = (group: string, now: string) => `(SELECT count(*) FROM ${byGroupState}
    WHERE queue = +?1 AND group_key = ${group} AND state = 'claimed' AND ${liveInFlow} AND claimed_until > ${now})`
const aheadIn = (state: string, cap: number, group: string, round: string, id: string) =>
  `(SELECT count(*) FROM (SELECT 1 FROM ${byGroupState} WHERE queue = +?1 AND group_key = ${group} AND state = '${state}'
    AND ${liveInFlow} AND (flow_round, id) < (${round}, ${id}) LIMIT ${cap}))`
const groupAheadOf = (cap: number, group = "+?2", round = "+?3", id = "+?4") =>
  `min(${cap}, ${liveStates.map((state) => aheadIn(state, cap, group, round, id)).join(" + ")})`
const groupLastOf = (group: string) =>
  `(SELECT coalesce(max(seq), 0) FROM __alkstore_flow_log WHERE queue = +?1 AND scope = '#' || ${group})`

// Parameters in WHERE terms are written `+?`, as on the claim path (sqlite/queueStatements.ts `sql`):
// under STAT4 statistics a bare one is read by the planner, and the statement re-prepared at every bind.
const sql = {
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
      CASE WHEN l.rate_limit IS NOT NULL THEN (SELECT coalesce(max(seq), 0) FROM __alkstore_flow_log
        WHERE queue = +?1 AND scope = '') END AS queueLast
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

const limitsParams = (l: ResolvedLimits): Array<Param> => [
  l.concurrency,
  l.rateLimit,
  l.ratePerMillis,
  l.groupConcurrency,
  l.groupRateLimit,
  l.groupRatePerMillis
]

/**
 * The walk's operations are written once, as generators of statements
 * (`Rows`: a read, `Run`: a write, `Claim`: the claim), and run either
 * synchronously on the store's connection or as effects over a client.
 */
type Statement =
  | { readonly _: "rows"; readonly text: string; readonly params: ReadonlyArray<Param> }
  | { readonly _: "run"; readonly text: string; readonly params: ReadonlyArray<Param> }
  | { readonly _: "claim"; readonly params: ReadonlyArray<Param> }
type Steps<A> = Generator<Statement, A, any>

function* rows<A>(text: string, params: ReadonlyArray<Param>): Steps<ReadonlyArray<A>> {
  return yield { _: "rows", text, params }
}
function* run(text: string, params: ReadonlyArray<Param>): Steps<void> {
  yield { _: "run", text, params }
}
function* count(text: string, params: ReadonlyArray<Param>): Steps<number> {
  return (yield* rows<{ n: number }>(text, params))[0]?.n ?? 0
}
const literal = (statement: ReturnType<typeof numbered>, args: ReadonlyArray<Param>) =>
  rows<Candidate>(statement.text, statement.bind(args as ReadonlyArray<string | number | null>))

/**
 * What the claim's readiness read already told (inside the same write lock):
 * whether due scheduled rows wait for promotion, whether any lease lapsed,
 * and the queue's limits. Unknown: looked for.
 */
export interface Readiness {
  readonly due: boolean
  readonly lapsed: boolean
  readonly limits?: LimitsRow | undefined
  /** The queue's live claims, when read with the limits (it has a `concurrency`). */
  readonly inFlight?: number | undefined
  /** The end of the queue's claim log, when read with the limits (it has a `rate`). */
  readonly queueLast?: number | undefined
}
const unknown: Readiness = { due: true, lapsed: true }

const none: ReadonlyArray<Candidate> = []

/** One walk's queue, instant, worker and readiness: the first argument of every operation. */
interface Context {
  readonly queue: string
  readonly workerId: string
  readonly now: number
  readonly ready: Readiness
  /** The group start of the first page's one row, read with it (`pendingHead`). */
  head?: { readonly id: number; readonly start: GroupStart } | undefined
}

/** The `pendingHead` key when a claim of one job can read its row's group start with it, or undefined. */
const headKey = (ready: Readiness, pageSize: number) => {
  const lim = ready.limits
  if (pageSize !== 1 || lim === undefined || (lim.groupConcurrency === null && lim.groupRateLimit === null)) return undefined
  return `${lim.groupConcurrency ?? ""}:${lim.groupRateLimit !== null ? 1 : 0}`
}

type GenOps = {
  readonly [K in keyof FlowOps]: (ctx: Context, ...args: Parameters<FlowOps[K]>) => Steps<ReturnType<FlowOps[K]>>
}

/**
 * The walk's operations, one module-level table taking the walk's context.
 * Not an object of generator methods built per claim: a generator function
 * created anew per call starts about 1 µs slower than one defined once (V8
 * measured, Node 20), which made this layer 8 µs of every limited claim.
 */
const genOps: GenOps = {
  *limits({ queue, ready }) {
    if (ready.limits !== undefined) return ready.limits
    return (yield* rows<LimitsRow>(sql.limits, [queue]))[0]
  },
  *promote({ now, queue, ready }) {
    if (ready.due) yield* run(queueSql.promoteDue, [queue, now])
  },
  *start(ctx, request) {
    const { now, queue, ready } = ctx
    const inFlight = !request.inFlight ? 0 : ready.inFlight ?? (yield* count(sql.inFlight, [queue, now]))
    const queueLast = !request.queueLast ? 0 : ready.queueLast ?? (yield* count(sql.logLast, [queue, ""]))
    const lapsed = ready.lapsed ? yield* rows<Candidate>(sql.lapsed.text, sql.lapsed.bind([queue, now])) : none
    const dueScheduled = request.dueScheduled > 0 ? yield* literal(sql.dueScheduled(request.dueScheduled), [queue, now]) : none
    const key = headKey(ready, request.pageSize)
    if (key === undefined) return { inFlight, queueLast, lapsed, dueScheduled, page: yield* literal(sql.pendingFirst(request.pageSize), [queue]) }
    const statement = sql.pendingHead(key)
    const [head] = yield* rows<Candidate & { gInFlight: number; gAhead: number; gLast: number }>(
      statement.text,
      statement.bind([queue, now])
    )
    if (head === undefined) return { inFlight, queueLast, lapsed, dueScheduled, page: none }
    const { gAhead, gInFlight, gLast, ...candidate } = head
    ctx.head = { id: candidate.id, start: { inFlight: gInFlight, ahead: gAhead, last: gLast } }
    return { inFlight, queueLast, lapsed, dueScheduled, page: [candidate] }
  },
  *pending({ queue }, after, size) {
    const same = yield* literal(sql.pendingSame(size), [queue, after.priority, after.round, after.runAt, after.id])
    if (same.length === size) return same
    const lower = yield* literal(sql.pendingLower(size - same.length), [queue, after.priority])
    return same.length === 0 ? lower : [...same, ...lower]
  },
  *extra({ now, queue }, kind, after) {
    const statement = kind === "lapsed" ? sql.lapsedAfter : sql.dueAfter
    return yield* rows<Candidate>(statement.text, statement.bind([queue, now, after.priority, after.round, after.runAt, after.id]))
  },
  *groupStart({ head, now, queue, ready }, group, round, id, cap, log) {
    // Read with the page when it was its one row and the walk asks what was read (the limits' own caps).
    if (head?.id === id && cap === ready.limits?.groupConcurrency && log === (ready.limits?.groupRateLimit !== null)) {
      return head.start
    }
    const statement = sql.groupStart(`${cap ?? ""}:${log ? 1 : 0}`)
    const [row] = yield* rows<GroupStart>(statement.text, statement.bind([queue, group, round, id, now]))
    return row!
  },
  *groupAhead({ queue }, group, round, id, cap) {
    const statement = sql.groupAhead(cap)
    return yield* count(statement.text, statement.bind([queue, group, round, id]))
  },
  *logAt({ queue }, scope, seq) {
    return (yield* rows<{ at: number }>(sql.logAt, [queue, scope, seq]))[0]?.at
  },
  *claim({ now, queue, workerId }, id, writes) {
    const row: JobRow | undefined = yield { _: "claim", params: sql.claim.bind([now, workerId, id]) }
    if (row?.state !== "claimed") return row
    if (writes.log.length === 2) {
      const [[s1, q1], [s2, q2]] = writes.log as readonly [readonly [string, number], readonly [string, number]]
      yield* run(sql.logTwo, [queue, s1, q1, now, queue, s2, q2, now])
    } else for (const [scope, seq] of writes.log) yield* run(sql.log, [queue, scope, seq, now])
    if (writes.round !== null) yield* run(sql.advanceRound.text, sql.advanceRound.bind([writes.round, queue]))
    return row
  },
  *prune({ queue }, scope, seq, before) {
    yield* run(sql.prune, [queue, scope, seq, before])
  }
}

/** Runs statement steps synchronously on the store's connection. */
const stepSync = <A>(steps: Steps<A>, c: DirectConnection): A => {
  let step = steps.next()
  while (!step.done) {
    const statement = step.value
    if (statement._ === "rows") step = steps.next(c.all(statement.text, statement.params))
    else if (statement._ === "run") {
      c.run(statement.text, statement.params)
      step = steps.next(undefined)
    } else {
      const row = c.values(sql.claim.text, statement.params)[0]
      step = steps.next(row === undefined ? undefined : rowOf(row))
    }
  }
  return step.value
}

/** Runs statement steps as effects over an executor. */
const stepEffect = <A>(steps: Steps<A>, db: Executor): Effect.Effect<A, SqlError> => {
  const loop = (input: unknown): Effect.Effect<A, SqlError> => {
    const step = steps.next(input)
    if (step.done) return Effect.succeed(step.value)
    const statement = step.value
    if (statement._ === "rows") return Effect.flatMap(db.all(statement.text, statement.params), loop)
    if (statement._ === "run") return Effect.flatMap(db.run(statement.text, statement.params), () => loop(undefined))
    return Effect.flatMap(db.all<JobRow>(sql.claim.text, statement.params), (r) => loop(r[0]))
  }
  return Effect.suspend(() => loop(undefined))
}

/** Runs the walk synchronously: each operation's statements on the store's connection, in place. */
const walkSync = <A>(walk: Generator<Call, A, any>, ctx: Context, c: DirectConnection): A => {
  let step = walk.next()
  while (!step.done) {
    const { args, op } = step.value
    step = walk.next(stepSync((genOps[op] as (ctx: Context, ...a: ReadonlyArray<unknown>) => Steps<unknown>)(ctx, ...args), c))
  }
  return step.value
}

const effectOpsOf = (ctx: Context, db: Executor): FlowEffectOps =>
  Object.fromEntries(
    Object.entries(genOps).map(([op, f]) => [op, (...args: Array<any>) => stepEffect((f as any)(ctx, ...args), db)])
  ) as unknown as FlowEffectOps

/** The walk on the store's own connection, synchronously (inside the caller's transaction). */
export const flowWalkNow = (
  c: DirectConnection,
  queue: string,
  workerId: string,
  now: number,
  n: number,
  mode: FlowMode,
  ready: Readiness = unknown
) => walkSync(flowWalk(now, n, mode), { queue, workerId, now, ready, head: undefined }, c)

/**
 * The claim's readiness and limits under its write lock, in one read (the
 * claim of a queue known limited goes straight to its transaction).
 */
export const readinessNow = (c: DirectConnection, queue: string, now: number) => {
  const row = c.all<LimitsRow & { due: number; lapsed: number; limited: number; inFlight: number | null; queueLast: number | null }>(
    sql.readiness.text,
    sql.readiness.bind([queue, now])
  )[0]!
  const { due, inFlight, lapsed, limited, queueLast, ...limits } = row
  return {
    due: due === 1,
    lapsed: lapsed === 1,
    limits: limited === 1 ? limits : undefined,
    inFlight: inFlight ?? undefined,
    queueLast: queueLast ?? undefined
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
): Effect.Effect<FlowOutcome, SqlError> =>
  runEffect(() => flowWalk(now, n, mode), effectOpsOf({ queue, workerId, now, ready: unknown, head: undefined }, db))

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
    freed: () => Effect.void,
    freedIfLimited: () => Effect.void
  }
}

/** The statements, for the check of their parameters (test/sqlite-stat4-params.test.ts). */
export { sql as flowSql }
