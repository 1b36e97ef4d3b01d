/**
 * Several OS processes enqueue and claim on one SQLite file at once (the real
 * clock): no job is claimed twice, none is lost.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { type EngineUnderTest, freshFile, pgChildDatabase, pgOwned, sqliteOwned } from "./contract/harness.js"

interface Report {
  readonly worker: number
  readonly enqueued: ReadonlyArray<string>
  readonly claimed: ReadonlyArray<{ readonly id: number; readonly key: string; readonly acked: boolean }>
}

const runChild = (args: ReadonlyArray<string>) =>
  Effect.async<Report, Error>((resume) => {
    const child = spawn(process.execPath, ["--import", "tsx", "test/fixtures/queue-worker.ts", ...args], {
      stdio: ["ignore", "pipe", "pipe"]
    })
    let out = ""
    let err = ""
    child.stdout.on("data", (chunk) => (out += chunk))
    child.stderr.on("data", (chunk) => (err += chunk))
    child.on("exit", (code) =>
      resume(
        code === 0
          ? Effect.try({ try: () => JSON.parse(out.trim()) as Report, catch: (e) => new Error(`bad output ${out}: ${e}`) })
          : Effect.fail(new Error(`child exited ${code}: ${err}`))
      ))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

const jobCount = (engine: EngineUnderTest, filename: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_jobs`
    return Number(row!.n)
  }).pipe(Effect.provide(engine.store({ filename })))

const variants = [
  { engine: sqliteOwned, title: "one SQLite file", database: (filename: string) => Effect.succeed(filename) },
  {
    engine: pgOwned,
    title: "one PostgreSQL database",
    database: (filename: string) => Effect.promise(() => pgChildDatabase(filename))
  }
] as const

for (const { database, engine, title } of variants) describe(`several processes on ${title}`, () => {
  it.live("enqueue and claim concurrently: no job claimed twice, none lost", () => {
    const filename = freshFile("multiprocess")
    const workers = 2
    const perWorker = 250
    return Effect.gen(function*() {
      // migrate once and create the app tables the workers use as a start barrier and to say they are done
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE mp_ready (worker INTEGER PRIMARY KEY)`
        yield* sql`CREATE TABLE mp_done (worker INTEGER PRIMARY KEY)`
      }).pipe(Effect.provide(engine.store({ filename })))
      const db = yield* database(filename)

      const reports = yield* Effect.all(
        Array.from({ length: workers }, (_, i) => runChild([db, String(i), String(workers), String(perWorker)])),
        { concurrency: "unbounded" }
      )

      const enqueued = reports.flatMap((r) => r.enqueued)
      const claimed = reports.flatMap((r) => r.claimed)
      expect(enqueued).toHaveLength(workers * perWorker)
      expect(new Set(enqueued).size).toBe(enqueued.length)
      // every job claimed exactly once, by exactly one process, and acked by that claim
      const keys = claimed.map((c) => c.key)
      expect(keys).toHaveLength(enqueued.length)
      expect(new Set(keys).size).toBe(keys.length)
      expect(new Set(keys)).toEqual(new Set(enqueued))
      expect(claimed.every((c) => c.acked)).toBe(true)
      // the work really was shared between processes
      expect(reports.filter((r) => r.claimed.length > 0).length).toBeGreaterThanOrEqual(2)
      expect(reports.some((r) => r.claimed.some((c) => !c.key.startsWith(`${r.worker}:`)))).toBe(true)
      expect(yield* jobCount(engine, filename)).toBe(0)
    })
  }, 60_000)
})
