/**
 * Moving a deployment from SQLite to PostgreSQL: `PgStore.importSqlite`
 * copies pending, scheduled, claimed and dead jobs, schedules (their phase)
 * and lock rows (their fencing tokens), and the PostgreSQL store carries on
 * from where the SQLite one stopped.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import * as RateLimiter from "@effect/experimental/RateLimiter"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Effect, Layer, Option, Schema } from "effect"
import { EffectStores, Locks, PgStore, Queues, Scheduler } from "../src/index.js"
import { freshFile, pgOwned, pgSchemaFor, sqliteOwned } from "./contract/harness.js"
import { advance, queueOf } from "./contract/support.js"

describe("PgStore.importSqlite", () => {
  it.effect("copies jobs of every state, schedules and lock tokens; the PostgreSQL store carries on", () => {
    const sqliteFile = freshFile("to-import")
    const target = freshFile("imported")
    return Effect.gen(function*() {
      // the SQLite deployment
      const before = yield* Effect.gen(function*() {
        const q = yield* queueOf("work")
        const pending = yield* q.enqueue({ n: 1 }, { priority: 3, key: "k1" })
        const scheduled = yield* q.enqueue({ n: 2 }, { delay: "1 hour" })
        const dead = yield* q.enqueue({ n: 3 })
        const claimedId = yield* q.enqueue({ n: 4 }, { priority: 9 })
        const first = Option.getOrThrow(yield* q.claim("w"))
        expect(first.job.id).toBe(claimedId)
        const doomed = Option.getOrThrow(yield* q.claim("w"))
        yield* doomed.fail("broken")
        const locks = yield* Locks.Locks
        for (const owner of ["a", "b", "c"]) {
          const lock = Option.getOrThrow(yield* locks.acquire("nightly", { ttl: "1 second", owner }))
          yield* lock.release
        }
        const schedule = yield* (yield* Scheduler.Scheduler).schedule("sweep", "@every 5m", "maintenance", { kind: "sweep" })
        // the newest job cancelled: only the store's high-water mark still knows its id
        const cancelled = yield* q.enqueue({ n: 6 })
        expect(yield* q.cancel(cancelled)).toBe(true)
        return { pending, scheduled, dead, claimedId, doomed: doomed.job.id, schedule, cancelled, stats: yield* q.stats }
      }).pipe(Effect.provide(sqliteOwned.store({ filename: sqliteFile })))
      expect(before.doomed).toBe(before.pending)

      const pg = pgOwned.store({ filename: target })
      const context = yield* Layer.build(pg)
      const result = yield* Effect.provide(
        PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }),
        context
      )
      expect(result).toEqual({ jobs: 4, schedules: 1, locks: 1 })
      // a second import into the same store is refused (it is not empty)
      const again = yield* Effect.flip(Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }), context))
      expect(again._tag).toBe("SqlError")

      yield* Effect.gen(function*() {
        const q = yield* queueOf("work")
        const stats = yield* q.stats
        expect({ ...stats, oldestPendingAge: undefined }).toEqual({ ...before.stats, oldestPendingAge: undefined })
        const dead = yield* q.dead()
        expect(dead.map((j) => [j.id, Option.getOrUndefined(j.lastError)])).toEqual([[before.doomed, "broken"]])
        const job = Option.getOrThrow(yield* q.getJob(before.scheduled))
        expect(job.payload).toEqual({ n: 2 })
        expect(job.state).toBe("pending")
        // the claimed job keeps its claim (its lease lapses and it is re-delivered with its attempt counted)
        const claimed = Option.getOrThrow(yield* q.getJob(before.claimedId))
        expect(claimed.state).toBe("claimed")
        expect(claimed.attempts).toBe(1)
        // the next job gets a fresh id after every one the SQLite store handed out
        expect(yield* q.enqueue({ n: 5 })).toBe(before.cancelled + 1)
        // the lock's next tenure continues the fencing tokens
        const lock = Option.getOrThrow(yield* (yield* Locks.Locks).acquire("nightly", { ttl: "1 second", owner: "d" }))
        expect(lock.token).toBe(4)
        // the schedule keeps its phase
        yield* advance("5 minutes")
        const nextFire = yield* (yield* Scheduler.Scheduler).schedule("sweep", "@every 5m", "maintenance", { kind: "sweep" })
        expect(DateTime.toEpochMillis(nextFire.nextFireAt)).toBe(DateTime.toEpochMillis(before.schedule.nextFireAt))
      }).pipe(Effect.provide(context))
    }).pipe(Effect.scoped)
  })

  it.effect("copies flow control: the limits, the groups and their rounds, the rate log", () => {
    const sqliteFile = freshFile("to-import-flow")
    const target = freshFile("imported-flow")
    return Effect.gen(function*() {
      yield* Effect.gen(function*() {
        const queues = yield* Queues.Queues
        yield* queues.setLimits("tenants", { groupConcurrency: 1, rate: { limit: 2, per: "1 hour" } })
        const q = yield* queueOf("tenants")
        yield* q.enqueueBatch(["a1", "a2", "a3"], { group: "a" })
        yield* q.enqueue("b1", { group: "b" })
        yield* Effect.flatMap(q.claim("w"), (h) => Option.getOrThrow(h).ack) // a1: one claim of the hour's two
      }).pipe(Effect.provide(sqliteOwned.store({ filename: sqliteFile })))

      const context = yield* Layer.build(pgOwned.store({ filename: target }))
      yield* Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }), context)
      yield* Effect.gen(function*() {
        const limits = Option.getOrThrow(yield* (yield* Queues.Queues).limits("tenants"))
        expect(limits.groupConcurrency).toBe(1)
        const q = yield* queueOf("tenants")
        // b1 before a2 (rotation survives), and then the hour's rate is spent (the log survived)
        const next = Option.getOrThrow(yield* q.claim("w"))
        expect(next.job.payload).toBe("b1")
        expect(Option.isNone(yield* q.claim("w"))).toBe(true)
        expect((yield* q.stats).heldBack).toBe(2)
      }).pipe(Effect.provide(context))
    }).pipe(Effect.scoped)
  })

  it.effect("copies the trace context and the Effect stores' offered ids and rate counters", () => {
    const sqliteFile = freshFile("to-import-stores")
    const target = freshFile("imported-stores")
    const effectStores = <E, R>(store: Layer.Layer<R, E>) =>
      Layer.mergeAll(PersistedQueue.layer, RateLimiter.layer).pipe(
        Layer.provideMerge(Layer.mergeAll(EffectStores.layerPersistedQueueStore(), EffectStores.layerRateLimiterStore)),
        Layer.provideMerge(store)
      )
    const orders = PersistedQueue.make({ name: "orders", schema: Schema.Struct({ n: Schema.Number }) })
    const consume = (onExceeded: "delay" | "fail") =>
      Effect.flatMap(RateLimiter.RateLimiter, (limiter) =>
        limiter.consume({ algorithm: "fixed-window", onExceeded, window: "1 hour", limit: 2, key: "api" }))
    return Effect.gen(function*() {
      yield* Effect.gen(function*() {
        const queue = yield* orders
        yield* queue.offer({ n: 1 }, { id: "order-1" })
        yield* queue.take(() => Effect.void) // processed: its id stays spent
        yield* consume("fail")
        yield* consume("fail") // the hour's two
        yield* Effect.flatMap(queueOf("traced"), (q) => q.enqueue({ n: 1 })).pipe(Effect.withSpan("request"))
      }).pipe(Effect.scoped, Effect.provide(effectStores(sqliteOwned.store({ filename: sqliteFile }))))

      const context = yield* Layer.build(effectStores(pgOwned.store({ filename: target })))
      yield* Effect.provide(PgStore.importSqlite({ filename: sqliteFile, schema: pgSchemaFor(target) }), context)
      yield* Effect.gen(function*() {
        const queue = yield* orders
        yield* queue.offer({ n: 2 }, { id: "order-1" })
        const stats = yield* Effect.flatMap(Effect.flatMap(Queues.Queues, (q) => q.queue("orders")), (q) => q.stats)
        expect(stats.pending).toBe(0) // the id was offered before: nothing added
        const third = yield* Effect.flip(consume("fail"))
        expect(third.reason).toBe("Exceeded")
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql.unsafe<{ trace_context: string | null }>(
          `SELECT trace_context FROM ${pgSchemaFor(target)}.__alkstore_jobs WHERE queue = 'traced'`
        )
        expect(rows).toHaveLength(1)
        expect(rows[0]!.trace_context).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/)
      }).pipe(Effect.scoped, Effect.provide(context))
    }).pipe(Effect.scoped)
  })
})
