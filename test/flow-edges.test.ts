/**
 * Flow control (CONTRACT §9, docs/flow-control.md): scenarios that
 * try to break the limits, on every engine under TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option } from "effect"
import { Queues } from "../src/index.js"
import { engines, freshFile } from "./contract/harness.js"
import { advance, claimsNothing, mustClaim, queueOf, setLimits, settle, type StoreServices } from "./contract/support.js"


for (const engine of engines) {
  describe(`flow control, edge cases — ${engine.name}`, () => {
    /** The waiter `fork` starts is still waiting a millisecond before `millis`, and has its job at `millis`. */
    const wakesAfter = <A, E, R>(fork: Effect.Effect<Fiber.RuntimeFiber<A, E>, never, R>, millis: number) =>
      Effect.gen(function*() {
        const taker = yield* fork
        yield* settle
        yield* advance(`${millis - 1} millis`)
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* advance("1 millis")
        yield* settle
        expect(Option.isSome(yield* Fiber.poll(taker))).toBe(true)
      })

    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) =>
      Effect.provide(effect, engine.store({ fallbackPoll: "1 hour" }))

    // A claim prunes the log to what the rule of the moment needs; a later rule with a larger limit *and* a
    // longer per needs an entry that is gone, which used to read as "left the window" and admit a burst.
    for (const rule of ["rate", "groupRate"] as const) {
      it.effect(`${rule}: raising limit and lengthening per judges the new rule over the claims actually made`, () =>
        run(Effect.gen(function*() {
          const name = `${rule}-change`
          yield* setLimits(name, { [rule]: { limit: 1, per: "1 second" } })
          const q = yield* queueOf(name)
          yield* q.enqueueBatch([1, 2, 3, 4, 5, 6], { group: "g" })
          // claims at 0 s, 1 s, 2 s: each admitted by 1 per second
          yield* Effect.flatMap(mustClaim(q, "w"), (h) => h.ack)
          yield* advance("1 second")
          yield* Effect.flatMap(mustClaim(q, "w"), (h) => h.ack)
          yield* advance("1 second")
          yield* Effect.flatMap(mustClaim(q, "w"), (h) => h.ack)
          yield* advance("500 millis")
          // 3 per minute: three claims were made in (t − 60 s, t] (at 0, 1, 2 s), none more before 60 s
          yield* setLimits(name, { [rule]: { limit: 3, per: "1 minute" } })
          expect((yield* q.claimBatch("w", 10)).length).toBe(0)
          yield* advance("57 seconds") // 59.5 s
          expect((yield* q.claimBatch("w", 10)).length).toBe(0)
          // the claim at 0 s was pruned: it is judged by the one logged after it (2 s), so by 62 s at the latest
          yield* advance("2500 millis")
          const reopened = (yield* q.claimBatch("w", 10)).length
          expect(reopened).toBeGreaterThan(0)
          expect(reopened).toBeLessThanOrEqual(3)
        })))
    }

    it.effect("rate: a claimBatch in one instant never exceeds the rate; boundary exact", () =>
      run(Effect.gen(function*() {
        yield* setLimits("rb", { rate: { limit: 3, per: "10 seconds" } })
        const q = yield* queueOf("rb")
        yield* q.enqueueBatch(Array.from({ length: 20 }, (_, i) => i))
        expect((yield* q.claimBatch("w", 2)).length).toBe(2)
        yield* advance("5 seconds")
        expect((yield* q.claimBatch("w", 10)).length).toBe(1)
        yield* advance("4999 millis")
        expect((yield* q.claimBatch("w", 10)).length).toBe(0)
        yield* advance("1 millis") // 10 s: the two at 0 s left
        expect((yield* q.claimBatch("w", 10)).length).toBe(2)
        yield* advance("4999 millis") // 14.999 s
        expect((yield* q.claimBatch("w", 10)).length).toBe(0)
        yield* advance("1 millis") // 15 s: the one at 5 s left
        expect((yield* q.claimBatch("w", 10)).length).toBe(1)
      })))

    it.effect("concurrency: a heartbeat on a lapsed lease after its slot was taken (observed)", () =>
      run(Effect.gen(function*() {
        yield* setLimits("hb", { concurrency: 1 })
        const q = yield* queueOf("hb", { visibilityTimeout: "10 seconds" })
        yield* q.enqueue("a")
        const a = yield* mustClaim(q, "w1")
        yield* q.enqueue("b", { priority: 5 })
        yield* advance("10 seconds")
        const b = yield* mustClaim(q, "w2")
        expect(b.job.payload).toBe("b")
        const revived = yield* a.heartbeat()
        const stats = yield* q.stats
        // recorded, not asserted as a defect: contract §3 says the heartbeat succeeds while the claim owns the row
        expect({ revived, claimed: stats.claimed }).toEqual({ revived: true, claimed: 2 })
      })))

    it.effect("serial group: requeueDead and retry keep claims one at a time", () =>
      run(Effect.gen(function*() {
        yield* setLimits("serial-rq", { groupConcurrency: 1 })
        const q = yield* queueOf("serial-rq", { maxAttempts: 1 })
        yield* q.enqueueBatch(["t1", "t2", "t3"], { group: "t" })
        const t1 = yield* mustClaim(q, "w")
        expect(yield* t1.fail("boom")).toBe(true)
        const t2 = yield* mustClaim(q, "w")
        expect(t2.job.payload).toBe("t2")
        expect(yield* q.requeueDead(t1.job.id)).toBe(true)
        yield* claimsNothing(q)
        yield* t2.ack
        const next = yield* mustClaim(q, "w")
        yield* claimsNothing(q)
        yield* next.ack
        const last = yield* mustClaim(q, "w")
        yield* claimsNothing(q)
        yield* last.ack
        yield* claimsNothing(q)
        expect((yield* q.stats)).toMatchObject({ pending: 0, claimed: 0 })
      })))

    it.effect("fairness: claims of another priority do not push a new group behind a backlog of this priority", () =>
      run(Effect.gen(function*() {
        yield* setLimits("prio-fair", {})
        const q = yield* queueOf("prio-fair")
        yield* q.enqueueBatch(Array.from({ length: 50 }, (_, i) => `big-${i}`), { group: "big" })
        // an urgent burst of another tenant, at a higher priority, runs first (as it should)
        yield* q.enqueueBatch(Array.from({ length: 30 }, (_, i) => `urgent-${i}`), { group: "urgent", priority: 5 })
        for (let i = 0; i < 30; i++) yield* Effect.flatMap(mustClaim(q, "w"), (h) => h.ack)
        // now a small tenant's one job, at big's priority: it must rotate in, not wait out big's backlog
        yield* q.enqueue("small", { group: "small" })
        const got: Array<string> = []
        for (let i = 0; i < 60; i++) {
          const h = yield* q.claim("w")
          if (Option.isNone(h)) break
          got.push(h.value.job.payload as string)
          yield* h.value.ack
        }
        // rotation: "small" is the first or second claim (big-0 may go first)
        expect(got.indexOf("small")).toBeLessThanOrEqual(1)
      })))

    it.effect("fairness: a batch enqueued into a limited queue takes consecutive rounds", () =>
      run(Effect.gen(function*() {
        yield* setLimits("batch-rounds", {})
        const q = yield* queueOf("batch-rounds")
        yield* q.enqueueBatch(["a1", "a2", "a3"], { group: "a" })
        for (const p of ["b1", "b2", "b3"]) yield* q.enqueue(p, { group: "b" })
        const got: Array<string> = []
        for (let i = 0; i < 6; i++) {
          const h = yield* mustClaim(q, "w")
          got.push(h.job.payload as string)
          yield* h.ack
        }
        expect(got).toEqual(["a1", "b1", "a2", "b2", "a3", "b3"])
      })))

    it.effect("a waiter held back by concurrency wakes when the claim's lease lapses", () =>
      run(Effect.gen(function*() {
        yield* setLimits("wait-lapse", { concurrency: 1 })
        const q = yield* queueOf("wait-lapse", { visibilityTimeout: "10 seconds" })
        yield* q.enqueueBatch(["a", "b"])
        yield* mustClaim(q, "crashed")
        yield* wakesAfter(Effect.fork(q.take("waiter")), 10_000)
      })))

    it.effect("a waiter held back by a group rate wakes exactly when the group's window reopens", () =>
      run(Effect.gen(function*() {
        yield* setLimits("wait-grate", { groupRate: { limit: 1, per: "10 seconds" } })
        const q = yield* queueOf("wait-grate")
        yield* q.enqueueBatch(["g1", "g2"], { group: "g" })
        yield* Effect.flatMap(mustClaim(q, "w"), (h) => h.ack)
        yield* wakesAfter(Effect.fork(q.take("waiter")), 10_000)
      })))

    for (const how of ["retry", "fail", "release", "cancel"] as const) {
      it.effect(`a waiter held back by concurrency wakes on a ${how} by another fiber`, () =>
        run(Effect.gen(function*() {
          yield* setLimits(`wait-${how}`, { concurrency: 1 })
          const q = yield* queueOf(`wait-${how}`)
          yield* q.enqueueBatch(["a", "b"])
          const a = yield* mustClaim(q, "w")
          const taker = yield* Effect.fork(q.take("waiter"))
          yield* settle
          expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
          if (how === "retry") yield* a.retry("x", "1 hour")
          else if (how === "fail") yield* a.fail("x")
          else if (how === "release") yield* a.release
          else yield* q.cancel(a.job.id)
          yield* settle
          const got = yield* Fiber.poll(taker)
          expect(Option.isSome(got)).toBe(true)
        })))
    }

    it.scoped("parallel claims from two stores of one database never exceed concurrency, rate or a serial group", () =>
      Effect.gen(function*() {
        const filename = freshFile("race")
        const a = yield* Layer.build(engine.store({ filename, fallbackPoll: "1 hour" }))
        const b = yield* Layer.build(engine.store({ filename, fallbackPoll: "1 hour" }))
        const claimAll = (name: string, tries: number, batch: number) =>
          Effect.forEach(Array.from({ length: tries }, (_, i) => i), (i) =>
            Effect.flatMap(queueOf(name), (q) => q.claimBatch(`w${i}`, batch)).pipe(
              Effect.provide(i % 2 === 0 ? a : b)
            ), { concurrency: "unbounded" }).pipe(Effect.map((all) => all.flat()))
        yield* Effect.gen(function*() {
          yield* setLimits("race-c", { concurrency: 3 })
          yield* setLimits("race-r", { rate: { limit: 5, per: "1 hour" } })
          yield* setLimits("race-g", { groupConcurrency: 1 })
          yield* Effect.flatMap(queueOf("race-c"), (q) => q.enqueueBatch(Array.from({ length: 40 }, (_, i) => i)))
          yield* Effect.flatMap(queueOf("race-r"), (q) => q.enqueueBatch(Array.from({ length: 40 }, (_, i) => i)))
          const g = yield* queueOf("race-g")
          for (const group of ["x", "y", "z"]) yield* g.enqueueBatch(Array.from({ length: 10 }, (_, i) => `${group}${i}`), { group })
        }).pipe(Effect.provide(a))
        for (let round = 0; round < 3; round++) {
          const c = yield* claimAll("race-c", 16, round === 1 ? 2 : 1)
          const r = yield* claimAll("race-r", 16, round === 1 ? 2 : 1)
          const g = yield* claimAll("race-g", 16, round === 1 ? 3 : 1)
          expect(c.length).toBeLessThanOrEqual(3)
          expect(r.length).toBeLessThanOrEqual(5)
          expect(g.length).toBeLessThanOrEqual(3)
          expect(new Set(g.map((h) => String(h.job.payload)[0])).size).toBe(g.length)
          if (round === 0) {
            expect(c.length).toBe(3)
            expect(r.length).toBe(5)
            expect(g.length).toBe(3)
          }
          for (const h of [...c, ...g]) yield* h.ack.pipe(Effect.provide(a))
        }
      }))

    it.effect("process: concurrency and a serial group hold across retries, every job done once, group order kept", () =>
      run(Effect.gen(function*() {
        yield* setLimits("proc", { concurrency: 2, groupConcurrency: 1 })
        const q = yield* queueOf("proc", { maxAttempts: 5, backoffBase: "1 second" })
        for (const group of ["a", "b", "c"]) {
          yield* q.enqueueBatch(Array.from({ length: 4 }, (_, i) => `${group}${i}`), { group })
        }
        let running = 0
        let most = 0
        const perGroup = new Map<string, number>()
        const started: Array<string> = []
        const done: Array<string> = []
        const failedOnce = new Set<string>()
        const worker = yield* Effect.fork(q.process("p", (job) =>
          Effect.gen(function*() {
            const p = job.payload as string
            const g = p[0]!
            running++
            most = Math.max(most, running)
            perGroup.set(g, (perGroup.get(g) ?? 0) + 1)
            expect(perGroup.get(g)).toBe(1)
            started.push(p)
            yield* Effect.sleep("1 second")
            running--
            perGroup.set(g, perGroup.get(g)! - 1)
            if (p.endsWith("1") && !failedOnce.has(p)) {
              failedOnce.add(p)
              return yield* Effect.fail(new Error("flaky"))
            }
            done.push(p)
          }), { concurrency: 6 }))
        for (let i = 0; i < 60 && done.length < 12; i++) yield* advance("1 second")
        yield* Fiber.interrupt(worker)
        expect(most).toBeLessThanOrEqual(2)
        expect(done.length).toBe(12)
        for (const group of ["a", "b", "c"]) {
          expect(done.filter((p) => p[0] === group)).toEqual([0, 1, 2, 3].map((i) => `${group}${i}`))
        }
      })))

    it.effect("group validation: NUL and more than 1000 UTF-8 bytes are InvalidOptions; 1000 bytes pass", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("gv")
        for (const group of ["a\u0000b", "é".repeat(501)]) {
          expect(yield* Effect.flip(q.enqueue(1, { group }))).toMatchObject({ _tag: "InvalidOptions", field: "group" })
          expect(yield* Effect.flip(q.enqueueBatch([1, 2], { group }))).toMatchObject({ _tag: "InvalidOptions", field: "group" })
        }
        expect((yield* q.stats).pending).toBe(0)
        yield* setLimits("gv", { groupConcurrency: 1 })
        yield* q.enqueue(1, { group: "é".repeat(500) })
        yield* q.enqueue(2, { group: "é".repeat(500) })
        yield* mustClaim(q, "w")
        yield* claimsNothing(q)
      })))

    it.effect("lowering groupConcurrency and rate while claims are in flight admits nothing beyond the new limits", () =>
      run(Effect.gen(function*() {
        yield* setLimits("lower", { groupConcurrency: 3, rate: { limit: 10, per: "1 minute" } })
        const q = yield* queueOf("lower")
        yield* q.enqueueBatch(Array.from({ length: 10 }, (_, i) => `g${i}`), { group: "g" })
        const held = yield* q.claimBatch("w", 3)
        expect(held.length).toBe(3)
        yield* setLimits("lower", { groupConcurrency: 1, rate: { limit: 4, per: "1 minute" } })
        yield* claimsNothing(q)
        yield* held[0]!.ack
        yield* held[1]!.ack
        yield* claimsNothing(q) // 1 in flight of the group
        yield* held[2]!.ack
        const fourth = yield* mustClaim(q, "w") // the 4th claim in the minute
        yield* fourth.ack
        yield* claimsNothing(q) // 4 claims made: the rate holds
        yield* advance("1 minute")
        yield* mustClaim(q, "w")
      })))

    it.effect("clearLimits then setLimits on a backlog: nothing lost or duplicated, groups still serial", () =>
      run(Effect.gen(function*() {
        yield* setLimits("cycle", { groupConcurrency: 1 })
        const q = yield* queueOf("cycle")
        yield* q.enqueueBatch(["a1", "a2", "a3"], { group: "a" })
        yield* q.enqueueBatch(["b1", "b2"], { group: "b" })
        const a1 = yield* mustClaim(q, "w")
        expect(yield* (yield* Queues.Queues).clearLimits("cycle")).toBe(true)
        yield* q.enqueue("a4", { group: "a" })
        yield* setLimits("cycle", { groupConcurrency: 1 })
        // a1 is still claimed: group a is held; b runs
        const b1 = yield* mustClaim(q, "w")
        expect(b1.job.payload).toBe("b1")
        yield* claimsNothing(q)
        yield* a1.ack
        yield* b1.ack
        const got: Array<string> = []
        for (let i = 0; i < 10; i++) {
          const h = yield* q.claim("w")
          if (Option.isNone(h)) break
          got.push(h.value.job.payload as string)
          yield* h.value.ack
        }
        expect(got).toEqual(["a2", "b2", "a3", "a4"])
      })))
  })
}
