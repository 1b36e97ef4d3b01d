/**
 * Every instant a job, a lock or a schedule can reach must be one a
 * `DateTime` can hold (|ms| ≤ 8.64e15, CONTRACT §3): an option that would
 * pass it is `InvalidOptions` with the option's own field, before anything
 * is written, so no row can poison later reads (`getJob`, `handle.job`,
 * `dead()`).
 */
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Duration, Effect, Option, TestClock } from "effect"
import { Locks, Queues, Scheduler } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"
import { jobCount, lockCount, ms, mustClaim, mustGet, optionalMs, queueOf, type StoreServices } from "./support.js"

/** The latest instant a `Date` can hold: +275760-09-13. */
const maxInstant = 8_640_000_000_000_000
/** The documented cap on every duration: 50 000 000 days, half the instant range. */
const maxDuration = 4_320_000_000_000_000
const huge = "100000000 days"

const invalid = (field: string) => ({ _tag: "InvalidOptions", field })

export const instantsContract = (engine: EngineUnderTest) =>
  describe(`instants stay within DateTime — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    it.effect("queue and enqueue options past the range are InvalidOptions, nothing written, reads stay sound", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        for (const field of ["visibilityTimeout", "backoffBase", "expires"] as const) {
          expect(yield* Effect.flip(queues.queue("q", { [field]: huge })), field).toMatchObject(invalid(field))
          expect(yield* Effect.flip(queues.queue("q", { [field]: maxDuration + 1 })), field).toMatchObject(invalid(field))
        }
        const q = yield* queueOf("q")
        const cases: ReadonlyArray<readonly [string, Queues.EnqueueOpts]> = [
          ["runAt", { runAt: 8.7e15 }],
          ["runAt", { runAt: maxInstant + 1 }],
          // the first lease (runAt + visibilityTimeout) would end past the range
          ["runAt", { runAt: maxInstant }],
          ["expires", { expires: huge }],
          ["delay", { delay: huge }],
          ["delay", { delay: [maxDuration, 1_000_000] }]
        ]
        for (const [field, opts] of cases) {
          expect(yield* Effect.flip(q.enqueue("x", opts)), JSON.stringify(opts)).toMatchObject(invalid(field))
          expect(yield* Effect.flip(q.enqueueBatch(["x"], opts))).toMatchObject(invalid(field))
        }
        expect(yield* jobCount).toBe(0)
        // a job that dies normally is still listed: no poisoned row sits in front of it
        const id = yield* q.enqueue("fine")
        yield* (yield* mustClaim(q, "w")).fail("x")
        expect((yield* q.dead()).map((job) => job.id)).toEqual([id])
      })))

    it.effect("the edges that are representable are accepted and read back", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("edge", { visibilityTimeout: maxDuration, expires: maxDuration })
        const id = yield* q.enqueue("x")
        const handle = yield* mustClaim(q, "w")
        expect(optionalMs(handle.job.claimedUntil)).toBe(maxDuration)
        expect(optionalMs((yield* mustGet(q, id)).expiresAt)).toBe(maxDuration)
        expect(yield* handle.heartbeat(maxDuration)).toBe(true)
        const late = yield* queueOf("late", { visibilityTimeout: "1 second" })
        const lateId = yield* late.enqueue("y", { runAt: maxInstant - 1_000 })
        expect(ms((yield* mustGet(late, lateId)).runAt)).toBe(maxInstant - 1_000)
      })))

    it.effect("near the end of the range, sums of now and a duration are checked exactly", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("q", { visibilityTimeout: "1 minute" })
        const id = yield* q.enqueue("x")
        const handle = yield* mustClaim(q, "w")
        const locks = yield* Locks.Locks
        const lock = Option.getOrThrow(yield* locks.acquire("l", { ttl: "1 minute", owner: "a" }))
        yield* TestClock.setTime(maxInstant - 30_000)
        expect(yield* Effect.flip(q.enqueue("y", { delay: "1 minute" }))).toMatchObject(invalid("delay"))
        expect(yield* Effect.flip(q.enqueue("y", { expires: "1 minute" }))).toMatchObject(invalid("expires"))
        // without options, the handle's own visibility timeout would carry the first lease past the range
        expect(yield* Effect.flip(q.enqueue("y"))).toMatchObject(invalid("visibilityTimeout"))
        expect(yield* Effect.flip(handle.heartbeat("1 minute"))).toMatchObject(invalid("extend"))
        expect(yield* Effect.flip(handle.heartbeat())).toMatchObject(invalid("visibilityTimeout"))
        expect(yield* Effect.flip(handle.retry("e", "1 minute"))).toMatchObject(invalid("delay"))
        expect(yield* Effect.flip(lock.renew())).toMatchObject(invalid("ttl"))
        expect(yield* Effect.flip(locks.acquire("m", { ttl: "1 minute" }))).toMatchObject(invalid("ttl"))
        expect(yield* Effect.flip(locks.withLock("m", "1 minute", Effect.void))).toMatchObject(invalid("ttl"))
        // nothing moved: the claim is intact and readable
        const job = yield* mustGet(q, id)
        expect(job.state).toBe("claimed")
        expect(optionalMs(job.claimedUntil)).toBe(60_000)
        expect(yield* jobCount).toBe(1)
        expect(yield* lockCount).toBe(1)
      })))

    it.effect("lock ttls, renewals and schedule expiries past the range are InvalidOptions", () =>
      run(Effect.gen(function*() {
        const locks = yield* Locks.Locks
        expect(yield* Effect.flip(locks.acquire("l", { ttl: huge }))).toMatchObject(invalid("ttl"))
        expect(yield* Effect.flip(locks.withLock("l", huge, Effect.void))).toMatchObject(invalid("ttl"))
        expect(yield* lockCount).toBe(0)
        const lock = Option.getOrThrow(yield* locks.acquire("l", { ttl: "1 minute" }))
        expect(yield* Effect.flip(lock.renew(huge))).toMatchObject(invalid("ttl"))
        expect(ms(lock.expiresAt)).toBe(60_000)

        const scheduler = yield* Scheduler.Scheduler
        expect(yield* Effect.flip(scheduler.schedule("s", "@every 1s", "q", {}, { expires: huge }))).toMatchObject(
          invalid("expires")
        )
        const q = yield* queueOf("q")
        const id = yield* q.enqueue("x")
        const handle = yield* mustClaim(q, "w")
        expect(yield* Effect.flip(handle.heartbeat(huge))).toMatchObject(invalid("extend"))
        expect(yield* Effect.flip(handle.retry("e", huge))).toMatchObject(invalid("delay"))
        const job = yield* mustGet(q, id)
        expect(job.state).toBe("claimed")
        expect(Duration.toMillis(job.visibilityTimeout)).toBe(300_000)
        expect(DateTime.toEpochMillis(Option.getOrThrow(job.claimedUntil))).toBe(300_000)
      })))
  })
