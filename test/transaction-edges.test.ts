/**
 * The application's transactions, at their edges: commit/rollback atomicity of every write alkstore joins,
 * waking only on (and right after) commit, nesting, interruption, failed COMMITs, and other clients'
 * transactions. Contract time runs on TestClock; waiters have a fallback poll of an hour, so a waiter that
 * was not woken by the commit would not run within these tests (the clock is never advanced that far).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Clock, Context, Deferred, Effect, Exit, Fiber, Layer, Option, Redacted } from "effect"
import { Locks, Outbox, PgStore, Queues, Scheduler } from "../src/index.js"
import * as PgClient from "@effect/sql-pg/PgClient"
import { engines, type EngineUnderTest, freshFile, pgDatabaseUrl, pgFromClient, pgOwned, pgSchemaFor, pgTestTypes, sqliteFromClient, sqliteOwned } from "./contract/harness.js"
import { advance, jobCount, queueOf, settle, type StoreServices } from "./contract/support.js"

const realClock = Clock.make()
const realSleep = (ms: number) => Effect.sleep(ms).pipe(Effect.withClock(realClock))

/** Polls `fiber` in real time until it is done (or `ms` passed); never touches the TestClock. */
const doneWithin = <A, E>(fiber: Fiber.Fiber<A, E>, ms = 3000) =>
  Effect.gen(function*() {
    const deadline = realClock.unsafeCurrentTimeMillis() + ms
    while (realClock.unsafeCurrentTimeMillis() < deadline) {
      const polled = yield* Fiber.poll(fiber)
      if (Option.isSome(polled)) return polled
      yield* Effect.yieldNow()
      yield* realSleep(2)
    }
    return yield* Fiber.poll(fiber)
  })

const expectTypedSqlError = (exit: Exit.Exit<unknown, unknown>) => {
  expect(Exit.isFailure(exit)).toBe(true)
  if (Exit.isFailure(exit)) {
    expect(Cause.isDie(exit.cause)).toBe(false)
    const failure = Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string } | undefined
    expect(failure?._tag).toBe("SqlError")
  }
}

const count = (sql: SqlClient.SqlClient, text: string) =>
  Effect.map(sql.unsafe<{ n: number | string }>(text), (rows) => Number(rows[0]!.n))

for (const engine of engines) {
  describe(`the application's transactions, edges — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) =>
      Effect.provide(effect, engine.store({ fallbackPoll: "1 hour" }))

    const commits: ReadonlyArray<readonly [string, (queue: Queues.Queue<unknown>) => Effect.Effect<unknown, unknown, StoreServices>]> = [
      ["an enqueue", (q) => q.enqueue({ n: 1 })],
      ["a keyed enqueue", (q) => q.enqueue({ n: 1 }, { key: "k1" })],
      ["an enqueueBatch", (q) => q.enqueueBatch([{ n: 1 }, { n: 2 }])],
      ["a keyed enqueueBatch of one", (q) => q.enqueueBatch([{ n: 1 }], { key: "kb" })],
      ["an enqueue in a nested transaction", (q) =>
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(q.enqueue({ n: 1 })))],
      ["an enqueue beside a rolled-back nested one", (q) =>
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.zipRight(
            Effect.exit(sql.withTransaction(Effect.zipRight(q.enqueue({ n: 0 }), Effect.fail("inner")))),
            q.enqueue({ n: 1 })
          ))]
    ]

    it.effect("a waiting take is woken by the commit of each kind of enqueue in the application's transaction (no clock advance)", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const missed: Array<string> = []
        for (const [label, inTx] of commits) {
          const queue = yield* queueOf(`wake-${label.replace(/\W+/g, "-")}`)
          const taker = yield* Effect.fork(queue.take("w"))
          yield* settle
          yield* realSleep(20)
          yield* sql.withTransaction(inTx(queue))
          if (Option.isNone(yield* doneWithin(taker))) missed.push(label)
          yield* Fiber.interrupt(taker)
        }
        expect(missed).toEqual([])
      })))

    it.effect("a release inside the application's transaction wakes a waiting take on commit", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("wake-release")
        yield* queue.enqueue({ n: 1 })
        const handle = Option.getOrThrow(yield* queue.claim("first"))
        const taker = yield* Effect.fork(queue.take("w"))
        yield* settle
        yield* realSleep(20)
        expect(yield* sql.withTransaction(handle.release)).toBe(true)
        const polled = yield* doneWithin(taker)
        expect(Option.isSome(polled)).toBe(true)
      })))

    it.effect("an outbox enqueue inside the application's transaction wakes a running deliverer on commit", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const outbox = yield* (yield* Outbox.Outbox).outbox("tx-wake")
        const delivered = yield* Deferred.make<unknown>()
        const runner = yield* Effect.fork(outbox.run("d", (job) => Deferred.succeed(delivered, job.payload), { concurrency: 1 }))
        yield* settle
        yield* realSleep(20)
        yield* sql.withTransaction(outbox.enqueue({ hook: 1 }))
        const waiter = yield* Effect.fork(Deferred.await(delivered))
        const got = yield* doneWithin(waiter)
        expect(Option.isSome(got)).toBe(true)
        yield* Fiber.interrupt(runner)
      })))

    it.effect("nested: an inner rollback takes its enqueue only; an outer rollback takes both; nothing wakes for it", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("nested")
        const taker = yield* Effect.fork(queue.take("w"))
        yield* settle
        yield* realSleep(20)
        const outer = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
          yield* queue.enqueue({ n: "outer" })
          yield* sql.withTransaction(queue.enqueueBatch([{ n: "inner-1" }, { n: "inner-2" }]))
          return yield* Effect.fail("outer fails")
        })))
        expect(Exit.isFailure(outer)).toBe(true)
        expect(yield* jobCount).toBe(0)
        expect(Option.isNone(yield* doneWithin(taker, 150))).toBe(true)
        yield* sql.withTransaction(Effect.gen(function*() {
          const inner = yield* Effect.exit(
            sql.withTransaction(Effect.zipRight(queue.enqueue({ n: "inner" }, { key: "ik" }), Effect.fail("inner fails")))
          )
          expect(Exit.isFailure(inner)).toBe(true)
          yield* queue.enqueue({ n: "outer" })
        }))
        expect(yield* jobCount).toBe(1)
        const handle = Option.getOrThrow(yield* doneWithin(taker))
        expect(Exit.isSuccess(handle)).toBe(true)
        if (Exit.isSuccess(handle)) expect(handle.value.job.payload).toEqual({ n: "outer" })
        // the inner's key was rolled back too: it can be used again
        const again = yield* queue.enqueue({ n: "again" }, { key: "ik" })
        expect(again).toBeGreaterThan(0)
        expect(yield* jobCount).toBe(2)
      })))

    it.effect("an interrupted transaction rolls back its enqueues and leaves the store usable", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("interrupted")
        const taker = yield* Effect.fork(queue.take("w"))
        yield* settle
        yield* realSleep(20)
        const inside = yield* Deferred.make<void>()
        const tx = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
          yield* queue.enqueue({ n: 1 })
          yield* queue.enqueueBatch([{ n: 2 }, { n: 3 }])
          yield* Deferred.succeed(inside, undefined)
          return yield* Effect.never
        })))
        yield* Deferred.await(inside)
        yield* Fiber.interrupt(tx)
        expect(yield* jobCount).toBe(0)
        expect(Option.isNone(yield* doneWithin(taker, 150))).toBe(true)
        yield* queue.enqueue({ n: 4 })
        const got = Option.getOrThrow(yield* doneWithin(taker))
        expect(Exit.isSuccess(got)).toBe(true)
        if (Exit.isSuccess(got)) expect(got.value.job.payload).toEqual({ n: 4 })
      })))

    it.effect("ack and retry of a handle inside a rolled-back transaction never happened", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("ack-rollback")
        const [a, b] = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }])
        const ha = Option.getOrThrow(yield* queue.claim("w"))
        const hb = Option.getOrThrow(yield* queue.claim("w"))
        const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
          expect(yield* ha.ack).toBe(true)
          expect(yield* hb.retry("boom")).toBe("retried")
          return yield* Effect.fail("abort")
        })))
        expect(Exit.isFailure(exit)).toBe(true)
        const ja = Option.getOrThrow(yield* queue.getJob(a!))
        const jb = Option.getOrThrow(yield* queue.getJob(b!))
        expect(ja.state).toBe("claimed")
        expect(jb.state).toBe("claimed")
        expect(Option.isNone(jb.lastError)).toBe(true)
        // and the handles still own their claims
        expect(yield* ha.ack).toBe(true)
        expect(yield* hb.ack).toBe(true)
      })))

    it.effect("a delayed enqueue committed in a transaction: a waiting take learns its runAt (no fallback poll)", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("tx-delayed")
        const taker = yield* Effect.fork(queue.take("w"))
        yield* settle
        yield* realSleep(20)
        yield* sql.withTransaction(queue.enqueue({ n: 1 }, { delay: "10 seconds" }))
        yield* realSleep(50)
        yield* settle
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* advance("10 seconds")
        const polled = yield* doneWithin(taker)
        expect(Option.isSome(polled)).toBe(true)
      })))

    it.effect("a retry committed in a transaction: a waiting take gets the job when its backoff ends", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("tx-retry", { backoffBase: "4 seconds" })
        yield* queue.enqueue({ n: 1 })
        const handle = Option.getOrThrow(yield* queue.claim("first"))
        const taker = yield* Effect.fork(queue.take("w"))
        yield* settle
        yield* realSleep(20)
        expect(yield* sql.withTransaction(handle.retry("boom"))).toBe("retried")
        yield* realSleep(50)
        yield* settle
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        const job = Option.getOrThrow(yield* queue.getJob(handle.job.id))
        expect(job.state).toBe("pending")
        yield* advance("4 seconds")
        const polled = yield* doneWithin(taker)
        expect(Option.isSome(polled)).toBe(true)
      })))

    it.effect("a handler that acks inside its own transaction and enqueues follow-ups there: every job runs once, no fallback poll", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql.unsafe("CREATE TABLE done_rows (n INTEGER)")
        const queue = yield* queueOf("tx-handler")
        const finished = yield* Deferred.make<void>()
        const worker = yield* Effect.fork(queue.process("w", (job, handle) =>
          sql.withTransaction(Effect.gen(function*() {
            const n = (job.payload as { n: number }).n
            yield* sql.unsafe(`INSERT INTO done_rows (n) VALUES (${n})`)
            expect(yield* handle.ack).toBe(true)
            if (n < 5) yield* queue.enqueue({ n: n + 1 })
            else yield* Deferred.succeed(finished, undefined)
          })), { concurrency: 2 }))
        yield* settle
        yield* queue.enqueue({ n: 1 })
        const waiter = yield* Effect.fork(Deferred.await(finished))
        expect(Option.isSome(yield* doneWithin(waiter, 5000))).toBe(true)
        yield* Fiber.interrupt(worker)
        expect(yield* count(sql, "SELECT count(*) AS n FROM done_rows")).toBe(5)
        expect(yield* count(sql, "SELECT count(DISTINCT n) AS n FROM done_rows")).toBe(5)
        expect(yield* jobCount).toBe(0)
      })))

    for (const outcome of ["commits", "rolls back"] as const) {
      it.effect(`a keyed enqueue racing another transaction's keyed enqueue of the same key, which ${outcome}`, () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const queue = yield* queueOf(`key-race-${outcome.replace(" ", "-")}`)
          const inserted = yield* Deferred.make<number>()
          const finish = yield* Deferred.make<void>()
          const first = yield* Effect.fork(Effect.exit(sql.withTransaction(Effect.gen(function*() {
            const id = yield* queue.enqueue({ n: 1 }, { key: "k" })
            yield* Deferred.succeed(inserted, id)
            yield* Deferred.await(finish)
            if (outcome === "rolls back") return yield* Effect.fail("abort")
            return id
          }))))
          const firstId = yield* Deferred.await(inserted)
          const second = yield* Effect.fork(sql.withTransaction(queue.enqueue({ n: 2 }, { key: "k" })))
          yield* realSleep(100)
          yield* Deferred.succeed(finish, undefined)
          yield* Fiber.join(first)
          const secondId = yield* Fiber.join(second)
          const live = yield* count(sql, "SELECT count(*) AS n FROM __alkstore_jobs")
          expect(live).toBe(1)
          if (outcome === "commits") expect(secondId).toBe(firstId)
          else {
            const job = Option.getOrThrow(yield* queue.getJob(secondId))
            expect(job.payload).toEqual({ n: 2 })
          }
        })))
    }

    it.effect("many concurrent transactions, half rolled back: a worker runs exactly the committed jobs, without the fallback poll", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* queueOf("tx-many")
        const seen: Array<number> = []
        const worker = yield* Effect.fork(queue.process("w", (job) => Effect.sync(() => {
          seen.push((job.payload as { n: number }).n)
        }), { concurrency: 3 }))
        yield* settle
        yield* Effect.forEach(Array.from({ length: 40 }, (_, n) => n), (n) =>
          Effect.exit(sql.withTransaction(Effect.gen(function*() {
            if (n % 4 === 0) yield* queue.enqueueBatch([{ n: 1000 + n }, { n: 2000 + n }])
            else yield* queue.enqueue({ n }, n % 3 === 0 ? { key: `k${n}` } : undefined)
            yield* Effect.yieldNow()
            if (n % 2 === 1) return yield* Effect.fail("abort")
          }))), { concurrency: 8, discard: true })
        const expected = Array.from({ length: 40 }, (_, n) => n).filter((n) => n % 2 === 0)
          .flatMap((n) => (n % 4 === 0 ? [1000 + n, 2000 + n] : [n])).sort((a, b) => a - b)
        const deadline = realClock.unsafeCurrentTimeMillis() + 5000
        while (seen.length < expected.length && realClock.unsafeCurrentTimeMillis() < deadline) yield* realSleep(5)
        yield* realSleep(50)
        yield* Fiber.interrupt(worker)
        expect([...seen].sort((a, b) => a - b)).toEqual(expected)
        expect(yield* jobCount).toBe(0)
      })))

    it.effect("a lock acquire and a schedule in a rolled-back transaction leave nothing", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const locks = yield* Locks.Locks
        const scheduler = yield* Scheduler.Scheduler
        const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
          expect(Option.isSome(yield* locks.acquire("tx-lock", { ttl: "1 minute" }))).toBe(true)
          yield* scheduler.schedule("tx-sched", "@every 1m", "q", {})
          return yield* Effect.fail("abort")
        })))
        expect(Exit.isFailure(exit)).toBe(true)
        expect(Option.isSome(yield* locks.acquire("tx-lock", { ttl: "1 minute", owner: "other" }))).toBe(true)
        expect(yield* count(sql, "SELECT count(*) AS n FROM __alkstore_scheduler_tasks")).toBe(0)
      })))
  })
}

/**
 * Two stores in one application, each over its own client (another database): every operation of one inside
 * the other's transaction fails with a typed SqlError, writes nothing to either, and leaves that transaction whole.
 */
const everyOperation = Effect.gen(function*() {
  const queues = yield* Queues.Queues
  const queue = yield* queues.queue("two-stores")
  const outbox = yield* (yield* Outbox.Outbox).outbox("two-stores")
  const locks = yield* Locks.Locks
  const scheduler = yield* Scheduler.Scheduler
  const sql = yield* SqlClient.SqlClient
  // claims made outside, settled inside
  const [, , , dying] = yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }])
  const handles = yield* queue.claimBatch("w", 3)
  expect(handles.length).toBe(3)
  return (label: string) => [
    [`${label} enqueue`, queue.enqueue({ n: 0 })],
    [`${label} keyed enqueue`, queue.enqueue({ n: 0 }, { key: "kk" })],
    [`${label} delayed enqueue`, queue.enqueue({ n: 0 }, { delay: "1 minute" })],
    [`${label} enqueueBatch`, queue.enqueueBatch([{ n: 0 }, { n: 0 }])],
    [`${label} outbox enqueue`, outbox.enqueue({ n: 0 })],
    [`${label} ack`, handles[0]!.ack],
    [`${label} retry`, handles[1]!.fail("boom")],
    [`${label} release`, handles[2]!.release],
    [`${label} heartbeat`, handles[2]!.heartbeat()],
    [`${label} ackAll`, queue.ackAll([handles[0]!])],
    [`${label} claim`, queue.claim("x")],
    [`${label} claimBatch`, queue.claimBatch("x", 2)],
    [`${label} cancel`, queue.cancel(dying!)],
    [`${label} requeueDead`, queue.requeueDead(dying!)],
    [`${label} lock acquire`, locks.acquire("two-stores-lock", { ttl: "1 minute" })],
    [`${label} withLock`, locks.withLock("two-stores-lock-2", "1 minute", Effect.void)],
    [`${label} schedule`, scheduler.schedule("two-stores-s", "@every 1m", "two-stores", {})],
    [`${label} unschedule`, scheduler.unschedule("two-stores-s")],
    [`${label} setLimits`, queues.setLimits("two-stores", { concurrency: 1 })],
    [`${label} clearLimits`, queues.clearLimits("two-stores")],
    [`${label} outbox runOnce`, outbox.runOnce("d", () => Effect.void)],
    [`${label} its own client's transaction`, sql.withTransaction(queue.enqueue({ n: 0 }))],
    [`${label} stats`, queue.stats]
  ] as const
})

const stateOf = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  return {
    jobs: yield* count(sql, "SELECT count(*) AS n FROM __alkstore_jobs"),
    claimed: yield* count(sql, "SELECT count(*) AS n FROM __alkstore_jobs WHERE state = 'claimed'"),
    locks: yield* count(sql, "SELECT count(*) AS n FROM __alkstore_locks"),
    schedules: yield* count(sql, "SELECT count(*) AS n FROM __alkstore_scheduler_tasks")
  }
})

const pairs: ReadonlyArray<readonly [EngineUnderTest, EngineUnderTest]> = [
  [sqliteOwned, pgOwned],
  [pgOwned, sqliteOwned],
  [sqliteFromClient, pgFromClient],
  [pgFromClient, sqliteFromClient],
  [sqliteOwned, sqliteOwned],
  [sqliteFromClient, sqliteOwned],
  [sqliteOwned, sqliteFromClient],
  [pgOwned, pgOwned],
  [pgFromClient, pgFromClient]
]

for (const [inner, outer] of pairs) {
  describe(`two stores in one application — ${inner.name} inside ${outer.name}'s transaction`, () => {
    it.scoped("every operation fails with a typed SqlError and writes nothing to either database", () =>
      Effect.gen(function*() {
        const a = yield* Layer.build(inner.store({ filename: freshFile("a"), fallbackPoll: "1 hour" }))
        const b = yield* Layer.build(outer.store({ filename: freshFile("b"), fallbackPoll: "1 hour" }))
        const bSql = Context.get(b, SqlClient.SqlClient)
        yield* Effect.provide(
          Effect.asVoid(bSql.unsafe("CREATE TABLE app_rows (n INTEGER)")),
          b
        )
        const operations = yield* Effect.provide(everyOperation, a)
        const before = yield* Effect.provide(stateOf, a)
        const beforeB = yield* Effect.provide(stateOf, b)
        const exits = yield* bSql.withTransaction(Effect.gen(function*() {
          yield* bSql.unsafe("INSERT INTO app_rows (n) VALUES (1)")
          const exits: Array<readonly [string, Exit.Exit<unknown, unknown>]> = []
          for (const [label, op] of operations("a")) {
            exits.push([label, yield* Effect.exit(Effect.provide(op as Effect.Effect<unknown, unknown, never>, a))])
          }
          yield* bSql.unsafe("INSERT INTO app_rows (n) VALUES (2)")
          return exits
        })).pipe(Effect.provide(b))
        const wrong = exits.filter(([, exit]) => {
          if (Exit.isSuccess(exit) || Cause.isDie(exit.cause)) return true
          const failure = Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string } | undefined
          return failure?._tag !== "SqlError"
        }).map(([label, exit]) => `${label}: ${Exit.isSuccess(exit) ? "succeeded" : Cause.pretty(exit.cause).slice(0, 300)}`)
        expect(wrong).toEqual([])
        expect(yield* Effect.provide(count(bSql, "SELECT count(*) AS n FROM app_rows"), b)).toBe(2)
        expect(yield* Effect.provide(stateOf, a)).toEqual(before)
        expect(yield* Effect.provide(stateOf, b)).toEqual(beforeB)
      }))
  })
}

describe("a failed COMMIT of the application's transaction — sqlite (SqliteStore.layer)", () => {
  const setup = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql.unsafe("PRAGMA foreign_keys = ON")
    yield* sql.unsafe("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    yield* sql.unsafe("CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")
    return sql
  })
  for (const busy of [false, true]) {
    it.effect(`is a typed SqlError, its enqueues are gone, nothing wakes, the store carries on (${busy ? "connection held at first" : "connection free"})`, () =>
      Effect.gen(function*() {
        const sql = yield* setup
        const queue = yield* queueOf("failed-commit")
        const taker = yield* Effect.fork(queue.take("w"))
        yield* settle
        yield* realSleep(20)
        // another fiber's transaction holds the connection, so the application's BEGIN waits for it
        const release = yield* Deferred.make<void>()
        const holder = busy
          ? yield* Effect.fork(sql.withTransaction(Deferred.await(release)))
          : undefined
        if (busy) yield* settle
        const tx = yield* Effect.fork(Effect.exit(sql.withTransaction(Effect.gen(function*() {
          yield* sql.unsafe("INSERT INTO child (parent) VALUES (42)")
          yield* queue.enqueue({ n: 1 })
          yield* queue.enqueueBatch([{ n: 2 }, { n: 3 }])
        }))))
        if (holder !== undefined) {
          yield* settle
          yield* Deferred.succeed(release, undefined)
          yield* Fiber.join(holder)
        }
        const exit = yield* Fiber.join(tx)
        expectTypedSqlError(exit)
        expect(yield* jobCount).toBe(0)
        expect(yield* count(sql, "SELECT count(*) AS n FROM child")).toBe(0)
        expect(Option.isNone(yield* doneWithin(taker, 150))).toBe(true)
        // the connection is not left inside the transaction
        yield* sql.withTransaction(queue.enqueue({ n: 4 }))
        const got = Option.getOrThrow(yield* doneWithin(taker))
        expect(Exit.isSuccess(got)).toBe(true)
        expect(yield* jobCount).toBe(1)
      }).pipe(Effect.provide(sqliteOwned.store({ fallbackPoll: "1 hour" }))))
  }
})

describe("postgresql (PgStore.layerFromClient) over a pool of one connection: the application's transaction holds it", () => {
  it.effect("every operation inside that transaction runs on it (none waits for a second connection)", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const queues = yield* Queues.Queues
      const queue = yield* queues.queue("pool-one")
      const outbox = yield* (yield* Outbox.Outbox).outbox("pool-one")
      const locks = yield* Locks.Locks
      const scheduler = yield* Scheduler.Scheduler
      yield* queue.enqueue({ n: 0 })
      const handle = Option.getOrThrow(yield* queue.claim("w"))
      const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
        yield* queue.enqueue({ n: 1 })
        yield* queue.enqueue({ n: 2 }, { key: "k" })
        yield* queue.enqueueBatch([{ n: 3 }, { n: 4 }])
        yield* queue.enqueueBatch([{ n: 5 }], { key: "kb" })
        yield* outbox.enqueue({ n: 6 })
        yield* locks.acquire("pool-one-lock", { ttl: "1 minute" })
        yield* locks.withLock("pool-one-lock-2", "1 minute", queue.stats)
        yield* scheduler.schedule("pool-one-s", "@every 1m", "pool-one", {})
        yield* queues.setLimits("pool-one", { concurrency: 5 })
        yield* queues.clearLimits("pool-one")
        yield* handle.heartbeat()
        yield* handle.retry("again")
        yield* queue.claim("w2")
        yield* queues.maintenance
      })).pipe(Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "hung" as const }), Effect.withClock(realClock)))
      expect(exit).toEqual(Exit.void)
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.gen(function*() {
      const database = yield* Effect.promise(pgDatabaseUrl)
      const schema = pgSchemaFor(freshFile("pool-one"))
      const url = new URL(database)
      url.searchParams.set("options", `-c search_path=${schema},public`)
      return PgStore.layerFromClient({ schema, clock: "host", fallbackPoll: "1 hour" }).pipe(
        Layer.provideMerge(PgClient.layer({ url: Redacted.make(url.toString()), types: pgTestTypes, maxConnections: 1 }))
      )
    })))))
})
