/**
 * A fresh store under a growing backlog (docs/performance-pg.md, "A fresh store's claims under a growing
 * backlog"): producers enqueue back to back while one worker (`process`, concurrency 1) in the same process
 * drains, on a new database. Per segment: enqueues and jobs handled a second, the backlog, and the sequential
 * scans of the jobs table so far (`pg_stat_user_tables`, flushed by the server every few hundred ms). A
 * claim that stays on its indexes keeps the worker's rate flat as the backlog grows; a plan that scans the
 * table makes it fall with every segment.
 *
 * With `STREAM_BATCH=n` the worker is a `claimBatch(n)` + `ackAll` loop instead (the batch claim's and
 * the batch ack's plans: the same exposure).
 *
 *   tsx bench/pg/stream.ts    STREAM_JOBS (default 60000), STREAM_SEGMENT (6000), STREAM_PRODUCERS (2),
 *                             STREAM_BATCH (unset: `process`), STREAM_PAUSE_MS (0: each batch's handling
 *                             time), STREAM_WARM (1: 20 jobs handled and the table analyzed first);
 *                             ALKSTORE_PG_URL to use a server instead of booting one
 */
import { SqlClient } from "@effect/sql"
import { Effect, Fiber, Redacted, Ref } from "effect"
import { PgStore, Queues } from "../../src/index.js"
import { admin, startServer } from "./cluster.js"

const JOBS = Number(process.env.STREAM_JOBS ?? 60_000)
const SEGMENT = Number(process.env.STREAM_SEGMENT ?? 6_000)
const PRODUCERS = Number(process.env.STREAM_PRODUCERS ?? 2)
const BATCH = process.env.STREAM_BATCH === undefined ? undefined : Number(process.env.STREAM_BATCH)
// A batch's handling time (a batch worker otherwise keeps the backlog near zero, and the table small).
const PAUSE_MS = Number(process.env.STREAM_PAUSE_MS ?? 0)
// First a queue whose worker keeps up: 20 jobs handled, then the table analyzed, as autovacuum leaves it.
const WARM = process.env.STREAM_WARM === "1"

const server = await startServer()
const database = `alkstore_stream_${process.pid}`
try {
  await admin(server.adminUrl, [`CREATE DATABASE ${database}`])
  const program = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const queue = yield* (yield* Queues.Queues).queue("stream")
    const handled = yield* Ref.make(0)
    const batches = (n: number) =>
      Effect.gen(function*() {
        const handles = yield* queue.claimBatch("w", n)
        if (handles.length === 0) return yield* Effect.sleep("1 millis")
        if (PAUSE_MS > 0) yield* Effect.sleep(PAUSE_MS)
        yield* queue.ackAll(handles)
        yield* Ref.update(handled, (done) => done + handles.length)
      }).pipe(Effect.forever)
    const worker = yield* Effect.fork(
      BATCH === undefined
        ? queue.process("w", () => Ref.update(handled, (n) => n + 1), { concurrency: 1 })
        : batches(BATCH)
    )
    let sent = 0
    if (WARM) {
      for (let n = 0; n < 20; n++) yield* queue.enqueue({ warm: n })
      while ((yield* Ref.get(handled)) < 20) yield* Effect.sleep("5 millis")
      yield* sql.unsafe(`ANALYZE alkstore.__alkstore_jobs`)
      yield* Ref.set(handled, 0)
    }
    const produce = Effect.gen(function*() {
      while (sent < JOBS) {
        sent++
        yield* queue.enqueue({ n: sent })
      }
    })
    const producers = yield* Effect.fork(Effect.all(Array.from({ length: PRODUCERS }, () => produce), { concurrency: "unbounded" }))
    const lines = ["| enqueued | enqueues/s | handled/s | backlog | sequential scans of the jobs table (total) | rows they read (total) |", "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    let started = performance.now()
    let handledBefore = 0
    for (let next = SEGMENT; next <= JOBS; next += SEGMENT) {
      while (sent < next) yield* Effect.sleep("20 millis")
      const seconds = (performance.now() - started) / 1000
      const done = yield* Ref.get(handled)
      const [scans] = yield* sql<{ seq_scan: string; seq_tup_read: string }>`SELECT seq_scan, seq_tup_read
        FROM pg_stat_user_tables WHERE relname = '__alkstore_jobs'`
      lines.push(`| ${next} | ${(SEGMENT / seconds).toFixed(0)} | ${((done - handledBefore) / seconds).toFixed(0)} | ` +
        `${sent - done} | ${scans?.seq_scan ?? "?"} | ${scans?.seq_tup_read ?? "?"} |`)
      started = performance.now()
      handledBefore = done
    }
    yield* Fiber.join(producers)
    yield* Fiber.interrupt(worker)
    return lines
  })
  const lines = await Effect.runPromise(
    Effect.scoped(Effect.provide(program, PgStore.layer({ url: Redacted.make(server.urlFor(database)) })))
  )
  process.stdout.write(`${JOBS} jobs, ${PRODUCERS} producers and one worker ` +
    `${WARM ? "(after 20 jobs handled and an ANALYZE) " : ""}` +
    `(${BATCH === undefined ? "process" : `claimBatch(${BATCH}) + ackAll`}) in one process, a fresh database ` +
    `(${server.version.split(" on ")[0]}; ${server.origin}).\n\n${lines.join("\n")}\n`)
} finally {
  await admin(server.adminUrl, [`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`]).catch(() => {})
  server.stop()
}
