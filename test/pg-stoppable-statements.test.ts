/**
 * A take's claim on PostgreSQL stops at its statements (src/internal/stoppableClaim.ts, `statementStop`): on the
 * store's kept connection the wait for the answer is interruptible, not a fiber per claim. These cover the two
 * paths that still run a statement apart: a claim through the pool while the kept connection is busy, and a
 * claim that learns the queue is limited (another store set the limits) and walks it while an application's
 * transaction holds the limits row. A worker's fused ack + claim after a job stops the same way, on the kept
 * connection, through the pool, and in the flow walk of a limited queue it answers. Each stops at once, and gives
 * back what its statement claims afterwards.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Fiber, Layer } from "effect"
import { Queues } from "../src/index.js"
import { expectTakeEndsWhileLimitsRowHeld, otherSession, pgStoreLayer, settledStats } from "./support/pgSessions.js"

let schemaCounter = 0
const freshSchema = () => `stopstmt${process.pid}_${++schemaCounter}`

/**
 * Stops `worker`, which must end within 1 s although what holds the lock (`holder`) ends later; once it has, the
 * statements left to finish must have given back what they claimed: `pending` jobs, none claimed, each taken
 * next on its first attempt. Returns those jobs' payloads' `n`, sorted.
 */
const expectStopsAtOnceAndGivesBack = (
  worker: Fiber.RuntimeFiber<unknown, unknown>,
  holder: Fiber.Fiber<unknown, unknown>,
  queue: Queues.Queue<unknown>,
  pending: number
) =>
  Effect.gen(function*() {
    const started = Date.now()
    yield* Fiber.interrupt(worker)
    const elapsed = Date.now() - started
    yield* Fiber.join(holder)
    expect(elapsed).toBeLessThan(1_000)
    expect(yield* settledStats(queue)).toMatchObject({ claimed: 0, pending })
    const jobs = yield* Effect.forEach(Array.from({ length: pending }), () =>
      Effect.flatMap(queue.take("w2"), (handle) => Effect.as(handle.ack, handle.job)))
    expect(jobs.map((job) => job.attempts)).toEqual(jobs.map(() => 1))
    return jobs.map((job) => (job.payload as { n: number }).n).sort()
  })

describe("PostgreSQL: a take's claim stops at its statements", () => {
  // Two workers of one process both wait on another session's index build: one claim holds the store's kept
  // connection (an interruptible wait), the other goes through the pool (a statement apart). Both stop at once.
  it.live("two workers whose claims wait on an index build, one through the pool, stop at once and keep no claim", () => {
    const schema = freshSchema()
    return Effect.gen(function*() {
      const queue = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("q"))
      yield* queue.enqueue({ n: 1 })
      yield* queue.enqueue({ n: 2 })
      const other = yield* otherSession
      yield* Effect.promise(() => other.query(`BEGIN; CREATE INDEX test_build ON ${schema}.__alkstore_jobs (created_at)`))
      const ends = yield* Effect.fork(Effect.delay(Effect.promise(() => other.query("ROLLBACK")), "3 seconds"))
      const ran: Array<number> = []
      const worker = yield* Effect.fork(
        queue.process("w", (job) => Effect.sync(() => ran.push((job.payload as { n: number }).n)), { concurrency: 2 })
      )
      yield* Effect.sleep("500 millis") // both claims wait on the build's lock
      // The claims left to finish once the build ended gave back what they took, no attempt spent.
      expect(yield* expectStopsAtOnceAndGivesBack(worker, ends, queue, 2)).toEqual([1, 2])
      expect(ran).toEqual([])
    }).pipe(Effect.scoped, Effect.provide(pgStoreLayer({ schema })))
  }, 15_000)

  // A worker's step after a job is one statement, the job's ack fused with the next claim. Here two workers' steps
  // wait on an index build another session started while their handlers ran, one on the store's kept connection,
  // the other through the pool: the stop ends at once, and the statements, left to finish once the build ended,
  // ack their jobs and give back the claims they took (no attempt spent).
  it.live("workers whose fused ack + claim waits on an index build stop at once; the acks land and the claims are given back", () => {
    const schema = freshSchema()
    return Effect.gen(function*() {
      const queue = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("q"))
      for (const n of [1, 2, 3, 4]) yield* queue.enqueue({ n })
      const other = yield* otherSession
      const ran: Array<number> = []
      let building = false
      const build = Effect.promise(() => other.query(`BEGIN; CREATE INDEX test_build ON ${schema}.__alkstore_jobs (created_at)`))
      // The second handler to start starts the build; both return once it holds its lock, so both steps wait on it.
      const untilBuilding = Effect.repeat(Effect.sleep("10 millis"), { until: () => building })
      const worker = yield* Effect.fork(
        queue.process("w", (job) =>
          Effect.suspend(() => {
            ran.push((job.payload as { n: number }).n)
            return ran.length === 2 ? Effect.tap(build, () => Effect.sync(() => (building = true))) : untilBuilding
          }), { concurrency: 2 })
      )
      yield* Effect.sleep("500 millis")
      expect(building).toBe(true)
      expect(ran.sort()).toEqual([1, 2])
      const ends = yield* Effect.fork(Effect.delay(Effect.promise(() => other.query("ROLLBACK")), "2500 millis"))
      // The first two jobs were acked; the other two, claimed by the same statements, were given back.
      expect(yield* expectStopsAtOnceAndGivesBack(worker, ends, queue, 2)).toEqual([3, 4])
      expect(ran).toHaveLength(2)
    }).pipe(Effect.scoped, Effect.provide(pgStoreLayer({ schema })))
  }, 15_000)

  // The fused step of a worker on a limited queue answers "limited" and walks the queue (flow control) in a
  // transaction of its own, which waits on the limits row an application's transaction holds: the stop ends at
  // once there too, and the walk, left to finish, gives back what it claimed; the first job's ack has landed.
  it.live("a worker whose step walks a limited queue while the limits row is held stops at once", () => {
    const schema = freshSchema()
    return Effect.gen(function*() {
      const other = yield* Layer.build(pgStoreLayer({ schema }))
      const otherQueues = Context.get(other, Queues.Queues)
      yield* otherQueues.setLimits("limitedStep", { concurrency: 2 })
      const queue = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("limitedStep"))
      yield* queue.enqueue({ n: 1 })
      yield* queue.enqueue({ n: 2 })
      const handling = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const ran: Array<number> = []
      const worker = yield* Effect.fork(queue.process("w", (job) =>
        Effect.suspend(() => {
          ran.push((job.payload as { n: number }).n)
          return Effect.zipRight(Deferred.succeed(handling, undefined), Deferred.await(release))
        })))
      yield* Deferred.await(handling)
      // The application's transaction on the other store's client changes the limits and holds the row 2.5 s.
      const open = yield* Deferred.make<void>()
      const application = yield* Effect.fork(Context.get(other, SqlClient.SqlClient).withTransaction(Effect.gen(function*() {
        yield* otherQueues.setLimits("limitedStep", { concurrency: 1 })
        yield* Deferred.succeed(open, undefined)
        yield* Effect.sleep("2500 millis")
      })))
      yield* Deferred.await(open)
      yield* Deferred.succeed(release, undefined)
      yield* Effect.sleep("300 millis") // the step's walk waits on the limits row
      // The first job was acked; the second, claimed by the walk, was given back.
      expect(yield* expectStopsAtOnceAndGivesBack(worker, application, queue, 1)).toEqual([2])
      expect(ran).toEqual([1])
    }).pipe(Effect.scoped, Effect.provide(pgStoreLayer({ schema })))
  }, 15_000)

  // This store has not seen the queue limited (another store set the limits), so its take's claim runs in the
  // take's fiber; its statement answers "limited" and the flow walk that follows waits on the limits row an
  // application's transaction holds. The take's timeout ends it there.
  it.live("a take that learns the queue is limited ends at its timeout while the walk waits on the limits row", () => {
    const schema = freshSchema()
    return Effect.gen(function*() {
      // The other store sets the limits and enqueues: this one has seen nothing of the queue.
      const other = yield* Layer.build(pgStoreLayer({ schema }))
      const otherQueues = Context.get(other, Queues.Queues)
      yield* otherQueues.setLimits("limited", { concurrency: 2 })
      yield* Effect.flatMap(otherQueues.queue("limited"), (q) => q.enqueue({ n: 1 }))
      const queue = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("limited"))
      // The application's transaction on the other store's client changes the limits, then does 3 s of other work.
      yield* expectTakeEndsWhileLimitsRowHeld(Context.get(other, SqlClient.SqlClient), otherQueues, queue)
    }).pipe(Effect.scoped, Effect.provide(pgStoreLayer({ schema })))
  }, 15_000)
})
