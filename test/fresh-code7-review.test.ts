/**
 * Fresh-code review 7 (the changes 1d69af9..HEAD under src/): claims that read their Clock once they hold the lock,
 * the wake handed on (`WakeHub.handOn`), the flow walk burying doomed lapsed claims before any limit is asked
 * (`doomedAhead` with the `buried` set), lock acquires renewed after a wait, RateLimiter takes judged when made,
 * PostgreSQL's NOTIFY in bury/cancel/ackMany, and the PersistedQueue prefetch off for limited queues. Each test
 * here fails on the current code.
 *
 * Checked and found consistent (probes removed): test/properties/flow-differential.test.ts with seeds 101, 202,
 * 303, 404, 505, 606, 707, 808 (all agree); 18 concurrent claimers (claim and claimBatch) over three stores on one
 * database under `concurrency` + `rate` + `groupConcurrency`: no job claimed twice, every cap exact, on all four
 * engines; 12 concurrent first takes of a new RateLimiter key (fixed-window and token-bucket) over three stores,
 * keys with quotes, backslash, `%`, `_`, `*` and non-ASCII: exactly `limit` granted on all four engines; a doomed
 * lapsed claim ahead of a candidate on the *same* lapsed page (fixed by 85d2c3c) and one on the next page when
 * the current page is exhausted (headOf loads it before the candidate is judged).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { engines } from "./contract/harness.js"
import { advance, queueOf, setLimits } from "./contract/support.js"

for (const engine of engines) {
  describe(`fresh-code7 review — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, any>) =>
      effect.pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))) as Effect.Effect<A, E, never>

    // docs/flow-control.md, "A slot freed is claimable at once": "A lapsed claim with its attempts spent (or
    // expired), which the next claim moves to dead, holds neither a slot nor its group's place"; "Metrics and
    // repair": a candidate a claim meets with its attempts spent "takes no slot ..., and the claim goes on to the
    // next candidate"; `QueueStats.heldBack`: "due pending jobs that a claim could not take right now".
    // Group "g" (`groupConcurrency: 1`) holds D, a lapsed claim with its attempts spent (priority 0), ahead of the
    // pending job c (priority 5) in enqueue order; 1000 other doomed lapsed claims of priority 3 fill the walk's
    // first lapsed page (EXTRA_PAGE = 1000). `stats.heldBack` is 0 (the dry walk reads every lapsed page and passes
    // over D), yet the first `claim` returns None: when the walk meets c, `doomedAhead(lapsed.page, c, buried)`
    // (src/internal/flow.ts) sees only the current page, D is on the next one, so D counts as a live job ahead and
    // c waits; the walk then buries the 1000 and D and ends with nothing claimed. The second claim takes c.
    // Fails on all four engines.
    it.effect("a claim takes a serial group's job whose doomed lapsed claim ahead lies past the first lapsed page", () =>
      run(Effect.gen(function*() {
        const name = "deep-lapsed"
        const q = yield* queueOf(name, { visibilityTimeout: "1 minute", maxAttempts: 1 })
        yield* q.enqueue("D", { group: "g", priority: 0 })
        expect(Option.map(yield* q.claim("w"), (h) => h.job.payload)).toEqual(Option.some("D"))
        yield* q.enqueueBatch(Array.from({ length: 1000 }, (_, i) => `y${i}`), { priority: 3 })
        let claimed = 0
        while (claimed < 1000) claimed += (yield* q.claimBatch("w", 100)).length
        yield* q.enqueue("c", { group: "g", priority: 5 })
        yield* setLimits(name, { groupConcurrency: 1 })
        yield* advance("2 minutes") // every lease lapsed; every claim has its one attempt spent
        const heldBack = (yield* q.stats).heldBack
        const first = Option.map(yield* q.claim("w2"), (h) => h.job.payload)
        const second = Option.map(yield* q.claim("w2"), (h) => h.job.payload)
        // observed: { heldBack: 0, first: None, second: Some("c") }
        expect({ heldBack, first, second }).toEqual({ heldBack: 0, first: Option.some("c"), second: Option.none() })
      })), 120_000)
  })
}
