/**
 * Review: the PostgreSQL engine under connection faults and server-side interference (docs/engines.md "When the
 * server restarts or a connection is killed", docs/operations.md, docs/recipes.md "Graceful shutdown on SIGTERM",
 * docs/queues-and-locks.md). Every test here failed on the code before its fix.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Layer, Option } from "effect"
import { Queues } from "../src/index.js"
import { pgDatabaseUrl } from "./contract/harness.js"
import { expectTakeEndsWhileLimitsRowHeld, otherSession, pgStoreLayer, settledStats } from "./support/pgSessions.js"

let schemaCounter = 0
const freshSchema = () => `faults${process.pid}_${++schemaCounter}`

describe("PostgreSQL under server-side interference", () => {
  // docs/queues-and-locks.md (Release): "`take`, `claim` and `claimBatch` interrupted (a timeout, a race) keep no
  // claim"; src/internal/patience.ts: "a stop must not sit out the store's whole patience there" — on SQLite a
  // claim's wait for another connection's lock ends at an interruption. On PostgreSQL a take whose claim waits on a
  // row lock another transaction holds (here an application's transaction that changes the queue's limits and is
  // still open) cannot be interrupted at all: `Effect.timeout(take, "300 millis")` returns only when that other
  // transaction ends, however long that is. A timeout that waits for someone else's transaction is a hang.
  it.live("a take with a timeout ends at its timeout while its claim waits on a limits row another transaction holds", () => {
    const schema = freshSchema()
    return Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const queues = yield* Queues.Queues
      const queue = yield* queues.queue("limited")
      yield* queues.setLimits("limited", { concurrency: 2 })
      yield* queue.enqueue({ n: 1 })
      // The application's transaction changes the limits, then does 3 s of other work before committing.
      yield* expectTakeEndsWhileLimitsRowHeld(sql, queues, queue)
    }).pipe(Effect.scoped, Effect.provide(pgStoreLayer({ schema })))
  }, 15_000)

  // docs/recipes.md "Graceful shutdown on SIGTERM": "interruption stops claiming, releases every claim in flight
  // ... A worker whose claim is waiting out another connection's write lock on the SQLite file stops at once too
  // (that wait has written nothing ...)". docs/operations.md "Upgrades and migrations": a PostgreSQL migration
  // builds an index "in the migration's transaction, so writes to the jobs table wait for the build". On
  // PostgreSQL a worker whose claim waits on such a lock (here another session's CREATE INDEX, still open) does
  // not stop at its interruption: the stop waits until the other transaction ends.
  it.live("a worker whose claim waits on another session's index build stops at once when interrupted", () => {
    const schema = freshSchema()
    return Effect.gen(function*() {
      const queue = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("q"))
      yield* queue.enqueue({ n: 1 })
      const other = yield* otherSession
      yield* Effect.promise(() => other.query(`BEGIN; CREATE INDEX test_build ON ${schema}.__alkstore_jobs (created_at)`))
      const ends = yield* Effect.fork(Effect.delay(Effect.promise(() => other.query("ROLLBACK")), "3 seconds"))
      const worker = yield* Effect.fork(queue.process("w", () => Effect.void))
      yield* Effect.sleep("500 millis") // the worker's claim is waiting on the build's lock
      const started = Date.now()
      yield* Fiber.interrupt(worker)
      const elapsed = Date.now() - started
      yield* Fiber.join(ends)
      expect(elapsed).toBeLessThan(1_000) // observed: ~2 500 ms, until the other transaction ended
      // The claim left to finish once the build ended gave back what it took.
      expect(yield* settledStats(queue)).toMatchObject({ claimed: 0, pending: 1 })
    }).pipe(Effect.scoped, Effect.provide(pgStoreLayer({ schema })))
  }, 15_000)

  // docs/operations.md "Upgrades and migrations": "Opening a store applies any pending migration — on SQLite in one
  // BEGIN IMMEDIATE transaction (taken only when a read of __alkstore_migrations finds one missing)", and
  // "Run `npx alkstore migrate --db <target>` with the new version (or let the first new process do it on start)".
  // On PostgreSQL every start runs `CREATE SCHEMA IF NOT EXISTS` and `CREATE TABLE IF NOT EXISTS` (migrations.ts),
  // which PostgreSQL refuses to a role without CREATE on the database even when both exist. So an application
  // role with only the privileges its work needs (USAGE on the schema, DML on its tables), the usual production
  // set-up once `alkstore migrate` ran as the owner, cannot open a fully migrated store:
  // "permission denied for database ...".
  it.live("a role with only DML privileges opens a store whose schema is already migrated", () => {
    const schema = freshSchema()
    const role = `app_${schema}`
    return Effect.gen(function*() {
      yield* Effect.scoped(Layer.build(pgStoreLayer({ schema }))) // migrated by the owner
      const owner = yield* otherSession
      yield* Effect.promise(async () => {
        await owner.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw'`)
        await owner.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`)
        await owner.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${schema} TO ${role}`)
        await owner.query(`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ${schema} TO ${role}`)
      })
      yield* Effect.addFinalizer(() =>
        Effect.promise(async () => {
          await owner.query(`DROP OWNED BY ${role}`)
          await owner.query(`DROP ROLE ${role}`)
        }).pipe(Effect.ignore)
      )
      const url = new URL(yield* Effect.promise(pgDatabaseUrl))
      url.username = role
      url.password = "pw"
      const exit = yield* Effect.exit(Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(pgStoreLayer({ schema, url: url.toString() }))
        return yield* Effect.gen(function*() {
          const queue = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("q"))
          yield* queue.enqueue({ n: 1 })
          const handle = yield* Effect.map(queue.claim("w"), Option.getOrThrow)
          return yield* handle.ack
        }).pipe(Effect.provide(context))
      })))
      expect(Exit.isFailure(exit) ? String((Cause.squash(exit.cause) as { cause?: Error }).cause?.message) : exit.value)
        .toBe(true) // observed: "permission denied for database alkstore_test_…"
    }).pipe(Effect.scoped)
  }, 15_000)
})
