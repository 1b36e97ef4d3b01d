/**
 * The PostgreSQL engine, for when one machine is not enough: many processes
 * on many hosts sharing one database, under the same contract as SQLite.
 *
 * - `layer({ url } | PgClient config)` opens a pool itself (`@effect/sql-pg`)
 *   and provides every mechanism plus the `SqlClient` (and `PgClient`) it
 *   runs on, so the application's own tables share its transactions:
 *   an enqueue inside `sql.withTransaction` commits or rolls back with them.
 * - `layerConfig(config)` is `layer` from `Config`.
 * - `layerFromClient()` builds over a `PgClient` the application provides.
 *
 * Providing either migrates the engine's tables in their own schema
 * (default `alkstore`) with their own migrations table, under an advisory
 * lock so that many processes may start at once on an empty database.
 * Claims use `FOR UPDATE SKIP LOCKED`; waiters wake over LISTEN/NOTIFY; by
 * default the program's `Clock` is aligned with the database server's (see
 * `docs/engines.md`).
 *
 * @module
 */
import type { MigrationError } from "@effect/sql/Migrator"
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type * as PgClient from "@effect/sql-pg/PgClient"
import { Config, type ConfigError, Effect, Layer } from "effect"
import { fromChecked } from "./internal/duration.js"
import { checkFilename, ownOptions } from "./internal/options.js"
import * as importSqliteInternal from "./internal/pg/importSqlite.js"
import * as internal from "./internal/pg/store.js"
import { attr, traced } from "./internal/telemetry.js"
import type { Admin } from "./Admin.js"
import type { Backing } from "./EffectStores.js"
import type { Locks } from "./Locks.js"
import type { Outbox } from "./Outbox.js"
import type { Queues } from "./Queues.js"
import type { Scheduler } from "./Scheduler.js"
import { InvalidOptions } from "./StoreError.js"

/** The engine settings either layer takes (all optional; durations as `Duration.DurationInput`). */
export interface StoreSettings extends internal.StoreSettings {}

/** `layer`'s options: every `@effect/sql-pg` `PgClientConfig` field (`url`, `host`, pool size, ssl, …) plus the engine settings. */
export interface PgStoreOptions extends internal.PgStoreOptions {}

/** The services every store layer provides (`Backing`: what `EffectStores`' layers are built from). */
export type Mechanisms = Queues | Locks | Scheduler | Outbox | Admin | Backing

/**
 * A store on a PostgreSQL pool of its own: provides every mechanism and the
 * `SqlClient` (and `PgClient`) it runs on, for the application's own tables
 * and transactions. Migrates on open (under an advisory lock); closes the
 * pool and its LISTEN connection when the layer's scope ends.
 */

export const layer: (
  options: PgStoreOptions
) => Layer.Layer<Mechanisms | SqlClient.SqlClient | PgClient.PgClient, SqlError | MigrationError | InvalidOptions> =
  internal.layer

/** `layer` with its options read from `Config` (e.g. `Config.redacted("DATABASE_URL")` for the url). */
export const layerConfig = (
  config: Config.Config.Wrap<PgStoreOptions>
): Layer.Layer<
  Mechanisms | SqlClient.SqlClient | PgClient.PgClient,
  SqlError | MigrationError | InvalidOptions | ConfigError.ConfigError
> => Layer.unwrapEffect(Effect.map(Config.unwrap(config), internal.layer))

/**
 * A store over the `PgClient` the application provides: its operations join
 * the application's transactions on that client. Provides the mechanisms only.
 */
export const layerFromClient: (
  options?: StoreSettings
) => Layer.Layer<Mechanisms, SqlError | MigrationError | InvalidOptions, PgClient.PgClient> = internal.layerFromClient

/** What `importSqlite` copied: how many jobs, schedules and lock rows (`jobs`, `schedules`, `locks`). */
export interface Imported extends importSqliteInternal.Imported {}

/**
 * Moves a deployment from a SQLite file to PostgreSQL: copies every job
 * (pending, scheduled, claimed, dead, with their ids, attempts and claim
 * tokens), every schedule (with its phase) and every lock row (with its
 * fencing token) from the SQLite store `filename` into the empty,
 * migrated PostgreSQL store of `schema` (default `alkstore`), in one
 * transaction on the `SqlClient` in context (a `PgStore.layer`'s). Stop the
 * SQLite deployment first. See docs/engines.md.
 */
export const importSqlite = (options: {
  readonly filename: string
  readonly schema?: string
}): Effect.Effect<Imported, SqlError | InvalidOptions, SqlClient.SqlClient> =>
  // Named and gated as every alkstore span (telemetry.ts); the count is the jobs copied.
  traced(
    "alkstore.pg.import_sqlite",
    () => ({}),
    Effect.gen(function*() {
      // `null` is no options: the required filename is missing (CONTRACT §2). Read once, when the effect runs.
      const given: { readonly filename?: unknown; readonly schema?: string } =
        (yield* fromChecked(ownOptions(options))) ?? {}
      const filename = yield* checkFilename(given.filename)
      if (filename === "" || filename === ":memory:") {
        return yield* new InvalidOptions({ field: "filename", reason: "is required: the SQLite file to import" })
      }
      const { schema } = yield* internal.resolveSettings({ schema: given.schema ?? "alkstore" })
      return yield* importSqliteInternal.importSqlite(filename, schema)
    }),
    (imported, span) => span.attribute(attr.count, imported.jobs)
  )
