/**
 * Review of named TTL locks (CONTRACT §4, docs/queues-and-locks.md § Locks,
 * docs/decisions.md § Locks): stopping a `withLock` while the database keeps
 * its statement waiting, and a refused `acquire` inside an open application
 * transaction on PostgreSQL. Every test here failed on the code before its fix.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import Sqlite from "better-sqlite3"
import { type Context, Deferred, type Duration, Effect, Exit, Fiber, Layer, Option, Scope, TestClock } from "effect"
import { Locks } from "../src/index.js"
import { type EngineUnderTest, freshFile, pgOwned, sqliteOwned } from "./contract/harness.js"
import { advance, eventually } from "./contract/support.js"

/** Real milliseconds (the blockers are real connections). */
const realSleep = (millis: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, millis)))

/**
 * How many real milliseconds `effect` took, or `undefined` when it had not
 * ended after `bound` (it is left running in the background then).
 */
const tookWithin = <A, E, R>(bound: number, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const started = performance.now()
    const fiber = yield* Effect.fork(effect)
    while (fiber.unsafePoll() === null && performance.now() - started < bound) yield* realSleep(5)
    return fiber.unsafePoll() === null ? undefined : performance.now() - started
  })

/** Builds `layer` in a scope of its own. */
const open = <ROut, E>(layer: Layer.Layer<ROut, E>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(layer, scope)
    return { context, close: Scope.close(scope, Exit.void) }
  })

/**
 * Something outside the store that keeps the store's next lock statement on
 * `name` waiting: on SQLite another connection holding the file's write lock,
 * on PostgreSQL another store instance's application transaction that took the
 * lock (its row stays locked until the transaction ends, docs/decisions.md).
 * `end` lets it go.
 */
const holdUp = (engine: EngineUnderTest, filename: string, name: string) =>
  Effect.gen(function*() {
    if (engine.capabilities.sqliteFile) {
      const other = new Sqlite(filename)
      other.exec("BEGIN IMMEDIATE")
      return Effect.sync(() => {
        other.exec("ROLLBACK")
        other.close()
      })
    }
    const b = yield* open(engine.store({ filename }))
    const { end, got } = yield* acquireInOpenTransaction(b.context, name, "app-tx", "1 minute")
    expect(Option.isSome(got)).toBe(true)
    return Effect.zipRight(end, b.close)
  })

/**
 * Acquires `name` inside an application transaction of the store `context`
 * provides, which stays open until `end` runs (then it ends: the acquire's
 * writes, if any, rolled back). Answers the acquire's result and `end`.
 */
const acquireInOpenTransaction = <R>(
  context: Context.Context<R>,
  name: string,
  owner: string,
  ttl: Duration.DurationInput
) =>
  Effect.gen(function*() {
    const answered = yield* Deferred.make<Option.Option<Locks.LockHandle>>()
    const ending = yield* Deferred.make<void>()
    const tx = yield* Effect.fork(Effect.provide(
      Effect.flatMap(Effect.zip(SqlClient.SqlClient, Locks.Locks), ([sql, locks]) =>
        sql.withTransaction(Effect.gen(function*() {
          yield* Deferred.succeed(answered, yield* locks.acquire(name, { ttl, owner }))
          yield* Deferred.await(ending)
          return yield* Effect.fail("rolled back" as const)
        }))),
      context as Context.Context<SqlClient.SqlClient | Locks.Locks>
    ))
    const got = yield* Deferred.await(answered)
    return { got, end: Effect.asVoid(Effect.zipRight(Deferred.succeed(ending, undefined), Fiber.await(tx))) }
  })

describe("locks review: stopping withLock", () => {
  for (const engine of [sqliteOwned, pgOwned]) {
    // decisions.md "A lock acquire interrupted after its statement committed (PostgreSQL)": "The acquire's
    // statement may wait on a row another transaction holds (...): made uninterruptible, a stop would wait for
    // that transaction." recipes.md: a wait on another connection's write lock "has written nothing" and a stop
    // must not "sit out the store's busyPatience, 30 s". `acquire` itself is interruptible there; withLock
    // runs the same statement as acquireUseRelease's uninterruptible acquire.
    it.live(`interrupting withLock while its acquire waits for the database ends at once, as acquire does — ${engine.name}`, () => {
      const filename = freshFile("stop-acquire")
      return Effect.gen(function*() {
        const store = yield* open(engine.store({ filename }))
        const ran = yield* Deferred.make<void>()
        const letGo = yield* holdUp(engine, filename, "nightly")
        const fiber = yield* Effect.fork(Effect.provide(
          Effect.flatMap(Locks.Locks, (locks) => locks.withLock("nightly", "30 seconds", Deferred.succeed(ran, undefined))),
          store.context
        ))
        yield* realSleep(200) // the acquire is now waiting on the blocker
        const took = yield* tookWithin(1_000, Fiber.interrupt(fiber)).pipe(Effect.ensuring(letGo))
        yield* Fiber.await(fiber)
        yield* store.close
        expect(took, "Fiber.interrupt(withLock) had not returned after 1 s of real time").toBeDefined()
      })
    }, 60_000)
  }

  // decisions.md "Stopping on a busy SQLite file": the scheduler's release "waits out a busy file for at most
  // 1 s of real time (patienceCapMillis), then leaves the lease to lapse with its ttl" because "a SIGTERM
  // handler's stop did not stop"; "A release is best effort anyway: the lease lapses." withLock's release is the
  // same best-effort give-back (decisions.md: "Release failure at the end of withLock | ... the lease lapses with
  // its TTL") but waits the store's whole busyPatience (30 s).
  it.live("interrupting a running withLock while another connection holds the SQLite file's write lock ends within about a second", () => {
    const filename = freshFile("stop-release")
    return Effect.gen(function*() {
      const store = yield* open(sqliteOwned.store({ filename }))
      const inside = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(Effect.provide(
        Effect.flatMap(Locks.Locks, (locks) =>
          locks.withLock("nightly", "30 seconds", Effect.zipRight(Deferred.succeed(inside, undefined), Effect.never))),
        store.context
      ))
      yield* Deferred.await(inside)
      const letGo = yield* holdUp(sqliteOwned, filename, "nightly")
      const took = yield* tookWithin(2_000, Fiber.interrupt(fiber)).pipe(Effect.ensuring(letGo))
      yield* Fiber.await(fiber)
      yield* store.close
      expect(took, "Fiber.interrupt(withLock) had not returned after 2 s of real time").toBeDefined()
    })
  }, 60_000)
})

describe("locks review: a refused acquire inside an open transaction (PostgreSQL)", () => {
  // CONTRACT §4: renew is false only "once the lease lapsed or another owner holds it"; withLock "fails with
  // LockLost if renewal fails"; §2 "LockUnavailable { name } | ... (it never held it)". A process that was refused
  // the lock inside its own transaction never held it, yet its `INSERT ... ON CONFLICT DO UPDATE ... WHERE`
  // locks the holder's row until that transaction ends, so the holder cannot renew: its withLock fails with
  // LockLost at the lease's end although nobody else took the lock.
  it.effect("the holder's withLock keeps renewing while another process's refused acquire sits in an open transaction", () => {
    const filename = freshFile("refused")
    return Effect.gen(function*() {
      const a = yield* Layer.build(pgOwned.store({ filename }))
      const b = yield* Layer.build(pgOwned.store({ filename }))
      const started = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(Effect.provide(
        Effect.flatMap(Locks.Locks, (locks) =>
          locks.withLock(
            "report",
            "30 seconds",
            Effect.zipRight(Deferred.succeed(started, undefined), Effect.as(Effect.sleep("40 seconds"), "done"))
          )),
        a
      ).pipe(Effect.exit))
      yield* Deferred.await(started)
      // another process tries the lock inside its own transaction, is refused, and goes on with its work
      const { end: endTx, got } = yield* acquireInOpenTransaction(b, "report", "other", "30 seconds")
      expect(Option.isNone(got)).toBe(true)
      const expiresAt = Effect.provide(
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.map(sql<{ expires_at: number }>`SELECT expires_at FROM __alkstore_locks WHERE name = 'report'`, (rows) =>
            Number(rows[0]!.expires_at))),
        a
      )
      yield* Effect.gen(function*() {
        // the renewal due at 10 s lands: the holder's lease now ends at 40 s
        yield* TestClock.adjust("10 seconds")
        yield* eventually(Effect.map(expiresAt, (end) => expect(end, "the holder's renewal at 10 s").toBe(40_000)), 1.5)
        yield* endTx
        yield* advance("30 seconds")
        expect(yield* Fiber.join(holder)).toEqual(Exit.succeed("done"))
      }).pipe(Effect.ensuring(endTx), Effect.ensuring(Fiber.interrupt(holder)))
    }).pipe(Effect.scoped)
  }, 60_000)
})
