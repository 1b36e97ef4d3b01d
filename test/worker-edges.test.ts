/**
 * Edge cases of consuming work: `process` (concurrency, stop, failures,
 * heartbeats), `stream` (held claims, early end) and `take` (deadlines,
 * wakes), on every engine. Time is the TestClock.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import Sqlite from "better-sqlite3"
import { Cause, Chunk, Clock, Deferred, Effect, Exit, Fiber, Layer, Option, Ref, Scope, Stream } from "effect"
import { Queues } from "../src/index.js"
import { engines, freshFile } from "./contract/harness.js"
import { advance, eventually, queueOf } from "./contract/support.js"
import { settle } from "./contract/workers.js"

const rowOf = <A>(queue: Queues.Queue<A>, id: number) =>
  Effect.map(queue.getJob(id), Option.map((job) => ({ state: job.state, attempts: job.attempts })))

const realClock = Clock.make()
/** Real milliseconds (for waits on another connection's lock, which are real time). */
const realSleep = (millis: number) => Effect.sleep(`${millis} millis`).pipe(Effect.withClock(realClock))

for (const engine of engines) {
  describe(`worker edges — ${engine.name}`, () => {
    it.effect("process never runs more handlers than its concurrency; a stop releases every claim in flight", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("bounded", { visibilityTimeout: "1 minute" })
        const ids = yield* queue.enqueueBatch(Array.from({ length: 9 }, (_, n) => ({ n })))
        let running = 0
        let most = 0
        let finished = 0
        const started: Array<number> = []
        const worker = yield* Effect.forkDaemon(queue.process("w", (job) =>
          Effect.suspend(() => {
            running++
            most = Math.max(most, running)
            started.push(job.id)
            return Effect.sleep("10 seconds")
          }).pipe(Effect.ensuring(Effect.sync(() => {
            running--
            finished++
          }))), { concurrency: 3 }))
        yield* settle
        expect(running).toBe(3)
        yield* advance("10 seconds")
        yield* settle
        expect(most).toBe(3)
        expect(started.length).toBe(6)
        // stop mid-handlers: every handler ended before the stop returns, their jobs pending with the attempt given back
        const exit = yield* Fiber.interrupt(worker)
        expect(Exit.isInterrupted(exit)).toBe(true)
        expect(running).toBe(0)
        expect(finished).toBe(6)
        const rest = ids.slice(3)
        expect(yield* Effect.forEach(rest, (id) => rowOf(queue, id))).toEqual(
          rest.map(() => Option.some({ state: "pending", attempts: 0 }))
        )
        expect((yield* queue.stats).claimed).toBe(0)
        // nothing claims after the stop
        yield* queue.enqueue({ n: 99 })
        yield* advance("1 minute")
        expect(started.length).toBe(6)
        expect((yield* queue.stats).claimed).toBe(0)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("failures retry on the curve with their text, defects with the pretty cause; the worker goes on", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("failing", { backoffBase: "1 second", maxAttempts: 2 })
        const bad = yield* queue.enqueue({ kind: "fail" })
        const broken = yield* queue.enqueue({ kind: "die" })
        const good = yield* queue.enqueue({ kind: "ok" })
        const runs: Array<number> = []
        const worker = yield* Effect.forkDaemon(queue.process("w", (job) => {
          runs.push(job.id)
          const kind = (job.payload as { kind: string }).kind
          return kind === "fail" ? Effect.fail(new Error("nope")) : kind === "die" ? Effect.die("boom") : Effect.void
        }, { concurrency: 2 }))
        yield* settle
        expect([...runs].sort()).toEqual([bad, broken, good].sort())
        const failed = Option.getOrThrow(yield* queue.getJob(bad))
        expect([failed.state, failed.attempts, Option.getOrUndefined(failed.lastError)]).toEqual(["pending", 1, "nope"])
        const died = Option.getOrThrow(yield* queue.getJob(broken))
        expect(died.state).toBe("pending")
        expect(Option.getOrUndefined(died.lastError)).toBe(Cause.pretty(Cause.die("boom")))
        expect(Option.isNone(yield* queue.getJob(good))).toBe(true)
        // the curve: 1 s after the first failure; then attempts spent -> dead
        yield* advance("999 millis")
        expect(runs.length).toBe(3)
        yield* advance("1 millis")
        yield* settle
        expect(runs.length).toBe(5)
        expect(Option.getOrThrow(yield* queue.getJob(bad)).state).toBe("dead")
        expect(Option.getOrThrow(yield* queue.getJob(broken)).state).toBe("dead")
        expect(worker.unsafePoll()).toBeNull()
        yield* Fiber.interrupt(worker)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("bad process/stream options fail with InvalidOptions before anything is claimed", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("bad-options")
        const id = yield* queue.enqueue({ n: 1 })
        const never = () => Effect.void
        for (const concurrency of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
          const error = yield* Effect.flip(queue.process("w", never, { concurrency }))
          expect(error._tag).toBe("InvalidOptions")
        }
        expect((yield* Effect.flip(queue.process("", never)))._tag).toBe("InvalidOptions")
        for (const batch of [0, 2.5]) {
          const error = yield* Effect.flip(Stream.runDrain(queue.stream("w", { batch })))
          expect(error._tag).toBe("InvalidOptions")
        }
        expect((yield* Effect.flip(queue.take("")))._tag).toBe("InvalidOptions")
        expect(yield* rowOf(queue, id)).toEqual(Option.some({ state: "pending", attempts: 0 }))
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a concurrency too large to allocate is a typed error, not a defect", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("huge")
        const exit = yield* Effect.exit(Effect.timeout(queue.process("w", () => Effect.void, { concurrency: 2 ** 32 }), "1 second"))
        // InvalidOptions { field: "concurrency" } expected; a defect (RangeError: Invalid array length) is what comes
        const outcome = Exit.isSuccess(exit) ? "success" : Option.match(Cause.failureOption(exit.cause), {
          onNone: () => `defect: ${Cause.pretty(exit.cause).split("\n")[0]}`,
          onSome: (error) => (error as { _tag: string })._tag
        })
        expect(outcome).toBe("InvalidOptions")
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a lease shortened by a heartbeat is re-delivered when it lapses, not at the fallback poll", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("shortened", { visibilityTimeout: "5 minutes" })
        const id = yield* queue.enqueue({ n: 1 })
        const first = Option.getOrThrow(yield* queue.claim("a"))
        const taker = yield* Effect.fork(queue.take("b"))
        yield* settle
        expect(yield* first.heartbeat("1 second")).toBe(true)
        yield* advance("1 second")
        yield* settle
        const taken = yield* Fiber.poll(taker)
        expect(Option.map(taken, Exit.map((h) => h.job.id))).toEqual(Option.some(Exit.succeed(id)))
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a waiting take meets the earlier of two deadlines, the second set while it waits", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("deadlines")
        yield* queue.enqueue({ n: 1 }, { delay: "30 seconds" })
        const taker = yield* Effect.fork(queue.take("w"))
        yield* settle
        const soon = yield* queue.enqueue({ n: 2 }, { delay: "5 seconds" })
        yield* settle
        yield* advance("5 seconds")
        yield* settle
        const taken = yield* Fiber.poll(taker)
        expect(Option.map(taken, Exit.map((h) => h.job.id))).toEqual(Option.some(Exit.succeed(soon)))
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a retry with a delay, made by another worker's handler, wakes an idle worker at its runAt", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("retry-wake", { backoffBase: "7 seconds" })
        const id = yield* queue.enqueue({ n: 1 })
        const runs = yield* Ref.make<ReadonlyArray<[string, number]>>([])
        const gate = yield* Deferred.make<void>()
        const worker = yield* Effect.forkDaemon(queue.process("w", (job) =>
          Effect.gen(function*() {
            const n = (yield* Ref.get(runs)).length
            yield* Ref.update(runs, (all) => [...all, ["w", job.attempts] as [string, number]])
            if (n === 0) yield* Deferred.await(gate)
            if (n === 0) return yield* Effect.fail("again")
          }), { concurrency: 2 }))
        yield* settle
        yield* Deferred.succeed(gate, undefined)
        yield* settle
        expect(Option.getOrThrow(yield* queue.getJob(id)).state).toBe("pending")
        yield* advance("7 seconds")
        yield* settle
        expect((yield* Ref.get(runs)).length).toBe(2)
        expect(Option.isNone(yield* queue.getJob(id))).toBe(true)
        yield* Fiber.interrupt(worker)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("stream: Stream.take ends a batch early; the rest is released, and a second stream gets it", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("streamed")
        const ids = yield* queue.enqueueBatch(Array.from({ length: 5 }, (_, n) => ({ n })))
        const firstTwo = yield* queue.stream("a", { batch: 5 }).pipe(Stream.take(2), Stream.runCollect)
        expect(Chunk.toReadonlyArray(firstTwo).map((h) => h.job.id)).toEqual(ids.slice(0, 2))
        expect(yield* Effect.forEach(ids.slice(2), (id) => rowOf(queue, id))).toEqual(
          ids.slice(2).map(() => Option.some({ state: "pending", attempts: 0 }))
        )
        const rest = yield* queue.stream("b", { batch: 2 }).pipe(Stream.take(3), Stream.runCollect)
        expect(Chunk.toReadonlyArray(rest).map((h) => h.job.id)).toEqual(ids.slice(2))
        // the second stream's round of 2 claimed ids[2..3], its second round ids[4] (one left); nothing stays claimed but the handed ones
        expect((yield* queue.stats).claimed).toBe(5)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("stream interrupted while it waits for work claims nothing afterwards", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("stream-wait")
        const consumer = yield* Effect.fork(Stream.runCollect(queue.stream("a", { batch: 3 })))
        yield* settle
        expect(Exit.isInterrupted(yield* Fiber.interrupt(consumer))).toBe(true)
        const id = yield* queue.enqueue({ n: 1 })
        yield* settle
        expect(yield* rowOf(queue, id)).toEqual(Option.some({ state: "pending", attempts: 0 }))
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a stop racing a handler's success: every job ends acked or pending with its attempt given back", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("racing", { visibilityTimeout: "1 minute" })
        const ids = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }, { n: 3 }])
        const gate = yield* Deferred.make<void>()
        const worker = yield* Effect.forkDaemon(queue.process("w", () => Deferred.await(gate)))
        yield* settle
        yield* Deferred.succeed(gate, undefined)
        const exit = yield* Fiber.interrupt(worker)
        expect(Exit.isInterrupted(exit)).toBe(true)
        const rows = yield* Effect.forEach(ids, (id) => rowOf(queue, id))
        for (const row of rows) {
          expect(Option.isNone(row) || Option.getOrThrow(row).state === "pending" && Option.getOrThrow(row).attempts === 0).toBe(true)
        }
        expect((yield* queue.stats).claimed).toBe(0)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a handler that throws instead of returning an Effect is a defect: retried, the worker goes on", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("throwing", { backoffBase: "1 minute" })
        const bad = yield* queue.enqueue({ n: 1 })
        const good = yield* queue.enqueue({ n: 2 })
        const ran: Array<number> = []
        const worker = yield* Effect.forkDaemon(queue.process("w", (job) => {
          ran.push(job.id)
          if (job.id === bad) throw new Error("sync throw")
          return Effect.void
        }))
        yield* settle
        expect(ran).toEqual([bad, good])
        const row = Option.getOrThrow(yield* queue.getJob(bad))
        expect(row.state).toBe("pending")
        expect(row.attempts).toBe(1)
        expect(Option.getOrThrow(row.lastError)).toContain("sync throw")
        expect(worker.unsafePoll()).toBeNull()
        yield* Fiber.interrupt(worker)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a failure without a message is stored as its _tag and fields", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("tagged", { backoffBase: "1 minute" })
        const id = yield* queue.enqueue({ n: 1 })
        const worker = yield* Effect.forkDaemon(queue.process("w", () => Effect.fail({ _tag: "Nope", code: 7 })))
        yield* settle
        const row = Option.getOrThrow(yield* queue.getJob(id))
        expect(Option.getOrThrow(row.lastError)).toBe(`Nope {"code":7}`)
        yield* Fiber.interrupt(worker)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("heartbeat: a handler that fails stops the beating; a lost claim stops it without stopping the handler", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("beats", { visibilityTimeout: "30 seconds", backoffBase: "1 hour" })
        const id = yield* queue.enqueue({ n: 1 })
        const done = yield* Deferred.make<void>()
        const worker = yield* Effect.forkDaemon(queue.process("w", () =>
          Effect.zipRight(Effect.sleep("25 seconds"), Effect.zipRight(Deferred.succeed(done, undefined), Effect.fail("x"))), { heartbeat: true }))
        yield* settle
        yield* advance("25 seconds")
        yield* settle
        yield* Deferred.await(done)
        const row = Option.getOrThrow(yield* queue.getJob(id))
        expect([row.state, row.attempts]).toEqual(["pending", 1])
        // nothing extends or claims it again within the backoff
        yield* advance("10 minutes")
        const again = Option.getOrThrow(yield* queue.getJob(id))
        expect([again.state, again.attempts, Option.isNone(again.claimedUntil)]).toEqual(["pending", 1, true])
        yield* Fiber.interrupt(worker)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("stream: a Stream.take of exactly one batch ends without claiming (or waiting for) another", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("exact")
        const ids = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }])
        const fiber = yield* Effect.fork(queue.stream("a", { batch: 2 }).pipe(Stream.take(2), Stream.runCollect))
        yield* settle
        const got = yield* Fiber.poll(fiber)
        expect(Option.map(got, Exit.map((c) => Chunk.toReadonlyArray(c).map((h) => h.job.id)))).toEqual(Option.some(Exit.succeed(ids)))
        const later = yield* queue.enqueue({ n: 3 })
        yield* settle
        expect(yield* rowOf(queue, later)).toEqual(Option.some({ state: "pending", attempts: 0 }))
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a worker forked in a layer over the store: closing the scope releases the job in flight", () =>
      Effect.gen(function*() {
        const filename = freshFile("scope")
        const started = yield* Deferred.make<number>()
        const Worker = Layer.scopedDiscard(Effect.gen(function*() {
          const queue = yield* (yield* Queues.Queues).queue("scoped")
          yield* Effect.forkScoped(queue.process("w", (job) => Effect.zipRight(Deferred.succeed(started, job.id), Effect.never), {
            concurrency: 2,
            heartbeat: true
          }))
        }))
        const App = Layer.provideMerge(Worker, engine.store({ filename, fallbackPoll: "1 hour" }))
        const scope = yield* Scope.make()
        const ctx = yield* Layer.buildWithScope(App, scope)
        const queue = yield* Effect.provide(queueOf("scoped"), ctx)
        const id = yield* Effect.provide(queue.enqueue({ n: 1 }), ctx)
        expect(yield* Deferred.await(started)).toBe(id)
        yield* Scope.close(scope, Exit.void)
        const row = yield* Effect.flatMap(queueOf("scoped"), (q) => rowOf(q, id)).pipe(
          Effect.provide(engine.store({ filename, fallbackPoll: "1 hour" }))
        )
        expect(row).toEqual(Option.some({ state: "pending", attempts: 0 }))
      }))

    it.effect("take interrupted while its claim is in flight does not keep the claim (released, attempt given back)", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("take-race", { visibilityTimeout: "5 minutes" })
        const id = yield* queue.enqueue({ n: 1 })
        const unlock = yield* Deferred.make<void>()
        const locked = yield* Deferred.make<void>()
        if (engine.capabilities.postgres) {
          yield* Effect.forkDaemon(sql.withTransaction(Effect.gen(function*() {
            yield* sql`LOCK TABLE __alkstore_jobs IN ACCESS EXCLUSIVE MODE`
            yield* Deferred.succeed(locked, undefined)
            yield* Deferred.await(unlock)
          })))
          yield* Deferred.await(locked)
        }
        const taker = yield* Effect.fork(queue.take("w"))
        yield* realSleep(200)
        const stopping = yield* Effect.fork(Fiber.interrupt(taker))
        yield* realSleep(100)
        yield* Deferred.succeed(unlock, undefined)
        const exit = yield* Fiber.join(stopping)
        if (Exit.isSuccess(exit)) {
          // the take returned before the interruption landed: its handle is ours to settle
          return
        }
        // the interrupted take waits a short real time for its give-back, then leaves it to the background
        // (stoppableClaim.ts): polled for, with a deadline, not slept for
        yield* eventually(Effect.map(rowOf(queue, id), (row) =>
          expect(row).toEqual(Option.some({ state: "pending", attempts: 0 }))), 10)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    // (the store's own connection only: a foreign client's driver blocks the event loop in its 5 s busy_timeout)
    if (engine.capabilities.sqliteFile && engine.name.includes("SqliteStore.layer)")) {
      it.effect("take interrupted while its claim waits out another connection's write lock: nothing is claimed (SQLite file)", () => {
        const filename = freshFile("take-busy")
        return Effect.gen(function*() {
          const queue = yield* queueOf("take-busy", { visibilityTimeout: "5 minutes" })
          const id = yield* queue.enqueue({ n: 1 })
          const db = new Sqlite(filename)
          db.prepare("BEGIN IMMEDIATE").run()
          const taker = yield* Effect.fork(queue.take("w"))
          yield* realSleep(200)
          const stopping = yield* Effect.fork(Fiber.interrupt(taker))
          yield* realSleep(100)
          db.prepare("ROLLBACK").run()
          db.close()
          const exit = yield* Fiber.join(stopping)
          expect(Exit.isInterrupted(exit)).toBe(true)
          expect(yield* rowOf(queue, id)).toEqual(Option.some({ state: "pending", attempts: 0 }))
        }).pipe(Effect.provide(engine.store({ filename, fallbackPoll: "1 hour" })))
      })
    }

    if (engine.capabilities.sqliteFile && engine.name.includes("SqliteStore.layer)")) {
      it.effect("stopping process while its claim waits out another connection's write lock is prompt (SQLite file)", () => {
        const filename = freshFile("stop-busy")
        return Effect.gen(function*() {
          const queue = yield* queueOf("stop-busy")
          const id = yield* queue.enqueue({ n: 1 }, { delay: "10 seconds" })
          let ran = 0
          const worker = yield* Effect.forkDaemon(queue.process("w", () => Effect.sync(() => void ran++)))
          yield* settle
          const db = new Sqlite(filename)
          db.prepare("BEGIN IMMEDIATE").run()
          yield* advance("10 seconds")
          yield* realSleep(200)
          expect(ran).toBe(0)
          // the other connection lets go 3 s from now; a stop should not wait for it
          yield* Effect.forkDaemon(Effect.zipRight(realSleep(3_000), Effect.sync(() => {
            db.prepare("ROLLBACK").run()
            db.close()
          })))
          const started = Date.now()
          const exit = yield* Fiber.interrupt(worker)
          const tookMillis = Date.now() - started
          expect(Exit.isInterrupted(exit)).toBe(true)
          expect(ran).toBe(0)
          yield* realSleep(3_200)
          expect(yield* rowOf(queue, id)).toEqual(Option.some({ state: "pending", attempts: 0 }))
          expect(tookMillis).toBeLessThan(1_500)
        }).pipe(Effect.provide(engine.store({ filename, fallbackPoll: "1 hour", busyPatience: "10 seconds" })))
      })
    }
  })
}
