import { MigrationError } from "@effect/sql/Migrator"
import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"

/**
 * A store's migration, with its storage failures in the error channel.
 * `@effect/sql`'s Migrator turns a migration statement that fails into a
 * defect (`orDieWith`, as a `MigrationError`), and its savepoint's
 * `ROLLBACK TO` that fails (the connection killed under it) into one too
 * (`orDie`, the `SqlError`): a server restart or a failover during a start
 * killed the host with a defect. Both are failures here; any other defect
 * stays one.
 */
export const migrationFailures = <A, E, R>(migration: Effect.Effect<A, E, R>) =>
  Effect.catchAllDefect(migration, (defect) =>
    defect instanceof SqlError || defect instanceof MigrationError ? Effect.fail(defect) : Effect.die(defect))
