import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"
import { allApplied, checkRecorded, migrationFailures, migrationIdsOf } from "../migrationFailures.js"
import type { PgExecutor } from "./executor.js"

/** One statement per call (the extended protocol takes one). */
const statements = (...sql: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const client = yield* SqlClient.SqlClient
    for (const statement of sql) yield* client.unsafe(statement)
  })

/**
 * The engine's tables in the store's schema `s` (already validated as a
 * plain identifier). As on SQLite, `state` is `pending` (due), `scheduled`
 * (due later: kept out of the claim index), `claimed` or `dead`; acked and
 * cancelled jobs are deleted. Identity ids are never reused. Numbers are
 * `bigint` (decoded strictly back to safe integers); payloads are `json`,
 * which keeps the text exactly as written (`jsonb` would reorder and dedupe
 * keys and reject `\u0000`), so they round-trip as on SQLite.
 */
const migrationRecord = (s: string) => ({
    "1_queues_and_locks": statements(
      `CREATE TABLE ${s}.__alkstore_jobs (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        queue text NOT NULL,
        payload json NOT NULL,
        state text NOT NULL,
        priority bigint NOT NULL,
        run_at bigint NOT NULL,
        attempts bigint NOT NULL DEFAULT 0,
        max_attempts bigint NOT NULL,
        visibility_timeout bigint NOT NULL,
        backoff_base bigint NOT NULL,
        expires_at bigint,
        claimed_until bigint,
        worker_id text,
        claim_token bigint NOT NULL DEFAULT 0,
        idempotency_key text,
        created_at bigint NOT NULL,
        last_error text,
        died_at bigint
      ) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
              autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 1000)`,
      `CREATE INDEX __alkstore_jobs_pending ON ${s}.__alkstore_jobs (queue, priority DESC, run_at, id)
        WHERE state = 'pending'`,
      `CREATE INDEX __alkstore_jobs_scheduled ON ${s}.__alkstore_jobs (queue, run_at) WHERE state = 'scheduled'`,
      `CREATE INDEX __alkstore_jobs_claimed ON ${s}.__alkstore_jobs (queue, claimed_until) WHERE state = 'claimed'`,
      `CREATE INDEX __alkstore_jobs_dead ON ${s}.__alkstore_jobs (queue, died_at) WHERE state = 'dead'`,
      `CREATE INDEX __alkstore_jobs_expiry ON ${s}.__alkstore_jobs (expires_at)
        WHERE expires_at IS NOT NULL AND state <> 'dead'`,
      `CREATE UNIQUE INDEX __alkstore_jobs_key ON ${s}.__alkstore_jobs (queue, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND state <> 'dead'`,
      `CREATE TABLE ${s}.__alkstore_locks (
        name text PRIMARY KEY,
        owner text NOT NULL,
        token bigint NOT NULL,
        expires_at bigint NOT NULL
      )`
    ),
    "2_scheduler": statements(
      `CREATE TABLE ${s}.__alkstore_scheduler_tasks (
        name text PRIMARY KEY,
        spec text NOT NULL,
        interval_ms bigint NOT NULL,
        queue text NOT NULL,
        payload json NOT NULL,
        priority bigint NOT NULL,
        max_attempts bigint NOT NULL,
        expires_ms bigint,
        next_fire_at bigint NOT NULL,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL
      )`,
      `CREATE INDEX __alkstore_scheduler_tasks_due ON ${s}.__alkstore_scheduler_tasks (next_fire_at)`
    ),
    // Flow control (docs/flow-control.md), as on SQLite: a job's group ('' = none) and its
    // fair-queueing round (NULL outside queues with limits, so those rows stay out of the flow
    // indexes), a queue's limits, and the sliding log of claim instants.
    "3_flow_control": statements(
      `ALTER TABLE ${s}.__alkstore_jobs ADD COLUMN group_key text NOT NULL DEFAULT ''`,
      `ALTER TABLE ${s}.__alkstore_jobs ADD COLUMN flow_round bigint`,
      `ALTER TABLE ${s}.__alkstore_scheduler_tasks ADD COLUMN group_key text NOT NULL DEFAULT ''`,
      `CREATE INDEX __alkstore_jobs_flow ON ${s}.__alkstore_jobs (queue, priority DESC, flow_round, run_at, id, group_key)
        WHERE state = 'pending' AND flow_round IS NOT NULL`,
      `CREATE INDEX __alkstore_jobs_flow_group ON ${s}.__alkstore_jobs (queue, group_key, flow_round, id)
        WHERE state <> 'dead' AND flow_round IS NOT NULL`,
      `CREATE INDEX __alkstore_jobs_flow_claimed ON ${s}.__alkstore_jobs (queue, group_key, claimed_until)
        WHERE state = 'claimed' AND flow_round IS NOT NULL`,
      `CREATE TABLE ${s}.__alkstore_flow_limits (
        queue text PRIMARY KEY,
        concurrency bigint,
        rate_limit bigint,
        rate_per bigint,
        group_concurrency bigint,
        group_rate_limit bigint,
        group_rate_per bigint,
        current_round bigint NOT NULL DEFAULT 0,
        updated_at bigint NOT NULL
      )`,
      `CREATE TABLE ${s}.__alkstore_flow_log (
        queue text NOT NULL,
        scope text NOT NULL,
        seq bigint NOT NULL,
        at bigint NOT NULL,
        PRIMARY KEY (queue, scope, seq)
      )`
    ),
    // The enqueuer's span as a W3C traceparent (docs/observability.md): the handler's span links to it.
    "4_trace_context": statements(`ALTER TABLE ${s}.__alkstore_jobs ADD COLUMN trace_context text`),
    // Effect's own interfaces (src/internal/effectStores/), as on SQLite: PersistedQueue's offered
    // ids (kept for good) and RateLimiter's counters, in doubles as Effect computes them.
    "5_effect_stores": statements(
      `CREATE TABLE ${s}.__alkstore_queue_ids (
        id text PRIMARY KEY,
        queue text NOT NULL,
        offered_at bigint NOT NULL
      )`,
      `CREATE TABLE ${s}.__alkstore_rate_windows (
        key text PRIMARY KEY,
        used double precision NOT NULL,
        expires_at double precision NOT NULL,
        granted boolean NOT NULL
      )`,
      `CREATE TABLE ${s}.__alkstore_rate_buckets (
        key text PRIMARY KEY,
        tokens double precision NOT NULL,
        last_refill double precision NOT NULL,
        granted boolean NOT NULL
      )`
    ),
    // (6 is SQLite's job ids.) The flow index's predicate in a form the plain pending index's does not
    // follow from (`flowPending` in flowStatements.ts): without statistics for a fresh backlog the
    // planner read a limited claim's first page through the plain pending index and sorted every due
    // job of the queue (O(due jobs) per claim until autovacuum's first analyze). Same rows, same order.
    "7_flow_index_own_predicate": statements(
      `DROP INDEX ${s}.__alkstore_jobs_flow`,
      `CREATE INDEX __alkstore_jobs_flow ON ${s}.__alkstore_jobs (queue, priority DESC, flow_round, run_at, id, group_key)
        WHERE state COLLATE "C" = 'pending' AND flow_round IS NOT NULL`
    ),
    // Dead jobs in the orders their readers ask for (as SQLite's migration 8): a queue's dead-letter
    // listing and every queue's (`Admin.jobs`, newest id first), and the retention purge (`died_at`
    // across queues), none of them walking or sorting every dead job. Only deaths, requeues and purges
    // write them.
    "8_dead_job_indexes": statements(
      `CREATE INDEX __alkstore_jobs_dead_by_id ON ${s}.__alkstore_jobs (id) WHERE state = 'dead'`,
      `CREATE INDEX __alkstore_jobs_dead_queue_id ON ${s}.__alkstore_jobs (queue, id) WHERE state = 'dead'`,
      `CREATE INDEX __alkstore_jobs_dead_since ON ${s}.__alkstore_jobs (died_at) WHERE state = 'dead'`
    )
})

export const migrations = (s: string) => Migrator.fromRecord(migrationRecord(s))

const migrationIds = migrationIdsOf(migrationRecord("s"))

export const migrationsTable = "__alkstore_migrations"

/**
 * One transaction, so that many processes starting at once on an empty
 * database all succeed: a transaction-level advisory lock on the schema's
 * name serializes them, the schema and the migrations table (in
 * `@effect/sql`'s shape) are created if missing under it, and then
 * `@effect/sql`'s Migrator runs (its own transaction becomes a savepoint and
 * its probe of the table finds it, so nothing aborts), and every migration
 * is checked recorded (`checkRecorded`).
 *
 * First a read: a database already up to date is opened without the
 * transaction — whose `CREATE … IF NOT EXISTS` PostgreSQL checks the CREATE
 * privilege for before it looks for the object — so a role with only the
 * tables' privileges opens a store an owner migrated (`alkstore migrate`).
 */
export const migrate = (executor: PgExecutor, schema: string) =>
  Effect.flatMap(upToDate(executor, schema), (done) => done ? Effect.succeed([]) : migrateLocked(executor, schema))

/** Whether every migration is applied already (any failure, a missing table, says no). */
const upToDate = (executor: PgExecutor, schema: string) =>
  executor.all<{ migration_id: number }>(`SELECT migration_id FROM ${schema}.${migrationsTable}`, []).pipe(
    Effect.map((rows) => allApplied(rows, migrationIds)),
    Effect.orElseSucceed(() => false)
  )

const migrateLocked = (executor: PgExecutor, schema: string) =>
  executor.transaction(Effect.gen(function*() {
    yield* executor.all("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [`alkstore:migrate:${schema}`])
    yield* executor.all("SET LOCAL lock_timeout = '60s'", [])
    yield* executor.all(`CREATE SCHEMA IF NOT EXISTS ${schema}`, [])
    yield* executor.all(
      `CREATE TABLE IF NOT EXISTS ${schema}.${migrationsTable} (
        migration_id integer primary key,
        created_at timestamp with time zone not null default now(),
        name text not null
      )`,
      []
    )
    const ran = yield* Migrator.make({})({ loader: migrations(schema), table: `${schema}.${migrationsTable}` })
    yield* checkRecorded(
      executor.all<{ migration_id: number }>(`SELECT migration_id FROM ${schema}.${migrationsTable} ORDER BY migration_id`, []),
      migrationIds
    )
    return ran
  })).pipe(Effect.provideService(SqlClient.SqlClient, executor.client), migrationFailures)
