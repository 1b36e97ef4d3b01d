/**
 * A review of retention, expiry, maintenance rounds and the operator's actions (docs/operations.md "Maintenance
 * and retention" and "The `Admin` service"; docs/concepts.md "A job's life"; CONTRACT §3 "Inspection and repair",
 * "Maintenance"; docs/flow-control.md "Storage"). Each test here fails on the current code.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { Queues } from "../src/index.js"
import { engines } from "./contract/harness.js"
import { advance, maintenanceRowsOf, queueOf, setLimits } from "./contract/support.js"

for (const engine of engines) {
  describe(`retention review: maintenance rounds — ${engine.name}`, () => {
    // docs/flow-control.md, Storage: the claim log is "pruned as claims leave their window: each claim prunes its own
    // scope's, and maintenance removes every scope whose last claim left its window"; and "Maintenance (every
    // `maintenanceEvery`) forgets the log of a scope [...] once its last claim has left the window of the rule in
    // force: a group that never claims again (a user, an order) keeps no rows". docs/operations.md: "A backlog is
    // worked through in rounds. A run sweeps and purges at most 2 000 rows of each kind per transaction on SQLite
    // (100 000 on PostgreSQL) [...] until a round finds less than that".
    // Here one more one-off group than a round's cap claimed once each (on PostgreSQL the log rows such claims
    // leave, `#<group>` scopes, are written directly: 100 001 claims would take minutes) and all left their window
    // an hour ago. Observed: after the maintenance run one scope's row is still there — the run prunes at most
    // `maintenanceRows` scopes in its one round and stops, because whether another round runs is decided by the
    // sweep and purge counts alone.
    it.effect("a maintenance run forgets every scope of the flow log whose claims left the window, not one round's worth", () =>
      Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const sql = yield* SqlClient.SqlClient
        const limit = maintenanceRowsOf(engine)
        yield* setLimits("one-off-groups", { groupRate: { limit: 1, per: "1 second" } })
        if (engine.capabilities.postgres) {
          yield* sql.unsafe(`INSERT INTO __alkstore_flow_log (queue, scope, seq, at)
            SELECT 'one-off-groups', '#user-' || i, 1, 0 FROM generate_series(1, ${limit + 1}) AS i`)
        } else {
          const q = yield* queueOf("one-off-groups")
          for (let i = 0; i <= limit; i++) yield* q.enqueue(i, { group: `user-${i}` })
          for (let i = 0; i <= limit; i++) {
            const handle = yield* q.claim("w")
            expect(Option.isSome(handle)).toBe(true)
            yield* Option.getOrThrow(handle).ack
          }
        }
        const logRows = Effect.map(
          sql<{ n: unknown }>`SELECT count(*) AS n FROM __alkstore_flow_log`,
          (rows) => Number(rows[0]!.n)
        )
        expect(yield* logRows).toBe(limit + 1)
        yield* advance("1 hour")
        expect(yield* queues.maintenance).toEqual({ expired: 0, purged: 0 })
        // Expected: no scope left. Observed: 1 (a second run would take it).
        expect(yield* logRows).toBe(0)
      }).pipe(Effect.provide(engine.store())))
  })
}
