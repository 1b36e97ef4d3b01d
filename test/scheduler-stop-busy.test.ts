/**
 * Stopping the scheduler is interrupting its fiber (CONTRACT §5), and it must
 * take effect while the store waits out another connection's write lock:
 * not one `busyPatience` later (the lease acquire, a transaction's BEGIN),
 * nor two (a tick's BEGIN, then the lease release).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import Sqlite from "better-sqlite3"
import type { Connection } from "@effect/sql/SqlConnection"
import { Deferred, Effect, Exit, Fiber, Option } from "effect"
import { Scheduler } from "../src/index.js"
import { makeImmediateTransaction } from "../src/internal/sqlite/transaction.js"
import { sqliteFromClient, sqliteOwned, freshFile } from "./contract/harness.js"

/** Far below the store's patience (10 s), far above a prompt stop (about 1 s at most). */
const promptMillis = 2_000
const patience = "10 seconds"

/** Another connection holding `BEGIN IMMEDIATE` on `filename` for the rest of the scope. */
const writeLocked = (filename: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const db = new Sqlite(filename)
      db.prepare("BEGIN IMMEDIATE").run()
      return db
    }),
    (db) =>
      Effect.sync(() => {
        if (db.inTransaction) db.prepare("ROLLBACK").run()
        db.close()
      })
  )

/** A foreign client's driver keeps better-sqlite3's 5 s busy_timeout, which blocks the event loop. */
const shortBusyTimeout = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`PRAGMA busy_timeout = 5`)

/** How long interrupting `fiber` takes, in real milliseconds, and how it ended. */
const stop = <A, E>(fiber: Fiber.RuntimeFiber<A, E>) =>
  Effect.gen(function*() {
    const started = Date.now()
    const exit = yield* Fiber.interrupt(fiber)
    return { took: Date.now() - started, exit }
  })

for (const engine of [sqliteOwned, sqliteFromClient]) {
  describe(`stopping the scheduler on a busy file — ${engine.name}`, () => {
    it.live("a standby waiting for the lease on a busy file stops at once and holds nothing", () => {
      const filename = freshFile("stop-standby")
      return Effect.gen(function*() {
        yield* shortBusyTimeout
        const scheduler = yield* Scheduler.Scheduler
        const { took, exit } = yield* Effect.scoped(Effect.gen(function*() {
          yield* writeLocked(filename)
          const standby = yield* Effect.fork(scheduler.runAsStandby)
          yield* Effect.sleep("300 millis")
          expect(Option.isNone(yield* Fiber.poll(standby))).toBe(true)
          return yield* stop(standby)
        }))
        expect(took).toBeLessThan(promptMillis)
        expect(Exit.isInterrupted(exit)).toBe(true)
        // No lease was left behind and the store's connection is in no transaction: the next runner leads at once.
        const next = yield* Effect.fork(scheduler.runSchedules)
        yield* Effect.sleep("300 millis")
        expect(Option.isNone(yield* Fiber.poll(next))).toBe(true)
        expect((yield* stop(next)).took).toBeLessThan(promptMillis)
      }).pipe(Effect.provide(engine.store({ filename, busyPatience: patience })))
    })

    it.live("a leader whose tick waits on a busy file stops at once", () => {
      const filename = freshFile("stop-leader")
      return Effect.gen(function*() {
        yield* shortBusyTimeout
        const scheduler = yield* Scheduler.Scheduler
        yield* scheduler.schedule("every-second", "@every 1s", "stop-busy", {})
        const leader = yield* Effect.fork(scheduler.runSchedules)
        yield* Effect.sleep("300 millis")
        const { took, exit } = yield* Effect.scoped(Effect.gen(function*() {
          yield* writeLocked(filename)
          // Past the next boundary: the tick's BEGIN IMMEDIATE is waiting out the lock.
          yield* Effect.sleep("1500 millis")
          expect(Option.isNone(yield* Fiber.poll(leader))).toBe(true)
          return yield* stop(leader)
        }))
        // The lease release gives up after a short while (the lease lapses with its ttl).
        expect(took).toBeLessThan(promptMillis)
        expect(Exit.isInterrupted(exit)).toBe(true)
        // The store's connection is in no transaction: writes commit again.
        yield* scheduler.schedule("after", "@every 1h", "stop-busy", {})
        expect((yield* scheduler.unschedule("after"))).toBe(true)
      }).pipe(Effect.provide(engine.store({ filename, busyPatience: patience })))
    })
  })
}

describe(`an interrupted transaction on a busy file — ${sqliteOwned.name}`, () => {
  it.live("a transaction waiting to BEGIN stops at once and leaves no transaction open", () => {
    const filename = freshFile("stop-begin")
    return Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const { took, exit } = yield* Effect.scoped(Effect.gen(function*() {
        yield* writeLocked(filename)
        const waiting = yield* Effect.fork(sql.withTransaction(sql`SELECT 1`))
        yield* Effect.sleep("300 millis")
        expect(Option.isNone(yield* Fiber.poll(waiting))).toBe(true)
        return yield* stop(waiting)
      }))
      expect(took).toBeLessThan(promptMillis)
      expect(Exit.isInterrupted(exit)).toBe(true)
      // A BEGIN on a connection left inside a transaction would fail ("within a transaction").
      expect(yield* sql.withTransaction(sql<{ n: number }>`SELECT 1 AS n`)).toEqual([{ n: 1 }])
    }).pipe(Effect.provide(sqliteOwned.store({ filename, busyPatience: patience })))
  })
})

describe("an interruption seen just as BEGIN succeeds", () => {
  it.live("stops at once and rolls the transaction back before letting the connection go", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const conn = {
        execute: (sql: string) => Effect.sync(() => log.push(sql))
      } as unknown as Connection
      const begun = yield* Deferred.make<void>()
      const transaction = makeImmediateTransaction({
        acquire: () => Effect.succeed([Effect.asVoid(Effect.sync(() => log.push("release"))), conn] as const),
        // The BEGIN succeeds, then (still inside the interruptible wait) the fiber is interrupted.
        retryBusy: (effect) => Effect.zipLeft(effect, Effect.zipRight(Deferred.succeed(begun, undefined), Effect.sleep("1 second"))),
        owns: (c) => c === conn
      })
      const fiber = yield* Effect.fork(transaction(Effect.sync(() => log.push("body"))))
      yield* Deferred.await(begun)
      const { took, exit } = yield* stop(fiber)
      expect(took).toBeLessThan(500)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(log).toEqual(["BEGIN IMMEDIATE", "ROLLBACK", "release"])
    }))
})
