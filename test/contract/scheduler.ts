/**
 * The scheduler contract (CONTRACT §5), written once and applied to every
 * engine. Time is the TestClock (epoch 0 at the start of each test); forked
 * runners advance with `TestClock.adjust`.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Duration, Effect, Exit, Fiber, Option, TestClock } from "effect"
import { Queues, Scheduler } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"
import { schedulesPerTick } from "../../src/internal/scheduler.js"
import { advance, deadBacklog, deadCount, eventually, maintenanceRowsOf, settle } from "./support.js"
import { collectingTracer } from "./telemetry.js"

const second = 1_000
const minute = 60 * second
const hour = 60 * minute

export { settle }

export const countRows = (table: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(sql.unsafe<{ n: number }>(`SELECT count(*) AS n FROM ${table}`), (rows) => Number(rows[0]!.n)))

/** The `runAt` of every job in `queue`, oldest first. */
export const firedAt = (queue: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ run_at: number }>`SELECT run_at FROM __alkstore_jobs WHERE queue = ${queue} ORDER BY run_at, id`,
      (rows) => rows.map((row) => Number(row.run_at))
    ))

export const nextFireAtOf = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ next_fire_at: number }>`SELECT next_fire_at FROM __alkstore_scheduler_tasks WHERE name = ${name}`,
      (rows) => Number(rows[0]!.next_fire_at)
    ))

interface LeaseRow {
  readonly owner: string
  readonly token: number
  readonly expires_at: number
}

export const leaderLease = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql.unsafe<LeaseRow>(`SELECT owner, token, expires_at FROM __alkstore_locks WHERE name = '__alkstore_scheduler'`),
    (rows) => Option.fromNullable(rows[0])
  ))

/** Whoever holds the lease at `now` (a released or lapsed lease holds nobody). */
const liveLeader = (now: number) =>
  Effect.map(leaderLease, (row) => Option.filter(row, (r) => Number(r.expires_at) > now))

const ms = (instant: DateTime.DateTime) => DateTime.toEpochMillis(instant)

/** Settings for tests that advance long stretches: fewer wake-ups, same semantics. */
const unhurried = {
  fallbackPoll: "1 hour",
  maintenanceEvery: "1 hour",
  leaderTtl: "3 hours",
  leaderRenewEvery: "1 hour"
} as const

export const schedulerContract = (engine: EngineUnderTest) =>
  describe(`scheduler — ${engine.name}`, () => {
    describe("registration", () => {
      it.effect("names, queue, spec, options and payload are validated before anything is written", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const reject = (
            name: string,
            spec: string,
            queue: string,
            payload: unknown,
            opts?: Scheduler.ScheduleOpts
          ) => Effect.flip(scheduler.schedule(name, spec, queue, payload, opts))

          expect(yield* reject("", "@every 5m", "q", {})).toMatchObject({ _tag: "InvalidName", name: "" })
          expect(yield* reject("__alkstore_x", "@every 5m", "q", {})).toMatchObject({
            _tag: "ReservedName",
            name: "__alkstore_x"
          })
          expect(yield* reject("s", "@every 5m", "", {})).toMatchObject({ _tag: "InvalidName", name: "" })
          expect(yield* reject("s", "@every 5m", "__alkstore_outbox:webhooks", {})).toMatchObject({
            _tag: "ReservedName",
            name: "__alkstore_outbox:webhooks"
          })
          // the name is checked before the spec, the queue before the spec too
          expect((yield* reject("", "nonsense", "q", {}))._tag).toBe("InvalidName")
          expect((yield* reject("s", "nonsense", "__alkstore", {}))._tag).toBe("ReservedName")

          const badSpecs = [
            "*/5 * * * *",
            "0 */5 * * * *",
            "@daily",
            "@hourly",
            "@every",
            "@every ",
            "@every 0s",
            "@every 05m",
            "@every 5M",
            "@every  5m",
            "@every 5m ",
            " @every 5m",
            "@every\t5m",
            "@every -5m",
            "@every +5m",
            "@every 5",
            "@every m",
            "@every 1.5m",
            "@every 5ms",
            "@every 5w",
            "@every 5 m",
            "@EVERY 5m",
            "every 5m",
            "@every 3651d",
            "@every 87601h",
            "@every 5256001m",
            "@every 315360001s",
            "@every 99999999999999999999d",
            ""
          ]
          for (const spec of badSpecs) {
            const error = yield* reject("s", spec, "q", {})
            expect(error, spec).toMatchObject({ _tag: "InvalidSpec", spec })
          }

          const badOpts: ReadonlyArray<readonly [Scheduler.ScheduleOpts, string]> = [
            [{ priority: 1.5 }, "priority"],
            [{ priority: Number.NaN }, "priority"],
            [{ priority: Number.MAX_SAFE_INTEGER + 1 }, "priority"],
            [{ maxAttempts: 0 }, "maxAttempts"],
            [{ maxAttempts: 2.5 }, "maxAttempts"],
            [{ maxAttempts: -1 }, "maxAttempts"],
            [{ expires: 0 }, "expires"],
            [{ expires: "0 seconds" }, "expires"],
            [{ expires: -5 }, "expires"],
            [{ expires: "-5 seconds" }, "expires"],
            [{ expires: Number.NaN }, "expires"],
            [{ expires: Number.POSITIVE_INFINITY }, "expires"]
          ]
          for (const [opts, field] of badOpts) {
            const error = yield* reject("s", "@every 5m", "q", {}, opts)
            expect(error, JSON.stringify(opts)).toMatchObject({ _tag: "InvalidOptions", field })
          }

          const cyclic: Record<string, unknown> = {}
          cyclic.self = cyclic
          const badPayloads: ReadonlyArray<unknown> = [
            undefined,
            { a: undefined },
            [1, undefined],
            { n: 10n },
            { f: () => 1 },
            { s: Symbol("x") },
            { n: Number.NaN },
            { n: Number.POSITIVE_INFINITY },
            new Date(0),
            { m: new Map() },
            cyclic
          ]
          for (const payload of badPayloads) {
            expect((yield* reject("s", "@every 5m", "q", payload))._tag).toBe("InvalidPayload")
          }

          expect(yield* countRows("__alkstore_scheduler_tasks")).toBe(0)
          expect(yield* countRows("__alkstore_jobs")).toBe(0)

          // the edge of the grammar is accepted
          for (const spec of ["@every 1s", "@every 3650d", "@every 87600h", "@every 5256000m", "@every 315360000s"]) {
            yield* scheduler.schedule(`edge ${spec}`, spec, "q", null)
          }
          expect(yield* countRows("__alkstore_scheduler_tasks")).toBe(5)
        }).pipe(Effect.provide(engine.store())))

      it.effect("schedule upserts by name and reads the stored row back", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* advance("1000 seconds")
          const first = yield* scheduler.schedule("sweep", "@every 5m", "maintenance", { kind: "sweep" }, {
            priority: 2,
            maxAttempts: 4,
            expires: "30 seconds"
          })
          expect(first.name).toBe("sweep")
          expect(first.spec).toBe("@every 5m")
          expect(Duration.toMillis(first.interval)).toBe(5 * minute)
          expect(first.queue).toBe("maintenance")
          expect(first.payload).toEqual({ kind: "sweep" })
          expect(first.opts.priority).toBe(2)
          expect(first.opts.maxAttempts).toBe(4)
          expect(Option.map(first.opts.expires, Duration.toMillis)).toEqual(Option.some(30 * second))
          expect(ms(first.nextFireAt)).toBe(1000 * second + 5 * minute)

          // defaults
          const plain = yield* scheduler.schedule("plain", "@every 2h", "other", [1, "two", null])
          expect(plain.opts).toEqual({ priority: 0, maxAttempts: 3, expires: Option.none(), group: Option.none() })
          expect(plain.payload).toEqual([1, "two", null])
          expect(ms(plain.nextFireAt)).toBe(1000 * second + 2 * hour)

          // re-registering replaces the row (one row per name) and keeps the phase
          yield* advance("100 seconds")
          const again = yield* scheduler.schedule("sweep", "@every 5m", "maintenance-2", { kind: "sweep", v: 2 })
          expect(again.queue).toBe("maintenance-2")
          expect(again.payload).toEqual({ kind: "sweep", v: 2 })
          expect(again.opts).toEqual({ priority: 0, maxAttempts: 3, expires: Option.none(), group: Option.none() })
          expect(ms(again.nextFireAt)).toBe(1000 * second + 5 * minute)
          expect(yield* countRows("__alkstore_scheduler_tasks")).toBe(2)
          expect(yield* nextFireAtOf("sweep")).toBe(1000 * second + 5 * minute)

          // a changed spec restarts the phase from now
          const changed = yield* scheduler.schedule("sweep", "@every 7m", "maintenance-2", { kind: "sweep", v: 2 })
          expect(changed.spec).toBe("@every 7m")
          expect(ms(changed.nextFireAt)).toBe(1100 * second + 7 * minute)
          expect(yield* countRows("__alkstore_scheduler_tasks")).toBe(2)
          expect(yield* countRows("__alkstore_jobs")).toBe(0)
        }).pipe(Effect.provide(engine.store())))

      it.effect("unschedule reports whether a registration was removed", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* scheduler.schedule("a", "@every 1m", "q", {})
          yield* scheduler.schedule("b", "@every 1m", "q", {})
          expect(yield* scheduler.unschedule("a")).toBe(true)
          expect(yield* scheduler.unschedule("a")).toBe(false)
          expect(yield* scheduler.unschedule("never")).toBe(false)
          expect(yield* countRows("__alkstore_scheduler_tasks")).toBe(1)
          expect((yield* Effect.flip(scheduler.unschedule("")))._tag).toBe("InvalidName")
          expect((yield* Effect.flip(scheduler.unschedule("__alkstore_scheduler")))._tag).toBe("ReservedName")
          expect(yield* countRows("__alkstore_scheduler_tasks")).toBe(1)
        }).pipe(Effect.provide(engine.store())))
    })

    describe("runSchedules", () => {
      it.effect("fires each boundary into the named queue as ordinary, claimable queue work", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const queues = yield* Queues.Queues
          yield* scheduler.schedule("report", "@every 1m", "reports", { kind: "report" })
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          expect(yield* firedAt("reports")).toEqual([])

          yield* advance("59 seconds")
          expect(yield* firedAt("reports")).toEqual([])
          yield* advance("1 second")
          expect(yield* firedAt("reports")).toEqual([minute])
          yield* advance("2 minutes")
          expect(yield* firedAt("reports")).toEqual([minute, 2 * minute, 3 * minute])

          // a handle with other options still claims them: the rows carry their own stamps
          const reports = yield* queues.queue("reports", { visibilityTimeout: "1 second", maxAttempts: 9 })
          const claimed = yield* reports.claimBatch("w1", 10)
          expect(claimed.map((h) => ms(h.job.runAt))).toEqual([minute, 2 * minute, 3 * minute])
          for (const handle of claimed) {
            expect(handle.job.payload).toEqual({ kind: "report" })
            expect(handle.job.queue).toBe("reports")
            expect(handle.job.maxAttempts).toBe(3)
            expect(Duration.toMillis(handle.job.visibilityTimeout)).toBe(300 * second)
            expect(yield* handle.ack).toBe(true)
          }
          expect(Option.isNone(yield* Fiber.poll(runner))).toBe(true)
          yield* Fiber.interrupt(runner)
        }).pipe(Effect.provide(engine.store())))

      it.effect("fired jobs are stamped with the contract defaults and ScheduleOpts over them", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const queues = yield* Queues.Queues
          yield* scheduler.schedule("defaults", "@every 1m", "stamped", { d: 1 })
          yield* scheduler.schedule("custom", "@every 1m", "stamped", { c: 1 }, {
            priority: 7,
            maxAttempts: 6,
            expires: "45 seconds"
          })
          yield* scheduler.schedule("expiring", "@every 1m", "stamped", { e: 1 }, { expires: "2 hours" })
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          yield* advance("1 minute")

          const stamped = yield* queues.queue("stamped")
          const ids = yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
            sql.unsafe<{ id: number; payload: string }>(
              `SELECT id, payload FROM __alkstore_jobs WHERE queue = 'stamped' ORDER BY id`
            ))
          expect(ids.length).toBe(3)
          const byPayload = new Map(ids.map((row) => [row.payload, Number(row.id)]))

          const plain = Option.getOrThrow(yield* stamped.getJob(byPayload.get(`{"d":1}`)!))
          expect(plain.state).toBe("pending")
          expect(ms(plain.runAt)).toBe(minute)
          expect(ms(plain.createdAt)).toBe(minute)
          expect(plain.priority).toBe(0)
          expect(plain.maxAttempts).toBe(3)
          expect(plain.attempts).toBe(0)
          expect(Duration.toMillis(plain.visibilityTimeout)).toBe(300 * second)
          expect(Duration.toMillis(plain.backoffBase)).toBe(5 * second)
          expect(Option.isNone(plain.expiresAt)).toBe(true)

          const custom = Option.getOrThrow(yield* stamped.getJob(byPayload.get(`{"c":1}`)!))
          expect(ms(custom.runAt)).toBe(minute)
          expect(custom.priority).toBe(7)
          expect(custom.maxAttempts).toBe(6)
          expect(Duration.toMillis(custom.visibilityTimeout)).toBe(300 * second)
          expect(Duration.toMillis(custom.backoffBase)).toBe(5 * second)
          expect(Option.map(custom.expiresAt, ms)).toEqual(Option.some(minute + 45 * second))

          const expiring = Option.getOrThrow(yield* stamped.getJob(byPayload.get(`{"e":1}`)!))
          expect(Option.map(expiring.expiresAt, ms)).toEqual(Option.some(minute + 2 * hour))
          expect(expiring.maxAttempts).toBe(3)

          // a fired job with the highest priority is claimed first
          const first = Option.getOrThrow(yield* stamped.claim("w"))
          expect(first.job.payload).toEqual({ c: 1 })
          yield* Fiber.interrupt(runner)
        }).pipe(Effect.provide(engine.store())))

      it.effect("catch-up: 200 missed boundaries fire the oldest 64, then skip forward", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* scheduler.schedule("hourly", "@every 1h", "catch-up", { h: true }, { expires: "90 minutes" })
          // nobody runs the scheduler for 200 boundaries and a half
          yield* advance(Duration.millis(200 * hour + 30 * minute))
          expect(yield* firedAt("catch-up")).toEqual([])

          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          const fired = yield* firedAt("catch-up")
          expect(fired.length).toBe(64)
          expect(fired).toEqual(Array.from({ length: 64 }, (_, i) => (i + 1) * hour))
          expect(new Set(fired).size).toBe(64)
          // skipped forward to the first boundary after now
          expect(yield* nextFireAtOf("hourly")).toBe(201 * hour)

          // stale catch-up fires carry boundary + expires, so they are already expired
          const queue = yield* (yield* Queues.Queues).queue("catch-up")
          expect(Option.isNone(yield* queue.claim("w"))).toBe(true)
          expect(yield* countRows("__alkstore_jobs")).toBe(64)

          // no refire within the window, the next boundary fires once
          yield* advance("29 minutes")
          expect((yield* firedAt("catch-up")).length).toBe(64)
          yield* advance("1 minute")
          const after = yield* firedAt("catch-up")
          expect(after.length).toBe(65)
          expect(after[64]).toBe(201 * hour)
          yield* Fiber.interrupt(runner)
        }).pipe(Effect.provide(engine.store(unhurried))))

      it.effect("schedules due together fire in ticks of at most schedulesPerTick, the soonest first; every boundary once", () => {
        const { tracer, named } = collectingTracer()
        const extra = 200
        return Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const sql = yield* SqlClient.SqlClient
          // registered together, due together (as after an outage); two boundaries each
          for (let i = 0; i < schedulesPerTick + extra; i++) {
            yield* scheduler.schedule(`tenant-${String(i).padStart(5, "0")}`, "@every 1m", "tenants", { i })
          }
          yield* advance("2 minutes")
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          // one transaction per page of schedules: the whole backlog at once was one unbounded transaction
          const ticks = named("alkstore.scheduler.tick").map((span) => span.attributes.get("alkstore.fired"))
          expect(ticks.filter((fired) => fired !== 0)).toEqual([2 * schedulesPerTick, 2 * extra])
          const rows = yield* sql<{ payload: unknown; run_at: number }>`SELECT payload, run_at FROM __alkstore_jobs
            WHERE queue = ${"tenants"} ORDER BY id`
          const fires = rows.map((row) => {
            const payload = typeof row.payload === "string" ? JSON.parse(row.payload) : row.payload
            return `${(payload as { i: number }).i}@${Number(row.run_at)}`
          })
          expect(new Set(fires).size).toBe(2 * (schedulesPerTick + extra))
          // the first tick's fires are the first schedules by (next fire, name)
          expect(rows.slice(0, 2 * schedulesPerTick).every((_, k) => Number(fires[k]!.split("@")[0]) < schedulesPerTick))
            .toBe(true)
          expect(yield* nextFireAtOf(`tenant-${String(schedulesPerTick + extra - 1).padStart(5, "0")}`)).toBe(3 * minute)
          yield* Fiber.interrupt(runner)
        }).pipe(Effect.withTracer(tracer), Effect.provide(engine.store(unhurried)))
      })

      it.effect("a small backlog fires every missed boundary; exactly 64 is not skipped", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* scheduler.schedule("three", "@every 1m", "few", {})
          yield* scheduler.schedule("sixty-four", "@every 1s", "exact", {})
          yield* advance("3 minutes")
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          expect(yield* firedAt("few")).toEqual([minute, 2 * minute, 3 * minute])
          expect(yield* nextFireAtOf("three")).toBe(4 * minute)
          // 180 boundaries of `sixty-four`: the oldest 64 fire, then skip forward
          expect(yield* firedAt("exact")).toEqual(Array.from({ length: 64 }, (_, i) => (i + 1) * second))
          expect(yield* nextFireAtOf("sixty-four")).toBe(181 * second)
          yield* Fiber.interrupt(runner)
        }).pipe(Effect.provide(engine.store())))

      it.effect("re-registering the same spec (a redeploy) does not postpone the next fire", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* scheduler.schedule("ten", "@every 10m", "redeploy", { v: 1 })
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          yield* advance("7 minutes")
          const redeployed = yield* scheduler.schedule("ten", "@every 10m", "redeploy", { v: 2 })
          expect(ms(redeployed.nextFireAt)).toBe(10 * minute)
          yield* settle
          yield* advance("3 minutes")
          expect(yield* firedAt("redeploy")).toEqual([10 * minute])
          // the new payload is what fired
          const job = Option.getOrThrow(yield* (yield* (yield* Queues.Queues).queue("redeploy")).claim("w"))
          expect(job.job.payload).toEqual({ v: 2 })

          // a changed spec restarts the phase from now: 10m + 15m
          const changed = yield* scheduler.schedule("ten", "@every 15m", "redeploy", { v: 3 })
          expect(ms(changed.nextFireAt)).toBe(25 * minute)
          yield* settle
          yield* advance("10 minutes")
          expect(yield* firedAt("redeploy")).toEqual([10 * minute])
          yield* advance("5 minutes")
          expect(yield* firedAt("redeploy")).toEqual([10 * minute, 25 * minute])
          yield* Fiber.interrupt(runner)
        }).pipe(Effect.provide(engine.store(unhurried))))

      it.effect("unschedule stops the fires; a registration while the leader sleeps wakes it", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* scheduler.schedule("slow", "@every 1h", "slow", {})
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          // the leader now sleeps until the hourly boundary (nothing else is due)
          yield* advance("10 seconds")
          yield* scheduler.schedule("fast", "@every 1s", "fast", {})
          yield* settle
          yield* advance("1 second")
          expect(yield* firedAt("fast")).toEqual([11 * second])
          yield* advance("2 seconds")
          expect(yield* firedAt("fast")).toEqual([11 * second, 12 * second, 13 * second])
          expect(yield* scheduler.unschedule("fast")).toBe(true)
          yield* advance("5 seconds")
          expect((yield* firedAt("fast")).length).toBe(3)
          expect(yield* firedAt("slow")).toEqual([])
          yield* Fiber.interrupt(runner)
        }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour", maintenanceEvery: "1 hour" }))))

      it.effect("the leader runs queue maintenance every minute", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const jobs = yield* (yield* Queues.Queues).queue("expiring")
          const id = yield* jobs.enqueue({ x: 1 }, { expires: "30 seconds" })
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          yield* advance("45 seconds")
          // expired, but nobody swept yet
          expect(Option.getOrThrow(yield* jobs.getJob(id)).state).toBe("pending")
          yield* advance("16 seconds")
          // the sweep's transaction is a few round trips on PostgreSQL: under load it can land after `advance`'s
          // quiet looks (the clock stays at 61 s meanwhile, so its instant is still checked)
          const swept = yield* eventually(Effect.map(jobs.getJob(id), (job) => {
            const read = Option.getOrThrow(job)
            expect(read.state).toBe("dead")
            return read
          }))
          expect(swept.lastError).toEqual(Option.some("expired"))
          expect(Option.map(swept.diedAt, ms)).toEqual(Option.some(minute))
          yield* Fiber.interrupt(runner)
        }).pipe(Effect.provide(engine.store())))

      it.effect("boundaries fire on time while maintenance works through a backlog in its rounds", () => {
        // full rounds, each followed by a rest as long as it took: a few hundred milliseconds of maintenance;
        // unhurried, so no renewal falls within the minute and the adjust wakes the tick alone
        const backlog = (engine.capabilities.postgres ? 2 : 32) * maintenanceRowsOf(engine)
        return Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* advance(`${8 * 24} hours`)
          yield* deadBacklog(engine, "outage", backlog + 1)
          yield* scheduler.schedule("on-time", "@every 1m", "on-time", {})
          const runner = yield* Effect.fork(scheduler.runSchedules)
          // the leader's maintenance is under way: its first round has committed
          yield* eventually(Effect.map(deadCount, (dead) => expect(dead).toBeLessThan(backlog + 1)), 30)
          yield* TestClock.adjust("1 minute")
          yield* eventually(Effect.map(firedAt("on-time"), (fired) => expect(fired).toEqual([8 * 24 * hour + minute])))
          // ...and still is: the boundary did not wait for its last round (before, it waited for all of them)
          expect(yield* deadCount).toBeGreaterThan(0)
          yield* eventually(Effect.map(deadCount, (dead) => expect(dead).toBe(0)), 30)
          yield* Fiber.interrupt(runner)
        }).pipe(Effect.provide(engine.store(unhurried)))
      }, 60_000)
    })

    describe("leadership", () => {
      it.effect("a runner that cannot take the lease fails with LeadershipLost and fires nothing", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const sql = yield* SqlClient.SqlClient
          yield* scheduler.schedule("tick", "@every 1s", "nothing", {})
          // another process leads (the reserved name is unreachable through Locks)
          yield* sql`INSERT INTO __alkstore_locks (name, owner, token, expires_at)
            VALUES ('__alkstore_scheduler', 'elsewhere', 7, ${10 * minute})`
          yield* advance("5 seconds")
          const exit = yield* Effect.exit(scheduler.runSchedules)
          expect(Exit.isFailure(exit)).toBe(true)
          const error = yield* Effect.flip(scheduler.runSchedules)
          expect(error._tag).toBe("LeadershipLost")
          expect(error).toMatchObject({ _tag: "LeadershipLost" })
          expect(yield* firedAt("nothing")).toEqual([])
          expect(yield* leaderLease).toEqual(Option.some({ owner: "elsewhere", token: 7, expires_at: 10 * minute }))
          expect(yield* nextFireAtOf("tick")).toBe(1 * second)
        }).pipe(Effect.provide(engine.store())))

      it.effect("every evaluation of runSchedules is its own runner: a second fiber of one store is refused", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* scheduler.schedule("tick", "@every 1s", "once", {})
          const leader = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          const lease = Option.getOrThrow(yield* leaderLease)
          const refused = yield* Effect.flip(scheduler.runSchedules)
          expect(refused._tag).toBe("LeadershipLost")
          expect(refused).not.toMatchObject({ owner: lease.owner })
          expect(Option.getOrThrow(yield* leaderLease).owner).toBe(lease.owner)
          yield* advance("3 seconds")
          expect(yield* firedAt("once")).toEqual([second, 2 * second, 3 * second])
          expect(Option.isNone(yield* Fiber.poll(leader))).toBe(true)
          yield* Fiber.interrupt(leader)
        }).pipe(Effect.provide(engine.store())))

      it.effect("the lease is renewed while leading, beyond its ttl", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* scheduler.schedule("tick", "@every 10s", "renewed", {})
          const leader = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          const first = Option.getOrThrow(yield* leaderLease)
          expect(first.expires_at).toBe(3 * second) // leaderTtl
          yield* advance("30 seconds")
          const later = Option.getOrThrow(yield* leaderLease)
          expect(later.owner).toBe(first.owner)
          expect(later.token).toBe(first.token)
          expect(later.expires_at).toBeGreaterThan(30 * second)
          expect(yield* firedAt("renewed")).toEqual([10 * second, 20 * second, 30 * second])
          expect(Option.isNone(yield* Fiber.poll(leader))).toBe(true)
          yield* Fiber.interrupt(leader)
        }).pipe(Effect.provide(engine.store({ leaderTtl: "3 seconds", leaderRenewEvery: "1 second" }))))

      it.effect("a lease ttl shorter than the renewal cadence is still renewed in time", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* scheduler.schedule("tick", "@every 5s", "short-lease", {})
          const leader = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          const first = Option.getOrThrow(yield* leaderLease)
          yield* advance("20 seconds")
          const later = Option.getOrThrow(yield* leaderLease)
          expect(later.owner).toBe(first.owner)
          expect(later.token).toBe(first.token)
          expect(Option.isNone(yield* Fiber.poll(leader))).toBe(true)
          expect(yield* firedAt("short-lease")).toEqual([5 * second, 10 * second, 15 * second, 20 * second])
          yield* Fiber.interrupt(leader)
        }).pipe(Effect.provide(engine.store({ leaderTtl: "1 second" }))))

      it.effect("a runner whose lease is stolen fails with LeadershipLost before its next tick", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const sql = yield* SqlClient.SqlClient
          yield* scheduler.schedule("tick", "@every 1m", "stolen", {})
          const leader = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          yield* advance("1 minute")
          expect(yield* firedAt("stolen")).toEqual([minute])
          const mine = Option.getOrThrow(yield* leaderLease)

          // another owner takes the row over (e.g. after this process stalled past its lease)
          yield* sql.unsafe(`UPDATE __alkstore_locks SET owner = 'thief' WHERE name = '__alkstore_scheduler'`)
          yield* advance("2 minutes")
          const exit = yield* Fiber.await(leader)
          expect(exit).toEqual(Exit.fail(expect.anything()))
          const error = yield* Effect.flip(Fiber.join(leader))
          expect(error).toMatchObject({ _tag: "LeadershipLost", owner: mine.owner })
          // nothing fired after the steal
          expect(yield* firedAt("stolen")).toEqual([minute])
          expect(Option.getOrThrow(yield* leaderLease).owner).toBe("thief")
        }).pipe(Effect.provide(engine.store())))

      it.effect("a stolen lease is noticed at the very next tick, even before a renewal", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const sql = yield* SqlClient.SqlClient
          yield* scheduler.schedule("tick", "@every 1s", "fenced", {})
          const leader = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          // the runner renews only every hour here, so the tick's own fence must catch it
          yield* sql.unsafe(
            `UPDATE __alkstore_locks SET owner = 'thief', token = token + 1 WHERE name = '__alkstore_scheduler'`
          )
          yield* advance("1 second")
          const error = yield* Effect.flip(Fiber.join(leader))
          expect(error._tag).toBe("LeadershipLost")
          expect(yield* firedAt("fenced")).toEqual([])
          expect(yield* nextFireAtOf("tick")).toBe(second)
        }).pipe(Effect.provide(engine.store({ leaderTtl: "2 hours", leaderRenewEvery: "1 hour" }))))

      it.effect("a failed renewal ends the runner with LeadershipLost", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const sql = yield* SqlClient.SqlClient
          yield* scheduler.schedule("tick", "@every 1h", "renewal", {})
          const leader = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          yield* sql.unsafe(`UPDATE __alkstore_locks SET owner = 'thief' WHERE name = '__alkstore_scheduler'`)
          // the next renewal (every 2 s by default) finds the lease gone, long before the boundary
          yield* advance("2 seconds")
          const error = yield* Effect.flip(Fiber.join(leader))
          expect(error._tag).toBe("LeadershipLost")
          expect(yield* firedAt("renewal")).toEqual([])
        }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour", maintenanceEvery: "1 hour" }))))

      it.effect("interruption returns cleanly and releases the lease; a second runner takes over at once", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* scheduler.schedule("tick", "@every 1m", "handover", {})
          const first = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          yield* advance("1 minute")
          expect(yield* firedAt("handover")).toEqual([minute])
          const firstLease = Option.getOrThrow(yield* leaderLease)

          const exit = yield* Fiber.interrupt(first)
          expect(Exit.isInterrupted(exit)).toBe(true)
          // released: nobody holds it now, without waiting for the ttl
          expect(Option.isNone(yield* liveLeader(minute))).toBe(true)

          const second = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          const secondLease = Option.getOrThrow(yield* liveLeader(minute))
          expect(secondLease.owner).not.toBe(firstLease.owner)
          expect(secondLease.token).toBeGreaterThan(firstLease.token)
          expect(Option.isNone(yield* Fiber.poll(second))).toBe(true)
          yield* advance("1 minute")
          expect(yield* firedAt("handover")).toEqual([minute, 2 * minute])
          yield* Fiber.interrupt(second)
        }).pipe(Effect.provide(engine.store())))

      it.effect("runAsStandby takes over at once when the leader is interrupted", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          yield* scheduler.schedule("tick", "@every 1m", "standby", {})
          const leader = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          const standby = yield* Effect.fork(scheduler.runAsStandby)
          yield* settle
          const leaderLeaseRow = Option.getOrThrow(yield* leaderLease)
          yield* advance("1 minute")
          expect(yield* firedAt("standby")).toEqual([minute])
          expect(Option.getOrThrow(yield* leaderLease).owner).toBe(leaderLeaseRow.owner)

          yield* Fiber.interrupt(leader)
          yield* settle
          // no time passed: the standby took the released lease at once
          const taken = Option.getOrThrow(yield* liveLeader(minute))
          expect(taken.owner).not.toBe(leaderLeaseRow.owner)
          yield* advance("1 minute")
          expect(yield* firedAt("standby")).toEqual([minute, 2 * minute])
          expect(Option.isNone(yield* Fiber.poll(standby))).toBe(true)

          // interrupting the standby releases its lease too
          yield* Fiber.interrupt(standby)
          expect(Option.isNone(yield* liveLeader(2 * minute))).toBe(true)
        }).pipe(Effect.provide(engine.store())))

      it.effect("runAsStandby leads after a lost lease lapses, and again after its own loss", () =>
        Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const sql = yield* SqlClient.SqlClient
          yield* scheduler.schedule("tick", "@every 1m", "fleet", {})
          // a crashed leader elsewhere: its lease lapses after 10 s
          yield* sql`INSERT INTO __alkstore_locks (name, owner, token, expires_at)
            VALUES ('__alkstore_scheduler', 'crashed', 1, ${10 * second})`
          const standby = yield* Effect.fork(scheduler.runAsStandby)
          yield* settle
          expect(Option.getOrThrow(yield* leaderLease).owner).toBe("crashed")
          yield* advance("15 seconds")
          const mine = Option.getOrThrow(yield* liveLeader(15 * second))
          expect(mine.owner).not.toBe("crashed")
          expect(mine.token).toBe(2)

          // a thief takes over; the standby loses, waits, and leads again once the thief's lease lapses
          yield* sql`UPDATE __alkstore_locks SET owner = 'thief', token = token + 1, expires_at = ${50 * second}
            WHERE name = '__alkstore_scheduler'`
          yield* advance("10 seconds")
          expect(Option.getOrThrow(yield* leaderLease).owner).toBe("thief")
          yield* advance("30 seconds")
          const again = Option.getOrThrow(yield* liveLeader(55 * second))
          expect(again.owner).not.toBe("thief")
          expect(again.owner).not.toBe(mine.owner) // a new runner instance
          yield* advance("5 seconds")
          expect(yield* firedAt("fleet")).toEqual([minute])
          expect(Option.isNone(yield* Fiber.poll(standby))).toBe(true)
          yield* Fiber.interrupt(standby)
        }).pipe(Effect.provide(engine.store())))
    })
  })
