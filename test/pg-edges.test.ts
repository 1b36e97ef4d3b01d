/**
 * PostgreSQL engine edges outside the queue SQL: LISTEN/NOTIFY waking after
 * the listening connection is killed, schemas that do not wake each other,
 * migrations (awkward schema names, an older schema, a migration cut off),
 * store close with work in flight, and the SQLite import's keys and locks.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Clock, Effect, Exit, Fiber, Layer, Option, Redacted, Scope, TestClock } from "effect"
import { makeDatabaseClock, measureOffset } from "../src/internal/pg/clock.js"
import type { PgExecutor } from "../src/internal/pg/executor.js"
import Pg from "pg"
import { Locks, PgStore, Scheduler } from "../src/index.js"
import { freshFile, pgDatabaseUrl, pgOwned, pgSchemaFor, sqliteOwned } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"
import { killListeners, throughProxy } from "./support/pgProxy.js"

const withAdmin = <A>(f: (client: Pg.Client) => Promise<A>) =>
  Effect.promise(async () => {
    const client = new Pg.Client({ connectionString: await pgDatabaseUrl() })
    await client.connect()
    try {
      return await f(client)
    } finally {
      await client.end()
    }
  })

const storeOn = (schema: string, settings: Partial<PgStore.StoreSettings & { applicationName: string }> = {}) =>
  Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (url) =>
    PgStore.layer({ url: Redacted.make(url), schema, clock: "host", fallbackPoll: "1 hour", ...settings })))

describe("PostgreSQL engine edges", () => {
  it.live("a LISTEN connection killed before anybody waited: the first waiter is still woken by NOTIFY", () => {
    const filename = freshFile("kill-early")
    return Effect.gen(function*() {
      const queue = yield* queueOf("early")
      yield* killListeners
      yield* Effect.sleep("300 millis")
      const taker = yield* Effect.fork(queue.take("w"))
      yield* Effect.sleep("300 millis")
      yield* Effect.flatMap(queueOf("early"), (q) => q.enqueue({ n: 1 })).pipe(
        Effect.provide(pgOwned.store({ filename }))
      )
      const handle = yield* Fiber.join(taker).pipe(Effect.timeout("4 seconds"))
      expect(handle.job.payload).toEqual({ n: 1 })
    }).pipe(Effect.provide(pgOwned.store({ filename, fallbackPoll: "1 hour" })))
  })

  it.live("a LISTEN connection killed again and again while a worker waits: NOTIFY still reaches it after", () => {
    const filename = freshFile("kill-often")
    return Effect.gen(function*() {
      const queue = yield* queueOf("often")
      const taker = yield* Effect.fork(queue.take("w"))
      yield* Effect.sleep("200 millis")
      for (let i = 0; i < 4; i++) {
        yield* killListeners
        yield* Effect.sleep("150 millis")
      }
      yield* Effect.sleep("1500 millis")
      yield* Effect.flatMap(queueOf("often"), (q) => q.enqueue({ n: 1 })).pipe(
        Effect.provide(pgOwned.store({ filename }))
      )
      const handle = yield* Fiber.join(taker).pipe(Effect.timeout("4 seconds"))
      expect(handle.job.payload).toEqual({ n: 1 })
    }).pipe(Effect.provide(pgOwned.store({ filename, fallbackPoll: "1 hour" })))
  })

  it.live("two stores on different schemas: a commit on one wakes its own waiters only", () => {
    const a = `edge_a_${process.pid}`
    const b = `edge_b_${process.pid}`
    return Effect.gen(function*() {
      const inA = yield* Effect.fork(Effect.flatMap(queueOf("same"), (q) => q.take("w")).pipe(Effect.provide(storeOn(a))))
      const inB = yield* Effect.fork(Effect.flatMap(queueOf("same"), (q) => q.take("w")).pipe(Effect.provide(storeOn(b))))
      yield* Effect.sleep("800 millis")
      yield* Effect.flatMap(queueOf("same"), (q) => q.enqueue("for-b")).pipe(Effect.provide(storeOn(b)))
      const got = yield* Fiber.join(inB).pipe(Effect.timeout("4 seconds"))
      expect(got.job.payload).toBe("for-b")
      expect(Option.isNone(yield* Fiber.poll(inA))).toBe(true)
      yield* Effect.flatMap(queueOf("same"), (q) => q.enqueue("for-a")).pipe(Effect.provide(storeOn(a)))
      expect((yield* Fiber.join(inA).pipe(Effect.timeout("4 seconds"))).job.payload).toBe("for-a")
    })
  })

  it.live("schema names that are SQL keywords pass the option's validation: each works or is refused as InvalidOptions", () =>
    Effect.gen(function*() {
      const wrong: Array<string> = []
      for (const keyword of ["time", "values", "user", "order"]) {
        const exit = yield* Effect.exit(Effect.gen(function*() {
          const q = yield* queueOf("kw")
          const id = yield* q.enqueue({ n: 1 })
          const handle = Option.getOrThrow(yield* q.claim("w"))
          expect(handle.job.id).toBe(id)
          yield* handle.ack
        }).pipe(Effect.provide(storeOn(keyword))))
        if (Exit.isFailure(exit)) {
          const error = Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string; cause?: { message?: string } } | undefined
          if (error?._tag !== "InvalidOptions") wrong.push(`${keyword}: ${error?._tag ?? "defect"} (${error?.cause?.message})`)
        }
      }
      expect(wrong).toEqual([])
    }))

  it.live("an upgrade of an older schema whose migration statement is cut off fails with SqlError, not a defect", () => {
    const schema = `edge_old_${process.pid}`
    return Effect.gen(function*() {
      // a store at the latest version, then taken back to before migration 8 (its dead-job indexes)
      yield* Effect.flatMap(queueOf("old"), (q) => q.enqueue({ n: 1 })).pipe(Effect.provide(storeOn(schema)))
      yield* withAdmin(async (c) => {
        await c.query(`DROP INDEX ${schema}.__alkstore_jobs_dead_by_id, ${schema}.__alkstore_jobs_dead_queue_id,
          ${schema}.__alkstore_jobs_dead_since`)
        await c.query(`DELETE FROM ${schema}.__alkstore_migrations WHERE migration_id = 8`)
      })
      // an old process's open transaction holds the jobs table: the new migration's CREATE INDEX waits,
      // and the connection it waits on is killed (a server restart, a failover, an operator)
      const blocker = new Pg.Client({ connectionString: yield* Effect.promise(pgDatabaseUrl) })
      yield* Effect.promise(() => blocker.connect())
      yield* Effect.promise(() => blocker.query(`BEGIN; LOCK TABLE ${schema}.__alkstore_jobs IN ROW EXCLUSIVE MODE`))
      const starting = yield* Effect.fork(Effect.exit(
        Effect.flatMap(queueOf("old"), (q) => q.stats).pipe(Effect.provide(storeOn(schema)))
      ))
      let killed = 0
      for (let i = 0; i < 100 && killed === 0; i++) {
        yield* Effect.sleep("50 millis")
        killed = yield* withAdmin(async (c) =>
          (await c.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'CREATE INDEX%'`)).rowCount ?? 0
        )
      }
      expect(killed).toBe(1)
      const exit = yield* Fiber.join(starting)
      yield* Effect.promise(() => blocker.query("ROLLBACK").then(() => blocker.end()))
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isFailure(exit)) {
        const defect = Option.getOrUndefined(Cause.dieOption(exit.cause)) as { _tag?: string; message?: string; reason?: string; cause?: { message?: string; cause?: { message?: string } } } | undefined
        expect(defect, `a defect: ${defect?._tag} ${defect?.reason} ${defect?.message} / ${defect?.cause?.message} / ${defect?.cause?.cause?.message}`).toBeUndefined()
        expect(Option.getOrThrow(Cause.failureOption(exit.cause))._tag).toBe("SqlError")
      }
      // and the next start completes the upgrade
      expect((yield* Effect.flatMap(queueOf("old"), (q) => q.stats).pipe(Effect.provide(storeOn(schema)))).pending).toBe(1)
    })
  })

  it.live("eight stores starting at once on an empty database, over two schemas, all migrate once and work", () => {
    const schemas = [`edge_many_a_${process.pid}`, `edge_many_b_${process.pid}`]
    return Effect.gen(function*() {
      const ids = yield* Effect.all(
        Array.from({ length: 8 }, (_, i) =>
          Effect.map(
            Effect.flatMap(queueOf("many"), (q) => q.enqueue({ i })).pipe(Effect.provide(storeOn(schemas[i % 2]!))),
            (id) => `${schemas[i % 2]}:${id}`
          )),
        { concurrency: "unbounded" }
      )
      expect(new Set(ids).size).toBe(8)
      for (const schema of schemas) {
        const rows = yield* withAdmin(async (c) =>
          (await c.query(`SELECT migration_id FROM ${schema}.__alkstore_migrations ORDER BY 1`)).rows.map((r) => r.migration_id)
        )
        expect(rows).toEqual([1, 2, 3, 4, 5, 7, 8])
      }
    })
  })

  it.live("closing a store while a lock acquire waits on a row another connection holds ends promptly, leaving no connection", () => {
    const schema = `edge_close_${process.pid}`
    return Effect.gen(function*() {
      const layer = storeOn(schema, { applicationName: "edge-close" } as never)
      yield* Effect.flatMap(Locks.Locks, (l) => l.acquire("busy", { ttl: "1 millis", owner: "a" })).pipe(Effect.provide(layer))
      const blocker = new Pg.Client({ connectionString: yield* Effect.promise(pgDatabaseUrl) })
      yield* Effect.promise(() => blocker.connect())
      yield* Effect.promise(() => blocker.query(`BEGIN; SELECT * FROM ${schema}.__alkstore_locks WHERE name = 'busy' FOR UPDATE`))
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(layer, scope)
      const acquiring = yield* Effect.fork(
        Effect.flatMap(Locks.Locks, (l) => l.acquire("busy", { ttl: "10 seconds", owner: "b" })).pipe(Effect.provide(context))
      )
      yield* Effect.sleep("300 millis")
      const started = performance.now()
      yield* Fiber.interrupt(acquiring).pipe(Effect.timeout("5 seconds"))
      yield* Scope.close(scope, Exit.void).pipe(Effect.timeout("5 seconds"))
      const took = performance.now() - started
      yield* Effect.promise(() => blocker.query("ROLLBACK").then(() => blocker.end()))
      expect(took).toBeLessThan(3_000)
      yield* Effect.sleep("300 millis")
      const left = yield* withAdmin(async (c) =>
        (await c.query(`SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND application_name IN ('edge-close', 'alkstore-listen')`)).rows[0].n
      )
      expect(left).toBe(0)
    })
  })

  it.effect("an import keeps idempotency keys live, a held lock held, and lock tokens increasing", () => {
    const sqliteFile = freshFile("edge-import")
    const target = freshFile("edge-imported")
    return Effect.gen(function*() {
      const before = yield* Effect.gen(function*() {
        const q = yield* queueOf("keyed")
        const keyed = yield* q.enqueue({ n: 1 }, { key: "order-7" })
        const deadKeyed = yield* q.enqueue({ n: 2 }, { key: "order-8", maxAttempts: 1 })
        const h1 = Option.getOrThrow(yield* q.claim("w"))
        expect(h1.job.id).toBe(keyed)
        yield* h1.release
        // bury order-8 (claimed after order-7 is released: order-7 first again, then order-8)
        const again = Option.getOrThrow(yield* q.claim("w"))
        const h2 = Option.getOrThrow(yield* q.claim("w"))
        expect(h2.job.id).toBe(deadKeyed)
        yield* h2.fail("boom")
        yield* again.release
        const locks = yield* Locks.Locks
        for (let i = 0; i < 5; i++) yield* Effect.flatMap(locks.acquire("churn", { ttl: "1 second", owner: `o${i}` }), (l) => Option.getOrThrow(l).release)
        const held = Option.getOrThrow(yield* locks.acquire("held", { ttl: "1 hour", owner: "holder" }))
        return { keyed, deadKeyed, heldToken: held.token }
      }).pipe(Effect.provide(sqliteOwned.store({ filename: sqliteFile })))

      const context = yield* Layer.build(pgOwned.store({ filename: target }))
      yield* Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }), context)
      yield* Effect.gen(function*() {
        const q = yield* queueOf("keyed")
        // the live key still deduplicates; the dead job's key is free again
        expect(yield* q.enqueue({ n: 9 }, { key: "order-7" })).toBe(before.keyed)
        const fresh = yield* q.enqueue({ n: 10 }, { key: "order-8" })
        expect(fresh).toBeGreaterThan(before.deadKeyed)
        const locks = yield* Locks.Locks
        expect(Option.isNone(yield* locks.acquire("held", { ttl: "1 second", owner: "intruder" }))).toBe(true)
        const churn = Option.getOrThrow(yield* locks.acquire("churn", { ttl: "1 second", owner: "pg" }))
        expect(churn.token).toBe(6)
      }).pipe(Effect.provide(context))
    }).pipe(Effect.scoped)
  })

  it.live("a commit made while the LISTEN connection was down reaches an idle process worker at the reconnect, not the fallback poll", () => {
    const filename = freshFile("gap")
    return Effect.gen(function*() {
      const { layer, proxy } = yield* throughProxy(filename, { listenHeartbeat: "10 seconds" })
      const handled: Array<unknown> = []
      yield* Effect.gen(function*() {
        const queue = yield* queueOf("gap")
        yield* queue.enqueue({ n: 0 })
        yield* Effect.fork(queue.process("w", (job) => Effect.sync(() => handled.push(job.payload))))
        for (let i = 0; i < 100 && handled.length < 1; i++) yield* Effect.sleep("20 millis")
        yield* Effect.sleep("300 millis") // idle, waiting
        proxy.mode("refuse")
        yield* killListeners
        yield* Effect.sleep("300 millis")
        yield* Effect.flatMap(queueOf("gap"), (q) => q.enqueue({ n: 1 })).pipe(Effect.provide(pgOwned.store({ filename })))
        yield* Effect.sleep("300 millis")
        proxy.mode("forward")
        for (let i = 0; i < 150 && handled.length < 2; i++) yield* Effect.sleep("20 millis")
        expect(handled).toEqual([{ n: 0 }, { n: 1 }])
      }).pipe(Effect.provide(layer))
    }).pipe(Effect.scoped)
  })

  it.live("closing a store while its LISTEN reconnect hangs on a server that never answers ends promptly", () => {
    const filename = freshFile("close-hung")
    return Effect.gen(function*() {
      const { layer, proxy } = yield* throughProxy(filename, {
        listenHeartbeat: "10 seconds",
        listenHeartbeatTimeout: "20 seconds"
      })
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(layer, scope)
      const waiter = yield* Effect.fork(Effect.flatMap(queueOf("hung"), (q) => q.take("w")).pipe(Effect.provide(context)))
      yield* Effect.sleep("200 millis")
      proxy.mode("blackhole")
      yield* Effect.provide(killListeners, context)
      yield* Effect.sleep("300 millis") // the reconnect now hangs (its deadline is 20 s away)
      const started = performance.now()
      yield* Fiber.interrupt(waiter)
      yield* Scope.close(scope, Exit.void).pipe(Effect.timeout("10 seconds"))
      expect(performance.now() - started).toBeLessThan(2_000)
      // the hung attempt's socket is closed too, not left to TCP
      for (let i = 0; i < 100 && proxy.open() > 0; i++) yield* Effect.sleep("20 millis")
      expect(proxy.open()).toBe(0)
    }).pipe(Effect.scoped)
  })

  it.live("a leader that stops releases its lease by NOTIFY: a standby in another process takes over at once, not at half its ttl", () => {
    const schema = `edge_handover_${process.pid}`
    return Effect.gen(function*() {
      const settings = { leaderTtl: "20 seconds", leaderRenewEvery: "2 seconds" } as const
      const fired: Array<string> = []
      const leaderScope = yield* Scope.make()
      const leaderContext = yield* Layer.buildWithScope(storeOn(schema, settings), leaderScope)
      const leading = yield* Effect.fork(Effect.flatMap(Scheduler.Scheduler, (s) => s.runSchedules).pipe(Effect.provide(leaderContext)))
      yield* Effect.sleep("300 millis")
      yield* Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        yield* scheduler.schedule("tick", "@every 1s", "ticks", { n: 1 })
        const standby = yield* Effect.fork(scheduler.runAsStandby)
        yield* Effect.sleep("1000 millis") // the standby found the lease held: it waits (10 s) unless woken
        yield* Fiber.interrupt(leading) // the leader stops and releases its lease
        const since = performance.now()
        const queue = yield* queueOf("ticks")
        // the standby leads within a couple of seconds and fires
        expect((yield* queue.stats).pending).toBeGreaterThanOrEqual(0)
        let led = false
        for (let i = 0; i < 150 && !led; i++) {
          yield* Effect.sleep("20 millis")
          const held = yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
            sql<{ owner: string }>`SELECT owner FROM ${sql(schema)}.__alkstore_locks WHERE name = '__alkstore_scheduler' AND expires_at > ${Date.now()}`)
          led = held.length > 0
        }
        fired.push(`led after ${Math.round(performance.now() - since)} ms`)
        expect(led).toBe(true)
        expect(performance.now() - since).toBeLessThan(3_000)
        yield* Fiber.interrupt(standby)
      }).pipe(Effect.provide(storeOn(schema, settings)))
      yield* Scope.close(leaderScope, Exit.void)
    })
  })

  it.live("a schedule registered by another process wakes the leader by NOTIFY: its first boundary fires on time", () => {
    const schema = `edge_register_${process.pid}`
    return Effect.gen(function*() {
      const leaderScope = yield* Scope.make()
      const leaderContext = yield* Layer.buildWithScope(storeOn(schema), leaderScope)
      const leading = yield* Effect.fork(Effect.flatMap(Scheduler.Scheduler, (s) => s.runSchedules).pipe(Effect.provide(leaderContext)))
      yield* Effect.sleep("500 millis") // the leader idles: no schedules, its fallback poll an hour away
      yield* Effect.gen(function*() {
        yield* (yield* Scheduler.Scheduler).schedule("soon", "@every 1s", "soon", { n: 1 })
        const queue = yield* queueOf("soon")
        let pending = 0
        for (let i = 0; i < 150 && pending === 0; i++) {
          yield* Effect.sleep("20 millis")
          pending = (yield* queue.stats).pending
        }
        expect(pending).toBeGreaterThan(0)
      }).pipe(Effect.provide(storeOn(schema)))
      yield* Fiber.interrupt(leading)
      yield* Scope.close(leaderScope, Exit.void)
    })
  })

  it.scoped("a host wall clock that steps forward 10 minutes (its monotonic clock does not) leaves the database-aligned clock on the database's time", () =>
    Effect.gen(function*() {
      // Effect's default Clock: millis is Date.now() (steps with the host's wall clock), nanos is monotonic
      // (performance/hrtime). Here the TestClock is real time, `step` the wall clock's jump.
      let step = 0
      const test = yield* Clock.clockWith(Effect.succeed)
      const host: Clock.Clock = {
        [Clock.ClockTypeId]: Clock.ClockTypeId,
        unsafeCurrentTimeMillis: () => test.unsafeCurrentTimeMillis() + step,
        currentTimeMillis: Effect.sync(() => test.unsafeCurrentTimeMillis() + step),
        unsafeCurrentTimeNanos: () => test.unsafeCurrentTimeNanos(),
        currentTimeNanos: test.currentTimeNanos,
        sleep: (d) => test.sleep(d)
      }
      // the database's clock is real time (the TestClock's): the store's own measure against a database
      // answering `clock_timestamp()` with it
      const database = { all: () => Effect.sync(() => [{ now: test.unsafeCurrentTimeMillis() }]) } as unknown as PgExecutor
      const measure = measureOffset(database, host)
      const aligned = yield* makeDatabaseClock(measure, host, 60_000)
      const read = () => aligned.clock.unsafeCurrentTimeMillis()
      yield* TestClock.adjust("30 seconds")
      expect(read()).toBe(30_000)
      step = 600_000 // the host's wall clock jumps 10 minutes ahead (an NTP step, a VM resumed)
      const readings: Array<[string, number, number]> = []
      readings.push(["right after the step", test.unsafeCurrentTimeMillis(), read()])
      yield* TestClock.adjust("40 seconds") // past the next re-measure (at 60 s)
      readings.push(["after the re-measure", test.unsafeCurrentTimeMillis(), read()])
      yield* TestClock.adjust("120 seconds")
      readings.push(["two minutes later", test.unsafeCurrentTimeMillis(), read()])
      // the aligned clock should stay on the database's time (within a second), whatever the wall clock did
      expect(readings.map(([at, db, aligned]) => `${at}: database ${db}, aligned ${aligned}`)).toEqual(
        readings.map(([at, db]) => `${at}: database ${db}, aligned ${db}`)
      )
    }))
})
