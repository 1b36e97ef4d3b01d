/**
 * Effect's PersistedQueue and RateLimiter over alkstore, across real OS
 * processes on one database (SQLite file, PostgreSQL): no element is taken
 * twice while its take's scope is open, every element (custom ids offered by
 * every process included) is processed once, and a rate limit holds across
 * four processes exactly.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { runChild, lastJson } from "./child.js"
import { freshFile, pgChildDatabase, pgOwned, sqliteOwned } from "./contract/harness.js"

const variants = [
  { engine: sqliteOwned, title: "one SQLite file", database: (filename: string) => Effect.succeed(filename) },
  { engine: pgOwned, title: "one PostgreSQL database", database: (filename: string) => Effect.promise(() => pgChildDatabase(filename)) }
] as const

const worker = "test/fixtures/effect-stores-worker.ts"

const setUp = (engine: typeof sqliteOwned, filename: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`CREATE TABLE es_ready (worker INTEGER PRIMARY KEY)`
    yield* sql`CREATE TABLE es_inflight (id TEXT PRIMARY KEY)`
    yield* sql`CREATE TABLE es_processed (id TEXT NOT NULL, worker INTEGER NOT NULL)`
  }).pipe(Effect.provide(engine.store({ filename })))

const children = <A>(db: string, mode: string, workers: number, count: number) =>
  Effect.all(
    Array.from({ length: workers }, (_, i) =>
      Effect.map(runChild(worker, [db, mode, String(i), String(workers), String(count)]), (outcome) => {
        expect(outcome.code, outcome.stderr).toBe(0)
        return lastJson<A>(outcome.stdout)!
      })),
    { concurrency: "unbounded" }
  )

for (const { database, engine, title } of variants) {
  describe(`Effect's interfaces over alkstore, several processes on ${title}`, () => {
    it.live("PersistedQueue: no element taken twice while its scope is open; each processed once", () =>
      Effect.gen(function*() {
        const filename = freshFile("es-queue")
        yield* setUp(engine, filename)
        const workers = 3
        const perWorker = 120
        const reports = yield* children<{ processed: Array<string>; overlaps: Array<string> }>(
          yield* database(filename),
          "queue",
          workers,
          perWorker
        )
        const processed = reports.flatMap((r) => r.processed)
        expect(reports.flatMap((r) => r.overlaps)).toEqual([])
        const twice = processed.filter((id, i) => processed.indexOf(id) !== i)
        expect(twice.map((id) => reports.map((r) => r.processed.filter((p) => p === id).length))).toEqual([])
        expect(processed).toHaveLength(workers * perWorker + 50)
        expect(processed.filter((id) => id.startsWith("shared-"))).toHaveLength(50)
        // the work was shared
        expect(reports.filter((r) => r.processed.length > 0).length).toBeGreaterThanOrEqual(2)
      }), 120_000)

    it.live("RateLimiter: a limit of 50 holds across 4 processes, each grant with its own remaining count", () =>
      Effect.gen(function*() {
        const filename = freshFile("es-limit")
        yield* setUp(engine, filename)
        const reports = yield* children<{ granted: Array<{ algorithm: string; remaining: number }>; refused: number }>(
          yield* database(filename),
          "limit",
          4,
          30
        )
        for (const algorithm of ["fixed-window", "token-bucket"]) {
          const remaining = reports.flatMap((r) => r.granted.filter((g) => g.algorithm === algorithm).map((g) => g.remaining))
          expect(remaining.sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i))
        }
        expect(reports.reduce((n, r) => n + r.refused, 0)).toBe(4 * 30 * 2 - 100)
        expect(reports.filter((r) => r.granted.length > 0).length).toBeGreaterThanOrEqual(2)
      }), 120_000)
  })
}
