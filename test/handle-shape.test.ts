/**
 * Claim handles have one shape whatever queue they come from (src/internal/handle.ts): the code that reads
 * handles — a worker, `ackAll`, a stream, a handler's `handle.job` — is shared by every queue of every store,
 * and a class made per queue gave each queue's handles a shape of their own, so an application's second queue
 * deoptimized what V8 had compiled for the first (docs/performance.md, "One handle class for every queue").
 * A handle still acts on its own queue: the shape is shared, the queue is not.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { engines } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"

for (const engine of engines) {
  describe(`handle shape — ${engine.name}`, () => {
    it.effect("handles of two queues share one class, and each settles on its own queue", () =>
      Effect.gen(function*() {
        const emails = yield* queueOf("emails")
        const reports = yield* queueOf("reports", { visibilityTimeout: "5 minutes" })
        yield* emails.enqueue({ to: "a" })
        yield* reports.enqueue({ month: 11 })
        const e = Option.getOrThrow(yield* emails.claim("w1"))
        const [r] = yield* reports.claimBatch("w1", 10)
        expect(Object.getPrototypeOf(e) === Object.getPrototypeOf(r!)).toBe(true)
        expect(Object.keys(e)).toEqual(Object.keys(r!))
        expect([e.job.queue, e.job.payload, r!.job.queue, r!.job.payload]).toEqual(["emails", { to: "a" }, "reports", { month: 11 }])
        expect(yield* r!.release).toBe(true)
        expect(yield* e.ack).toBe(true)
        const [emailStats, reportStats] = yield* Effect.all([emails.stats, reports.stats])
        expect([emailStats.pending, emailStats.claimed, reportStats.pending, reportStats.claimed]).toEqual([0, 0, 1, 0])
      }).pipe(Effect.provide(engine.store())))
  })
}
