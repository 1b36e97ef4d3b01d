import type { SqlError } from "@effect/sql/SqlError"
import { type Clock, Effect, Option } from "effect"
import {
  type Fence,
  type JobRow,
  type NewJob,
  newJobValues,
  type HoldersBuried,
  type QueueStorage,
  sharesAllButPayload,
  type StatsRow,
  type StoppedStep
} from "../engine.js"
import type { Param, PgExecutor } from "./executor.js"
import { decoded, decodeError, int, intOrNull, toJobRow } from "./rows.js"
import type { Notifier } from "./notify.js"
import type { FlowOutcome } from "../flowOps.js"
import type { FlowMemory } from "../flowMemory.js"
import { giveBackClaims, givingBackOnError } from "./giveBack.js"
import { queueStatements } from "./queueStatements.js"
import { statementStop, stoppableApart } from "../stoppableClaim.js"

/** A claimed row, marked when it was taken from a lapsed lease. */
const claimedRow = (r: Record<string, unknown>): JobRow => {
  const row = toJobRow(r)
  return r.lapsed === true ? { ...row, lapsed: true } : row
}

const claimOrder = (a: JobRow, b: JobRow) => b.priority - a.priority || a.run_at - b.run_at || a.id - b.id

/**
 * Rows a round of maintenance or `purgeDead` (src/internal/rounds.ts) sweeps
 * or purges at most, of each kind: the server works while the event loop
 * runs, so the bound is only the transaction's (row locks held, WAL written
 * before it commits). A round of 100 000 dead jobs took ~0.1 s; smaller
 * rounds cost more per row (each reads the dead index again).
 */
export const maintenanceRows = 100_000

export const makeQueueStorage = (
  db: PgExecutor,
  schema: string,
  notifier: Notifier,
  memory: FlowMemory,
  flowClaim: (queue: string, workerId: string, clock: Clock.Clock, n: number) => Effect.Effect<FlowOutcome, SqlError>,
  buried: HoldersBuried
): QueueStorage => {
  const sql = queueStatements(schema, notifier)
  const ids = (rows: Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError>) =>
    decoded(rows, (row) => int(row.id, "id"))
  // A write that met the idempotency key's unique index (`__alkstore_jobs_key`): another live job holds the key.
  const keyTaken = (error: SqlError) => {
    const cause = error.cause as { readonly code?: unknown; readonly constraint?: unknown } | undefined
    return cause?.code === "23505" && cause.constraint === "__alkstore_jobs_key"
  }
  const changed = (rows: Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError>) =>
    Effect.map(rows, (r) => r.length > 0)
  const counted = (rows: Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError>) =>
    Effect.map(decoded(rows, (row) => int(row.n, "count")), (r) => r[0] ?? 0)

  // A live job holding the key wins, unless it has expired (swept, then insert again); if it
  // settles between the statements, insert again. The common case is the first statement alone; when the
  // key is held, the sweep and what follows it are one transaction, so an enqueue that fails after the
  // sweep leaves the holder as it was (docs/guarantees.md).
  const insertKeyed = (job: NewJob): Effect.Effect<number, SqlError> => {
    const params = [...newJobValues(job), ...notifier.params]
    const takeOver = Effect.gen(function*() {
      const swept: Array<unknown> = []
      while (true) {
        const expired = yield* db.all(sql.expireKeyHolder, [job.createdAt, job.queue, job.key ?? null])
        for (const row of expired) swept.push(row.last_error)
        const inserted = yield* ids(db.all(sql.insertKeyed, params))
        if (inserted.length > 0) return { id: inserted[0]!, swept }
        const live = yield* ids(db.all(sql.liveKey, [job.queue, job.key ?? null]))
        if (live.length > 0) return { id: live[0]!, swept }
      }
    })
    return Effect.flatMap(ids(db.all(sql.insertKeyed, params)), (inserted) =>
      inserted.length > 0 ? Effect.succeed(inserted[0]!) : Effect.map(db.transaction(takeOver), ({ id, swept }) => {
        if (swept.length > 0) buried(job.queue, swept)
        return id
      }))
  }

  // The enqueue's hot path: the id decoded in the statement's one continuation (no rows array, no
  // `Effect.try` and `map` layers of `ids`), the parameters in one array.
  const insertOne = (job: NewJob): Effect.Effect<number, SqlError> => {
    if (job.key !== undefined) return insertKeyed(job)
    const params: Array<Param> = newJobValues(job)
    params.push(notifier.params[0])
    return Effect.flatMap(db.all(sql.insert, params), (rows) => {
      try {
        return Effect.succeed(int(rows[0]!.id, "id"))
      } catch (cause) {
        return Effect.fail(decodeError(cause))
      }
    })
  }

  const insertMany = (jobs: ReadonlyArray<NewJob>) => {
    const column = <K extends keyof NewJob>(f: (job: NewJob) => Param) => jobs.map(f) as unknown as Param
    return Effect.map(
      ids(db.all(sql.insertMany, [
        column((j) => j.queue),
        column((j) => j.payload),
        column((j) => (j.runAt > j.createdAt ? "scheduled" : "pending")),
        column((j) => j.priority),
        column((j) => j.runAt),
        column((j) => j.maxAttempts),
        column((j) => j.visibilityTimeoutMillis),
        column((j) => j.backoffBaseMillis),
        column((j) => j.expiresAt ?? null),
        column((j) => j.createdAt),
        column((j) => j.traceContext ?? null),
        column((j) => j.group),
        ...notifier.params
      ])),
      (r) => r.sort((a, b) => a - b)
    )
  }

  const insertShared = (jobs: ReadonlyArray<NewJob>) => {
    const first = jobs[0]!
    return Effect.map(
      ids(db.all(sql.insertShared, [
        first.queue,
        jobs.map((job) => job.payload) as unknown as Param,
        first.runAt > first.createdAt ? "scheduled" : "pending",
        first.priority,
        first.runAt,
        first.maxAttempts,
        first.visibilityTimeoutMillis,
        first.backoffBaseMillis,
        first.expiresAt ?? null,
        first.createdAt,
        first.group,
        first.traceContext ?? null,
        ...notifier.params
      ])),
      (r) => r.sort((a, b) => a - b)
    )
  }

  const insert = (jobs: ReadonlyArray<NewJob>): Effect.Effect<ReadonlyArray<number>, SqlError> => {
    if (jobs.length === 1) return Effect.map(insertOne(jobs[0]!), (id) => [id])
    if (jobs.some((job) => job.key !== undefined)) return db.transaction(Effect.forEach(jobs, insertKeyed))
    if (jobs.every((job) => sharesAllButPayload(jobs[0]!, job))) return insertShared(jobs)
    // One queue per statement's notification; a batch of several queues (the scheduler's tick) groups them.
    const byQueue = new Map<string, Array<NewJob>>()
    for (const job of jobs) {
      const group = byQueue.get(job.queue)
      if (group === undefined) byQueue.set(job.queue, [job])
      else group.push(job)
    }
    if (byQueue.size === 1) return insertMany(jobs)
    return db.transaction(Effect.gen(function*() {
      const byId = new Map<NewJob, number>()
      for (const group of byQueue.values()) {
        const groupIds = yield* insertMany(group)
        group.forEach((job, i) => byId.set(job, groupIds[i]!))
      }
      return jobs.map((job) => byId.get(job)!)
    }))
  }

  // What a claim's statement answered after its caller (a take, a worker) was stopped: its claims given back
  // (no attempt spent).
  const stoppedClaims = (rows: ReadonlyArray<JobRow>) => giveBackClaims(db, sql.release, notifier.params, rows, "of a stopped claim")
  const stoppedAnswer = (raw: ReadonlyArray<Record<string, unknown>>) =>
    decoded(Effect.succeed(raw.filter((row) => row.id !== null)), claimedRow).pipe(
      Effect.flatMap(stoppedClaims),
      Effect.catchAll((error) => Effect.logWarning("alkstore: the answer of a stopped claim could not be read; its claims return when their lease lapses", error))
    )

  /**
   * Claims in rounds: candidates met dead do not count toward `limit`.
   * `first` is a first round already run (the fused ack + claim's), or none.
   */
  const claimRounds = (
    queue: string,
    workerId: string,
    clock: Clock.Clock,
    limit: number,
    first?: ReadonlyArray<JobRow>
  ): Effect.Effect<ReadonlyArray<JobRow>, SqlError> => {
    const claimed: Array<JobRow> = []
    // A later round that fails gives back what the earlier rounds claimed (each round commits on its own).
    return givingBackOnError(db, sql.release, notifier.params, () => claimed, Effect.gen(function*() {
      const now = clock.unsafeCurrentTimeMillis()
      const died: Array<JobRow> = []
      // Claimed by the flow walk, when a round found the queue limited meanwhile (in the walk's order).
      let walked: ReadonlyArray<JobRow> = []
      let rows = first
      while (claimed.length < limit) {
        const wanted = limit - claimed.length
        if (rows === undefined) {
          // Stoppable in a take (stoppableClaim.ts): a stop while it waits on the server gives back its answer.
          const raw = yield* db.allStoppable(wanted === 1 ? sql.claimOne : sql.claim, [now, workerId, queue, wanted], stoppedAnswer)
          if (raw[0]?.limited === true) {
            // Another process's `setLimits` committed between two rounds: the walk claims what is still
            // wanted, after what the earlier rounds claimed (committed, theirs to answer for).
            const rest = yield* stoppableApart(limitedClaim(queue, workerId, clock, wanted), stoppedClaims)
            if (claimed.length === 0 && died.length === 0) return rest
            walked = rest.filter((row) => row.state === "claimed")
            for (const row of rest) if (row.state !== "claimed") died.push(row)
            break
          }
          // A full batch of due scheduled rows was promoted and nothing claimed (queueStatements.ts): again.
          if (raw[0]?.backlog === true) continue
          rows = yield* decoded(Effect.succeed(raw.filter((row) => row.id !== null)), claimedRow)
        }
        for (const row of rows) (row.state === "claimed" ? claimed : died).push(row)
        if (rows.length < wanted || rows.every((row) => row.state === "claimed")) break
        rows = undefined
      }
      if (claimed.length > 1) claimed.sort(claimOrder)
      // Candidates met dead come after the claims (for the metrics; they are not claims).
      return died.length === 0 && walked.length === 0 ? claimed : [...claimed, ...walked, ...died]
    }))
  }

  // Flow control: the walk (optimistic, or in a transaction of its own on the limits row: flowStorage.ts).
  const limitedClaim = (queue: string, workerId: string, clock: Clock.Clock, limit: number): Effect.Effect<ReadonlyArray<JobRow>, SqlError> =>
    Effect.flatMap(flowClaim(queue, workerId, clock, limit), (outcome) => {
      memory.saw(queue, outcome.limited)
      return outcome.limited ? Effect.succeed(outcome.rows) : claimRounds(queue, workerId, clock, limit)
    })

  // A queue seen limited goes straight to the flow walk (no unlimited claim statement to learn it again). The
  // walk's transaction can wait on the limits row: in a take it runs apart (stoppableClaim.ts).
  const claim = (queue: string, workerId: string, clock: Clock.Clock, limit: number) =>
    memory.known(queue)
      ? stoppableApart(limitedClaim(queue, workerId, clock, limit), stoppedClaims)
      : claimRounds(queue, workerId, clock, limit)

  // The fused statement's later rounds (rare: limits met, a backlog, candidates met dead) stop at their statements
  // as its first does, and a worker stopped there hears of the ack its first round made.
  const laterRounds = <X>(
    rounds: Effect.Effect<X, SqlError>,
    stopped: StoppedStep | undefined,
    acked: boolean
  ) =>
    stopped === undefined ? rounds : Effect.onInterrupt(
      Effect.locally(rounds, statementStop, stopped.stop),
      () => Effect.sync(() => stopped.acked(acked))
    )

  // The fused statement's first round; more rounds (after candidates met dead) are plain claims.
  // The worker runs this once per job: the common outcome (every row returned is a claim, or none
  // came back) is decoded in place and returned without the rounds' generator (client CPU per job,
  // docs/performance-pg.md).
  const ackAndClaim: QueueStorage["ackAndClaim"] = (fence, queue, workerId, clock, limit, stopped) => {
    // Stoppable in a worker (stoppableClaim.ts): a stop while it waits on the server leaves the ack to finish
    // (the worker hears of it) and gives back what it claimed.
    const stoppedStep = stopped && ((raw: ReadonlyArray<Record<string, unknown>>) => {
      stopped.acked(raw.length > 0 && Number(raw[0]!.acked) > 0)
      return stoppedAnswer(raw)
    })
    return Effect.flatMap(
      db.allStoppable<Record<string, unknown>>(
        limit === 1 ? sql.ackAndClaimOne : sql.ackAndClaim,
        [clock.unsafeCurrentTimeMillis(), workerId, queue, limit, fence.id, fence.token],
        stoppedStep ?? stoppedAnswer,
        stopped?.stop
      ),
      (raw): Effect.Effect<{ readonly acked: boolean; readonly rows: ReadonlyArray<JobRow> }, SqlError> => {
        let acked: boolean
        const first: Array<JobRow> = []
        let allClaimed = true
        try {
          acked = raw.length > 0 && int(raw[0]!.acked, "acked") > 0
          if (raw[0]?.limited === true) {
            const walk = stoppableApart(limitedClaim(queue, workerId, clock, limit), stoppedClaims)
            return Effect.map(laterRounds(walk, stopped, acked), (rows) => ({ acked, rows }))
          }
          if (raw[0]?.backlog === true) {
            return Effect.map(laterRounds(claimRounds(queue, workerId, clock, limit), stopped, acked), (rows) => ({ acked, rows }))
          }
          for (const row of raw) {
            if (row.id === null) continue
            const decodedRow = claimedRow(row)
            if (decodedRow.state !== "claimed") allClaimed = false
            first.push(decodedRow)
          }
        } catch (cause) {
          return Effect.fail(decodeError(cause))
        }
        if (allClaimed) {
          if (first.length > 1) first.sort(claimOrder)
          return Effect.succeed({ acked, rows: first })
        }
        return Effect.map(laterRounds(claimRounds(queue, workerId, clock, limit, first), stopped, acked), (rows) => ({ acked, rows }))
      }
    )
  }

  const ack = (fence: Fence) => changed(db.all(sql.ack, [fence.id, fence.token]))

  const fenced = (text: string, head: ReadonlyArray<Param>, fence: Fence, tail: ReadonlyArray<Param> = []) =>
    changed(db.all(text, [...head, fence.id, fence.token, ...tail]))

  return {
    insert,
    insertOne,
    claim,
    hasClaimable: (queue, now) =>
      Effect.map(db.all<{ any: boolean }>(sql.anyClaimable, [queue, now]), (rows) => rows[0]?.any === true),
    nextDeadline: (queue, now) =>
      Effect.map(
        decoded(db.all(sql.nextDeadline, [queue, now]), (row) => intOrNull(row.at, "at")),
        (rows) => Option.fromNullable(rows[0] ?? null)
      ),
    ack,
    // Each handle answers as its own `ack` would: true for the claim that was deleted (its id *and* token, so a
    // stale handle beside the fresh claim of the same job is told it lost it), and once (the same handle twice
    // answers true, then false).
    ackMany: (fences) =>
      Effect.map(
        decoded(
          db.all(sql.ackMany, [fences.map((f) => f.id), fences.map((f) => f.token), ...notifier.params]),
          (row) => `${int(row.id, "id")}:${int(row.claim_token, "claim_token")}`
        ),
        (acked) => {
          const deleted = new Set(acked)
          return fences.map((fence) => deleted.delete(`${fence.id}:${fence.token}`))
        }
      ),
    ackAndClaim,
    retry: (fence, runAt, now, error) =>
      fenced(sql.retry, [runAt, now, error ?? null], fence, notifier.params),
    bury: (fence, now, error) => fenced(sql.bury, [now, error ?? null], fence, notifier.params),
    heartbeat: (fence, claimedUntil) => fenced(sql.heartbeat, [claimedUntil], fence),
    keepAlive: (fence, claimedUntil) => fenced(sql.keepAlive, [claimedUntil], fence),
    release: (fence) => fenced(sql.release, [], fence, notifier.params),
    get: (queue, id) =>
      Effect.map(decoded(db.all(sql.get, [id, queue]), toJobRow), (rows) => Option.fromNullable(rows[0])),
    cancel: (queue, id) => changed(db.all(sql.cancel, [id, queue, ...notifier.params])),
    stats: (queue, now) =>
      Effect.map(
        decoded(db.all(sql.stats, [queue, now]), (row): StatsRow => {
          const oldest = [intOrNull(row.oldest_pending, "oldest_pending"), intOrNull(row.oldest_due, "oldest_due")]
            .filter((x): x is number => x !== null)
          return {
            pending: int(row.pending, "pending") + int(row.due_scheduled, "due_scheduled"),
            scheduled: int(row.scheduled, "scheduled"),
            claimed: int(row.claimed, "claimed"),
            dead: int(row.dead, "dead"),
            oldestPendingRunAt: oldest.length === 0 ? null : Math.min(...oldest)
          }
        }),
        (rows) => rows[0]!
      ),
    dead: (queue, limit) => decoded(db.all(sql.dead, [queue, limit]), toJobRow),
    // The statement's NOT EXISTS cannot see a holder of the key whose transaction has not committed (an
    // application's keyed enqueue, another requeueDead): the UPDATE then meets the key's unique index once
    // that transaction commits. The key is held, so the job stays dead, as when the holder was seen: the
    // savepoint is rolled back and the answer is false, not the unique violation.
    requeueDead: (queue, id, now) =>
      db.transaction(Effect.zipRight(
        Effect.tap(db.all(sql.requeueExpireHolder, [now, queue, id]), (swept) => buried(queue, swept.map((row) => row.last_error))),
        Effect.catchIf(
          db.transaction(changed(db.all(sql.requeueDead, [now, queue, id, ...notifier.params]))),
          keyTaken,
          () => Effect.succeed(false)
        )
      )),
    purgeDead: (queue, diedBefore, limit) =>
      counted(
        diedBefore === undefined
          ? db.all(sql.purgeDead, [queue, limit])
          : db.all(sql.purgeDeadBefore, [queue, limit, diedBefore])
      ),
    maintenanceRows,
    claimsCanBeCutOff: true,
    claimsWaitOnServer: true,
    maintenance: (now, purgeDiedBefore, limit) =>
      db.transaction(Effect.gen(function*() {
        const expiredByQueue = yield* decoded(
          db.all(sql.expireSome, [now, limit]),
          (row) => ({ queue: row.queue as string, count: int(row.n, "count") })
        )
        const purged = yield* counted(db.all(sql.purgeSomeDeadBefore, [purgeDiedBefore, limit]))
        const pruned = yield* counted(db.all(sql.pruneFlowLog, [now, limit]))
        return { expired: expiredByQueue.reduce((sum, q) => sum + q.count, 0), purged, pruned, expiredByQueue }
      }))
  }
}
