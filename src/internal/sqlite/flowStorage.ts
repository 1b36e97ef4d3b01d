import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import type { FlowStorage, JobRow } from "../engine.js"
import { flowWalk, prunableUpTo, roundToWrite } from "../flow.js"
import {
  type Call,
  type Candidate,
  type ClaimWrites,
  type FlowEffectOps,
  type FlowMode,
  type FlowOps,
  type FlowOutcome,
  type GroupStart,
  type LimitsRow,
  runEffect
} from "../flowOps.js"
import type { FlowMemory } from "../flowMemory.js"
import type { ResolvedLimits } from "../options.js"
import type { DirectConnection, Executor, Param } from "./executor.js"
import { firstShapeKey, flowSql as sql } from "./flowStatements.js"
import { numbered, rowOf, sql as queueSql } from "./queueStatements.js"

/**
 * Flow control's storage on SQLite (docs/flow-control.md): the claim walk's
 * operations over the statements of flowStatements.ts, run in place on the
 * store's own connection or as effects over an application's client, and
 * the limits' reads and writes. Every limited claim runs inside
 * `BEGIN IMMEDIATE`, which serialises it against every other writer of the
 * file, so the walk's counts cannot go stale under it.
 */

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

/** The statements of a claim's bookkeeping (`ClaimWrites`), once it took its job: its log entries, then the round. */
const bookkeeping = (queue: string, now: number, writes: ClaimWrites): Array<readonly [string, ReadonlyArray<Param>]> => {
  const statements: Array<readonly [string, ReadonlyArray<Param>]> = []
  if (writes.log.length === 2) {
    const [[s1, q1], [s2, q2]] = writes.log as readonly [readonly [string, number], readonly [string, number]]
    statements.push([sql.logTwo, [queue, s1, q1, now, queue, s2, q2, now]])
  } else for (const [scope, seq] of writes.log) statements.push([sql.log, [queue, scope, seq, now]])
  if (writes.round !== null) statements.push([sql.advanceRound.text, sql.advanceRound.bind([writes.round, queue])])
  return statements
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
  *claim(ctx, id, writes) {
    const { now, queue, workerId } = ctx
    const row: JobRow | undefined = yield { _: "claim", params: sql.claim.bind([now, workerId, id]) }
    if (row === undefined) return row
    if (row.state !== "claimed") {
      ctx.head = undefined // buried: the page head's group counts, read before, still count it
      return row
    }
    for (const [text, params] of bookkeeping(queue, now, writes)) yield* run(text, params)
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

/**
 * A claim of one job whose first candidate is claimable, in one statement inside the claim's transaction
 * (what the walk would claim first), with the walk's bookkeeping for it: its log entries, the queue's round
 * when it moved `ROUND_STEP`, the logs pruned. `undefined`: the walk decides. The row may be dead: the claim
 * met it expired (`claimSet`), as the walk's claim would, and the walk then goes on to the next candidate.
 */
export const claimFirstNow = (c: DirectConnection, queue: string, workerId: string, now: number, key: string) => {
  const first = sql.claimFirst(key)
  if (first === undefined) return undefined
  const values = c.values(first.statement.text, first.statement.bind([now, workerId, queue]))[0]
  if (values === undefined) return undefined
  const row = rowOf(values)
  if (row.state !== "claimed") return row
  const { groupRate, rate } = first.shape
  // After the row's columns (`rowOf`), the five the statement returns after them.
  const [round, current, group, queueLast, groupLast] = values.slice(-5) as [number, number, string, number, number]
  const scope = `#${group}`
  // What the walk writes for its one claim (flow.ts): an entry per rate, the round, then the prunes.
  const log: Array<readonly [string, number]> = []
  if (rate !== null) log.push(["", queueLast + 1])
  if (groupRate !== null) log.push([scope, groupLast + 1])
  for (const [text, params] of bookkeeping(queue, now, { log, round: roundToWrite(round, current) })) c.run(text, params)
  const queueUpTo = rate === null ? null : prunableUpTo(queueLast, 1, rate[0])
  if (queueUpTo !== null) c.run(sql.prune, [queue, "", queueUpTo, now - rate![1]])
  const groupUpTo = groupRate === null ? null : prunableUpTo(groupLast, 1, groupRate[0])
  if (groupUpTo !== null) c.run(sql.prune, [queue, scope, groupUpTo, now - groupRate![1]])
  return row
}

/**
 * A limited claim under its write lock, for a queue seen limited: a claim of one job first tries the
 * one-statement claim its limits' last shape fits (most such claims take the walk's first candidate), else
 * (or when it took nothing) one read gives the readiness and the limits, and the walk decides. `undefined`:
 * the queue has no limits (any more).
 */
export const limitedClaimNow = (
  c: DirectConnection,
  queue: string,
  workerId: string,
  now: number,
  limit: number,
  memory: FlowMemory
): FlowOutcome | undefined => {
  const shape = limit === 1 ? memory.shape(queue) : undefined
  const first = shape === undefined ? undefined : claimFirstNow(c, queue, workerId, now, shape)
  if (first?.state === "claimed") return { limited: true, rows: [first], taken: 1, takenPending: 1, reopenAt: null }
  const under = readinessNow(c, queue, now)
  if (under.limits === undefined) return undefined
  memory.sawShape(queue, firstShapeKey(under.limits))
  const outcome = flowWalkNow(c, queue, workerId, now, limit, "claim", under)
  // Met expired, the first candidate went to dead: after the walk's claims, where the walk puts its own.
  return first === undefined || !outcome.limited ? outcome : { ...outcome, rows: [...outcome.rows, first] }
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
