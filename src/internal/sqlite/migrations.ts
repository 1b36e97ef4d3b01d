import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"
import type { Executor } from "./executor.js"

/** One statement per `sql` call: SQLite runs only the first of several. */
const statements = (...sql: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const client = yield* SqlClient.SqlClient
    for (const statement of sql) yield* client.unsafe(statement)
  })

/**
 * The engine's own tables. `state` is `pending` (due), `scheduled` (due
 * later: kept out of the claim index so a claim never walks future rows),
 * `claimed` or `dead`; acked and cancelled jobs are deleted. AUTOINCREMENT
 * keeps ids from ever being reused: a stale id (or handle) can never reach a
 * newer job.
 */
export const migrations = Migrator.fromRecord({
  "1_queues_and_locks": statements(
    `CREATE TABLE __alkstore_jobs (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
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
      died_at INTEGER
    )`,
    `CREATE INDEX __alkstore_jobs_pending ON __alkstore_jobs (queue, priority DESC, run_at, id) WHERE state = 'pending'`,
    `CREATE INDEX __alkstore_jobs_scheduled ON __alkstore_jobs (queue, run_at) WHERE state = 'scheduled'`,
    `CREATE INDEX __alkstore_jobs_claimed ON __alkstore_jobs (queue, claimed_until) WHERE state = 'claimed'`,
    `CREATE INDEX __alkstore_jobs_dead ON __alkstore_jobs (queue, died_at) WHERE state = 'dead'`,
    `CREATE INDEX __alkstore_jobs_expiry ON __alkstore_jobs (expires_at) WHERE expires_at IS NOT NULL AND state <> 'dead'`,
    `CREATE UNIQUE INDEX __alkstore_jobs_key ON __alkstore_jobs (queue, idempotency_key) WHERE idempotency_key IS NOT NULL AND state <> 'dead'`,
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
    `CREATE INDEX __alkstore_jobs_flow ON __alkstore_jobs (queue, priority DESC, flow_round, run_at, id, group_key)
      WHERE state = 'pending' AND flow_round IS NOT NULL`,
    `CREATE INDEX __alkstore_jobs_flow_group ON __alkstore_jobs (queue, group_key, flow_round, id)
      WHERE state <> 'dead' AND flow_round IS NOT NULL`,
    `CREATE INDEX __alkstore_jobs_flow_claimed ON __alkstore_jobs (queue, group_key, claimed_until)
      WHERE state = 'claimed' AND flow_round IS NOT NULL`,
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
  "4_trace_context": statements(`ALTER TABLE __alkstore_jobs ADD COLUMN trace_context TEXT`)
})

export const migrationsTable = "__alkstore_migrations"

/** Runs inside one `BEGIN IMMEDIATE` so processes starting together serialize. */
export const migrate = (transaction: Executor["transaction"]) =>
  transaction(Migrator.make({})({ loader: migrations, table: migrationsTable }))
