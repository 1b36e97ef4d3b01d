/**
 * Fresh-code review 4 (the changes f9fe8b2..HEAD under src/): flow control's paged lapsed claims, maintenance's
 * claim-log rounds and `process`'s extend-only heartbeat, on every engine. Each test here fails on the current
 * code.
 *
 * - A read-only walk (a waiter's probe, `stats`) discounts the doomed lapsed claims ahead of a candidate in its
 *   serial group only among the lapsed pages it has read so far (src/internal/flow.ts `doomedAhead(lapsedSeen ?? …)`).
 *   A doomed claim that is ahead of the candidate in its group but later in walk order (a lower priority) and past
 *   the first 1000 lapsed rows is not in those pages: the walk counts it as live, holds the candidate back, the
 *   waiter sleeps for good and `heldBack` counts the job. With 999 lapsed rows before it both come out right.
 * - `process(..., { heartbeat: true })` skips its beat when the handle's own record of its lease end
 *   (`Handle.leaseEnd`, src/internal/handle.ts `keepAlive`) is far enough out — a record set by a handler's
 *   `heartbeat` even when that heartbeat's write was rolled back with the application's transaction.
 * - Maintenance prunes a claim-log scope only when the rule in force has a window for it
 *   (`HAVING max(at) <= now - max(rate_per | group_rate_per)`): after `setLimits` drops a rate, that scope's
 *   entries are kept for ever.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Option } from "effect"
import { Queues } from "../src/index.js"
import { engines } from "./contract/harness.js"
import { advance, mustClaim, optionalMs, queueOf, setLimits, settle } from "./contract/support.js"

for (const engine of engines) {
  describe(`fresh-code4 review — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, any>) =>
      effect.pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))) as Effect.Effect<A, E, never>

    /**
     * 1000 jobs of priority 1 and group g's head "d" (priority 0), all claimed by a worker that dies on their
     * last attempt (`maxAttempts: 1`); then the queue gets `groupConcurrency: 1` and g's next job "c" (priority
     * 5). Once the leases lapse, every lapsed claim is doomed (a claim buries it), in walk order the 1000 first
     * and "d" last — on the second lapsed page.
     */
    const doomedBacklog = (name: string) =>
      Effect.gen(function*() {
        const q = yield* queueOf(name, { maxAttempts: 1, visibilityTimeout: "10 seconds" })
        yield* q.enqueueBatch(Array.from({ length: 1000 }, (_, i) => i), { priority: 1 })
        expect((yield* q.claimBatch("crashed", 2000)).length).toBe(1000)
        yield* q.enqueue("d", { group: "g" })
        expect((yield* mustClaim(q, "crashed")).job.payload).toBe("d")
        yield* setLimits(name, { groupConcurrency: 1 })
        const c = yield* q.enqueue("c", { group: "g", priority: 5 })
        return { q, c }
      })

    // CONTRACT §9 (docs/contract.md): "A waiter held back only by a limit sleeps until its deadline (the rate window
    // admitting the next claim, a lease end, a due job) or a commit that may free a slot"; docs/flow-control.md:
    // lapsed claims are "read apart from the pending pages, in the walk's order, 1000 at a time; a full page is
    // followed by the next", and "A lapsed claim that a claim would bury (its attempts spent, or expired) takes no
    // slot here either". Observed: at the lease end the waiter's read-only walk meets "c" first, counts the doomed
    // "d" (not yet read: it is on the second lapsed page) among the live jobs ahead of it, passes over the 1000
    // doomed ones and reads "d" only after "c" was decided: "nothing claimable". No deadline is left, and every
    // fallback poll answers the same — the waiter sleeps for good. With 999 jobs instead of 1000 ("d" on the first
    // page) the waiter takes "c" at the lease end, and so do two plain claims here (the first buries the doomed).
    it.effect("a waiter behind a doomed serial head on the second lapsed page wakes for the next job of its group", () =>
      run(Effect.gen(function*() {
        const { c, q } = yield* doomedBacklog("doomed-page")
        const taker = yield* Effect.fork(q.take("waiter"))
        yield* settle
        yield* advance("11 seconds") // every lease lapses
        yield* settle
        yield* advance("2 hours") // two fallback polls
        yield* settle
        const took = Option.map(yield* Fiber.poll(taker), (exit) => (exit._tag === "Success" ? exit.value.job.id : -1))
        expect(took).toEqual(Option.some(c))
      })), 60_000)

    // docs/flow-control.md: "`QueueStats.heldBack` — due pending jobs that a claim could not take right now
    // because of the queue's limits [...]. A lapsed claim that a claim would bury (its attempts spent, or expired)
    // takes no slot here either." The only pending job is "c", whose one job ahead in its serial group is the
    // doomed "d". Observed: heldBack 1 (the count walk misses "d" the same way: it is on the second lapsed page);
    // with 999 jobs before "d", heldBack 0.
    it.effect("stats.heldBack passes over a doomed serial head on the second lapsed page", () =>
      run(Effect.gen(function*() {
        const { q } = yield* doomedBacklog("doomed-stats")
        yield* advance("11 seconds")
        const stats = yield* q.stats
        expect({ pending: stats.pending, heldBack: stats.heldBack }).toEqual({ pending: 1, heldBack: 0 })
      })), 60_000)

    // docs/contract.md §3, Workers: "with `heartbeat: true` each claim's lease is extended every third of its
    // visibility timeout (at most a day apart) while its handler runs, to a visibility timeout from then — never
    // shorter than a lease the handler extended further itself"; docs/queues-and-locks.md: an operation "Inside
    // `sql.withTransaction(...)` [...] joins the application's transaction". A handler's `heartbeat("10 minutes")`
    // inside a transaction that then fails is rolled back: its lease stays at the claim's (30 s), and the handler
    // runs on. Careful-user expectation: the automatic heartbeat keeps the claim while the handler runs.
    // Observed: every beat (10, 20, 30, 40 s) finds the handle's remembered lease end (10 minutes) far enough out and
    // writes nothing; the lease lapses at 30 s and another worker takes the job while the first handler still runs
    // (before keepAlive, each beat wrote now + 30 s).
    it.effect("process heartbeat keeps a claim whose handler's own heartbeat was rolled back", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const q = yield* queueOf("rolled-back", { visibilityTimeout: "30 seconds" })
        const id = yield* q.enqueue({ n: 1 })
        const worker = yield* Effect.forkDaemon(q.process("w1", (_job, handle) =>
          Effect.zipRight(
            Effect.ignore(sql.withTransaction(Effect.zipRight(handle.heartbeat("10 minutes"), Effect.fail("boom")))),
            Effect.never
          ), { heartbeat: true }))
        yield* settle
        const leaseAtStart = optionalMs(Option.getOrThrow(yield* q.getJob(id)).claimedUntil)
        yield* advance("45 seconds")
        yield* settle
        const leaseAt45s = optionalMs(Option.getOrThrow(yield* q.getJob(id)).claimedUntil) ?? 0
        const takenOver = Option.isSome(yield* q.claim("w2"))
        yield* Fiber.interrupt(worker)
        expect({ leaseAtStart, leaseKept: leaseAt45s > 45_000, takenOver }).toEqual({
          leaseAtStart: 30_000,
          leaseKept: true,
          takenOver: false
        })
      })), 30_000)

    // docs/flow-control.md, Storage: "the claim log `__alkstore_flow_log` [...] pruned as claims leave their window:
    // each claim prunes its own scope's, and maintenance removes every scope whose last claim left its window (in
    // rounds of at most `maintenanceRows` scopes, as many rounds as it takes)". Careful-user expectation: once the
    // rates are dropped no window is left for those entries and maintenance forgets them (they decide nothing; a
    // rate set again later reads only claims inside its own window). Observed: all 40 entries (the queue's 20 and
    // one for each of 20 groups) are still there a day later — the stale-scope read's `now - rate_per` is NULL for
    // a rule with no rate, and no claim prunes them either; every group that claimed under the old rate stays.
    it.effect("maintenance forgets the claim log of a rate that setLimits dropped", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* setLimits("dropped", { rate: { limit: 100, per: "1 second" }, groupRate: { limit: 2, per: "1 second" } })
        const q = yield* queueOf("dropped")
        for (let i = 0; i < 20; i++) yield* q.enqueue(i, { group: `user-${i}` })
        for (let i = 0; i < 20; i++) yield* (yield* mustClaim(q, "w")).ack
        const logCount = Effect.map(
          sql<{ n: unknown }>`SELECT count(*) AS n FROM __alkstore_flow_log WHERE queue = 'dropped'`,
          (rows) => Number(rows[0]!.n)
        )
        const logged = yield* logCount
        yield* setLimits("dropped", { groupConcurrency: 5 })
        yield* advance("1 day")
        yield* (yield* Queues.Queues).maintenance
        expect({ logged, left: yield* logCount }).toEqual({ logged: 40, left: 0 })
      })), 60_000)
  })
}
