/**
 * Review: a PostgreSQL store's close after work was cut off. The close waits, before it ends its pool, until
 * no statement of the store's is on its way (`untilIdle` in src/internal/pg/store.ts), "for at most a second
 * of real time". Two defects broke that:
 * - the count of statements in flight went up one step before its decrement was put in place, so an
 *   interruption landing between the two (here a `withLock` stopped during its acquire) counted a statement
 *   that never ran, for good;
 * - the one-second bound did not hold: the wait runs as a finalizer, where `Effect.timeout` cannot interrupt
 *   what it times and so waits for it — a count that never came down held the close for ever.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, Fiber, type Layer, Option, Redacted } from "effect"
import { StoreActivity } from "../src/internal/activity.js"
import { Locks, PgStore, Queues } from "../src/index.js"
import { freshFile, pgDatabaseUrl, pgSchemaFor, pgTestTypes } from "./contract/harness.js"
import { startProxy } from "./support/pgProxy.js"

const realClock = Clock.make()
const realNow = () => realClock.unsafeCurrentTimeMillis()

const store = (url: string, label: string) =>
  PgStore.layer({
    url: Redacted.make(url),
    types: pgTestTypes,
    maxConnections: 3,
    schema: pgSchemaFor(freshFile(label)),
    clock: "host",
    fallbackPoll: "1 hour"
  })

/** Runs `op` with a yield every 16 steps and interrupts it after `k` yields of this fiber. */
const interruptAfter = <X, E, R>(op: Effect.Effect<X, E, R>, k: number) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(Effect.withMaxOpsBeforeYield(op, 16))
    for (let i = 0; i < k; i++) yield* Effect.yieldNow()
    yield* Fiber.interrupt(fiber)
  })

/** How long (ms, real time) `program` with `layer` took to end, given up on (Infinity) after `limitMillis`. */
const realDuration = <E>(program: Effect.Effect<void, E, Locks.Locks | Queues.Queues>, layer: Layer.Layer<Locks.Locks | Queues.Queues, unknown>, limitMillis: number) =>
  Effect.gen(function*() {
    const started = realNow()
    // a daemon: a close that never ends must not hold the test's own fiber
    const fiber = yield* Effect.forkDaemon(Effect.ignore(Effect.provide(program, layer)))
    const ended = yield* Effect.race(
      Effect.as(Fiber.await(fiber), true),
      Effect.as(Effect.withClock(Effect.sleep(limitMillis), realClock), false)
    )
    return ended ? realNow() - started : Number.POSITIVE_INFINITY
  })

describe("a PostgreSQL store's close after work was cut off", () => {
  it.effect("a withLock interrupted at any step of its acquire: no statement stays counted in flight, and the store closes at once", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const counted: Array<number> = []
      const slow: Array<number> = []
      for (let k = 0; k <= 10; k++) {
        const ms = yield* realDuration(
          Effect.gen(function*() {
            const locks = yield* Locks.Locks
            // the engine's count of its statements in flight (what the close waits on)
            const activity = Option.getOrThrow(yield* Effect.serviceOption(StoreActivity))
            yield* interruptAfter(locks.withLock("L", "30 seconds", Effect.void), k)
            const until = realNow() + 2_000
            while (activity.inFlight() > 0 && realNow() < until) yield* Effect.withClock(Effect.sleep(5), realClock)
            if (activity.inFlight() > 0) counted.push(k)
          }),
          store(url, `close-lock-${k}`),
          5_000
        )
        // a close takes a few ms here; one left waiting for a count to come down takes untilIdle's whole second
        if (ms === Number.POSITIVE_INFINITY) slow.push(k)
      }
      expect({ counted, slow }).toEqual({ counted: [], slow: [] })
    }), { timeout: 90_000 })

  it.live("a statement whose connection stopped answering: the close ends within its bound", () =>
    Effect.gen(function*() {
      const target = new URL(yield* Effect.promise(pgDatabaseUrl))
      const proxy = yield* startProxy(target)
      const url = new URL(target)
      url.port = String(proxy.port)
      const ms = yield* realDuration(
        Effect.gen(function*() {
          const queue = yield* (yield* Queues.Queues).queue("frozen")
          yield* queue.enqueue({ n: 1 })
          proxy.freeze()
          // on its way for good, never interrupted: the answer cannot come back
          yield* Effect.forkDaemon(queue.enqueue({ n: 2 }))
          yield* Effect.sleep("50 millis")
        }),
        store(url.toString(), "close-frozen"),
        8_000
      )
      // untilIdle's second, then the pool's end (bounded by its own second)
      expect(ms).toBeLessThan(4_000)
    }).pipe(Effect.scoped), { timeout: 20_000 })
})
