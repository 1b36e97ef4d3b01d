import type { SqlError } from "@effect/sql/SqlError"
import { type Clock, Effect, Option } from "effect"
import type { Fence, FlowStorage, JobRow } from "../engine.js"
import { dueScheduledToRead, firstPageSize, flowWalk, roundToWrite } from "../flow.js"
import {
  type Candidate,
  type ClaimWrites,
  type FlowEffectOps,
  type FlowMode,
  type FlowOutcome,
  type GroupStart,
  type LimitsRow,
  runEffect,
  type Start
} from "../flowOps.js"
import type { FlowMemory } from "../flowMemory.js"
import type { ResolvedLimits } from "../options.js"
import type { Param, PgExecutor, Row } from "./executor.js"
import { flowStatements } from "./flowStatements.js"
import { givingBackOnError } from "./giveBack.js"
import { queueStatements } from "./queueStatements.js"
import type { Notifier } from "./notify.js"
import { decoded, decodeError, int, intOrNull, toJobRow } from "./rows.js"

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
  state: r.state as Candidate["state"],
  doomed: r.doomed === true
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


/** The claim `claimFirst` made before the walk ran, and the writes it made with it. */
interface FirstClaim {
  readonly id: number
  /** The row (claimed, or moved to dead), or none when the job was settled meanwhile. */
  readonly row: JobRow | undefined
  readonly log: ReadonlyArray<readonly [string, number]>
  readonly round: number | null
  /**
   * What `logAt` answered in the statement, before its own writes (the claim's log entries, the prune): the
   * walk's checks of that claim read these, not the log the statement left.
   */
  readonly logAts: ReadonlyArray<readonly [scope: string, seq: number, at: number | undefined]>
}

const sameWrites = (made: FirstClaim, writes: ClaimWrites) =>
  made.round === writes.round && made.log.length === writes.log.length &&
  made.log.every(([scope, seq], i) => writes.log[i]![0] === scope && writes.log[i]![1] === seq)

const disagreement = (made: FirstClaim, id: number | undefined, writes: ClaimWrites | undefined) =>
  new Error(
    `flow control: the one-statement claim took job ${made.id} (${JSON.stringify(made.log)}, round ${made.round}) ` +
      `but the walk ${id === undefined ? "claimed nothing" : `claims job ${id} (${JSON.stringify(writes?.log)}, round ${writes?.round})`}`
  )

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
  readonly claim: (queue: string, workerId: string, clock: Clock.Clock, n: number) => Effect.Effect<FlowOutcome, SqlError>
}

export const makeFlowStorage = (db: PgExecutor, schema: string, notifier: Notifier, memory: FlowMemory): PgFlow => {
  const sql = flowStatements(schema)
  const release = queueStatements(schema, notifier).release
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
    // What `claimFirst` claimed before the walk ran: the walk's first claim must be exactly it.
    let first: FirstClaim | undefined
    // It claimed the walk's one claim (and pruned the logs as the walk's end would).
    let firstMade = false
    const lapsedIds = new Set<number>()
    const claimedRow = (row: JobRow) => {
      if (row.state !== "claimed") {
        claimed.died.push(row)
        // Buried: the group counts read ahead still count it (the walk passes over it from now on).
        if (ahead !== undefined) ahead = { ...ahead, groups: new Map() }
      } else claimed.rows.push(lapsedIds.has(row.id) ? { ...row, lapsed: true } : row)
    }
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
    // A claim of one job: the read-ahead and, when the walk's first candidate is the flow index's head and
    // the limits admit it, its claim — one round trip (`flowStatements.claimFirst`).
    const claimFirst = Effect.flatMap(
      db.all<Row>(sql.claimFirst, [now, workerId, queue]),
      (raw): Effect.Effect<LimitsRow | undefined, SqlError | FlowConflict> => {
        const r = raw[0]
        if (r === undefined) return Effect.succeed(undefined)
        if (r.due_any === true) return readAhead // due scheduled rows to promote first
        if (r.fast === true && r.gated !== true) return Effect.fail(new FlowConflict())
        return Effect.try({
          try: () => {
            const lim = toLimitsRow(r)
            const head = r.h_id === null || r.h_id === undefined ? undefined : toCandidate({
              id: r.h_id,
              priority: r.h_priority,
              round: r.h_round,
              run_at: r.h_run_at,
              group_key: r.h_group,
              state: "pending"
            })
            const groups = new Map<number, GroupStart>()
            if (head !== undefined) {
              groups.set(head.id, {
                inFlight: int(r.g_in_flight, "g_in_flight"),
                ahead: int(r.g_ahead, "g_ahead"),
                last: int(r.g_last, "g_last")
              })
            }
            const start: Start = {
              inFlight: int(r.in_flight, "in_flight"),
              queueLast: int(r.queue_last, "queue_last"),
              lapsed: candidatesOf(r.lapsed),
              dueScheduled: [],
              page: head === undefined ? [] : [head]
            }
            version = r.version as string
            ahead = { lim, start, groups }
            if (r.fast === true && head !== undefined) {
              if (typeof r.claimed_version === "string") version = r.claimed_version
              const log: Array<readonly [string, number]> = []
              if (lim.rateLimit !== null) log.push(["", start.queueLast + 1])
              if (lim.groupRateLimit !== null) log.push([`#${head.group}`, groups.get(head.id)!.last + 1])
              const logAts: Array<readonly [string, number, number | undefined]> = []
              if (lim.rateLimit !== null) {
                logAts.push(["", start.queueLast + 1 - lim.rateLimit, intOrNull(r.rate_at, "rate_at") ?? undefined])
              }
              if (lim.groupRateLimit !== null) {
                const g = groups.get(head.id)!
                logAts.push([`#${head.group}`, g.last + 1 - lim.groupRateLimit, intOrNull(r.g_rate_at, "g_rate_at") ?? undefined])
              }
              first = {
                id: head.id,
                row: r.id === null || r.id === undefined ? undefined : toJobRow(r),
                log,
                round: roundToWrite(head.round, lim.currentRound),
                logAts
              }
            }
            return lim
          },
          catch: decodeError
        })
      }
    )
    const walkOps: FlowEffectOps<SqlError | FlowConflict> = {
      limits: (lock) =>
        access === "locked"
          ? Effect.map(rows(lock ? sql.lockLimits : sql.limits, lock ? [queue, now] : [queue], toLimitsRow), (r) => r[0])
          : access === "optimistic" && n === 1 && mode === "claim"
          ? claimFirst
          : readAhead,
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
      extra: (kind, after) =>
        Effect.tap(
          candidates(kind === "lapsed" ? sql.lapsedAfter : sql.dueAfter, [queue, now, after.priority, after.round, after.runAt, after.id]),
          (page) => {
            if (kind === "lapsed") for (const c of page) lapsedIds.add(c.id)
          }
        ),
      groupStart: (group, round, id, cap, log) => {
        const read = ahead?.groups.get(id)
        if (read !== undefined && cap === ahead!.lim.groupConcurrency && log === (ahead!.lim.groupRateLimit !== null)) {
          return Effect.succeed(read)
        }
        return Effect.map(rows(sql.groupStart, [queue, now, group, round, id, cap, log] as Array<Param>, toGroupStart), (r) => r[0]!)
      },
      groupAhead: (group, round, id, cap) => count(sql.groupAhead, [queue, group, round, id, cap]),
      logAt: (scope, seq) => {
        const read = first?.logAts.find(([s, q]) => s === scope && q === seq)
        return read !== undefined
          ? Effect.succeed(read[2])
          : Effect.map(rows(sql.logAt, [queue, scope, seq], (r) => int(r.at, "at")), (r) => r[0])
      },
      claim: (id, writes) => {
        if (first !== undefined) {
          // Claimed by `claimFirst` with the walk's own rules for a first claim: the walk must agree.
          const made = first
          first = undefined
          if (made.id !== id || !sameWrites(made, writes)) return Effect.die(disagreement(made, id, writes))
          if (made.row !== undefined) claimedRow(made.row)
          firstMade = made.row?.state === "claimed"
          return Effect.succeed(made.row)
        }
        return Effect.flatMap(
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
              claimedRow(row!)
              return row
            })
          }
        )
      },
      // After a claim by `claimFirst` (the walk's one claim), its statement pruned what the walk prunes.
      prune: (scope, seq, before) => (firstMade ? Effect.void : exec(sql.prune, [queue, scope, seq, before]))
    }
    /** Fails (a defect) when `claimFirst` claimed a job the walk did not claim. */
    const settled = Effect.suspend(() => (first === undefined ? Effect.void : Effect.die(disagreement(first, undefined, undefined))))
    return { ops: walkOps, settled }
  }

  const walkOf = (queue: string, workerId: string, now: number, n: number, mode: FlowMode, access: Access, claimed: Claimed) => {
    const { ops: walkOps, settled } = ops(queue, workerId, now, n, mode, access, claimed)
    return Effect.zipLeft(runEffect(() => flowWalk(now, n, mode), walkOps), settled)
  }
  const walk = <E>(queue: string, workerId: string, now: number, n: number, mode: FlowMode, access: Access) =>
    walkOf(queue, workerId, now, n, mode, access, { rows: [], died: [] }) as Effect.Effect<FlowOutcome, SqlError | E>

  /**
   * Optimistic first; on a conflict, the rest of the claim (what the
   * optimistic walk did not take) in a transaction on the limits row's lock.
   * The optimistic statements never wait for that lock (`SKIP LOCKED`: a
   * held row is a conflict); the locked walk reads the clock once it holds
   * it, so a claim that waited there is judged, and stamped in its rate
   * window, when it is made.
   */
  const claim = (queue: string, workerId: string, clock: Clock.Clock, n: number): Effect.Effect<FlowOutcome, SqlError> => {
    const done: Claimed = { rows: [], died: [] }
    const optimistic = walkOf(queue, workerId, clock.unsafeCurrentTimeMillis(), n, "claim", "optimistic", done)
    const locked = Effect.zipRight(
      exec(sql.lockRow, [queue]),
      Effect.suspend(() => walk<never>(queue, workerId, clock.unsafeCurrentTimeMillis(), n - done.rows.length, "claim", "locked"))
    )
    // A failure after the optimistic walk's own statements committed claims gives those back (the locked
    // walk's are in its transaction).
    return givingBackOnError(db, release, notifier.params, () => done.rows, Effect.catchIf(optimistic, (e): e is FlowConflict => e instanceof FlowConflict, () =>
      Effect.map(
        db.transaction(locked),
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
      ))) as Effect.Effect<FlowOutcome, SqlError>
  }

  const freed = (queue: string) => exec(sql.notify, [notifier.channel, queue])
  const freedIfLimited = (queue: string) => exec(sql.notifyIfLimited, [notifier.channel, queue])
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
    freedIfLimited,
    ackFreeing
  }
  return { storage, claim }
}
