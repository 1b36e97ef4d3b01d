/**
 * PostgreSQL review tests' shared set-up: a store on the throw-away server's database in a schema of its own,
 * another session of the test's own (holding locks), and a queue's stats once a background give-back is done.
 */
import { Effect, Layer, Redacted } from "effect"
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
