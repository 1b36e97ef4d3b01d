/**
 * A `PgStore.layer` keeps one connection of its pool for its statements
 * outside a transaction (src/internal/pg/keptConnection.ts): no pool checkout
 * per statement. A busy kept connection never makes another statement wait
 * (that one goes through the pool); a broken one is replaced without the host
 * process meeting an unhandled error; an interrupted statement on it is
 * cancelled and the connection serves the next statement afterwards.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, Exit, Fiber, Option, Redacted } from "effect"
import Pg from "pg"
import { Locks, PgStore, Queues } from "../src/index.js"
import { freshFile, pgDatabaseUrl, pgSchemaFor, pgTestTypes } from "./contract/harness.js"

const realClock = Clock.make()

const store = (url: string, schema: string, maxConnections?: number) =>
  PgStore.layer({
    url: Redacted.make(url),
    types: pgTestTypes,
    schema,
    clock: "host",
    fallbackPoll: "1 hour",
    ...(maxConnections === undefined ? {} : { maxConnections })
  })

interface Sent {
  readonly text: string
  readonly client: Pg.Client
}

/** Every statement any `pg` client of this process sends, with its client, and the pool checkouts, while `use` runs. */
const recording = <A, E, R>(use: (sent: Array<Sent>, checkouts: { count: number }) => Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const sent: Array<Sent> = []
      const checkouts = { count: 0 }
      const query = Pg.Client.prototype.query
      const connect = Pg.Pool.prototype.connect
      Pg.Client.prototype.query = function(this: Pg.Client, ...args: Array<unknown>) {
        const q = args[0] as string | { text?: string }
        sent.push({ text: typeof q === "string" ? q : (q?.text ?? ""), client: this })
        return (query as (...a: Array<unknown>) => unknown).apply(this, args)
      } as typeof query
      Pg.Pool.prototype.connect = function(this: Pg.Pool, ...args: Array<unknown>) {
        checkouts.count++
        return (connect as (...a: Array<unknown>) => unknown).apply(this, args)
      } as typeof connect
      return { sent, checkouts, query, connect }
    }),
    ({ checkouts, sent }) => use(sent, checkouts),
    ({ connect, query }) =>
      Effect.sync(() => {
        Pg.Client.prototype.query = query
        Pg.Pool.prototype.connect = connect
      })
  )

const inserts = (sent: ReadonlyArray<Sent>) => sent.filter((s) => s.text.includes("INSERT INTO") && s.text.includes("__alkstore_jobs"))

/** A plain client of the test database, for the application's side of a test. */
const withAdmin = <A>(url: string, f: (client: Pg.Client) => Promise<A>) =>
  Effect.acquireUseRelease(
    Effect.promise(async () => {
      const client = new Pg.Client({ connectionString: url })
      await client.connect()
      return client
    }),
    (client) => Effect.promise(() => f(client)),
    (client) => Effect.promise(() => client.end())
  )

/** Polls `condition` every 10 ms of real time, for at most `millis`. */
const until = (condition: () => boolean, millis = 5_000) =>
  Effect.gen(function*() {
    const deadline = realClock.unsafeCurrentTimeMillis() + millis
    while (!condition() && realClock.unsafeCurrentTimeMillis() < deadline) {
      yield* Effect.withClock(Effect.sleep(10), realClock)
    }
    return condition()
  })

/**
 * Enqueues until one runs on the kept connection (no pool checkout), for at most `millis` of real time: the
 * connection is kept in the background as the store starts, and is free again once a statement interrupted on
 * it (and any cancel of it) has answered. How many enqueues it made, and whether the last one ran there.
 */
const untilKept = (queue: Queues.Queue<unknown>, millis = 5_000) =>
  Effect.gen(function*() {
    const deadline = realClock.unsafeCurrentTimeMillis() + millis
    for (let made = 1;; made++) {
      const checkouts = yield* recording((_, checkouts) => Effect.as(queue.enqueue({ n: -made }), checkouts))
      if (checkouts.count === 0) return { made, kept: true }
      if (realClock.unsafeCurrentTimeMillis() > deadline) return { made, kept: false }
      yield* Effect.withClock(Effect.sleep(10), realClock)
    }
  })

describe("PostgreSQL: the store's kept connection", () => {
  it.live("enqueues one after another run on one connection, with no pool checkout", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      yield* Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("kept")
        yield* untilKept(queue)
        const [sent, checkouts] = yield* recording((sent, checkouts) =>
          Effect.as(Effect.forEach([1, 2, 3, 4, 5], (n) => queue.enqueue({ n }), { discard: true }), [sent, checkouts] as const)
        )
        const clients = new Set(inserts(sent).map((s) => s.client))
        expect({ inserts: inserts(sent).length, clients: clients.size, checkouts: checkouts.count }).toEqual({
          inserts: 5,
          clients: 1,
          checkouts: 0 // before: one pool checkout per enqueue
        })
      }).pipe(Effect.provide(store(url, pgSchemaFor(freshFile("kept-one")))))
    }), { timeout: 30_000 })

  it.live("a pool of two keeps no connection: every statement goes through the pool", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      yield* Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("small")
        yield* queue.enqueue({ n: 0 })
        const checkouts = yield* recording((_, checkouts) =>
          Effect.as(Effect.forEach([1, 2, 3], (n) => queue.enqueue({ n }), { discard: true }), checkouts)
        )
        expect(checkouts.count).toBe(3)
      }).pipe(Effect.provide(store(url, pgSchemaFor(freshFile("kept-small")), 2)))
    }), { timeout: 30_000 })

  it.live("operations interrupted at every step never leave it taken: later statements run on it again", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      yield* Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const queue = yield* queues.queue("swept")
        yield* queue.enqueue({ n: 0 })
        const stuck: Array<string> = []
        const operations: ReadonlyArray<readonly [string, Effect.Effect<unknown, unknown>]> = [
          ["enqueue", queue.enqueue({ n: 1 })],
          ["stats", queue.stats],
          ["setLimits (a transaction)", queues.setLimits("swept-limited", { concurrency: 2 })]
        ]
        for (const [name, operation] of operations) {
          for (let k = 0; k <= 12; k++) {
            const fiber = yield* Effect.fork(Effect.withMaxOpsBeforeYield(Effect.ignore(operation), 16))
            for (let i = 0; i < k; i++) yield* Effect.yieldNow()
            yield* Fiber.interrupt(fiber)
            // taken for good, every later enqueue goes through the pool
            if (!(yield* untilKept(queue, 3_000)).kept) stuck.push(`${name} k=${k}`)
          }
        }
        expect(stuck).toEqual([])
      }).pipe(Effect.provide(store(url, pgSchemaFor(freshFile("kept-swept")))))
    }), { timeout: 60_000 })

  it.live("its backend terminated: the store goes on through the pool, keeps a new connection, and the process meets no unhandled error", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const uncaught: Array<unknown> = []
      const onUncaught = (e: unknown) => uncaught.push(e)
      process.on("uncaughtException", onUncaught)
      yield* Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("broken")
        yield* queue.enqueue({ n: 0 })
        const first = yield* recording((sent) => Effect.map(queue.enqueue({ n: 1 }), () => inserts(sent)[0]!.client))
        const pid = (first as unknown as { processID: number }).processID
        yield* withAdmin(url, (c) => c.query("SELECT pg_terminate_backend($1)", [pid]))
        expect(yield* until(() => (first as unknown as { _queryable: boolean })._queryable === false)).toBe(true)
        const after = yield* recording((sent) =>
          Effect.as(Effect.forEach([2, 3, 4, 5], (n) => queue.enqueue({ n }), { discard: true }), sent)
        )
        expect(inserts(after).every((s) => s.client !== first)).toBe(true)
        // a new connection was kept meanwhile: later enqueues share one client again
        yield* Effect.withClock(Effect.sleep(200), realClock)
        const later = yield* recording((sent) =>
          Effect.as(Effect.forEach([6, 7, 8], (n) => queue.enqueue({ n }), { discard: true }), sent)
        )
        expect(new Set(inserts(later).map((s) => s.client)).size).toBe(1)
        expect(inserts(later)[0]!.client).not.toBe(first)
        const stats = yield* queue.stats
        expect(stats.pending).toBe(9)
      }).pipe(
        Effect.provide(store(url, pgSchemaFor(freshFile("kept-broken")))),
        Effect.ensuring(Effect.sync(() => process.off("uncaughtException", onUncaught)))
      )
      expect(uncaught).toEqual([])
    }), { timeout: 30_000 })

  it.live("a statement waiting on it never holds up another; interrupted, it is cancelled and the connection serves the next one", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const schema = pgSchemaFor(freshFile("kept-cancel"))
      yield* Effect.gen(function*() {
        const locks = yield* Locks.Locks
        const queue = yield* (yield* Queues.Queues).queue("beside")
        const { made } = yield* untilKept(queue)
        const app = new Pg.Client({ connectionString: url })
        yield* Effect.promise(() => app.connect())
        yield* Effect.promise(() => app.query("BEGIN"))
        yield* Effect.promise(() => app.query(`LOCK TABLE ${schema}.__alkstore_locks IN ACCESS EXCLUSIVE MODE`))
        const [acquire, beside] = yield* recording((sent) =>
          Effect.gen(function*() {
            const acquire = yield* Effect.fork(locks.acquire("L", { owner: "owner", ttl: "30 seconds" }))
            expect(yield* until(() => sent.some((s) => s.text.includes("__alkstore_locks")))).toBe(true)
            // the kept connection is busy with the waiting acquire: an enqueue goes through the pool meanwhile
            yield* queue.enqueue({ n: 1 }).pipe(Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "held up" }))
            return [acquire, sent] as const
          })
        )
        const acquireClient = beside.find((s) => s.text.includes("__alkstore_locks"))!.client
        expect(inserts(beside).map((s) => s.client)).not.toContain(acquireClient)
        const exit = yield* Fiber.interrupt(acquire)
        expect(Exit.isInterrupted(exit)).toBe(true)
        // the cancelled statement's connection serves the next statements, none of them cancelled
        yield* Effect.withClock(Effect.sleep(100), realClock)
        const next = yield* recording((sent) =>
          Effect.as(Effect.forEach([2, 3, 4], (n) => queue.enqueue({ n }), { discard: true }), sent)
        )
        expect(inserts(next).map((s) => s.client)).toContain(acquireClient)
        yield* Effect.promise(() => app.query("ROLLBACK"))
        yield* Effect.promise(() => app.end())
        // the lock was never taken (the statement was cancelled): another owner gets it at once
        const handle = yield* locks.acquire("L", { owner: "other", ttl: "30 seconds" })
        expect(Option.isSome(handle)).toBe(true)
        expect((yield* queue.stats).pending).toBe(made + 4)
      }).pipe(Effect.provide(store(url, schema)))
    }), { timeout: 30_000 })
})
