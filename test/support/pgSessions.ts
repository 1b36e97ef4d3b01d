/**
 * PostgreSQL review tests' shared set-up: a store on the throw-away server's database in a schema of its own,
 * another session of the test's own (holding locks), and a queue's stats once a background give-back is done.
 */
import type { SqlClient } from "@effect/sql"
import { expect } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Layer, Redacted } from "effect"
import Pg from "pg"
import { PgStore, type Queues } from "../../src/index.js"
import { pgDatabaseUrl } from "../contract/harness.js"

/** `PgStore.layer` on the test database (host clock, an hour's fallback poll, a 1 s LISTEN heartbeat), `settings` over it. */
export const pgStoreLayer = (settings: Omit<Partial<PgStore.PgStoreOptions>, "url"> & { readonly url?: string } = {}) =>
  Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (url) =>
    PgStore.layer({
      clock: "host",
      fallbackPoll: "1 hour",
      listenHeartbeat: "1 second",
      ...settings,
      url: Redacted.make(settings.url ?? url)
    })))

/** A plain connection of the test's own to the test database (another session holding locks). */
export const otherSession = Effect.acquireRelease(
  Effect.promise(async () => {
    const client = new Pg.Client({ connectionString: await pgDatabaseUrl() })
    await client.connect()
    return client
  }),
  (client) => Effect.promise(() => client.end().catch(() => {}))
)

/** The queue's stats once nothing is claimed (a claim finishing in the background gives back what it took), within 2 s. */
export const settledStats = (queue: Queues.Queue<unknown>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100; i++) {
      const stats = yield* queue.stats
      if (stats.claimed === 0) return stats
      yield* Effect.sleep("20 millis")
    }
    return yield* queue.stats
  })

/**
 * An application's transaction on `sql` changes the limits of `queue` (through `queues`, a store on that
 * client) and stays open 3 s; meanwhile `queue.take` with a 300 ms timeout must end at its timeout, not with the
 * transaction, and its claim, left to finish once the transaction ended, gives back what it took (no attempt
 * spent). `queue` holds one job; the limits were `{ concurrency: 2 }`.
 */
export const expectTakeEndsWhileLimitsRowHeld = (
  sql: SqlClient.SqlClient,
  queues: Queues.QueuesShape,
  queue: Queues.Queue<unknown>
) =>
  Effect.gen(function*() {
    const open = yield* Deferred.make<void>()
    const application = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
      yield* queues.setLimits(queue.name, { concurrency: 1 })
      yield* Deferred.succeed(open, undefined)
      yield* Effect.sleep("3 seconds")
    })))
    yield* Deferred.await(open)
    const started = Date.now()
    const exit = yield* Effect.exit(Effect.timeout(queue.take("w"), "300 millis"))
    const elapsed = Date.now() - started
    yield* Fiber.join(application)
    expect(Exit.isFailure(exit) && Cause.isFailType(exit.cause) && Cause.isTimeoutException(exit.cause.error)).toBe(true)
    expect(elapsed).toBeLessThan(1_500) // observed before the stoppable claim: ~3 000 ms, the transaction's whole length
    expect(yield* settledStats(queue)).toMatchObject({ claimed: 0, pending: 1 })
    const job = yield* Effect.flatMap(queue.take("w"), (handle) => Effect.as(handle.ack, handle.job))
    expect(job.attempts).toBe(1)
  })
