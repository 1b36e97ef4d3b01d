import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Locks, Queues } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"

export const namesContract = (engine: EngineUnderTest) =>
  describe(`names — ${engine.name}`, () => {
    it.effect("empty and reserved queue names are rejected before storage", () =>
      Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const empty = yield* Effect.flip(queues.queue(""))
        expect(empty._tag).toBe("InvalidName")
        const reserved = yield* Effect.flip(queues.queue("__alkstore_x"))
        expect(reserved).toMatchObject({ _tag: "ReservedName", name: "__alkstore_x" })
        const locks = yield* Locks.Locks
        expect((yield* Effect.flip(locks.acquire("", { ttl: "1 second" })))._tag).toBe("InvalidName")
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_jobs`
        expect(rows[0]!.n).toBe(0)
      }).pipe(Effect.provide(engine.store())))
  })
