/**
 * Expiry against idempotency keys and repair (CONTRACT §3): an expired job
 * does not hold its key, whether or not maintenance has swept it yet, and
 * `requeueDead` of an expired job runs it (the passed expiry is cleared).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, TestClock } from "effect"
import type { EngineUnderTest } from "./harness.js"
import { claimsNothing, jobCount, ms, mustClaim, mustGet, optionalMs, queueOf, type StoreServices, advance } from "./support.js"

export const queuesExpiryContract = (engine: EngineUnderTest) =>
  describe(`queues: expiry, keys and repair — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    describe("an expired job frees its key before maintenance sweeps it", () => {
      it.effect("a pending expired holder: the new job is written, the old one dies \"expired\"", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("keys")
          const first = yield* q.enqueue(1, { key: "k", expires: "1 second" })
          yield* advance(999)
          expect(yield* q.enqueue(2, { key: "k" })).toBe(first)
          yield* advance(1)
          const second = yield* q.enqueue(3, { key: "k" })
          expect(second).not.toBe(first)
          const old = yield* mustGet(q, first)
          expect(old.state).toBe("dead")
          expect(Option.getOrUndefined(old.lastError)).toBe("expired")
          expect(optionalMs(old.diedAt)).toBe(1_000)
          // the new job holds the key and is the one delivered
          expect(yield* q.enqueue(4, { key: "k" })).toBe(second)
          expect((yield* mustClaim(q, "w")).job).toMatchObject({ id: second, payload: 3 })
          yield* claimsNothing(q)
          expect(yield* jobCount).toBe(2)
        })))

      it.effect("a delayed holder whose expiry passed before it came due frees its key too", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("keys", { backoffBase: "1 hour" })
          const first = yield* q.enqueue(1, { key: "k", expires: "1 minute" })
          // retried with a backoff past its expiry: scheduled, and expired once the minute is over
          expect(yield* (yield* mustClaim(q, "w")).retry("transient")).toBe("retried")
          yield* advance("1 minute")
          const second = yield* q.enqueue(2, { key: "k" })
          expect(second).not.toBe(first)
          expect((yield* mustGet(q, first)).state).toBe("dead")
        })))

      /** A keyed job claimed with a 1 minute lease, 30 s on: its 10 s expiry passed, its lease is live. */
      const inFlightPastExpiry = Effect.gen(function*() {
        const q = yield* queueOf("keys", { visibilityTimeout: "1 minute" })
        const first = yield* q.enqueue(1, { key: "k", expires: "10 seconds" })
        const handle = yield* mustClaim(q, "w")
        yield* advance("30 seconds")
        // a worker is on it: the work the key names is in progress, so the enqueue deduplicates
        expect(yield* q.enqueue(2, { key: "k" })).toBe(first)
        expect((yield* mustGet(q, first)).state).toBe("claimed")
        expect(yield* jobCount).toBe(1)
        return { q, first, handle }
      })

      it.effect("a claimed holder holds its key while its lease is live, even past its expiry; not after", () =>
        run(Effect.gen(function*() {
          const { first, handle, q } = yield* inFlightPastExpiry
          // once the lease lapsed too, the holder is expired and the key free
          yield* advance("30 seconds")
          const second = yield* q.enqueue(3, { key: "k" })
          expect(second).not.toBe(first)
          const old = yield* mustGet(q, first)
          expect(old.state).toBe("dead")
          expect(Option.getOrUndefined(old.lastError)).toBe("expired")
          expect(yield* handle.ack).toBe(false)
        })))

      it.effect("the in-flight holder past its expiry that finishes acks normally, and frees the key", () =>
        run(Effect.gen(function*() {
          const { first, handle, q } = yield* inFlightPastExpiry
          expect(yield* handle.ack).toBe(true)
          const next = yield* q.enqueue(3, { key: "k" })
          expect(next).not.toBe(first)
          expect((yield* mustGet(q, next)).payload).toBe(3)
        })))

      it.effect("a keyed batch of one, and requeueDead, free an unswept expired holder's key the same way", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("keys")
          const first = yield* q.enqueue(1, { key: "k" })
          expect(yield* (yield* mustClaim(q, "w")).fail("broken")).toBe(true)
          const holder = yield* q.enqueue(2, { key: "k", expires: "1 second" })
          yield* advance("1 second")
          // the key's live holder expired (not yet swept): the dead job may take the key back
          expect(yield* q.requeueDead(first)).toBe(true)
          expect((yield* mustGet(q, first)).state).toBe("pending")
          expect((yield* mustGet(q, holder)).state).toBe("dead")
          expect(yield* q.enqueue(3, { key: "k" })).toBe(first)

          const other = yield* queueOf("keys-batch")
          const [old] = yield* other.enqueueBatch([1], { key: "b", expires: "1 second" })
          yield* advance("1 second")
          const [fresh] = yield* other.enqueueBatch([2], { key: "b" })
          expect(fresh).not.toBe(old)
          expect((yield* mustGet(other, old!)).state).toBe("dead")
        })))
    })

    describe("requeueDead of an expired job", () => {
      it.effect("clears its expiry: the job runs, with its full attempts", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("requeue")
          const id = yield* q.enqueue("x", { expires: "1 second" })
          yield* advance("1 second")
          yield* claimsNothing(q)
          expect(Option.getOrUndefined((yield* mustGet(q, id)).lastError)).toBe("expired")
          yield* advance("1 hour")
          expect(yield* q.requeueDead(id)).toBe(true)
          const requeued = yield* mustGet(q, id)
          expect(requeued).toMatchObject({ state: "pending", attempts: 0 })
          expect(Option.isNone(requeued.expiresAt)).toBe(true)
          expect(ms(requeued.runAt)).toBe(3_601_000)
          const handle = yield* mustClaim(q, "w")
          expect(handle.job.id).toBe(id)
          expect(yield* handle.ack).toBe(true)
        })))

      it.effect("a job that died otherwise loses its expiry too: the operator's requeue runs it whenever it is claimed", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("requeue")
          const id = yield* q.enqueue("x", { expires: "1 hour" })
          expect(yield* (yield* mustClaim(q, "w")).fail("broken")).toBe(true)
          yield* advance("1 minute")
          expect(yield* q.requeueDead(id)).toBe(true)
          expect(Option.isNone((yield* mustGet(q, id)).expiresAt)).toBe(true)
          yield* advance("2 hours")
          expect((yield* mustClaim(q, "w")).job.id).toBe(id)
        })))
    })
  })
