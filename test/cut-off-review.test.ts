/**
 * Review: an operation whose statement COMMITTED while its caller was cut off before the answer arrived (a
 * timeout, a race, a stop landing while the answer is on the wire). Only tests that fail on the current code.
 *
 * How a late answer is made deterministic on PostgreSQL: the statement waits on a row lock a raw connection
 * outside the store's pool holds; the caller is interrupted; `@effect/sql-pg`'s cancel (`pg_cancel_backend`,
 * sent through the pool) waits because the pool's other connection is held by an open transaction; the rival
 * commits, the statement commits, and only then does the cancel run (on an idle backend). The caller ends
 * interrupted, the write stands — exactly what a timeout landing while the answer is on the wire leaves.
 * (Controls, removed: under the same rig an uninterrupted `fail` wakes the waiter, and a cut-off `release` —
 * whose NOTIFY is in its own statement — does too.)
 *
 * Checked and found consistent (probes removed): `withLock` cut off after its acquire committed gives the lock
 * back (`cutOffGivenBack`); a plain `acquire` cut off leaves the lock to its owner, and acquiring again with that
 * owner re-enters it and its release frees it; a keyed `enqueue` cut off after it committed, enqueued again with
 * the key, answers the committed job's id and writes nothing; `sql.withTransaction` interrupted after a keyed
 * enqueue rolls it back on all four engines (the key free again). SQLite's own statements (single statements or
 * in-place blocks) leave no window between commit and answer.
 */
import { SqlClient } from "@effect/sql"
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import { type Context, Deferred, Effect, type Exit, Fiber, Layer, Option, Redacted } from "effect"
import Pg from "pg"
import { PgStore, type Queues } from "../src/index.js"
import { pgDatabaseUrl, pgSchemaFor, freshFile, pgTestTypes } from "./contract/harness.js"
import { mustClaim, queueOf, setLimits, settle, type StoreServices } from "./contract/support.js"

const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((r) => setTimeout(r, ms)))

/** Real time until a session of the test's database waits on a lock (at most 10 s): polled, not slept for. */
const untilWaitingOnLock = Effect.promise(async () => {
  const client = new Pg.Client({ connectionString: await pgDatabaseUrl() })
  await client.connect()
  try {
    const deadline = Date.now() + 10_000
    while (Date.now() < deadline) {
      const result = await client.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
      )
      if (result.rows[0]!.n > 0) return
      await new Promise<void>((r) => setTimeout(r, 10))
    }
  } finally {
    await client.end()
  }
})

/** Real time until `fiber` is done (at most 10 s; the store's fallback poll is an hour of TestClock away). */
const untilDone = <A, E>(fiber: Fiber.Fiber<A, E>) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 10_000
    while (Option.isNone(yield* Fiber.poll(fiber)) && Date.now() < deadline) yield* realSleep(10)
  })

const urlFor = (database: string, schema: string) => {
  const url = new URL(database)
  url.searchParams.set("options", `-c search_path=${schema},public`)
  return url.toString()
}

/** PostgreSQL stores whose pool has two connections, so a test can hold one and keep a statement's cancel waiting. */
const starved = [
  {
    name: "postgresql (PgStore.layer, maxConnections 2)",
    store: (filename: string) =>
      Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (database) =>
        PgStore.layer({
          url: Redacted.make(urlFor(database, pgSchemaFor(filename))),
          schema: pgSchemaFor(filename),
          clock: "host",
          types: pgTestTypes,
          maxConnections: 2,
          fallbackPoll: "1 hour"
        })))
  },
  {
    name: "postgresql (PgStore.layerFromClient, a pool of 2)",
    store: (filename: string) =>
      Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (database) =>
        PgStore.layerFromClient({ schema: pgSchemaFor(filename), clock: "host", fallbackPoll: "1 hour" }).pipe(
          Layer.provideMerge(PgClient.layer({
            url: Redacted.make(urlFor(database, pgSchemaFor(filename))),
            types: pgTestTypes,
            maxConnections: 2
          }))
        )))
  }
]

/** A raw connection outside the store's pool, in a transaction that has run `statement` (a lock held) until `commit`. */
const rival = (filename: string, statement: string) =>
  Effect.promise(async () => {
    const client = new Pg.Client({ connectionString: urlFor(await pgDatabaseUrl(), pgSchemaFor(filename)) })
    await client.connect()
    await client.query("BEGIN")
    await client.query(statement)
    return {
      commit: Effect.promise(async () => {
        await client.query("COMMIT")
        await client.end()
      })
    }
  })

/** Holds one connection of the store's pool in an open transaction until `free`. */
const holdConnection = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const holding = yield* Deferred.make<void>()
  const go = yield* Deferred.make<void>()
  const fiber = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
    yield* sql`SELECT 1`
    yield* Deferred.succeed(holding, undefined)
    yield* Deferred.await(go)
  })))
  yield* Deferred.await(holding)
  return { free: Effect.zipRight(Deferred.succeed(go, undefined), Fiber.join(fiber)) }
})

/**
 * Runs `operation` so that its statement commits after its caller was interrupted (the answer "lost on the
 * wire"): the statement waits on `rivalStatement`'s lock, the caller is interrupted, the driver's cancel waits
 * for a pool connection (the other one is held), then the rival commits and the statement goes through.
 */
const cutOff = <X, E>(filename: string, rivalStatement: string, operation: Effect.Effect<X, E, StoreServices>) =>
  Effect.gen(function*() {
    const held = yield* rival(filename, rivalStatement)
    const pool = yield* holdConnection
    const fiber = yield* Effect.fork(operation)
    yield* untilWaitingOnLock // the statement waits on the rival's lock
    yield* Fiber.interruptFork(fiber)
    yield* realSleep(100)
    yield* held.commit // the statement commits; then the cancel runs on the connection it freed
    yield* realSleep(300)
    yield* pool.free
    const exit = yield* Fiber.await(fiber)
    return exit
  })

for (const engine of starved) {
  describe(`cut off after commit — ${engine.name}`, () => {
    /** A queue of `concurrency: 1` with "a" claimed (its handle) and "b" due, and a `take` held back by the limit. */
    const heldBack = Effect.gen(function*() {
      const q = yield* queueOf("limited")
      yield* setLimits("limited", { concurrency: 1 })
      yield* q.enqueue("a")
      yield* q.enqueue("b")
      const h = yield* mustClaim(q, "w1")
      const taker = yield* Effect.fork(q.take("w2"))
      yield* settle
      expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
      return { q, h, taker }
    })
    const payloadOf = (poll: Option.Option<Exit.Exit<Queues.JobHandle<unknown>, unknown>>) =>
      Option.map(poll, (e) => (e._tag === "Success" ? e.value.job.payload : e._tag))
    const rowLock = (id: number) => `SELECT id FROM __alkstore_jobs WHERE id = ${id} FOR UPDATE`

    // CONTRACT §9: "A slot freed by an ack, retry, release, death, cancel or lapsed lease is claimable at once";
    // "A waiter held back only by a limit sleeps until its deadline ... or a commit that may free a slot in any
    // process" (docs/flow-control.md, Waiting, the same). `fail` buries the claim in one statement and tells the
    // waiters in a second one (handle.ts `bury` → `freed` → queue.ts `tellWaiters`: a local signal, then
    // pg/flowStorage.ts `freed`, a separate `SELECT pg_notify`). Cut off between the two, the death commits and
    // nobody is told: the `take` held back by `concurrency: 1` in the same store (and in every other process)
    // sleeps to its fallback poll / old deadline although "b" is claimable. Both PostgreSQL engines.
    it.effect("a fail cut off after it committed wakes a take held back by concurrency", () =>
      Effect.gen(function*() {
        const filename = freshFile("fail")
        const ctx: Context.Context<StoreServices> = yield* Layer.build(engine.store(filename))
        yield* Effect.gen(function*() {
          const { h, q, taker } = yield* heldBack
          const exit = yield* cutOff(filename, rowLock(h.job.id), h.fail("boom"))
          const a = yield* q.getJob(h.job.id)
          yield* untilDone(taker) // woken, its claim is a round trip: polled for, with a deadline
          expect({
            exit: exit._tag,
            state: Option.map(a, (j) => j.state),
            took: payloadOf(yield* Fiber.poll(taker))
          }).toEqual({ exit: "Failure", state: Option.some("dead"), took: Option.some("b") })
        }).pipe(Effect.provide(ctx))
      }).pipe(Effect.scoped), 30_000)

    // The same rule for `queue.cancel` of a claimed job (queueInspection.ts: `storage.cancel`, then `freed`, the
    // separate NOTIFY): cut off after the delete committed, the held-back take is never told. Both PostgreSQL engines.
    it.effect("a cancel cut off after it committed wakes a take held back by concurrency", () =>
      Effect.gen(function*() {
        const filename = freshFile("cancel")
        const ctx: Context.Context<StoreServices> = yield* Layer.build(engine.store(filename))
        yield* Effect.gen(function*() {
          const { h, q, taker } = yield* heldBack
          const exit = yield* cutOff(filename, rowLock(h.job.id), q.cancel(h.job.id))
          const a = yield* q.getJob(h.job.id)
          yield* untilDone(taker) // woken, its claim is a round trip: polled for, with a deadline
          expect({ exit: exit._tag, gone: Option.isNone(a), took: payloadOf(yield* Fiber.poll(taker)) })
            .toEqual({ exit: "Failure", gone: true, took: Option.some("b") })
        }).pipe(Effect.provide(ctx))
      }).pipe(Effect.scoped), 30_000)

    // And for `ackAll` (ackAll.ts: `storage.ackMany`, then `freed` = `ackFreed`, the separate NOTIFY) — unlike
    // `handle.ack`, whose statement carries its NOTIFY on a queue known limited (`flow.ackFreeing`). Both PostgreSQL
    // engines.
    it.effect("an ackAll cut off after it committed wakes a take held back by concurrency", () =>
      Effect.gen(function*() {
        const filename = freshFile("ackall")
        const ctx: Context.Context<StoreServices> = yield* Layer.build(engine.store(filename))
        yield* Effect.gen(function*() {
          const { h, q, taker } = yield* heldBack
          const exit = yield* cutOff(filename, rowLock(h.job.id), q.ackAll([h]))
          const a = yield* q.getJob(h.job.id)
          yield* untilDone(taker) // woken, its claim is a round trip: polled for, with a deadline
          expect({ exit: exit._tag, gone: Option.isNone(a), took: payloadOf(yield* Fiber.poll(taker)) })
            .toEqual({ exit: "Failure", gone: true, took: Option.some("b") })
        }).pipe(Effect.provide(ctx))
      }).pipe(Effect.scoped), 30_000)
  })
}
