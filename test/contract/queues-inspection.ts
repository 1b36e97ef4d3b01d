/**
 * The queue contract (CONTRACT §3), inspection and repair: queue-scoped
 * getJob/cancel, stats, dead, requeueDead, purgeDead, the maintenance sweep,
 * and the claim's query plan.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Option, TestClock } from "effect"
import { Queues } from "../../src/index.js"
import { sql as adminSql } from "../../src/internal/sqlite/adminStorage.js"
import { claimStatements, expireSomeSql, sql as queueSql } from "../../src/internal/sqlite/queueStatements.js"
import type { EngineUnderTest } from "./harness.js"
import {
  claimsNothing,
  deadBacklog,
  maintenanceRowsOf,
  jobCount,
  ms,
  mustClaim,
  mustGet,
  optionalMs,
  queueOf,
  type StoreServices, advance } from "./support.js"
import { collectingTracer } from "./telemetry.js"

const day = 24 * 3_600_000

export const queuesInspectionContract = (engine: EngineUnderTest) =>
  describe(`queues: inspection and repair — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>, settings?: Parameters<EngineUnderTest["store"]>[0]) =>
      Effect.provide(effect, engine.store(settings))

    describe("queue scope", () => {
      it.effect("another queue's job is absent to getJob, cancel and requeueDead, and stays unchanged", () =>
        run(Effect.gen(function*() {
          const mine = yield* queueOf("mine")
          const theirs = yield* queueOf("theirs")
          const pending = yield* mine.enqueue("p")
          const claimedId = yield* mine.enqueue("c")
          yield* mine.enqueue("d")
          const claimed = yield* mustClaim(mine, "w")
          const deadHandle = yield* mustClaim(mine, "w")
          yield* deadHandle.fail("x")
          const deadId = deadHandle.job.id
          const before = [yield* mustGet(mine, pending), yield* mustGet(mine, claimedId), yield* mustGet(mine, deadId)]
          expect(claimed.job.id).toBe(pending)
          for (const id of [pending, claimedId, deadId, 999_999]) {
            expect(Option.isNone(yield* theirs.getJob(id))).toBe(true)
            expect(yield* theirs.cancel(id)).toBe(false)
            expect(yield* theirs.requeueDead(id)).toBe(false)
          }
          expect(yield* theirs.purgeDead()).toBe(0)
          expect(yield* theirs.dead()).toEqual([])
          expect(yield* theirs.stats).toEqual({ pending: 0, scheduled: 0, claimed: 0, dead: 0, oldestPendingAge: Option.none(), heldBack: 0 })
          expect([yield* mustGet(mine, pending), yield* mustGet(mine, claimedId), yield* mustGet(mine, deadId)]).toEqual(before)
        })))

      it.effect("cancel deletes a pending or claimed job (its handle then reports loss), never a dead one", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("cancel")
          const scheduled = yield* q.enqueue("s", { delay: "1 hour" })
          const pending = yield* q.enqueue("p")
          expect(yield* q.cancel(scheduled)).toBe(true)
          const handle = yield* mustClaim(q, "w")
          expect(handle.job.id).toBe(pending)
          expect(yield* q.cancel(pending)).toBe(true)
          expect(yield* handle.ack).toBe(false)
          expect(yield* handle.heartbeat()).toBe(false)
          expect(yield* q.cancel(pending)).toBe(false)
          expect(Option.isNone(yield* q.getJob(pending))).toBe(true)
          const dead = yield* q.enqueue("d")
          yield* (yield* mustClaim(q, "w")).fail("x")
          expect(yield* q.cancel(dead)).toBe(false)
          expect((yield* mustGet(q, dead)).state).toBe("dead")
          expect(yield* q.cancel(424_242)).toBe(false)
        })))
    })

    describe("stats", () => {
      it.effect("pending (due now), scheduled (future), claimed, dead and the oldest due job's age", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("stats", { visibilityTimeout: "1 minute" })
          const empty = yield* q.stats
          expect(empty).toEqual({ pending: 0, scheduled: 0, claimed: 0, dead: 0, oldestPendingAge: Option.none(), heldBack: 0 })

          yield* advance("10 seconds")
          yield* q.enqueue("dead")
          yield* (yield* mustClaim(q, "w")).fail("x")
          yield* q.enqueue("claimed")
          yield* mustClaim(q, "w")
          yield* q.enqueue("due")
          yield* q.enqueue("due earlier", { runAt: 4_000 })
          yield* q.enqueue("later", { delay: "30 seconds" })
          yield* (yield* queueOf("elsewhere")).enqueue("not counted")

          const stats = yield* q.stats
          expect(stats).toMatchObject({ pending: 2, scheduled: 1, claimed: 1, dead: 1 })
          expect(Option.map(stats.oldestPendingAge, Duration.toMillis)).toEqual(Option.some(6_000))

          // time passes: the scheduled job is due now, the age grows; a lapsed claim still counts as claimed
          yield* advance("2 minutes")
          const later = yield* q.stats
          expect(later).toMatchObject({ pending: 3, scheduled: 0, claimed: 1, dead: 1 })
          expect(Option.map(later.oldestPendingAge, Duration.toMillis)).toEqual(Option.some(126_000))
        })))
    })

    describe("dead letters", () => {
      it.effect("dead({ limit }) lists the newest diedAt first", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("dead")
          const ids: Array<number> = []
          for (const text of ["first", "second", "third"]) {
            const id = yield* q.enqueue(text)
            yield* (yield* mustClaim(q, "w")).fail(text)
            ids.push(id)
            yield* advance("1 second")
          }
          yield* q.enqueue("alive")
          const all = yield* q.dead()
          expect(all.map((job) => job.id)).toEqual([ids[2], ids[1], ids[0]])
          expect(all.map((job) => job.state)).toEqual(["dead", "dead", "dead"])
          expect(all.map((job) => Option.getOrUndefined(job.lastError))).toEqual(["third", "second", "first"])
          expect(all.map((job) => optionalMs(job.diedAt))).toEqual([2_000, 1_000, 0])
          expect((yield* q.dead({ limit: 2 })).map((job) => job.id)).toEqual([ids[2], ids[1]])
          expect((yield* q.dead({ limit: 1 })).map((job) => job.payload)).toEqual(["third"])
        })))

      it.effect("requeueDead: pending now with attempts 0, lastError kept; only dead jobs", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("requeue", { maxAttempts: 2 })
          const id = yield* q.enqueue("x", { priority: 4 })
          yield* (yield* mustClaim(q, "w")).retry("one", 0)
          yield* (yield* mustClaim(q, "w")).retry("two")
          expect((yield* mustGet(q, id)).state).toBe("dead")
          expect(yield* q.requeueDead(424_242)).toBe(false)
          yield* advance("1 hour")
          expect(yield* q.requeueDead(id)).toBe(true)
          const job = yield* mustGet(q, id)
          expect(job).toMatchObject({ state: "pending", attempts: 0, priority: 4, maxAttempts: 2 })
          expect(ms(job.runAt)).toBe(3_600_000)
          expect(Option.getOrUndefined(job.lastError)).toBe("two")
          expect(Option.isNone(job.diedAt)).toBe(true)
          expect(yield* q.requeueDead(id)).toBe(false)
          // it has its full attempts again
          const again = yield* mustClaim(q, "w")
          expect(again.job.attempts).toBe(1)
          expect(yield* q.requeueDead(id)).toBe(false)
          expect(yield* again.retry("three", 0)).toBe("retried")
          expect((yield* mustClaim(q, "w")).job.attempts).toBe(2)
        })))

      it.effect("a requeued job's old handles stay fenced out (the claim token is never reset)", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("requeue")
          const id = yield* q.enqueue("x")
          const old = yield* mustClaim(q, "w1")
          yield* old.fail("x")
          yield* q.requeueDead(id)
          const fresh = yield* mustClaim(q, "w2")
          expect(yield* old.ack).toBe(false)
          expect(yield* old.heartbeat()).toBe(false)
          expect(yield* fresh.ack).toBe(true)
        })))

      // requeueDead of an expired job: see queues-expiry.ts

      it.effect("purgeDead(olderThan) deletes the queue's dead jobs that died more than olderThan ago; none = all", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("purge")
          const other = yield* queueOf("purge-other")
          const died: Array<number> = []
          for (let i = 0; i < 3; i++) {
            died.push(yield* q.enqueue(i))
            yield* (yield* mustClaim(q, "w")).fail("x")
            yield* advance("10 seconds")
          }
          // died at 0 s, 10 s, 20 s; now 30 s
          yield* other.enqueue("o")
          yield* (yield* mustClaim(other, "w")).fail("x")
          const alive = yield* q.enqueue("alive")
          expect(yield* q.purgeDead("1 minute")).toBe(0)
          expect(yield* q.purgeDead("15 seconds")).toBe(2)
          expect(Option.isNone(yield* q.getJob(died[0]!))).toBe(true)
          expect(Option.isNone(yield* q.getJob(died[1]!))).toBe(true)
          expect((yield* mustGet(q, died[2]!)).state).toBe("dead")
          expect(yield* q.purgeDead()).toBe(1)
          expect(yield* q.purgeDead()).toBe(0)
          expect((yield* mustGet(q, alive)).state).toBe("pending")
          expect((yield* other.stats).dead).toBe(1)
        })))
    })

    describe("maintenance", () => {
      it.effect("expires pending jobs and claims whose lease and expiry both passed; purges dead past retention", () =>
        run(Effect.gen(function*() {
          const queues = yield* Queues.Queues
          const a = yield* queueOf("a", { visibilityTimeout: "10 seconds", backoffBase: "1 hour" })
          const b = yield* queueOf("b", { visibilityTimeout: "1 hour" })
          const oldDead = yield* a.enqueue("old dead")
          yield* (yield* mustClaim(a, "w")).fail("x")
          // one day later: set up the live jobs
          yield* advance(day)
          const t0 = day
          const pendingExpiring = yield* a.enqueue("pending, expires", { expires: "30 seconds" })
          const lapsedExpiring = yield* b.enqueue("claimed, lapsed and expired", { expires: "30 seconds" })
          const heldExpiring = yield* a.enqueue("claimed, lease valid, expired", { expires: "30 seconds", priority: 1 })
          const lapsedFresh = yield* a.enqueue("claimed, lapsed, not expired", { priority: 2 })
          const retriedExpiring = yield* a.enqueue("retried past its expiry", { expires: "30 seconds", priority: 3 })
          const untouched = yield* b.enqueue("no expiry")

          const retried = yield* mustClaim(a, "w")
          expect(retried.job.id).toBe(retriedExpiring)
          // the backoff (1 h) puts its runAt past its expiry
          expect(yield* retried.retry("transient")).toBe("retried")
          expect((yield* mustClaim(a, "w")).job.id).toBe(lapsedFresh)
          const held = yield* mustClaim(a, "w")
          expect(held.job.id).toBe(heldExpiring)
          expect((yield* mustClaim(b, "w")).job.id).toBe(lapsedExpiring)

          expect(yield* queues.maintenance).toEqual({ expired: 0, purged: 0 })
          yield* advance(29_999)
          expect(yield* queues.maintenance).toEqual({ expired: 0, purged: 0 })
          // keep the held claim's lease valid past its expiry
          expect(yield* held.heartbeat("1 minute")).toBe(true)
          yield* advance(1)
          const state = (q: Queues.Queue<unknown>, id: number) => Effect.map(mustGet(q, id), (job) => job.state)
          expect(yield* queues.maintenance).toEqual({ expired: 2, purged: 0 })
          expect(yield* state(a, pendingExpiring)).toBe("dead")
          expect(yield* state(a, retriedExpiring)).toBe("dead")
          // expired, but their leases are still valid: a claim in flight is not swept
          expect(yield* state(b, lapsedExpiring)).toBe("claimed")
          expect(yield* state(a, heldExpiring)).toBe("claimed")
          // lease lapsed but not expired: for a claim to take, not for maintenance
          expect(yield* state(a, lapsedFresh)).toBe("claimed")
          expect(yield* state(b, untouched)).toBe("pending")
          const expiredJob = yield* mustGet(a, pendingExpiring)
          expect(Option.getOrUndefined(expiredJob.lastError)).toBe("expired")
          expect(optionalMs(expiredJob.diedAt)).toBe(t0 + 30_000)
          expect(Option.getOrUndefined((yield* mustGet(a, retriedExpiring)).lastError)).toBe("expired")

          // the held claim can still finish while its lease is valid
          expect(yield* held.ack).toBe(true)

          // once b's lease passed too, it is swept
          yield* advance("1 hour")
          expect(yield* queues.maintenance).toEqual({ expired: 1, purged: 0 })
          expect(yield* state(b, lapsedExpiring)).toBe("dead")
          expect(yield* state(a, lapsedFresh)).toBe("claimed")

          // the dead job from day 0 is purged after 7 days (strictly older), the others later
          expect((yield* mustGet(a, oldDead)).state).toBe("dead")
          const now = yield* TestClock.currentTimeMillis
          yield* advance(7 * day - now)
          expect(yield* queues.maintenance).toEqual({ expired: 0, purged: 0 })
          yield* advance(1)
          expect(yield* queues.maintenance).toEqual({ expired: 0, purged: 1 })
          expect(Option.isNone(yield* a.getJob(oldDead))).toBe(true)
          yield* advance(day + 2 * 3_600_000)
          expect(yield* queues.maintenance).toEqual({ expired: 0, purged: 3 })
          expect(yield* jobCount).toBe(2)
        })))

      it.effect("the dead retention is an engine setting", () =>
        run(
          Effect.gen(function*() {
            const queues = yield* Queues.Queues
            const q = yield* queueOf("short")
            yield* q.enqueue("x")
            yield* (yield* mustClaim(q, "w")).fail("x")
            yield* advance("1 hour")
            expect((yield* queues.maintenance).purged).toBe(0)
            yield* advance(1)
            expect((yield* queues.maintenance).purged).toBe(1)
            expect(yield* jobCount).toBe(0)
          }),
          { deadRetention: "1 hour" }
        ))

      it.effect("an expired keyed job swept by maintenance frees its key", () =>
        run(Effect.gen(function*() {
          const queues = yield* Queues.Queues
          const q = yield* queueOf("keys")
          const first = yield* q.enqueue(1, { key: "k", expires: "1 second" })
          yield* advance("1 second")
          expect((yield* queues.maintenance).expired).toBe(1)
          const second = yield* q.enqueue(2, { key: "k" })
          expect(second).not.toBe(first)
        })))

      it.effect("a backlog is worked through in rounds of at most the engine's maintenanceRows, the event loop running between them; purgeDead too", () => {
        const { tracer, one } = collectingTracer()
        const limit = maintenanceRowsOf(engine)
        return run(Effect.gen(function*() {
          const queues = yield* Queues.Queues
          const q = yield* queueOf("backlog")
          for (let i = 0; i < 10; i++) yield* q.enqueue({ i }, { expires: "1 minute" })
          // one more than a round of jobs that died on day 0
          const backlog = (queue: string) => deadBacklog(engine, queue, limit + 1)
          yield* backlog("backlog")
          yield* advance(8 * day)
          // turns of the event loop while maintenance runs (a SQLite round blocks it)
          let turns = 0
          let turn = setImmediate(function next() {
            turns++
            turn = setImmediate(next)
          })
          const result = yield* Effect.ensuring(queues.maintenance, Effect.sync(() => clearImmediate(turn)))
          expect(result).toEqual({ expired: 10, purged: limit + 1 })
          expect(turns).toBeGreaterThan(0)
          // the ten swept in the first round with a full round of the purge, the last dead job in the second
          expect(one("alkstore.queue.maintenance").attributes.get("alkstore.rounds")).toBe(2)
          expect(yield* q.stats).toMatchObject({ dead: 10, pending: 0 })
          // a queue's purge by hand works in the same rounds
          yield* backlog("by-hand")
          const byHand = yield* queueOf("by-hand")
          expect(yield* byHand.purgeDead()).toBe(limit + 1)
          expect(one("alkstore.queue.purge_dead").attributes.get("alkstore.rounds")).toBe(2)
          expect((yield* byHand.stats).dead).toBe(0)
          expect((yield* q.stats).dead).toBe(10)
        })).pipe(Effect.withTracer(tracer))
      })
    })

    // SQLite's EXPLAIN QUERY PLAN; the PostgreSQL claim has its own EXPLAIN test (test/pg-claim-plan.test.ts).
    if (engine.capabilities.sqliteFile) describe("query plan", () => {
      const plan = (text: string, params: ReadonlyArray<string | number | null>) =>
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.map(
            sql.unsafe<{ detail: string }>(`EXPLAIN QUERY PLAN ${text}`, params as Array<string | number | null>),
            (rows) => rows.map((row) => row.detail)
          ))
      const checkClaim = (claim: ReadonlyArray<string>, lapsed: boolean) =>
        Effect.sync(() => {
          expect(claim.some((line) => line.includes("__alkstore_jobs_pending")), claim.join("\n")).toBe(true)
          expect(claim.some((line) => line.includes("__alkstore_jobs_claimed")), claim.join("\n")).toBe(lapsed)
          // every access to the jobs table is a search (an index or the primary key), never a scan of the table
          const touches = claim.filter((line) => /__alkstore_jobs(?!_)/.test(line))
          expect(touches.length).toBeGreaterThanOrEqual(lapsed ? 3 : 2)
          for (const line of touches) expect(line, claim.join("\n")).toMatch(/^SEARCH __alkstore_jobs USING /)
          // the pending side walks the index in claim order: no sort of the pending rows
          const pendingAt = claim.findIndex((line) => line.includes("__alkstore_jobs_pending"))
          expect(claim[pendingAt + 1] ?? "").not.toMatch(/TEMP B-TREE/)
        })
      const checkPlans = Effect.gen(function*() {
        const now = 1_000
        for (const [statement, lapsed] of [
          [claimStatements.claim, true],
          [claimStatements.claimMany, true],
          [claimStatements.claimPending, false],
          [claimStatements.claimManyPending, false],
          [claimStatements.batchClaim(5).lapsed, true],
          [claimStatements.batchClaim(5).pending, false]
        ] as const) {
          yield* checkClaim(yield* plan(statement.text, statement.bind([now, "w", "plan", 5])), lapsed)
        }
        const scheduled = yield* plan(claimStatements.readiness.text, claimStatements.readiness.bind(["plan", now]))
        const promote = yield* plan(claimStatements.promoteDue, ["plan", now])
        expect(scheduled.join("\n")).toContain("__alkstore_jobs_scheduled")
        expect(scheduled.join("\n")).toContain("__alkstore_jobs_claimed")
        expect(promote.join("\n")).toContain("__alkstore_jobs_scheduled")
        // maintenance's rounds: the sweep joins its picked ids, the purge reads the dead index, then deletes by id
        const expire = yield* plan(expireSomeSql.text, expireSomeSql.bind([now, 100]))
        const deadBefore = yield* plan(queueSql.deadBefore, [now, 100])
        const deleteJob = yield* plan(queueSql.deleteJob, [1])
        // `purgeDead`'s rounds: the queue's dead jobs by their index
        const deadOfQueue = [
          ...yield* plan(queueSql.deadOfQueue, ["plan", 100]),
          ...yield* plan(queueSql.deadOfQueueBefore, ["plan", now, 100])
        ]
        // the operator's overview (sampleMetrics, `alkstore stats`): each state's count from its partial index
        const depths = yield* plan(adminSql.queueDepths, adminSql.queueDepths.split("?").slice(1).map(() => now))
        const depthReads = depths.filter((line) => /__alkstore_jobs(?!_)/.test(line))
        expect(depthReads.length, depths.join("\n")).toBe(5)
        for (const line of depthReads) expect(line).toMatch(/USING (COVERING )?INDEX __alkstore_jobs_/)
        expect(expire.join("\n")).toContain("__alkstore_jobs_expiry")
        expect(deadBefore.join("\n")).toContain("__alkstore_jobs_dead")
        expect(deadOfQueue.every((line) => line.includes("__alkstore_jobs_dead")), deadOfQueue.join("\n")).toBe(true)
        for (
          const line of [...scheduled, ...promote, ...expire, ...deleteJob, ...deadOfQueue]
            .filter((line) => /__alkstore_jobs(?!_)/.test(line))
        ) {
          expect(line).toMatch(/^SEARCH __alkstore_jobs USING /)
        }
      })

      it.effect("the claim reads the partial pending index and never scans the table", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const q = yield* queueOf("plan")
          const other = yield* queueOf("plan-other")
          // enough rows of every kind for the planner to have a choice
          yield* q.enqueueBatch(Array.from({ length: 200 }, (_, i) => i))
          yield* q.enqueueBatch(Array.from({ length: 50 }, (_, i) => i), { delay: "1 hour" })
          yield* other.enqueueBatch(Array.from({ length: 200 }, (_, i) => i))
          yield* q.claimBatch("w", 20)
          for (const handle of yield* q.claimBatch("w", 20)) yield* handle.fail("x")
          // as a fresh file is, and after ANALYZE gave the planner statistics
          yield* checkPlans
          yield* sql.unsafe("ANALYZE")
          yield* checkPlans
        })))

      // Statistics stand until the next ANALYZE: those of a nearly empty table (an application's ANALYZE,
      // or `PRAGMA optimize` at close, with the queue drained) are what the planner reads once the backlog
      // has grown. With them, a batch claim written `WHERE id IN (candidates)` scanned the whole table.
      it.effect("nor after an ANALYZE that saw the table nearly empty", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const q = yield* queueOf("plan")
          yield* q.enqueueBatch([1, 2, 3])
          yield* q.enqueue(4, { delay: "1 hour" })
          yield* (yield* queueOf("plan-other")).enqueue(5)
          yield* q.claimBatch("w", 1)
          yield* sql.unsafe("ANALYZE")
          yield* checkPlans
        })))
    })
  })
