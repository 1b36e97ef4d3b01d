/**
 * How a worker settles its claim in the corners of interruption and failure:
 * a handler's own interruption (not a stop) spends an attempt; a failed
 * heartbeat does not end the beating; a stop that waits for an
 * uninterruptible handler keeps its lease; a failure with no text does not
 * end the worker. SQLite only: these rules live above the engines. Time is
 * the TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Logger, Option } from "effect"
import { Outbox } from "../src/index.js"
import { causeText, failureText } from "../src/internal/errorText.js"
import { failing } from "./contract/faults.js"
import { sqliteOwned } from "./contract/harness.js"
import { advance, optionalMs, queueOf } from "./contract/support.js"
import { settle } from "./contract/workers.js"

const store = () => sqliteOwned.store({ fallbackPoll: "1 hour" })

/** Warnings logged while `effect` runs (its forked fibers' too), collected into `into`. */
const withWarnings = (into: Array<string>) =>
  Logger.replace(
    Logger.defaultLogger,
    Logger.make(({ logLevel, message }) => {
      if (logLevel._tag === "Warning") into.push(Array.isArray(message) ? String(message[0]) : String(message))
    })
  )

describe("worker settling", () => {
  describe("a handler that ends in its own interruption", () => {
    it.effect("Effect.interrupt spends attempts on the backoff curve and dies after maxAttempts", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("self-interrupt", { maxAttempts: 3, backoffBase: "1 second" })
        const id = yield* queue.enqueue({ n: 1 })
        let runs = 0
        const worker = yield* Effect.forkDaemon(queue.process("w", () => {
          runs++
          return Effect.interrupt
        }))
        yield* settle
        expect(runs).toBe(1)
        const first = Option.getOrThrow(yield* queue.getJob(id))
        expect([first.state, first.attempts, first.lastError]).toEqual(["pending", 1, Option.some("interrupted")])
        // the curve: 1 s, then 2 s; then the third interruption buries it
        yield* advance("1 second")
        yield* settle
        expect(runs).toBe(2)
        yield* advance("2 seconds")
        yield* settle
        expect(runs).toBe(3)
        const dead = Option.getOrThrow(yield* queue.getJob(id))
        expect([dead.state, dead.attempts, dead.lastError]).toEqual(["dead", 3, Option.some("interrupted")])
        expect(worker.unsafePoll()).toBeNull()
        expect(Exit.isInterrupted(yield* Fiber.interrupt(worker))).toBe(true)
      }).pipe(Effect.provide(store())), 10_000)

    it.effect("the join of an interrupted child is a failure too; a stop mid-handler still releases", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("child-interrupt", { maxAttempts: 5, backoffBase: "1 minute" })
        const id = yield* queue.enqueue({ n: 1 })
        let runs = 0
        const worker = yield* Effect.forkDaemon(queue.process("w", () =>
          Effect.gen(function*() {
            runs++
            if (runs === 1) {
              const child = yield* Effect.fork(Effect.never)
              yield* Fiber.interrupt(child)
              return yield* Fiber.join(child)
            }
            return yield* Effect.never
          })))
        yield* settle
        const retried = Option.getOrThrow(yield* queue.getJob(id))
        expect([runs, retried.state, retried.attempts, retried.lastError]).toEqual([1, "pending", 1, Option.some("interrupted")])
        yield* advance("1 minute")
        yield* settle
        expect(runs).toBe(2)
        // the worker's own stop, while the second run is in its handler: released, its attempt given back
        yield* Fiber.interrupt(worker)
        const released = Option.getOrThrow(yield* queue.getJob(id))
        expect([released.state, released.attempts, Option.isNone(released.workerId)]).toEqual(["pending", 1, true])
      }).pipe(Effect.provide(store())), 10_000)

    it.effect("an outbox's runOnce: a delivery's own interruption retries, not releases", () =>
      Effect.gen(function*() {
        const outbox = yield* Effect.flatMap(Outbox.Outbox, (o) => o.outbox("self-interrupt", { backoffBase: "1 second" }))
        const id = yield* outbox.enqueue({ n: 1 })
        expect(yield* outbox.runOnce("w", () => Effect.interrupt)).toBe(true)
        const job = Option.getOrThrow(yield* outbox.getJob(id))
        expect([job.state, job.attempts, job.lastError]).toEqual(["pending", 1, Option.some("interrupted")])
        // not due again before its backoff: nothing to deliver now
        expect(yield* outbox.runOnce("w", () => Effect.void)).toBe(false)
      }).pipe(Effect.provide(store())), 10_000)
  })

  describe("process with heartbeat", () => {
    it.effect("a failed heartbeat is logged and the beating goes on", () => {
      const warnings: Array<string> = []
      return Effect.gen(function*() {
        const queue = yield* queueOf("beat-fails", { visibilityTimeout: "30 seconds" })
        const id = yield* queue.enqueue({ n: 1 })
        const worker = yield* Effect.forkDaemon(
          queue.process("w", () => Effect.sleep("100 seconds"), { heartbeat: true })
        )
        yield* settle
        const leaseAt = () => Effect.map(queue.getJob(id), (job) => optionalMs(Option.getOrThrow(job).claimedUntil))
        expect(yield* leaseAt()).toBe(30_000)
        // the first beat (at 10 s) fails with a SqlError
        const fault = failing("__alkstore_jobs", "UPDATE")
        yield* fault.start
        yield* advance("10 seconds")
        yield* settle
        yield* fault.stop
        expect(yield* leaseAt()).toBe(30_000)
        // the next ones (20 s, 30 s, 40 s) renew it: no other worker can take the job
        for (let i = 0; i < 3; i++) {
          yield* advance("10 seconds")
          yield* settle
        }
        expect(yield* leaseAt()).toBe(70_000)
        expect(Option.isNone(yield* queue.claim("other"))).toBe(true)
        // and the failed beat was told
        expect(warnings.filter((w) => w.includes("heartbeat") && w.includes("failed"))).toHaveLength(1)
        yield* Fiber.interrupt(worker)
      }).pipe(Effect.provide(store()), Effect.provide(withWarnings(warnings)))
    }, 10_000)

    it.effect("a stop that waits for an uninterruptible handler keeps its lease until the handler ends", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("uninterruptible-beat", { visibilityTimeout: "30 seconds" })
        const id = yield* queue.enqueue({ n: 1 })
        let finished = false
        const worker = yield* Effect.forkDaemon(queue.process("w", () =>
          Effect.uninterruptible(Effect.sleep("100 seconds").pipe(Effect.zipRight(Effect.sync(() => {
            finished = true
          })))), { heartbeat: true }))
        yield* settle
        yield* advance("5 seconds")
        const stop = yield* Effect.fork(Fiber.interrupt(worker))
        yield* settle
        for (let i = 0; i < 6; i++) {
          yield* advance("10 seconds")
          yield* settle
        }
        // 65 s: far past the lease the claim took (30 s); the handler still runs and the lease is its own
        expect(finished).toBe(false)
        expect(stop.unsafePoll()).toBeNull()
        expect(Option.isNone(yield* queue.claim("other"))).toBe(true)
        expect(optionalMs(Option.getOrThrow(yield* queue.getJob(id)).claimedUntil)).toBe(90_000)
        yield* advance("40 seconds")
        yield* settle
        expect(finished).toBe(true)
        expect(Exit.isInterrupted(yield* Fiber.join(stop))).toBe(true)
        // Effect tells this handler's end as interrupted, whatever it did: its job is released (recipes.md)
        const job = Option.getOrThrow(yield* queue.getJob(id))
        expect([job.state, job.attempts]).toEqual(["pending", 0])
      }).pipe(Effect.provide(store())), 10_000)

    it.effect("the shutdown recipe: an uninterruptible handler that acks its own job is acked by the stop", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("uninterruptible-ack", { visibilityTimeout: "30 seconds" })
        const id = yield* queue.enqueue({ n: 1 })
        const worker = yield* Effect.forkDaemon(queue.process("w", (_job, handle) =>
          Effect.uninterruptible(Effect.zipRight(Effect.sleep("50 seconds"), handle.ack)), { heartbeat: true }))
        yield* settle
        yield* advance("5 seconds")
        const stop = yield* Effect.fork(Fiber.interrupt(worker))
        for (let i = 0; i < 5; i++) {
          yield* advance("10 seconds")
          yield* settle
        }
        yield* Fiber.join(stop)
        expect(Option.isNone(yield* queue.getJob(id))).toBe(true)
      }).pipe(Effect.provide(store())), 10_000)
  })

  describe("a failure with no text", () => {
    const cases: ReadonlyArray<[string, () => Effect.Effect<void, unknown>, string]> = [
      ["fail(Object.create(null))", () => Effect.fail(Object.create(null)), "[object Object]"],
      ["a throwing message getter", () =>
        Effect.fail({
          get message(): string {
            throw new Error("getter")
          }
        }), "[object Object]"],
      ["a throwing toString", () =>
        Effect.fail({
          toString() {
            throw new Error("toString")
          }
        }), "[object Object]"]
    ]
    for (const [label, failure, text] of cases) {
      it.effect(`${label}: retried with a fallback text; the worker goes on`, () =>
        Effect.gen(function*() {
          const queue = yield* queueOf("no-text", { backoffBase: "1 minute" })
          const id = yield* queue.enqueue({ n: 1 })
          const worker = yield* Effect.forkDaemon(queue.process("w", failure))
          yield* settle
          expect(worker.unsafePoll()).toBeNull()
          const job = Option.getOrThrow(yield* queue.getJob(id))
          expect([job.state, job.attempts, job.lastError]).toEqual(["pending", 1, Option.some(text)])
          yield* Fiber.interrupt(worker)
        }).pipe(Effect.provide(store())), 10_000)
    }

    it("failureText and causeText never throw", () => {
      const nullProto = Object.create(null)
      const hostile = new Proxy({}, {
        get() {
          throw new Error("get")
        },
        getPrototypeOf() {
          throw new Error("proto")
        }
      })
      expect(failureText(nullProto)).toBe("[object Object]")
      expect(typeof failureText(hostile)).toBe("string")
      expect(failureText({ _tag: "Boom", get field() { throw new Error("field") } })).toBe("[object Object]")
      expect(typeof causeText(Cause.die(nullProto))).toBe("string")
      expect(typeof causeText(Cause.die(hostile))).toBe("string")
      expect(typeof causeText(Cause.fail(hostile))).toBe("string")
      // the ordinary texts are unchanged
      expect(failureText(new Error("boom"))).toBe("boom")
      expect(failureText({ _tag: "Oops", n: 1 })).toBe("Oops {\"n\":1}")
      expect(failureText(42)).toBe("42")
    })
  })
})
