/**
 * Review of reading and repairing a store (CONTRACT §3 "Inspection and repair", docs/operations.md "The
 * `Admin` service", docs/queues-and-locks.md): queue inspection, maintenance and the operator's view.
 * Every test here failed on the code before its fix; each names the promise it checks, and runs on the
 * engines where it failed (the others kept the promise).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Admin } from "../src/index.js"
import { pgFromClient, pgOwned } from "./contract/harness.js"
import { queueOf, type StoreServices } from "./contract/support.js"

for (const engine of [pgOwned, pgFromClient]) {
  describe(`inspection and repair, review — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) =>
      Effect.provide(effect, engine.store({ fallbackPoll: "1 hour" }))

    // src/Admin.ts, Totals.lastJobId: "The highest job id ever assigned: its growth is the enqueue count."
    // CONTRACT §3: a keyed enqueue while the key's job is live "returns the existing id and writes nothing".
    // docs/operations.md (watch): "enqueued/s is the growth of the store's job-id high-water mark between two
    // readings"; "completed/s is enqueues minus the growth of the table". SQLite keeps it; PostgreSQL does not.
    it.effect("totals: a keyed enqueue answered with the live job's id assigns no id (lastJobId stays the highest id of a job)", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        const q = yield* queueOf("dedup")
        const first = yield* q.enqueue({ n: 1 }, { key: "order-1" })
        for (let i = 0; i < 4; i++) expect(yield* q.enqueue({ n: 1 }, { key: "order-1" })).toBe(first)
        expect(yield* admin.totals).toEqual({ lastJobId: first, live: 1 })
      })))
  })
}
