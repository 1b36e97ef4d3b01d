/**
 * Cached plans follow the size of the tables they read (src/internal/pg/planSize.ts): a
 * prepared statement's generic plan is costed on the table as it was when
 * the plan was made, and kept until the next ANALYZE. Made on a table of one
 * page — a queue whose workers keep up, analyzed by autovacuum in that state —
 * every read in it is a sequential scan, which a burst of work then runs on a
 * table of thousands of rows, several times per claim.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Queues } from "../src/index.js"
import { flowStatements } from "../src/internal/pg/flowStatements.js"
import { makeNotifier } from "../src/internal/pg/notify.js"
import { sizeClassOf } from "../src/internal/pg/planSize.js"
import { queueStatements } from "../src/internal/pg/queueStatements.js"
import { pgOwned, pgSchemaFor } from "./contract/harness.js"
import { eventually, queueOf } from "./contract/support.js"
import { expectIndexScansOnly, jobsScans, type PlanNode, planOf, rolledBack } from "./support/pgPlans.js"

describe("PostgreSQL plans follow the size of the tables they read", () => {
  it("a size class is a doubling of the table's pages, up to 4 096 pages", () => {
    expect([0, 1, 2, 3, 4, 7, 8, 1023, 1024, 4095, 4096, 1e7].map(sizeClassOf)).toEqual([0, 0, 1, 1, 2, 2, 3, 9, 10, 11, 12, 12])
  })

  it.live("statements planned on a table of one page are planned again once a burst has grown it", () => {
    const filename = "pg-plan-size"
    const schema = pgSchemaFor(filename)
    const sql = queueStatements(schema, makeNotifier(schema))
    return Effect.gen(function*() {
      const db = yield* SqlClient.SqlClient
      yield* db.unsafe(`ALTER TABLE ${schema}.__alkstore_jobs SET (autovacuum_enabled = false)`) // no ANALYZE meanwhile
      const q = yield* queueOf("burst")
      // a table of one page, analyzed, as autovacuum leaves a queue whose workers keep up (the claims
      // before the burst find nothing, so they change nothing: the table's size class stays as it was)
      yield* (yield* queueOf("other")).enqueueBatch(Array.from({ length: 20 }, (_, n) => ({ n })))
      yield* db.unsafe(`ANALYZE ${schema}.__alkstore_jobs`)
      // an application's own table in the schema, with a name that is no plain identifier: not followed
      yield* db.unsafe(`CREATE TABLE ${schema}."app (table" (x int)`)
      const now = Date.now()
      const ids = Array.from({ length: 100 }, (_, i) => 20_000 + i).join(",")
      const checked: Record<string, readonly [string, string]> = {
        claimOne: [sql.claimOne, `(${now}, 'w', 'burst', 1)`],
        claim: [sql.claim, `(${now}, 'w', 'burst', 100)`],
        ackMany: [sql.ackMany, `('{${ids}}', '{${ids}}', '${makeNotifier(schema).channel}')`]
      }
      const namesOf = (text: string) =>
        Effect.map(
          db.unsafe<{ name: string }>(`SELECT name FROM pg_prepared_statements WHERE statement = $1 ORDER BY prepare_time`, [
            text
          ]),
          (rows) => rows.map((r) => r.name)
        )
      const genericPlan = (name: string, args: string) =>
        Effect.gen(function*() {
          yield* db.unsafe(`SET LOCAL plan_cache_mode = force_generic_plan`) // the plan the statement settles on
          const rows = yield* db.unsafe<{ "QUERY PLAN": unknown }>(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ${name}${args}`)
          yield* db.unsafe(`SET LOCAL plan_cache_mode = auto`)
          return planOf(rows)
        })
      // One connection (the application's transaction), so its prepared statements can be read; undone after.
      const { after, before } = yield* rolledBack(db, Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const work = Effect.gen(function*() {
          yield* queues.limits("burst") // a statement of another table
          const one = yield* q.claim("w")
          if (one._tag === "Some") yield* one.value.ack
          yield* q.ackAll(yield* q.claimBatch("w", 3))
        })
        for (let i = 0; i < 8; i++) yield* work // past five runs: each statement's generic plan made and cached
        const first = yield* namesOf(sql.claimOne)
        expect(first.length).toBe(1)
        // the burst; the store's check (on another connection) sees the heap file grow before it commits
        yield* db.unsafe(`INSERT INTO ${schema}.__alkstore_jobs (queue, payload, state, priority, run_at, max_attempts,
            visibility_timeout, backoff_base, created_at, group_key)
          SELECT 'burst', '{}', 'pending', 0, n, 3, 30000, 1000, n, '' FROM generate_series(1, 30000) AS n`)
        // before the change, the burst ran on the first statement, whatever its size (more than one new
        // name if a check read the table while the insert was growing it; each planned after the burst)
        yield* eventually(Effect.gen(function*() {
          yield* work
          expect((yield* namesOf(sql.claimOne)).length).toBeGreaterThanOrEqual(2)
        }))
        const after: Record<string, PlanNode> = {}
        for (const [label, [text, args]] of Object.entries(checked)) {
          after[label] = yield* genericPlan((yield* namesOf(text)).at(-1)!, args)
        }
        // a statement that reads only a table that did not grow keeps its prepared statement
        expect(yield* namesOf(flowStatements(schema).limits)).toHaveLength(1)
        return { after, before: yield* genericPlan(first[0]!, checked.claimOne![1]) }
      }))
      // the hazard this guards against: the plan cached on the small table scans the grown one
      expect(jobsScans(before).some((n) => n["Node Type"] === "Seq Scan"), JSON.stringify(before)).toBe(true)
      for (const [label, plan] of Object.entries(after)) expectIndexScansOnly(label, plan, 1000)
    }).pipe(Effect.provide(pgOwned.store({ filename, planCheckEvery: "20 millis" })))
  })
})
