/**
 * Review: workers (`process`, `stream`, claimBatch/ackAll, heartbeats) under
 * handler failure, interruption and shutdown, on every engine. Each test
 * failed on the code before its fix, because of a defect.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Option, Ref, Scope, Stream } from "effect"
import type { Queues } from "../src/index.js"
import { engines, freshFile } from "./contract/harness.js"
import { advance, queueOf } from "./contract/support.js"
import { settle } from "./contract/workers.js"

const rowOf = <A>(queue: Queues.Queue<A>, id: number) =>
  Effect.map(queue.getJob(id), Option.map((job) => ({ state: job.state, attempts: job.attempts })))

for (const engine of engines) {
  describe(`workers2 review — ${engine.name}`, () => {
    // src/internal/stream.ts (Queue.stream's implementation TSDoc): "A batch is claimed in one round trip but
    // handed on one handle at a time: whatever ends the stream (a `Stream.take`, interruption, a failure
    // downstream), the claims it never handed on are released."
    // docs/waking.md: "When the store closes, its own long-lived work stops first (workers, scheduler runners,
    // `withLock` bodies, giving back what they hold while the connection works)"; docs/decisions.md "A store
    // closing under its own work": forked with `Effect.fork`, such work "is interrupted when [its] parent ends —
    // after `provide` closed the store: [its] finalizers ran on a closed connection, the job spent an attempt and
    // sat claimed until its lease lapsed". `process` is guarded against exactly this (lifetime.ts); a `stream`
    // consumer forked the same way is not: the claims it held unhanded stay claimed with an attempt spent until
    // their lease lapses (on their last attempt, the next claim buries them unrun).
    it.effect("a stream forked in the program: the store's close gives back the claims it held and never handed on", () =>
      Effect.gen(function*() {
        const filename = freshFile("stream-close")
        const got = yield* Deferred.make<number>()
        const consumer = yield* Ref.make<Option.Option<Fiber.RuntimeFiber<void, unknown>>>(Option.none())
        const ids = yield* Ref.make<ReadonlyArray<number>>([])
        // The application: a stream consumer forked in the program the store is provided to (as a `process`
        // worker may be); the consumer works on the first handle while the stream holds the other two.
        const program = Effect.gen(function*() {
          const queue = yield* queueOf("streamed", { visibilityTimeout: "1 hour" })
          yield* Ref.set(ids, yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }, { n: 3 }]))
          const fiber = yield* Effect.fork(
            Stream.runForEach(queue.stream("w", { batch: 3 }), (handle) => Effect.zipRight(Deferred.succeed(got, handle.job.id), Effect.never))
          )
          yield* Ref.set(consumer, Option.some(fiber))
          yield* Deferred.await(got)
        })
        const app = yield* Effect.forkDaemon(program.pipe(Effect.provide(engine.store({ filename, fallbackPoll: "1 hour" }))))
        yield* Fiber.await(app)
        yield* Fiber.await(Option.getOrThrow(yield* Ref.get(consumer)))
        const [first, ...unhanded] = yield* Ref.get(ids)
        expect(yield* Deferred.await(got)).toBe(first)
        const rows = yield* Effect.flatMap(queueOf("streamed"), (queue) => Effect.forEach(unhanded, (id) => rowOf(queue, id))).pipe(
          Effect.provide(engine.store({ filename, fallbackPoll: "1 hour" }))
        )
        // the two claims the stream never handed on: pending again, attempt given back
        expect(rows).toEqual(unhanded.map(() => Option.some({ state: "pending", attempts: 0 })))
      }), 10_000)

    // docs/waking.md: "When the store closes, its own long-lived work stops first (workers, scheduler runners,
    // `withLock` bodies, giving back what they hold while the connection works)"; docs/decisions.md "A store closing
    // under its own work": "The store stops the `process` workers ... first"; Queue.process TSDoc: "Interruption
    // stops claiming and releases in-flight claims (no attempt spent)". The close interrupts its running work one
    // fiber after another (lifetime.ts), so while one worker's uninterruptible handler is awaited, every other
    // worker of the store goes on: its handler runs to the end and is acked, and it claims and starts new jobs
    // after the close began (for as long as that one handler takes: without bound).
    it.effect("store close: a second worker is stopped at once, not after the first's uninterruptible handler", () =>
      Effect.gen(function*() {
        const filename = freshFile("close-order")
        const scope = yield* Scope.make()
        const ctx = yield* Layer.buildWithScope(engine.store({ filename, fallbackPoll: "1 hour" }), scope)
        const a = yield* Effect.provide(queueOf("slow"), ctx)
        const b = yield* Effect.provide(queueOf("quick", { visibilityTimeout: "1 hour" }), ctx)
        const gate = yield* Deferred.make<void>()
        const aStarted = yield* Deferred.make<void>()
        const bFirstStarted = yield* Deferred.make<void>()
        let bFinished = 0
        let bStarted = 0
        yield* Effect.forkDaemon(Effect.provide(a.process("a", () =>
          Effect.uninterruptible(Effect.zipRight(Deferred.succeed(aStarted, undefined), Deferred.await(gate)))), ctx))
        yield* settle
        yield* Effect.forkDaemon(Effect.provide(b.process("b", () =>
          Effect.zipRight(Effect.zipRight(Effect.sync(() => bStarted++), Deferred.succeed(bFirstStarted, undefined)), Effect.zipRight(Effect.sleep("10 seconds"), Effect.sync(() => bFinished++)))), ctx))
        yield* Effect.provide(a.enqueue({ n: 1 }), ctx)
        const bId = yield* Effect.provide(b.enqueue({ n: 1 }), ctx)
        // awaited, not settled: on PostgreSQL the claim is a round trip over the network
        yield* Deferred.await(aStarted)
        yield* Deferred.await(bFirstStarted)
        expect(bStarted).toBe(1)
        const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
        yield* settle
        yield* advance("10 seconds")
        yield* settle
        // work that arrives while the store is closing (the application still serves requests)
        yield* Effect.provide(b.enqueue({ n: 2 }), ctx)
        yield* settle
        const finishedDuringClose = bFinished
        const startedDuringClose = bStarted - 1
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.join(closing)
        const row = yield* Effect.flatMap(queueOf("quick"), (q) => rowOf(q, bId)).pipe(
          Effect.provide(engine.store({ filename, fallbackPoll: "1 hour" }))
        )
        // `b` was stopped when the close began: its handler interrupted, its claim released, nothing claimed after
        expect({ finishedDuringClose, startedDuringClose, row }).toEqual({
          finishedDuringClose: 0,
          startedDuringClose: 0,
          row: Option.some({ state: "pending", attempts: 0 })
        })
      }), 10_000)
  })
}
