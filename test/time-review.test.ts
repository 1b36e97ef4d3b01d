/**
 * A review of time (CONTRACT §1 "Time comes from Effect's Clock", §3 "Every instant a job can reach … must be one a
 * DateTime can hold", docs/queues-and-locks.md "Instants and the duration cap", docs/decisions.md): how every
 * mechanism reads and judges instants, on every engine. Every test here failed on the code before its fix.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Layer, Option, Schema, TestClock } from "effect"
import { EffectStores, Scheduler } from "../src/index.js"
import { engines, pgOwned, sqliteOwned } from "./contract/harness.js"
import { mustGet, optionalMs, queueOf } from "./contract/support.js"
import { makeVirtualClock } from "./support/virtualClock.js"

/** The latest instant a `Date`, and so a `DateTime`, can hold. */
const maxInstant = 8_640_000_000_000_000
const DAY = 86_400_000

const scheduleRows = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_scheduler_tasks`, (rows) => Number(rows[0]!.n)))

for (const engine of engines) {
  describe(`time review — ${engine.name}`, () => {
    // CONTRACT §3: "Every instant a job can reach (`runAt`, its expiry, …) must be one a `DateTime` can hold; an
    // option that would pass it is `InvalidOptions`"; §5: a fired job's `runAt` = its boundary, `expiresAt` =
    // boundary + `expires`, and the first boundary = registration time + interval. docs/queues-and-locks.md: "Past
    // the range is `InvalidOptions` before anything is written." §2: "No mechanism throws".
    it.effect("schedule() whose first boundary or its fire's expiry would pass the DateTime range is a typed error, nothing stored", () =>
      Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        // the first boundary (now + 1 minute) is past the range
        yield* TestClock.setTime(maxInstant - 30_000)
        const late = yield* Effect.exit(scheduler.schedule("late", "@every 1m", "q", {}))
        expect(Exit.isFailure(late) && Cause.isFailType(late.cause), String(late)).toBe(true)
        // the boundary is in range, but the job it fires would expire past it
        yield* TestClock.setTime(maxInstant - 90_000)
        const expiring = yield* Effect.exit(scheduler.schedule("expiring", "@every 1m", "q", {}, { expires: "1 minute" }))
        expect(Exit.isFailure(expiring) && Cause.isFailType(expiring.cause), String(expiring)).toBe(true)
        expect(yield* scheduleRows).toBe(0)
      }).pipe(Effect.provide(engine.store())))
  })
}

// The two below are engine-free code (src/internal/worker.ts, src/internal/effectStores/persistedQueue.ts): one engine
// of each kind.
for (const engine of [sqliteOwned, pgOwned]) {
  describe(`time review, the production clock's timer rule — ${engine.name}`, () => {
    // docs/decisions.md: "`process(..., { heartbeat: true })` extends each claim every third of its visibility
    // timeout while the handler runs"; CONTRACT §3 allows any visibility timeout up to the documented cap (50 000 000
    // days). Under the production Clock a single sleep past ~24.8 days never ends (the reason withLock's renewal is
    // capped at a day, docs/queues-and-locks.md): a 75-day lease (a third: 25 days) was never extended and lapsed
    // under a running handler, and another worker claimed the job.
    it.effect("process with heartbeat keeps a 75-day lease alive under the production clock's timer rule", () =>
      Effect.gen(function*() {
        const virtual = makeVirtualClock(0)
        const q = yield* queueOf("quarterly", { visibilityTimeout: "75 days" })
        const id = yield* q.enqueue("report")
        const started = yield* Deferred.make<void>()
        yield* Effect.forkScoped(
          q.process("w", () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.never), { heartbeat: true }).pipe(
            Effect.withClock(virtual.clock)
          )
        )
        yield* Deferred.await(started)
        yield* virtual.advanceTo(76 * DAY)
        // the handler still runs: its lease must have been extended past its first end (75 days)
        const job = yield* Effect.withClock(mustGet(q, id), virtual.clock)
        expect(optionalMs(job.claimedUntil)).toBeGreaterThan(76 * DAY)
        expect(Option.isNone(yield* Effect.withClock(q.claim("another"), virtual.clock))).toBe(true)
      }).pipe(Effect.scoped, Effect.provide(engine.store({ fallbackPoll: "24 days" }))), 60_000)

    // docs/effect-stores.md: a take's claim is "claimed with a lease (`visibilityTimeout` …), renewed every third of
    // it by one loop per store while the take's scope is open, each renewal to `visibilityTimeout` from then". The
    // layer accepts any visibilityTimeout up to the cap; a third past ~24.8 days is a sleep that never ends.
    it.effect("a PersistedQueue take keeps a 75-day lease renewed under the production clock's timer rule", () => {
      const virtual = makeVirtualClock(0)
      return Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "pq", schema: Schema.Struct({ n: Schema.Number }) })
        yield* queue.offer({ n: 1 })
        const taken = yield* Deferred.make<void>()
        yield* Effect.forkScoped(queue.take(() => Effect.zipRight(Deferred.succeed(taken, undefined), Effect.never)))
        yield* Deferred.await(taken)
        yield* virtual.advanceTo(76 * DAY)
        const q = yield* queueOf("pq")
        const stats = yield* q.stats
        expect(stats.claimed).toBe(1)
        expect(Option.isNone(yield* q.claim("another"))).toBe(true)
      }).pipe(
        Effect.scoped,
        Effect.provide(PersistedQueue.layer.pipe(
          Layer.provideMerge(EffectStores.layerPersistedQueueStore({ visibilityTimeout: "75 days" })),
          Layer.provideMerge(engine.store({ fallbackPoll: "24 days" }))
        )),
        Effect.withClock(virtual.clock)
      )
    }, 60_000)
  })
}
