import * as SqlClient from "@effect/sql/SqlClient"
import { Data, Effect, Layer, Redacted } from "effect"
import * as fs from "node:fs"
import * as SqliteStore from "../../SqliteStore.js"

/**
 * The one place the operator tools choose an engine from `--db`: a
 * `postgres://` (or `postgresql://`) URL is the PostgreSQL engine, anything
 * else is a SQLite file path.
 */
export type Target =
  | { readonly engine: "sqlite"; readonly filename: string }
  | { readonly engine: "postgres"; readonly url: string }

export const parseTarget = (db: string): Target =>
  /^postgres(ql)?:\/\//i.test(db) ? { engine: "postgres", url: db } : { engine: "sqlite", filename: db }

/** Query parameters of a PostgreSQL URL that carry a secret (libpq's names; matched in any case). */
const secretParams = new Set(["password", "sslpassword"])

/** How a target is named in messages: a URL without its passwords (user info, `?password=`, `?sslpassword=`). */
export const describeTarget = (target: Target): string => {
  if (target.engine === "sqlite") return target.filename
  try {
    const url = new URL(target.url)
    if (url.password !== "") url.password = "***"
    if ([...url.searchParams.keys()].some((key) => secretParams.has(key.toLowerCase()))) {
      const masked = [...url.searchParams].map(([key, value]): [string, string] => [key, secretParams.has(key.toLowerCase()) ? "***" : value])
      url.search = new URLSearchParams(masked).toString()
    }
    return url.toString()
  } catch {
    return "postgres://(unparsable URL)"
  }
}

/** The database could not be opened or reached (exit code 3). */
export class DatabaseUnavailable extends Data.TaggedError("DatabaseUnavailable")<{
  readonly target: string
  readonly reason: string
}> {
  override get message() {
    return `cannot open database ${this.target}: ${this.reason}`
  }
}

export type OpenError = DatabaseUnavailable

export type StoreServices = SqliteStore.Mechanisms | SqlClient.SqlClient

const reasonOf = (error: unknown): string => {
  const cause = (error as { cause?: unknown }).cause
  const text = cause instanceof Error ? cause.message : error instanceof Error ? error.message : String(error)
  return text.replace(/\s+/g, " ").trim()
}

/**
 * The store over `target`. A SQLite file must exist unless `create` (only
 * `migrate` creates one): a mistyped path must not look like an empty store.
 */
export const storeLayer = (target: Target, options: { readonly create: boolean }): Layer.Layer<StoreServices, OpenError> => {
  const name = describeTarget(target)
  switch (target.engine) {
    case "sqlite": {
      const check = Effect.suspend(() => {
        if (options.create || target.filename === ":memory:") return Effect.void
        if (!fs.existsSync(target.filename)) {
          return Effect.fail(new DatabaseUnavailable({ target: name, reason: "no such file (run `alkstore migrate` to create one)" }))
        }
        if (!fs.statSync(target.filename).isFile()) {
          return Effect.fail(new DatabaseUnavailable({ target: name, reason: "not a regular file" }))
        }
        return Effect.void
      })
      return Layer.unwrapEffect(Effect.as(check, SqliteStore.layer({ filename: target.filename }))).pipe(
        Layer.catchAll((error) =>
          Layer.fail(
            error instanceof DatabaseUnavailable ? error : new DatabaseUnavailable({ target: name, reason: reasonOf(error) })
          )
        )
      )
    }
    case "postgres":
      // A server that cannot be reached (or refuses the login) fails here, at connect, as DatabaseUnavailable.
      // The engine is loaded for a PostgreSQL target only (a chunk of its own in the shipped bundle, scripts/
      // bundle-cli.ts): unbundled, its driver was ~70 ms of every command's start.
      return Layer.unwrapEffect(
        Effect.map(Effect.promise(() => import("../../PgStore.js")), (PgStore) => PgStore.layer({ url: Redacted.make(target.url) }))
      ).pipe(
        Layer.catchAll((error) => Layer.fail(new DatabaseUnavailable({ target: name, reason: reasonOf(error) })))
      )
  }
}
