/**
 * Fresh-code review 5 (the changes a07fbf6..HEAD under src/): the extend-only heartbeat in the database and the
 * handle's remembered lease end, the dry walk's lapsed pages, maintenance's claim-log prune, SQLite's enqueue
 * round and PostgreSQL's COMMIT-answered-ROLLBACK. Each test here fails on the current code.
 *
 * - A handle decides whether a heartbeat shortened its lease (and so whether to wake waiters) by comparing the
 *   new end with `Handle.leaseEnd`, what the handle last *wrote* (src/internal/handle.ts `beat`) — also a
 *   heartbeat's write that its application transaction rolled back. After a rolled-back heartbeat that
 *   shortened the lease, a real shortening that still ends later than the rolled-back value is not signalled,
 *   and a waiter in the process sleeps to the lease's old end.
 * - A multi-row insert (a scheduler tick's catch-up on SqliteStore.layer and on PostgreSQL) gives a group's jobs
 *   `base(priority) + place in the group in the statement` (sqlite/flowInsert.ts `flowInsertValues` with
 *   jobInsert.ts's offsets; pg/queueStatements.ts `flowRoundOf(...) + row_number() - 1`), where `base` depends on
 *   the row's priority: jobs of one group at two priorities get rounds out of enqueue order, and
 *   `groupConcurrency: 1` runs the later-enqueued job first. SqliteStore.layerFromClient, which inserts the rows
 *   one statement each, gives the order the docs promise.
 *
 * Both hold on SqliteStore.layerFromClient (see each test), so it is left out here.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Option } from "effect"
import { Scheduler } from "../src/index.js"
import { engines, sqliteFromClient } from "./contract/harness.js"
import { advance, mustClaim, optionalMs, queueOf, setLimits, settle } from "./contract/support.js"

for (const engine of engines.filter((e) => e.name !== sqliteFromClient.name)) {
  describe(`fresh-code5 review — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, any>) =>
      effect.pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))) as Effect.Effect<A, E, never>

    // docs/decisions.md, "A heartbeat that shortens a lease": "Waiters in the process are signalled, so they read
    // the new, earlier deadline." The handler's `heartbeat("2 seconds")` inside a transaction that fails is
    // rolled back (the lease stays at the claim's 30 s, checked). A second heartbeat, `heartbeat("5 seconds")` at
    // 1 s, shortens the lease in the database from 30 s to 6 s. Observed: no signal — the handle compares 6 s with
    // the 2 s it remembers from the rolled-back write — and the waiting take sleeps to the old deadline (30 s):
    // at 7 s it has not taken the job, although its lease lapsed at 6 s. Without the rolled-back heartbeat the
    // same take has the job at 7 s. (SqliteStore.layerFromClient passes: its data_version watcher echoes the
    // store's own commit, which masks the missing signal.)
    it.effect("a heartbeat that shortens the lease after a rolled-back heartbeat wakes the waiter", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const q = yield* queueOf("shortened-after-rollback", { visibilityTimeout: "30 seconds" })
        yield* q.enqueue("a")
        const h = yield* mustClaim(q, "w1")
        yield* Effect.ignore(sql.withTransaction(Effect.zipRight(h.heartbeat("2 seconds"), Effect.fail("boom"))))
        const leaseAfterRollback = optionalMs(Option.getOrThrow(yield* q.getJob(h.job.id)).claimedUntil)
        const taker = yield* Effect.fork(q.take("w2"))
        yield* settle
        yield* advance("1 second")
        const shortened = yield* h.heartbeat("5 seconds") // the lease now ends at 6 s
        yield* settle
        yield* advance("6 seconds") // 7 s: the lease lapsed a second ago
        yield* settle
        const tookBy7s = Option.isSome(yield* Fiber.poll(taker))
        yield* Fiber.interrupt(taker)
        expect({ leaseAfterRollback, shortened, tookBy7s }).toEqual({
          leaseAfterRollback: 30_000,
          shortened: true,
          tookBy7s: true
        })
      })), 30_000)

    // docs/flow-control.md: "`groupConcurrency: n` — [...] a job is claimable only while fewer than `n` live jobs
    // of its group are **ahead of it in enqueue order**. With `n = 1` each group is serial in enqueue order,
    // whatever the priorities inside it", and "each job carries a round, one more than the last live job of its
    // group". Two schedules fire into group "y" of a queue with `groupConcurrency: 1`: "a-low" (payload "low",
    // priority 0) and "b-high" ("high", priority 2); the leader starts 3 minutes late, so one tick inserts 3
    // boundaries of each in one statement, in schedule-name order: the "low" jobs first (lower ids). Priority 0's rotation stands at round 9 (group "big": nine
    // delayed jobs, then a pending one), priority 2 has none (the queue's round, 0). Observed on SqliteStore.layer
    // and both PostgreSQL layers: "low" rounds 9, 10, 11 and "high" rounds 3, 4, 5 — the later-enqueued "high"
    // jobs are ahead in the group's serial order, and the first claim takes "high" #1 while "low" #1, enqueued
    // before it, waits. SqliteStore.layerFromClient (one statement per row) gives "high" 12, 13, 14 and the
    // first claim takes "low" #1, as the docs say.
    it.effect("a scheduler tick's batch keeps a group serial in enqueue order across priorities", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* setLimits("serial-batch", { groupConcurrency: 1 })
        const q = yield* queueOf("serial-batch")
        yield* q.enqueueBatch([1, 2, 3, 4, 5, 6, 7, 8, 9], { group: "big", delay: "1 day" })
        yield* q.enqueue(10, { group: "big" })
        const scheduler = yield* Scheduler.Scheduler
        yield* scheduler.schedule("a-low", "@every 1m", "serial-batch", "low", { group: "y" })
        yield* scheduler.schedule("b-high", "@every 1m", "serial-batch", "high", { group: "y", priority: 2 })
        yield* advance("3 minutes")
        const leader = yield* Effect.forkDaemon(scheduler.runSchedules)
        yield* settle
        yield* Fiber.interrupt(leader)
        const rows = yield* sql<{ id: unknown; round: unknown }>`SELECT id, flow_round AS round FROM __alkstore_jobs
          WHERE queue = 'serial-batch' AND group_key = 'y' ORDER BY id`
        expect(rows.length).toBe(6)
        const rounds = rows.map((row) => Number(row.round))
        const roundsFollowIds = rounds.every((round, i) => i === 0 || round > rounds[i - 1]!)
        const first = yield* mustClaim(q, "w")
        expect({ roundsFollowIds, firstClaimed: first.job.payload }).toEqual({ roundsFollowIds: true, firstClaimed: "low" })
      })), 30_000)
  })
}
