import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import type { Fence, FlowStorage, JobRow } from "../engine.js"
import {
  type Candidate,
  dueScheduledToRead,
  firstPageSize,
  type FlowEffectOps,
  type FlowMemory,
  type FlowMode,
  type FlowOutcome,
  flowWalk,
  type GroupStart,
  type LimitsRow,
  runEffect,
  type Start
} from "../flow.js"
import type { ResolvedLimits } from "../options.js"
import type { Param, PgExecutor, Row } from "./executor.js"
import { flowStatements } from "./flowStatements.js"
import type { Notifier } from "./notify.js"
import { decoded, int, intOrNull, toJobRow } from "./rows.js"

/**
 * Flow control on PostgreSQL (docs/flow-control.md): the engine-free walk
 * (../flow.ts) over the statements of flowStatements.ts. A claim runs the
 * walk optimistically first — no transaction, two round trips for the
 * common claim: the read-ahead (limits, version, start, first-page groups)
 * and the version-checked claim — and, when another process's claim
 * committed in between (`FlowConflict`), the rest of it the locked way.
 */

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


/** An optimistic claim found its queue's limits row at another version: it claimed nothing. */
class FlowConflict {
  readonly _tag = "FlowConflict"
}

/**
 * How a walk reaches storage: `optimistic` (a claim outside any lock; the
 * claim statement checks the version), `locked` (a claim inside a
 * transaction that took the limits row first), `read` (a read-only walk).
 */
type Access = "optimistic" | "locked" | "read"

/** What an optimistic walk claimed before a conflict stopped it (the locked walk claims the rest). */
interface Claimed {
  readonly rows: Array<JobRow>
  readonly died: Array<JobRow>
}

export interface PgFlow {
  readonly storage: FlowStorage
  /** A limited claim (in a transaction of its own when it must lock, or the caller's). */
  readonly claim: (queue: string, workerId: string, now: number, n: number) => Effect.Effect<FlowOutcome, SqlError>
}

export const makeFlowStorage = (db: PgExecutor, schema: string, notifier: Notifier, memory: FlowMemory): PgFlow => {
  const sql = flowStatements(schema)
  const rows = <A>(text: string, params: ReadonlyArray<Param>, decode: (row: Row) => A) => decoded(db.all(text, params), decode)
  const count = (text: string, params: ReadonlyArray<Param>) =>
    Effect.map(rows(text, params, (r) => int(r.n, "n")), (r) => r[0] ?? 0)
  const exec = (text: string, params: ReadonlyArray<Param>) => Effect.asVoid(db.all(text, params))
  const candidates = (text: string, params: ReadonlyArray<Param>) => rows(text, params, toCandidate)
  const candidatesOf = (json: unknown): ReadonlyArray<Candidate> => (JSON.parse(json as string) as Array<Row>).map(toCandidate)
  const toGroupStart = (r: Row): GroupStart => ({
    inFlight: int(r.in_flight, "in_flight"),
    ahead: int(r.ahead, "ahead"),
    last: int(r.last, "last")
  })
  const toStart = (r: Row): Start => ({
    inFlight: int(r.in_flight, "in_flight"),
    queueLast: int(r.queue_last, "queue_last"),
    lapsed: candidatesOf(r.lapsed),
    dueScheduled: candidatesOf(r.due),
    page: candidatesOf(r.page)
  })

  /**
   * The walk's operations for one queue, instant and worker. Outside the
   * locked way, `limits` is the read-ahead, and `start` and the first
   * `groupStart` of each first-page group answer from it (when asked what it
   * read: the walk's own page size and its limits' caps) — one round trip
   * for them all. Each claim then costs one more.
   */
  const ops = (queue: string, workerId: string, now: number, n: number, mode: FlowMode, access: Access, claimed: Claimed) => {
    let version: string | null = null
    let ahead: { readonly lim: LimitsRow; readonly start: Start | undefined; readonly groups: Map<number, GroupStart> } | undefined
    const lapsedIds = new Set<number>()
    const readAhead = Effect.map(
      rows(sql.readAhead, [queue, now, access === "optimistic", firstPageSize(n, mode), dueScheduledToRead(mode)], (r) => {
        const lim = toLimitsRow(r)
        const groups = new Map<number, GroupStart>()
        for (const g of JSON.parse(r.groups as string) as Array<Row>) groups.set(int(g.id, "id"), toGroupStart(g))
        // Rows it promoted are not in its own snapshot: `start` reads again.
        const start = int(r.promoted, "promoted") > 0 ? undefined : toStart(r)
        return { lim, start, groups, version: r.version as string }
      }),
      (r) => {
        if (r[0] === undefined) return undefined
        version = r[0].version
        ahead = r[0]
        return r[0].lim
      }
    )
    const start = (request: Parameters<FlowEffectOps["start"]>[0]) =>
      Effect.map(
        rows(sql.start, [queue, now, request.inFlight, request.queueLast, request.dueScheduled, request.pageSize] as Array<Param>, toStart),
        (r) => r[0]!
      )
    const walkOps: FlowEffectOps<SqlError | FlowConflict> = {
      limits: (lock) =>
        access !== "locked" ? readAhead : Effect.map(rows(lock ? sql.lockLimits : sql.limits, lock ? [queue, now] : [queue], toLimitsRow), (r) => r[0]),
      promote: () => Effect.void, // in `readAhead` or `lockLimits`
      start: (request) => {
        const read = ahead?.start
        const asked = ahead !== undefined && request.inFlight === (ahead.lim.concurrency !== null) &&
          request.queueLast === (ahead.lim.rateLimit !== null) && request.pageSize === firstPageSize(n, mode) &&
          request.dueScheduled === dueScheduledToRead(mode)
        const answer = read !== undefined && asked ? Effect.succeed(read) : start(request)
        return Effect.tap(answer, (s) => {
          for (const c of s.lapsed) lapsedIds.add(c.id)
        })
      },
      pending: (after, size) => candidates(sql.pendingAfter, [queue, after.priority, after.round, after.runAt, after.id, size]),
      groupStart: (group, round, id, cap, log) => {
        const read = ahead?.groups.get(id)
        if (read !== undefined && cap === ahead!.lim.groupConcurrency && log === (ahead!.lim.groupRateLimit !== null)) {
          return Effect.succeed(read)
        }
        return Effect.map(rows(sql.groupStart, [queue, now, group, round, id, cap, log] as Array<Param>, toGroupStart), (r) => r[0]!)
      },
      groupAhead: (group, round, id, cap) => count(sql.groupAhead, [queue, group, round, id, cap]),
      logAt: (scope, seq) => Effect.map(rows(sql.logAt, [queue, scope, seq], (r) => int(r.at, "at")), (r) => r[0]),
      claim: (id, writes) =>
        Effect.flatMap(
          db.all<Row>(sql.claim, [
            now,
            workerId,
            id,
            queue,
            writes.log.map(([scope]) => scope) as unknown as Param,
            writes.log.map(([, seq]) => seq) as unknown as Param,
            writes.round,
            access === "optimistic" ? version : null
          ]),
          (raw): Effect.Effect<JobRow | undefined, SqlError | FlowConflict> => {
            const r = raw[0]!
            if (r.gated !== true) return access === "optimistic" ? Effect.fail(new FlowConflict()) : Effect.succeed(undefined)
            if (typeof r.version === "string") version = r.version
            if (r.id === null || r.id === undefined) return Effect.succeed(undefined)
            return Effect.map(decoded(Effect.succeed([r]), toJobRow), ([row]) => {
              if (row!.state !== "claimed") claimed.died.push(row!)
              else claimed.rows.push(lapsedIds.has(row!.id) ? { ...row!, lapsed: true } : row!)
              return row
            })
          }
        ),
      prune: (scope, seq, before) => exec(sql.prune, [queue, scope, seq, before])
    }
    return walkOps
  }

  const walk = <E>(queue: string, workerId: string, now: number, n: number, mode: FlowMode, access: Access) =>
    runEffect(() => flowWalk(now, n, mode), ops(queue, workerId, now, n, mode, access, { rows: [], died: [] })) as Effect.Effect<
      FlowOutcome,
      SqlError | E
    >

  /**
   * Optimistic first; on a conflict, the rest of the claim (what the
   * optimistic walk did not take) in a transaction on the limits row's lock.
   */
  const claim = (queue: string, workerId: string, now: number, n: number): Effect.Effect<FlowOutcome, SqlError> => {
    const done: Claimed = { rows: [], died: [] }
    const optimistic = runEffect(() => flowWalk(now, n, "claim"), ops(queue, workerId, now, n, "claim", "optimistic", done))
    return Effect.catchIf(optimistic, (e): e is FlowConflict => e instanceof FlowConflict, () =>
      Effect.map(
        db.transaction(walk<never>(queue, workerId, now, n - done.rows.length, "claim", "locked")),
        (outcome): FlowOutcome => {
          if (done.rows.length === 0 && done.died.length === 0) return outcome
          const pendingBefore = done.rows.filter((row) => row.lapsed !== true).length
          if (!outcome.limited) {
            return { limited: true, rows: [...done.rows, ...done.died], taken: done.rows.length, takenPending: pendingBefore, reopenAt: null }
          }
          const rest = outcome.rows.filter((row) => row.state === "claimed")
          const restDied = outcome.rows.filter((row) => row.state !== "claimed")
          return {
            limited: true,
            rows: [...done.rows, ...rest, ...done.died, ...restDied],
            taken: done.rows.length + outcome.taken,
            takenPending: pendingBefore + outcome.takenPending,
            reopenAt: outcome.reopenAt
          }
        }
      )) as Effect.Effect<FlowOutcome, SqlError>
  }

  const freed = (queue: string) => exec(sql.notify, [notifier.channel, queue])
  const ackFreeing = (fence: Fence, queue: string) =>
    Effect.map(db.all(sql.ackFreeing, [fence.id, fence.token, notifier.channel, queue]), (r) => r.length > 0)

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
      Effect.map(walk<never>(queue, "", now, 1, "probe", "read"), (outcome) => {
        memory.saw(queue, outcome.limited)
        return outcome.limited
          ? { limited: true, claimable: outcome.taken > 0, reopenAt: outcome.reopenAt }
          : { limited: false, claimable: false, reopenAt: null }
      }),
    claimablePending: (queue, now) =>
      Effect.map(
        walk<never>(queue, "", now, Number.MAX_SAFE_INTEGER, "count", "read"),
        (outcome) => (outcome.limited ? outcome.takenPending : undefined)
      ),
    freed,
    ackFreeing
  }
  return { storage, claim }
}
