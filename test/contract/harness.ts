/**
 * The engines every contract test runs against. A contract file exports a
 * function of an `EngineUnderTest` and is written once; `test/*.test.ts`
 * files apply it to every engine listed here.
 */
import type { SqlClient } from "@effect/sql"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { Layer } from "effect"
import { afterAll } from "vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { SqliteStore } from "../../src/index.js"

export type StoreLayer = Layer.Layer<SqliteStore.Mechanisms | SqlClient.SqlClient, unknown>

export interface EngineUnderTest {
  readonly name: string
  /** A store over a fresh database, with settings for tests that shorten them. */
  readonly store: (settings?: SqliteStore.StoreSettings & { readonly filename?: string }) => StoreLayer
}

let counter = 0
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-test-"))
// Registered on the importing test file: its stores are closed by their scopes by then.
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))

/** A database file path no other test uses. */
export const freshFile = (label = "db") => path.join(dir, `${process.pid}-${++counter}-${label}.db`)

export const sqliteOwned: EngineUnderTest = {
  name: "sqlite (SqliteStore.layer)",
  store: (settings = {}) => SqliteStore.layer({ filename: settings.filename ?? freshFile(), ...settings })
}

export const sqliteFromClient: EngineUnderTest = {
  name: "sqlite (SqliteStore.layerFromClient over @effect/sql-sqlite-node)",
  store: (settings = {}) =>
    SqliteStore.layerFromClient(settings).pipe(
      Layer.provideMerge(SqliteClient.layer({ filename: settings.filename ?? freshFile() }))
    )
}

export const engines: ReadonlyArray<EngineUnderTest> = [sqliteOwned, sqliteFromClient]
