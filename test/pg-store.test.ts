/**
 * PostgreSQL engine mechanics (the contract itself runs on it through the
 * harness): start-up on an empty database from many stores at once, never
 * running on another client's transaction, typed COMMIT failures, strict
 * bigint decoding, exact payload text, `layerFromClient`, the schema option,
 * prepared statements (and `prepare: false`).
 */
import { SqlClient } from "@effect/sql"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import * as Reactivity from "@effect/experimental/Reactivity"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option, Redacted } from "effect"
import { makeExecutor } from "../src/internal/pg/executor.js"
import { int } from "../src/internal/pg/rows.js"
import { PgStore, Queues } from "../src/index.js"
import { freshFile, pgDatabaseUrl, pgOwned, pgSchemaFor, pgTestTypes } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"
import { expectSqlError } from "./contract/transactions.js"

const databaseUrl = Effect.promise(pgDatabaseUrl)

describe("PgStore", () => {
  it.live("many stores starting at once on an empty database all migrate and work", () =>
    Effect.gen(function*() {
      const url = yield* databaseUrl
      const schema = pgSchemaFor(freshFile("race"))
      // separate pools: genuinely concurrent start-ups, as separate processes would be
      const starts = Array.from({ length: 8 }, (_, i) =>
        Effect.scoped(Effect.gen(function*() {
          const context = yield* Layer.build(PgStore.layer({ url: Redacted.make(url), schema, clock: "host" }))
          const queue = yield* Effect.provide(queueOf("race"), context)
          return yield* Effect.provide(queue.enqueue({ i }), context)
        })))
      const ids = yield* Effect.all(starts, { concurrency: "unbounded" })
      expect(new Set(ids).size).toBe(8)
      const migrations = yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        return yield* sql.unsafe<{ migration_id: number }>(
          `SELECT migration_id FROM ${schema}.__alkstore_migrations ORDER BY migration_id`
        )
      }).pipe(Effect.provide(pgOwned.store({ filename: "race-check", schema })))
      // every migration applied once, whoever ran it
      const applied = migrations.map((m) => Number(m.migration_id))
      expect(applied).toEqual([...new Set(applied)].sort((a, b) => a - b))
      expect(applied).toEqual(expect.arrayContaining([1, 2, 3, 4, 5]))
    }))

  it.effect("never runs its statements on another client's transaction; joins its own client's", () =>
    Effect.gen(function*() {
      const pg = yield* SqlClient.SqlClient
      const queue = yield* queueOf("foreign")
      const sqlite = yield* SqliteClient.make({ filename: freshFile("foreign") })
      // inside a SQLite transaction (the same TransactionConnection tag) the PostgreSQL store neither sends its
      // statements to the SQLite connection nor quietly runs outside: a typed SqlError, nothing written
      const inside = yield* Effect.exit(sqlite.withTransaction(queue.enqueue({ n: 1 })))
      expectSqlError(inside, "inside another SqlClient's transaction")
      const batch = yield* Effect.exit(sqlite.withTransaction(queue.enqueueBatch([{ n: 3 }, { n: 4 }])))
      expectSqlError(batch, "inside another SqlClient's transaction")
      expect((yield* queue.stats).pending).toBe(0)
      // inside its own client's transaction it joins: a rollback takes the job with it, a commit keeps it
      yield* Effect.exit(pg.withTransaction(Effect.zipRight(queue.enqueue({ n: 2 }), Effect.fail("abort"))))
      expect((yield* queue.stats).pending).toBe(0)
      yield* pg.withTransaction(queue.enqueue({ n: 5 }))
      expect((yield* queue.stats).pending).toBe(1)
    }).pipe(Effect.scoped, Effect.provide(Reactivity.layer), Effect.provide(pgOwned.store())))

  it.effect("a failed COMMIT is a typed SqlError, not a defect", () =>
    Effect.gen(function*() {
      const client = yield* PgClient.PgClient
      const executor = yield* makeExecutor(client, "committest")
      yield* client`CREATE TABLE deferred_unique (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)`
      const exit = yield* Effect.exit(executor.transaction(Effect.gen(function*() {
        yield* executor.all("INSERT INTO deferred_unique VALUES (1)", [])
        yield* executor.all("INSERT INTO deferred_unique VALUES (1)", []) // checked at COMMIT
      })))
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isFailure(exit)) {
        expect(Cause.isDie(exit.cause)).toBe(false)
        expect(Option.getOrThrow(Cause.failureOption(exit.cause))._tag).toBe("SqlError")
      }
      // the connection went back to the pool usable, outside any transaction
      const rows = yield* executor.all<{ n: number }>("SELECT count(*)::int AS n FROM deferred_unique", [])
      expect(rows[0]!.n).toBe(0)
    }).pipe(Effect.provide(pgOwned.store())))

  it.effect("ids past 2^53 fail loudly with SqlError instead of wrapping", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const queue = yield* queueOf("big")
      yield* sql`INSERT INTO __alkstore_jobs (id, queue, payload, state, priority, run_at, max_attempts,
          visibility_timeout, backoff_base, created_at)
        OVERRIDING SYSTEM VALUE VALUES (9007199254740993, 'big', '{}', 'pending', 0, 0, 3, 1000, 1000, 0)`
      const exit = yield* Effect.exit(queue.claim("w"))
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isFailure(exit)) {
        const error = Option.getOrThrow(Cause.failureOption(exit.cause))
        expect(error._tag).toBe("SqlError")
        // (the tests' connection parses bigint to a number first: past 2^53 that is still unsafe, and refused)
        expect(String((error as { message: string }).message)).toContain("not a safe integer")
      }
      expect(int("9007199254740991", "id")).toBe(Number.MAX_SAFE_INTEGER)
      expect(() => int("9007199254740992", "id")).toThrow()
      expect(() => int(2n ** 60n, "id")).toThrow()
    }).pipe(Effect.provide(pgOwned.store())))

  it.effect("payloads are stored as the exact JSON text (json, not jsonb: key order and \\u0000 kept)", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const queue = yield* queueOf("exact")
      const payload = { b: 1, a: [1.5, 0, 1e21, -2.5e-7], "\u0000": "nul\u0000", emoji: "🦀", "": null, nested: { z: 1, y: 2 } }
      const id = yield* queue.enqueue(payload)
      const [row] = yield* sql<{ payload: string }>`SELECT payload::text AS payload FROM __alkstore_jobs WHERE id = ${id}`
      expect(row!.payload).toBe(JSON.stringify(payload))
      const handle = Option.getOrThrow(yield* queue.claim("w"))
      expect(JSON.stringify(handle.job.payload)).toBe(JSON.stringify(payload))
    }).pipe(Effect.provide(pgOwned.store())))

  it.effect("layerFromClient builds over the application's PgClient and shares its transactions", () =>
    Effect.gen(function*() {
      const url = yield* databaseUrl
      const schema = pgSchemaFor(freshFile("from-client"))
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("app")
        yield* sql`CREATE TABLE ${sql(schema)}.users (email text NOT NULL)`
        yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO ${sql(schema)}.users VALUES ('lost')`
          yield* queue.enqueue({ to: "lost" })
          return yield* Effect.fail("abort")
        })))
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO ${sql(schema)}.users VALUES ('kept')`
          yield* queue.enqueue({ to: "kept" })
        }))
        const handle = Option.getOrThrow(yield* queue.claim("w"))
        expect(handle.job.payload).toEqual({ to: "kept" })
        expect(yield* handle.ack).toBe(true)
        expect(yield* sql`SELECT * FROM ${sql(schema)}.users`).toHaveLength(1)
      }).pipe(
        Effect.provide(PgStore.layerFromClient({ schema, clock: "host" }).pipe(
          Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), types: pgTestTypes }))
        ))
      )
    }))

  it.effect("the schema option is validated before anything is touched", () =>
    Effect.gen(function*() {
      const url = yield* databaseUrl
      for (const schema of ["", "Upper", "1abc", "a-b", "x".repeat(49), "a; DROP SCHEMA public"]) {
        const exit = yield* Effect.exit(Layer.build(PgStore.layer({ url: Redacted.make(url), schema })).pipe(Effect.scoped))
        expect(Exit.isFailure(exit)).toBe(true)
        if (Exit.isFailure(exit)) {
          expect(Option.getOrThrow(Cause.failureOption(exit.cause))).toMatchObject({ _tag: "InvalidOptions", field: "schema" })
        }
      }
    }))

  it.effect("statements run as named prepared statements, or as plain text with prepare: false; prepare and planCheckEvery are validated", () =>
    Effect.gen(function*() {
      const url = yield* databaseUrl
      // one pooled connection, so the statements just run are that connection's
      const roundTrip = (prepare: boolean) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const queue = yield* queueOf("prepared")
          const id = yield* queue.enqueue({ n: 1 })
          const handle = Option.getOrThrow(yield* queue.claim("w"))
          expect(handle.job.id).toBe(id)
          expect(yield* handle.ack).toBe(true)
          const named = yield* sql.unsafe<{ name: string; statement: string }>(
            `SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'alkstore_%'`
          )
          return named.map((row) => row.statement)
        }).pipe(Effect.provide(pgOwned.store({ maxConnections: 1, prepare } as never)))
      const prepared = yield* roundTrip(true)
      expect(prepared.some((text) => text.includes("INSERT INTO"))).toBe(true)
      expect(prepared.some((text) => text.includes("FOR UPDATE SKIP LOCKED"))).toBe(true)
      expect(prepared.some((text) => text.startsWith("DELETE FROM"))).toBe(true)
      expect(yield* roundTrip(false)).toEqual([])
      const exit = yield* Effect.exit(
        Layer.build(PgStore.layer({ url: Redacted.make(url), prepare: "yes" as never })).pipe(Effect.scoped)
      )
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isFailure(exit)) {
        expect(Option.getOrThrow(Cause.failureOption(exit.cause))).toMatchObject({ _tag: "InvalidOptions", field: "prepare" })
      }
      // how often the tables' sizes are read for the plans (planSize.ts): a positive duration
      const badCheck = yield* Effect.exit(
        Layer.build(PgStore.layer({ url: Redacted.make(url), planCheckEvery: "0 millis" })).pipe(Effect.scoped)
      )
      expect(Exit.isFailure(badCheck)).toBe(true)
      if (Exit.isFailure(badCheck)) {
        expect(Option.getOrThrow(Cause.failureOption(badCheck.cause))).toMatchObject({
          _tag: "InvalidOptions",
          field: "planCheckEvery"
        })
      }
    }))

  it.effect("two schemas in one database are two independent stores", () =>
    Effect.gen(function*() {
      const a = pgOwned.store()
      const b = pgOwned.store()
      yield* Effect.provide(Effect.flatMap(queueOf("same"), (q) => q.enqueue({ in: "a" })), a)
      const claimed = yield* Effect.provide(Effect.flatMap(queueOf("same"), (q) => q.claim("w")), b)
      expect(Option.isNone(claimed)).toBe(true)
    }))
})

export { Queues }
