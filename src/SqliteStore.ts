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
 */
import type { MigrationError } from "@effect/sql/Migrator"
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { Config, type ConfigError, Effect, Layer } from "effect"
import * as internal from "./internal/sqlite/store.js"
import type { InvalidOptions } from "./StoreError.js"

export type StoreSettings = internal.StoreSettings
export type SqliteStoreOptions = internal.SqliteStoreOptions
export type Mechanisms = internal.Mechanisms

export const layer: (
  options: SqliteStoreOptions
) => Layer.Layer<Mechanisms | SqlClient.SqlClient, SqlError | MigrationError | InvalidOptions> = internal.layer

export const layerConfig = (
  config: Config.Config.Wrap<SqliteStoreOptions>
): Layer.Layer<Mechanisms | SqlClient.SqlClient, SqlError | MigrationError | InvalidOptions | ConfigError.ConfigError> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(config), internal.layer))

export const layerFromClient: (
  options?: StoreSettings
) => Layer.Layer<Mechanisms, SqlError | MigrationError | InvalidOptions, SqlClient.SqlClient> = internal.layerFromClient
