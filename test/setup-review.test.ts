/**
 * How applications set a store up (CONTRACT §1–§2, docs/contract.md §2, docs/engines.md): each test is a
 * defect found in review, failing on the code before its fix.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option, Redacted } from "effect"
import * as fs from "node:fs"
import Pg from "pg"
import { PgStore, Queues, SqliteStore } from "../src/index.js"
import { freshFile, pgDatabaseUrl, pgTestTypes } from "./contract/harness.js"

/** How building `layer` ended: "ok", "<Tag>:<field>" for a typed failure, "defect: ..." for a defect. */
const buildOutcome = <A, E>(layer: Layer.Layer<A, E, never>) =>
  Effect.map(Effect.exit(Effect.scoped(Layer.build(layer))), (exit) => {
    if (Exit.isSuccess(exit)) return "ok"
    const failure = Option.getOrUndefined(Cause.failureOption(exit.cause)) as
      | { _tag?: string; field?: string }
      | undefined
    if (failure !== undefined) return `${failure._tag}:${failure.field ?? ""}`
    return `defect: ${Cause.pretty(exit.cause).split("\n")[0]}`
  })

const schemaExists = (url: string, schema: string) =>
  Effect.promise(async () => {
    const client = new Pg.Client({ connectionString: url })
    await client.connect()
    try {
      return (await client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema])).rowCount === 1
    } finally {
      await client.end()
    }
  })

const enqueueOne = Effect.flatMap(Queues.Queues, (queues) =>
  Effect.flatMap(queues.queue("setup"), (queue) => queue.enqueue({ n: 1 })))

describe("setting a store up", () => {
  // docs/contract.md §2: "Bad input is rejected with a typed error in the error channel before anything is
  // written"; CONTRACT §2: "No mechanism throws".
  it.live("PgStore.layer with a malformed listenUrl fails with a typed error, not a defect, and writes nothing", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const schema = `setup_listen_${process.pid}`
      const outcome = yield* buildOutcome(PgStore.layer({
        url: Redacted.make(url),
        schema,
        clock: "host",
        listenUrl: Redacted.make("postgres://app:secret@[::1/app")
      }))
      expect({ typed: !outcome.startsWith("defect"), schemaCreated: yield* schemaExists(url, schema) }, outcome).toEqual({
        typed: true,
        schemaCreated: false
      })
    }))

  // docs/contract.md §2: bad input is a typed error before anything is written. A pool of no connection hung the
  // start for good (the first query waits for a connection that never comes, uninterruptibly).
  it.live("PgStore.layer with maxConnections below 1 is InvalidOptions on maxConnections, not a start that never ends", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const schema = `setup_pool_${process.pid}`
      const outcomes: Array<string> = []
      for (const maxConnections of [0, -1, 1.5]) {
        const built = buildOutcome(PgStore.layer({ url: Redacted.make(url), schema, clock: "host", maxConnections }))
        outcomes.push(yield* Effect.race(built, Effect.as(Effect.sleep("3 seconds"), "hung")))
      }
      expect({ outcomes, schemaCreated: yield* schemaExists(url, schema) }).toEqual({
        outcomes: ["InvalidOptions:maxConnections", "InvalidOptions:maxConnections", "InvalidOptions:maxConnections"],
        schemaCreated: false
      })
    }))

  // docs/contract.md §2: "Options given as `null` are no options."
  it.live("layerFromClient(null) is layerFromClient() on both engines (null options are no options)", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const sqlite = yield* buildOutcome(
        SqliteStore.layerFromClient(null as never).pipe(Layer.provideMerge(SqliteClient.layer({ filename: freshFile("null") })))
      )
      const pg = yield* buildOutcome(
        PgStore.layerFromClient(null as never).pipe(
          Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), types: pgTestTypes }))
        )
      )
      expect({ sqlite, pg }).toEqual({ sqlite: "ok", pg: "ok" })
    }))

  // docs/engines.md: the schema is "a plain lowercase identifier, validated, and none of the keywords PostgreSQL
  // reserves from names — `user`, `order`, `group` … are `InvalidOptions`"; StoreSettings.schema: "Lowercase
  // letters, digits and `_`, at most 48." PostgreSQL reserves the `pg_` prefix for system schemas
  // ("unacceptable schema name"): such a name passes the validation and then fails every start with SqlError.
  it.live("a schema name that passes validation either works or is refused as InvalidOptions (the pg_ prefix)", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const outcomes: Record<string, string> = {}
      for (const schema of ["pg_jobs", "pg_catalog"]) {
        const store = PgStore.layer({ url: Redacted.make(url), schema, clock: "host", types: pgTestTypes })
        const exit = yield* Effect.exit(Effect.provide(enqueueOne, store))
        const failure = Exit.isFailure(exit)
          ? Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string; field?: string } | undefined
          : undefined
        outcomes[schema] = Exit.isSuccess(exit)
          ? "works"
          : failure?._tag === "InvalidOptions" && failure.field === "schema"
          ? "InvalidOptions:schema"
          : `${failure?._tag ?? "defect"}`
      }
      const refusedOtherwise = Object.entries(outcomes).filter(([, outcome]) => outcome !== "works" && outcome !== "InvalidOptions:schema")
      expect(refusedOtherwise, JSON.stringify(outcomes)).toEqual([])
    }))

  // CONTRACT §2: "`InvalidOptions { field, reason }` | a bad option, `field` being the option's own name";
  // `SqlError`: "the storage itself failed". A busyTimeout SQLite cannot take (over 2^31 − 1 ms) fails the open
  // with `SqlError` ("Failed to open …: RangeError: Option "timeout" cannot be greater than 2147483647").
  it.live("a busyTimeout SQLite cannot take is InvalidOptions on busyTimeout, not a storage failure", () =>
    Effect.gen(function*() {
      const filename = freshFile("busy-timeout")
      const outcome = yield* buildOutcome(SqliteStore.layer({ filename, busyTimeout: "25 days" }))
      expect({ outcome, created: fs.existsSync(filename) }).toEqual({ outcome: "InvalidOptions:busyTimeout", created: false })
    }))
})
