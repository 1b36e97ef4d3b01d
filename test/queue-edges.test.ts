/**
 * A job's lifecycle in queues (claim, fencing, ackAll,
 * ordering, idempotency, inspection), run against every engine.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Exit, Fiber, Option } from "effect"
import { engines } from "./contract/harness.js"
import { advance, type StoreServices, mustClaim, mustGet, queueOf } from "./contract/support.js"

for (const engine of engines) {
  describe(`queues, edge cases — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    it.effect("ackAll: a stale handle beside the fresh claim of the same job answers false", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("ackall-stale", { visibilityTimeout: "10 seconds" })
        const id = yield* q.enqueue("x")
        const stale = yield* mustClaim(q, "w1")
        yield* advance("10 seconds")
        const fresh = yield* mustClaim(q, "w2")
        expect(fresh.job.id).toBe(id)
        // As `ack` would answer, per handle: the stale claim no longer owns the job.
        expect(yield* q.ackAll([stale, fresh])).toEqual([false, true])
      })))

    it.effect("ackAll: the same handle twice answers as two acks would (true, then false)", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("ackall-twice")
        yield* q.enqueue("x")
        const h = yield* mustClaim(q, "w1")
        expect(yield* q.ackAll([h, h])).toEqual([true, false])
      })))

    it.effect("claim order holds with more than 1000 due scheduled jobs: the higher priority comes first", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("order-many-scheduled")
        yield* q.enqueueBatch(Array.from({ length: 1001 }, (_, i) => i), { delay: "1 second" })
        const urgent = yield* q.enqueue("urgent", { delay: "2 seconds", priority: 10 })
        yield* advance("3 seconds")
        const h = yield* mustClaim(q, "w1")
        expect(h.job.id).toBe(urgent)
      })))

    it.effect("cancel/getJob/requeueDead with a non-integer id: the same answer on every engine", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("ids")
        yield* q.enqueue("x")
        const got = yield* Effect.exit(q.getJob(1.5))
        const cancelled = yield* Effect.exit(q.cancel(1.5))
        const requeued = yield* Effect.exit(q.requeueDead(1.5))
        expect(got).toEqual(Exit.succeed(Option.none()))
        expect(cancelled).toEqual(Exit.succeed(false))
        expect(requeued).toEqual(Exit.succeed(false))
      })))

    const realSleep = (ms: number) => Effect.sleep(ms).pipe(Effect.withClock(Clock.make()))

    it.effect("requeueDead racing a keyed enqueue in an open transaction answers false (the key is held), not an error", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const q = yield* queueOf("race-requeue", { maxAttempts: 1 })
        const deadId = yield* q.enqueue("old", { key: "k" })
        expect(yield* (yield* mustClaim(q, "w")).fail("boom")).toBe(true)
        const inserted = yield* Deferred.make<number>()
        const commit = yield* Deferred.make<void>()
        const tx = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
          const id = yield* q.enqueue("new", { key: "k" })
          yield* Deferred.succeed(inserted, id)
          yield* Deferred.await(commit)
          return id
        })))
        const liveId = yield* Deferred.await(inserted)
        const requeue = yield* Effect.fork(Effect.exit(q.requeueDead(deadId)))
        yield* realSleep(300)
        yield* Deferred.succeed(commit, undefined)
        expect(yield* Fiber.join(tx)).toBe(liveId)
        const outcome = yield* Fiber.join(requeue)
        expect(outcome).toEqual(Exit.succeed(false))
        expect((yield* mustGet(q, deadId)).state).toBe("dead")
        expect((yield* mustGet(q, liveId)).state).toBe("pending")
      })))

    it.effect("two requeueDead of dead jobs sharing a key, racing: one true, one false, never an error", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const q = yield* queueOf("race-requeue-2", { maxAttempts: 1 })
        const a = yield* q.enqueue("a", { key: "k" })
        expect(yield* (yield* mustClaim(q, "w")).fail("boom")).toBe(true)
        const b = yield* q.enqueue("b", { key: "k" })
        expect(yield* (yield* mustClaim(q, "w")).fail("boom")).toBe(true)
        const done = yield* Deferred.make<boolean>()
        const commit = yield* Deferred.make<void>()
        const tx = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
          const ok = yield* q.requeueDead(a)
          yield* Deferred.succeed(done, ok)
          yield* Deferred.await(commit)
          return ok
        })))
        expect(yield* Deferred.await(done)).toBe(true)
        const other = yield* Effect.fork(Effect.exit(q.requeueDead(b)))
        yield* realSleep(300)
        yield* Deferred.succeed(commit, undefined)
        expect(yield* Fiber.join(tx)).toBe(true)
        expect(yield* Fiber.join(other)).toEqual(Exit.succeed(false))
      })))

    it.effect("a keyed enqueue meeting a holder whose lease lapsed on its last attempt buries it and enqueues anew", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("key-spent", { visibilityTimeout: "10 seconds", maxAttempts: 1 })
        const first = yield* q.enqueue(1, { key: "k" })
        yield* mustClaim(q, "crashed")
        yield* advance("10 seconds")
        const second = yield* q.enqueue(2, { key: "k" })
        // whatever the enqueue returned must be work that will run
        const h = yield* q.claim("w")
        expect(Option.map(h, (x) => x.job.id)).toEqual(Option.some(second))
        expect(second).not.toBe(first)
        // buried as the claim that met it would have: dead, its attempts spent
        const old = Option.getOrThrow(yield* q.getJob(first))
        expect([old.state, Option.getOrNull(old.lastError)]).toEqual(["dead", "max attempts exceeded"])
      })))
  })
}
