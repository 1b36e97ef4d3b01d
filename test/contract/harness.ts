/**
 * The engines every contract test runs against. A contract file exports a
 * function of an `EngineUnderTest` and is written once; `test/*.test.ts`
 * files apply it to every engine listed here.
 */
import type { SqlClient } from "@effect/sql"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { Effect, Layer, Redacted } from "effect"
import Pg from "pg"
import { pgTestTypes } from "../fixtures/types.js"
import { inject } from "vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { PgStore, SqliteStore } from "../../src/index.js"

export type StoreLayer = Layer.Layer<SqliteStore.Mechanisms | SqlClient.SqlClient, unknown>

/**
 * Settings a test may give a store. `filename` names the database: two
 * stores given the same one share it (on PostgreSQL it names a schema).
 * Each engine takes the settings it knows.
 */
export type TestStoreSettings = SqliteStore.StoreSettings & PgStore.StoreSettings & { readonly filename?: string }

export interface EngineUnderTest {
  readonly name: string
  /** A store over a fresh database, with settings for tests that shorten them. */
  readonly store: (settings?: TestStoreSettings) => StoreLayer
  /**
   * What only some engines have, for the few tests of engine mechanics:
   * `sqliteFile` — a SQLite file (busy writers, the WAL checkpointer,
   * `EXPLAIN QUERY PLAN`, the `data_version` watcher, file replacement);
   * `postgres` — a PostgreSQL server (`EXPLAIN`, LISTEN/NOTIFY).
   */
  readonly capabilities: { readonly sqliteFile: boolean; readonly postgres: boolean }
}

// Test files share their worker's modules (`isolate: false`, vitest.config.ts): this module's state lives as
// long as the worker. File and schema names never repeat in it; the directory of database files and the
// PostgreSQL database are made per test file and removed after it (`endTestFile`). Not at the worker's exit:
// vitest ends its workers with a signal, and nothing of an exit handler's ran (~150 MB left per worker a run).
let counter = 0
let dir: string | undefined
const fileDir = () => (dir ??= fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-test-")))

/** A database file path no other test uses. */
export const freshFile = (label = "db") => path.join(fileDir(), `${process.pid}-${++counter}-${label}.db`)

const sqliteOnly = { sqliteFile: true, postgres: false } as const

const sqliteSettings = (settings: TestStoreSettings): SqliteStore.StoreSettings => {
  const {
    clock: _c,
    clockResync: _r,
    filename: _f,
    listenHeartbeat: _h,
    listenHeartbeatTimeout: _t,
    listenUrl: _u,
    planCheckEvery: _p,
    schema: _s,
    ...rest
  } = settings
  return rest
}

export const sqliteOwned: EngineUnderTest = {
  name: "sqlite (SqliteStore.layer)",
  capabilities: sqliteOnly,
  store: (settings = {}) => SqliteStore.layer({ filename: settings.filename ?? freshFile(), ...sqliteSettings(settings) })
}

export const sqliteFromClient: EngineUnderTest = {
  name: "sqlite (SqliteStore.layerFromClient over @effect/sql-sqlite-node)",
  capabilities: sqliteOnly,
  store: (settings = {}) =>
    SqliteStore.layerFromClient(sqliteSettings(settings)).pipe(
      Layer.provideMerge(SqliteClient.layer({ filename: settings.filename ?? freshFile() }))
    )
}

// ---- PostgreSQL: one fresh database per test file, one fresh schema per store (per `filename`).

/** The server the global setup started (or ALKSTORE_PG_URL). */
export const pgServerUrl = inject("pgUrl")

const urlWith = (base: string, changes: { database?: string; searchPath?: string }) => {
  const url = new URL(base)
  if (changes.database !== undefined) url.pathname = `/${changes.database}`
  if (changes.searchPath !== undefined) url.searchParams.set("options", `-c search_path=${changes.searchPath}`)
  return url.toString()
}

// Each test file gets a database of its own (a store on the default schema sees no other file's rows), made on
// its first use and dropped after the file (`endTestFile`). Names start with the run's prefix: the global
// setup drops whatever a crashed process left (pg-global-setup.ts).
let files = 0
const databaseName = () => `${inject("pgDatabasePrefix")}${process.pid}_${++files}`
let testDatabase = databaseName()
let databaseCreated: Promise<void> | undefined
const admin = async <A>(f: (client: Pg.Client) => Promise<A>) => {
  const client = new Pg.Client({ connectionString: pgServerUrl })
  await client.connect()
  try {
    return await f(client)
  } finally {
    await client.end()
  }
}
/** The test file's database, created on first use (a file that never uses PostgreSQL creates none). */
export const pgDatabaseUrl = async () => {
  databaseCreated ??= admin(async (c) => {
    await c.query(`CREATE DATABASE ${testDatabase}`)
  })
  await databaseCreated
  return urlWith(pgServerUrl, { database: testDatabase })
}
/**
 * Removes the test file's directory of database files and drops its database, where it made them; the next
 * file makes its own. Run after every test file by test/support/per-file.ts (a hook registered here would run
 * after the first importing file only).
 */
export const endTestFile = async () => {
  if (dir !== undefined) fs.rmSync(dir, { recursive: true, force: true })
  dir = undefined
  const created = databaseCreated
  const name = testDatabase
  databaseCreated = undefined
  testDatabase = databaseName()
  if (created === undefined) return
  await created.catch(() => {})
  await admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
}

const schemas = new Map<string, string>()
/** The schema a `filename` names (a fresh one when none is given). */
export const pgSchemaFor = (filename: string = freshFile()) => {
  let schema = schemas.get(filename)
  if (schema === undefined) {
    schema = `t${schemas.size + 1}`
    schemas.set(filename, schema)
  }
  return schema
}

/** The names of the next `count` schemas `pgSchemaFor` will hand out (a pooler set up before its stores). */
export const nextSchemas = (count: number): ReadonlyArray<string> =>
  Array.from({ length: count }, (_, i) => `t${schemas.size + 1 + i}`)

/**
 * The contract tests read engine tables with plain SQL (`__alkstore_jobs`):
 * the test connection's search_path starts at the store's schema.
 */
export { pgTestTypes }

/** A child process's database argument (test/fixtures/store.ts) for the schema `filename` names. */
export const pgChildDatabase = async (filename: string) =>
  `pg:${pgSchemaFor(filename)}:${urlWith(await pgDatabaseUrl(), { searchPath: `${pgSchemaFor(filename)},public` })}`

/** The settings a PostgreSQL store takes of a test's (the SQLite-only ones dropped). */
export const pgSettings = (settings: TestStoreSettings): PgStore.StoreSettings => {
  const { busyPatience: _b, filename: _f, watchInterval: _w, ...rest } = settings
  return rest
}

export const pgOwned: EngineUnderTest = {
  name: "postgresql (PgStore.layer)",
  capabilities: { sqliteFile: false, postgres: true },
  store: (settings = {}) => {
    const schema = pgSchemaFor(settings.filename)
    return Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (database) =>
      PgStore.layer({
        url: Redacted.make(urlWith(database, { searchPath: `${schema},public` })),
        schema,
        clock: "host",
        types: pgTestTypes,
        listenHeartbeat: "1 second",
        ...pgSettings(settings)
      })))
  }
}

export const pgFromClient: EngineUnderTest = {
  name: "postgresql (PgStore.layerFromClient over @effect/sql-pg)",
  capabilities: { sqliteFile: false, postgres: true },
  store: (settings = {}) => {
    const schema = pgSchemaFor(settings.filename)
    return Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (database) =>
      PgStore.layerFromClient({
        schema,
        clock: "host",
        listenHeartbeat: "1 second",
        ...pgSettings(settings)
      }).pipe(
        Layer.provideMerge(PgClient.layer({
          url: Redacted.make(urlWith(database, { searchPath: `${schema},public` })),
          types: pgTestTypes
        }))
      )))
  }
}

export const engines: ReadonlyArray<EngineUnderTest> = [sqliteOwned, sqliteFromClient, pgOwned, pgFromClient]
