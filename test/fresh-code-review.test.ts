/**
 * Review of the code changed in 175160c (stoppable claims on PostgreSQL, the store's close giving back a stream's
 * claims, the scheduler's fenced tick, migration post-checks). Each test failed on the code before its fix,
 * because of a defect.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Option, Ref, Scope, Stream } from "effect"
import { Queues } from "../src/index.js"
import { otherSession, pgStoreLayer, settledStats } from "./support/pgSessions.js"

let schemaCounter = 0
const freshSchema = () => `fresh${process.pid}_${++schemaCounter}`

describe("fresh code review — PostgreSQL stoppable claims", () => {
  // docs/queues-and-locks.md (Release): "`take`, `claim` and `claimBatch` interrupted (a timeout, a race) keep no
  // claim: one that went through is given back at once, attempt returned ... an interruption ... ends that wait at
  // once: the statement is left to finish, and whatever it then claims is given back, attempt returned".
  // A take inside the application's transaction (`sql.withTransaction`, docs/concepts.md) whose claim waits on a
  // lock: the claim's daemon fiber inherits the application's transaction connection, so the claim statement runs
  // in the application's transaction and commits with it; the give-back runs later, from another daemon fiber,
  // on that same connection — by then back in the pool, outside any transaction (SAVEPOINT fails: a warning is
  // logged). The job stays claimed, an attempt spent, with nobody holding it, until its lease lapses (300 s).
  // Before the change the take waited for the claim and gave it back inside the transaction.
  it.live("a take timed out inside the application's transaction leaves no claim once that transaction commits", () => {
    const schema = freshSchema()
    return Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const queue = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("q"))
      yield* queue.enqueue({ n: 1 })
      const other = yield* otherSession
      // Another session blocks writes to the jobs table for 1 s (as an index build does); reads go through.
      yield* Effect.promise(() => other.query(`BEGIN; LOCK TABLE ${schema}.__alkstore_jobs IN SHARE MODE`))
      const ends = yield* Effect.fork(Effect.delay(Effect.promise(() => other.query("ROLLBACK")), "1 second"))
      const got = yield* sql.withTransaction(Effect.option(Effect.timeout(queue.take("w"), "300 millis")))
      yield* Fiber.join(ends)
      expect(Option.isNone(got)).toBe(true)
      // observed: { claimed: 1, pending: 0 } — claimed by nobody, attempt spent, until the lease lapses
      expect(yield* settledStats(queue)).toMatchObject({ claimed: 0, pending: 1 })
    }).pipe(Effect.scoped, Effect.provide(pgStoreLayer({ schema })))
  }, 15_000)

  // src/internal/stream.ts (makeStream TSDoc): "the claims it never handed on are released. So does the store's
  // close ... once a claim in flight is answered; the stream's next pull then fails with the closed store's error."
  // A claim the store's close gave back must not reach the consumer afterwards: its job is pending, another worker
  // may run it at the same time. A held claim near its lease end is renewed before it is handed on; the close's
  // cleanup (releaseRest) gives back that very claim while the renewal is in flight (it waits only for a claim
  // round), and sets `handed = held.length`; the renewal then answers `true` and the stream hands the released
  // handle on anyway (`handed++`, handOn).
  it.live("a stream never hands on a claim the store's close gave back (renewal in flight at the close)", () => {
    const schema = freshSchema()
    return Effect.gen(function*() {
      const scope = yield* Scope.make()
      const ctx = yield* Layer.buildWithScope(pgStoreLayer({ schema }), scope)
      const queue = yield* Effect.provide(Effect.flatMap(Queues.Queues, (queues) => queues.queue("q", { visibilityTimeout: "2 seconds" })), ctx)
      const second = (yield* Effect.provide(queue.enqueueBatch([{ n: 1 }, { n: 2 }]), ctx))[1]!
      const gate = yield* Deferred.make<void>()
      const first = yield* Deferred.make<void>()
      const received = yield* Ref.make<ReadonlyArray<number>>([])
      const consumer = yield* Effect.fork(Effect.provide(
        Stream.runForEach(queue.stream("w", { batch: 2 }), (handle) =>
          Effect.zipRight(
            Ref.update(received, (ids) => [...ids, handle.job.id]),
            handle.job.id === second ? Effect.void : Effect.zipRight(Deferred.succeed(first, undefined), Deferred.await(gate))
          )),
        ctx
      ))
      yield* Deferred.await(first)
      // Past half the second claim's lease: the stream renews it before handing it on. Another session holds its
      // row for a moment, so the renewal is in flight when the store closes.
      yield* Effect.sleep("1100 millis")
      const other = yield* otherSession
      yield* Effect.promise(async () => {
        await other.query("BEGIN")
        await other.query(`SELECT 1 FROM ${schema}.__alkstore_jobs WHERE id = $1 FOR UPDATE`, [second])
      })
      yield* Deferred.succeed(gate, undefined)
      yield* Effect.sleep("200 millis") // the renewal waits on the row
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* Effect.sleep("200 millis") // the close's give-back waits on the row too
      yield* Effect.promise(() => other.query("ROLLBACK"))
      yield* Fiber.await(closing)
      yield* Fiber.await(consumer)
      const row = yield* Effect.flatMap(Queues.Queues, (queues) => Effect.flatMap(queues.queue("q"), (q) => q.getJob(second))).pipe(
        Effect.provide(pgStoreLayer({ schema }))
      )
      // A claim handed on must still be the consumer's (observed: handed on, and pending — given back by the close).
      if ((yield* Ref.get(received)).includes(second)) {
        expect(Option.getOrNull(Option.map(row, (job) => job.state))).toBe("claimed")
      }
    }).pipe(Effect.scoped)
  }, 15_000)
})
