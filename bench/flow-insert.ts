/**
 * What flow control adds to an enqueue into a queue **without** limits (issue 13): every insert carries the
 * round subquery of src/internal/sqlite/flowInsert.ts (a primary-key probe of `__alkstore_flow_limits` that finds
 * nothing). The same INSERT with and without it, on one migrated SQLite file, 500-row transactions alternating
 * between the two statements so both see the same load; per-insert time summed per side.
 *
 *   tsx bench/flow-insert.ts        (FLOW_INSERT_ROUNDS, default 40 transactions per side)
 */
import Sqlite from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Queues, SqliteStore } from "../src/index.js"
import { sql } from "../src/internal/sqlite/queueStatements.js"

const ROUNDS = Number(process.env.FLOW_INSERT_ROUNDS ?? 40)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-flow-insert-"))
const file = path.join(dir, "insert.db")
await Effect.runPromise(
  Effect.scoped(Effect.provide(Effect.flatMap(Queues.Queues, (q) => q.queue("warm")), SqliteStore.layer({ filename: file })))
)
const db = new Sqlite(file)
db.pragma("journal_mode = WAL")
db.pragma("synchronous = NORMAL")
const withRound = db.prepare(sql.insert)
const withoutRound = db.prepare(`${sql.insert.slice(0, sql.insert.lastIndexOf("?, (SELECT"))}?, NULL)`)
const values = (i: number) => ["plain", "{}", "pending", 0, i, 3, 30_000, 1_000, null, null, i, null, ""]
let withNs = 0n
let withoutNs = 0n
for (let k = 0; k < 2 * ROUNDS; k++) {
  const round = k % 4 < 2 // alternate which side goes first
  const flow = (k % 2 === 0) === round
  const started = process.hrtime.bigint()
  db.transaction(() => {
    for (let i = 0; i < 500; i++) {
      if (flow) withRound.run(...values(i), "plain", "", 0, "plain")
      else withoutRound.run(...values(i))
    }
  })()
  const took = process.hrtime.bigint() - started
  if (flow) withNs += took
  else withoutNs += took
}
db.close()
fs.rmSync(dir, { recursive: true, force: true })
const per = (ns: bigint) => Number(ns) / (ROUNDS * 500) / 1000
process.stdout.write(
  `insert into a queue without limits, in 500-row transactions: with the round subquery ${per(withNs).toFixed(2)} µs, ` +
    `without ${per(withoutNs).toFixed(2)} µs (${(per(withNs) / per(withoutNs)).toFixed(2)}×); ` +
    `1-minute load average ${os.loadavg()[0]!.toFixed(2)} on ${os.cpus().length} cores\n`
)
