/**
 * A worker draining a backlog on SQLite runs each step in place (the fused
 * ack + claim, a handler that does not wait): nothing in that chain is a real
 * asynchronous boundary, so before the worker gave the event loop turns of
 * its own, a drain held every timer and I/O of the host until the backlog was
 * gone (100 000 jobs: 3.0-3.6 s), and heartbeats, lock renewals and the leader's
 * lease in the same process missed their beats. Real time: the event loop is
 * what is measured.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { sqliteOwned } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"

const backlog = 20_000

describe("a worker's drain and the event loop", () => {
  it.live("a timer due during a drain of jobs handled in place fires long before the backlog is gone", () =>
    Effect.gen(function*() {
      const queue = yield* queueOf("drain")
      for (let i = 0; i < backlog; i += 1000) yield* queue.enqueueBatch(Array.from({ length: 1000 }, (_, n) => i + n))
      let handled = 0
      // A host's timer, due 5 ms from now: it can fire only when the worker lets the event loop turn.
      const timer = yield* Effect.fork(Effect.async<number>((resume) => {
        const pending = setTimeout(() => resume(Effect.succeed(handled)), 5)
        return Effect.sync(() => clearTimeout(pending))
      }))
      const worker = yield* Effect.fork(queue.process("w", () =>
        Effect.sync(() => {
          handled++
        })))
      const handledWhenFired = yield* Fiber.join(timer)
      yield* Effect.sleep("1 millis").pipe(Effect.repeat({ until: () => handled === backlog }))
      yield* Fiber.interrupt(worker)
      // Before: the timer fired only once the worker had drained the backlog and gone to wait.
      expect(handledWhenFired).toBeLessThan(backlog / 2)
      expect(handled).toBe(backlog)
    }).pipe(Effect.provide(sqliteOwned.store())))
})
