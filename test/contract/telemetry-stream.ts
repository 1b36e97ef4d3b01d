/**
 * A traced stream's per-claim spans (docs/observability.md), written once
 * and applied to every engine: each handle a stream hands on has the
 * consumer span `process` gives a job, read back through a collecting
 * `Tracer`.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Option, Stream, type Tracer } from "effect"
import type { Queues } from "../../src/index.js"
import type { InvalidOptions } from "../../src/StoreError.js"
import type { EngineUnderTest } from "./harness.js"
import { mustGet, queueOf } from "./support.js"
import { collectingTracer } from "./telemetry.js"

let unique = 0
const freshQueue = (label: string) => `${label}-${process.pid}-${++unique}`
const attribute = (span: Tracer.Span, key: string) => span.attributes.get(key)
const parentId = (span: Tracer.Span) => Option.getOrUndefined(span.parent)?.spanId

export const telemetryStreamContract = (engine: EngineUnderTest) =>
  describe(`telemetry of streams — ${engine.name}`, () => {
    it.effect("each handle a stream hands on has its job's consumer span: a root linked to the enqueuer, ended by what settles it", () => {
      const { named, one, tracer } = collectingTracer()
      return Effect.gen(function*() {
        const name = freshQueue("stream-spans")
        const queue = yield* queueOf(name, { maxAttempts: 3 })
        const traced = yield* Effect.withSpan(queue.enqueue({ n: 1 }), "request")
        const untraced = yield* queue.enqueue({ n: 2 }).pipe(Effect.withTracerEnabled(false))
        const left = yield* queue.enqueue({ n: 3 }).pipe(Effect.withTracerEnabled(false))
        const handles = yield* queue.stream("s1", { batch: 3 }).pipe(
          Stream.take(3),
          Stream.mapEffect((handle): Effect.Effect<Queues.JobHandle, Queues.WaitError | InvalidOptions> => {
            if (handle.job.id === traced) {
              return Effect.as(Effect.zipRight(handle.withJobSpan(Effect.withSpan(Effect.void, "consume")), handle.ack), handle)
            }
            if (handle.job.id === untraced) return Effect.as(handle.retry("again"), handle)
            return Effect.succeed(handle) // never settled while the stream runs
          }),
          Stream.runCollect
        )
        expect(Chunk.size(handles)).toBe(3)

        // one round: one claim span, as take's
        expect(Object.fromEntries(one("alkstore.queue.claim").attributes)).toMatchObject({
          "alkstore.queue": name,
          "alkstore.worker.id": "s1",
          "alkstore.count": 3,
          "alkstore.outcome": "claimed"
        })
        const jobs = named("alkstore.queue.process")
        expect(jobs.map((span) => attribute(span, "alkstore.job.id"))).toEqual([traced, untraced, left])
        for (const span of jobs) {
          expect(Object.fromEntries(span.attributes)).toMatchObject({
            "alkstore.queue": name,
            "alkstore.worker.id": "s1",
            "alkstore.job.attempt": 1
          })
          expect(span.kind).toBe("consumer")
          expect(Option.isNone(span.parent)).toBe(true) // one trace per job
          expect(span.status._tag).toBe("Ended")
        }
        const [acked, retried, unsettled] = jobs as [Tracer.Span, Tracer.Span, Tracer.Span]
        expect(jobs.map((span) => attribute(span, "alkstore.outcome"))).toEqual(["acked", "retried", "unsettled"])
        // linked to the span that enqueued it (itself the request's child); enqueued untraced, no link
        const enqueueSpan = one("alkstore.queue.enqueue")
        expect(acked.links.map((link) => [link.span.traceId, link.span.spanId])).toEqual([[enqueueSpan.traceId, enqueueSpan.spanId]])
        expect(acked.links[0]!.span.traceId).toBe(one("request").traceId)
        expect(retried.links).toEqual([])
        // the consumer's own span and the handle's operations are children of the job's span
        expect(parentId(one("consume"))).toBe(acked.spanId)
        expect(parentId(one("alkstore.queue.ack"))).toBe(acked.spanId)
        expect(parentId(one("alkstore.queue.retry"))).toBe(retried.spanId)

        // settled after the stream ended: the operation still works and keeps the job's span ended as it was
        const last = Chunk.unsafeGet(handles, 2)
        expect(yield* last.ack).toBe(true)
        expect(parentId(named("alkstore.queue.ack")[1]!)).toBe(unsettled.spanId)
        expect(attribute(unsettled, "alkstore.outcome")).toBe("unsettled")
        expect(Option.isNone(yield* queue.getJob(left))).toBe(true)
        expect((yield* mustGet(queue, untraced)).attempts).toBe(1)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" })), Effect.withTracer(tracer))
    })

    it.effect("handles acked together (ackAll) end their spans with each one's outcome; fail and release end theirs", () => {
      const { named, tracer } = collectingTracer()
      return Effect.gen(function*() {
        const name = freshQueue("stream-ack-all")
        const queue = yield* queueOf(name)
        const ids = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }])
        const acked = yield* queue.stream("s2", { batch: 2 }).pipe(
          Stream.take(4),
          Stream.grouped(2),
          Stream.mapEffect((group) => {
            const [first, second] = Chunk.toReadonlyArray(group) as [Queues.JobHandle, Queues.JobHandle]
            if (first.job.id === ids[0]) return queue.ackAll(group)
            return Effect.all([first.fail("no"), second.release])
          }),
          Stream.runCollect
        )
        expect(Chunk.toReadonlyArray(acked)).toEqual([[true, true], [true, true]])
        const jobs = named("alkstore.queue.process")
        expect(jobs.map((span) => [attribute(span, "alkstore.job.id"), attribute(span, "alkstore.outcome")])).toEqual([
          [ids[0], "acked"],
          [ids[1], "acked"],
          [ids[2], "dead"],
          [ids[3], "released"]
        ])
        // a round per batch of two
        expect(named("alkstore.queue.claim").map((span) => attribute(span, "alkstore.count"))).toEqual([2, 2])
        // the batch's span links to the enqueue_batch span of each job
        const batch = named("alkstore.queue.enqueue_batch")[0]!
        expect(jobs[0]!.links.map((link) => link.span.spanId)).toEqual([batch.spanId])
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" })), Effect.withTracer(tracer))
    })

    it.effect("untraced (Effect's built-in tracer), a stream makes no spans and withJobSpan is the effect itself", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf(freshQueue("stream-untraced"))
        yield* queue.enqueue({ n: 1 })
        const seen = yield* queue.stream("s3").pipe(
          Stream.take(1),
          Stream.mapEffect((handle) =>
            Effect.zipLeft(handle.withJobSpan(Effect.map(Effect.currentSpan, (span) => span.name)), handle.ack)
          ),
          Stream.runCollect,
          Effect.withSpan("outer")
        )
        expect(Chunk.toReadonlyArray(seen)).toEqual(["outer"])
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
  })
