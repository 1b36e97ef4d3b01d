import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import Sqlite from "better-sqlite3"
import { Effect, Option } from "effect"

/** What an import copied. */
export interface Imported {
  /** Jobs copied, in every state. */
  readonly jobs: number
  /** Schedules copied, with their phase. */
  readonly schedules: number
  /** Lock rows copied, with their fencing tokens. */
  readonly locks: number
}

const jobColumns = [
  "id",
  "queue",
  "payload",
  "state",
  "priority",
  "run_at",
  "attempts",
  "max_attempts",
  "visibility_timeout",
  "backoff_base",
  "expires_at",
  "claimed_until",
  "worker_id",
  "claim_token",
  "idempotency_key",
  "created_at",
  "last_error",
  "died_at"
] as const
const scheduleColumns = [
  "name",
  "spec",
  "interval_ms",
  "queue",
  "payload",
  "priority",
  "max_attempts",
  "expires_ms",
  "next_fire_at",
  "created_at",
  "updated_at"
] as const
const lockColumns = ["name", "owner", "token", "expires_at"] as const
// Flow control's (migration 3_flow_control): copied when the SQLite store has them.
const flowJobColumns = ["group_key", "flow_round"] as const
const flowLimitsColumns = [
  "queue",
  "concurrency",
  "rate_limit",
  "rate_per",
  "group_concurrency",
  "group_rate_limit",
  "group_rate_per",
  "current_round",
  "updated_at"
] as const
const flowLogColumns = ["queue", "scope", "seq", "at"] as const
// The trace context (migration 4_trace_context) and the Effect stores' tables (5_effect_stores):
// copied when the SQLite store has them.
const effectStoresTables = {
  __alkstore_queue_ids: ["id", "queue", "offered_at"],
  __alkstore_rate_windows: ["key", "used", "expires_at", "granted"],
  __alkstore_rate_buckets: ["key", "tokens", "last_refill", "granted"]
} as const
const effectStoresCasts: Record<string, string> = {
  id: "text",
  key: "text",
  used: "double precision",
  expires_at: "double precision",
  tokens: "double precision",
  last_refill: "double precision",
  granted: "boolean"
}

const casts: Record<string, string> = { payload: "json" }
/** The other tables a used store may have rows in: a store with any is not fresh. */
const pgOnlyIfUsedTables = ["__alkstore_flow_limits", "__alkstore_flow_log", ...Object.keys(effectStoresTables)]
/** Rows per INSERT of the copy. */
const COPY_CHUNK = 5_000
const chunksOf = <A>(rows: ReadonlyArray<A>, size: number): Array<ReadonlyArray<A>> => {
  const chunks: Array<ReadonlyArray<A>> = []
  for (let i = 0; i < rows.length; i += size) chunks.push(rows.slice(i, i + size))
  return chunks
}
const textColumns = new Set(["queue", "state", "worker_id", "idempotency_key", "last_error", "name", "spec", "owner", "group_key", "scope"])

/**
 * Copies a SQLite store's rows (every job — pending, scheduled, claimed,
 * dead — with its trace context, every schedule, every lock row with its
 * fencing token, flow control's limits and rate log, and the Effect stores'
 * offered ids and rate counters) into the
 * PostgreSQL store's schema, in one transaction on the `SqlClient` in
 * context, read from one snapshot of the file, keeping ids (so handles and
 * logs still name the same jobs), and moves the id sequence past them. Run it
 * with the SQLite deployment stopped, into a freshly migrated PostgreSQL
 * store that was never used: it refuses a schema that holds any row or has
 * handed out a job id.
 */
export const importSqlite = (filename: string, schema: string): Effect.Effect<Imported, SqlError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const read = yield* Effect.try({
      try: () => {
        const db = new Sqlite(filename, { readonly: true, fileMustExist: true })
        try {
          // One read transaction: every table and the id high-water mark from one snapshot.
          db.exec("BEGIN")
          const all = (table: string, columns: ReadonlyArray<string>) =>
            db.prepare(`SELECT ${columns.join(", ")} FROM ${table}`).all() as Array<Record<string, unknown>>
          const has = (table: string) => db.prepare(`SELECT 1 FROM sqlite_master WHERE name = ?`).all(table).length > 0
          const flow = has("__alkstore_flow_limits")
          const traced = (db.prepare(`SELECT 1 FROM pragma_table_info('__alkstore_jobs') WHERE name = 'trace_context'`)
            .all()).length > 0
          const jobs = [...jobColumns, ...(flow ? flowJobColumns : []), ...(traced ? ["trace_context"] : [])]
          const stores = has("__alkstore_queue_ids")
          return {
            flow,
            jobColumns: jobs,
            jobs: all("__alkstore_jobs", jobs),
            effectStores: Object.entries(effectStoresTables).map(([table, columns]) => ({
              table,
              columns,
              rows: stores ? all(table, columns) : []
            })),
            schedules: all("__alkstore_scheduler_tasks", flow ? [...scheduleColumns, "group_key"] : scheduleColumns),
            locks: all("__alkstore_locks", lockColumns),
            limits: flow ? all("__alkstore_flow_limits", flowLimitsColumns) : [],
            log: flow ? all("__alkstore_flow_log", flowLogColumns) : [],
            // The largest id ever handed out: the newest job's, or the high-water mark of deleted newer ones
            // (the id floor since migration 6, AUTOINCREMENT's sequence before it).
            marks: [
              ...(has("__alkstore_id_floor") ? db.prepare(`SELECT v AS mark FROM __alkstore_id_floor`).all() : []),
              ...(has("sqlite_sequence")
                ? db.prepare(`SELECT seq AS mark FROM sqlite_sequence WHERE name = '__alkstore_jobs'`).all()
                : [])
            ] as Array<{ mark: number }>
          }
        } finally {
          db.close()
        }
      },
      catch: (cause) => new SqlError({ cause, message: `Failed to read the SQLite store ${filename}: ${String(cause)}` })
    })
    const copy = (
      table: string,
      columns: ReadonlyArray<string>,
      rows: ReadonlyArray<Record<string, unknown>>,
      extra = "",
      tableCasts: Record<string, string> = {}
    ) =>
      // In chunks: one array parameter per column of a whole large table would pass PostgreSQL's 1 GB per value.
      Effect.forEach(chunksOf(rows, COPY_CHUNK), (chunk) =>
        sql.unsafe(
          `INSERT INTO ${schema}.${table} (${columns.join(", ")}) ${extra}
           SELECT ${
            columns.map((c) => `${c}::${tableCasts[c] ?? casts[c] ?? (textColumns.has(c) ? "text" : "bigint")}`).join(", ")
          }
           FROM unnest(${columns.map((_, i) => `$${i + 1}::text[]`).join(", ")}) AS u(${columns.join(", ")})`,
          columns.map((c) => chunk.map((row) => (row[c] === null || row[c] === undefined ? null : String(row[c])))) as never
        ), { discard: true })
    return yield* sql.withTransaction(Effect.gen(function*() {
      // Fresh means never used, not merely empty now: a store whose jobs were all acked has handed out ids that
      // the imported jobs (and the sequence moved to the SQLite store's mark) would hand out again.
      const [existing] = yield* sql.unsafe<{ used: boolean }>(
        `SELECT pg_sequence_last_value(pg_get_serial_sequence($1, 'id')::regclass) IS NOT NULL
           OR ${
          ["__alkstore_jobs", "__alkstore_scheduler_tasks", "__alkstore_locks", ...pgOnlyIfUsedTables]
            .map((table) => `EXISTS (SELECT 1 FROM ${schema}.${table})`).join(" OR ")
        } AS used`,
        [`${schema}.__alkstore_jobs`]
      )
      if (existing!.used) {
        return yield* new SqlError({
          cause: new Error("not empty"),
          message: `The PostgreSQL store in schema ${schema} has been used (or an import into it was cut off): import into a fresh one`
        })
      }
      yield* copy("__alkstore_jobs", read.jobColumns, read.jobs, "OVERRIDING SYSTEM VALUE", { trace_context: "text" })
      yield* copy("__alkstore_scheduler_tasks", read.flow ? [...scheduleColumns, "group_key"] : scheduleColumns, read.schedules)
      yield* copy("__alkstore_locks", lockColumns, read.locks)
      yield* copy("__alkstore_flow_limits", flowLimitsColumns, read.limits)
      yield* copy("__alkstore_flow_log", flowLogColumns, read.log)
      for (const { columns, rows, table } of read.effectStores) yield* copy(table, columns, rows, "", effectStoresCasts)
      // New ids continue after the largest ever handed out (a loop: spreading every job's id as arguments
      // overflows the stack for a store of ~130 000 jobs).
      let high = 0
      for (const { mark } of read.marks) high = Math.max(high, mark)
      for (const row of read.jobs) high = Math.max(high, Number(row.id))
      // `setval`, which needs only UPDATE on the sequence (the application's role may import) and marks it
      // used, so the schema is never imported into again (ids handed out twice). It is not rolled back: an
      // import cut off after it leaves the schema refused as used (docs/engines.md). `ALTER … RESTART`, which
      // is, needs the table's owner and leaves the sequence reading as never used.
      if (high > 0) {
        yield* sql.unsafe(`SELECT setval(pg_get_serial_sequence($1, 'id'), $2::bigint)`, [`${schema}.__alkstore_jobs`, high])
      }
      return { jobs: read.jobs.length, schedules: read.schedules.length, locks: read.locks.length }
    })).pipe(
      // `@effect/sql`'s transaction turns a failed COMMIT (a connection cut off, a server restarting) into a
      // defect: it is the storage failure it is.
      Effect.catchSomeDefect((defect) => defect instanceof SqlError ? Option.some(Effect.fail(defect)) : Option.none())
    )
  })
