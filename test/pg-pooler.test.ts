/**
 * PostgreSQL behind a connection pooler in transaction mode — a real
 * PgBouncer 1.18 (test/support/pgbouncer.ts), which hands each transaction,
 * or each statement outside one, to whichever server connection is free, and
 * keeps no prepared statements across them.
 *
 * - Configured as docs/engines.md says (`prepare: false`, `listenUrl` at the
 *   server), the contract holds: queues, waking, workers, locks, the outbox
 *   and transactions run through it, and a fleet of producers and workers
 *   drains a backlog exactly once.
 * - Left at `prepare: true` (the default), the driver's named statements meet
 *   server sessions that do not have them (SQLSTATE 26000) or have them from
 *   another client (42P05): the store says so once and runs unprepared, and no
 *   caller outside a transaction sees the failure. The same holds on the server
 *   itself after an application's `DEALLOCATE ALL` on a connection it shares.
 * - A LISTEN connection through the pooler is not a session of its own: the
 *   store says so, naming `listenUrl`.
 */
import { SqlClient } from "@effect/sql"
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, HashSet, Layer, Logger, Redacted, Ref } from "effect"
import Pg from "pg"
import { afterAll } from "vitest"
import { PgStore } from "../src/index.js"
import {
  freshFile,
  nextSchemas,
  pgDatabaseUrl,
  pgSchemaFor,
  pgSettings,
  type EngineUnderTest,
  type TestStoreSettings
} from "./contract/harness.js"
import { locksContract } from "./contract/locks.js"
import { outboxContract } from "./contract/outbox.js"
import { eventually, queueOf } from "./contract/support.js"
import { transactionsContract } from "./contract/transactions.js"
import { wakeContract } from "./contract/wake.js"
import { workersContract } from "./contract/workers.js"
import { pgTestTypes } from "./fixtures/types.js"
import { startBouncer, type Bouncer } from "./support/pgbouncer.js"

// Server connections per schema: fewer than a store's pool, so its connections' statements move between them.
const serverConnections = 3
// One PgBouncer database for each schema this file's stores will be given: pgSchemaFor numbers them t1, t2, …
// on from the files that ran before in this worker, so the names are taken as the file loads.
const schemasOfThisFile = nextSchemas(300)
let bouncer: Promise<Bouncer> | undefined
const bouncerUp = () =>
  (bouncer ??= pgDatabaseUrl().then((url) =>
    startBouncer({
      serverUrl: url,
      database: new URL(url).pathname.slice(1),
      schemas: schemasOfThisFile,
      poolSize: serverConnections
    })
  ))
afterAll(async () => {
  if (bouncer !== undefined) await (await bouncer).stop()
})

/** The server itself, the search_path at `schema` (for `listenUrl`, and to look behind the pooler). */
const directUrl = async (schema: string) => {
  const url = new URL(await pgDatabaseUrl())
  url.searchParams.set("options", `-c search_path=${schema},public`)
  return url.toString()
}

const behindBouncer = (
  settings: TestStoreSettings & { readonly direct?: boolean; readonly maxConnections?: number } = {}
) => {
  const schema = pgSchemaFor(settings.filename)
  const { direct, maxConnections, ...testSettings } = settings
  return Layer.unwrapEffect(Effect.promise(async () =>
    PgStore.layer({
      url: Redacted.make((await bouncerUp()).urlFor(schema)),
      ...(direct === false ? {} : { listenUrl: await directUrl(schema) }),
      schema,
      clock: "host",
      types: pgTestTypes,
      listenHeartbeat: "1 second",
      ...(maxConnections === undefined ? {} : { maxConnections }),
      ...pgSettings(testSettings)
    })
  ))
}

const configured: EngineUnderTest = {
  name: "postgresql behind PgBouncer in transaction mode (prepare: false, listenUrl at the server)",
  capabilities: { sqliteFile: false, postgres: true },
  store: (settings = {}) => behindBouncer({ prepare: false, ...settings })
}

workersContract(configured)
wakeContract(configured)
locksContract(configured)
outboxContract(configured)
transactionsContract(configured)

/** The warnings logged while `effect` runs (`effect` may read them as they come). */
const warningsOf = <A, E, R>(effect: Effect.Effect<A, E, R> | ((warnings: ReadonlyArray<string>) => Effect.Effect<A, E, R>)) =>
  Effect.gen(function*() {
    const warnings: Array<string> = []
    const logger = Logger.make(({ logLevel, message }) => {
      if (logLevel._tag !== "Warning") return
      warnings.push((Array.isArray(message) ? message : [message]).filter((m) => typeof m === "string").join(" "))
    })
    const value = yield* Effect.provide(
      typeof effect === "function" ? effect(warnings) : effect,
      Logger.replace(Logger.defaultLogger, logger)
    )
    return { value, warnings }
  })

const notRun = "did not keep the store's prepared statements"

/**
 * 16 producers enqueue 400 jobs, one per call, outside any transaction, while
 * a worker of concurrency 8 handles them; every job is handled exactly once.
 */
const fleet = Effect.gen(function*() {
  const queue = yield* queueOf("fleet")
  const handled = yield* Ref.make(HashSet.empty<number>())
  const count = yield* Ref.make(0)
  const worker = yield* Effect.fork(queue.process("w", (job) =>
    Effect.zipRight(
      Ref.update(handled, HashSet.add((job.payload as { n: number }).n)),
      Ref.update(count, (n) => n + 1)
    ), { concurrency: 8 }))
  yield* Effect.forEach(Array.from({ length: 400 }, (_, n) => n), (n) => queue.enqueue({ n }), { concurrency: 16 })
  yield* eventually(Effect.flatMap(Ref.get(count), (n) => Effect.sync(() => expect(n).toBe(400))), 30)
  yield* Fiber.interrupt(worker)
  expect(HashSet.size(yield* Ref.get(handled))).toBe(400)
  expect((yield* queue.stats).pending).toBe(0)
})

describe("PostgreSQL behind PgBouncer in transaction mode", () => {
  it.live("configured (prepare: false): producers and workers on more connections than the pooler's drain a backlog exactly once", () =>
    Effect.gen(function*() {
      // the store is built inside: its own fibers log with this logger too
      const { warnings } = yield* warningsOf(Effect.provide(fleet, behindBouncer({ prepare: false, maxConnections: 8 })))
      expect(warnings).toEqual([])
    }))

  it.live("left at prepare: true: the store says once that its statements were not kept, runs them unprepared, and no caller outside a transaction sees a failure", () =>
    Effect.gen(function*() {
      const { warnings } = yield* warningsOf(Effect.provide(fleet, behindBouncer({ maxConnections: 8 })))
      expect(warnings.filter((w) => w.includes(notRun))).toHaveLength(1)
      expect(warnings.every((w) => w.includes(notRun))).toBe(true)
    }))

  it.live("a LISTEN connection through the pooler is not a session of its own: the store says so, naming listenUrl", () => {
    const filename = freshFile("listen-through")
    return Effect.gen(function*() {
      const { warnings } = yield* warningsOf((seen) => Effect.gen(function*() {
        // a waiter: the process now LISTENs
        const taker = yield* Effect.fork((yield* queueOf("listened")).take("w"))
        // other clients' transactions move the LISTEN connection's statements between server sessions
        const url = (yield* Effect.promise(bouncerUp)).urlFor(pgSchemaFor(filename))
        const churn = Effect.promise(async () => {
          const client = new Pg.Client({ connectionString: url })
          await client.connect()
          try {
            for (let i = 0; i < 20; i++) await client.query("SELECT pg_sleep(0.02)")
          } finally {
            await client.end()
          }
        })
        yield* eventually(
          Effect.zipRight(
            Effect.all([churn, churn, churn], { concurrency: "unbounded" }),
            Effect.sync(() => expect(seen.some((w) => w.includes("listenUrl"))).toBe(true))
          ),
          20
        )
        yield* Fiber.interrupt(taker)
        // the listener's fiber logs with the logger its store was built with
      }).pipe(Effect.provide(behindBouncer({ filename, prepare: false, direct: false, listenHeartbeat: "100 millis" }))))
      expect(warnings.filter((w) => w.includes("LISTEN connection")).length).toBe(1)
    })
  })
})

describe("PostgreSQL: an application's DEALLOCATE ALL on a connection it shares with the store", () => {
  it.effect("the store's next statements run (unprepared), said once; before, each failed on that connection for as long as it lived", () =>
    Effect.gen(function*() {
      const schema = pgSchemaFor(freshFile("deallocate"))
      const url = Redacted.make(yield* Effect.promise(() => directUrl(schema)))
      // one connection, so the application's statement and the store's meet the same session
      const store = PgStore.layerFromClient({ schema, clock: "host", planCheckEvery: "1 hour" }).pipe(
        Layer.provideMerge(PgClient.layer({ url, maxConnections: 1 }))
      )
      const { value: [pending, prepared], warnings } = yield* warningsOf(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("shared")
        yield* queue.enqueue({ n: 1 })
        yield* sql`DEALLOCATE ALL`
        yield* queue.enqueue({ n: 2 })
        yield* queue.enqueue({ n: 3 })
        yield* (yield* queue.take("w")).ack
        const prepared = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_prepared_statements`
        return [(yield* queue.stats).pending, prepared[0]!.n] as const
      }).pipe(Effect.provide(store)))
      expect(warnings.filter((w) => w.includes(notRun))).toHaveLength(1)
      expect(pending).toBe(2)
      expect(prepared).toBe(0) // from then on every statement is sent as its text
    }))
})
