/**
 * Review of the store's lifecycle and resource hygiene: closing a store's
 * scope while its services are busy (workers in handlers, a waiting `take`,
 * a held lock, a leading scheduler, an outbox dispatcher), use after close,
 * repeated open/close in one process, two stores on one file, and a pooled
 * PostgreSQL connection given back however its taker ends.
 */
import { SqlClient } from "@effect/sql"
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Layer, Option, Redacted, Scope } from "effect"
import * as fs from "node:fs"
import Pg from "pg"
import { Admin, Locks, Outbox, PgStore, Queues, Scheduler } from "../src/index.js"
import { runChild } from "./child.js"
import {
  type EngineUnderTest,
  engines,
  freshFile,
  pgChildDatabase,
  pgDatabaseUrl,
  pgFromClient,
  pgOwned,
  pgSchemaFor,
  sqliteFromClient,
  sqliteOwned
} from "./contract/harness.js"
import { pgTestTypes } from "./fixtures/types.js"

/** Real milliseconds (the engines' I/O and the child processes are real). */
const realSleep = (millis: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, millis)))

/** `look` once what was just closed has finished closing: re-read every 50 ms until three reads in a row agree (at most 5 s). */
const steady = <A, E, R>(look: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 5_000
    let last = yield* look
    for (let same = 0; same < 2 && Date.now() < deadline;) {
      yield* realSleep(50)
      const next = yield* look
      same = JSON.stringify(next) === JSON.stringify(last) ? same + 1 : 0
      last = next
    }
    return last
  })

/** `look` once it equals `expected`, or its last reading after `millis` of real time: closings end asynchronously. */
const once = <A, E, R>(look: Effect.Effect<A, E, R>, expected: A, millis = 10_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + millis
    let last = yield* look
    while (JSON.stringify(last) !== JSON.stringify(expected) && Date.now() < deadline) {
      yield* realSleep(20)
      last = yield* look
    }
    return last
  })

/** `effect`, or `undefined` once `millis` of real time have passed first. */
const within = <A, E, R>(millis: number, effect: Effect.Effect<A, E, R>) =>
  Effect.raceFirst(effect, Effect.as(realSleep(millis), undefined))

/** Builds `layer` in a scope of its own, to close whenever the test says. */
const openStore = <ROut, E>(layer: Layer.Layer<ROut, E>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(layer, scope)
    return { context, close: Scope.close(scope, Exit.void) }
  })

describe("closing a store while it is busy", () => {
  it.live("a child process that closes a busy store exits on its own, its claims and leases given back — both engines, under TestClock", () =>
    Effect.gen(function*() {
      const runs = [
        { engine: sqliteOwned, arg: "sqlite-owned", clock: "test" },
        { engine: pgOwned, arg: "pg-owned", clock: "test" }
      ] as const
      const outcomes = yield* Effect.forEach(runs, (run) =>
        Effect.gen(function*() {
          const filename = freshFile("busy-close")
          const database = run.engine.capabilities.postgres ? yield* Effect.promise(() => pgChildDatabase(filename)) : filename
          // Migrated first, so the child's layer is quick.
          yield* Effect.scoped(Layer.build(run.engine.store({ filename })))
          const started = Date.now()
          const outcome = yield* within(
            25_000,
            runChild("test/fixtures/lifecycle-review/busy-close.ts", [run.arg, database, run.clock])
          )
          const elapsed = Date.now() - started
          const after = yield* Effect.gen(function*() {
            const admin = yield* Admin.Admin
            const jobs = yield* admin.jobs({ limit: 10 })
            const locks = yield* admin.locks
            return {
              jobs: jobs.filter((job) => job.queue !== "ticks").map((job) => `${job.queue}:${job.state}:${job.attempts}`).sort(),
              held: locks.filter((lock) => lock.held).map((lock) => lock.name)
            }
          }).pipe(Effect.provide(run.engine.store({ filename })))
          return { name: run.engine.name, clock: run.clock, outcome, elapsed, after }
        }), { concurrency: "unbounded" })
      for (const { after, clock, elapsed, name, outcome } of outcomes) {
        const what = `${name} (${clock} clock): ${outcome?.stdout ?? ""}${outcome?.stderr ?? ""}`
        expect(outcome, `${what} did not exit within 25 s`).toBeDefined()
        expect({ code: outcome!.code, lines: outcome!.stdout.trim().split("\n") }, what).toEqual({
          code: 0,
          lines: ["busy", "closed"]
        })
        expect(elapsed, what).toBeLessThan(20_000)
        // The worker's and the dispatcher's claims were released (attempt given back); lock and lease released.
        expect(after, what).toEqual({
          jobs: ["__alkstore_outbox:hooks:pending:0", "work:pending:0"],
          held: []
        })
      }
    }), 40_000)

  for (const engine of engines) {
    it.live(`a worker, a leader and a lock holder still running when the store's scope closes give back their claim, lease and lock — ${engine.name}`, () =>
      Effect.gen(function*() {
        // The shape docs/getting-started.md shows (`Effect.fork(queue.process(...))` inside the program the
        // store is provided to), on a program that ends before it interrupts its fibers — here by returning,
        // as a failure would. They are children of the program's fiber: interrupted when that fiber ends,
        // which is after the store's scope has closed under them.
        const filename = freshFile("forked-worker")
        const id = yield* Effect.gen(function*() {
          const queue = yield* (yield* Queues.Queues).queue("forked")
          const id = yield* queue.enqueue({ n: 1 })
          const handling = yield* Deferred.make<void>()
          const locked = yield* Deferred.make<void>()
          yield* Effect.fork(queue.process("w", () => Effect.zipRight(Deferred.succeed(handling, undefined), Effect.never)))
          yield* Effect.fork((yield* Locks.Locks).withLock("forked", "1 hour", Effect.zipRight(Deferred.succeed(locked, undefined), Effect.never)))
          yield* Effect.fork((yield* Scheduler.Scheduler).runSchedules)
          yield* Deferred.await(handling)
          yield* Deferred.await(locked)
          const admin = yield* Admin.Admin
          while (!(yield* admin.locks).some((lock) => lock.name === "__alkstore_scheduler" && lock.held)) yield* realSleep(10)
          return id
        }).pipe(Effect.provide(engine.store({ filename, leaderTtl: "1 hour" })))
        yield* realSleep(100)
        const after = yield* Effect.gen(function*() {
          const admin = yield* Admin.Admin
          const job = Option.getOrThrow(yield* admin.job(id))
          const held = (yield* admin.locks).filter((lock) => lock.held).map((lock) => lock.name).sort()
          return { job: { state: job.state, attempts: job.attempts }, held }
        }).pipe(Effect.provide(engine.store({ filename })))
        // Contract §3: interruption "`release`s in-flight claims" (pending, attempt given back); §4: `withLock`
        // "releases when the effect ends — success, failure or interruption"; §5: "on interruption the
        // leadership lease is released so a standby takes over at once".
        expect(after, "what the fibers held when the store closed").toEqual({
          job: { state: "pending", attempts: 0 },
          held: []
        })
      }), 20_000)
  }

  for (const engine of [sqliteOwned, pgOwned]) {
    it.live(`a take waiting when the store's scope closes ends at once with a typed error — ${engine.name}`, () =>
      Effect.gen(function*() {
        const store = yield* openStore(engine.store({ filename: freshFile("waiting-take"), fallbackPoll: "20 seconds" }))
        const queue = yield* Effect.provide(Effect.flatMap(Queues.Queues, (queues) => queues.queue("idle")), store.context)
        const taker = yield* Effect.fork(queue.take("w"))
        yield* realSleep(100)
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* store.close
        const ended = yield* within(1_000, Fiber.await(taker))
        if (ended === undefined) yield* Fiber.interrupt(taker)
        expect(ended === undefined ? "still waiting 1 s after the store closed" : "ended", "the take").toBe("ended")
        expect(Exit.isFailure(ended!) && !Cause.isDie(ended.cause), "a typed failure, not a defect").toBe(true)
      }), 20_000)
  }

  for (const engine of engines) {
    it.live(`every service used after the store's scope closed fails with a typed SqlError — ${engine.name}`, () =>
      Effect.gen(function*() {
        const store = yield* openStore(engine.store({ filename: freshFile("after-close") }))
        const services = yield* Effect.provide(
          Effect.all({
            queue: Effect.flatMap(Queues.Queues, (queues) => queues.queue("after")),
            queues: Queues.Queues,
            locks: Locks.Locks,
            scheduler: Scheduler.Scheduler,
            outbox: Effect.flatMap(Outbox.Outbox, (outbox) => outbox.outbox("after")),
            admin: Admin.Admin
          }),
          store.context
        )
        yield* store.close
        const { admin, locks, outbox, queue, queues, scheduler } = services
        const uses: ReadonlyArray<readonly [string, Effect.Effect<unknown, unknown>]> = [
          ["enqueue", queue.enqueue({ n: 1 })],
          ["claim", queue.claim("w")],
          ["take", queue.take("w")],
          ["stats", queue.stats],
          ["maintenance", queues.maintenance],
          ["acquire", locks.acquire("l", { ttl: "5 seconds" })],
          ["withLock", locks.withLock("l", "5 seconds", Effect.void)],
          ["schedule", scheduler.schedule("s", "@every 1h", "after", {})],
          ["runSchedules", scheduler.runSchedules],
          ["outbox.enqueue", outbox.enqueue({ n: 1 })],
          ["outbox.runOnce", outbox.runOnce("d", () => Effect.void)],
          ["admin.queues", admin.queues]
        ]
        for (const [name, use] of uses) {
          const exit = yield* within(3_000, Effect.exit(use))
          expect(exit === undefined ? "hangs" : Exit.isSuccess(exit) ? "succeeds" : Cause.isDie(exit.cause) ? "dies" : "fails", name)
            .toBe("fails")
          const error = Cause.failureOption((exit as Exit.Failure<unknown, unknown>).cause)
          expect(Option.map(error, (e) => (e as { _tag?: string })._tag), name).toEqual(Option.some("SqlError"))
        }
      }), 30_000)
  }
})

describe("PostgreSQL: a pooled connection is given back however its taker ends", () => {
  const pgWithPool = (engine: EngineUnderTest, filename: string, maxConnections: number) =>
    Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (database) => {
      const schema = pgSchemaFor(filename)
      const url = new URL(database)
      url.searchParams.set("options", `-c search_path=${schema},public`)
      const connection = { url: Redacted.make(url.toString()), types: pgTestTypes, maxConnections }
      return engine === pgOwned
        ? PgStore.layer({ ...connection, schema, clock: "host" })
        : PgStore.layerFromClient({ schema, clock: "host" }).pipe(Layer.provideMerge(PgClient.layer(connection)))
    }))

  for (const engine of [pgOwned, pgFromClient]) {
    it.live(`a store transaction interrupted while it waits for a connection leaks none — ${engine.name}`, () =>
      Effect.gen(function*() {
        const filename = freshFile("pool")
        yield* Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const queue = yield* (yield* Queues.Queues).queue("pool")
          // The application holds the pool's one connection in a transaction of its own...
          const done = yield* Deferred.make<void>()
          const holding = yield* Deferred.make<void>()
          const application = yield* Effect.fork(
            sql.withTransaction(Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(done)))
          )
          yield* Deferred.await(holding)
          // ...while a store transaction (requeueDead: one transaction) waits for a connection, and is
          // interrupted there (a request's timeout, a shutdown).
          const waiting = yield* Effect.fork(queue.requeueDead(1))
          yield* realSleep(50)
          expect(Option.isNone(yield* Fiber.poll(waiting))).toBe(true)
          expect(yield* within(2_000, Effect.as(Fiber.interrupt(waiting), "interrupted")), "interrupting the wait").toBe(
            "interrupted"
          )
          yield* Deferred.succeed(done, undefined)
          yield* Fiber.join(application)
          // The connection the application gave back must serve the store again.
          const stats = yield* within(1_000, Effect.exit(queue.stats))
          expect(stats === undefined ? "hangs: the pool's connection never came back" : stats._tag, "a statement after")
            .toBe("Success")
        }).pipe(Effect.provide(pgWithPool(engine, filename, 1)))
      }), 20_000)
  }
})

describe("repeated opening and closing in one process", () => {
  /** This process's threads, open descriptors, and the active handles Node reports, by kind. */
  const snapshot = () => {
    const kinds = new Map<string, number>()
    for (const kind of process.getActiveResourcesInfo()) kinds.set(kind, (kinds.get(kind) ?? 0) + 1)
    return {
      threads: fs.readdirSync("/proc/self/task").length,
      fds: fs.readdirSync("/proc/self/fd").length,
      sockets: kinds.get("TCPSocketWrap") ?? 0,
      watchers: kinds.get("FSEventWrap") ?? 0
    }
  }
  const busyCycle = (engine: EngineUnderTest, filename: string) =>
    Effect.gen(function*() {
      const queue = yield* (yield* Queues.Queues).queue("cycle")
      const taker = yield* Effect.fork(queue.take("w"))
      yield* realSleep(5)
      yield* queue.enqueue({ n: 1 })
      yield* (yield* Fiber.join(taker)).ack
      yield* (yield* Locks.Locks).withLock("cycle", "5 seconds", Effect.void)
    }).pipe(Effect.provide(engine.store({ filename })))

  for (const engine of engines) {
    const cycles = engine.capabilities.postgres ? 5 : 12
    it.live(`${cycles} stores opened, used and closed leave no thread, descriptor, socket or watch — ${engine.name}`, () =>
      Effect.gen(function*() {
        const filename = freshFile("cycles")
        yield* busyCycle(engine, filename)
        // sockets and the server's sessions close asynchronously: read once they are steady, and poll (with a
        // deadline) for the same reading after the cycles, rather than sleeping a fixed time
        const before = yield* steady(Effect.sync(snapshot))
        for (let i = 0; i < cycles; i++) yield* busyCycle(engine, filename)
        expect(yield* once(Effect.sync(snapshot), before)).toEqual(before)
      }), 30_000)
  }

  it.live("closed PostgreSQL stores leave no server session behind", () =>
    Effect.gen(function*() {
      const database = yield* Effect.promise(pgDatabaseUrl)
      const sessions = Effect.promise(async () => {
        const client = new Pg.Client({ connectionString: database })
        await client.connect()
        try {
          const result = await client.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
          )
          return result.rows[0]!.n
        } finally {
          await client.end()
        }
      })
      const filename = freshFile("sessions")
      yield* busyCycle(pgOwned, filename)
      // a closed client's server session ends asynchronously: read once steady, then polled for (a deadline)
      const before = yield* steady(sessions)
      for (let i = 0; i < 3; i++) {
        yield* busyCycle(pgOwned, filename)
        yield* busyCycle(pgFromClient, filename)
      }
      expect(yield* once(sessions, before)).toBe(before)
    }), 30_000)
})

describe("two stores on one SQLite file in one process", () => {
  it.live("they wake each other, and closing one leaves the other working — waking included", () =>
    Effect.gen(function*() {
      const filename = freshFile("two")
      const first = yield* openStore(sqliteOwned.store({ filename, fallbackPoll: "20 seconds" }))
      const second = yield* openStore(sqliteOwned.store({ filename, fallbackPoll: "20 seconds" }))
      const queueIn = (store: { context: typeof first.context }) =>
        Effect.provide(Effect.flatMap(Queues.Queues, (queues) => queues.queue("two")), store.context)
      const one = yield* queueIn(first)
      const two = yield* queueIn(second)

      const taker = yield* Effect.fork(one.take("w1"))
      yield* realSleep(50)
      yield* two.enqueue({ from: "second" })
      const woken = yield* within(2_000, Fiber.join(taker))
      expect(woken?.job.payload).toEqual({ from: "second" })
      yield* woken!.ack

      const secondWaiting = yield* Effect.fork(two.take("w2"))
      yield* realSleep(50)
      yield* second.close
      yield* Fiber.interrupt(secondWaiting)

      // The first store goes on, woken by a third connection's commit.
      const again = yield* Effect.fork(one.take("w1"))
      yield* realSleep(50)
      yield* Effect.gen(function*() {
        yield* (yield* (yield* Queues.Queues).queue("two")).enqueue({ from: "third" })
      }).pipe(Effect.provide(sqliteFromClient.store({ filename })))
      const wokenAgain = yield* within(2_000, Fiber.join(again))
      expect(wokenAgain?.job.payload).toEqual({ from: "third" })
      expect(yield* wokenAgain!.ack).toBe(true)
      yield* first.close
      const leftOpen = fs.readdirSync("/proc/self/fd").filter((fd) => {
        try {
          return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(filename)
        } catch {
          return false
        }
      })
      expect(leftOpen).toEqual([])
    }), 20_000)
})
