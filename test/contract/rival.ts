import { SqlClient } from "@effect/sql"
import { Deferred, Effect, Fiber } from "effect"

/**
 * Another host's transaction: through `inStore` (a second store on the same database), it runs `hold` (SQL
 * that takes what the operation under test must wait for: SQLite's write lock, a PostgreSQL row lock), keeps
 * the transaction open until `commit`, then runs `inside` in it and commits. Tests advance the TestClock while
 * it holds.
 */
export const rivalHolding = <X, R>(
  inStore: <Y, E>(e: Effect.Effect<Y, E, R | SqlClient.SqlClient>) => Effect.Effect<Y, E>,
  hold: string,
  inside: Effect.Effect<X, unknown, R | SqlClient.SqlClient> = Effect.void as Effect.Effect<X>
) =>
  Effect.gen(function*() {
    const holding = yield* Deferred.make<void>()
    const go = yield* Deferred.make<void>()
    const fiber = yield* Effect.fork(inStore(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      return yield* sql.withTransaction(Effect.gen(function*() {
        yield* sql.unsafe(hold)
        yield* Deferred.succeed(holding, undefined)
        yield* Deferred.await(go)
        return yield* inside
      }))
    })))
    yield* Deferred.await(holding)
    return { commit: Effect.zipRight(Deferred.succeed(go, undefined), Fiber.join(fiber)) }
  })

/** A real sleep: for another connection's statement to reach its wait (the store's waits are on TestClock). */
export const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((r) => setTimeout(r, ms)))
