/**
 * Review: a storage-fault sweep with real triggers (test/contract/faults.ts `failing`): every public write
 * operation, with every INSERT/UPDATE/DELETE of every store table failing in turn, and faults in the middle of
 * multi-statement operations (a `when` condition that lets the first rows through). Only tests that fail on the
 * current code are kept.
 *
 * Checked and found consistent on all four engines (probes removed): with a whole-table fault, every one of
 * enqueue (plain, keyed, limited, batch), claim/claimBatch (plain, due scheduled, limited), ack, retry, fail,
 * release, heartbeat, ackAll, cancel, requeueDead, purgeDead, Admin.requeue/cancel/purgeDead, setLimits,
 * clearLimits, lock acquire (new, re-entrant, lapsed)/renew/release/withLock, schedule/reschedule/unschedule,
 * maintenance, outbox enqueue/runOnce, PersistedQueue offer (custom id)/take and RateLimiter consume fails with
 * a typed error (never a defect, never a hang), writes nothing, and works again once the fault is gone. Mid-way
 * faults: enqueueBatch's second row, ackAll's second delete, a limited claim's second log entry, maintenance's
 * purge after its sweep, requeueDead after sweeping an expired key holder, and a scheduler tick whose advance
 * fails all roll back whole; the SQLite engines also roll back every case below. A take whose claim fails hands
 * its wake to the next waiter; a worker whose claim or ack fails logs it and goes on (the unacked job returns
 * with its lease, as documented).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, Schema } from "effect"
import { Queues } from "../src/index.js"
import { engines } from "./contract/harness.js"
import { failing } from "./contract/faults.js"
import { advance, queueOf, setLimits } from "./contract/support.js"

const Item = Schema.Struct({ n: Schema.Number })

/** `effect` while `table`'s `event` statements fail for rows where `when` holds; its error's tag. */
const failingWhile = <A, E, R>(table: string, event: "INSERT" | "UPDATE" | "DELETE", when: string, effect: Effect.Effect<A, E, R>) => {
  const fault = failing(table, event, when)
  return Effect.acquireUseRelease(
    fault.start,
    () => Effect.map(Effect.flip(effect), (error) => (error as { _tag?: string })._tag),
    () => Effect.orDie(fault.stop)
  )
}

const payloadsOf = (handles: ReadonlyArray<Queues.JobHandle<{ readonly n: number }>>) => handles.map((h) => h.job.payload.n)

for (const engine of engines) {
  describe(`fault sweep — ${engine.name}`, () => {
    /** Jobs {n:1}, an undecodable one, {n:2}, {n:3} in a queue read through a typed handle. */
    const typedBacklog = (name: string) =>
      Effect.gen(function*() {
        const raw = yield* queueOf(name)
        const ids = yield* Effect.forEach([{ n: 1 }, { n: "not a number" }, { n: 2 }, { n: 3 }], (p) => raw.enqueue(p))
        const typed = yield* Effect.flatMap(Queues.Queues, (q) => q.queue(name, { schema: Item }))
        return { ids, raw, typed }
      })

    // docs/guarantees.md: "**Storage failures surface as `SqlError`.** A full disk or a read-only file fails the
    // operation and writes nothing of it; nothing needs repairing once the fault clears." — and its table:
    // "Storage failures are `SqlError`, and atomic: ... leaves every row as it was". docs/decisions.md names the
    // very outcome below a defect ("the claim failed with `SqlError`, and a `claimBatch` left its good rows claimed
    // with no handle until their leases lapsed") and fixed only its NUL trigger. A typed claimBatch commits its
    // claim, then buries the undecodable row in a statement of its own (handle.ts `handlesOf`): when that bury
    // fails, claimBatch fails with SqlError but {n:1} and {n:2} stay claimed — attempt spent, no handle, out of
    // reach for the whole visibility timeout (300 s) — and the undecodable row too. Every engine.
    it.effect("a typed claimBatch whose bury of an undecodable row fails leaves no job claimed", () =>
      Effect.gen(function*() {
        const { raw, typed } = yield* typedBacklog("typed-bury")
        const error = yield* failingWhile("__alkstore_jobs", "UPDATE", "NEW.state = 'dead'", typed.claimBatch("w1", 3))
        const claimedAfterFailure = (yield* raw.stats).claimed
        const retried = payloadsOf(yield* typed.claimBatch("w2", 3))
        expect({ error, claimedAfterFailure, retried }).toEqual({ error: "SqlError", claimedAfterFailure: 0, retried: [1, 2, 3] })
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))), 30_000)

    // The same sentences. A typed claimBatch that met an undecodable row claims again for the rest (queue.ts
    // `claimUpTo`, `round`): the first round's claims are committed before the second round runs, so when the
    // second round's claim fails the call fails with SqlError while {n:1} and {n:2} stay claimed with no handle
    // (their attempt spent, unreachable until their leases lapse). Every engine.
    it.effect("a typed claimBatch whose second round fails leaves no job claimed", () =>
      Effect.gen(function*() {
        const { ids, raw, typed } = yield* typedBacklog("typed-round")
        const error = yield* failingWhile("__alkstore_jobs", "UPDATE", `OLD.id = ${ids[3]}`, typed.claimBatch("w1", 3))
        const claimedAfterFailure = (yield* raw.stats).claimed
        const retried = payloadsOf(yield* typed.claimBatch("w2", 3))
        expect({ error, claimedAfterFailure, retried }).toEqual({ error: "SqlError", claimedAfterFailure: 0, retried: [1, 2, 3] })
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))), 30_000)
  })
}

for (const engine of engines.filter((e) => e.capabilities.postgres)) {
  describe(`fault sweep, PostgreSQL — ${engine.name}`, () => {
    // docs/guarantees.md: "A full disk or a read-only file fails the operation and writes nothing of it; nothing
    // needs repairing once the fault clears" / "leaves every row as it was". On PostgreSQL a claimBatch of a
    // limited queue runs the flow walk optimistically, outside any transaction (pg/flowStorage.ts `claim`,
    // access "optimistic"): each job's claim statement commits on its own. When the second claim fails, the
    // call fails with SqlError but the first job stays claimed (attempt spent, its claim logged against the rate
    // limits, a concurrency slot held) with no handle, until its lease lapses. (SQLite: one transaction, rolled
    // back whole.)
    it.effect("a claimBatch of a limited queue whose second claim fails leaves no job claimed", () =>
      Effect.gen(function*() {
        yield* setLimits("limited", { concurrency: 5, rate: { limit: 10, per: "1 minute" } })
        const q = yield* queueOf("limited")
        const ids = yield* q.enqueueBatch([{ n: 1 }, { n: 2 }, { n: 3 }])
        const error = yield* failingWhile("__alkstore_jobs", "UPDATE", `OLD.id = ${ids[1]}`, q.claimBatch("w1", 3))
        const claimedAfterFailure = (yield* q.stats).claimed
        const retried = (yield* q.claimBatch("w2", 3)).map((h) => h.job.payload)
        expect({ error, claimedAfterFailure, retried }).toEqual({
          error: "SqlError",
          claimedAfterFailure: 0,
          retried: [{ n: 1 }, { n: 2 }, { n: 3 }]
        })
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))), 30_000)

    // The same sentences. On PostgreSQL a plain claimBatch that meets an expired job claims in rounds, each its
    // own autocommit statement (pg/queueStorage.ts `claimRounds`, no transaction): the first round claims {n:1}
    // and {n:2} (and moves the expired one to dead), and when the second round fails the call fails with
    // SqlError while {n:1} and {n:2} stay claimed with no handle. docs/queues-and-locks.md: a claim that meets an
    // expired job "keeps looking, so `claimBatch(w, n)` still returns up to `n` live jobs". (SQLite: one
    // transaction.)
    it.effect("a claimBatch whose second round (after an expired job) fails leaves no job claimed", () =>
      Effect.gen(function*() {
        const q = yield* queueOf("rounds")
        yield* q.enqueue({ n: 0 }, { expires: "1 second", priority: 5 })
        const ids = yield* q.enqueueBatch([{ n: 1 }, { n: 2 }, { n: 3 }])
        yield* advance("2 seconds")
        const error = yield* failingWhile("__alkstore_jobs", "UPDATE", `OLD.id = ${ids[2]}`, q.claimBatch("w1", 3))
        const claimedAfterFailure = (yield* q.stats).claimed
        const retried = (yield* q.claimBatch("w2", 3)).map((h) => h.job.payload)
        expect({ error, claimedAfterFailure, retried }).toEqual({
          error: "SqlError",
          claimedAfterFailure: 0,
          retried: [{ n: 1 }, { n: 2 }, { n: 3 }]
        })
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))), 30_000)

    // docs/guarantees.md: "fails the operation and writes nothing of it" / "leaves every row as it was". A keyed
    // enqueue whose key an expired pending job holds moves that holder to dead and inserts again
    // (pg/queueStorage.ts `insertKeyed`); on PostgreSQL the two statements are not in one transaction (SQLite
    // wraps them: sqlite/queueStorage.ts `insertOne`), so when the insert fails the enqueue reports SqlError while
    // its sweep stands: the holder is dead (`lastError` "expired", `stats.dead` 1), and the `alkstore.jobs.dead`
    // metric counted it.
    it.effect("a keyed enqueue whose insert fails after sweeping an expired key holder leaves the holder as it was", () =>
      Effect.gen(function*() {
        const q = yield* queueOf("keyed")
        const holder = yield* q.enqueue({ n: 1 }, { key: "k", expires: "1 second" })
        yield* advance("2 seconds")
        const error = yield* failingWhile("__alkstore_jobs", "INSERT", `NEW.payload::text LIKE '%"n":2%'`, q.enqueue({ n: 2 }, { key: "k" }))
        const holderState = Option.map(yield* q.getJob(holder), (job) => job.state)
        expect({ error, holderState, dead: (yield* q.stats).dead }).toEqual({
          error: "SqlError",
          holderState: Option.some("pending"),
          dead: 0
        })
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))), 30_000)
  })
}
