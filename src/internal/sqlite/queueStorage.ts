import { type Clock, Effect, Option } from "effect"
import { type Fence, type HoldersBuried, type JobRow, type MaintenanceRow, type NewJob, type QueueStorage, type StatsRow } from "../engine.js"
import type { SqlError } from "@effect/sql/SqlError"
import { type DirectConnection, type Executor, notNow, type RunResult } from "./executor.js"
import { inTransaction } from "../transactionOwner.js"
import { expireKeyHolderParams, insertKeyedNow, insertManyNow, insertNow, insertPayloadsNow, insertValues } from "./jobInsert.js"
import { keepFloorParams, keepFloorSql, raiseFloorSql } from "./jobIds.js"
import { flowWalkEffect, flowWalkNow, limitedClaimNow } from "./flowStorage.js"
import type { FlowMemory } from "../flowMemory.js"
import {
  batchClaimSql,
  claimOrder,
  claimSql,
  type ClaimedColumns,
  claimedRowOf,
  claimedRowOfObject,
  expireKeyHolderSql,
  expireSomeSql,
  minOf,
  nextDeadlineSql,
  readinessSql,
  requeueDeadSql,
  requeueExpireHolderSql,
  sql,
  statsSql
} from "./queueStatements.js"

/**
 * Keeps the claimed rows of one claim round, and the candidates it moved to
 * dead apart; whether another round is due (those do not count toward `wanted`).
 */
const keepClaimed = (rows: ReadonlyArray<JobRow>, wanted: number, claimed: Array<JobRow>, died: Array<JobRow>): boolean => {
  let dead = false
  for (const row of rows) {
    if (row.state === "claimed") claimed.push(row)
    else {
      died.push(row)
      dead = true
    }
  }
  return rows.length === wanted && dead
}

/** A claim's answer: the claimed rows in claim order, then those met dead (rare: no copy without them). */
const claimResult = (claimed: Array<JobRow>, died: ReadonlyArray<JobRow>): ReadonlyArray<JobRow> =>
  died.length === 0 ? claimed : [...claimed, ...died]

/**
 * Marks the rows a lapsed-path claim took from a lapsed lease (`lapsedIds`
 * were read just before, in the same transaction). Only when a lapsed lease
 * exists, so the common claim pays nothing.
 */
const markLapsed = (rows: ReadonlyArray<JobRow>, lapsedIds: ReadonlyArray<{ id: number }>): ReadonlyArray<JobRow> => {
  if (lapsedIds.length === 0) return rows
  const ids = new Set(lapsedIds.map((r) => r.id))
  return rows.map((row) => (row.state === "claimed" && ids.has(row.id) ? { ...row, lapsed: true } : row))
}

interface Readiness {
  readonly due: number
  readonly lapsed: number
  readonly limited: number
}

/** The claim statement for `wanted` rows, with its parameters, given what the readiness read said. */
const claimStatement = (ready: Readiness, queue: string, workerId: string, now: number, wanted: number) => {
  const statement = wanted === 1
    ? (ready.lapsed === 1 ? claimSql.lapsed : claimSql.pending)
    : (ready.lapsed === 1 ? batchClaimSql(wanted).lapsed : batchClaimSql(wanted).pending)
  return [statement.text, statement.bind([now, workerId, queue, wanted])] as const
}

/** The lapsed leases a batch claim of `wanted` rows can pick, to mark them (`wanted` as a literal). */
const lapsedIdsStatement = (queue: string, workerId: string, now: number, wanted: number) => {
  const statement = batchClaimSql(wanted).lapsedCandidates
  return [statement.text, statement.bind([now, workerId, queue, wanted])] as const
}
const lapsedIdsNow = (c: DirectConnection, queue: string, workerId: string, now: number, wanted: number) =>
  c.all<{ id: number }>(...lapsedIdsStatement(queue, workerId, now, wanted))

/** Claimed rows in claim order (a batch's RETURNING comes in table order). */
const inClaimOrder = (rows: ReadonlyArray<JobRow>) => (rows.length > 1 ? [...rows].sort(claimOrder) : rows)

/**
 * A claim, judged at `clock`'s time when it runs: a body run again after a
 * busy file waited (executor.ts `waiting`) reads it again, and a limited
 * claim reads it once it holds the write lock (its rate window is stamped
 * when the claim is made, not when it was asked for).
 */
const claimNow = (
  c: DirectConnection,
  queue: string,
  workerId: string,
  clock: Clock.Clock,
  limit: number,
  memory: FlowMemory,
  /** Whether `c` is inside a transaction already (else the flow walk opens one). */
  open: boolean
): ReadonlyArray<JobRow> => {
  const now = clock.unsafeCurrentTimeMillis()
  // The time under the write lock: the transaction's own `BEGIN IMMEDIATE` may have waited `busy_timeout`.
  const locked = () => (open ? now : clock.unsafeCurrentTimeMillis())
  if (memory.known(queue)) {
    // A queue seen limited goes straight to its write lock, where one read gives the readiness and the limits.
    const underLock = () => limitedClaimNow(c, queue, workerId, locked(), limit, memory)
    const outcome = open ? underLock() : c.transaction(underLock)
    if (outcome?.limited === true) return outcome.rows
    memory.saw(queue, false) // its limits went: the plain claim below
  }
  const ready = c.all<Readiness>(readinessSql.text, readinessSql.bind([queue, now]))[0]!
  if (ready.limited === 1) {
    // Flow control: the walk decides, in a write transaction (docs/flow-control.md).
    // What the readiness read says holds under this claim's write lock: read again once it is taken.
    const walk = () => {
      const at = locked()
      const under = open ? ready : c.all<Readiness>(readinessSql.text, readinessSql.bind([queue, at]))[0]!
      return flowWalkNow(c, queue, workerId, at, limit, "claim", { due: under.due === 1, lapsed: under.lapsed === 1 })
    }
    const outcome = open ? walk() : c.transaction(walk)
    memory.saw(queue, outcome.limited)
    if (outcome.limited) return outcome.rows
    return claimNow(c, queue, workerId, clock, limit, memory, open) // the limits went meanwhile
  }
  if (ready.due === 1) c.run(sql.promoteDue, [queue, now])
  const claimed: Array<JobRow> = []
  const died: Array<JobRow> = []
  const toRow = claimedRowOf(queue, workerId, now)
  let more = true
  while (more && claimed.length < limit) {
    const wanted = limit - claimed.length
    const lapsedIds = ready.lapsed === 1
      ? lapsedIdsNow(c, queue, workerId, now, wanted)
      : []
    const rows = c.values(...claimStatement(ready, queue, workerId, now, wanted)).map(toRow)
    more = keepClaimed(inClaimOrder(markLapsed(rows, lapsedIds)), wanted, claimed, died)
  }
  return claimResult(claimed, died)
}

/** The plain ack and the id floor it leaves (jobIds.ts), inside an open transaction: for the newest job. */
const ackKeepingFloor = (c: DirectConnection, fence: Fence) => {
  const acked = c.run(sql.ack, [fence.id, fence.token]).changes > 0
  if (acked) c.run(keepFloorSql, keepFloorParams(fence.id))
  return acked
}

/** An ack: one statement unless the job is the newest (or the fence fails), inside an open transaction. */
const ackInTransaction = (c: DirectConnection, fence: Fence) =>
  c.run(sql.ackBelowNewest, [fence.id, fence.token]).changes > 0 || ackKeepingFloor(c, fence)

/** The same on its own: the newest job's delete and its floor then get a transaction of their own. */
const ackNow = (c: DirectConnection, fence: Fence) =>
  c.run(sql.ackBelowNewest, [fence.id, fence.token]).changes > 0 || c.transaction(() => ackKeepingFloor(c, fence))

/** A batch's acks in one transaction, the floor kept once for the newest of them. */
const ackManyNow = (c: DirectConnection, fences: ReadonlyArray<Fence>) =>
  c.transaction(() => {
    let newest = 0
    const acked = fences.map((fence) => {
      const done = c.run(sql.ack, [fence.id, fence.token]).changes > 0
      if (done && fence.id > newest) newest = fence.id
      return done
    })
    if (newest > 0) c.run(keepFloorSql, keepFloorParams(newest))
    return acked
  })

/**
 * Rows a round of maintenance or `purgeDead` (src/internal/rounds.ts) sweeps
 * or purges at most, of each kind: a round's statements block the event loop
 * while they run (~4 µs a dead job of 2 KB purged), so a round of 2 000 holds
 * it for milliseconds.
 */
export const maintenanceRows = 2_000

/** `expiredByQueue` of the rows a maintenance round swept, each naming its queue (PostgreSQL groups in SQL). */
const countByQueue = (rows: ReadonlyArray<{ readonly queue: string }>): MaintenanceRow["expiredByQueue"] => {
  const counts = new Map<string, number>()
  for (const { queue } of rows) counts.set(queue, (counts.get(queue) ?? 0) + 1)
  return Array.from(counts, ([queue, count]) => ({ queue, count }))
}

export const makeQueueStorage = (db: Executor, memory: FlowMemory, buried: HoldersBuried): QueueStorage => {
  const changed = (result: RunResult) => result.changes > 0
  const direct = db.direct
  const directNow = db.directNow

  // `insertKeyedNow` as effects (run inside a transaction).
  const insertKeyed = (job: NewJob): Effect.Effect<number, SqlError> =>
    Effect.gen(function*() {
      const params = insertValues(job)
      const result = yield* db.run(sql.insertKeyed, params)
      if (result.changes > 0) return Number(result.lastInsertRowid)
      const swept = yield* db.all<{ last_error: unknown }>(expireKeyHolderSql.text, expireKeyHolderParams(job))
      if (swept.length > 0) {
        buried(job.queue, swept.map((row) => row.last_error))
        return Number((yield* db.run(sql.insertKeyed, params)).lastInsertRowid)
      }
      return (yield* db.all<{ id: number }>(sql.liveKey, [job.queue, job.key ?? null]))[0]!.id
    })

  // One job without a key is one statement; a key needs its lookup in the same transaction.
  const insertOne = (job: NewJob): Effect.Effect<number, SqlError> =>
    job.key === undefined
      ? Effect.map(db.run(sql.insert, insertValues(job)), (r) => Number(r.lastInsertRowid))
      : db.transaction(insertKeyed(job))

  const insert = (jobs: ReadonlyArray<NewJob>): Effect.Effect<ReadonlyArray<number>, SqlError> => {
    if (jobs.length === 1) return Effect.map(insertOne(jobs[0]!), (id) => [id])
    if (jobs.some((job) => job.key !== undefined)) return db.transaction(Effect.forEach(jobs, insertKeyed))
    return db.transaction(
      Effect.map(db.runEach(sql.insert, jobs.map(insertValues)), (results) => results.map((r) => Number(r.lastInsertRowid)))
    )
  }

  // `claimNow` as effects (over an application's client): a limited claim reads the clock once its
  // transaction holds the write lock.
  const claimLoop = (queue: string, workerId: string, clock: Clock.Clock, limit: number): Effect.Effect<ReadonlyArray<JobRow>, SqlError> =>
    Effect.gen(function*() {
      const now = clock.unsafeCurrentTimeMillis()
      const ready = (yield* db.all<Readiness>(readinessSql.text, readinessSql.bind([queue, now])))[0]!
      if (ready.limited === 1) {
        const outcome = yield* db.transaction(
          Effect.suspend(() => flowWalkEffect(db, queue, workerId, clock.unsafeCurrentTimeMillis(), limit, "claim"))
        )
        memory.saw(queue, outcome.limited)
        if (outcome.limited) return outcome.rows
        return yield* claimLoop(queue, workerId, clock, limit)
      }
      if (ready.due === 1) yield* db.run(sql.promoteDue, [queue, now])
      const claimed: Array<JobRow> = []
      const died: Array<JobRow> = []
      const toRow = claimedRowOfObject(queue, workerId, now)
      let more = true
      while (more && claimed.length < limit) {
        const wanted = limit - claimed.length
        const lapsedIds = ready.lapsed === 1
          ? yield* db.all<{ id: number }>(...lapsedIdsStatement(queue, workerId, now, wanted))
          : []
        const rows = (yield* db.all<ClaimedColumns>(...claimStatement(ready, queue, workerId, now, wanted))).map(toRow)
        more = keepClaimed(inClaimOrder(markLapsed(rows, lapsedIds)), wanted, claimed, died)
      }
      return claimResult(claimed, died)
    })

  const claim = (queue: string, workerId: string, clock: Clock.Clock, limit: number) =>
    Effect.flatMap(inTransaction, (open) =>
      open || limit === 1
        ? claimLoop(queue, workerId, clock, limit)
        : db.transaction(claimLoop(queue, workerId, clock, limit)))

  // A delete of job `id` inside a transaction, then the id floor it leaves (jobIds.ts): whether it deleted.
  const deleteKeepingFloor = (deleted: Effect.Effect<RunResult, SqlError>, id: number) =>
    db.transaction(Effect.flatMap(deleted, (result) =>
      result.changes > 0 ? Effect.as(db.run(keepFloorSql, keepFloorParams(id)), true) : Effect.succeed(false)))

  // `ackNow` as effects (over an application's client).
  const ack = (fence: Fence) =>
    Effect.flatMap(db.run(sql.ackBelowNewest, [fence.id, fence.token]), (below) =>
      below.changes > 0 ? Effect.succeed(true) : deleteKeepingFloor(db.run(sql.ack, [fence.id, fence.token]), fence.id))

  // A keyed insert and its lookup share a transaction; a plain one is one statement.
  const insertOneBody = (job: NewJob) => (c: DirectConnection) =>
    job.key === undefined ? insertNow(c, job, buried) : c.transaction(() => insertKeyedNow(c, job, buried))

  const ackAndClaimBody = (fence: Fence, queue: string, workerId: string, clock: Clock.Clock, limit: number) =>
  (c: DirectConnection) =>
    c.transaction(() => ({ acked: ackInTransaction(c, fence), rows: claimNow(c, queue, workerId, clock, limit, memory, true) }))

  const hot: Pick<QueueStorage, "insert" | "insertPayloads" | "insertOne" | "claim" | "ack" | "ackMany" | "ackAndClaim"> =
    direct === undefined
    ? {
      insert,
      insertOne,
      claim,
      ack,
      ackMany: (fences) => db.transaction(Effect.forEach(fences, ack)),
      ackAndClaim: (fence, queue, workerId, clock, limit) =>
        db.transaction(
          Effect.zipWith(ack(fence), claim(queue, workerId, clock, limit), (acked, rows) => ({ acked, rows }))
        )
    }
    : {
      insert: (jobs) =>
        direct((c) =>
          jobs.length === 1
            ? [insertOneBody(jobs[0]!)(c)]
            : jobs.some((job) => job.key !== undefined)
            ? c.transaction(() => jobs.map((job) => insertNow(c, job, buried)))
            : c.transaction(() => insertManyNow(c, jobs))
        ),
      insertPayloads: (template, payloads) =>
        direct((c) =>
          payloads.length === 1
            ? [insertOneBody({ ...template, payload: payloads[0]! })(c)]
            : c.transaction(() => insertPayloadsNow(c, template, payloads))
        ),
      insertOne: (job) => direct(insertOneBody(job)),
      claim: (queue, workerId, clock, limit) =>
        direct((c) =>
          limit === 1
            ? claimNow(c, queue, workerId, clock, 1, memory, false)
            : c.transaction(() => claimNow(c, queue, workerId, clock, limit, memory, true))
        ),
      ack: (fence) => direct((c) => ackNow(c, fence)),
      ackMany: (fences) => direct((c) => ackManyNow(c, fences)),
      ackAndClaim: (fence, queue, workerId, clock, limit) => direct(ackAndClaimBody(fence, queue, workerId, clock, limit))
    }

  /** Deletes the jobs `ids` names by primary key, one statement each (a plan no statistics can turn into a scan). */
  const deleteEach = (ids: Effect.Effect<ReadonlyArray<{ id: number }>, SqlError>) =>
    Effect.flatMap(ids, (rows) =>
      rows.length === 0 ? Effect.succeed(0) : Effect.as(db.runEach(sql.deleteJob, rows.map((row) => [row.id])), rows.length))

  const fenced = (text: string, head: ReadonlyArray<string | number | null>, fence: Fence) =>
    Effect.map(db.run(text, [...head, fence.id, fence.token]), changed)

  const inPlace: Pick<QueueStorage, "insertOneNow" | "ackAndClaimNow"> = directNow === undefined ? {} : {
    insertOneNow: (context, job) => {
      const id = directNow(context, insertOneBody(job))
      return id === notNow ? undefined : id
    },
    ackAndClaimNow: (context, fence, queue, workerId, clock, limit) => {
      const result = directNow(context, ackAndClaimBody(fence, queue, workerId, clock, limit))
      return result === notNow ? undefined : result
    }
  }

  return {
    ...hot,
    ...inPlace,
    hasClaimable: (queue, now) =>
      Effect.map(
        db.all<{ any: number }>(sql.anyClaimable, [queue, queue, now, queue, now]),
        (rows) => rows[0]?.any === 1
      ),
    nextDeadline: (queue, now) =>
      Effect.map(
        db.all<{ a: number | null; b: number | null }>(nextDeadlineSql.text, nextDeadlineSql.bind([queue, now])),
        (rows) => Option.fromNullable(minOf(rows[0]?.a ?? null, rows[0]?.b ?? null))
      ),
    retry: (fence, runAt, now, error) => fenced(sql.retry, [runAt, now, runAt, error ?? null], fence),
    bury: (fence, now, error) => fenced(sql.bury, [now, error ?? null], fence),
    heartbeat: (fence, claimedUntil) => fenced(sql.heartbeat, [claimedUntil], fence),
    keepAlive: (fence, claimedUntil) => fenced(sql.keepAlive, [claimedUntil], fence),
    release: (fence) => fenced(sql.release, [], fence),
    get: (queue, id) => Effect.map(db.all<JobRow>(sql.get, [id, queue]), (rows) => Option.fromNullable(rows[0])),
    cancel: (queue, id) => deleteKeepingFloor(db.run(sql.cancel, [id, queue]), id),
    stats: (queue, now) =>
      Effect.map(
        db.all<{
          pending: number
          due_scheduled: number
          scheduled: number
          claimed: number
          dead: number
          oldest_pending: number | null
          oldest_due: number | null
        }>(statsSql.text, statsSql.bind([queue, now])),
        (rows): StatsRow => {
          const row = rows[0]!
          return {
            pending: row.pending + row.due_scheduled,
            scheduled: row.scheduled,
            claimed: row.claimed,
            dead: row.dead,
            oldestPendingRunAt: minOf(row.oldest_pending, row.oldest_due)
          }
        }
      ),
    dead: (queue, limit) => db.all<JobRow>(sql.dead, [queue, limit]),
    requeueDead: (queue, id, now) =>
      db.transaction(
        Effect.zipRight(
          Effect.tap(
            db.all<{ last_error: unknown }>(requeueExpireHolderSql.text, requeueExpireHolderSql.bind([now, queue, id])),
            (swept) => buried(queue, swept.map((row) => row.last_error))
          ),
          Effect.map(db.run(requeueDeadSql.text, requeueDeadSql.bind([now, queue, id])), changed)
        )
      ),
    purgeDead: (queue, diedBefore, limit) =>
      db.transaction(Effect.zipRight(db.run(raiseFloorSql, []), deleteEach(
        diedBefore === undefined
          ? db.all<{ id: number }>(sql.deadOfQueue, [queue, limit])
          : db.all<{ id: number }>(sql.deadOfQueueBefore, [queue, diedBefore, limit])
      ))),
    maintenanceRows,
    claimsCanBeCutOff: direct === undefined,
    // A wait for the connection or a busy file ends at an interruption already (patience.ts).
    claimsWaitOnServer: false,
    maintenance: (now, purgeDiedBefore, limit) =>
      db.transaction(Effect.gen(function*() {
        const swept = yield* db.all<{ queue: string }>(expireSomeSql.text, expireSomeSql.bind([now, limit]))
        yield* db.run(raiseFloorSql, [])
        const purged = yield* deleteEach(db.all<{ id: number }>(sql.deadBefore, [purgeDiedBefore, limit]))
        const stale = yield* db.all<{ queue: string; scope: string }>(sql.staleFlowScopes, [now, limit])
        if (stale.length > 0) yield* db.runEach(sql.deleteFlowScope, stale.map((row) => [row.queue, row.scope]))
        return { expired: swept.length, purged, pruned: stale.length, expiredByQueue: countByQueue(swept) }
      }))
  }
}
