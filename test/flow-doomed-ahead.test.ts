import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, TestClock } from "effect"
import { Queues } from "../src/index.js"
import { engines } from "./contract/harness.js"

const visibilityMs = 2_000

/**
 * Found by test/properties/flow-differential.test.ts (seed 7, long sequences), shrunk by hand; each failed on
 * the code before its fix (src/internal/flow.ts: a claim buries a doomed candidate before any limit is asked, and
 * passes over the doomed claims ahead of a candidate, as the dry walk does). CONTRACT §3 / docs/flow-control.md, "Metrics
 * and repair": a candidate a claim meets "with its attempts spent is moved to dead on the way ..., takes no slot
 * ..., and the claim goes on to the next candidate"; "A lapsed claim with its attempts spent ... holds neither a
 * slot nor its group's place"; "Dead jobs ... no longer hold their group". Yet under `groupConcurrency: 1` a
 * claim meets a due job whose only live job ahead in its group is such a doomed lapsed claim met *later* in walk
 * order (a lower priority): the claim holds the due job back behind it (`waitsFrom`), then buries the doomed one,
 * and returns nothing. `stats` (the dry walk passes over doomed claims) says the job is not held back, and the
 * very next claim takes it. All four engines (the walk in src/internal/flow.ts is shared).
 */
for (const engine of engines) {
  describe(`flow control: a doomed lapsed claim ahead in a serial group — ${engine.name}`, () => {
    it.effect("a claim behind a doomed lapsed claim of its group (lower priority) takes the due job", () =>
      Effect.gen(function*() {
        const queues = yield* Queues.Queues
        yield* queues.setLimits("doomed-ahead", { groupConcurrency: 1 })
        const q = yield* queues.queue("doomed-ahead", { visibilityTimeout: visibilityMs, maxAttempts: 1 })
        yield* q.enqueue("first", { priority: -1 })
        expect(Option.map(yield* q.claim("crashed"), (h) => h.job.payload)).toEqual(Option.some("first"))
        yield* q.enqueue("second") // priority 0, behind "first" in its (default) group
        yield* TestClock.adjust(visibilityMs + 1) // "first"'s worker died on its last attempt: its lease lapsed
        const stats = yield* q.stats
        const claimed = Option.map(yield* q.claim("w"), (h) => h.job.payload)
        const next = Option.map(yield* q.claim("w"), (h) => h.job.payload)
        // observed: heldBack 0 and pending 1, yet the claim takes nothing (it buries "first"); the next one takes "second"
        expect({ heldBack: stats.heldBack, pending: stats.pending, claimed, next })
          .toEqual({ heldBack: 0, pending: 1, claimed: Option.some("second"), next: Option.none() })
      }).pipe(Effect.provide(engine.store())))

    // The same with the doomed claim met first (a higher priority), itself held back by an older doomed claim of
    // its group: the walk marks the group as waiting from it, buries the older one, and never comes back to it.
    it.effect("a claim behind two doomed lapsed claims of its group takes the due job", () =>
      Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const q = yield* queues.queue("doomed-chain", { visibilityTimeout: visibilityMs, maxAttempts: 1 })
        yield* q.enqueue("old", { priority: 0 })
        yield* q.enqueue("urgent", { priority: 1 })
        yield* q.enqueue("next", { priority: 0 })
        yield* q.claimBatch("crashed", 2) // "urgent", "old" (no limits yet)
        yield* queues.setLimits("doomed-chain", { groupConcurrency: 1 })
        yield* TestClock.adjust(visibilityMs + 1) // both leases lapse on their last attempt
        const claimed = Option.map(yield* q.claim("w"), (h) => h.job.payload)
        const stats = yield* q.stats
        // observed: None ("old" buried, "urgent" left claimed and lapsed, holding "next" back)
        expect({ claimed, dead: stats.dead }).toEqual({ claimed: Option.some("next"), dead: 2 })
      }).pipe(Effect.provide(engine.store())))
  })
}
