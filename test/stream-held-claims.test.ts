/**
 * `stream(w, { batch })` claims a batch at once and hands the handles on one
 * at a time: a claim held in the stream ages there, and must never be handed
 * on once another worker holds its job (CONTRACT §3 fencing, §8). Time is the
 * TestClock; the stream is pulled by hand (`Stream.toPull`), one handle per
 * pull, so every step happens at a known instant. The pull's scope (whose end
 * releases what the stream never handed on) closes before the store's.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Option, Stream } from "effect"
import type { Queues } from "../src/index.js"
import { engines } from "./contract/harness.js"
import { whileFailing } from "./contract/faults.js"
import { advance, mustGet, optionalMs, queueOf } from "./contract/support.js"

const second = 1_000

/** Three jobs (ids in order) on a queue whose leases last 10 s, and a stream over it, batch 3, pulled by hand. */
const setup = Effect.gen(function*() {
  const queue = yield* queueOf("held", { visibilityTimeout: "10 seconds" })
  const ids = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }, { n: 3 }])
  const pull = yield* Stream.toPull(queue.stream("streamer", { batch: 3 }))
  /** The next handle the stream hands on (its chunks are single handles). */
  const next = Effect.map(pull, (chunk) => {
    expect(Chunk.size(chunk)).toBe(1)
    return Chunk.unsafeHead(chunk)
  })
  return { queue, ids, next }
})

const leaseEnd = <A>(queue: Queues.Queue<A>, id: number) => Effect.map(mustGet(queue, id), (job) => optionalMs(job.claimedUntil))

for (const engine of engines) {
  describe(`stream: claims held in the stream — ${engine.name}`, () => {
    it.effect("a held claim whose lease lapsed and whose job another worker took is skipped, never handed on", () =>
      Effect.scoped(Effect.gen(function*() {
        const { ids, next, queue } = yield* setup
        const first = yield* next
        expect(first.job.id).toBe(ids[0])
        expect(yield* first.ack).toBe(true)
        // the stream still holds jobs 2 and 3; both leases lapse
        yield* advance("11 seconds")
        const others = yield* queue.claimBatch("other", 1)
        expect(others.map((handle) => handle.job.id)).toEqual([ids[1]])
        const handedOn = yield* next
        // not job 2, which the other worker holds with a valid lease; job 3, lapsed but nobody's since, renewed
        expect(handedOn.job.id).toBe(ids[2])
        expect(yield* leaseEnd(queue, ids[2]!)).toBe(21 * second)
        expect(Option.getOrUndefined((yield* mustGet(queue, ids[1]!)).workerId)).toBe("other")
        expect(yield* others[0]!.heartbeat()).toBe(true)
        expect(yield* handedOn.ack).toBe(true)
        expect(yield* others[0]!.ack).toBe(true)
      })).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a held claim near its lease end is renewed before it is handed on: no other worker can take it", () =>
      Effect.scoped(Effect.gen(function*() {
        const { ids, next, queue } = yield* setup
        const first = yield* next
        expect(yield* first.ack).toBe(true)
        // 4 s left of 10: under half the visibility timeout
        yield* advance("6 seconds")
        const second_ = yield* next
        expect(second_.job.id).toBe(ids[1])
        expect(yield* leaseEnd(queue, ids[1]!)).toBe(16 * second)
        // past the batch's original lease end: only job 3 (still held in the stream, unrenewed) is claimable
        yield* advance("5 seconds")
        const others = yield* queue.claimBatch("other", 3)
        expect(others.map((handle) => handle.job.id)).toEqual([ids[2]])
        expect(yield* second_.ack).toBe(true)
        expect(yield* queue.ackAll(others)).toEqual([true])
      })).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("held claims with most of their lease left are handed on as they are (no renewal)", () =>
      Effect.scoped(Effect.gen(function*() {
        const { ids, next, queue } = yield* setup
        const handles = [yield* next]
        yield* advance("4 seconds") // 6 s left of 10
        handles.push(yield* next)
        yield* advance("1 second") // 5 s left: exactly half
        handles.push(yield* next)
        expect(handles.map((handle) => handle.job.id)).toEqual(ids)
        for (const id of ids) expect(yield* leaseEnd(queue, id)).toBe(10 * second)
        expect(yield* queue.ackAll(handles)).toEqual([true, true, true])
      })).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a renewal that meets a storage failure fails the stream; the claims not handed on are released at its end", () =>
      Effect.gen(function*() {
        const { ids, queue } = yield* Effect.scoped(Effect.gen(function*() {
          const { ids, next, queue } = yield* setup
          expect(yield* (yield* next).ack).toBe(true)
          yield* advance("6 seconds")
          // a pull's failure is `Some(error)` (`None` is the stream's end)
          const error = yield* whileFailing("__alkstore_jobs", "UPDATE", Effect.flip(next))
          expect(Option.map(error, (e) => e._tag)).toEqual(Option.some("SqlError"))
          return { ids, queue }
        }))
        // the stream's end gave back jobs 2 and 3: the one whose renewal failed was never handed on
        for (const id of ids.slice(1)) {
          const job = yield* mustGet(queue, id)
          expect({ state: job.state, attempts: job.attempts }).toEqual({ state: "pending", attempts: 0 })
        }
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
  })
}
