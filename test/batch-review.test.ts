/**
 * Batch review (CONTRACT §3, §9; docs/queues-and-locks.md; docs/flow-control.md): `enqueueBatch`, `claimBatch`,
 * `ackAll` and `stream({ batch })`, on every engine. Each test here fails on the current code.
 *
 * - The flow walk of a limited queue reads the queue's lapsed leases, and (in a waiter's read-only walk) its due
 *   scheduled rows, as `… LIMIT 1000` with no ORDER BY (src/internal/sqlite/flowStatements.ts `lapsed` /
 *   `dueScheduled`; src/internal/pg/flowStatements.ts `lapsed` / `due`; src/internal/flow.ts
 *   `dueScheduledToRead`). Past 1000 such rows, the ones the walk never sees are neither ordered nor claimable:
 *   a higher-priority lapsed job is passed over, a `claimBatch` stops at 1000, and a waiter decides that nothing
 *   is claimable while a job of another group is.
 * - PostgreSQL's unlimited claim runs in rounds (one autocommit statement each) when a round met candidates it
 *   moved to dead; when the queue turns out limited in a later round it starts a limited claim of the whole `n`
 *   and drops the rows the earlier round already claimed (src/internal/pg/queueStorage.ts `claimRounds`).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Option } from "effect"
import { engines } from "./contract/harness.js"
import { advance, mustClaim, queueOf, setLimits, settle } from "./contract/support.js"

for (const engine of engines) {
  describe(`batch review — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, any>) =>
      effect.pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))) as Effect.Effect<A, E, never>

    // CONTRACT §3: "A job is claimable when it is pending with `runAt <= now`, or claimed with a lapsed lease
    // (`now >= claimedUntil`) [...]. Order: priority descending, then `runAt`, then id."
    // docs/flow-control.md: "claims take (priority desc, round, runAt, id). [...] a higher priority still goes
    // first", and `{}` "turns on fair rotation across groups alone".
    // Observed: with 1001 lapsed leases the walk reads only 1000 of them, unordered (`LIMIT 1000`, no ORDER BY),
    // and the priority-9 job whose lease lapsed last is not among them: the claim takes a priority-0 job (id 1).
    it.effect("limited queue, more than 1000 lapsed leases: a claim takes the higher-priority lapsed job first", () =>
      run(Effect.gen(function*() {
        yield* setLimits("lapsed-order", {})
        const q = yield* queueOf("lapsed-order", { visibilityTimeout: "10 seconds" })
        yield* q.enqueueBatch(Array.from({ length: 1000 }, (_, i) => i))
        expect((yield* q.claimBatch("crashed", 2000)).length).toBe(1000)
        yield* advance("1 second")
        const top = yield* q.enqueue("top", { priority: 9 })
        expect((yield* mustClaim(q, "crashed")).job.id).toBe(top)
        // Every lease lapses (the workers died): 1001 lapsed claims, the priority-9 one among them.
        yield* advance("10 seconds")
        const next = yield* mustClaim(q, "w2")
        expect(next.job.id).toBe(top)
      })))

    // docs/queues-and-locks.md: "A claim [...] keeps looking, so `claimBatch(w, n)` still returns up to `n` live
    // jobs"; docs/flow-control.md: "`{}` rotates fairly without capping anything". The same queue without limits
    // returns all 1500 lapsed jobs to `claimBatch(w, 2000)`. Observed: with limits `{}` it returns 1000 — the walk
    // never sees the other 500 lapsed leases (same cause as above), though nothing caps the claim.
    it.effect("limited queue with no caps: claimBatch retakes every lapsed lease, not only 1000 of them", () =>
      run(Effect.gen(function*() {
        yield* setLimits("lapsed-count", {})
        const q = yield* queueOf("lapsed-count", { visibilityTimeout: "10 seconds" })
        yield* q.enqueueBatch(Array.from({ length: 1500 }, (_, i) => i))
        expect((yield* q.claimBatch("crashed", 2000)).length).toBe(1500)
        yield* advance("11 seconds")
        expect((yield* q.claimBatch("w2", 2000)).length).toBe(1500)
      })))

    // CONTRACT §9: "A waiter held back only by a limit sleeps until its deadline (the rate window admitting the
    // next claim, a lease end, a due job) or a commit that may free a slot [...]; on other wakes it asks with a
    // read-only walk"; CONTRACT §7: every waiter wakes on "its next deadline (a future `runAt`, ...)".
    // A delayed batch of 1000 jobs of serial group "a" (held back: a0 is running) and one delayed job of group
    // "b" come due together. Observed: the waiter wakes at their runAt, its read-only walk reads only 1000 due
    // scheduled rows (`dueScheduledToRead("probe")`, unordered) — all of group "a", all held back — decides that
    // nothing is claimable and sleeps until its fallback poll (1 hour), while "b"'s job is claimable. With 998
    // jobs of "a" the waiter takes "b" at once.
    it.effect("a waiter held back by groupConcurrency takes another group's job when a delayed batch of 1000 comes due", () =>
      run(Effect.gen(function*() {
        yield* setLimits("due-batch", { groupConcurrency: 1 })
        const q = yield* queueOf("due-batch", { visibilityTimeout: "2 hours" })
        yield* q.enqueue("a0", { group: "a" })
        yield* mustClaim(q, "runner") // group "a" is busy: its later jobs wait behind a0
        yield* q.enqueueBatch(Array.from({ length: 1000 }, (_, i) => `a${i + 1}`), { group: "a", delay: "10 seconds" })
        const b = yield* q.enqueue("b", { group: "b", delay: "10 seconds" })
        const waiter = yield* Effect.fork(q.take("w"))
        yield* settle
        yield* advance("10 seconds")
        yield* settle
        const taken = Option.map(yield* Fiber.poll(waiter), (exit) => (Exit.isSuccess(exit) ? exit.value.job.id : -1))
        expect(taken).toEqual(Option.some(b))
      })))

    if (engine.capabilities.postgres) {
      // CONTRACT §3: "`claimBatch(workerId, n)` → up to `n` handles"; docs/flow-control.md: "Limit changes apply
      // to claims that start after they commit; claims in flight keep their slots." A careful user expects every
      // job a `claimBatch` claimed to come back as a handle, and never more than `n` claimed.
      // The trigger stands in for another process's `setLimits` committing between the claim's two rounds (it
      // adds the limits row and numbers the rounds, as `setLimits` does, committed with the first round).
      // Round 1 takes [doomed (moved to dead, expired), a]; round 2 finds the queue limited and runs a limited
      // claim of the whole n = 2. Observed: handles [b, c], three jobs claimed: "a" is claimed by "w" with no
      // handle (its attempt spent, back only when its lease lapses), and the call claimed 3 > n.
      it.effect("claimBatch whose later round finds the queue limited returns every job it claimed, at most n", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const schema = (yield* sql.unsafe<{ s: string }>(`SELECT current_schema() AS s`))[0]!.s
          yield* sql.unsafe(`CREATE FUNCTION limits_appear() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF EXISTS (SELECT 1 FROM __alkstore_jobs WHERE queue = 'rounds' AND state = 'dead')
                 AND NOT EXISTS (SELECT 1 FROM __alkstore_flow_limits WHERE queue = 'rounds') THEN
                INSERT INTO __alkstore_flow_limits (queue, current_round, updated_at) VALUES ('rounds', 0, 0);
                UPDATE __alkstore_jobs AS j SET flow_round = r.n FROM (
                  SELECT id, row_number() OVER (PARTITION BY group_key ORDER BY id) - 1 AS n
                  FROM __alkstore_jobs WHERE queue = 'rounds' AND state <> 'dead') AS r WHERE j.id = r.id;
              END IF;
              RETURN NULL;
            END $$`)
          yield* sql.unsafe(`ALTER FUNCTION limits_appear() SET search_path = ${schema}`)
          yield* sql.unsafe(`CREATE TRIGGER limits_appear AFTER UPDATE ON __alkstore_jobs
            FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION limits_appear()`)
          const q = yield* queueOf("rounds")
          yield* q.enqueue("doomed", { priority: 9, expires: "1 second" })
          yield* q.enqueueBatch(["a", "b", "c"])
          yield* advance("2 seconds")
          const got = yield* q.claimBatch("w", 2)
          const stats = yield* q.stats
          expect({ handles: got.map((h) => h.job.payload), claimed: stats.claimed }).toEqual({
            handles: ["a", "b"],
            claimed: 2
          })
        })))
    }
  })
}
