/**
 * A review of waking (CONTRACT §7, §9's held-back waiters; docs/waking.md, docs/engines.md "Waking: NOTIFY versus
 * data_version", docs/flow-control.md "Waiting"): commits that make work claimable must wake the waiters they
 * concern, in this process and in others, on both engines and over an application's own client. Every test here
 * failed on the code before its fix.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { SqlClient } from "@effect/sql"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option, Schema } from "effect"
import { EffectStores, Queues, SqliteStore } from "../src/index.js"
import { freshFile, pgFromClient, pgOwned } from "./contract/harness.js"

for (const engine of [pgOwned, pgFromClient]) {
  describe(`waking review — ${engine.name}`, () => {
    // CONTRACT §7: every waiter wakes on "its next deadline (a future runAt, a lease end, ...)"; §3: heartbeat(extend)
    // sets the lease to now + extend. On SQLite another store's shortened lease wakes the waiter at its new end.
    it.live("a lease another store shortens with heartbeat(extend) wakes a waiting take at its new end", () => {
      const filename = freshFile("short-lease")
      return Effect.gen(function*() {
        const holder = yield* Layer.build(engine.store({ filename, fallbackPoll: "1 hour" }))
        const q = yield* (yield* Queues.Queues).queue("lease", { visibilityTimeout: "1 hour" })
        yield* q.enqueue("a")
        const a = yield* Effect.provide(
          Effect.flatMap(Queues.Queues, (qs) =>
            Effect.flatMap(
              qs.queue("lease", { visibilityTimeout: "1 hour" }),
              (hq) => Effect.map(hq.claim("crashing"), Option.getOrThrow)
            )),
          holder
        )
        const waiter = yield* Effect.fork(q.take("rescuer"))
        yield* Effect.sleep("200 millis")
        expect(Option.isNone(yield* Fiber.poll(waiter))).toBe(true)
        expect(yield* a.heartbeat("300 millis")).toBe(true) // the lease now ends in 300 ms
        const again = yield* Fiber.join(waiter).pipe(Effect.timeout("1500 millis"))
        expect(again.job.payload).toBe("a")
      }).pipe(Effect.scoped, Effect.provide(engine.store({ filename, fallbackPoll: "1 hour" })))
    })
  })
}

describe("waking review — SQLite over an application's client", () => {
  // docs/waking.md: "A memory database has no watcher: there, the end of such a transaction that wrote work (the
  // client's connection free again) wakes every queue's waiters to re-read".
  it.live("in a memory database, a custom-id PersistedQueue offer committed in the application's transaction wakes a waiting take", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const queue = yield* PersistedQueue.make({ name: "pq", schema: Schema.Struct({ n: Schema.Number }) })
      const taker = yield* Effect.fork(queue.take(() => Effect.void))
      yield* Effect.sleep("200 millis")
      yield* sql.withTransaction(queue.offer({ n: 1 }, { id: "once" }))
      yield* Fiber.join(taker).pipe(Effect.timeout("1500 millis"))
    }).pipe(
      Effect.scoped,
      Effect.provide(PersistedQueue.layer.pipe(
        Layer.provideMerge(EffectStores.layerPersistedQueueStore()),
        Layer.provideMerge(SqliteStore.layerFromClient({ fallbackPoll: "1 hour" })),
        Layer.provideMerge(SqliteClient.layer({ filename: ":memory:" }))
      ))
    ))

  // docs/waking.md: "Commits made inside a foreign client's transaction (layerFromClient) cannot be hooked, so they
  // wake through the watcher (about a millisecond later) rather than at once." — whatever journal mode the
  // application's connection uses (layerFromClient leaves its settings as the application set them).
  it.live("an enqueue committed in the application's transaction wakes a waiting take within milliseconds on a rollback-journal file", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      expect(yield* sql`PRAGMA journal_mode`).toEqual([{ journal_mode: "delete" }])
      const q = yield* (yield* Queues.Queues).queue("app")
      // Five wakes, timed together: the 500 ms safety-net poll would wake each after ~250 ms on average (five of
      // them in under 500 ms is a chance of 1 in 120), where the file-system event wakes each in milliseconds — and
      // a single pause of a loaded machine does not fail the test.
      let total = 0
      for (let i = 0; i < 5; i++) {
        const taker = yield* Effect.fork(q.take("w"))
        yield* Effect.sleep("50 millis")
        const started = performance.now()
        yield* sql.withTransaction(q.enqueue(i))
        const claimed = yield* Fiber.join(taker).pipe(Effect.timeout("1500 millis"))
        total += performance.now() - started
        yield* claimed.ack
      }
      expect(total).toBeLessThan(500)
    }).pipe(
      Effect.scoped,
      Effect.provide(SqliteStore.layerFromClient({ fallbackPoll: "1 hour" }).pipe(
        Layer.provideMerge(SqliteClient.layer({ filename: freshFile("journal"), disableWAL: true }))
      ))
    ))
})
