/**
 * Review: many fibers sharing one store in one process, and the application's own use of the same client
 * (transactions held open and rolled back, work forked inside them). Each test failed on the code before its fix.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Clock, Deferred, Effect, Exit, Fiber, Option } from "effect"
import { Queues } from "../src/index.js"
import { pgFromClient, pgOwned, sqliteOwned } from "./contract/harness.js"

const realClock = Clock.make()

/** `effect`, failing with "hung" after `ms` of real time. */
const guard = <A, E, R>(ms: number, effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.timeoutFail({ duration: ms, onTimeout: () => "hung" as const }),
    Effect.withClock(realClock)
  )

const realSleep = (ms: number) => Effect.sleep(ms).pipe(Effect.withClock(realClock))

for (const engine of [sqliteOwned, pgOwned, pgFromClient]) {
  describe(`a clearLimits rolled back with the application's transaction — ${engine.name}`, () => {
    // CONTRACT §9: "a waiter blocked only by a limit wakes when a slot frees or the rate window admits the next
    // claim (its deadline), never by busy polling"; docs/flow-control.md "Waiting": a held-back waiter sleeps
    // "until a commit that may free a slot: in this process at once". A clearLimits that rolled back changed
    // nothing in the database, yet afterwards the ack that frees the slot no longer wakes the waiter (it waits for
    // the fallback poll, an hour here): clearLimits forgets the queue in the process's flow memory before its
    // transaction committed (src/internal/limits.ts), and an ack wakes held-back waiters only for a queue that
    // memory knows limited (src/internal/queue.ts `ackFreed`, `ackOf`).
    it.live("an ack still wakes a take held back by the queue's concurrency limit", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queues = yield* Queues.Queues
        yield* queues.setLimits("held-back", { concurrency: 1 })
        const queue = yield* queues.queue("held-back")
        yield* queue.enqueueBatch(["a", "b"])
        const first = Option.getOrThrow(yield* queue.claim("A"))
        const taker = yield* Effect.fork(queue.take("T"))
        yield* realSleep(100)
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        const rolledBack = yield* Effect.exit(sql.withTransaction(
          Effect.zipRight(queues.clearLimits("held-back"), Effect.fail("changed my mind" as const))
        ))
        expect(Exit.isFailure(rolledBack)).toBe(true)
        expect(Option.isSome(yield* queues.limits("held-back"))).toBe(true) // the limits are still there
        expect(yield* first.ack).toBe(true) // the slot frees
        const got = yield* Effect.exit(guard(3000, Fiber.join(taker)))
        expect(Exit.map(got, (handle) => handle.job.payload)).toEqual(Exit.succeed("b"))
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
  })
}

for (const engine of [sqliteOwned, pgOwned]) {
  describe(`a worker forked inside the application's transaction — ${engine.name}`, () => {
    // docs/engines.md "Transactions": long-lived work is not part of the transaction it was started in. A `process`
    // worker forked inside `sql.withTransaction` inherited that transaction's connection: once the transaction
    // committed, the SQLite store refused every one of its statements ("SQLite rolled back this transaction…")
    // and the worker handled nothing, ever; on PostgreSQL its statements ran on the connection in whatever
    // transaction it was later in.
    it.live("handles the queue's jobs after that transaction committed", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* (yield* Queues.Queues).queue("forked-worker")
        const handled = yield* Deferred.make<unknown>()
        const worker = yield* sql.withTransaction(
          Effect.forkDaemon(queue.process("w", (job) => Deferred.succeed(handled, job.payload)))
        )
        yield* queue.enqueue("after")
        const got = yield* Effect.exit(guard(3000, Deferred.await(handled)))
        yield* Fiber.interrupt(worker)
        expect(got).toEqual(Exit.succeed("after"))
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
  })
}
