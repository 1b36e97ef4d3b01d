/**
 * The embedded default engine: a SQLite file (WAL, `synchronous=NORMAL`,
 * `BEGIN IMMEDIATE` transactions, short busy timeout with retries on an
 * Effect schedule).
 *
 * - `layer({ filename })` opens the file itself and provides every mechanism
 *   plus the `SqlClient` it runs on, so the application's own tables share
 *   the connection and its transactions.
 * - `layerFromClient()` builds over a `SqlClient` the application provides
 *   (e.g. `@effect/sql-sqlite-node`'s). Its operations join the
 *   application's transactions on that client. After a failed COMMIT
 *   (`@effect/sql` 0.52 dies and does not roll back) the application must run
 *   `ROLLBACK` on it: until then the store's operations fail with `SqlError`
 *   rather than write into a transaction that never commits.
 *
 * Either store joins only transactions on its own connection: an operation
 * inside another `SqlClient`'s transaction (a second database) fails with
 * `SqlError` and writes nothing (docs/decisions.md).
 *
 * Providing either migrates the engine's own `__alkstore_*` tables (with its
 * own migrations table); re-providing on a migrated file is a no-op.
 *
 * @module
 */
import type { MigrationError } from "@effect/sql/Migrator"
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Config, type ConfigError, Effect, Layer } from "effect"
import * as internal from "./internal/sqlite/store.js"
import type { Admin } from "./Admin.js"
import type { Locks } from "./Locks.js"
import type { Outbox } from "./Outbox.js"
import type { Queues } from "./Queues.js"
import type { Scheduler } from "./Scheduler.js"
import type { InvalidOptions } from "./StoreError.js"

/** The engine settings either layer takes (all optional; durations as `Duration.DurationInput`). */
export interface StoreSettings extends internal.StoreSettings {}

/** `layer`'s options: the file, the engine settings, and the settings of a connection the store owns. */
export interface SqliteStoreOptions extends internal.SqliteStoreOptions {}

/** The services every store layer provides. */
export type Mechanisms = Queues | Locks | Scheduler | Outbox | Admin

/**
 * A store on the SQLite file `filename` (created when missing), on a
 * connection of its own: provides every mechanism and the `SqlClient` it
 * runs on, for the application's own tables and transactions. Migrates on
 * open; closes the connection when the layer's scope ends.
 */

export const layer: (
  options: SqliteStoreOptions
) => Layer.Layer<Mechanisms | SqlClient.SqlClient, SqlError | MigrationError | InvalidOptions> = internal.layer

/** `layer` with its options read from `Config` (e.g. `Config.string("DB_FILE")` for the filename). */
export const layerConfig = (
  config: Config.Config.Wrap<SqliteStoreOptions>
): Layer.Layer<Mechanisms | SqlClient.SqlClient, SqlError | MigrationError | InvalidOptions | ConfigError.ConfigError> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(config), internal.layer))

/**
 * A store over the `SqlClient` the application provides (an
 * `@effect/sql-sqlite-node` client): its operations join the application's
 * transactions on that client. Provides the mechanisms only.
 */
export const layerFromClient: (
  options?: StoreSettings
) => Layer.Layer<Mechanisms, SqlError | MigrationError | InvalidOptions, SqlClient.SqlClient> = internal.layerFromClient
