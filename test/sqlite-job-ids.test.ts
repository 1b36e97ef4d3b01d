/**
 * Job ids on SQLite without AUTOINCREMENT (src/internal/sqlite/jobIds.ts):
 * the store's deletes of the newest job (an ack, a batch's acks, a cancel, a
 * purge) leave a floor, so its id is never handed out again by any kind of
 * insert, in this store or another on the file; other deletes write nothing;
 * and a file made before migration 6 keeps its rows and its high-water mark
 * through the table's rebuild.
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { describe, expect, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Duration, Effect, Layer, Option, Queue, TestClock } from "effect"
import { Admin, Queues, SqliteStore } from "../src/index.js"
import type { NewJob } from "../src/internal/engine.js"
import { keepFloorParams, keepFloorSql } from "../src/internal/sqlite/jobIds.js"
import { insertManyNow } from "../src/internal/sqlite/jobInsert.js"
import { migrationRecord, migrationsTable } from "../src/internal/sqlite/migrations.js"
import { freshFile } from "./contract/harness.js"
import { directConnectionOf, newJobOf } from "./support/sqlite-direct.js"

const floorOf = (filename: string) => {
  const db = new Database(filename, { readonly: true })
  try {
    return (db.prepare("SELECT v FROM __alkstore_id_floor").get() as { v: number }).v
  } finally {
    db.close()
  }
}

const storeOn = (filename: string) => SqliteStore.layer({ filename })

const mustClaim = <A>(q: Queues.Queue<A>) =>
  Effect.flatMap(q.claim("w"), (handle) => Option.isSome(handle) ? Effect.succeed(handle.value) : Effect.die("nothing claimed"))

describe("SQLite job ids", () => {
  it.scoped("the newest job's id is not handed out again after an ack, a cancel or a purge, by any insert", () =>
    Effect.gen(function*() {
      const filename = freshFile("job-ids")
      yield* Effect.gen(function*() {
        const q = yield* (yield* Queues.Queues).queue("ids")
        const seen: Array<number> = []
        const fresh = (id: number) => {
          for (const old of seen) expect(id).toBeGreaterThan(old)
          seen.push(id)
          return id
        }
        // acked newest → a single insert
        fresh(yield* q.enqueue({ n: 1 }))
        expect(yield* (yield* mustClaim(q)).ack).toBe(true)
        // cancelled newest → a keyed insert
        const cancelled = fresh(yield* q.enqueue({ n: 2 }, { key: "k" }))
        expect(yield* q.cancel(cancelled)).toBe(true)
        fresh(yield* q.enqueue({ n: 3 }, { key: "k" }))
        expect(yield* (yield* mustClaim(q)).ack).toBe(true)
        // purged dead newest → a batch of shared rows, then a batch of rows that differ
        fresh(yield* q.enqueue({ n: 4 }, { maxAttempts: 1 }))
        expect(yield* (yield* mustClaim(q)).fail("boom")).toBe(true)
        yield* TestClock.adjust(Duration.seconds(1))
        expect(yield* q.purgeDead()).toBe(1)
        const batch = yield* q.enqueueBatch([{ n: 5 }, { n: 6 }, { n: 7 }])
        for (const id of batch) fresh(id)
        for (let i = 0; i < 3; i++) expect(yield* (yield* mustClaim(q)).ack).toBe(true)
        const mixed = yield* Effect.all([q.enqueue({ n: 8 }), q.enqueue({ n: 9 }, { priority: 2 })])
        for (const id of mixed) fresh(id)
        expect(Option.isNone(yield* q.getJob(cancelled))).toBe(true)
        const totals = yield* (yield* Admin.Admin).totals
        expect(totals.lastJobId).toBe(seen[seen.length - 1])
      }).pipe(Effect.provide(storeOn(filename)))
    }))

  it.scoped("another store's ack of the newest job leaves the floor this store's inserts read", () =>
    Effect.gen(function*() {
      const filename = freshFile("job-ids-two")
      const enqueue = (n: number) =>
        Effect.flatMap(Queues.Queues, (queues) => Effect.flatMap(queues.queue("ids"), (q) => q.enqueue({ n })))
      // the two stores open the file on their own connections, as two processes do
      const producer = yield* Layer.build(storeOn(filename))
      const worker = yield* Layer.build(storeOn(filename))
      const first = yield* Effect.provide(enqueue(1), producer)
      const second = yield* Effect.provide(enqueue(2), producer)
      yield* Effect.provide(
        Effect.gen(function*() {
          const q = yield* (yield* Queues.Queues).queue("ids")
          for (let i = 0; i < 2; i++) expect(yield* (yield* mustClaim(q)).ack).toBe(true)
        }),
        worker
      )
      expect(floorOf(filename)).toBe(second)
      expect(yield* Effect.provide(enqueue(3), producer)).toBe(second + 1)
      expect(first).toBeLessThan(second)
    }))

  it.scoped("only an ack of the newest job writes the floor; a batch's acks write it once", () =>
    Effect.gen(function*() {
      const filename = freshFile("job-ids-floor")
      yield* Effect.gen(function*() {
        const q = yield* (yield* Queues.Queues).queue("ids")
        const ids = yield* q.enqueueBatch([1, 2, 3, 4, 5])
        expect(yield* (yield* mustClaim(q)).ack).toBe(true)
        expect(yield* (yield* mustClaim(q)).ack).toBe(true)
        expect(floorOf(filename)).toBe(0)
        // a stale handle's ack (its fence fails) writes nothing either
        const third = yield* mustClaim(q)
        expect(yield* third.ack).toBe(true)
        expect(yield* third.ack).toBe(false)
        expect(floorOf(filename)).toBe(0)
        const rest = yield* q.claimBatch("w", 2)
        expect(rest.map((h) => h.job.id)).toEqual([ids[3], ids[4]])
        expect(yield* q.ackAll(rest)).toEqual([true, true])
        expect(floorOf(filename)).toBe(ids[4])
      }).pipe(Effect.provide(storeOn(filename)))
    }))

  it.scoped("a worker's step that acks the newest job keeps the floor and goes on claiming", () =>
    Effect.gen(function*() {
      const filename = freshFile("job-ids-worker")
      yield* Effect.gen(function*() {
        const q = yield* (yield* Queues.Queues).queue("ids")
        const ids = yield* q.enqueueBatch([1, 2, 3])
        const handled = yield* Queue.unbounded<number>()
        // the worker acks each job in the step that claims the next: job 3's step acks the newest job
        yield* Effect.forkScoped(q.process("w", (job) => Queue.offer(handled, job.id)))
        for (const id of ids) expect(yield* Queue.take(handled)).toBe(id)
        const later = yield* q.enqueue(4)
        expect(yield* Queue.take(handled)).toBe(later)
        expect(later).toBe(ids[2]! + 1)
        // the step after job 4 acked it: every job gone, the floor at the newest id
        yield* Effect.iterate(0, {
          while: () => floorOf(filename) !== later,
          body: (n) => Effect.as(TestClock.adjust(Duration.millis(10)), n + 1)
        })
        expect(yield* q.stats).toMatchObject({ pending: 0, claimed: 0, dead: 0 })
      }).pipe(Effect.provide(storeOn(filename)))
    }))

  it.scoped("each multi-row insert numbers its rows consecutively from above the floor", () =>
    Effect.gen(function*() {
      const filename = freshFile("job-ids-rows")
      yield* Effect.gen(function*() {
        const queues = yield* Queues.Queues
        yield* queues.setLimits("limited", { concurrency: 5 })
        yield* Effect.flatMap(queues.queue("plain"), (q) => q.enqueue(0))
      }).pipe(Effect.provide(storeOn(filename)))
      const db = new Database(filename)
      yield* Effect.addFinalizer(() => Effect.sync(() => db.close()))
      const c = directConnectionOf(db)
      const newJob = (queue: string, n: number, overrides: Partial<NewJob> = {}) =>
        newJobOf({ queue, payload: JSON.stringify(n), ...overrides })
      const batches = {
        "shared values": [1, 2, 3].map((n) => newJob("plain", n)),
        "rows that differ": [1, 2, 3].map((n) => newJob("plain", n, { priority: n })),
        "a queue with limits": [1, 2, 3].map((n) => newJob("limited", n, { group: `g${n % 2}` }))
      }
      const newest = () => (db.prepare("SELECT max(id) AS id FROM __alkstore_jobs").get() as { id: number }).id
      for (const [name, jobs] of Object.entries(batches)) {
        const deleted = newest()
        // the delete as the store's own deletes make it: the floor kept in the same transaction
        db.transaction(() => {
          db.prepare("DELETE FROM __alkstore_jobs WHERE id = ?").run(deleted)
          db.prepare(keepFloorSql).run(...keepFloorParams(deleted))
        })()
        const ids = c.transaction(() => insertManyNow(c, jobs))
        expect(ids, name).toEqual([deleted + 1, deleted + 2, deleted + 3])
        expect(ids.map((id) => (db.prepare("SELECT payload FROM __alkstore_jobs WHERE id = ?").get(id) as { payload: string }).payload), name)
          .toEqual(jobs.map((job) => job.payload))
      }
    }))

  it.scoped("a file made before migration 6 keeps its jobs, columns and high-water mark through the rebuild", () =>
    Effect.gen(function*() {
      const filename = freshFile("job-ids-migrate")
      // the migrations a file made before 6 had (the later ones run after it, as on a real upgrade)
      const before = Object.fromEntries(Object.entries(migrationRecord).filter(([name]) => Number(name.split("_")[0]) < 6))
      yield* Migrator.make({})({ loader: Migrator.fromRecord(before), table: migrationsTable }).pipe(
        Effect.provide(SqliteClient.layer({ filename })),
        Effect.scoped
      )
      const db = new Database(filename)
      yield* Effect.addFinalizer(() => Effect.sync(() => db.close()))
      const insert = db.prepare(`INSERT INTO __alkstore_jobs
        (queue, payload, state, priority, run_at, max_attempts, visibility_timeout, backoff_base, expires_at,
         idempotency_key, created_at, trace_context, group_key)
        VALUES ('old', ?, 'pending', 1, 0, 5, 30000, 1000, 9000000000000, ?, 0, NULL, ?)`)
      for (let n = 1; n <= 4; n++) insert.run(JSON.stringify({ n }), n === 1 ? "kept-key" : null, n === 1 ? "g" : "")
      db.prepare("DELETE FROM __alkstore_jobs WHERE id >= 3").run()
      expect(db.prepare("SELECT seq FROM sqlite_sequence WHERE name = '__alkstore_jobs'").get()).toEqual({ seq: 4 })
      const rowsBefore = db.prepare("SELECT * FROM __alkstore_jobs ORDER BY id").all()
      const indexesBefore = db.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = '__alkstore_jobs' AND sql IS NOT NULL ORDER BY name"
      ).all()

      const after = yield* Effect.gen(function*() {
        const q = yield* (yield* Queues.Queues).queue("old")
        const lastBefore = (yield* (yield* Admin.Admin).totals).lastJobId
        const next = yield* q.enqueue({ n: 5 })
        // the idempotency key is still enforced by the rebuilt unique index
        const again = yield* q.enqueue({ n: 6 }, { key: "kept-key" })
        return { lastBefore, next, again, migrations: yield* (yield* Admin.Admin).migrations }
      }).pipe(Effect.provide(storeOn(filename)))

      expect(after.lastBefore).toBe(4)
      expect(after.next).toBe(5)
      expect(after.again).toBe(1)
      expect(after.migrations).toContain("6_job_ids_without_autoincrement")
      expect(db.prepare("SELECT * FROM __alkstore_jobs WHERE id < 5 ORDER BY id").all()).toEqual(rowsBefore)
      expect(db.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = '__alkstore_jobs' AND sql IS NOT NULL ORDER BY name"
      ).all()).toEqual([ // migration 6 makes the indexes again; 8 adds the dead jobs' own; 9 makes one group index of two
        ...(indexesBefore as Array<{ name: string }>).filter(({ name }) => name !== "__alkstore_jobs_flow_claimed"),
        { name: "__alkstore_jobs_dead_by_id" },
        { name: "__alkstore_jobs_dead_queue_id" },
        { name: "__alkstore_jobs_dead_since" }
      ].sort((a, b) => (a.name < b.name ? -1 : 1)))
      const table = db.prepare("SELECT sql FROM sqlite_master WHERE name = '__alkstore_jobs'").get() as { sql: string }
      expect(table.sql).not.toMatch(/AUTOINCREMENT/i)
      expect(db.prepare("SELECT count(*) AS n FROM sqlite_sequence WHERE name = '__alkstore_jobs'").get()).toEqual({ n: 0 })
    }))
})
