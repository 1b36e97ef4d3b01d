/**
 * Dead jobs are read in the orders their readers ask for, on both engines:
 * the dead-letter listings (`Admin.jobs` with state `dead`, newest id first,
 * of one queue or of all) and maintenance's retention purge (`died_at`
 * before a cut-off, across queues) reach their rows through an index in that
 * order, and neither sorts nor walks the dead jobs they do not return. The
 * table holds a queue flooded with young dead jobs (sorting before the
 * others by name), a few old dead jobs, and newer pending jobs above them.
 * Before migration 8 the listings sorted every dead job of the queue, or read
 * the table from its newest row, and the purge walked the flooded queue's
 * dead index in every round.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { JobFilter } from "../src/internal/engine.js"
import { jobsListing as pgListing } from "../src/internal/pg/adminStorage.js"
import { makeNotifier } from "../src/internal/pg/notify.js"
import { makeStatements } from "../src/internal/pg/preparedStatements.js"
import { queueStatements as pgQueueStatements } from "../src/internal/pg/queueStatements.js"
import { jobsListing as sqliteListing } from "../src/internal/sqlite/adminStorage.js"
import { sql as sqliteStatements } from "../src/internal/sqlite/queueStatements.js"
import { pgOwned, pgSchemaFor, sqliteOwned } from "./contract/harness.js"
import { expectIndexScansOnly, nodes, planOf, rolledBack } from "./support/pgPlans.js"

const flood = 20_000
const few = 10
const newer = 20_000
const cutOff = 1_000 // the few died before it, the flood after
const limit = 50

/** The listings to check: every queue's, the flood's, the few's, and a page further down each. */
const listings: ReadonlyArray<readonly [string, JobFilter]> = [
  ["every queue", { state: "dead", queue: undefined, limit, beforeId: undefined }],
  ["every queue, a later page", { state: "dead", queue: undefined, limit, beforeId: few + flood / 2 }],
  ["the flooded queue", { state: "dead", queue: "a-flood", limit, beforeId: undefined }],
  ["the flooded queue, a later page", { state: "dead", queue: "a-flood", limit, beforeId: few + flood / 2 }],
  ["the queue with a few", { state: "dead", queue: "few", limit, beforeId: undefined }]
]

// ids 1..few: old dead jobs of `few`; then the flood's young dead jobs; then pending jobs of `live`.
const rows = (series: string, queue: string, state: string, diedAt: string) =>
  `SELECT '${queue}', '{}', '${state}', 0, 1, 3, 30000, 1000, 1, ${diedAt} FROM ${series}`
const columns = `(queue, payload, state, priority, run_at, max_attempts, visibility_timeout, backoff_base, created_at,
  died_at)`

describe("dead jobs' readers on SQLite (and the claimed listing)", () => {
  const series = (n: number) =>
    `(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ${n}) SELECT n FROM s)`
  const planOfSqlite = (db: SqlClient.SqlClient, text: string, params: ReadonlyArray<unknown>) =>
    Effect.map(
      db.unsafe<{ detail: string }>(`EXPLAIN QUERY PLAN ${text}`, params as Array<string>),
      (rows) => rows.map((row) => row.detail).join(" | ")
    )

  it.effect("list dead jobs and purge old ones through indexes in those orders, with statistics and without", () =>
    Effect.gen(function*() {
      const db = yield* SqlClient.SqlClient
      const into = `INSERT INTO __alkstore_jobs ${columns}`
      yield* db.unsafe(`${into} ${rows(series(few), "few", "dead", "n")}`)
      yield* db.unsafe(`${into} ${rows(series(flood), "a-flood", "dead", `${cutOff} + n`)}`)
      yield* db.unsafe(`${into} ${rows(series(newer), "live", "pending", "NULL")}`)
      for (const analyzed of [false, true]) {
        if (analyzed) yield* db.unsafe("ANALYZE")
        for (const [label, filter] of listings) {
          const listing = sqliteListing(filter, 1)
          const plan = yield* planOfSqlite(db, listing.text, listing.params)
          const index = filter.queue === undefined ? "__alkstore_jobs_dead_by_id" : "__alkstore_jobs_dead_queue_id"
          expect(plan, `${label}, analyzed: ${analyzed}`).toContain(`USING INDEX ${index}`)
          expect(plan, `${label}, analyzed: ${analyzed}`).not.toContain("TEMP B-TREE")
          const found = yield* db.unsafe<{ id: number; queue: string }>(listing.text, listing.params as Array<string>)
          const expected = filter.queue === "few" ? few : limit
          expect(found.length).toBe(expected)
          expect(found.every((row, i) => i === 0 || row.id < found[i - 1]!.id)).toBe(true)
        }
        // Claimed jobs (none here) from their index: reading the table from its newest row looked at every row.
        for (const queue of [undefined, "live"]) {
          const listing = sqliteListing({ state: "claimed", queue, limit, beforeId: undefined }, 1)
          const plan = yield* planOfSqlite(db, listing.text, listing.params)
          expect(plan, `claimed of ${queue}, analyzed: ${analyzed}`).toContain("USING INDEX __alkstore_jobs_claimed")
        }
        const purge = yield* planOfSqlite(db, sqliteStatements.deadBefore, [cutOff, 1000])
        expect(purge, `purge, analyzed: ${analyzed}`).toContain("USING COVERING INDEX __alkstore_jobs_dead_since (died_at<?)")
        const old = yield* db.unsafe<{ id: number }>(sqliteStatements.deadBefore, [cutOff, 1000])
        expect(old.map((row) => row.id)).toEqual(Array.from({ length: few }, (_, i) => i + 1))
      }
    }).pipe(Effect.provide(sqliteOwned.store())))
})

describe("dead jobs' readers on PostgreSQL", () => {
  const series = (n: number) => `generate_series(1, ${n}) AS n`
  it.live("list dead jobs and purge old ones visiting only the rows they return, with statistics and without", () => {
    const filename = "dead-job-plans"
    const schema = pgSchemaFor(filename)
    const purge = pgQueueStatements(schema, makeNotifier(schema)).purgeSomeDeadBefore
    return Effect.gen(function*() {
      const db = yield* SqlClient.SqlClient
      yield* db.unsafe(`ALTER TABLE ${schema}.__alkstore_jobs SET (autovacuum_enabled = false)`) // no analyze meanwhile
      const into = `INSERT INTO ${schema}.__alkstore_jobs ${columns}`
      yield* db.unsafe(`${into} ${rows(series(few), "few", "dead", "n")}`)
      yield* db.unsafe(`${into} ${rows(series(flood), "a-flood", "dead", `${cutOff} + n`)}`)
      yield* db.unsafe(`${into} ${rows(series(newer), "live", "pending", "NULL")}`)
      const explain = (text: string, params: ReadonlyArray<unknown>) =>
        rolledBack(db, Effect.map( // EXPLAIN ANALYZE runs a write: undone
          db.unsafe<{ "QUERY PLAN": unknown }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, params as Array<string>),
          planOf
        ))
      for (const analyzed of [false, true]) {
        if (analyzed) yield* db.unsafe(`VACUUM ANALYZE ${schema}.__alkstore_jobs`)
        for (const [label, filter] of listings) {
          const listing = pgListing(schema)(filter, 1)
          const plan = yield* explain(listing.text, listing.params)
          // Without statistics a later page may be a bitmap scan of the dead index below the cursor, then a
          // sort: the dead rows below it only, never the newer pending ones; otherwise the page's rows alone.
          const below = filter.beforeId === undefined ? undefined : filter.beforeId - 1
          expectIndexScansOnly(`${label}, analyzed: ${analyzed}`, plan, analyzed || below === undefined ? limit : below)
          const found = yield* db.unsafe<{ id: string }>(listing.text, listing.params as Array<string>)
          expect(found.length).toBe(filter.queue === "few" ? few : limit)
        }
        expectIndexScansOnly(`purge, analyzed: ${analyzed}`, yield* explain(purge, [cutOff, 1000]), few)
      }
    }).pipe(Effect.provide(pgOwned.store({ filename })))
  })
})

describe("maintenance's and purgeDead's rounds on PostgreSQL", () => {
  const series = (n: number) => `generate_series(1, ${n}) AS n`
  // A round picks its rows by an index, then visits them. As a filter (`ctid = ANY (…)`, before), a plan
  // made while the table was small checked every row of the dead index against the whole array (16 s for
  // a round of 100 000); a cached plan is costed on the table as it was. The rounds are joins now,
  // planned on each call: whatever the statistics say, no row is compared with every other.
  it.live("are planned on each call, and visit each picked row once on a table grown since its statistics", () => {
    const filename = "round-plans"
    const schema = pgSchemaFor(filename)
    const statements = pgQueueStatements(schema, makeNotifier(schema))
    const rounds: ReadonlyArray<readonly [string, string, ReadonlyArray<string | number>]> = [
      ["maintenance's sweep", statements.expireSome, [cutOff, 100_000]],
      ["maintenance's purge", statements.purgeSomeDeadBefore, [cutOff + flood + 1, 100_000]],
      ["purgeDead", statements.purgeDead, ["a-flood", 100_000]],
      ["purgeDead(olderThan)", statements.purgeDeadBefore, ["a-flood", 100_000, cutOff + flood + 1]]
    ]
    const prepared = makeStatements(true)
    for (const [label, text, params] of rounds) expect(prepared.statement(text, params), label).toBe(text)
    return Effect.gen(function*() {
      const db = yield* SqlClient.SqlClient
      yield* db.unsafe(`ALTER TABLE ${schema}.__alkstore_jobs SET (autovacuum_enabled = false)`)
      yield* db.unsafe(`ANALYZE ${schema}.__alkstore_jobs`) // the statistics of an empty table
      const into = `INSERT INTO ${schema}.__alkstore_jobs ${columns}`
      yield* db.unsafe(`${into} ${rows(series(flood), "a-flood", "dead", `${cutOff} + n`)}`)
      // half of them live and expired instead, for the sweep
      yield* db.unsafe(`UPDATE ${schema}.__alkstore_jobs SET state = 'pending', died_at = NULL, expires_at = 1
        WHERE id % 2 = 0`)
      for (const [label, text, params] of rounds) {
        const plan = yield* rolledBack(db, Effect.map( // EXPLAIN ANALYZE runs the write: undone
          db.unsafe<{ "QUERY PLAN": unknown }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, params as Array<string>),
          planOf
        ))
        const described = `${label}: ${JSON.stringify(plan, null, 1)}`
        expect(nodes(plan).find((node) => node["Node Type"] === "ModifyTable")?.["Actual Rows"], described).toBe(flood / 2)
        // rows read and rows thrown away, over every node and loop: a few times the table, never its square
        const work = nodes(plan).reduce((sum, node) =>
          sum + ((node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0) +
              (node["Rows Removed by Join Filter"] ?? 0)) * (node["Actual Loops"] ?? 1), 0)
        expect(work, described).toBeLessThan(20 * flood)
      }
    }).pipe(Effect.provide(pgOwned.store({ filename })))
  })
})
