/**
 * Review of flow control (CONTRACT §9, docs/flow-control.md) on every engine under TestClock: one test per
 * defect, each failing on the code before its fix.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { engines } from "./contract/harness.js"
import { drainPayloads, mustClaim, queueOf, setLimits, type StoreServices } from "./contract/support.js"


for (const engine of engines) {
  describe(`flow control review 2 — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) =>
      Effect.provide(effect, engine.store({ fallbackPoll: "1 hour" }))

    // docs/flow-control.md: "When a queue gets limits for the first time, its existing jobs are numbered into rounds
    // (per group, in enqueue order), so a backlog rotates too"; "each job carries a round, one more than the last live
    // job of its group"; CONTRACT §9: "claims rotate across groups, so one group's backlog never starves another
    // group's work". Dead jobs are not live: a group's only due job must not wait behind one claim per dead job.
    it.effect("a backlog numbered when limits are first set rotates across groups: dead jobs take no rounds", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("dn")
        yield* q.enqueueBatch(["x1", "x2", "x3"], { group: "a", maxAttempts: 1 })
        for (let i = 0; i < 3; i++) {
          const h = yield* mustClaim(q, "w")
          yield* h.fail("boom")
        }
        expect((yield* q.stats).dead).toBe(3)
        yield* q.enqueue("a1", { group: "a" })
        yield* q.enqueueBatch(["b1", "b2", "b3"], { group: "b" })
        yield* setLimits("dn", {})
        const order = yield* drainPayloads(q, 10)
        expect(order.slice(0, 2)).toContain("a1")
      })))
  })
}
