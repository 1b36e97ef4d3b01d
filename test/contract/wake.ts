import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Fiber, Option, Ref, TestClock } from "effect"
import * as fs from "node:fs"
import { Outbox, Queues } from "../../src/index.js"
import { type EngineUnderTest, freshFile } from "./harness.js"
import { settle as settleStore, advance } from "./support.js"

/** Lets forked fibers run up to their next wait under TestClock. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
  yield* Effect.sleep(Duration.millis(20)).pipe(Effect.withClock(realClock))
  yield* settleStore
})

import { Clock } from "effect"
const realClock = Clock.make()

export const wakeContract = (engine: EngineUnderTest) =>
  describe(`waking — ${engine.name}`, () => {
    it.effect("a delayed job is delivered to a waiting take when its runAt passes (TestClock)", () =>
      Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("delayed")
        yield* queue.enqueue({ n: 1 }, { delay: "30 seconds" })
        const taker = yield* Effect.fork(queue.take("w"))
        yield* settle
        yield* advance("29 seconds")
        yield* settle
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* advance("1 second")
        const handle = yield* Fiber.join(taker)
        expect(handle.job.payload).toEqual({ n: 1 })
        expect(handle.job.attempts).toBe(1)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a lapsed lease makes the job re-deliverable to a waiting worker (TestClock)", () =>
      Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("lease", { visibilityTimeout: "10 seconds" })
        const id = yield* queue.enqueue({ n: 2 })
        const first = yield* queue.claim("crashed")
        expect(Option.isSome(first)).toBe(true)
        const taker = yield* Effect.fork(queue.take("rescuer"))
        yield* settle
        yield* advance("9 seconds")
        yield* settle
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* advance("1 second")
        const handle = yield* Fiber.join(taker)
        expect(handle.job.id).toBe(id)
        expect(handle.job.attempts).toBe(2)
        expect(Option.getOrThrow(handle.job.workerId)).toBe("rescuer")
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.live("an in-process enqueue wakes a waiting take at once; a rolled-back one does not", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* (yield* Queues.Queues).queue("push")
        const taker = yield* Effect.fork(queue.take("w"))
        yield* Effect.sleep("30 millis")
        yield* sql.withTransaction(Effect.zipRight(queue.enqueue({ n: "rolled back" }), Effect.fail("abort"))).pipe(
          Effect.ignore
        )
        yield* Effect.sleep("100 millis")
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        const started = performance.now()
        yield* queue.enqueue({ n: "committed" })
        const handle = yield* Fiber.join(taker)
        const waited = performance.now() - started
        expect(handle.job.payload).toEqual({ n: "committed" })
        expect(waited).toBeLessThan(1000)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.live("one job wakes at most the waiters it can satisfy; every queued job is taken once", () =>
      Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("herd")
        const taken = yield* Ref.make<Array<number>>([])
        const takers = yield* Effect.forEach(
          Array.from({ length: 5 }, (_, i) => i),
          (i) =>
            Effect.fork(
              queue.take(`w${i}`).pipe(Effect.tap((handle) => Ref.update(taken, (ids) => [...ids, handle.job.id])))
            )
        )
        yield* Effect.sleep("30 millis")
        const ids = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }, { n: 3 }])
        yield* Effect.sleep("200 millis")
        const got = yield* Ref.get(taken)
        expect([...got].sort()).toEqual([...ids].sort())
        yield* Effect.forEach(takers, Fiber.interrupt)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    // A signalled waiter claims at once, without a ticket: when another taker got there first, it
    // must take a ticket and wait again, and the next enqueue must still reach it.
    it.live("a signalled waiter that finds its job taken waits again and takes the next one", () =>
      Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("stolen")
        const taker = yield* Effect.fork(queue.take("waiter"))
        yield* Effect.sleep("30 millis")
        // Enqueued and claimed in one transaction: the waiter is woken by its commit, when the job is already
        // taken, on every engine (on an asynchronous one two claims after a plain enqueue race to the server).
        const sql = yield* SqlClient.SqlClient
        const first = yield* sql.withTransaction(Effect.zipRight(queue.enqueue({ n: 1 }), queue.claim("thief")))
        expect(Option.map(first, (handle) => handle.job.payload)).toEqual(Option.some({ n: 1 }))
        yield* Effect.sleep("50 millis")
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* queue.enqueue({ n: 2 })
        const handle = yield* Fiber.join(taker).pipe(Effect.timeout("2 seconds"))
        expect(handle.job.payload).toEqual({ n: 2 })
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.live("interrupting process releases in-flight claims without spending an attempt", () =>
      Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("shutdown")
        const ids = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }])
        const started = yield* Deferred.make<void>()
        const running = yield* Ref.make(0)
        const worker = yield* Effect.fork(
          queue.process("w", () =>
            Effect.gen(function*() {
              if ((yield* Ref.updateAndGet(running, (n) => n + 1)) === 2) yield* Deferred.succeed(started, undefined)
              yield* Effect.never
            }), { concurrency: 2 })
        )
        yield* Deferred.await(started)
        const exit = yield* Fiber.interrupt(worker)
        expect(Exit.isInterrupted(exit)).toBe(true)
        for (const id of ids) {
          const job = Option.getOrThrow(yield* queue.getJob(id))
          expect(job.state).toBe("pending")
          expect(job.attempts).toBe(0)
        }
        expect((yield* queue.stats).pending).toBe(2)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.live("process acks successes and retries failures with the error's text", () =>
      Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("handlers")
        const okId = yield* queue.enqueue({ ok: true })
        const badId = yield* queue.enqueue({ ok: false })
        const done = yield* Deferred.make<void>()
        const seen = yield* Ref.make(0)
        const worker = yield* Effect.fork(
          queue.process("w", (job) =>
            Ref.updateAndGet(seen, (n) => n + 1).pipe(
              Effect.tap((n) => (n === 2 ? Deferred.succeed(done, undefined) : Effect.void)),
              Effect.zipRight((job.payload as { ok: boolean }).ok ? Effect.void : Effect.fail(new Error("boom")))
            ))
        )
        yield* Deferred.await(done)
        yield* Effect.sleep("50 millis")
        yield* Fiber.interrupt(worker)
        expect(Option.isNone(yield* queue.getJob(okId))).toBe(true)
        const bad = Option.getOrThrow(yield* queue.getJob(badId))
        expect(bad.state).toBe("pending")
        expect(Option.getOrThrow(bad.lastError)).toBe("boom")
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.live("stream delivers batches as they arrive", () =>
      Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("streamed")
        const { Stream, Chunk } = yield* Effect.promise(() => import("effect"))
        const collector = yield* Effect.fork(
          queue.stream("w", { batch: 10 }).pipe(
            Stream.tap((handle) => handle.ack),
            Stream.take(25),
            Stream.runCollect
          )
        )
        yield* Effect.sleep("20 millis")
        yield* queue.enqueueBatch(Array.from({ length: 15 }, (_, n) => ({ n })))
        yield* Effect.sleep("20 millis")
        yield* queue.enqueueBatch(Array.from({ length: 10 }, (_, n) => ({ n: 15 + n })))
        const handles = Chunk.toReadonlyArray(yield* Fiber.join(collector))
        expect(handles.map((h) => (h.job.payload as { n: number }).n).sort((a, b) => a - b)).toEqual(
          Array.from({ length: 25 }, (_, n) => n)
        )
        expect((yield* queue.stats).pending).toBe(0)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.live("outbox run wakes on a committed enqueue", () =>
      Effect.gen(function*() {
        const outbox = yield* (yield* Outbox.Outbox).outbox("hooks")
        const delivered = yield* Deferred.make<unknown>()
        const runner = yield* Effect.fork(outbox.run("w", (job) => Deferred.succeed(delivered, job.payload)))
        yield* Effect.sleep("30 millis")
        yield* outbox.enqueue({ hook: 1 })
        expect(yield* Deferred.await(delivered).pipe(Effect.timeout("2 seconds"))).toEqual({ hook: 1 })
        yield* Fiber.interrupt(runner)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    // A file replaced under the store is a SQLite matter.
    if (engine.capabilities.sqliteFile) it.live("replacing the database file fails waiting workers with DatabaseReplaced", () => {
      const filename = freshFile("replaced")
      return Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("orphan")
        const taker = yield* Effect.fork(queue.take("w"))
        yield* Effect.sleep("30 millis")
        fs.writeFileSync(`${filename}.new`, "")
        fs.renameSync(`${filename}.new`, filename)
        const exit = yield* Fiber.await(taker).pipe(Effect.timeout("2 seconds"))
        expect(Exit.isFailure(exit)).toBe(true)
        if (Exit.isFailure(exit)) expect(JSON.stringify(exit.cause)).toContain("DatabaseReplaced")
      }).pipe(Effect.provide(engine.store({ filename, fallbackPoll: "1 hour" })))
    })
  })
