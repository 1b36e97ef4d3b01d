/**
 * Review of idempotency keys (CONTRACT §2–§3, docs/queues-and-locks.md "Idempotency key", docs/concepts.md
 * "Idempotency keys and priorities", docs/operations.md, src/Admin.ts `Totals`). Each test here failed on the
 * code before its fix; each names the promise it holds the code to and what was observed. (A PostgreSQL keyed
 * enqueue that waits for its key's holder in an open transaction spends a sequence value: documented in
 * docs/operations.md and `Admin.Totals`, not changed — telling it apart would cost every keyed enqueue a lock.)
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { engines } from "./contract/harness.js"
import { jobCount, queueOf, type StoreServices } from "./contract/support.js"

for (const engine of engines) {
  describe(`keys review: an enqueue's key is validated as read once — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) =>
      Effect.provide(effect, engine.store({ fallbackPoll: "1 hour" }))

    // docs/contract.md §2: "The other strings alkstore stores and compares (idempotency `key`, …) must be
    // non-empty, well-formed, at most 1000 UTF-8 bytes and free of NUL too (`InvalidOptions` with that field)."
    // and "An options object is read once, before anything is written". `checkEnqueueOptions`
    // (src/internal/options.ts) reads `options.key` three times: `options.key === undefined`, `checkText("key",
    // options.key)`, then `key: options.key` for the row. An accessor (a JS caller's getter or Proxy) that answers
    // differently on the third read gets a key written that was never validated. Observed: 3 reads; SQLite stores
    // the key with its NUL (engines now disagree on what a key may be), PostgreSQL fails with an untyped SqlError
    // (text cannot hold NUL) instead of `InvalidOptions { field: "key" }`. (`group`, `delay` and `runAt` are read
    // more than once the same way.)
    it.effect("a key accessor is read once: the key written is the key validated (else InvalidOptions, nothing written)", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const q = yield* queueOf("getter")
        let reads = 0
        const opts = {
          get key() {
            reads++
            return reads === 1 ? "order-1" : reads === 2 ? "order-1" : "order-1\u0000tail"
          }
        }
        const result = yield* Effect.either(q.enqueue({ n: 1 }, opts as never))
        const stored = yield* sql<{ k: string }>`SELECT idempotency_key AS k FROM __alkstore_jobs`
        if (Either.isLeft(result)) {
          expect(result.left).toMatchObject({ _tag: "InvalidOptions", field: "key" })
          expect(yield* jobCount).toBe(0)
        } else {
          expect(stored.map((row) => row.k)).toEqual(["order-1"])
        }
        expect(reads, "options.key reads").toBe(1)
      })))
  })
}
