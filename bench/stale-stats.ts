/**
 * Batch claims on statistics of a nearly empty table (docs/performance.md, "Statistics of a nearly empty
 * table"): a store's file is `ANALYZE`d while its queue holds 15 jobs (as an application's `ANALYZE`, or
 * `PRAGMA optimize` at close with the queue drained, leaves it), then 100 000 jobs arrive and are drained
 * with `claimBatch(100)` + `ackAll`. Prints the milliseconds per batch, beside the same run on a file never
 * analyzed: a write planned as a scan of the table costs more with every job pending.
 *
 *   tsx bench/stale-stats.ts     STALE_JOBS (default 100000), STALE_BATCHES (timed batches, default 200)
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Queues, SqliteStore } from "../src/index.js"

const JOBS = Number(process.env.STALE_JOBS ?? 100_000)
const BATCHES = Number(process.env.STALE_BATCHES ?? 200)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-stale-stats-"))

let files = 0
const run = (analyze: boolean) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const q = yield* (yield* Queues.Queues).queue("q")
    yield* q.enqueueBatch(Array.from({ length: 20 }, (_, i) => ({ i })))
    yield* q.ackAll(yield* q.claimBatch("w", 5))
    if (analyze) yield* sql.unsafe("ANALYZE")
    for (let b = 0; b < JOBS / 100; b++) yield* q.enqueueBatch(Array.from({ length: 100 }, (_, i) => ({ i })))
    for (let r = 0; r < 20; r++) yield* q.ackAll(yield* q.claimBatch("w", 100)) // warm
    const started = performance.now()
    for (let r = 0; r < BATCHES; r++) yield* q.ackAll(yield* q.claimBatch("w", 100))
    return (performance.now() - started) / BATCHES
  }).pipe(Effect.provide(SqliteStore.layer({ filename: path.join(dir, `${++files}.db`) })), Effect.scoped)

try {
  const lines = ["| file | ms per `claimBatch(100)` + `ackAll` |", "| --- | ---: |"]
  for (const analyze of [true, false, true, false]) {
    const ms = await Effect.runPromise(run(analyze))
    lines.push(`| ${analyze ? "ANALYZEd at 15 jobs" : "never analyzed"} | ${ms.toFixed(3)} |`)
  }
  process.stdout.write(`${JOBS} jobs pending, ${BATCHES} batches timed.\n\n${lines.join("\n")}\n`)
} finally {
  fs.rmSync(dir, { recursive: true, force: true })
}
