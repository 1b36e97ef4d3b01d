/**
 * The operator's view (`Admin`): overview across queues, job listings by
 * state, lookups and repairs by id alone, locks and schedules as stored.
 * Engine-agnostic: the CLI and the dashboard run on nothing else.
 */
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Duration, Effect, Either, Option, TestClock } from "effect"
import { Admin, Locks, Outbox, Scheduler } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"
import { mustClaim, queueOf, type StoreServices, advance } from "./support.js"

const summaryOf = (name: string) =>
  Effect.flatMap(Admin.Admin, (admin) =>
    Effect.map(admin.queues, (queues) => queues.find((q) => q.name === name)))

export const adminContract = (engine: EngineUnderTest) =>
  describe(`admin: the operator's view — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    it.effect("queues lists every queue with its depths, a scheduled job becoming pending when due", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        expect(yield* admin.queues).toEqual([])
        const emails = yield* queueOf("emails")
        const reports = yield* queueOf("reports")
        yield* emails.enqueue(1)
        yield* emails.enqueue(2)
        yield* emails.enqueue(3, { delay: "1 minute" })
        yield* reports.enqueue("r")
        const claimed = yield* mustClaim(emails, "w")
        yield* (yield* mustClaim(reports, "w")).fail("broken")
        yield* advance("10 seconds")
        const queues = yield* admin.queues
        expect(queues.map((q) => q.name)).toEqual(["emails", "reports"])
        expect(queues[0]).toMatchObject({ pending: 1, scheduled: 1, claimed: 1, dead: 0 })
        expect(Option.map(queues[0]!.oldestPendingAge, Duration.toMillis)).toEqual(Option.some(10_000))
        expect(queues[1]).toMatchObject({ pending: 0, scheduled: 0, claimed: 0, dead: 1 })
        expect(Option.isNone(queues[1]!.oldestPendingAge)).toBe(true)
        yield* advance("1 minute")
        expect(yield* summaryOf("emails")).toMatchObject({ pending: 2, scheduled: 0, claimed: 1 })
        yield* claimed.ack
        expect(yield* admin.totals).toEqual({ lastJobId: 4, live: 3 })
      })))

    it.effect("a queue a schedule feeds is listed before its first job; schedules read back with next fire", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        const scheduler = yield* Scheduler.Scheduler
        yield* scheduler.schedule("nightly", "@every 1h", "sweeps", { full: true }, { priority: 2 })
        expect(yield* summaryOf("sweeps")).toMatchObject({ pending: 0, scheduled: 0, claimed: 0, dead: 0 })
        const [schedule] = yield* admin.schedules
        expect(schedule).toMatchObject({ name: "nightly", spec: "@every 1h", queue: "sweeps", payload: { full: true } })
        expect(DateTime.toEpochMillis(schedule!.nextFireAt)).toBe(3_600_000)
        expect(schedule!.opts.priority).toBe(2)
      })))

    it.effect("jobs filters by queue and state, newest first, with a limit and paging; outbox queues are readable", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        const a = yield* queueOf("a")
        const b = yield* queueOf("b")
        const ids = [yield* a.enqueue(1), yield* a.enqueue(2), yield* b.enqueue(3), yield* a.enqueue(4, { delay: "1 hour" })]
        yield* (yield* mustClaim(a, "w")).fail("no")
        expect((yield* admin.jobs()).map((j) => j.id)).toEqual([...ids].reverse())
        expect((yield* admin.jobs({ queue: "a" })).map((j) => j.id)).toEqual([ids[3], ids[1], ids[0]])
        expect((yield* admin.jobs({ queue: "a", state: "pending" })).map((j) => j.id)).toEqual([ids[1]])
        expect((yield* admin.jobs({ queue: "a", state: "scheduled" })).map((j) => j.state)).toEqual(["scheduled"])
        const [dead] = yield* admin.jobs({ state: "dead" })
        expect(dead).toMatchObject({ id: ids[0], queue: "a", state: "dead", payload: 1, attempts: 1 })
        expect(dead!.lastError).toEqual(Option.some("no"))
        expect((yield* admin.jobs({ limit: 2 })).map((j) => j.id)).toEqual([ids[3], ids[2]])
        expect((yield* admin.jobs({ limit: 2, beforeId: ids[2]! })).map((j) => j.id)).toEqual([ids[1], ids[0]])
        const hooks = yield* (yield* Outbox.Outbox).outbox("hooks")
        yield* hooks.enqueue({ url: "x" })
        const [sent] = yield* admin.jobs({ queue: "__alkstore_outbox:hooks" })
        expect(sent!.payload).toEqual({ url: "x" })
      })))

    it.effect("job and jobs carry the trace context a job was enqueued in; none outside a span", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        const q = yield* queueOf("traced")
        const [traced, request] = yield* Effect.withSpan(Effect.zip(q.enqueue(1), Effect.currentSpan), "request")
        const untraced = yield* q.enqueue(2)
        const expected = {
          traceparent: `00-${request.traceId}-${request.spanId}-01`,
          traceId: request.traceId,
          spanId: request.spanId,
          sampled: true
        }
        expect(Option.map(yield* admin.job(traced), (j) => j.traceContext)).toEqual(Option.some(Option.some(expected)))
        expect(Option.map(yield* admin.job(untraced), (j) => j.traceContext)).toEqual(Option.some(Option.none()))
        expect((yield* admin.jobs({ queue: "traced" })).map((j) => Option.getOrNull(j.traceContext))).toEqual([null, expected])
      })))

    it.effect("bad filters and ids are typed errors", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        const fails = (effect: Effect.Effect<unknown, { _tag: string }>) =>
          Effect.map(Effect.either(effect), (e) => (Either.isLeft(e) ? e.left._tag : "succeeded"))
        expect(yield* fails(admin.jobs({ limit: 0 }))).toBe("InvalidOptions")
        expect(yield* fails(admin.jobs({ limit: 1001 }))).toBe("InvalidOptions")
        expect(yield* fails(admin.jobs({ state: "done" as never }))).toBe("InvalidOptions")
        expect(yield* fails(admin.jobs({ queue: "" }))).toBe("InvalidName")
        expect(yield* fails(admin.jobs({ queue: "\uD800" }))).toBe("InvalidName")
        expect(yield* fails(admin.job(0))).toBe("InvalidOptions")
        expect(yield* fails(admin.job(1.5))).toBe("InvalidOptions")
        expect(yield* fails(admin.requeue(-1))).toBe("InvalidOptions")
        expect(yield* fails(admin.purgeDead(""))).toBe("InvalidName")
        expect(yield* fails(admin.purgeDead("q", "-1 seconds"))).toBe("InvalidOptions")
      })))

    it.effect("requeue by id finds the job's queue, puts a dead job back pending, and refuses others", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        const q = yield* queueOf("work")
        const id = yield* q.enqueue({ n: 1 })
        const pendingId = yield* q.enqueue({ n: 2 })
        yield* (yield* mustClaim(q, "w")).fail("boom")
        expect(yield* admin.requeue(999)).toEqual({ _tag: "NotFound" })
        const refused = yield* admin.requeue(pendingId)
        expect(refused._tag).toBe("Refused")
        const done = yield* admin.requeue(id)
        expect(done._tag).toBe("Done")
        expect(done._tag === "Done" && done.job).toMatchObject({ id, state: "pending", attempts: 0 })
        const again = yield* mustClaim(q, "w2")
        expect(again.job.id).toBe(id)
      })))

    it.effect("cancel by id deletes a pending or claimed job and refuses a dead one", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        const q = yield* queueOf("work")
        const dead = yield* q.enqueue(1)
        const pending = yield* q.enqueue(2)
        yield* (yield* mustClaim(q, "w")).fail("x")
        expect((yield* admin.cancel(dead))._tag).toBe("Refused")
        expect((yield* admin.cancel(pending))._tag).toBe("Done")
        expect(Option.isNone(yield* admin.job(pending))).toBe(true)
        expect(yield* admin.cancel(pending)).toEqual({ _tag: "NotFound" })
      })))

    it.effect("purgeDead removes a queue's dead jobs older than the age given", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        const q = yield* queueOf("work")
        yield* q.enqueue(1)
        yield* q.enqueue(2)
        yield* (yield* mustClaim(q, "w")).fail("x")
        yield* advance("2 hours")
        yield* (yield* mustClaim(q, "w")).fail("y")
        expect(yield* admin.purgeDead("work", "1 hour")).toBe(1)
        expect(yield* admin.purgeDead("work")).toBe(1)
        expect(yield* admin.jobs({ state: "dead" })).toEqual([])
      })))

    it.effect("migrations lists the engine's applied migrations in order", () =>
      run(Effect.gen(function*() {
        const applied = yield* (yield* Admin.Admin).migrations
        expect(applied.length).toBeGreaterThanOrEqual(2)
        expect(applied[0]).toMatch(/^1_/)
        // ascending and each once (numbers are reserved per feature, so a gap can appear until its branch lands)
        const numbers = applied.map((m) => Number(m.split("_")[0]))
        expect(numbers).toEqual([...new Set(numbers)].sort((a, b) => a - b))
        expect(applied).toContain("4_trace_context")
        expect(applied).toContain("5_effect_stores")
      })))

    it.effect("locks lists holders with tokens and whether the lease is live", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        const locks = yield* Locks.Locks
        const first = Option.getOrThrow(yield* locks.acquire("reindex", { ttl: "30 seconds", owner: "host-a" }))
        yield* first.release
        yield* locks.acquire("reindex", { ttl: "30 seconds", owner: "host-b" })
        yield* locks.acquire("backup", { ttl: "10 seconds", owner: "host-a" })
        yield* advance("20 seconds")
        const rows = yield* admin.locks
        expect(rows.map(({ held, name, owner, token }) => ({ name, owner, token, held }))).toEqual([
          { name: "backup", owner: "host-a", token: 1, held: false },
          { name: "reindex", owner: "host-b", token: 2, held: true }
        ])
        expect(DateTime.toEpochMillis(rows[1]!.expiresAt)).toBe(30_000)
      })))
  })
