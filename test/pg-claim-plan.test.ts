/**
 * The PostgreSQL claim stays on the partial indexes of due work: EXPLAIN
 * (ANALYZE) of the statements a claim runs, over a table holding many dead,
 * acked (deleted), future and other-queue rows, shows index scans only (no
 * sequential scan of the jobs table) that visit no row they then discard —
 * for the plan made for the given values and for the generic plan a named
 * prepared statement runs on after its fifth execution.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Queues } from "../src/index.js"
import { flowStatements } from "../src/internal/pg/flowStatements.js"
import { makeNotifier } from "../src/internal/pg/notify.js"
import { queueStatements } from "../src/internal/pg/queueStatements.js"
import { pgOwned, pgSchemaFor } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"
import { expectIndexScansOnly, jobsScans, nodes, type PlanNode, planOf, rolledBack } from "./support/pgPlans.js"

// `generic`: the plan without the values, as a prepared statement runs it after five executions.
const explainWith = (db: SqlClient.SqlClient) => (text: string, params: ReadonlyArray<unknown>, generic = false) =>
  rolledBack(db, Effect.gen(function*() { // EXPLAIN ANALYZE runs the write: undone
    const literal = (v: unknown) => (typeof v === "number" ? String(v) : `'${String(v)}'`)
    if (generic) {
      yield* db.unsafe(`PREPARE plan_check AS ${text}`)
      yield* db.unsafe(`SET LOCAL plan_cache_mode = force_generic_plan`)
    }
    const rows = yield* db.unsafe<{ "QUERY PLAN": unknown }>(
      generic
        ? `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE plan_check(${params.map(literal).join(", ")})`
        : `EXPLAIN (ANALYZE, FORMAT JSON) ${text}`,
      generic ? [] : params as Array<string>
    )
    if (generic) yield* db.unsafe(`DEALLOCATE plan_check`)
    return planOf(rows)
  }))

/** Index scans only, none reading a row it then throws away, at most `maxVisited` rows each; these indexes used. */
const checkPlan = (plan: PlanNode, indexes: ReadonlyArray<string>, maxVisited: number) => {
  const all = nodes(plan)
  const text = JSON.stringify(plan, null, 1)
  const onJobs = jobsScans(plan)
  expect(onJobs.length, text).toBeGreaterThan(0)
  for (const node of onJobs) {
    expect(node["Node Type"], text).not.toBe("Seq Scan")
    expect(node["Node Type"], text).toMatch(/Index|Bitmap Heap/) // a bitmap heap scan reads what its index scan found
    expect(node["Rows Removed by Index Recheck"] ?? 0, text).toBe(0)
    // nothing read and then thrown away: dead, future and other rows are not in these indexes' ranges
    expect(node["Rows Removed by Filter"] ?? 0, text).toBe(0)
    expect((node["Actual Rows"] ?? 0) * (node["Actual Loops"] ?? 1), text).toBeLessThanOrEqual(maxVisited)
  }
  for (const index of indexes) expect(all.some((n) => n["Index Name"] === index), text).toBe(true)
}

describe("PostgreSQL claim plan", () => {
  // The planner's statistics lag a burst of claims: ANALYZE last saw no claimed row, so the partial
  // index of claimed rows looks empty, and a fenced write (`id = $1 AND claim_token = $2 AND state =
  // 'claimed'`) scanned that whole index, filtering by id: each ack cost O(claims in flight).
  it.live("a fenced write finds its claim by primary key however many claims are in flight", () => {
    const filename = "pg-claim-plan-fenced"
    const schema = pgSchemaFor(filename)
    const sql = queueStatements(schema, makeNotifier(schema))
    return Effect.gen(function*() {
      const db = yield* SqlClient.SqlClient
      const explain = explainWith(db)
      const q = yield* queueOf("fenced")
      yield* q.enqueueBatch(Array.from({ length: 2000 }, (_, i) => i))
      yield* db.unsafe(`VACUUM ANALYZE ${schema}.__alkstore_jobs`) // statistics: nothing claimed
      const handles = yield* q.claimBatch("w", 2000) // a burst of claims the statistics have not seen
      const held = handles[1000]!
      const token = Number((yield* db.unsafe<{ token: string }>(
        `SELECT claim_token AS token FROM ${schema}.__alkstore_jobs WHERE id = $1`,
        [held.job.id]
      ))[0]!.token)
      const id = held.job.id
      const now = Date.now()
      const channel = makeNotifier(schema).params[0]
      const pkey = ["__alkstore_jobs_pkey"]
      for (const generic of [false, true]) {
        checkPlan(yield* explain(sql.ack, [id, token], generic), pkey, 1)
        checkPlan(yield* explain(sql.heartbeat, [now + 60_000, id, token], generic), pkey, 1)
        checkPlan(yield* explain(sql.bury, [now, "x", id, token, channel], generic), pkey, 1)
        checkPlan(yield* explain(sql.retry, [now + 60_000, now, "x", id, token, channel], generic), pkey, 1)
        checkPlan(yield* explain(sql.release, [id, token, channel], generic), pkey, 1)
        checkPlan(yield* explain(sql.ackAndClaim, [now, "w", "fenced", 1, id, token], generic), pkey, 1)
      }
    }).pipe(Effect.provide(pgOwned.store({ filename })))
  })


  // A generic plan costs `LIMIT $4` as a tenth of the rows: with a large backlog the generic plan of the
  // claim looked dear, and PostgreSQL planned a custom plan on every call (0 generic plans in 200 claims at
  // 1M pending, ~0.4 ms of planning each). A claim of one says `LIMIT 1`, which any size plans generically.
  it.live("a claim of one runs its generic plan however many jobs are pending", () => {
    const filename = "pg-claim-plan-backlog"
    const schema = pgSchemaFor(filename)
    return Effect.gen(function*() {
      const db = yield* SqlClient.SqlClient
      const q = yield* queueOf("backlog")
      yield* db.unsafe(`INSERT INTO ${schema}.__alkstore_jobs (queue, payload, state, priority, run_at, max_attempts,
          visibility_timeout, backoff_base, created_at, group_key)
        SELECT 'backlog', '{}', 'pending', 0, n, 3, 30000, 1000, n, '' FROM generate_series(1, 300000) AS n`)
      yield* db.unsafe(`ANALYZE ${schema}.__alkstore_jobs`)
      // on one connection (the application's transaction), so its prepared statements can be read
      const plans = yield* db.withTransaction(Effect.gen(function*() {
        for (let i = 0; i < 12; i++) expect((yield* q.claim("w"))._tag).toBe("Some")
        return yield* db.unsafe<{ generic_plans: string; custom_plans: string }>(
          `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH lim AS MATERIALIZED%'`
        )
      }))
      expect(plans.length).toBe(1)
      expect(Number(plans[0]!.generic_plans)).toBeGreaterThan(0) // before: 0 (12 custom plans)
    }).pipe(Effect.provide(pgOwned.store({ filename, planCheckEvery: "1 hour" }))) // one statement per text (planSize.ts)
  })

  // Before its first ANALYZE a fresh backlog's table has no statistics: the planner estimated one due
  // row, and found the plain pending index plus a sort as cheap as the flow index, so each limited claim
  // read and sorted every due job of the queue (before: 20 001 rows visited by the first page's read).
  it.live("a limited claim reads the flow index in its order before the table's first ANALYZE", () => {
    const filename = "pg-claim-plan-flow-fresh"
    const schema = pgSchemaFor(filename)
    const sql = flowStatements(schema)
    return Effect.gen(function*() {
      const db = yield* SqlClient.SqlClient
      yield* db.unsafe(`ALTER TABLE ${schema}.__alkstore_jobs SET (autovacuum_enabled = false)`) // no analyze meanwhile
      yield* (yield* Queues.Queues).setLimits("fresh", { concurrency: 10, groupConcurrency: 1 })
      const q = yield* queueOf("fresh")
      yield* q.enqueue(0, { group: "tenant-0" })
      // the bench's shape (10 000 tenants, two jobs each), as the store numbers them: round = jobs ahead in the group
      yield* db.unsafe(`INSERT INTO ${schema}.__alkstore_jobs (queue, payload, state, priority, run_at, max_attempts,
          visibility_timeout, backoff_base, created_at, group_key, flow_round)
        SELECT 'fresh', '{}', 'pending', 0, n, 3, 30000, 1000, n, 'tenant-' || (n % 10000), n / 10000 + 1
        FROM generate_series(1, 20000) AS n`)
      const analyzed = yield* db.unsafe<{ n: string }>(
        `SELECT count(*) AS n FROM pg_stats WHERE schemaname = $1 AND tablename = '__alkstore_jobs'`,
        [schema]
      )
      expect(Number(analyzed[0]!.n)).toBe(0)
      const explain = explainWith(db)
      const now = Date.now()
      const flow = ["__alkstore_jobs_flow"]
      for (const generic of [false, true]) {
        checkPlan(yield* explain(sql.claimFirst, [now, "w", "fresh"], generic), flow, 10)
        checkPlan(yield* explain(sql.readAhead, ["fresh", now, true, 50, 0], generic), flow, 50)
        checkPlan(yield* explain(sql.start, ["fresh", now, true, false, 0, 50], generic), flow, 50)
        checkPlan(yield* explain(sql.pendingAfter, ["fresh", 0, 0, now, 0, 50], generic), flow, 100)
      }
    }).pipe(Effect.provide(pgOwned.store({ filename })))
  })

  it.live("claims read the partial indexes of due work and never scan dead, acked or future rows", () => {
    const filename = "pg-claim-plan"
    const schema = pgSchemaFor(filename)
    const sql = queueStatements(schema, makeNotifier(schema))
    return Effect.gen(function*() {
      const db = yield* SqlClient.SqlClient
      const q = yield* queueOf("plan")
      const other = yield* queueOf("plan-other")
      const range = (n: number) => Array.from({ length: n }, (_, i) => i)
      yield* q.enqueueBatch(range(3000), { delay: "1 hour" }) // future
      yield* q.enqueueBatch(range(1000))
      for (const handle of yield* q.claimBatch("w", 1000)) yield* handle.fail("x") // dead
      yield* q.enqueueBatch(range(2000))
      yield* q.ackAll(yield* q.claimBatch("w", 2000)) // acked (deleted)
      yield* other.enqueueBatch(range(3000)) // another queue's due work
      yield* q.enqueueBatch(range(30)) // what a claim should find
      const [held] = yield* q.claimBatch("w", 10) // claimed, lease not lapsed
      yield* db.unsafe(`VACUUM ANALYZE ${schema}.__alkstore_jobs`)

      const token = Number((yield* db.unsafe<{ token: string }>(
        `SELECT claim_token AS token FROM ${schema}.__alkstore_jobs WHERE id = $1`,
        [held!.job.id]
      ))[0]!.token)

      const explain = explainWith(db)
      const now = Date.now()
      const check = checkPlan
      const claimIndexes = [
        "__alkstore_jobs_pending",
        "__alkstore_jobs_claimed",
        "__alkstore_jobs_scheduled",
        "__alkstore_jobs_pkey"
      ]
      for (const generic of [false, true]) {
        for (const limit of [1, 5]) {
          // a claim of one runs the statements that say `LIMIT 1`
          const [claim, ackAndClaim] = limit === 1 ? [sql.claimOne, sql.ackAndClaimOne] : [sql.claim, sql.ackAndClaim]
          check(yield* explain(claim, [now, "w", "plan", limit], generic), claimIndexes, limit)
          // the worker's fused step: the fenced ack by primary key, then the same claim
          check(
            yield* explain(ackAndClaim, [now, "w", "plan", limit, held!.job.id, token], generic),
            claimIndexes,
            limit
          )
        }
        check(yield* explain(sql.anyClaimable, ["plan", now], generic), ["__alkstore_jobs_pending"], 1)
      }
    }).pipe(Effect.provide(pgOwned.store({ filename })))
  })

  // A prepared statement keeps its generic plan until the table's statistics change, and a table never
  // analyzed is costed as ten pages: a plan made while the table was (nearly) empty, as every store's
  // first claims are, ran on as its backlog grew. With `id = ANY (ARRAY(SELECT id FROM picked))` that
  // plan was a sequential scan of the whole table for a claim of one's write and another for the promotion
  // of due rows: each claim read every row (before: a worker fell from 809 to 186 jobs/s while producers
  // built a 47 000-job backlog before autovacuum's first ANALYZE: bench/pg/stream.ts).
  it.live("claims find their rows by primary key with plans made while the table was nearly empty (before its first ANALYZE)", () => {
    const filename = "pg-claim-plan-empty"
    const schema = pgSchemaFor(filename)
    const sql = queueStatements(schema, makeNotifier(schema))
    return Effect.gen(function*() {
      const db = yield* SqlClient.SqlClient
      yield* db.unsafe(`ALTER TABLE ${schema}.__alkstore_jobs SET (autovacuum_enabled = false)`) // no analyze meanwhile
      yield* queueOf("empty")
      const now = Date.now()
      const backlog = (from: number, to: number) =>
        db.unsafe(`INSERT INTO ${schema}.__alkstore_jobs (queue, payload, state, priority, run_at, max_attempts,
            visibility_timeout, backoff_base, created_at, group_key)
          SELECT 'empty', '{}', CASE WHEN n % 40 = 0 THEN 'scheduled' ELSE 'pending' END, 0, n, 3, 30000, 1000, n, ''
          FROM generate_series(${from}, ${to}) AS n`)
      const checked: Record<string, readonly [string, string]> = {
        claimOne: [sql.claimOne, `(${now}, 'w', 'empty', 1)`],
        ackAndClaimOne: [sql.ackAndClaimOne, `(${now}, 'w', 'empty', 1, 0, 0)`]
        // (Batch claims, `sql.claim` and `sql.ackAndClaim`, are not held to this: their plans are made again as
        // the table grows, test/pg-plan-size.test.ts.)
      }
      // the backlog and the claims: undone
      const plans = yield* rolledBack(db, Effect.gen(function*() {
        yield* db.unsafe(`SET LOCAL plan_cache_mode = force_generic_plan`)
        // each generic plan made now, on the nearly empty table (a store's first jobs), and cached in its
        // prepared statement
        yield* backlog(1, 20)
        for (const [name, [text, args]] of Object.entries(checked)) {
          yield* db.unsafe(`PREPARE ${name} AS ${text}`)
          yield* db.unsafe(`EXECUTE ${name}${args}`)
        }
        // then a backlog, with due scheduled rows for the promotion (and nothing that would replan)
        yield* backlog(21, 20_000)
        const plans: Record<string, PlanNode> = {}
        for (const [name, [, args]] of Object.entries(checked)) {
          plans[name] = planOf(yield* db.unsafe<{ "QUERY PLAN": unknown }>(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ${name}${args}`))
        }
        return plans
      }))
      // the due batch reads at most its 1000 rows; nothing reads the backlog
      for (const [name, plan] of Object.entries(plans)) expectIndexScansOnly(name, plan, 1000)
    }).pipe(Effect.provide(pgOwned.store({ filename })))
  })
})
