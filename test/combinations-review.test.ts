/**
 * Review of the queue features in combination (CONTRACT §3, §8, §9; docs/flow-control.md,
 * docs/queues-and-locks.md): limits meeting priorities, repair, maintenance, stats and other
 * processes. Every test here failed on the code before its fix; each names the promise it checks.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option } from "effect"
import { Queues } from "../src/index.js"
import { engines, freshFile, sqliteFromClient } from "./contract/harness.js"
import { advance, eventually, mustClaim, queueOf, setLimits, settle, type StoreServices } from "./contract/support.js"


for (const engine of engines) {
  describe(`features in combination — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) =>
      Effect.provide(effect, engine.store({ fallbackPoll: "1 hour" }))

    // docs/flow-control.md: "With n = 1 each group is serial in enqueue order, whatever the priorities inside it";
    // "Dead jobs ... no longer hold their group"; CONTRACT §8: queues deliver at least once.
    it.effect("a serial group never stalls: its first job runs whatever the priorities inside it, and after a requeueDead", () =>
      run(Effect.gen(function*() {
        // a later job of the group at a higher priority
        yield* setLimits("serial-prio", { groupConcurrency: 1 })
        const prio = yield* queueOf("serial-prio")
        yield* prio.enqueue("a", { group: "g" })
        yield* prio.enqueue("b", { group: "g", priority: 10 })
        const first = yield* prio.claim("w")
        // nothing of the group is claimed, yet no claim ever takes either job
        expect(Option.map(first, (h) => h.job.payload)).toEqual(Option.some("a"))

        // an operator requeues a dead job of a group that got a newer job meanwhile
        yield* setLimits("serial-requeue", { groupConcurrency: 1 })
        const rq = yield* queueOf("serial-requeue", { maxAttempts: 1 })
        yield* rq.enqueue("d", { group: "g" })
        const d = yield* mustClaim(rq, "w")
        expect(yield* d.fail("boom")).toBe(true)
        yield* rq.enqueue("e", { group: "g" })
        yield* advance("1 second")
        expect(yield* rq.requeueDead(d.job.id)).toBe(true)
        expect(yield* rq.stats).toMatchObject({ pending: 2, claimed: 0, dead: 0 })
        const next = yield* rq.claim("w")
        expect(Option.isSome(next)).toBe(true)
      })))

    // docs/flow-control.md: "QueueStats.heldBack — due pending jobs that a claim could not take right now because
    // of the queue's limits"; "a candidate it meets ... with its attempts spent is moved to dead on the way ...
    // takes no slot".
    it.effect("stats.heldBack does not count a job the next claim takes (a lapsed claim with its attempts spent is no slot)", () =>
      run(Effect.gen(function*() {
        yield* setLimits("held-spent", { concurrency: 1 })
        const q = yield* queueOf("held-spent", { maxAttempts: 1, visibilityTimeout: "10 seconds" })
        yield* q.enqueue("a")
        yield* mustClaim(q, "crashed") // its worker dies on the job's last attempt
        yield* q.enqueue("b")
        yield* advance("10 seconds")
        const stats = yield* q.stats
        const next = yield* mustClaim(q, "w") // buries "a", takes "b": nothing was held back
        expect(next.job.payload).toBe("b")
        expect({ pending: stats.pending, heldBack: stats.heldBack }).toEqual({ pending: 1, heldBack: 0 })
      })))

    // docs/flow-control.md: "A slot freed is claimable at once: by ... a death (fail, attempts spent, expiry)";
    // "A waiter ... held back only by a limit sleeps until its next deadline ... or until a commit that may free
    // a slot: in this process at once"; CONTRACT §9: "a waiter blocked only by a limit wakes when a slot frees".
    // (Over an application's SQLite client the change watcher happens to see the commit, so that variant passes.)
    if (engine.name !== sqliteFromClient.name) {
      it.effect("a waiter held back by a serial group wakes when maintenance expires the job holding the group", () =>
        run(Effect.gen(function*() {
          yield* setLimits("held-expiry", { groupConcurrency: 1 })
          const q = yield* queueOf("held-expiry")
          yield* q.enqueue("g1", { group: "g", expires: "5 seconds" })
          yield* q.enqueue("g2", { group: "g" })
          const g1 = yield* mustClaim(q, "w")
          expect(yield* g1.retry("upstream down", "1 hour")).toBe("retried") // g1 holds the group through its backoff
          const taker = yield* Effect.fork(q.take("waiter"))
          yield* settle
          yield* advance("6 seconds")
          yield* settle
          expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
          // maintenance moves g1 (expired) to dead: the group is free, g2 claimable now
          expect((yield* (yield* Queues.Queues).maintenance).expired).toBe(1)
          yield* settle
          const woken = yield* Fiber.poll(taker)
          expect(Option.map(woken, (exit) => exit._tag === "Success" ? exit.value.job.payload : exit._tag))
            .toEqual(Option.some("g2"))
        })))
    }

    // docs/flow-control.md, Waiting: "in another one through the engine's cross-process feed (...; on PostgreSQL
    // the ack, the death or the cancel sends a NOTIFY on the queue's topic)".
    if (engine.capabilities.postgres) {
      it.scoped("a cancel from another process that never claimed from the limited queue wakes a held-back waiter", () =>
        Effect.gen(function*() {
          const filename = freshFile("cancel-elsewhere")
          const workers = yield* Layer.build(engine.store({ filename, fallbackPoll: "1 hour" }))
          const operator = yield* Layer.build(engine.store({ filename, fallbackPoll: "1 hour" }))
          const [stuck, taker] = yield* Effect.gen(function*() {
            yield* setLimits("cancel-elsewhere", { concurrency: 1 })
            const q = yield* queueOf("cancel-elsewhere")
            yield* q.enqueueBatch(["a", "b"])
            const a = yield* mustClaim(q, "w")
            const taker = yield* Effect.fork(q.take("waiter"))
            yield* settle
            expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
            return [a.job.id, taker] as const
          }).pipe(Effect.provide(workers))
          // an operator's process (a CLI, a dashboard) cancels the claimed job: the slot is free
          expect(yield* Effect.flatMap(queueOf("cancel-elsewhere"), (q) => q.cancel(stuck)).pipe(Effect.provide(operator)))
            .toBe(true)
          yield* eventually(Effect.gen(function*() {
            yield* settle.pipe(Effect.provide(workers))
            expect(Option.isSome(yield* Fiber.poll(taker))).toBe(true)
          }), 1)
        }))
    }
  })
}
