/**
 * How the SQLite queue writes new jobs' parameters (they run on every
 * enqueue): a single insert's array written in one literal, and a batch whose
 * jobs differ only in their payloads bound as named shared values plus one
 * positional payload per row. Both must write exactly the rows the plain
 * column lists (`newJobValues`, `flowInsertParams`) describe.
 */
import { describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { Queues, SqliteStore } from "../src/index.js"
import { type NewJob, newJobValues } from "../src/internal/engine.js"
import { flowInsertParams } from "../src/internal/sqlite/flowInsert.js"
import { insertManyNow, insertNow, insertValues } from "../src/internal/sqlite/jobInsert.js"
import { freshFile } from "./contract/harness.js"
import { directConnectionOf, newJobOf } from "./support/sqlite-direct.js"

const job = (overrides: Partial<NewJob> = {}): NewJob => newJobOf({ priority: 3, maxAttempts: 5, ...overrides })

const traced = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"

/** A migrated store file, and a plain connection to it as the store's code sees one. */
const migratedConnection = Effect.gen(function*() {
  const filename = freshFile("insert-params")
  yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("q")).pipe(Effect.provide(SqliteStore.layer({ filename })))
  const db = new Database(filename)
  yield* Effect.addFinalizer(() => Effect.sync(() => db.close()))
  const c = directConnectionOf(db)
  const rowsOf = (ids: ReadonlyArray<number>) =>
    ids.map((id) => {
      const { id: _, ...row } = db.prepare("SELECT * FROM __alkstore_jobs WHERE id = ?").get(id) as Record<string, unknown>
      return row
    })
  return { c, db, rowsOf }
})

describe("a single SQLite insert's parameters", () => {
  it("are newJobValues then flowInsertParams, for every shape of job", () => {
    const jobs = [
      job(),
      job({ runAt: 5_000 }),
      job({ expiresAt: 9_000, key: "k", traceContext: traced, group: "g" }),
      job({ priority: -2, queue: "other", payload: "null" })
    ]
    for (const j of jobs) expect(insertValues(j)).toStrictEqual([...newJobValues(j), ...flowInsertParams(j)])
  })
})

describe("a SQLite batch insert", () => {
  const shapes: Record<string, Partial<NewJob>> = {
    "due now": {},
    "scheduled, expiring, traced, in a group": { runAt: 5_000, expiresAt: 9_000, traceContext: traced, group: "g", priority: -4 }
  }
  for (const [name, shape] of Object.entries(shapes)) {
    it.scoped(`of jobs differing only in their payloads (${name}) writes the rows one-by-one inserts write, ids in order`, () =>
      Effect.gen(function*() {
        const { c, rowsOf } = yield* migratedConnection
        // more than one statement's worth of rows (100 per statement), and a short last statement
        const jobs = Array.from({ length: 230 }, (_, n) => job({ ...shape, payload: JSON.stringify({ n }) }))
        const ids = c.transaction(() => insertManyNow(c, jobs))
        expect(ids).toEqual(Array.from({ length: 230 }, (_, i) => ids[0]! + i))
        const single = c.transaction(() => jobs.map((j) => insertNow(c, j, () => {})))
        expect(rowsOf(ids)).toStrictEqual(rowsOf(single))
        expect(rowsOf(ids).map((row) => row.payload)).toEqual(jobs.map((j) => j.payload))
      }))
  }

  it.scoped("of jobs that differ in another column writes each job's own values", () =>
    Effect.gen(function*() {
      const { c, rowsOf } = yield* migratedConnection
      const jobs = [job(), job({ priority: 9 }), job({ runAt: 7_000 }), job({ queue: "other" }), job({ group: "g" })]
      const ids = c.transaction(() => insertManyNow(c, jobs))
      const single = c.transaction(() => jobs.map((j) => insertNow(c, j, () => {})))
      expect(rowsOf(ids)).toStrictEqual(rowsOf(single))
    }))

  it.scoped("of one unlimited queue's jobs that differ in another column writes each job's own values", () =>
    Effect.gen(function*() {
      const { c, rowsOf } = yield* migratedConnection
      const jobs = [job(), job({ priority: 9 }), job({ runAt: 7_000 }), job({ group: "g" }), job({ expiresAt: 8_000 })]
      const ids = c.transaction(() => insertManyNow(c, jobs))
      expect(ids).toEqual(jobs.map((_, i) => ids[0]! + i))
      const single = c.transaction(() => jobs.map((j) => insertNow(c, j, () => {})))
      expect(rowsOf(ids)).toStrictEqual(rowsOf(single))
    }))
})
