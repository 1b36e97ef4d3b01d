/**
 * One clock across hosts: a PostgreSQL store aligns the program's Clock with
 * the database server's. A host whose clock runs 30 s ahead (a shifted Clock
 * here) still stamps jobs and judges leases on the database's time.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { SqlError } from "@effect/sql/SqlError"
import { Clock, DateTime, Effect, Option, Redacted, TestClock } from "effect"
import { makeDatabaseClock, measureOffset, type Offset } from "../src/internal/pg/clock.js"
import { makeExecutor } from "../src/internal/pg/executor.js"
import * as PgClient from "@effect/sql-pg/PgClient"
import { PgStore } from "../src/index.js"
import { freshFile, pgDatabaseUrl, pgOwned, pgSchemaFor } from "./contract/harness.js"
import { queueOf, shiftedClock } from "./contract/support.js"

const live = Clock.make()
const shifted = shiftedClock

const databaseNow = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql<{ now: number }>`SELECT (extract(epoch from clock_timestamp()) * 1000)::float8 AS now`,
    (rows) => Number(rows[0]!.now)
  ))

describe("PostgreSQL clock", () => {
  it.live("the offset to the database's clock is measured within half a round trip", () =>
    Effect.gen(function*() {
      const client = yield* PgClient.PgClient
      const executor = yield* makeExecutor(client, "clocktest")
      const plain = yield* measureOffset(executor, live)
      const ahead = yield* measureOffset(executor, shifted(30_000))
      expect(Math.abs(plain.offsetMillis)).toBeLessThan(plain.roundTripMillis / 2 + 5)
      expect(Math.abs(ahead.offsetMillis + 30_000)).toBeLessThan(ahead.roundTripMillis / 2 + 5)
    }).pipe(Effect.provide(pgOwned.store())))

  it.live("a host 30 s ahead reads, stamps and leases on the database's time", () => {
    const filename = freshFile("clock")
    return Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      yield* Effect.gen(function*() {
        const hostNow = live.unsafeCurrentTimeMillis() + 30_000
        const now = yield* Clock.currentTimeMillis
        const dbNow = yield* databaseNow
        expect(Math.abs(now - dbNow)).toBeLessThan(500)
        expect(hostNow - now).toBeGreaterThan(29_000)
        const queue = yield* queueOf("clocked", { visibilityTimeout: "10 seconds" })
        const id = yield* queue.enqueue({ n: 1 })
        const handle = Option.getOrThrow(yield* queue.claim("w"))
        expect(handle.job.id).toBe(id)
        const dbAfter = yield* databaseNow
        expect(Math.abs(DateTime.toEpochMillis(handle.job.createdAt) - dbAfter)).toBeLessThan(1_000)
        const leaseEnd = DateTime.toEpochMillis(Option.getOrThrow(handle.job.claimedUntil))
        expect(Math.abs(leaseEnd - (dbAfter + 10_000))).toBeLessThan(1_000)
        // time never runs backwards
        let last = 0
        for (let i = 0; i < 1000; i++) {
          const t = yield* Clock.currentTimeMillis
          expect(t).toBeGreaterThanOrEqual(last)
          last = t
        }
      }).pipe(
        Effect.provide(PgStore.layer({ url: Redacted.make(url), schema: pgSchemaFor(filename), clock: "database" })),
        Effect.withClock(shifted(30_000))
      )
    })
  })

  it.scoped("the offset is re-measured every clockResync: a database clock that moves is followed, never backwards", () =>
    Effect.gen(function*() {
      // a database clock of the test's own: `measure` answers what its offset is now (or fails)
      let databaseAhead = 0
      let unreachable = false
      let measured = 0
      const measure = Effect.suspend(() => {
        measured++
        return unreachable
          ? Effect.fail(new SqlError({ cause: new Error("down"), message: "the database is down" }))
          : Effect.succeed<Offset>({ offsetMillis: databaseAhead, roundTripMillis: 1 })
      })
      const host = yield* Clock.clockWith(Effect.succeed) // the TestClock
      const aligned = yield* makeDatabaseClock(measure, host, 60_000)
      const read = () => aligned.clock.unsafeCurrentTimeMillis()
      expect(read()).toBe(0)

      // the database's clock jumps 5 s ahead of the host's: picked up at the next re-measure, not before
      databaseAhead = 5_000
      yield* TestClock.adjust("59 seconds")
      expect(read()).toBe(59_000)
      yield* TestClock.adjust("1 second")
      expect(measured).toBe(2)
      expect(read()).toBe(65_000)
      expect(aligned.offset().offsetMillis).toBe(5_000)

      // it falls 3 s behind: the aligned clock holds still until host + offset catches up (never backwards)
      databaseAhead = -3_000
      yield* TestClock.adjust("59 seconds") // host 119 s, still 5 s ahead
      expect(read()).toBe(124_000)
      yield* TestClock.adjust("1 second") // host 120 s: 117 s by the new offset, but 124 s was read before
      expect(measured).toBe(3)
      expect(read()).toBe(124_000)
      yield* TestClock.adjust("10 seconds") // host 130 s
      expect(read()).toBe(127_000)

      // a re-measure that fails keeps the last offset, and the next one succeeds again
      unreachable = true
      databaseAhead = 1_000
      yield* TestClock.adjust("50 seconds") // host 180 s: a failed re-measure
      expect(measured).toBe(4)
      expect(read()).toBe(177_000)
      unreachable = false
      yield* TestClock.adjust("60 seconds") // host 240 s
      expect(measured).toBe(5)
      expect(read()).toBe(241_000)
    }))
})
