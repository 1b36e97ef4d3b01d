/**
 * How jobs go into the SQLite table, synchronously on a connection the store
 * owns (src/internal/sqlite/queueStorage.ts runs them): one job, one keyed
 * job, and a batch as multi-row INSERTs.
 */
import { type HoldersBuried, type NewJob, newJobValues, sharesAllButPayload } from "../engine.js"
import type { DirectConnection, Param } from "./executor.js"
import { flowInsertParams, flowInsertValues } from "./flowInsert.js"
import { nextJobId } from "./jobIds.js"
import { expireKeyHolderSql, insertColumns, sql } from "./queueStatements.js"

/** An insert's parameters: the job's values, then flow control's (its group's round, when limited). */
export const insertValues = (job: NewJob): Array<Param> => [...newJobValues(job), ...flowInsertParams(job)]

export const expireKeyHolderParams = (job: NewJob) => expireKeyHolderSql.bind([job.createdAt, job.queue, job.key ?? null])

/**
 * The hot operations, synchronously, on a connection the store owns. A keyed
 * insert is one statement when the key is free; when a live job holds it,
 * that holder is swept first if it has expired (then the insert runs again),
 * else its id is the answer. Inside the caller's transaction throughout.
 */
export const insertKeyedNow = (c: DirectConnection, job: NewJob, buried: HoldersBuried): number => {
  const params = insertValues(job)
  const result = c.run(sql.insertKeyed, params)
  if (result.changes > 0) return Number(result.lastInsertRowid)
  const swept = c.all<{ last_error: unknown }>(expireKeyHolderSql.text, expireKeyHolderParams(job))
  if (swept.length > 0) {
    buried(job.queue, swept.map((row) => row.last_error))
    return Number(c.run(sql.insertKeyed, params).lastInsertRowid)
  }
  return c.all<{ id: number }>(sql.liveKey, [job.queue, job.key ?? null])[0]!.id
}

export const insertNow = (c: DirectConnection, job: NewJob, buried: HoldersBuried): number =>
  job.key === undefined ? Number(c.run(sql.insert, insertValues(job)).lastInsertRowid) : insertKeyedNow(c, job, buried)

/**
 * Jobs without keys go in as multi-row INSERTs of up to `INSERT_ROWS` rows:
 * one statement per hundred jobs instead of one per job (each statement
 * costs its own bind/step/reset round trip and the id floor's reads,
 * ~1 µs, as much as the row itself). Rowids of one statement are consecutive
 * (the first row's id from jobIds.ts, each later one SQLite's one more than
 * the largest so far, under the transaction's write lock), so the ids are
 * counted back from the last.
 */
const INSERT_ROWS = 100
const insertRowsSql: Array<string> = []
const insertRowsText = (rows: number) =>
  (insertRowsSql[rows] ??= `${sql.insert}${`, (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ${flowInsertValues})`.repeat(rows - 1)}`)
/**
 * The same for a queue without limits, known so under this transaction's
 * write lock: the round is NULL, so no row pays the limits probe (limits set
 * later give the backlog its rounds, flow.ts).
 */
const unlimitedRowsSql: Array<string> = []
const unlimitedRowsText = (rows: number) =>
  (unlimitedRowsSql[rows] ??= `${sql.insertUnlimited}${`, (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)`.repeat(rows - 1)}`)
/** Parameters per row: `newJobValues` (13, the trace context and the group last) and `flowInsertParams` (4). */
const ROW_PARAMS = 17
const UNLIMITED_ROW_PARAMS = 13

/**
 * A batch's insert of `rows` jobs that differ in their payloads alone (one
 * `enqueueBatch`: one queue, one set of options, one clock reading) when
 * their queue has no limits: the shared values are named parameters, bound
 * once from one object (`SharedRow`), and each row binds only its payload,
 * a positional `?`: 11 + n values bound instead of 13 × n (better-sqlite3
 * binds each from JS, one call per value). (`?N` cannot be used: better-sqlite3
 * does not bind numbered parameters by position.)
 */
const insertSharedRows = (rows: number) => {
  const row = (id: string) =>
    `(${id}, @queue, ?, @state, @priority, @run_at, @max_attempts, @visibility_timeout, @backoff_base, @expires_at, NULL, @created_at, @trace_context, @group_key, NULL)`
  return `${insertColumns}${row(nextJobId)}${`, ${row("NULL")}`.repeat(rows - 1)}`
}

/** The named values of `insertSharedRows`. */
type SharedRow = {
  readonly queue: string
  readonly state: string
  readonly priority: number
  readonly run_at: number
  readonly max_attempts: number
  readonly visibility_timeout: number
  readonly backoff_base: number
  readonly expires_at: number | null
  readonly created_at: number
  readonly trace_context: string | null
  readonly group_key: string
}

const sharedRowsSql: Array<string> = []
const sharedRowsText = (rows: number) => (sharedRowsSql[rows] ??= insertSharedRows(rows))

/** The batch of `insertSharedRows`: the shared values (`first`'s) once, then each payload. */
const insertSharedNow = (c: DirectConnection, first: NewJob, payloads: ReadonlyArray<string>): Array<number> => {
  const ids: Array<number> = new Array(payloads.length)
  const shared: SharedRow = {
    queue: first.queue,
    state: first.runAt > first.createdAt ? "scheduled" : "pending",
    priority: first.priority,
    run_at: first.runAt,
    max_attempts: first.maxAttempts,
    visibility_timeout: first.visibilityTimeoutMillis,
    backoff_base: first.backoffBaseMillis,
    expires_at: first.expiresAt ?? null,
    created_at: first.createdAt,
    trace_context: first.traceContext ?? null,
    group_key: first.group
  }
  for (let from = 0; from < payloads.length; from += INSERT_ROWS) {
    const to = Math.min(payloads.length, from + INSERT_ROWS)
    const params: Array<Param | SharedRow> = new Array(1 + to - from)
    params[0] = shared
    for (let i = from, k = 1; i < to; i++) params[k++] = payloads[i]!
    const last = Number(c.run(sharedRowsText(to - from), params).lastInsertRowid)
    for (let i = from; i < to; i++) ids[i] = last - (to - 1 - i)
  }
  return ids
}

/** Whether jobs of one group (of one queue) come with different priorities. */
const mixesPriorities = (jobs: ReadonlyArray<NewJob>) => {
  const priorities = new Map<string, number>()
  for (const job of jobs) {
    const lane = `${job.queue}\u0000${job.group}`
    const priority = priorities.get(lane)
    if (priority === undefined) priorities.set(lane, job.priority)
    else if (priority !== job.priority) return true
  }
  return false
}

export const insertManyNow = (c: DirectConnection, jobs: ReadonlyArray<NewJob>): Array<number> => {
  // One queue (a batch's), and no limits on it: checked once, inside the transaction that inserts.
  const first = jobs[0]!
  const queue = first.queue
  let shared = first.key === undefined
  for (let i = 1; i < jobs.length && shared; i++) shared = sharesAllButPayload(first, jobs[i]!)
  const unlimited = (shared || jobs.every((job) => job.queue === queue)) &&
    c.all(sql.hasLimits, [queue]).length === 0
  return unlimited && shared ? insertSharedNow(c, first, jobs.map((job) => job.payload)) : insertRowsNow(c, jobs, unlimited)
}

/** `jobs` a row each, 100 rows per statement; `unlimited`: all of one queue that has no limits (no rounds). */
const insertRowsNow = (c: DirectConnection, jobs: ReadonlyArray<NewJob>, unlimited: boolean): Array<number> => {
  const ids: Array<number> = new Array(jobs.length)
  const perRow = unlimited ? UNLIMITED_ROW_PARAMS : ROW_PARAMS
  // Rows of one statement read the table as it was before it: a group's rows there take its round plus their
  // place, each from its own priority's rotation — out of enqueue order when one group's rows differ in
  // priority (a scheduler tick's). Those batches go a row per statement, each seeing the rows before it.
  const rows = unlimited || !mixesPriorities(jobs) ? INSERT_ROWS : 1
  for (let from = 0; from < jobs.length; from += rows) {
    const to = Math.min(jobs.length, from + rows)
    // Written in place (no array per job): a batch is where a cold process spends its first thousand jobs.
    const params: Array<string | number | null> = new Array((to - from) * perRow)
    // Jobs of one group in one statement take consecutive rounds (flowInsert.ts).
    const offsets = new Map<string, number>()
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
      params[k++] = job.traceContext ?? null
      params[k++] = job.group
      if (unlimited) continue
      const lane = `${job.queue}\u0000${job.group}`
      const offset = offsets.get(lane) ?? 0
      offsets.set(lane, offset + 1)
      // `flowInsertParams`, inline.
      params[k++] = job.group
      params[k++] = job.priority
      params[k++] = offset
      params[k++] = job.queue
    }
    const text = unlimited ? unlimitedRowsText(to - from) : insertRowsText(to - from)
    const last = Number(c.run(text, params).lastInsertRowid)
    for (let i = from; i < to; i++) ids[i] = last - (to - 1 - i)
  }
  return ids
}

/**
 * A batch of `template`'s job with each of `payloads` (no key): one queue, so whether it has limits is read
 * once, inside the transaction that inserts; without limits the rows go in as `insertSharedRows`, with no job
 * object made per payload (a batch is where a cold process spends its first thousand jobs).
 */
export const insertPayloadsNow = (c: DirectConnection, template: NewJob, payloads: ReadonlyArray<string>): Array<number> =>
  c.all(sql.hasLimits, [template.queue]).length === 0
    ? insertSharedNow(c, template, payloads)
    : insertRowsNow(c, payloads.map((payload) => ({ ...template, payload })), false)
