/**
 * The seam between the chaos programs and a storage engine. An engine is a
 * way to (1) create a fresh shared database, described by a small JSON
 * `Target` that can be handed to child processes, and (2) open a store
 * layer on a target from any process.
 *
 * SQLite: the target is a file path. PostgreSQL: a server URL
 * (`ALKSTORE_PG_URL`, or a throw-away cluster `chaos/run.ts` boots) and a
 * fresh schema per check, the URL's `search_path` starting at it so the checks' plain SQL
 * (the ledger resource, the lease row) finds the engine's tables.
 */
import type { SqlClient } from "@effect/sql"
import * as SqlClientTag from "@effect/sql/SqlClient"
import { Effect, type Layer, Redacted } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { PgStore, SqliteStore } from "../src/index.js"

export type Target =
  | { readonly kind: "sqlite"; readonly filename: string }
  | { readonly kind: "pg"; readonly url: string; readonly schema: string }

export type EngineKind = Target["kind"]

/** The settings every engine's layer accepts (the engine-free ones). */
export type Settings = SqliteStore.StoreSettings

export type StoreLayer = Layer.Layer<SqliteStore.Mechanisms | SqlClient.SqlClient, unknown>

/** Opens the store's layer on a target (in the driver or in a child process). */
export const openStore = (target: Target, settings: Settings = {}): StoreLayer => {
  switch (target.kind) {
    case "sqlite":
      return SqliteStore.layer({ filename: target.filename, ...settings })
    case "pg":
      return PgStore.layer({ url: Redacted.make(target.url), schema: target.schema, ...settings })
  }
}

// Made on first use: every child process imports this module too, and only the
// driver (chaos/run.ts) removes its directory, so an eager one leaked per child.
let workDir: string | undefined
let counter = 0

/** A path in this run's scratch directory for ledgers and database files, removed by `cleanup`. */
export const scratch = (name: string) => {
  workDir ??= fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-chaos-"))
  return path.join(workDir, `${++counter}-${name}`)
}

export const cleanup = () => {
  if (workDir !== undefined) fs.rmSync(workDir, { recursive: true, force: true })
}

/**
 * A fresh, empty database for one check. On PostgreSQL a schema on `server`
 * (default `ALKSTORE_PG_URL`, which `chaos/run.ts` sets to a cluster it
 * boots when none is given).
 */
export const createTarget = (kind: EngineKind, label: string, server = process.env.ALKSTORE_PG_URL): Target => {
  switch (kind) {
    case "sqlite":
      return { kind, filename: scratch(`${label}.db`) }
    case "pg": {
      if (server === undefined) throw new Error("the pg engine needs ALKSTORE_PG_URL (a server chaos may write to)")
      const schema = `chaos_${label.replace(/\W/g, "_")}_${process.pid}_${++counter}`
      const url = new URL(server)
      url.searchParams.set("options", `-c search_path=${schema}`)
      return { kind, url: url.toString(), schema }
    }
  }
}

/** The engine's own consistency check: `"ok"` when the database is sound. */
export const integrity = (target: Target): Effect.Effect<string, unknown> =>
  target.kind === "sqlite"
    ? Effect.flatMap(SqlClientTag.SqlClient, (sql) => sql<{ integrity_check: string }>`PRAGMA integrity_check`).pipe(
      Effect.map((rows) => rows.map((r) => r.integrity_check).join("; ")),
      Effect.provide(openStore(target))
    )
    : Effect.succeed("ok") // PostgreSQL keeps its own invariants; nothing to ask

/** Runs `effect` with a store on `target` and closes it after. */
export const withStore = <A, E>(
  target: Target,
  effect: Effect.Effect<A, E, SqliteStore.Mechanisms | SqlClient.SqlClient>,
  settings: Settings = {}
): Promise<A> => Effect.runPromise(Effect.provide(effect, openStore(target, settings)) as Effect.Effect<A, unknown>)

/**
 * A lock row as stored, read past the public API (which keeps reserved
 * names such as the scheduler's lease out of reach). Instants in epoch ms;
 * an engine storing them otherwise converts here.
 */
export const lockRow = (name: string) =>
  Effect.flatMap(SqlClientTag.SqlClient, (sql) =>
    sql<{ owner: string; token: number | string; expires_at: number | string }>`
      SELECT owner, token, expires_at FROM __alkstore_locks WHERE name = ${name}`).pipe(
    Effect.map((rows) =>
      rows.length === 0
        ? undefined
        : { owner: rows[0]!.owner, token: Number(rows[0]!.token), expiresAt: Number(rows[0]!.expires_at) }
    )
  )

export const parseTarget = (json: string | undefined): Target => {
  if (json === undefined) throw new Error("missing target argument")
  return JSON.parse(json) as Target
}
