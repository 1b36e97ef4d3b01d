/**
 * Another connection holding the write lock: the store waits it out on its
 * busy schedule, and past its patience reports a typed `SqlError` (never a
 * defect), having written nothing.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import Sqlite from "better-sqlite3"
import { Cause, Clock, Effect, Exit, Option } from "effect"
import { Queues } from "../../src/index.js"
import { type EngineUnderTest, freshFile } from "./harness.js"

/** Holds `BEGIN IMMEDIATE` on `filename` from a second connection while `effect` runs. */
const whileLocked = <A, E, R>(filename: string, effect: Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const db = new Sqlite(filename)
      db.prepare("BEGIN IMMEDIATE").run()
      return db
    }),
    () => effect,
    (db) => Effect.sync(() => {
      db.prepare("ROLLBACK").run()
      db.close()
    })
  )

/** Holds `BEGIN IMMEDIATE` on `filename` from a second connection for `millis` of real time, from now. */
const holdFor = (filename: string, millis: number) => {
  const other = new Sqlite(filename)
  other.prepare("BEGIN IMMEDIATE").run()
  setTimeout(() => {
    other.prepare("COMMIT").run()
    other.close()
  }, millis)
}

/**
 * A foreign client keeps its own busy_timeout (better-sqlite3's default blocks
 * the event loop up to 5 s per attempt); the store's own connection uses 5 ms.
 */
const shortBusyTimeout = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`PRAGMA busy_timeout = 5`)

export const busyContract = (engine: EngineUnderTest) =>
  describe(`a busy file — ${engine.name}`, () => {
    it.live("past its patience a write fails with a typed SqlError and writes nothing; then it works again", () => {
      const filename = freshFile("busy")
      return Effect.gen(function*() {
        yield* shortBusyTimeout
        const queue = yield* (yield* Queues.Queues).queue("busy")
        const batch = yield* whileLocked(filename, Effect.exit(queue.enqueueBatch([{ n: 1 }, { n: 2 }])))
        const single = yield* whileLocked(filename, Effect.exit(queue.enqueue({ n: 3 })))
        for (const exit of [batch, single] as ReadonlyArray<Exit.Exit<unknown, { readonly _tag: string }>>) {
          expect(Exit.isFailure(exit)).toBe(true)
          if (Exit.isFailure(exit)) {
            expect(Cause.isDie(exit.cause)).toBe(false)
            const failure = Cause.failureOption(exit.cause)
            expect(failure._tag === "Some" && failure.value._tag).toBe("SqlError")
          }
        }
        expect((yield* queue.stats).pending).toBe(0)
        expect((yield* queue.enqueueBatch([{ n: 4 }])).length).toBe(1)
      }).pipe(Effect.provide(engine.store({ filename, busyPatience: "100 millis" })))
    })

    it.live("a writer waits out a short lock instead of failing, on every hot path", () => {
      const filename = freshFile("busy-short")
      return Effect.gen(function*() {
        yield* shortBusyTimeout
        const queue = yield* (yield* Queues.Queues).queue("busy")
        const db = new Sqlite(filename)
        db.prepare("BEGIN IMMEDIATE").run()
        setTimeout(() => {
          db.prepare("COMMIT").run()
          db.close()
        }, 150)
        const ids = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }])
        expect(ids.length).toBe(2)
        expect((yield* queue.stats).pending).toBe(2)
        // every hot path: a single enqueue, a claim, a batch ack, each meeting another connection's lock
        holdFor(filename, 100)
        yield* queue.enqueue({ n: 3 })
        holdFor(filename, 100)
        const handles = yield* queue.claimBatch("w", 3)
        expect(handles.length).toBe(3)
        holdFor(filename, 100)
        expect(yield* queue.ackAll(handles)).toEqual([true, true, true])
        expect((yield* queue.stats).pending + (yield* queue.stats).claimed).toBe(0)
      }).pipe(Effect.provide(engine.store({ filename, busyPatience: "5 seconds" })))
    })

    it.live("a claim that waited out a lock longer than its lease hands out a renewed lease, which no other worker can take", () => {
      const filename = freshFile("busy-claim")
      return Effect.gen(function*() {
        yield* shortBusyTimeout
        const queue = yield* (yield* Queues.Queues).queue("busy-claim", { visibilityTimeout: "1 second" })
        yield* queue.enqueue({ n: 1 })
        // The claim reads the clock, then waits 1.5 s for the write lock: its lease, stamped from before the wait, has lapsed.
        holdFor(filename, 1500)
        const first = yield* queue.claim("w1")
        expect(Option.isSome(first)).toBe(true)
        const handle = Option.getOrThrow(first)
        const now = yield* Clock.currentTimeMillis
        const until = Option.getOrThrow(handle.job.claimedUntil).epochMillis
        // Renewed before it was handed out: a whole visibility timeout from (about) now.
        expect(until - now).toBeGreaterThan(900)
        // Before: another worker took the job at once, while the first held its fresh handle.
        expect(Option.isNone(yield* queue.claim("w2"))).toBe(true)
        expect(yield* handle.ack).toBe(true)
      }).pipe(Effect.provide(engine.store({ filename, busyPatience: "5 seconds" })))
    })
  })
