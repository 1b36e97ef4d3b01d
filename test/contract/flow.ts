/**
 * Flow control (CONTRACT §9, docs/flow-control.md), on every engine under
 * TestClock: each limit exact at its boundary, slots freed by every way a
 * claim ends, serial groups, fair rotation, limit changes, validation,
 * `stats.heldBack`, and held-back waiters that sleep until a slot frees or
 * the window reopens.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Option } from "effect"
import { Outbox, Queues, Scheduler } from "../../src/index.js"
import { ROUND_STEP } from "../../src/internal/flow.js"
import Sqlite from "better-sqlite3"
import { type EngineUnderTest, freshFile } from "./harness.js"
import { advance, claimsNothing, drainPayloads, mustClaim, mustGet, queueOf, setLimits, settle, type StoreServices } from "./support.js"


export const flowContract = (engine: EngineUnderTest) =>
  describe(`flow control — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) =>
      Effect.provide(effect, engine.store({ fallbackPoll: "1 hour" }))

    it.effect("concurrency: the n-th claim is allowed, the n+1-th not; an ack frees its slot at once", () =>
      run(Effect.gen(function*() {
        yield* setLimits("api", { concurrency: 2 })
        const q = yield* queueOf("api")
        yield* q.enqueueBatch([1, 2, 3, 4])
        const first = yield* mustClaim(q, "w")
        yield* mustClaim(q, "w")
        yield* claimsNothing(q)
        expect((yield* q.claimBatch("w", 5)).length).toBe(0)
        expect(yield* first.ack).toBe(true)
        const third = yield* mustClaim(q, "w")
        expect(third.job.payload).toBe(3)
        yield* claimsNothing(q)
      })))

    it.effect("a batch claim stops at the concurrency limit", () =>
      run(Effect.gen(function*() {
        yield* setLimits("batch", { concurrency: 3 })
        const q = yield* queueOf("batch")
        yield* q.enqueueBatch([1, 2, 3, 4, 5])
        expect((yield* q.claimBatch("w", 5)).map((h) => h.job.payload)).toEqual([1, 2, 3])
        yield* claimsNothing(q)
      })))

    it.effect("retry, release and death free their slot at once", () =>
      run(Effect.gen(function*() {
        yield* setLimits("free", { concurrency: 1 })
        const q = yield* queueOf("free", { maxAttempts: 5 })
        yield* q.enqueueBatch(["a", "b", "c", "d"])
        const a = yield* mustClaim(q, "w")
        yield* claimsNothing(q)
        expect(yield* a.retry("later", "1 hour")).toBe("retried")
        const b = yield* mustClaim(q, "w")
        expect(b.job.payload).toBe("b")
        yield* claimsNothing(q)
        expect(yield* b.release).toBe(true)
        const b2 = yield* mustClaim(q, "w")
        expect(b2.job.payload).toBe("b")
        expect(yield* b2.fail("broken")).toBe(true)
        const c = yield* mustClaim(q, "w")
        expect(c.job.payload).toBe("c")
        expect(yield* q.cancel(c.job.id)).toBe(true)
        expect((yield* mustClaim(q, "w")).job.payload).toBe("d")
      })))

    it.effect("a lapsed lease frees its slot: the job is claimable again exactly when its lease ends", () =>
      run(Effect.gen(function*() {
        yield* setLimits("lease", { concurrency: 1 })
        const q = yield* queueOf("lease", { visibilityTimeout: "10 seconds" })
        const id = yield* q.enqueue("x")
        yield* q.enqueue("y")
        yield* mustClaim(q, "crashed")
        yield* advance("9999 millis")
        yield* claimsNothing(q)
        yield* advance("1 millis")
        const again = yield* mustClaim(q, "rescuer")
        expect(again.job.id).toBe(id)
        expect(again.job.attempts).toBe(2)
        yield* claimsNothing(q)
      })))

    it.effect("rate: the n-th claim in a window is allowed, the n+1-th not; the window reopens exactly at its instant", () =>
      run(Effect.gen(function*() {
        yield* setLimits("emails", { rate: { limit: 3, per: "10 seconds" } })
        const q = yield* queueOf("emails")
        yield* q.enqueueBatch([1, 2, 3, 4, 5, 6, 7])
        for (let i = 0; i < 3; i++) yield* Effect.flatMap(mustClaim(q, "w"), (h) => h.ack)
        yield* claimsNothing(q)
        yield* advance("4 seconds")
        const fourth = yield* Effect.flatMap(Queues.Queues, () => q.claim("w"))
        expect(Option.isNone(fourth)).toBe(true)
        yield* advance("5999 millis") // 9.999 s after the first three
        yield* claimsNothing(q)
        yield* advance("1 millis") // 10 s: the first three left the window
        expect((yield* q.claimBatch("w", 5)).map((h) => h.job.payload)).toEqual([4, 5, 6])
        yield* claimsNothing(q)
        // A sliding window: claims at 10 s block until 20 s exactly.
        yield* advance("9999 millis")
        yield* claimsNothing(q)
        yield* advance("1 millis")
        expect((yield* mustClaim(q, "w")).job.payload).toBe(7)
      })))

    it.effect("groupConcurrency 1: each group serial in enqueue order, other groups not held back", () =>
      run(Effect.gen(function*() {
        yield* setLimits("tenants", { groupConcurrency: 1 })
        const q = yield* queueOf("tenants")
        yield* q.enqueue("a1", { group: "a" })
        yield* q.enqueue("a2", { group: "a" })
        yield* q.enqueue("b1", { group: "b" })
        const a1 = yield* mustClaim(q, "w")
        const b1 = yield* mustClaim(q, "w")
        expect([a1.job.payload, b1.job.payload]).toEqual(["a1", "b1"])
        yield* claimsNothing(q)
        yield* a1.ack
        expect((yield* mustClaim(q, "w")).job.payload).toBe("a2")
      })))

    it.effect("a serial group keeps its order across retries: the retried job holds its place through its backoff", () =>
      run(Effect.gen(function*() {
        yield* setLimits("serial", { groupConcurrency: 1 })
        const q = yield* queueOf("serial", { maxAttempts: 5, backoffBase: "5 seconds" })
        for (const n of [1, 2, 3]) yield* q.enqueue(`t${n}`, { group: "tenant" })
        const first = yield* mustClaim(q, "w")
        expect(first.job.payload).toBe("t1")
        expect(yield* first.retry("flaky")).toBe("retried")
        yield* claimsNothing(q) // t2 must not overtake t1 during its backoff
        yield* advance("5 seconds")
        const again = yield* mustClaim(q, "w")
        expect(again.job.payload).toBe("t1")
        expect(again.job.attempts).toBe(2)
        yield* again.ack
        expect(yield* drainPayloads(q, 10)).toEqual(["t2", "t3"])
      })))

    it.effect("groupConcurrency n and groupRate are exact per group", () =>
      run(Effect.gen(function*() {
        yield* setLimits("pergroup", { groupConcurrency: 2, groupRate: { limit: 3, per: "1 minute" } })
        const q = yield* queueOf("pergroup")
        yield* q.enqueueBatch(["a1", "a2", "a3", "a4", "a5"], { group: "a" })
        yield* q.enqueueBatch(["b1", "b2", "b3"], { group: "b" })
        const claimed = yield* q.claimBatch("w", 10)
        expect(claimed.map((h) => h.job.payload).sort()).toEqual(["a1", "a2", "b1", "b2"])
        yield* claimsNothing(q)
        for (const h of claimed) yield* h.ack
        // a: its third claim in the window is allowed, the fourth not; b: its third
        const next = yield* q.claimBatch("w", 10)
        expect(next.map((h) => h.job.payload).sort()).toEqual(["a3", "b3"])
        for (const h of next) yield* h.ack
        yield* claimsNothing(q)
        yield* advance("59999 millis")
        yield* claimsNothing(q)
        yield* advance("1 millis")
        expect((yield* q.claimBatch("w", 10)).map((h) => h.job.payload)).toEqual(["a4", "a5"])
      })))

    it.effect("fairness: a group with 10 000 queued jobs does not starve a group with one", () =>
      run(Effect.gen(function*() {
        yield* setLimits("fair", {})
        const q = yield* queueOf("fair")
        yield* q.enqueueBatch(Array.from({ length: 10_000 }, (_, i) => `big-${i}`), { group: "big" })
        yield* q.enqueue("small", { group: "small" })
        const first = yield* drainPayloads(q, 3)
        expect(first).toContain("small")
      })))

    it.effect("fairness over a backlog enqueued before the limits were set", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("backlog")
        yield* q.enqueueBatch(Array.from({ length: 10_000 }, (_, i) => `big-${i}`), { group: "big" })
        yield* q.enqueue("small", { group: "small" })
        yield* setLimits("backlog", { concurrency: 10 })
        const first = yield* drainPayloads(q, 3)
        expect(first).toContain("small")
      })))

    it.effect("claims rotate across groups within a priority; a higher priority still goes first", () =>
      run(Effect.gen(function*() {
        yield* setLimits("rotate", {})
        const q = yield* queueOf("rotate")
        yield* q.enqueueBatch(["a1", "a2", "a3"], { group: "a" })
        yield* q.enqueueBatch(["b1", "b2"], { group: "b" })
        yield* q.enqueue("c1", { group: "c" })
        yield* q.enqueue("urgent", { group: "a", priority: 5 })
        expect(yield* drainPayloads(q, 10)).toEqual(["urgent", "a1", "b1", "c1", "a2", "b2", "a3"])
      })))

    it.effect("a claim whose first candidate expired buries it and takes the next, also after the queue's first claims", () =>
      run(Effect.gen(function*() {
        yield* setLimits("stale", { concurrency: 3, groupConcurrency: 1 })
        const q = yield* queueOf("stale")
        // Claims first: an engine may claim differently once it has seen the queue's limits (SQLite's one-statement claim).
        yield* q.enqueueBatch(["w1", "w2", "w3"], { group: "g" })
        expect(yield* drainPayloads(q, 3)).toEqual(["w1", "w2", "w3"])
        const old = yield* q.enqueue("old", { group: "a", expires: "1 second" })
        yield* q.enqueue("next", { group: "b" })
        yield* advance(1_000)
        expect((yield* mustClaim(q, "w")).job.payload).toBe("next")
        const dead = yield* mustGet(q, old)
        expect(dead.state).toBe("dead")
        expect(Option.getOrUndefined(dead.lastError)).toBe("expired")
        yield* claimsNothing(q)
      })))

    it.effect("a group arriving while its priority has no pending job starts where the rotation stands (within ROUND_STEP rounds)", () =>
      run(Effect.gen(function*() {
        yield* setLimits("catchup", {})
        const q = yield* queueOf("catchup")
        // Group a's 100 jobs claimed and held: the rotation has passed 100 rounds, and no job of priority 0 is pending.
        yield* q.enqueueBatch(Array.from({ length: 100 }, (_, i) => `a${i}`), { group: "a" })
        expect((yield* q.claimBatch("w", 100)).length).toBe(100)
        // A newcomer starts from the queue's current round, not from round 0: a's next job is among the first
        // ROUND_STEP claims (from round 0 the newcomer's 20 jobs would all come first), and the two alternate.
        yield* q.enqueueBatch(Array.from({ length: 20 }, (_, i) => `n${i}`), { group: "n" })
        yield* q.enqueueBatch(Array.from({ length: 20 }, (_, i) => `a${100 + i}`), { group: "a" })
        const order = yield* drainPayloads(q, 40)
        expect(order.length).toBe(40)
        const firstA = order.indexOf("a100")
        expect(firstA).toBeGreaterThan(0)
        expect(firstA).toBeLessThanOrEqual(ROUND_STEP)
        const rest = order.slice(firstA, firstA + 10)
        expect(rest.filter((p) => String(p).startsWith("n")).length).toBe(5)
      })))

    it.effect("limits change while claims run: a lower limit holds new claims until enough slots free; clearing lifts it", () =>
      run(Effect.gen(function*() {
        yield* setLimits("change", { concurrency: 2 })
        const q = yield* queueOf("change")
        yield* q.enqueueBatch([1, 2, 3, 4, 5, 6])
        const held = yield* q.claimBatch("w", 2)
        yield* setLimits("change", { concurrency: 1 })
        yield* claimsNothing(q) // 2 in flight, limit 1: the claims keep their slots
        yield* held[0]!.ack
        yield* claimsNothing(q) // 1 in flight
        yield* held[1]!.ack
        yield* mustClaim(q, "w")
        yield* claimsNothing(q)
        yield* setLimits("change", { concurrency: 3 })
        expect((yield* q.claimBatch("w", 5)).length).toBe(2)
        expect(yield* (yield* Queues.Queues).clearLimits("change")).toBe(true)
        expect((yield* q.claimBatch("w", 5)).length).toBe(1)
        expect(Option.isNone(yield* (yield* Queues.Queues).limits("change"))).toBe(true)
      })))

    it.effect("limits read back as set; InvalidOptions names the field and nothing is written", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        expect(Option.isNone(yield* queues.limits("v"))).toBe(true)
        const bad: ReadonlyArray<[unknown, string]> = [
          [{ concurrency: 0 }, "concurrency"],
          [{ concurrency: 1.5 }, "concurrency"],
          [{ concurrency: Number.NaN }, "concurrency"],
          [{ rate: { limit: 0, per: "1 second" } }, "rate.limit"],
          [{ rate: { per: "1 second" } }, "rate.limit"],
          [{ rate: { limit: 5 } }, "rate.per"],
          [{ rate: { limit: 5, per: "0 seconds" } }, "rate.per"],
          [{ rate: { limit: 5, per: -1 } }, "rate.per"],
          [{ rate: { limit: 5, per: "soon" } }, "rate.per"],
          [{ rate: 5 }, "rate"],
          [{ groupConcurrency: -1 }, "groupConcurrency"],
          [{ groupRate: { limit: 2.5, per: "1 minute" } }, "groupRate.limit"],
          [{ groupRate: { limit: 2, per: Number.POSITIVE_INFINITY } }, "groupRate.per"],
          [null, "limits"]
        ]
        for (const [limits, field] of bad) {
          const error = yield* Effect.flip(queues.setLimits("v", limits as Queues.Limits))
          expect(error).toMatchObject({ _tag: "InvalidOptions", field })
        }
        expect(Option.isNone(yield* queues.limits("v"))).toBe(true)
        expect(yield* Effect.flip(queues.setLimits("", {}))).toMatchObject({ _tag: "InvalidName" })
        expect(yield* Effect.flip(queues.setLimits("__alkstore_x", {}))).toMatchObject({ _tag: "ReservedName" })
        const q = yield* queueOf("v")
        for (const group of ["", "\ud800"]) {
          expect(yield* Effect.flip(q.enqueue(1, { group }))).toMatchObject({ _tag: "InvalidOptions", field: "group" })
        }
        expect((yield* q.stats).pending).toBe(0)

        yield* queues.setLimits("v", {
          concurrency: 4,
          rate: { limit: 100, per: "1 minute" },
          groupConcurrency: 1,
          groupRate: { limit: 2, per: "1 second" }
        })
        const stored = Option.getOrThrow(yield* queues.limits("v"))
        expect(stored.concurrency).toBe(4)
        expect(stored.groupConcurrency).toBe(1)
        expect(stored.rate?.limit).toBe(100)
        expect(Duration.toMillis(stored.rate!.per)).toBe(60_000)
        expect(Duration.toMillis(stored.groupRate!.per)).toBe(1_000)
        yield* queues.setLimits("v", { concurrency: 2 })
        expect(Option.getOrThrow(yield* queues.limits("v"))).toEqual({ concurrency: 2 })
        expect(yield* queues.clearLimits("v")).toBe(true)
        expect(yield* queues.clearLimits("v")).toBe(false)
      })))

    it.effect("stats: heldBack counts due pending jobs a claim could not take now", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("held")
        yield* q.enqueueBatch([1, 2, 3, 4, 5])
        yield* q.enqueue("later", { delay: "1 minute" })
        expect((yield* q.stats).heldBack).toBe(0)
        yield* setLimits("held", { concurrency: 2 })
        expect((yield* q.stats).heldBack).toBe(3)
        yield* q.claimBatch("w", 2)
        expect(yield* q.stats).toMatchObject({ pending: 3, claimed: 2, heldBack: 3 })
        yield* setLimits("held", { concurrency: 4 })
        expect((yield* q.stats).heldBack).toBe(1)
        yield* setLimits("held", { groupConcurrency: 1 })
        expect((yield* q.stats).heldBack).toBe(3) // one default group: one at a time, and 2 are in flight
      })))

    it.effect("a waiter held back by concurrency wakes on an ack by another fiber", () =>
      run(Effect.gen(function*() {
        yield* setLimits("wait-ack", { concurrency: 1 })
        const q = yield* queueOf("wait-ack")
        yield* q.enqueueBatch(["a", "b"])
        const a = yield* mustClaim(q, "w")
        const taker = yield* Effect.fork(q.take("waiter"))
        yield* settle
        yield* advance("1 minute")
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* a.ack
        yield* settle
        const b = yield* Fiber.join(taker)
        expect(b.job.payload).toBe("b")
      })))

    it.effect("a waiter held back by a rate wakes exactly when the window admits the next claim", () =>
      run(Effect.gen(function*() {
        yield* setLimits("wait-rate", { rate: { limit: 1, per: "10 seconds" } })
        const q = yield* queueOf("wait-rate")
        yield* q.enqueueBatch(["a", "b"])
        yield* Effect.flatMap(mustClaim(q, "w"), (h) => h.ack)
        const taker = yield* Effect.fork(q.take("waiter"))
        yield* settle
        yield* advance("9999 millis")
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* advance("1 millis")
        const b = yield* Fiber.join(taker)
        expect(b.job.payload).toBe("b")
      })))

    it.effect("a waiter held back by a serial group wakes when the group's claim is acked", () =>
      run(Effect.gen(function*() {
        yield* setLimits("wait-group", { groupConcurrency: 1 })
        const q = yield* queueOf("wait-group")
        yield* q.enqueueBatch(["t1", "t2"], { group: "t" })
        const t1 = yield* mustClaim(q, "w")
        const taker = yield* Effect.fork(q.take("waiter"))
        yield* settle
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* t1.ack
        yield* settle
        expect((yield* Fiber.join(taker)).job.payload).toBe("t2")
      })))

    it.effect("raising a limit wakes a held-back waiter", () =>
      run(Effect.gen(function*() {
        yield* setLimits("raise", { concurrency: 1 })
        const q = yield* queueOf("raise")
        yield* q.enqueueBatch(["a", "b"])
        yield* mustClaim(q, "w")
        const taker = yield* Effect.fork(q.take("waiter"))
        yield* settle
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* setLimits("raise", { concurrency: 2 })
        yield* settle
        expect((yield* Fiber.join(taker)).job.payload).toBe("b")
      })))

    it.effect("a delayed job heads its serial group: later jobs of the group wait for it, other groups do not", () =>
      run(Effect.gen(function*() {
        yield* setLimits("groups-elsewhere", { groupConcurrency: 1 })
        const q = yield* queueOf("groups-elsewhere")
        yield* q.enqueue("x1", { group: "x", delay: "1 second" })
        yield* q.enqueue("x2", { group: "x" })
        yield* q.enqueue("y1", { group: "y" })
        // x1 (delayed) heads group x, so x2 waits for it; y is not held back
        expect((yield* mustClaim(q, "w")).job.payload).toBe("y1")
        yield* claimsNothing(q)
        yield* advance("1 second")
        const x1 = yield* mustClaim(q, "w")
        expect(x1.job.payload).toBe("x1")
        yield* claimsNothing(q)
        yield* x1.ack
        expect((yield* mustClaim(q, "w")).job.payload).toBe("x2")
      })))
  
    it.effect("ScheduleOpts.group: fired jobs carry the schedule's group (a serial group holds the second fire)", () =>
      run(Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        expect(yield* Effect.flip(scheduler.schedule("bad", "@every 1s", "fired", 1, { group: "" }))).toMatchObject({
          _tag: "InvalidOptions",
          field: "group"
        })
        const registered = yield* scheduler.schedule("tick", "@every 1s", "fired", 1, { group: "g" })
        expect(registered.opts.group).toEqual(Option.some("g"))
        yield* setLimits("fired", { groupConcurrency: 1 })
        const runner = yield* Effect.fork(scheduler.runSchedules)
        yield* settle
        yield* advance("2 seconds")
        yield* Fiber.interrupt(runner)
        const q = yield* queueOf("fired")
        expect((yield* q.stats).pending).toBe(2)
        yield* mustClaim(q, "w")
        yield* claimsNothing(q)
        expect((yield* q.stats).heldBack).toBe(1)
      })))

    it.effect("the outbox takes EnqueueOpts.group; its backing queue takes no limits (ReservedName, nothing written)", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        expect(yield* Effect.flip(queues.setLimits("__alkstore_outbox:hooks", { concurrency: 1 }))).toMatchObject({
          _tag: "ReservedName"
        })
        const sql = yield* SqlClient.SqlClient
        expect(Number((yield* sql<{ n: unknown }>`SELECT count(*) AS n FROM __alkstore_flow_limits`)[0]!.n)).toBe(0)
        const outbox = yield* (yield* Outbox.Outbox).outbox("hooks")
        expect(yield* Effect.flip(outbox.enqueue(1, { group: "" }))).toMatchObject({ _tag: "InvalidOptions", field: "group" })
        const id = yield* outbox.enqueue({ hook: 1 }, { group: "tenant-1" })
        expect(Option.isSome(yield* outbox.getJob(id))).toBe(true)
      })))
  
    if (engine.capabilities.sqliteFile) {
      it.effect("a held-back waiter makes no writes while idle, however often it is woken", () => {
        const filename = freshFile("flow-idle")
        return Effect.gen(function*() {
          yield* setLimits("idle", { concurrency: 1 })
          const q = yield* queueOf("idle")
          yield* q.enqueueBatch(["a", "b"])
          yield* mustClaim(q, "w")
          const taker = yield* Effect.fork(q.take("waiter"))
          yield* settle
          // another connection's commits on the file wake the waiter (data_version), time passes: it only reads
          const outside = new Sqlite(filename)
          const version = () => outside.pragma("data_version", { simple: true }) as number
          const jobs = () => outside.prepare("SELECT id, state, claim_token, attempts FROM __alkstore_jobs ORDER BY id").all()
          const before = { version: version(), jobs: JSON.stringify(jobs()) }
          for (let i = 0; i < 5; i++) {
            yield* advance("1 second")
            yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 30)))
            yield* settle
          }
          expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
          expect(version()).toBe(before.version) // nobody committed anything to the file
          expect(JSON.stringify(jobs())).toBe(before.jobs)
          outside.close()
          yield* Fiber.interrupt(taker)
        }).pipe(Effect.provide(engine.store({ filename, fallbackPoll: "200 millis" })))
      })
    }
  })
