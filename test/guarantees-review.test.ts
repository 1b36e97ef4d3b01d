/**
 * Guarantees review (docs/guarantees.md, docs/concepts.md): expiry against the claims a `stream` holds.
 *
 * A `stream(w, { batch })` claims a batch at once and hands the handles on one at a time. A held claim whose
 * lease lapsed meanwhile is renewed with its heartbeat before it is handed on (src/internal/stream.ts) — but
 * nothing looked at the job's expiry, so a job whose lease *and* expiry both passed while it sat in the stream
 * (what maintenance, a claim, or a keyed enqueue would move to dead as "expired") was revived and handed to the
 * consumer after its expiry (fixed: it is given back, and the next claim buries it).
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, DateTime, Effect, Option, Stream } from "effect"
import { engines } from "./contract/harness.js"
import { advance, mustGet, queueOf } from "./contract/support.js"

for (const engine of engines) {
  describe(`guarantees review — ${engine.name}`, () => {
    // docs/concepts.md, "A job's life": "**Expiry** (`expires` on the queue or the enqueue): a job is never
    // delivered at or after its expiry. [...] A claim in flight is not cut short: a claimed job dies of expiry
    // only once its lease lapsed too." CONTRACT §3: "`expires` (the job is never delivered at or after
    // `enqueue time + expires`)"; maintenance moves "claimed jobs whose lease and expiry have both passed, to
    // dead as "expired"".
    it.effect("stream: a held claim whose lease and expiry both passed is not handed on after its expiry", () =>
      Effect.scoped(Effect.gen(function*() {
        const queue = yield* queueOf("held-expiry", { visibilityTimeout: "10 seconds", expires: "15 seconds" })
        const ids = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }])
        const pull = yield* Stream.toPull(queue.stream("streamer", { batch: 2 }))
        const next = Effect.map(pull, Chunk.unsafeHead)
        const first = yield* next
        expect(first.job.id).toBe(ids[0])
        expect(yield* first.ack).toBe(true)
        // Job 2 waits in the stream: its lease lapses at 10 s, its expiry is at 15 s. At 16 s both have passed.
        yield* advance("16 seconds")
        const fresh = yield* queue.enqueue({ n: 3 }) // expires at 31 s: deliverable
        const handedOn = yield* next
        const now = yield* DateTime.now
        // Observed: job 2 (expiresAt 15 000) is renewed and handed on at 16 000.
        expect({
          id: handedOn.job.id,
          pastExpiry: Option.match(handedOn.job.expiresAt, {
            onNone: () => false,
            onSome: (at) => DateTime.lessThanOrEqualTo(at, now)
          })
        }).toEqual({ id: fresh, pastExpiry: false })
        expect(yield* handedOn.ack).toBe(true)
        const expired = yield* mustGet(queue, ids[1]!)
        expect({ state: expired.state, lastError: expired.lastError }).toEqual({
          state: "dead",
          lastError: Option.some("expired")
        })
      })).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
  })
}
