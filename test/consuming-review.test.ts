/**
 * Review of the consuming side (take, stream, process, claim/claimBatch and
 * the handle operations). Each test here failed on the code before its fix.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Stream } from "effect"
import { sqliteFromClient, sqliteOwned } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"

const backlog = 10_000

for (const engine of [sqliteOwned, sqliteFromClient]) {
  describe(`a stream's drain and the event loop — ${engine.name}`, () => {
    // docs/decisions.md, "A worker's turns of the event loop": a consumer handing job after job on in place must give
    // the event loop a turn, or "heartbeats, lock renewals and the leader's lease in the same process missed their beats".
    it.live("a timer due during a stream's drain of jobs acked in place fires long before the backlog is gone", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("drain")
        for (let i = 0; i < backlog; i += 1000) yield* queue.enqueueBatch(Array.from({ length: 1000 }, (_, n) => i + n))
        let handled = 0
        const timer = yield* Effect.fork(Effect.async<number>((resume) => {
          const pending = setTimeout(() => resume(Effect.succeed(handled)), 5)
          return Effect.sync(() => clearTimeout(pending))
        }))
        const consumer = yield* Effect.fork(Stream.runForEach(queue.stream("s", { batch: 10 }), (handle) =>
          Effect.map(handle.ack, () => {
            handled++
          })))
        const handledWhenFired = yield* Fiber.join(timer)
        yield* Effect.sleep("1 millis").pipe(Effect.repeat({ until: () => handled === backlog }))
        yield* Fiber.interrupt(consumer)
        expect(handledWhenFired).toBeLessThan(backlog / 2)
        expect(handled).toBe(backlog)
      }).pipe(Effect.provide(engine.store())), 20_000)
  })
}
