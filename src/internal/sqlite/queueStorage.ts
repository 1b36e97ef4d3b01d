import { Effect, Option } from "effect"
import type { Fence, JobRow, NewJob, QueueStorage, StatsRow } from "../engine.js"
import type { SqlError } from "@effect/sql/SqlError"
import { type DirectConnection, type Executor, notNow, type RunResult } from "./executor.js"
import { inTransaction } from "./transaction.js"

/**
 * What a claim writes: SET expressions all read the row as it was, so one
 * CASE per column either claims it or, when the candidate has expired or
 * spent its attempts, moves it to dead. `?1` is now, `?2` the worker.
 */
const claimSet = `UPDATE __alkstore_jobs SET
  state = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN 'dead' ELSE 'claimed' END,
  last_error = CASE WHEN expires_at IS NOT NULL AND expires_at <= ?1 THEN 'expired'
    WHEN attempts >= max_attempts THEN 'max attempts exceeded' ELSE last_error END,
  died_at = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN ?1 ELSE NULL END,
  claimed_until = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN NULL
    ELSE ?1 + visibility_timeout END,
  worker_id = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN NULL ELSE ?2 END,
  attempts = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN attempts
    ELSE attempts + 1 END,
  claim_token = CASE WHEN (expires_at IS NOT NULL AND expires_at <= ?1) OR attempts >= max_attempts THEN claim_token
    ELSE claim_token + 1 END`

/**
 * The best `limit` claimable ids of queue `?3` in claim order: due pending
 * rows from their index and, when `lapsed`, claimed rows whose lease lapsed.
 * Most claims find no lapsed lease (a read tells), and the pending side alone
 * costs a third less than the union.
 */
const candidates = (limit: string, lapsed: boolean) =>
  lapsed
    ? `
  SELECT id FROM (
    SELECT id, priority, run_at FROM (
      SELECT id, priority, run_at FROM __alkstore_jobs WHERE queue = ?3 AND state = 'pending'
      ORDER BY priority DESC, run_at, id LIMIT ${limit})
    UNION ALL
    SELECT id, priority, run_at FROM (
      SELECT id, priority, run_at FROM __alkstore_jobs WHERE queue = ?3 AND state = 'claimed' AND claimed_until <= ?1
      ORDER BY priority DESC, run_at, id LIMIT ${limit})
    ORDER BY priority DESC, run_at, id LIMIT ${limit})`
    : `
  SELECT id FROM __alkstore_jobs WHERE queue = ?3 AND state = 'pending'
  ORDER BY priority DESC, run_at, id LIMIT ${limit}`

/**
 * When a live job counts as expired at `?1` and is swept to dead: its expiry
 * passed and it is not a claim in flight (pending, scheduled, or claimed with
 * a lapsed lease). Maintenance, a keyed insert meeting the key's holder, and
 * `requeueDead` meeting it all use this one rule, so an expired job never
 * holds its key, while a worker that is on it keeps it until its lease ends.
 */
const expiredAt = `expires_at IS NOT NULL AND expires_at <= ?1 AND state <> 'dead'
      AND (state <> 'claimed' OR claimed_until <= ?1)`
const sweepExpired = `UPDATE __alkstore_jobs SET state = 'dead', last_error = 'expired', died_at = ?1,
      claimed_until = NULL, worker_id = NULL`

/**
 * The columns a claim returns: a `JobRow`, in this order (`rowOf` reads them
 * by position on the owned connection). Not `*`: the idempotency key is
 * nobody's business after a claim.
 */
const jobColumns = `id, queue, payload, state, priority, run_at, attempts, max_attempts, visibility_timeout, backoff_base,
  expires_at, claimed_until, worker_id, claim_token, created_at, last_error, died_at`

const rowOf = (v: ReadonlyArray<unknown>): JobRow => ({
  id: v[0] as number,
  queue: v[1] as string,
  payload: v[2] as string,
  state: v[3] as JobRow["state"],
  priority: v[4] as number,
  run_at: v[5] as number,
  attempts: v[6] as number,
  max_attempts: v[7] as number,
  visibility_timeout: v[8] as number,
  backoff_base: v[9] as number,
  expires_at: v[10] as number | null,
  claimed_until: v[11] as number | null,
  worker_id: v[12] as string | null,
  claim_token: v[13] as number,
  created_at: v[14] as number,
  last_error: v[15] as string | null,
  died_at: v[16] as number | null
})

/** Every statement of the SQLite queue mechanism (better-sqlite3 binds `?` by position). */
const sql = {
  insert: `INSERT INTO __alkstore_jobs
    (queue, payload, state, priority, run_at, max_attempts, visibility_timeout, backoff_base, expires_at, idempotency_key,
     created_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  // With a key, a live job holding it wins: nothing is written and its id is looked up
  // (unless that holder has expired: `expireKeyHolder` sweeps it, and the insert runs again).
  insertKeyed: `INSERT INTO __alkstore_jobs
    (queue, payload, state, priority, run_at, max_attempts, visibility_timeout, backoff_base, expires_at, idempotency_key,
     created_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT DO NOTHING`,
  liveKey: `SELECT id FROM __alkstore_jobs WHERE queue = ? AND idempotency_key = ? AND state <> 'dead'`,
  // `?1` now, `?2` the queue, `?3` the key (on the key's unique index).
  expireKeyHolder: `${sweepExpired} WHERE queue = ?2 AND idempotency_key = ?3 AND ${expiredAt}`,
  // What a claim must do first: promote due scheduled rows into the claim
  // index (the read keeps idle claims write-free), and whether lapsed leases
  // compete with the pending rows. `?1` is the queue, `?2` now.
  readiness: `SELECT EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = ?1 AND state = 'scheduled' AND run_at <= ?2) AS due,
      EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = ?1 AND state = 'claimed' AND claimed_until <= ?2) AS lapsed`,
  promoteDue: `UPDATE __alkstore_jobs SET state = 'pending' WHERE queue = ? AND state = 'scheduled' AND run_at <= ?`,
  // One statement claims the best candidate (pending, or claimed with a lapsed
  // lease), or moves it to dead when it meets it expired or spent. The
  // single-row form (`id = (…)`) matters outside a batch: `id IN (…)` makes
  // SQLite two-pass the update with a statement journal.
  claim: `${claimSet} WHERE id = (${candidates("1", true)}) RETURNING ${jobColumns}`,
  claimPending: `${claimSet} WHERE id = (${candidates("1", false)}) RETURNING ${jobColumns}`,
  // A batch inside a transaction (temp_store=MEMORY keeps its statement journal cheap).
  claimMany: `${claimSet} WHERE id IN (${candidates("?4", true)}) RETURNING ${jobColumns}`,
  claimManyPending: `${claimSet} WHERE id IN (${candidates("?4", false)}) RETURNING ${jobColumns}`,
  anyClaimable: `SELECT EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = ? AND state = 'pending')
      OR EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = ? AND state = 'scheduled' AND run_at <= ?)
      OR EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = ? AND state = 'claimed' AND claimed_until <= ?) AS any`,
  // Scalar min() is NULL if any argument is: take the smaller non-null one.
  nextDeadline: `SELECT (SELECT min(run_at) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'scheduled' AND run_at > ?2) AS a,
      (SELECT min(claimed_until) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'claimed' AND claimed_until > ?2) AS b`,
  ack: `DELETE FROM __alkstore_jobs WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  retry: `UPDATE __alkstore_jobs
    SET state = CASE WHEN ? > ? THEN 'scheduled' ELSE 'pending' END, run_at = ?,
      last_error = coalesce(?, last_error), claimed_until = NULL, worker_id = NULL
    WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  bury: `UPDATE __alkstore_jobs
    SET state = 'dead', died_at = ?, last_error = coalesce(?, last_error), claimed_until = NULL, worker_id = NULL
    WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  heartbeat: `UPDATE __alkstore_jobs SET claimed_until = ?
    WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  // Release gives the attempt back and keeps the job's place in line (its runAt is already due).
  release: `UPDATE __alkstore_jobs
    SET state = 'pending', attempts = max(attempts - 1, 0), claimed_until = NULL, worker_id = NULL
    WHERE id = ? AND claim_token = ? AND state = 'claimed'`,
  get: `SELECT * FROM __alkstore_jobs WHERE id = ? AND queue = ?`,
  cancel: `DELETE FROM __alkstore_jobs WHERE id = ? AND queue = ? AND state <> 'dead'`,
  stats: `SELECT
      (SELECT count(*) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'pending') AS pending,
      (SELECT count(*) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'scheduled' AND run_at <= ?2) AS due_scheduled,
      (SELECT count(*) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'scheduled' AND run_at > ?2) AS scheduled,
      (SELECT count(*) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'claimed') AS claimed,
      (SELECT count(*) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'dead') AS dead,
      (SELECT min(run_at) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'pending') AS oldest_pending,
      (SELECT min(run_at) FROM __alkstore_jobs WHERE queue = ?1 AND state = 'scheduled' AND run_at <= ?2) AS oldest_due`,
  dead: `SELECT * FROM __alkstore_jobs WHERE queue = ? AND state = 'dead' ORDER BY died_at DESC, id DESC LIMIT ?`,
  // A requeued job whose key a live job took meanwhile stays dead (the key names one live job),
  // unless that holder has expired: `?1` now, `?2` the queue, `?3` the dead job's id.
  requeueExpireHolder: `${sweepExpired} WHERE queue = ?2 AND idempotency_key = (
      SELECT idempotency_key FROM __alkstore_jobs WHERE id = ?3 AND queue = ?2 AND state = 'dead')
      AND ${expiredAt}`,
  // The expiry is cleared: an operator asked for this job to run (docs/queues-and-locks.md).
  requeueDead: `UPDATE __alkstore_jobs
    SET state = 'pending', run_at = ?1, attempts = 0, died_at = NULL, claimed_until = NULL, worker_id = NULL,
      expires_at = NULL
    WHERE id = ?3 AND queue = ?2 AND state = 'dead'
      AND (idempotency_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM __alkstore_jobs AS live WHERE live.queue = __alkstore_jobs.queue
          AND live.idempotency_key = __alkstore_jobs.idempotency_key AND live.state <> 'dead'))`,
  purgeDead: `DELETE FROM __alkstore_jobs WHERE queue = ? AND state = 'dead'`,
  purgeDeadBefore: `DELETE FROM __alkstore_jobs WHERE queue = ? AND state = 'dead' AND died_at < ?`,
  expire: `${sweepExpired} WHERE ${expiredAt}`,
  purgeAllDeadBefore: `DELETE FROM __alkstore_jobs WHERE state = 'dead' AND died_at < ?`
} as const

/**
 * `?N` parameters are not bound by number in better-sqlite3, so statements
 * written with `?N` for readability are rewritten to plain `?` once, with a
 * map from position to argument.
 */
const numbered = (text: string) => {
  const order: Array<number> = []
  const rewritten = text.replace(/\?(\d+)/g, (_, n: string) => {
    order.push(Number(n) - 1)
    return "?"
  })
  return {
    text: rewritten,
    bind: (args: ReadonlyArray<string | number | null>) => order.map((i) => args[i] ?? null)
  }
}

const readinessSql = numbered(sql.readiness)
const claimSql = { lapsed: numbered(sql.claim), pending: numbered(sql.claimPending) }
const claimManySql = { lapsed: numbered(sql.claimMany), pending: numbered(sql.claimManyPending) }

/**
 * The statements a claim runs, exported for the query-plan test (the claim
 * must stay on its partial indexes). The claims bind `[now, workerId, queue]`,
 * the batch claims `[now, workerId, queue, limit]`, the other two `[queue, now]`.
 */
export const claimStatements = {
  readiness: readinessSql,
  promoteDue: sql.promoteDue,
  claim: claimSql.lapsed,
  claimPending: claimSql.pending,
  claimMany: claimManySql.lapsed,
  claimManyPending: claimManySql.pending
} as const
const statsSql = numbered(sql.stats)
const nextDeadlineSql = numbered(sql.nextDeadline)

const claimOrder = (a: JobRow, b: JobRow) => b.priority - a.priority || a.run_at - b.run_at || a.id - b.id

const minOf = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.min(a, b))
const expireSql = numbered(sql.expire)
const expireKeyHolderSql = numbered(sql.expireKeyHolder)
const requeueExpireHolderSql = numbered(sql.requeueExpireHolder)
const requeueDeadSql = numbered(sql.requeueDead)

const jobParams = (job: NewJob) => [
  job.queue,
  job.payload,
  job.runAt > job.createdAt ? "scheduled" : "pending",
  job.priority,
  job.runAt,
  job.maxAttempts,
  job.visibilityTimeoutMillis,
  job.backoffBaseMillis,
  job.expiresAt ?? null,
  job.key ?? null,
  job.createdAt
]

/**
 * Keeps the claimed rows of one claim round; whether another round is due
 * (candidates moved to dead do not count toward `wanted`).
 */
const keepClaimed = (rows: ReadonlyArray<JobRow>, wanted: number, claimed: Array<JobRow>): boolean => {
  for (const row of rows) if (row.state === "claimed") claimed.push(row)
  return rows.length === wanted && rows.some((row) => row.state !== "claimed")
}

const expireKeyHolderParams = (job: NewJob) => expireKeyHolderSql.bind([job.createdAt, job.queue, job.key ?? null])

/**
 * The hot operations, synchronously, on a connection the store owns. A keyed
 * insert is one statement when the key is free; when a live job holds it,
 * that holder is swept first if it has expired (then the insert runs again),
 * else its id is the answer. Inside the caller's transaction throughout.
 */
const insertKeyedNow = (c: DirectConnection, job: NewJob): number => {
  const params = jobParams(job)
  const result = c.run(sql.insertKeyed, params)
  if (result.changes > 0) return Number(result.lastInsertRowid)
  if (c.run(expireKeyHolderSql.text, expireKeyHolderParams(job)).changes > 0) {
    return Number(c.run(sql.insertKeyed, params).lastInsertRowid)
  }
  return c.all<{ id: number }>(sql.liveKey, [job.queue, job.key ?? null])[0]!.id
}

const insertNow = (c: DirectConnection, job: NewJob): number =>
  job.key === undefined ? Number(c.run(sql.insert, jobParams(job)).lastInsertRowid) : insertKeyedNow(c, job)

/**
 * Jobs without keys go in as multi-row INSERTs of up to `INSERT_ROWS` rows:
 * one statement per hundred jobs instead of one per job (each statement
 * costs its own bind/step/reset round trip and AUTOINCREMENT bookkeeping,
 * ~1 µs, as much as the row itself). Rowids of one statement are consecutive
 * (AUTOINCREMENT: one more than the largest so far, row by row, under the
 * transaction's write lock), so the ids are counted back from the last.
 */
const INSERT_ROWS = 100
const insertRowsSql: Array<string> = []
const insertRowsText = (rows: number) =>
  (insertRowsSql[rows] ??= `${sql.insert}${", (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)".repeat(rows - 1)}`)

const insertManyNow = (c: DirectConnection, jobs: ReadonlyArray<NewJob>): Array<number> => {
  const ids: Array<number> = new Array(jobs.length)
  for (let from = 0; from < jobs.length; from += INSERT_ROWS) {
    const to = Math.min(jobs.length, from + INSERT_ROWS)
    // Written in place (no array per job): a batch is where a cold process spends its first thousand jobs.
    const params: Array<string | number | null> = new Array((to - from) * 11)
    for (let i = from, k = 0; i < to; i++) {
      const job = jobs[i]!
      params[k++] = job.queue
      params[k++] = job.payload
      params[k++] = job.runAt > job.createdAt ? "scheduled" : "pending"
      params[k++] = job.priority
      params[k++] = job.runAt
      params[k++] = job.maxAttempts
      params[k++] = job.visibilityTimeoutMillis
      params[k++] = job.backoffBaseMillis
      params[k++] = job.expiresAt ?? null
      params[k++] = null // no key: keyed jobs go one by one
      params[k++] = job.createdAt
    }
    const last = Number(c.run(insertRowsText(to - from), params).lastInsertRowid)
    for (let i = from; i < to; i++) ids[i] = last - (to - 1 - i)
  }
  return ids
}

interface Readiness {
  readonly due: number
  readonly lapsed: number
}

/** The claim statement for `wanted` rows, with its parameters, given what the readiness read said. */
const claimStatement = (ready: Readiness, queue: string, workerId: string, now: number, wanted: number) => {
  const statement = wanted === 1
    ? (ready.lapsed === 1 ? claimSql.lapsed : claimSql.pending)
    : (ready.lapsed === 1 ? claimManySql.lapsed : claimManySql.pending)
  return [statement.text, statement.bind([now, workerId, queue, wanted])] as const
}

/** Claimed rows in claim order (a batch's RETURNING comes in table order). */
const inClaimOrder = (rows: ReadonlyArray<JobRow>) => (rows.length > 1 ? [...rows].sort(claimOrder) : rows)

const claimNow = (c: DirectConnection, queue: string, workerId: string, now: number, limit: number) => {
  const ready = c.all<Readiness>(readinessSql.text, readinessSql.bind([queue, now]))[0]!
  if (ready.due === 1) c.run(sql.promoteDue, [queue, now])
  const claimed: Array<JobRow> = []
  let more = true
  while (more && claimed.length < limit) {
    const wanted = limit - claimed.length
    const rows = c.values(...claimStatement(ready, queue, workerId, now, wanted)).map(rowOf)
    more = keepClaimed(inClaimOrder(rows), wanted, claimed)
  }
  return claimed
}

const ackNow = (c: DirectConnection, fence: Fence) => c.run(sql.ack, [fence.id, fence.token]).changes > 0

export const makeQueueStorage = (db: Executor): QueueStorage => {
  const changed = (result: RunResult) => result.changes > 0
  const count = (result: RunResult) => result.changes
  const direct = db.direct
  const directNow = db.directNow

  // `insertKeyedNow` as effects (run inside a transaction).
  const insertKeyed = (job: NewJob): Effect.Effect<number, SqlError> =>
    Effect.gen(function*() {
      const params = jobParams(job)
      const result = yield* db.run(sql.insertKeyed, params)
      if (result.changes > 0) return Number(result.lastInsertRowid)
      if ((yield* db.run(expireKeyHolderSql.text, expireKeyHolderParams(job))).changes > 0) {
        return Number((yield* db.run(sql.insertKeyed, params)).lastInsertRowid)
      }
      return (yield* db.all<{ id: number }>(sql.liveKey, [job.queue, job.key ?? null]))[0]!.id
    })

  // One job without a key is one statement; a key needs its lookup in the same transaction.
  const insertOne = (job: NewJob): Effect.Effect<number, SqlError> =>
    job.key === undefined
      ? Effect.map(db.run(sql.insert, jobParams(job)), (r) => Number(r.lastInsertRowid))
      : db.transaction(insertKeyed(job))

  const insert = (jobs: ReadonlyArray<NewJob>): Effect.Effect<ReadonlyArray<number>, SqlError> => {
    if (jobs.length === 1) return Effect.map(insertOne(jobs[0]!), (id) => [id])
    if (jobs.some((job) => job.key !== undefined)) return db.transaction(Effect.forEach(jobs, insertKeyed))
    return db.transaction(
      Effect.map(db.runEach(sql.insert, jobs.map(jobParams)), (results) => results.map((r) => Number(r.lastInsertRowid)))
    )
  }

  const claimLoop = (queue: string, workerId: string, now: number, limit: number) =>
    Effect.gen(function*() {
      const ready = (yield* db.all<Readiness>(readinessSql.text, readinessSql.bind([queue, now])))[0]!
      if (ready.due === 1) yield* db.run(sql.promoteDue, [queue, now])
      const claimed: Array<JobRow> = []
      let more = true
      while (more && claimed.length < limit) {
        const wanted = limit - claimed.length
        const rows = yield* db.all<JobRow>(...claimStatement(ready, queue, workerId, now, wanted))
        more = keepClaimed(inClaimOrder(rows), wanted, claimed)
      }
      return claimed
    })

  const claim = (queue: string, workerId: string, now: number, limit: number) =>
    Effect.flatMap(inTransaction, (open) =>
      open || limit === 1
        ? claimLoop(queue, workerId, now, limit)
        : db.transaction(claimLoop(queue, workerId, now, limit)))

  const ack = (fence: Fence) => Effect.map(db.run(sql.ack, [fence.id, fence.token]), changed)

  // A keyed insert and its lookup share a transaction; a plain one is one statement.
  const insertOneBody = (job: NewJob) => (c: DirectConnection) =>
    job.key === undefined ? insertNow(c, job) : c.transaction(() => insertKeyedNow(c, job))

  const ackAndClaimBody = (fence: Fence, queue: string, workerId: string, now: number, limit: number) =>
  (c: DirectConnection) =>
    c.transaction(() => ({ acked: ackNow(c, fence), rows: claimNow(c, queue, workerId, now, limit) }))

  const hot: Pick<QueueStorage, "insert" | "insertOne" | "claim" | "ack" | "ackMany" | "ackAndClaim"> =
    direct === undefined
    ? {
      insert,
      insertOne,
      claim,
      ack,
      ackMany: (fences) => db.transaction(Effect.forEach(fences, ack)),
      ackAndClaim: (fence, queue, workerId, now, limit) =>
        db.transaction(
          Effect.zipWith(ack(fence), claim(queue, workerId, now, limit), (acked, rows) => ({ acked, rows }))
        )
    }
    : {
      insert: (jobs) =>
        direct((c) =>
          jobs.length === 1
            ? [insertOneBody(jobs[0]!)(c)]
            : jobs.some((job) => job.key !== undefined)
            ? c.transaction(() => jobs.map((job) => insertNow(c, job)))
            : c.transaction(() => insertManyNow(c, jobs))
        ),
      insertOne: (job) => direct(insertOneBody(job)),
      claim: (queue, workerId, now, limit) =>
        direct((c) =>
          limit === 1
            ? claimNow(c, queue, workerId, now, 1)
            : c.transaction(() => claimNow(c, queue, workerId, now, limit))
        ),
      ack: (fence) => direct((c) => ackNow(c, fence)),
      ackMany: (fences) => direct((c) => c.transaction(() => fences.map((fence) => ackNow(c, fence)))),
      ackAndClaim: (fence, queue, workerId, now, limit) => direct(ackAndClaimBody(fence, queue, workerId, now, limit))
    }

  const fenced = (text: string, head: ReadonlyArray<string | number | null>, fence: Fence) =>
    Effect.map(db.run(text, [...head, fence.id, fence.token]), changed)

  const inPlace: Pick<QueueStorage, "insertOneNow" | "ackAndClaimNow"> = directNow === undefined ? {} : {
    insertOneNow: (context, job) => {
      const id = directNow(context, insertOneBody(job))
      return id === notNow ? undefined : id
    },
    ackAndClaimNow: (context, fence, queue, workerId, now, limit) => {
      const result = directNow(context, ackAndClaimBody(fence, queue, workerId, now, limit))
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
    release: (fence) => fenced(sql.release, [], fence),
    get: (queue, id) => Effect.map(db.all<JobRow>(sql.get, [id, queue]), (rows) => Option.fromNullable(rows[0])),
    cancel: (queue, id) => Effect.map(db.run(sql.cancel, [id, queue]), changed),
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
          db.run(requeueExpireHolderSql.text, requeueExpireHolderSql.bind([now, queue, id])),
          Effect.map(db.run(requeueDeadSql.text, requeueDeadSql.bind([now, queue, id])), changed)
        )
      ),
    purgeDead: (queue, diedBefore) =>
      Effect.map(
        diedBefore === undefined
          ? db.run(sql.purgeDead, [queue])
          : db.run(sql.purgeDeadBefore, [queue, diedBefore]),
        count
      ),
    maintenance: (now, purgeDiedBefore) =>
      db.transaction(Effect.gen(function*() {
        const expired = yield* db.run(expireSql.text, expireSql.bind([now]))
        const purged = yield* db.run(sql.purgeAllDeadBefore, [purgeDiedBefore])
        return { expired: expired.changes, purged: purged.changes }
      }))
  }
}
