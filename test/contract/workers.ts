/**
 * The long-running consumers (`process`, `stream`, `take`) over their whole
 * life: a heartbeat-enabled worker keeps draining, a stream that ends early
 * gives back what it claimed and never handed on, and a waiter that failed
 * leaves nothing behind that could swallow a live waiter's wake. Time is the
 * TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Option, Ref, Stream, TestClock } from "effect"
import type { Queues } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"
import { whileFailing } from "./faults.js"
import { optionalMs, queueOf, advance } from "./support.js"

const second = 1_000

/** Lets forked fibers run until every one of them waits again (no time passes). */
export const settle = Effect.gen(function*() {
  for (let i = 0; i < 5; i++) yield* advance("0 millis")
})

/** What a handler saw of its own job's lease: when it started and after it ran. */
interface LeaseSeen {
  readonly id: number
  readonly startedAt: number
  readonly claimedUntilAtStart: number | undefined
  readonly claimedUntilAtEnd: number | undefined
}

/** The state and attempts of every job of `queue` still stored, by id. */
const rowsOf = <A>(queue: Queues.Queue<A>, ids: ReadonlyArray<number>) =>
  Effect.forEach(ids, (id) =>
    Effect.map(queue.getJob(id), Option.map((job) => ({ id, state: job.state, attempts: job.attempts }))))

export const workersContract = (engine: EngineUnderTest) =>
  describe(`long-running consumers — ${engine.name}`, () => {
    describe("process with heartbeat", () => {
      it.effect("drains job after job, extending each lease while its handler runs; interruption returns", () =>
        Effect.gen(function*() {
          const queue = yield* queueOf("beating", { visibilityTimeout: "30 seconds" })
          const ids = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }, { n: 3 }])
          const seen = yield* Ref.make<ReadonlyArray<LeaseSeen>>([])
          // a daemon, so that a worker stuck in its first job fails the assertions below rather than the test's teardown
          const worker = yield* Effect.forkDaemon(
            queue.process("w", (job) =>
              Effect.gen(function*() {
                const atStart = optionalMs(Option.getOrThrow(yield* queue.getJob(job.id)).claimedUntil)
                const now = yield* TestClock.currentTimeMillis
                // outlives a third of the visibility timeout twice over
                yield* Effect.sleep("25 seconds")
                const atEnd = optionalMs(Option.getOrThrow(yield* queue.getJob(job.id)).claimedUntil)
                yield* Ref.update(seen, (all) => [
                  ...all,
                  { id: job.id, startedAt: now, claimedUntilAtStart: atStart, claimedUntilAtEnd: atEnd }
                ])
              }), { heartbeat: true })
          )
          for (let i = 0; i < 3; i++) {
            yield* settle
            yield* advance("25 seconds")
          }
          yield* settle
          const leases = yield* Ref.get(seen)
          expect(leases.map((lease) => lease.id)).toEqual(ids)
          leases.forEach((lease, i) => {
            expect(lease.startedAt).toBe(i * 25 * second)
            expect(lease.claimedUntilAtStart).toBe(lease.startedAt + 30 * second)
            // beats at +10 s and +20 s: the lease now ends 30 s after the last one
            expect(lease.claimedUntilAtEnd).toBe(lease.startedAt + 50 * second)
          })
          // every job was acked (gone), none is left claimed
          expect(yield* rowsOf(queue, ids)).toEqual(ids.map(() => Option.none()))
          expect((yield* queue.stats).claimed).toBe(0)

          // a job in flight when the worker is interrupted: interruption returns and releases it
          const last = yield* queue.enqueue({ n: 4 })
          yield* settle
          yield* advance("12 seconds")
          expect(Option.getOrThrow(yield* queue.getJob(last)).state).toBe("claimed")
          const exit = yield* Fiber.interrupt(worker)
          expect(Exit.isInterrupted(exit)).toBe(true)
          expect(yield* rowsOf(queue, [last])).toEqual([Option.some({ id: last, state: "pending", attempts: 0 })])
          // and no heartbeat outlives the worker
          const released = optionalMs(Option.getOrThrow(yield* queue.getJob(last)).claimedUntil)
          yield* advance("1 minute")
          expect(optionalMs(Option.getOrThrow(yield* queue.getJob(last)).claimedUntil)).toBe(released)
        }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
    })

    describe("process without heartbeat", () => {
      it.effect("a handler that outlived its lease, reclaimed by nobody, is acked and the worker moves on to the next job", () =>
        Effect.gen(function*() {
          const queue = yield* queueOf("outlived", { visibilityTimeout: "10 seconds" })
          // the first job is claimed first and, its lease lapsed, would come first again
          const [first, second_] = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }])
          const runs = yield* Ref.make<ReadonlyArray<number>>([])
          const worker = yield* Effect.forkDaemon(
            queue.process("w", (job) =>
              Effect.gen(function*() {
                yield* Ref.update(runs, (all) => [...all, job.id])
                if (job.id === first) yield* Effect.sleep("15 seconds") // past its 10 s lease, no heartbeat
              }))
          )
          yield* settle
          yield* advance("15 seconds")
          yield* settle
          // the ack of the lapsed claim still held its token: the job is gone and ran once, and the
          // step that acked it claimed the other job (not the acked one again)
          expect(yield* Ref.get(runs)).toEqual([first, second_])
          expect(yield* rowsOf(queue, [first!, second_!])).toEqual([Option.none(), Option.none()])
          yield* Fiber.interrupt(worker)
        }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
    })

    describe("stream with batches", () => {
      /** Ten single-attempt jobs; a stream over them with batch 10 claims them all in one round trip. */
      const tenJobs = Effect.gen(function*() {
        const queue = yield* queueOf("batched", { maxAttempts: 1 })
        const ids = yield* queue.enqueueBatch(Array.from({ length: 10 }, (_, n) => ({ n })))
        return { queue, ids }
      })

      /** The jobs the stream never handed on are pending again, attempt given back, and deliverable. */
      const givenBack = <A>(queue: Queues.Queue<A>, ids: ReadonlyArray<number>, handed: number) =>
        Effect.gen(function*() {
          const rest = ids.slice(handed)
          expect(yield* rowsOf(queue, rest)).toEqual(rest.map((id) => Option.some({ id, state: "pending", attempts: 0 })))
          expect(yield* queue.stats).toMatchObject({ claimed: 0, pending: rest.length, dead: 0 })
          // with maxAttempts 1 they are still delivered, not buried as "max attempts exceeded"
          const again = yield* queue.claimBatch("later", 10)
          expect(again.map((handle) => handle.job.id)).toEqual(rest)
          expect(again.map((handle) => handle.job.attempts)).toEqual(rest.map(() => 1))
          expect(yield* queue.ackAll(again)).toEqual(rest.map(() => true))
        })

      it.effect("a consumer that takes fewer than a batch: the rest is released when the stream ends", () =>
        Effect.gen(function*() {
          const { ids, queue } = yield* tenJobs
          const taken = yield* queue.stream("w", { batch: 10 }).pipe(
            Stream.tap((handle) => handle.ack),
            Stream.take(3),
            Stream.runCollect
          )
          expect(Chunk.toReadonlyArray(taken).map((handle) => handle.job.id)).toEqual(ids.slice(0, 3))
          yield* givenBack(queue, ids, 3)
        }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

      it.effect("an interrupted consumer: what was never handed on is released", () =>
        Effect.gen(function*() {
          const { ids, queue } = yield* tenJobs
          const second = yield* Deferred.make<void>()
          const consumer = yield* Effect.fork(
            queue.stream("w", { batch: 10 }).pipe(
              Stream.zipWithIndex,
              Stream.mapEffect(([handle, i]) =>
                Effect.zipRight(handle.ack, i === 1 ? Effect.zipRight(Deferred.succeed(second, undefined), Effect.never) : Effect.void)
              ),
              Stream.runDrain
            )
          )
          yield* Deferred.await(second)
          expect(Exit.isInterrupted(yield* Fiber.interrupt(consumer))).toBe(true)
          expect(yield* rowsOf(queue, ids.slice(0, 2))).toEqual([Option.none(), Option.none()])
          yield* givenBack(queue, ids, 2)
        }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

      it.effect("a failure downstream: what was never handed on is released", () =>
        Effect.gen(function*() {
          const { ids, queue } = yield* tenJobs
          const error = yield* queue.stream("w", { batch: 10 }).pipe(
            Stream.zipWithIndex,
            Stream.mapEffect(([handle, i]) => Effect.zipRight(handle.ack, i === 3 ? Effect.fail("downstream broke") : Effect.void)),
            Stream.runDrain,
            Effect.flip
          )
          expect(error).toBe("downstream broke")
          yield* givenBack(queue, ids, 4)
        }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
    })

    describe("process through a storage failure", () => {
      it.effect("a worker that meets a SqlError keeps going (logged, retried) and drains once the storage heals", () =>
        Effect.gen(function*() {
          const queue = yield* queueOf("healing", { visibilityTimeout: "30 seconds" })
          const handled = yield* Ref.make<ReadonlyArray<number>>([])
          const first = yield* queue.enqueue({ n: 1 })
          const worker = yield* whileFailing(
            "__alkstore_jobs",
            "UPDATE",
            Effect.gen(function*() {
              // every claim fails (a dropped connection, a restarting server): the worker stays
              const worker = yield* Effect.forkDaemon(
                queue.process("w", (job) => Ref.update(handled, (all) => [...all, job.id]))
              )
              for (let i = 0; i < 4; i++) {
                yield* settle
                yield* advance("1 second")
              }
              expect(Option.isNone(yield* Fiber.poll(worker))).toBe(true)
              expect(yield* Ref.get(handled)).toEqual([])
              return worker
            })
          )
          // healed: within its retry spacing it claims the job it could not, and then new work
          yield* advance("5 seconds")
          yield* settle
          expect(yield* Ref.get(handled)).toEqual([first])
          const second = yield* queue.enqueue({ n: 2 })
          yield* settle
          expect(yield* Ref.get(handled)).toEqual([first, second])
          expect(Option.isNone(yield* Fiber.poll(worker))).toBe(true)
          expect(Exit.isInterrupted(yield* Fiber.interrupt(worker))).toBe(true)
        }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
    })

    describe("wake tickets", () => {
      it.effect("a take that failed while waiting leaves no ticket to swallow the next signal", () =>
        Effect.gen(function*() {
          const queue = yield* queueOf("tickets")
          const stale = yield* queue.enqueue({ n: 0 })
          // a storage failure between taking the ticket and waiting on it: the read sees the job, the claim fails
          const failures = yield* whileFailing(
            "__alkstore_jobs",
            "UPDATE",
            Effect.all(Array.from({ length: 3 }, (_, i) => Effect.flip(queue.take(`doomed-${i}`))))
          )
          expect(failures.map((error) => error._tag)).toEqual(["SqlError", "SqlError", "SqlError"])
          expect(yield* queue.cancel(stale)).toBe(true)

          const live = yield* Effect.fork(queue.take("live"))
          yield* settle
          expect(Option.isNone(yield* Fiber.poll(live))).toBe(true)
          const id = yield* queue.enqueue({ n: 1 })
          // (settle moves no time: on an asynchronous engine it also lets the woken claim's round trip land)
          yield* settle
          // woken by the enqueue's own signal at once: no time passed, no other wake could come
          const taken = yield* Fiber.poll(live)
          expect(Option.map(taken, Exit.map((handle) => handle.job.id))).toEqual(Option.some(Exit.succeed(id)))
        }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
    })
  })
