/**
 * Small helpers shared by the queue and lock contract files.
 */
import { SqlClient } from "@effect/sql"
import { Chunk, Clock, DateTime, Duration, Effect, Option, TestClock } from "effect"
import { StoreActivity } from "../../src/internal/activity.js"
import { expect } from "@effect/vitest"
import { Queues, type SqliteStore } from "../../src/index.js"
import { maintenanceRows as pgMaintenanceRows } from "../../src/internal/pg/queueStorage.js"
import { maintenanceRows as sqliteMaintenanceRows } from "../../src/internal/sqlite/queueStorage.js"
import type { EngineUnderTest } from "./harness.js"

/** What a store layer provides to a contract test. */
export type StoreServices = SqliteStore.Mechanisms | SqlClient.SqlClient

/** The rows of each kind one round of the engine's maintenance takes (src/internal/rounds.ts). */
export const maintenanceRowsOf = (engine: EngineUnderTest) =>
  engine.capabilities.postgres ? pgMaintenanceRows : sqliteMaintenanceRows

/**
 * Writes `count` jobs of `queue` that died on day 0, as an outage leaves them
 * (one statement: a backlog of a few hundred thousand rows in about a second).
 */
export const deadBacklog = (engine: EngineUnderTest, queue: string, count: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.unsafe(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${count})
      INSERT INTO __alkstore_jobs (queue, payload, state, priority, run_at, attempts, max_attempts,
        visibility_timeout, backoff_base, created_at, last_error, died_at)
      SELECT '${queue}', ${engine.capabilities.postgres ? `'{}'::json` : `'{}'`}, 'dead', 0, 0, 3, 3, 300000, 5000, 0, 'boom', 0 FROM n`))

/** Dead jobs in `__alkstore_jobs` (every queue). */
export const deadCount = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_jobs WHERE state = 'dead'`, (rows) => Number(rows[0]!.n)))

/** Rows in `__alkstore_jobs` (every queue). */
export const jobCount = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_jobs`
  return rows[0]!.n
})

/** Rows in `__alkstore_locks`. */
export const lockCount = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_locks`
  return rows[0]!.n
})

export const ms = (instant: DateTime.DateTime) => DateTime.toEpochMillis(instant)

export const optionalMs = (instant: Option.Option<DateTime.DateTime>) =>
  Option.getOrUndefined(Option.map(instant, ms))

export const durationMs = (duration: Duration.Duration) => Duration.toMillis(duration)

/** Sets a queue's flow-control limits (CONTRACT §9). */
export const setLimits = (name: string, limits: Queues.Limits) => Effect.flatMap(Queues.Queues, (q) => q.setLimits(name, limits))

/** Claims until nothing is claimable (at most `max`), acking each; the payloads in claim order. */
export const drainPayloads = <A>(queue: Queues.Queue<A>, max: number) =>
  Effect.gen(function*() {
    const got: Array<A> = []
    for (let i = 0; i < max; i++) {
      const handle = yield* queue.claim("drain")
      if (Option.isNone(handle)) break
      got.push(handle.value.job.payload)
      yield* handle.value.ack
    }
    return got
  })

/** A queue handle of the service. */
export const queueOf = (name: string, opts?: Queues.QueueOpts) =>
  Effect.flatMap(Queues.Queues, (queues) => queues.queue(name, opts))

/** The job, which must exist. */
export const mustGet = (queue: Queues.Queue<any>, id: number) =>
  Effect.map(queue.getJob(id), (job) => {
    expect(Option.isSome(job)).toBe(true)
    return Option.getOrThrow(job)
  })

/** A claim that must find a job. */
export const mustClaim = <A>(queue: Queues.Queue<A>, workerId: string) =>
  Effect.map(queue.claim(workerId), (handle) => {
    expect(Option.isSome(handle)).toBe(true)
    return Option.getOrThrow(handle)
  })

/** A claim that must find nothing. */
export const claimsNothing = <A>(queue: Queues.Queue<A>, workerId = "nobody") =>
  Effect.map(queue.claim(workerId), (handle) => {
    expect(Option.isNone(handle)).toBe(true)
  })

const realClock = Clock.make()

/** The real clock moved on by `millis` (its sleeps are real): a lease taken before has lapsed under it. */
export const shiftedClock = (millis: number): Clock.Clock => ({
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => realClock.unsafeCurrentTimeMillis() + millis,
  currentTimeMillis: Effect.sync(() => realClock.unsafeCurrentTimeMillis() + millis),
  unsafeCurrentTimeNanos: () => realClock.unsafeCurrentTimeNanos() + BigInt(millis) * 1_000_000n,
  currentTimeNanos: Effect.sync(() => realClock.unsafeCurrentTimeNanos() + BigInt(millis) * 1_000_000n),
  sleep: (duration) => realClock.sleep(duration)
})

/**
 * Re-runs `check` (which asserts) until it passes, for up to `seconds` of
 * real time: what a forked worker does after its handler returns (its ack,
 * its retry) is a round trip to the server on an asynchronous engine, so
 * "right after" means "as soon as that lands", not "in this tick".
 */
export const eventually = <A, E, R>(check: Effect.Effect<A, E, R>, seconds = 5): Effect.Effect<A, E, R> =>
  Effect.gen(function*() {
    const deadline = realClock.unsafeCurrentTimeMillis() + seconds * 1000
    while (true) {
      const exit = yield* Effect.exit(check)
      if (exit._tag === "Success" || realClock.unsafeCurrentTimeMillis() > deadline) return yield* exit
      yield* Effect.yieldNow()
      yield* Effect.sleep("5 millis").pipe(Effect.withClock(realClock))
    }
  })

/**
 * Lets forked fibers run until every one of them waits again (on the
 * TestClock or a wake-up). On an engine with an asynchronous driver that
 * includes waiting, in real time, until no statement is in flight: a fiber
 * awaiting the server has not registered its next sleep yet.
 */
export const settle = Effect.gen(function*() {
  const activity = yield* Effect.serviceOption(StoreActivity)
  if (activity._tag === "None") {
    for (let i = 0; i < 3; i++) yield* TestClock.adjust("0 millis")
    return
  }
  // Each `TestClock.adjust` waits, with timers, for every forked fiber to suspend (~5 ms): once here, and again
  // only when a fiber an answer woke has a sleep due now. The real millisecond between looks lets every fiber
  // an answer woke run on to its next wait (Effect's scheduler defers to a timer now and then).
  yield* TestClock.adjust("0 millis")
  yield* untilNoStatementInFlight(activity.value)
})

/** Real milliseconds until three looks in a row find no statement in flight, running what falls due meanwhile. */
const untilNoStatementInFlight = (activity: StoreActivity["Type"]) =>
  Effect.gen(function*() {
    const deadline = realClock.unsafeCurrentTimeMillis() + 10_000
    let quiet = 0
    while (quiet < 3 && realClock.unsafeCurrentTimeMillis() < deadline) {
      yield* Effect.sleep("1 millis").pipe(Effect.withClock(realClock))
      if (yield* sleepDueNow) yield* TestClock.adjust("0 millis")
      quiet = activity.inFlight() === 0 ? quiet + 1 : 0
    }
  })

/** Whether a fiber sleeps on the TestClock until an instant already reached. */
const sleepDueNow = Effect.gen(function*() {
  const now = yield* Clock.currentTimeMillis
  return Chunk.some(yield* TestClock.sleeps(), (at) => at <= now)
})

/**
 * `TestClock.adjust`, faithful on an engine with an asynchronous driver:
 * time moves to each pending sleep's deadline in turn, settling in between,
 * so a fiber woken at one deadline has done its I/O and registered its next
 * sleep before time passes that one too (as a synchronous engine does
 * inside `adjust` itself). On a synchronous engine it is `adjust`.
 */
export const advance = (duration: Duration.DurationInput) =>
  Effect.gen(function*() {
    const activity = yield* Effect.serviceOption(StoreActivity)
    if (activity._tag === "None") return yield* TestClock.adjust(duration)
    const target = (yield* Clock.currentTimeMillis) + Duration.toMillis(Duration.decode(duration))
    yield* settle
    for (let step = 0; step < 100_000; step++) {
      const now = yield* Clock.currentTimeMillis
      const due = Chunk.toReadonlyArray(yield* TestClock.sleeps()).filter((at) => at <= target)
      if (due.length === 0) break
      // setTime has waited for the fibers to suspend and woken the sleepers due
      yield* TestClock.setTime(Math.max(now, Math.min(...due)))
      yield* untilNoStatementInFlight(activity.value)
    }
    yield* TestClock.setTime(target)
    yield* settle
  })
