/**
 * `SqlClient.TransactionConnection` is one tag shared by every `@effect/sql`
 * client. An alkstore operation run inside *another* client's transaction
 * (an application holding a second database) must never send its statements
 * or savepoints to that client's connection, nor quietly run outside a
 * transaction the caller believes it is part of: it fails with a typed
 * `SqlError` and writes nothing anywhere. Inside the store's own client's
 * transaction it joins as before.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import { SqlClient } from "@effect/sql"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Option } from "effect"
import { Locks, SqliteStore } from "../../src/index.js"
import { type EngineUnderTest, freshFile } from "./harness.js"
import { jobCount, lockCount, queueOf } from "./support.js"

/**
 * A plain `@effect/sql-sqlite-node` client on a file of its own that also
 * carries alkstore's tables, so a statement sent there by mistake would succeed.
 */
const otherClient = Effect.gen(function*() {
  const filename = freshFile("other-client")
  yield* Effect.provide(Effect.void, SqliteStore.layer({ filename }))
  const other = yield* SqliteClient.make({ filename })
  yield* other`CREATE TABLE app_rows (n INTEGER)`
  return other
}).pipe(Effect.provide(Reactivity.layer))

const countIn = (sql: SqlClient.SqlClient, table: string) =>
  Effect.map(sql.unsafe<{ n: number }>(`SELECT count(*) AS n FROM ${table}`), (rows) => rows[0]!.n)

/** `exit` failed with a typed `SqlError` (not a defect) whose message contains `text`. */
export const expectSqlError = (exit: Exit.Exit<unknown, unknown>, text: string) => {
  expect(Exit.isFailure(exit)).toBe(true)
  if (Exit.isFailure(exit)) {
    expect(Cause.isDie(exit.cause)).toBe(false)
    const failure = Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string; message?: string }
    expect(failure?._tag).toBe("SqlError")
    expect(failure?.message).toContain(text)
  }
}

export const transactionsContract = (engine: EngineUnderTest) =>
  describe(`another SqlClient's transaction — ${engine.name}`, () => {
    it.scoped("an operation inside it fails with a typed SqlError, writes nothing to either database, and leaves that transaction whole", () =>
      Effect.gen(function*() {
        const other = yield* otherClient
        const queue = yield* queueOf("tx-other")
        const locks = yield* Locks.Locks
        yield* queue.enqueue({ n: "outside" })
        const exits = yield* other.withTransaction(Effect.gen(function*() {
          yield* other`INSERT INTO app_rows (n) VALUES (1)`
          const exits = [
            yield* Effect.exit(queue.enqueue({ n: "single" })),
            yield* Effect.exit(queue.enqueueBatch([{ n: "a" }, { n: "b" }])),
            yield* Effect.exit(queue.claim("w")),
            yield* Effect.exit(queue.stats),
            yield* Effect.exit(locks.acquire("tx-other-lock", { ttl: "1 minute" }))
          ]
          yield* other`INSERT INTO app_rows (n) VALUES (2)`
          return exits
        }))
        for (const exit of exits) expectSqlError(exit, "inside another SqlClient's transaction")
        // The other client's transaction committed its own rows, and only those.
        expect(yield* countIn(other, "app_rows")).toBe(2)
        expect(yield* countIn(other, "__alkstore_jobs")).toBe(0)
        expect(yield* countIn(other, "__alkstore_locks")).toBe(0)
        // The store wrote nothing either: the one job is the one enqueued outside.
        expect(yield* jobCount).toBe(1)
        expect(yield* lockCount).toBe(0)
        expect((yield* queue.stats).pending).toBe(1)
      }).pipe(Effect.provide(engine.store())))

    it.scoped("inside the store's own client's transaction it still joins it (and rolls back with it)", () =>
      Effect.gen(function*() {
        yield* otherClient
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("tx-own")
        const rolledBack = yield* Effect.exit(sql.withTransaction(
          Effect.zipRight(queue.enqueueBatch([{ n: 1 }, { n: 2 }]), Effect.fail("abort"))
        ))
        expect(Exit.isFailure(rolledBack)).toBe(true)
        expect(yield* jobCount).toBe(0)
        yield* sql.withTransaction(Effect.zipRight(queue.enqueue({ n: 3 }), queue.enqueueBatch([{ n: 4 }])))
        expect(yield* jobCount).toBe(2)
      }).pipe(Effect.provide(engine.store())))
  })
