/**
 * Ordering and timing review (docs/concepts.md, docs/queues-and-locks.md, docs/contract.md §3, docs/flow-control.md):
 * claim order and the instants at which work becomes claimable, on every engine.
 *
 * Both defects here sit in the flow-control walk (a queue with limits, even `{}`), which reads the lapsed leases
 * and — in a waiter's read-only probe — the due scheduled jobs with `LIMIT 1000` and no `ORDER BY`
 * (src/internal/sqlite/flowStatements.ts `flowSql.lapsed` / `sql.dueScheduled`; src/internal/pg/flowStatements.ts
 * `lapsed()` / `due()`): past 1000 such rows, the walk sees an arbitrary 1000 of them, not the best ones.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Option } from "effect"
import { engines } from "./contract/harness.js"
import { advance, mustClaim, queueOf, settle, setLimits } from "./contract/support.js"

const waits = <A, E>(fiber: Fiber.Fiber<A, E>) => Effect.map(Fiber.poll(fiber), Option.isNone)

for (const engine of engines) {
  describe(`ordering review — ${engine.name}`, () => {
    const run = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      effect.pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))) as Effect.Effect<A, E, never>

    // CONTRACT §3: "A job is claimable when it is pending with `runAt <= now`, or claimed with a lapsed lease
    // (`now >= claimedUntil`), and not expired. Order: priority descending, then `runAt`, then id."
    // docs/flow-control.md, Fairness: "claims take (priority desc, round, runAt, id) [...] a higher priority
    // still goes first."
    // The same scenario on a queue without limits claims the priority-7 job (the plain claim's lapsed side is
    // `ORDER BY priority DESC, run_at, id LIMIT n`). With limits `{}`, the walk reads the lapsed leases with
    // `LIMIT 1000` and no ORDER BY, so with 1001 lapsed leases the priority-7 one is not among those read.
    // Observed: the claim returns job 1 (priority 0) instead of job 1001 (priority 7), on every engine.
    it.effect("flow-limited claim with more than 1000 lapsed leases takes the highest-priority lapsed job first", () =>
      run(Effect.gen(function*() {
        yield* setLimits("lapsed-cap", {})
        const q = yield* queueOf("lapsed-cap", { visibilityTimeout: "10 seconds" })
        yield* q.enqueueBatch(Array.from({ length: 1000 }, (_, i) => i))
        expect((yield* q.claimBatch("w1", 1000)).length).toBe(1000)
        yield* advance(1)
        const high = yield* q.enqueue("high", { priority: 7 })
        expect((yield* mustClaim(q, "w1")).job.id).toBe(high)
        // Every one of the 1001 leases has lapsed: all are claimable, the priority-7 one first.
        yield* advance("20 seconds")
        const next = yield* mustClaim(q, "w2")
        expect(next.job.id).toBe(high)
      })))

    // docs/waking.md: a waiter wakes at "its next deadline | the soonest future `runAt` or lease end of its
    // queue"; docs/flow-control.md, Waiting: a held-back waiter "sleeps until its next deadline — [...] a
    // scheduled job becoming due"; Cost: "a claim that finds *every* due job held back reads them all (it is
    // then a waiter's read-only probe, not a write)".
    // Group "g" is serial (`groupConcurrency: 1`) behind its running head, with 1000 delayed jobs; group "h" has
    // one delayed job, due at the same instant. At that instant a claim takes h's job (checked below), but the
    // waiting `take` wakes, probes with a read-only walk that reads only 1000 due scheduled rows (no ORDER BY),
    // all of them g's and held back, concludes nothing is claimable and sleeps on — until g's head's lease ends
    // or the fallback poll (an hour here). With 999 of g's jobs instead of 1000 the take gets h's job at once.
    // Observed: the take is still waiting at the instant h's job is due, on every engine.
    it.effect("flow-limited take wakes for a due job that sits past 1000 held-back due jobs", () =>
      run(Effect.gen(function*() {
        yield* setLimits("due-cap", { groupConcurrency: 1 })
        const q = yield* queueOf("due-cap", { visibilityTimeout: "1 hour" })
        yield* q.enqueue("g-head", { group: "g" })
        expect((yield* mustClaim(q, "w1")).job.payload).toBe("g-head")
        yield* q.enqueueBatch(Array.from({ length: 1000 }, (_, i) => i), { group: "g", delay: "10 seconds" })
        const h = yield* q.enqueue("h", { group: "h", delay: "10 seconds" })
        const taker = yield* Effect.fork(q.take("w2"))
        yield* settle
        yield* advance("10 seconds")
        yield* settle
        const tookAtRunAt = !(yield* waits(taker))
        if (!tookAtRunAt) {
          // h's job is claimable at this instant: a plain claim gets it.
          const claimed = yield* q.claim("w3")
          expect(Option.map(claimed, (handle) => handle.job.id)).toEqual(Option.some(h))
        }
        expect(tookAtRunAt, "the take got h's job when it became due").toBe(true)
        expect((yield* Fiber.join(taker)).job.id).toBe(h)
      })))
  })
}
