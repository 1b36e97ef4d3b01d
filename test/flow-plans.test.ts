/**
 * SQLite's plans of flow control's group reads (migration 9, `__alkstore_jobs_flow_group` by queue, group,
 * state, round, id and lease end): a limited claim's reads of a group — its live claims, its live jobs ahead
 * of a candidate — and an enqueue's read of its group's last round are index searches of that index, one
 * range per state, on a fresh file and after an application's `ANALYZE`: never a scan of the table or of
 * every entry of a group (a group's backlog of 10 000 jobs would be read at every claim and enqueue).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { flowSql } from "../src/internal/sqlite/flowStatements.js"
import { sql as queueSql } from "../src/internal/sqlite/queueStatements.js"
import { sqliteOwned } from "./contract/harness.js"
import { queueOf, setLimits } from "./contract/support.js"

const plan = (text: string, params: ReadonlyArray<string | number | null>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql.unsafe<{ detail: string }>(`EXPLAIN QUERY PLAN ${text}`, params as Array<string | number | null>),
      (rows) => rows.map((row) => row.detail)
    ))

/** The plan's reads of the jobs table (not of another table). */
const jobReads = (lines: ReadonlyArray<string>) => lines.filter((line) => /__alkstore_jobs(?!_)/.test(line))

describe("flow control's group reads on SQLite", () => {
  it.effect("are searches of __alkstore_jobs_flow_group by group and state, before and after ANALYZE", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* setLimits("plans", { concurrency: 10, groupConcurrency: 1 })
      const q = yield* queueOf("plans")
      const other = yield* queueOf("plans-other")
      for (const group of ["a", "b", "c"]) {
        yield* q.enqueueBatch(Array.from({ length: 300 }, (_, i) => i), { group })
        yield* q.enqueueBatch(Array.from({ length: 30 }, (_, i) => i), { group, delay: "1 hour" })
      }
      yield* other.enqueueBatch(Array.from({ length: 300 }, (_, i) => i))
      yield* q.claimBatch("w", 3)
      const check = Effect.gen(function*() {
        const now = 1_000
        const groupStart = flowSql.groupStart("1:0")
        const groupAhead = flowSql.groupAhead(1)
        const pendingHead = flowSql.pendingHead("1:0")
        const reads = {
          groupStart: yield* plan(groupStart.text, groupStart.bind(["plans", "a", 5, 100, now])),
          groupAhead: yield* plan(groupAhead.text, groupAhead.bind(["plans", "a", 5, 100])),
          pendingHead: yield* plan(pendingHead.text, pendingHead.bind(["plans", now]))
        }
        // the live claims (not asked by groupAhead), then the jobs ahead: one search per live state
        const expected = { groupStart: 4, groupAhead: 3, pendingHead: 4 }
        for (const [name, lines] of Object.entries(reads)) {
          const group = jobReads(lines).filter((line) => !line.includes("__alkstore_jobs_flow "))
          // pendingHead reads its page from the flow index; every other read of the jobs table is a group read
          expect(group.length, `${name}:\n${lines.join("\n")}`).toBe(expected[name as keyof typeof expected])
          for (const line of group) {
            expect(line, `${name}:\n${lines.join("\n")}`).toMatch(
              /^SEARCH __alkstore_jobs USING COVERING INDEX __alkstore_jobs_flow_group \(queue=\? AND group_key=\? AND state=\?/
            )
          }
        }
        // An enqueue's round: the group's last round, one search per state, then its priority's lowest pending one.
        const insert = yield* plan(queueSql.insert, Array.from({ length: queueSql.insert.split("?").length - 1 }, () => "x"))
        // (The statement names the jobs table `j` and `p` there; `g` is its one-row table of the group, and the
        // limits row is a search by its key.)
        const lastRound = insert.filter((line) => line.includes("__alkstore_jobs_flow_group"))
        expect(lastRound.length, insert.join("\n")).toBe(3)
        for (const line of lastRound) {
          expect(line).toMatch(/^SEARCH j USING COVERING INDEX __alkstore_jobs_flow_group \(queue=\? AND group_key=\? AND state=\?/)
        }
        for (const line of insert.filter((line) => /^SCAN /.test(line))) {
          expect(line, insert.join("\n")).toMatch(/^SCAN (CONSTANT ROW|g|__alkstore_id_floor)$/)
        }
      })
      yield* check
      yield* sql.unsafe("ANALYZE")
      yield* check
    }).pipe(Effect.provide(sqliteOwned.store({ fallbackPoll: "1 hour" }))))

  it.effect("the one-statement claim of a limited queue searches indexes only, before and after ANALYZE", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* setLimits("first", { concurrency: 10, groupConcurrency: 1, rate: { limit: 5, per: "1 second" } })
      const q = yield* queueOf("first")
      for (const group of ["a", "b", "c"]) {
        yield* q.enqueueBatch(Array.from({ length: 300 }, (_, i) => i), { group })
        yield* q.enqueueBatch(Array.from({ length: 30 }, (_, i) => i), { group, delay: "1 hour" })
      }
      yield* (yield* queueOf("first-other")).enqueueBatch(Array.from({ length: 300 }, (_, i) => i))
      yield* q.claimBatch("w", 3)
      const check = Effect.gen(function*() {
        for (const key of ["1:5:1000::", "::::", "1::::", "1:5:1000:2:1000", ":::2:1000"]) {
          const first = flowSql.claimFirst(key)!.statement
          const lines = yield* plan(first.text, first.bind([1_000, "w", "first"]))
          const reads = lines.filter((line) => /^(SCAN|SEARCH) /.test(line.trim()))
          expect(reads.length, lines.join("\n")).toBeGreaterThan(0)
          // Every read of the jobs table and the log is an index search (the head of the flow index is its first
          // entry); what is scanned is a subquery's own rows (the head, a log entry, the ahead counts' bounded
          // pages) and, after an ANALYZE that found it so, the limits table of one row per limited queue (as
          // the readiness read does then).
          for (const line of reads) {
            expect(line, `${key}:\n${lines.join("\n")}`).toMatch(/^SEARCH |^SCAN (h|e|l|\(subquery-\d+\)|CONSTANT ROW)$/)
          }
          expect(lines.filter((line) => line.includes("__alkstore_jobs_flow ")).length, lines.join("\n")).toBe(1)
        }
      })
      yield* check
      yield* sql.unsafe("ANALYZE")
      yield* check
    }).pipe(Effect.provide(sqliteOwned.store({ fallbackPoll: "1 hour" }))))
})
