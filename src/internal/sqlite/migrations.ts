import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"
import { allApplied, checkRecorded, migrationFailures, migrationIdsOf } from "../migrationFailures.js"
import type { Executor } from "./executor.js"
import { idFloorTable } from "./jobIds.js"

/** One statement per `sql` call: SQLite runs only the first of several. */
const statements = (...sql: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const client = yield* SqlClient.SqlClient
    for (const statement of sql) yield* client.unsafe(statement)
  })

/**
 * The jobs table: migration 1's columns, with `id` defined as given, then `later` (the columns migrations
 * 3 and 4 add with ALTER TABLE, which migration 6's rebuild defines at once, in the same order).
 */
const jobsTable = (name: string, id: string, later = "") =>
  `CREATE TABLE ${name} (
      ${id},
      queue TEXT NOT NULL,
      payload TEXT NOT NULL,
      state TEXT NOT NULL,
      priority INTEGER NOT NULL,
      run_at INTEGER NOT NULL,
      attempts INTEGER NOT NULL DEFAULT 0,
      max_attempts INTEGER NOT NULL,
      visibility_timeout INTEGER NOT NULL,
      backoff_base INTEGER NOT NULL,
      expires_at INTEGER,
      claimed_until INTEGER,
      worker_id TEXT,
      claim_token INTEGER NOT NULL DEFAULT 0,
      idempotency_key TEXT,
      created_at INTEGER NOT NULL,
      last_error TEXT,
      died_at INTEGER${later}
    )`
const jobColumnsInOrder = `id, queue, payload, state, priority, run_at, attempts, max_attempts, visibility_timeout,
      backoff_base, expires_at, claimed_until, worker_id, claim_token, idempotency_key, created_at, last_error, died_at,
      group_key, flow_round, trace_context`
const jobIndexes = [
  `CREATE INDEX __alkstore_jobs_pending ON __alkstore_jobs (queue, priority DESC, run_at, id) WHERE state = 'pending'`,
  `CREATE INDEX __alkstore_jobs_scheduled ON __alkstore_jobs (queue, run_at) WHERE state = 'scheduled'`,
  `CREATE INDEX __alkstore_jobs_claimed ON __alkstore_jobs (queue, claimed_until) WHERE state = 'claimed'`,
  `CREATE INDEX __alkstore_jobs_dead ON __alkstore_jobs (queue, died_at) WHERE state = 'dead'`,
  `CREATE INDEX __alkstore_jobs_expiry ON __alkstore_jobs (expires_at) WHERE expires_at IS NOT NULL AND state <> 'dead'`,
  `CREATE UNIQUE INDEX __alkstore_jobs_key ON __alkstore_jobs (queue, idempotency_key) WHERE idempotency_key IS NOT NULL AND state <> 'dead'`
]
const deadJobIndexes = [
  `CREATE INDEX __alkstore_jobs_dead_by_id ON __alkstore_jobs (id) WHERE state = 'dead'`,
  `CREATE INDEX __alkstore_jobs_dead_queue_id ON __alkstore_jobs (queue, id) WHERE state = 'dead'`,
  `CREATE INDEX __alkstore_jobs_dead_since ON __alkstore_jobs (died_at) WHERE state = 'dead'`
]
const flowJobIndexes = [
  `CREATE INDEX __alkstore_jobs_flow ON __alkstore_jobs (queue, priority DESC, flow_round, run_at, id, group_key)
    WHERE state = 'pending' AND flow_round IS NOT NULL`,
  `CREATE INDEX __alkstore_jobs_flow_group ON __alkstore_jobs (queue, group_key, flow_round, id)
    WHERE state <> 'dead' AND flow_round IS NOT NULL`,
  `CREATE INDEX __alkstore_jobs_flow_claimed ON __alkstore_jobs (queue, group_key, claimed_until)
    WHERE state = 'claimed' AND flow_round IS NOT NULL`
]

/**
 * The engine's own tables. `state` is `pending` (due), `scheduled` (due
 * later: kept out of the claim index so a claim never walks future rows),
 * `claimed` or `dead`; acked and cancelled jobs are deleted. Ids are never
 * reused (AUTOINCREMENT until migration 6, a floor since: jobIds.ts): a stale
 * id (or handle) can never reach a newer job.
 */
export const migrationRecord = {
  "1_queues_and_locks": statements(
    jobsTable("__alkstore_jobs", "id INTEGER PRIMARY KEY AUTOINCREMENT"),
    ...jobIndexes,
    `CREATE TABLE __alkstore_locks (
      name TEXT PRIMARY KEY,
      owner TEXT NOT NULL,
      token INTEGER NOT NULL,
      expires_at INTEGER NOT NULL
    )`
  ),
  "2_scheduler": statements(
    `CREATE TABLE __alkstore_scheduler_tasks (
      name TEXT PRIMARY KEY,
      spec TEXT NOT NULL,
      interval_ms INTEGER NOT NULL,
      queue TEXT NOT NULL,
      payload TEXT NOT NULL,
      priority INTEGER NOT NULL,
      max_attempts INTEGER NOT NULL,
      expires_ms INTEGER,
      next_fire_at INTEGER NOT NULL,
      created_at INTEGER NOT NULL,
      updated_at INTEGER NOT NULL
    )`,
    `CREATE INDEX __alkstore_scheduler_tasks_due ON __alkstore_scheduler_tasks (next_fire_at)`
  ),
  // Flow control (docs/flow-control.md): a job's group ('' = none) and its fair-queueing round
  // (NULL outside queues with limits: those jobs stay out of every flow index, so unlimited queues
  // pay nothing), a queue's limits, and the sliding log of claim instants the rate limits count.
  "3_flow_control": statements(
    `ALTER TABLE __alkstore_jobs ADD COLUMN group_key TEXT NOT NULL DEFAULT ''`,
    `ALTER TABLE __alkstore_jobs ADD COLUMN flow_round INTEGER`,
    `ALTER TABLE __alkstore_scheduler_tasks ADD COLUMN group_key TEXT NOT NULL DEFAULT ''`,
    ...flowJobIndexes,
    `CREATE TABLE __alkstore_flow_limits (
      queue TEXT PRIMARY KEY,
      concurrency INTEGER,
      rate_limit INTEGER,
      rate_per INTEGER,
      group_concurrency INTEGER,
      group_rate_limit INTEGER,
      group_rate_per INTEGER,
      current_round INTEGER NOT NULL DEFAULT 0,
      updated_at INTEGER NOT NULL
    )`,
    `CREATE TABLE __alkstore_flow_log (
      queue TEXT NOT NULL,
      scope TEXT NOT NULL,
      seq INTEGER NOT NULL,
      at INTEGER NOT NULL,
      PRIMARY KEY (queue, scope, seq)
    ) WITHOUT ROWID`
  ),
  // The enqueuer's span as a W3C traceparent (docs/observability.md): the handler's span links to it.
  "4_trace_context": statements(`ALTER TABLE __alkstore_jobs ADD COLUMN trace_context TEXT`),
  // Effect's own interfaces (src/internal/effectStores/): the ids PersistedQueue elements were
  // offered with (kept for good, as its deduplication asks), and RateLimiter's counters. The
  // numbers are REAL: Effect computes them in doubles (a refill interval is window / limit).
  // `granted` says whether the last take was granted, which RETURNING alone could not tell.
  "5_effect_stores": statements(
    `CREATE TABLE __alkstore_queue_ids (
      id TEXT PRIMARY KEY,
      queue TEXT NOT NULL,
      offered_at INTEGER NOT NULL
    ) WITHOUT ROWID`,
    `CREATE TABLE __alkstore_rate_windows (
      key TEXT PRIMARY KEY,
      used REAL NOT NULL,
      expires_at REAL NOT NULL,
      granted INTEGER NOT NULL
    ) WITHOUT ROWID`,
    `CREATE TABLE __alkstore_rate_buckets (
      key TEXT PRIMARY KEY,
      tokens REAL NOT NULL,
      last_refill REAL NOT NULL,
      granted INTEGER NOT NULL
    ) WITHOUT ROWID`
  ),
  // Job ids kept unique by a floor instead of AUTOINCREMENT (jobIds.ts): ~5 µs less per enqueue. SQLite
  // cannot drop AUTOINCREMENT in place, so the table is rebuilt (one pass over its rows, once), with its
  // columns in the order migrations 1, 3 and 4 left them, and its indexes made again; the floor starts at
  // the sequence's high-water mark (read before the drop, which deletes the sequence's row).
  "6_job_ids_without_autoincrement": statements(
    jobsTable(
      "__alkstore_jobs_next",
      "id INTEGER PRIMARY KEY",
      `, group_key TEXT NOT NULL DEFAULT '', flow_round INTEGER, trace_context TEXT`
    ),
    `INSERT INTO __alkstore_jobs_next (${jobColumnsInOrder}) SELECT ${jobColumnsInOrder} FROM __alkstore_jobs`,
    idFloorTable,
    `INSERT INTO __alkstore_id_floor (only, v)
      VALUES (1, coalesce((SELECT seq FROM sqlite_sequence WHERE name = '__alkstore_jobs'), 0))`,
    `DROP TABLE __alkstore_jobs`,
    `ALTER TABLE __alkstore_jobs_next RENAME TO __alkstore_jobs`,
    ...jobIndexes,
    ...flowJobIndexes
  ),
  // (7 is PostgreSQL's flow index.) Dead jobs in the orders their readers ask for, so none of them sorts or
  // walks every dead job: a queue's dead-letter listing and every queue's (`Admin.jobs`, newest id first:
  // 180 ms for a queue with a million dead jobs, the whole table read when the dead are old), and the
  // retention purge (`died_at` across queues: each round read the dead index of every queue before its
  // cut-off, 20-25 ms inside the write lock with a million dead jobs still kept). Only deaths, requeues and
  // purges write them.
  "8_dead_job_indexes": statements(...deadJobIndexes),
  // A limited queue's group reads (its live claims; its live jobs ahead of a candidate; its last round, at
  // enqueue) from one index ordered by group then state, instead of `…_flow_group` and `…_flow_claimed`,
  // which every limited claim and ack wrote both: a claim moves its job's entry within the group's range,
  // an ack deletes it (flowInsert.ts). Dead jobs stay out of it, as they did.
  "9_flow_group_by_state": statements(
    `DROP INDEX __alkstore_jobs_flow_claimed`,
    `DROP INDEX __alkstore_jobs_flow_group`,
    `CREATE INDEX __alkstore_jobs_flow_group ON __alkstore_jobs (queue, group_key, state, flow_round, id, claimed_until)
      WHERE state <> 'dead' AND flow_round IS NOT NULL`
  )
}

export const migrations = Migrator.fromRecord(migrationRecord)

export const migrationsTable = "__alkstore_migrations"

const migrationIds = migrationIdsOf(migrationRecord)

/**
 * Whether every migration is applied already: a read, which in WAL mode
 * takes no lock, so a store opened on an up-to-date file (every operator
 * command, every process after the first) does not wait for another
 * connection's write lock only to learn there is nothing to do. Any failure
 * (a fresh file has no table) says no: the migration then runs and reports.
 */
const upToDate = (all: Executor["all"]) =>
  all<{ migration_id: number }>(`SELECT migration_id FROM ${migrationsTable}`, []).pipe(
    Effect.map((rows) => allApplied(rows, migrationIds)),
    Effect.orElseSucceed(() => false)
  )

/**
 * Applies what is missing inside one `BEGIN IMMEDIATE`, so processes
 * starting together serialize (the Migrator reads the table again under the
 * lock: one that migrated meanwhile leaves nothing to do), then checks
 * that every migration is recorded (`checkRecorded`).
 */
export const migrate = (executor: Pick<Executor, "all" | "transaction">) =>
  Effect.flatMap(upToDate(executor.all), (done) =>
    done
      ? Effect.void
      : Effect.asVoid(migrationFailures(executor.transaction(Effect.zipRight(
        Migrator.make({})({ loader: migrations, table: migrationsTable }),
        // Not `upToDate`'s text: `@effect/sql-sqlite-node` caches a statement's failed prepare by its text
        // (on a fresh file that read failed: no table yet), and an application's client would answer with it.
        checkRecorded(
          executor.all<{ migration_id: number }>(`SELECT migration_id FROM ${migrationsTable} ORDER BY migration_id`, []),
          migrationIds
        )
      )))))
