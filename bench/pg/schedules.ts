/**
 * Many schedules due together (docs/performance-pg.md, "A scheduler tick of many due schedules"): N
 * schedules `@every 1m` are registered, then made due at once (their next boundary set to a millisecond
 * ago, as after an outage or a fleet-wide redeploy that registers them in one go), and a runner starts. Prints
 * the milliseconds from the runner's start until every schedule's job is written, on PostgreSQL and on a
 * SQLite file, and the scheduler's ticks that fired them (`alkstore.scheduler.tick` spans).
 *
 *   tsx bench/pg/schedules.ts    SCHEDULES (default 10000), ROUNDS (default 3); ALKSTORE_PG_URL to use a
 *                                server instead of booting one
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Fiber, Layer, Redacted, Tracer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { PgStore, Scheduler, SqliteStore } from "../../src/index.js"
import { admin, startServer } from "./cluster.js"

const SCHEDULES = Number(process.env.SCHEDULES ?? 10_000)
const ROUNDS = Number(process.env.ROUNDS ?? 3)

/** Counts the scheduler's ticks that fired (Effect's own spans underneath). */
const countingTracer = () => {
  const native = Effect.runSync(Effect.tracer)
  let ticks = 0
  const tracer = Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) => {
      const span = native.span(name, parent, context, links, startTime, kind, options)
      if (name === "alkstore.scheduler.tick") {
        const end = span.end.bind(span)
        span.end = (endTime, exit) => {
          if ((span.attributes.get("alkstore.fired") ?? 0) !== 0) ticks++
          end(endTime, exit)
        }
      }
      return span
    },
    context: (f) => f()
  })
  return { tracer, ticks: () => ticks }
}

const round = (store: Layer.Layer<Scheduler.Scheduler | SqlClient.SqlClient, unknown>, tasks: string, jobs: string) =>
  Effect.gen(function*() {
    const scheduler = yield* Scheduler.Scheduler
    const sql = yield* SqlClient.SqlClient
    for (let i = 0; i < SCHEDULES; i++) yield* scheduler.schedule(`tenant-${i}`, "@every 1m", "tenants", { i })
    const now = yield* Clock.currentTimeMillis
    yield* sql.unsafe(`UPDATE ${tasks} SET next_fire_at = ${now - 1}`)
    const { tracer, ticks } = countingTracer()
    const started = performance.now()
    const runner = yield* Effect.fork(Effect.withTracer(scheduler.runSchedules, tracer))
    while (Number((yield* sql.unsafe<{ n: string | number }>(`SELECT count(*) AS n FROM ${jobs}`))[0]!.n) < SCHEDULES) {
      yield* Effect.sleep("2 millis")
    }
    const ms = performance.now() - started
    yield* Fiber.interrupt(runner)
    return { ms, ticks: ticks() }
  }).pipe(Effect.provide(store), Effect.scoped)

const server = await startServer()
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-schedules-"))
const lines = ["| engine | round | ms until every job is written | ticks that fired |", "| --- | ---: | ---: | ---: |"]
try {
  for (let r = 1; r <= ROUNDS; r++) {
    const database = `alkstore_schedules_${process.pid}_${r}`
    await admin(server.adminUrl, [`CREATE DATABASE ${database}`])
    const pg = await Effect.runPromise(round(
      PgStore.layer({ url: Redacted.make(server.urlFor(database)) }),
      "alkstore.__alkstore_scheduler_tasks",
      "alkstore.__alkstore_jobs"
    ))
    await admin(server.adminUrl, [`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`])
    lines.push(`| PostgreSQL | ${r} | ${pg.ms.toFixed(0)} | ${pg.ticks} |`)
    const sqlite = await Effect.runPromise(round(
      SqliteStore.layer({ filename: path.join(dir, `${r}.db`) }),
      "__alkstore_scheduler_tasks",
      "__alkstore_jobs"
    ))
    lines.push(`| SQLite | ${r} | ${sqlite.ms.toFixed(0)} | ${sqlite.ticks} |`)
  }
  process.stdout.write(`${SCHEDULES} schedules due together, one runner (${server.version.split(" on ")[0]}; ` +
    `${server.origin}).\n\n${lines.join("\n")}\n`)
} finally {
  fs.rmSync(dir, { recursive: true, force: true })
  server.stop()
}
