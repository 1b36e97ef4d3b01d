/**
 * Review of `PgStore.importSqlite` (docs/engines.md, "Moving a deployment from
 * SQLite to PostgreSQL"): every row of every table arrives exactly as stored,
 * the PostgreSQL store carries on from where the SQLite one stopped (claims,
 * fencing tokens, the scheduler's phase, ids), and the import is all or
 * nothing — for a store of any size.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import * as RateLimiter from "@effect/experimental/RateLimiter"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import Sqlite from "better-sqlite3"
import { Cause, Context, DateTime, Deferred, Effect, Exit, Fiber, Layer, Option, Schema } from "effect"
import { Admin, EffectStores, Locks, Outbox, PgStore, Queues, Scheduler } from "../src/index.js"
import { freshFile, pgOwned, pgSchemaFor, sqliteOwned } from "./contract/harness.js"
import { advance, deadBacklog, mustClaim, queueOf } from "./contract/support.js"

const second = 1_000
const minute = 60 * second

/** The tables the import copies, each with the order its rows are compared in. */
const tables: ReadonlyArray<readonly [string, string]> = [
  ["__alkstore_jobs", "id"],
  ["__alkstore_scheduler_tasks", "name"],
  ["__alkstore_locks", "name"],
  ["__alkstore_flow_limits", "queue"],
  ["__alkstore_flow_log", "queue, scope, seq"],
  ["__alkstore_queue_ids", "id"],
  ["__alkstore_rate_windows", "key"],
  ["__alkstore_rate_buckets", "key"]
]

/** A boolean as SQLite keeps it (0/1), everything else as read. */
const normalize = (rows: ReadonlyArray<Record<string, unknown>>) =>
  rows.map((row) =>
    Object.fromEntries(Object.entries(row).map(([k, v]) => [k, typeof v === "boolean" ? (v ? 1 : 0) : v]))
  )

/** Every row of every copied table of a SQLite file, as stored. */
const sqliteRows = (filename: string) => {
  const db = new Sqlite(filename, { readonly: true, fileMustExist: true })
  try {
    return Object.fromEntries(
      tables.map(([table, order]) => [
        table,
        normalize(db.prepare(`SELECT * FROM ${table} ORDER BY ${order}`).all() as Array<Record<string, unknown>>)
      ])
    )
  } finally {
    db.close()
  }
}

/** The same of the PostgreSQL store in context (json as its text, bigint as numbers: test/fixtures/types.ts). */
const pgRows = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    Effect.forEach(tables, ([table, order]) =>
      Effect.map(sql.unsafe<Record<string, unknown>>(`SELECT * FROM ${table} ORDER BY ${order}`), (rows) =>
        [table, normalize(rows)] as const)),
    Object.fromEntries
  ))

/** The Effect stores (PersistedQueue, RateLimiter) over a store layer. */
const withEffectStores = <E, R>(store: Layer.Layer<R, E>) =>
  Layer.mergeAll(PersistedQueue.layer, RateLimiter.layer).pipe(
    Layer.provideMerge(Layer.mergeAll(EffectStores.layerPersistedQueueStore(), EffectStores.layerRateLimiterStore)),
    Layer.provideMerge(store)
  )

/** Payloads that must arrive byte for byte (test/payload-edges.test.ts's hard cases). */
const tricky: ReadonlyArray<unknown> = [
  "a\uD800b",
  "\uDC00",
  "x\uDC00\uD800y",
  "a\u0000b",
  "\u0001\u001f\u007f\b\f\n\r\t",
  "😀 \u{1F680} \u{10FFFF}",
  "\uFEFF\u2028\u2029",
  "\\\"'\\u0000",
  1e21,
  0.1 + 0.2,
  2 ** 53 + 2,
  Number.MAX_VALUE,
  -Number.MIN_VALUE,
  { "\uD800": 1, "\u0000": 2, "": 3, "__proto__x": 4 },
  JSON.parse("{\"__proto__\":{\"a\":1},\"b\":2}"),
  { b: 1, a: 2, z: { y: 1, x: 2 }, dup: [1, 1] },
  null,
  "",
  { deep: [[[[[[[[[[{ x: "é" }]]]]]]]]]] }
]

describe("PgStore.importSqlite (review)", () => {
  it.effect("every row of every table arrives as stored, and the Admin views read the same on both engines", () => {
    const sqliteFile = freshFile("review-all")
    const target = freshFile("review-all-pg")
    const orders = PersistedQueue.make({ name: "orders", schema: Schema.Struct({ n: Schema.Number }) })
    return Effect.gen(function*() {
      const adminView = Effect.gen(function*() {
        const admin = yield* Admin.Admin
        return {
          jobs: yield* admin.jobs({ limit: 1000 }),
          schedules: yield* admin.schedules,
          locks: yield* admin.locks,
          totals: yield* admin.totals,
          queues: yield* admin.queues
        }
      })
      const before = yield* Effect.gen(function*() {
        yield* advance("90 minutes") // instants other than 0
        const queues = yield* Queues.Queues
        yield* queues.setLimits("tenants", { groupConcurrency: 2, rate: { limit: 5, per: "1 hour" }, groupRate: { limit: 3, per: "10 minutes" } })
        const plain = yield* queueOf("plain", { maxAttempts: 4, visibilityTimeout: "2 minutes", backoffBase: "7 seconds" })
        for (const payload of tricky) yield* plain.enqueue(payload)
        yield* plain.enqueue({ k: 1 }, { priority: -7, key: "kéy-😀", expires: "3 days" })
        yield* plain.enqueue({ k: 2 }, { priority: 2 ** 31, delay: "1 hour", key: "later" })
        yield* plain.enqueue({ k: 3 }, { runAt: 1234 }) // in the past
        const tenants = yield* queueOf("tenants")
        yield* tenants.enqueueBatch(["a1", "a2", "a3"], { group: "a" })
        yield* tenants.enqueueBatch(["b1", "b2"], { group: "b", priority: 1 })
        yield* tenants.enqueue("none")
        // claims: one claimed twice (released in between: its token moved), one dead after retries
        const deadly = yield* queueOf("deadly", { maxAttempts: 2 })
        const doomed = yield* deadly.enqueue({ doom: true }, { key: "dead-key" })
        yield* Effect.flatMap(mustClaim(deadly, "w1"), (h) => h.retry(new Error("first \u00e9 failure"), 0))
        yield* Effect.flatMap(mustClaim(deadly, "w1"), (h) => h.fail({ _tag: "Boom", code: 7 }))
        yield* deadly.enqueue({ doom: false }, { key: "dead-key" }) // the key is free again while the other is dead
        const held = yield* queueOf("held", { visibilityTimeout: "10 minutes" })
        yield* held.enqueue({ h: 1 }, { priority: 5 })
        yield* Effect.flatMap(mustClaim(held, "w-first"), (h) => h.release)
        yield* mustClaim(held, "w-😀")
        for (let i = 0; i < 3; i++) yield* Effect.flatMap(tenants.claim("tw"), (h) => Option.getOrThrow(h).ack)
        yield* mustClaim(tenants, "tw") // in flight in its group
        // the outbox's rows are jobs of its queue
        yield* Effect.flatMap(Effect.flatMap(Outbox.Outbox, (o) => o.outbox("hooks")), (o) =>
          o.enqueue({ url: "https://example.com/ü" }, { key: "hook-1" }))
        // locks: churned, and one held
        const locks = yield* Locks.Locks
        for (const owner of ["a", "b", "c", "d"]) {
          yield* Effect.flatMap(locks.acquire("churn", { ttl: "1 second", owner }), (l) => Option.getOrThrow(l).release)
        }
        yield* locks.acquire("held", { ttl: "1 hour", owner: "holder-ü" })
        // schedules with a group, a payload and an expiry
        const scheduler = yield* Scheduler.Scheduler
        yield* scheduler.schedule("sweep", "@every 7m", "tenants", { kind: "sweep", n: [1, 2.5, "ü"] }, {
          group: "sched",
          priority: 3,
          maxAttempts: 9,
          expires: "2 minutes"
        })
        yield* scheduler.schedule("plain", "@every 1h", "plain", "tick")
        // the Effect stores
        const queue = yield* orders
        yield* queue.offer({ n: 1 }, { id: "order-1" })
        yield* queue.offer({ n: 2 }, { id: "order-2" })
        yield* queue.take(() => Effect.void)
        const limiter = yield* RateLimiter.RateLimiter
        yield* limiter.consume({ algorithm: "fixed-window", onExceeded: "fail", window: "1 hour", limit: 5, key: "fw", tokens: 2 })
        yield* limiter.consume({ algorithm: "token-bucket", onExceeded: "fail", window: "1 minute", limit: 3, key: "tb" })
        yield* advance("7 seconds")
        yield* limiter.consume({ algorithm: "token-bucket", onExceeded: "fail", window: "1 minute", limit: 3, key: "tb" })
        // an acked newest job: only the high-water mark knows its id
        yield* plain.enqueue("newest")
        yield* Effect.flatMap(plain.cancel(yield* plain.enqueue("newest-2")), (b) => Effect.sync(() => expect(b).toBe(true)))
        return { doomed, view: yield* adminView }
      }).pipe(Effect.scoped, Effect.provide(withEffectStores(sqliteOwned.store({ filename: sqliteFile }))))
      expect(before.view.jobs.length).toBeGreaterThan(30)
      const stored = sqliteRows(sqliteFile)
      for (const [table] of tables) expect(stored[table]!.length, table).toBeGreaterThan(0)

      const context = yield* Layer.build(withEffectStores(pgOwned.store({ filename: target })))
      const result = yield* Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }), context)
      expect(result).toEqual({
        jobs: stored.__alkstore_jobs!.length,
        schedules: stored.__alkstore_scheduler_tasks!.length,
        locks: stored.__alkstore_locks!.length
      })
      yield* Effect.gen(function*() {
        expect(yield* pgRows).toEqual(stored)
        const after = yield* adminView
        expect(after).toEqual(before.view)
        // each payload reads back as the value enqueued
        const plain = yield* queueOf("plain")
        const read = yield* Effect.forEach(
          before.view.jobs.filter((j) => j.queue === "plain").map((j) => j.id),
          (id) => Effect.map(plain.getJob(id), (j) => Option.getOrThrow(j).payload)
        )
        for (const payload of tricky) expect(read).toContainEqual(payload)
        const dead = Option.getOrThrow(yield* Effect.flatMap(queueOf("deadly"), (q) => q.getJob(before.doomed)))
        expect(dead.state).toBe("dead")
        expect(dead.attempts).toBe(2)
        expect(Option.getOrUndefined(dead.lastError)).toBe("Boom {\"code\":7}")
      }).pipe(Effect.scoped, Effect.provide(context))
    }).pipe(Effect.scoped)
  })

  it.effect("the PostgreSQL store carries on: a claim lapses and is re-delivered with its attempt counted, fencing and the schedule's phase continue", () => {
    const sqliteFile = freshFile("review-carry")
    const target = freshFile("review-carry-pg")
    return Effect.gen(function*() {
      const before = yield* Effect.gen(function*() {
        const q = yield* queueOf("work", { visibilityTimeout: "5 minutes", maxAttempts: 3 })
        const id = yield* q.enqueue({ w: 1 }, { key: "in-flight" })
        const handle = yield* mustClaim(q, "sqlite-worker")
        const scheduler = yield* Scheduler.Scheduler
        const sweep = yield* scheduler.schedule("sweep", "@every 10m", "swept", { kind: "sweep" }, { group: "g1" })
        // the SQLite deployment's leader fired the first boundary, then stopped (its lease row stays)
        const runner = yield* Effect.fork(scheduler.runSchedules)
        yield* advance("10 minutes")
        yield* Fiber.interrupt(runner)
        const locks = yield* Locks.Locks
        const lock = Option.getOrThrow(yield* locks.acquire("job-lock", { ttl: "2 minutes", owner: "sqlite" }))
        const admin = yield* Admin.Admin
        const leader = (yield* admin.locks).find((l) => l.name === "__alkstore_scheduler")
        expect(handle.job.attempts).toBe(1)
        return { id, sweep, lockToken: lock.token, leaderToken: leader?.token }
      }).pipe(Effect.provide(sqliteOwned.store({ filename: sqliteFile })))
      expect(before.leaderToken).toBe(1)

      const context = yield* Layer.build(pgOwned.store({ filename: target }))
      yield* Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }), context)
      yield* Effect.gen(function*() {
        yield* advance("10 minutes")
        const q = yield* queueOf("work")
        // the live key still deduplicates to the claimed job
        expect(yield* q.enqueue({ w: 2 }, { key: "in-flight" })).toBe(before.id)
        // the lapsed claim comes back, its attempt counted
        const again = yield* mustClaim(q, "pg-worker")
        expect(again.job.id).toBe(before.id)
        expect(again.job.attempts).toBe(2)
        expect(yield* again.ack).toBe(true)
        // fencing tokens continue above the SQLite ones
        const lock = Option.getOrThrow(yield* (yield* Locks.Locks).acquire("job-lock", { ttl: "1 minute", owner: "pg" }))
        expect(lock.token).toBeGreaterThan(before.lockToken)
        // the scheduler's leadership continues its tokens, and fires the next boundary with its group and payload
        const scheduler = yield* Scheduler.Scheduler
        const runner = yield* Effect.fork(scheduler.runSchedules)
        yield* advance("1 second")
        const leader = (yield* (yield* Admin.Admin).locks).find((l) => l.name === "__alkstore_scheduler")!
        expect(leader.token).toBeGreaterThan(before.leaderToken!)
        yield* Fiber.interrupt(runner)
        const swept = yield* (yield* Admin.Admin).jobs({ queue: "swept" })
        // boundary 10 min fired on SQLite (its job came along); 20 min fired once, on PostgreSQL
        expect(swept.map((j) => DateTime.toEpochMillis(j.runAt)).sort((a, b) => a - b)).toEqual([10 * minute, 20 * minute])
        expect(swept.map((j) => j.payload)).toEqual([{ kind: "sweep" }, { kind: "sweep" }])
        const schedule = (yield* (yield* Admin.Admin).schedules).find((s) => s.name === "sweep")!
        expect(Option.getOrUndefined(schedule.opts.group)).toBe("g1")
        expect(DateTime.toEpochMillis(schedule.nextFireAt)).toBe(DateTime.toEpochMillis(before.sweep.nextFireAt) + 20 * minute)
      }).pipe(Effect.provide(context))
    }).pipe(Effect.scoped)
  })

  /** A SQLite store with limits, three grouped jobs and a held lock. */
  const tenantsStore = (filename: string) =>
    Effect.gen(function*() {
      yield* (yield* Queues.Queues).setLimits("tenants", { concurrency: 2 })
      yield* Effect.flatMap(queueOf("tenants"), (q) => q.enqueueBatch([1, 2, 3], { group: "g" }))
      yield* (yield* Locks.Locks).acquire("l", { ttl: "1 minute", owner: "o" })
    }).pipe(Effect.provide(sqliteOwned.store({ filename })))

  it.effect("a failed import leaves the PostgreSQL store as it was, and a second try imports everything", () => {
    const sqliteFile = freshFile("review-atomic")
    const target = freshFile("review-atomic-pg")
    return Effect.gen(function*() {
      yield* tenantsStore(sqliteFile)
      const context = yield* Layer.build(pgOwned.store({ filename: target }))
      // the PostgreSQL store has limits of its own for the same queue (it was used): the import is refused
      yield* Effect.provide(Effect.flatMap(Queues.Queues, (q) => q.setLimits("tenants", { concurrency: 1 })), context)
      const failed = yield* Effect.exit(Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }), context))
      expect(Exit.isFailure(failed) && Cause.failureOption(failed.cause).pipe(Option.map((e) => e._tag), Option.getOrUndefined)).toBe("SqlError")
      yield* Effect.gen(function*() {
        const totals = yield* (yield* Admin.Admin).totals
        expect(totals.live).toBe(0)
        expect((yield* (yield* Admin.Admin).locks).length).toBe(0)
        expect(yield* (yield* Queues.Queues).clearLimits("tenants")).toBe(true)
      }).pipe(Effect.provide(context))
      const result = yield* Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }), context)
      expect(result).toEqual({ jobs: 3, schedules: 0, locks: 1 })
      expect(Option.getOrThrow(yield* Effect.provide(Effect.flatMap(Queues.Queues, (q) => q.limits("tenants")), context)))
        .toEqual({ concurrency: 2 })
    }).pipe(Effect.scoped)
  })

  it.live("an import interrupted mid-copy leaves nothing behind (no transaction left open), and a second try imports everything", () => {
    const sqliteFile = freshFile("review-interrupt")
    const target = freshFile("review-interrupt-pg")
    const schema = pgSchemaFor(target)
    return Effect.gen(function*() {
      yield* tenantsStore(sqliteFile)
      const context = yield* Layer.build(pgOwned.store({ filename: target }))
      const sql = Context.get(context, SqlClient.SqlClient)
      // another transaction holds the limits table: the import stops there, after copying jobs and locks
      const release = yield* Deferred.make<void>()
      const blocker = yield* Effect.fork(sql.withTransaction(Effect.zipRight(
        sql.unsafe(`LOCK TABLE ${schema}.__alkstore_flow_limits IN ACCESS EXCLUSIVE MODE`),
        Deferred.await(release)
      )))
      yield* Effect.sleep("100 millis")
      const importing = yield* Effect.fork(Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema }), context))
      const waiting = sql.unsafe<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND relation = '${schema}.__alkstore_flow_limits'::regclass`
      )
      for (let i = 0; i < 200 && (yield* waiting)[0]!.n === 0; i++) yield* Effect.sleep("10 millis")
      expect((yield* waiting)[0]!.n).toBe(1)
      const stopped = yield* Effect.fork(Fiber.interrupt(importing))
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(blocker)
      expect(Exit.isInterrupted(yield* Fiber.join(stopped))).toBe(true)
      const left = yield* sql.unsafe<{ jobs: number; locks: number; open: number }>(
        `SELECT (SELECT count(*)::int FROM ${schema}.__alkstore_jobs) AS jobs, (SELECT count(*)::int FROM ${schema}.__alkstore_locks) AS locks,
           (SELECT count(*)::int FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%') AS open`
      )
      expect(left[0]).toEqual({ jobs: 0, locks: 0, open: 0 })
      const result = yield* Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema }), context).pipe(Effect.timeout("10 seconds"))
      expect(result).toEqual({ jobs: 3, schedules: 0, locks: 1 })
    }).pipe(Effect.scoped)
  })

  it.effect("a store of 150 000 jobs is imported (no RangeError defect from its size)", () => {
    const sqliteFile = freshFile("review-large")
    const target = freshFile("review-large-pg")
    const count = 150_000
    return Effect.gen(function*() {
      yield* deadBacklog(sqliteOwned, "backlog", count).pipe(Effect.provide(sqliteOwned.store({ filename: sqliteFile })))
      const context = yield* Layer.build(pgOwned.store({ filename: target }))
      const exit = yield* Effect.exit(
        Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }), context)
      )
      expect(Exit.isSuccess(exit) ? exit.value : Cause.pretty(exit.cause).split("\n").slice(0, 3).join(" | ")).toEqual({
        jobs: count,
        schedules: 0,
        locks: 0
      })
    }).pipe(Effect.scoped)
  }, 60_000)

  it.effect("an import never lets the PostgreSQL store hand out again an id it handed out before", () => {
    const sqliteFile = freshFile("review-ids")
    const target = freshFile("review-ids-pg")
    return Effect.gen(function*() {
      yield* Effect.flatMap(queueOf("q"), (q) => q.enqueueBatch(["s1", "s2"])).pipe(
        Effect.provide(sqliteOwned.store({ filename: sqliteFile }))
      )
      const context = yield* Layer.build(pgOwned.store({ filename: target }))
      // the PostgreSQL store was tried first: five jobs, all handled (none left, no schedule, no lock)
      const handedOut = yield* Effect.gen(function*() {
        const q = yield* queueOf("trial")
        const ids = yield* q.enqueueBatch([1, 2, 3, 4, 5])
        for (let i = 0; i < 5; i++) yield* Effect.flatMap(mustClaim(q, "w"), (h) => h.ack)
        return ids
      }).pipe(Effect.provide(context))
      const imported = yield* Effect.either(
        Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }), context)
      )
      if (imported._tag === "Right") {
        const next = yield* Effect.provide(Effect.flatMap(queueOf("q"), (q) => q.enqueue("new")), context)
        // contract: ids are never reused — the next id is past every one this store handed out
        expect(next, `next id after importing into a store that had handed out ${handedOut.join(",")}`)
          .toBeGreaterThan(Math.max(...handedOut))
      }
    }).pipe(Effect.scoped)
  })
})
