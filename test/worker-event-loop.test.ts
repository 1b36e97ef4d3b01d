/**
 * A consumer draining a backlog on SQLite runs each step in place (the fused
 * ack + claim, a handler that does not wait, a stream consumer's ack):
 * nothing in that chain is a real asynchronous boundary, so before consumers
 * gave the event loop turns of their own, a drain held every timer and I/O of
 * the host until the backlog was gone (100 000 jobs through `process`:
 * 3.0-3.6 s; 10 000 through `stream`: all of them), and heartbeats, lock
 * renewals and the leader's lease in the same process missed their beats.
 * Real time: the event loop is what is measured.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Stream } from "effect"
import type { Queues } from "../src/index.js"
import { sqliteFromClient, sqliteOwned } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"

/**
 * Fills a queue with `backlog` jobs, starts `consume` on it (which calls
 * `handled` once per job it finishes), and answers how many jobs were done
 * when a host's timer due 5 ms later fired — it can fire only when the
 * consumer lets the event loop turn — once the whole backlog is done.
 */
const handledWhenTimerFired = (
  backlog: number,
  consume: (queue: Queues.Queue<number>, handled: () => void) => Effect.Effect<unknown, unknown>
) =>
  Effect.gen(function*() {
    const queue = yield* queueOf("drain")
    for (let i = 0; i < backlog; i += 1000) yield* queue.enqueueBatch(Array.from({ length: 1000 }, (_, n) => i + n))
    let handled = 0
    const timer = yield* Effect.fork(Effect.async<number>((resume) => {
      const pending = setTimeout(() => resume(Effect.succeed(handled)), 5)
      return Effect.sync(() => clearTimeout(pending))
    }))
    const consumer = yield* Effect.fork(consume(queue as Queues.Queue<number>, () => {
      handled++
    }))
    const whenFired = yield* Fiber.join(timer)
    yield* Effect.sleep("1 millis").pipe(Effect.repeat({ until: () => handled === backlog }))
    yield* Fiber.interrupt(consumer)
    expect(handled).toBe(backlog)
    return whenFired
  })

describe("a worker's drain and the event loop", () => {
  it.live("a timer due during a drain of jobs handled in place fires long before the backlog is gone", () =>
    Effect.gen(function*() {
      const backlog = 20_000
      const whenFired = yield* handledWhenTimerFired(backlog, (queue, handled) => queue.process("w", () => Effect.sync(handled)))
      // Before: the timer fired only once the worker had drained the backlog and gone to wait.
      expect(whenFired).toBeLessThan(backlog / 2)
    }).pipe(Effect.provide(sqliteOwned.store())))
})

// docs/decisions.md, "A worker's turns of the event loop": a stream gives the loop a turn before its next claim too.
for (const engine of [sqliteOwned, sqliteFromClient]) {
  describe(`a stream's drain and the event loop — ${engine.name}`, () => {
    it.live("a timer due during a stream's drain of jobs acked in place fires long before the backlog is gone", () =>
      Effect.gen(function*() {
        const backlog = 10_000
        const whenFired = yield* handledWhenTimerFired(backlog, (queue, handled) =>
          Stream.runForEach(queue.stream("s", { batch: 10 }), (handle) => Effect.map(handle.ack, handled)))
        // Before (found by a review): the timer fired only after the last of the 10 000 jobs.
        expect(whenFired).toBeLessThan(backlog / 2)
      }).pipe(Effect.provide(engine.store())), 20_000)
  })
}
