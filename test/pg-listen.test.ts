/**
 * Waking over LISTEN/NOTIFY: another store's commit wakes a waiter at once,
 * a rolled-back one does not, and a LISTEN connection that silently stops
 * delivering (a half-open TCP connection, made here by a loopback proxy that
 * stops forwarding) is detected by its heartbeat and re-established, the
 * waiters re-reading on reconnect, long before the fallback poll.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option, Redacted } from "effect"
import { PgStore } from "../src/index.js"
import { healthyAfterMillis } from "../src/internal/pg/listener.js"
import { channelOf } from "../src/internal/pg/notify.js"
import { freshFile, pgDatabaseUrl, pgOwned, pgSchemaFor } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"
import { killListeners, startProxy, throughProxy } from "./support/pgProxy.js"

const waitUntil = (what: string, probe: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200 && !probe(); i++) yield* Effect.sleep("50 millis")
    if (!probe()) return yield* Effect.die(new Error(`timed out waiting for ${what}`))
  })

const waitUntilEffect = <E, R>(probe: Effect.Effect<boolean, E, R>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100; i++) {
      if (yield* probe) return
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.die(new Error("timed out"))
  })

const notifiedTake = (filename: string, name: string) =>
  Effect.gen(function*() {
    const queue = yield* queueOf(name)
    const taker = yield* Effect.fork(queue.take("w"))
    yield* Effect.sleep("100 millis")
    yield* Effect.gen(function*() {
      yield* (yield* queueOf(name)).enqueue({ n: 1 })
    }).pipe(Effect.provide(pgOwned.store({ filename })))
    return (yield* Fiber.join(taker).pipe(Effect.timeout("5 seconds"))).job.payload
  })

/** How many of this database's LISTEN connections last ran a LISTEN on `schema`'s channel. */
const listening = (schema: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE application_name = 'alkstore-listen' AND datname = current_database()
          AND query LIKE ${`LISTEN %${channelOf(schema)}%`}`,
      (rows) => rows[0]!.n
    ))

describe("PostgreSQL waking", () => {
  it.live("a store LISTENs only once something in its process waits; that first waiter is woken by another store's commit", () => {
    const filename = freshFile("lazy-listen")
    const schema = pgSchemaFor(filename)
    return Effect.gen(function*() {
      const queue = yield* queueOf("lazy")
      // a producer only: its own commits are not delivered back to it
      yield* queue.enqueue({ n: 0 })
      yield* Effect.sleep("200 millis")
      expect(yield* listening(schema)).toBe(0)
      expect((yield* queue.take("w")).job.payload).toEqual({ n: 0 })
      const taker = yield* Effect.fork(queue.take("w"))
      yield* waitUntilEffect(Effect.map(listening(schema), (n) => n === 1))
      yield* Effect.gen(function*() {
        yield* (yield* queueOf("lazy")).enqueue({ n: 1 })
      }).pipe(Effect.provide(pgOwned.store({ filename })))
      expect((yield* Fiber.join(taker).pipe(Effect.timeout("5 seconds"))).job.payload).toEqual({ n: 1 })
    }).pipe(
      // no heartbeat during the test: pg_stat_activity shows the LISTEN connection's last statement
      Effect.provide(Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (url) =>
        PgStore.layer({ url: Redacted.make(url), schema, clock: "host", fallbackPoll: "1 hour", listenHeartbeat: "1 hour" }))))
    )
  })

  it.live("another store's commit wakes a waiting take at once; its rollback wakes nothing", () => {
    const filename = freshFile("notify")
    return Effect.gen(function*() {
      const queue = yield* queueOf("notified")
      const taker = yield* Effect.fork(queue.take("w"))
      yield* Effect.sleep("100 millis")
      // another store on the same schema: its own pool and its own LISTEN connection
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const other = yield* queueOf("notified")
        yield* Effect.exit(sql.withTransaction(Effect.zipRight(other.enqueue({ n: 0 }), Effect.fail("abort"))))
        yield* Effect.sleep("300 millis")
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* other.enqueue({ n: 1 })
      }).pipe(Effect.provide(pgOwned.store({ filename })))
      const handle = yield* Fiber.join(taker).pipe(Effect.timeout("5 seconds"))
      expect(handle.job.payload).toEqual({ n: 1 })
    }).pipe(Effect.provide(pgOwned.store({ filename, fallbackPoll: "1 hour" })))
  })

  it.live("a LISTEN connection the server drops is re-established; waiters re-read", () => {
    const filename = freshFile("dropped")
    return Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const queue = yield* queueOf("dropped")
      const taker = yield* Effect.fork(queue.take("w"))
      yield* Effect.sleep("100 millis")
      const killed = yield* sql<{ pid: number }>`SELECT pg_terminate_backend(pid), pid FROM pg_stat_activity
        WHERE application_name = 'alkstore-listen' AND datname = current_database()`
      expect(killed.length).toBeGreaterThanOrEqual(1)
      yield* Effect.sleep("500 millis") // the listener reconnects (with backoff), every waiter re-reads once
      yield* Effect.gen(function*() {
        yield* (yield* queueOf("dropped")).enqueue({ n: 1 })
      }).pipe(Effect.provide(pgOwned.store({ filename })))
      const handle = yield* Fiber.join(taker).pipe(Effect.timeout("5 seconds"))
      expect(handle.job.payload).toEqual({ n: 1 })
    }).pipe(Effect.provide(pgOwned.store({ filename, fallbackPoll: "1 hour" })))
  })

  it.live("a half-open LISTEN connection is detected by its heartbeat and re-established; waiters re-read", () => {
    const filename = freshFile("half-open")
    const schema = pgSchemaFor(filename)
    return Effect.gen(function*() {
      const url = new URL(yield* Effect.promise(pgDatabaseUrl))
      const proxy = yield* startProxy(url)
      const viaProxy = new URL(url)
      viaProxy.port = String(proxy.port)
      yield* Effect.gen(function*() {
        const queue = yield* queueOf("half")
        expect(proxy.connections()).toBe(1) // the LISTEN connection
        const taker = yield* Effect.fork(queue.take("w"))
        yield* Effect.sleep("100 millis")
        proxy.freeze() // the connection stays open but delivers nothing, as after a network partition
        yield* Effect.gen(function*() {
          yield* (yield* queueOf("half")).enqueue({ n: 1 }) // its NOTIFY goes into the void
        }).pipe(Effect.provide(pgOwned.store({ filename })))
        const handle = yield* Fiber.join(taker).pipe(Effect.timeout("10 seconds"))
        expect(handle.job.payload).toEqual({ n: 1 })
        expect(proxy.connections()).toBeGreaterThanOrEqual(2) // it reconnected
        // and the new connection delivers again
        const next = yield* Effect.fork(queue.take("w"))
        yield* Effect.sleep("100 millis")
        yield* Effect.gen(function*() {
          yield* (yield* queueOf("half")).enqueue({ n: 2 })
        }).pipe(Effect.provide(pgOwned.store({ filename })))
        expect((yield* Fiber.join(next).pipe(Effect.timeout("5 seconds"))).job.payload).toEqual({ n: 2 })
      }).pipe(Effect.provide(PgStore.layer({
        url: Redacted.make(url.toString()),
        listenUrl: viaProxy.toString(),
        schema,
        clock: "host",
        fallbackPoll: "1 hour",
        listenHeartbeat: "200 millis",
        listenHeartbeatTimeout: "300 millis"
      })))
    }).pipe(Effect.scoped)
  })

  it.live("a killed LISTEN connection that cannot reconnect retries on a growing backoff; delivery resumes after", () => {
    const filename = freshFile("backoff")
    return Effect.gen(function*() {
      const { layer, proxy } = yield* throughProxy(filename, { listenHeartbeat: "10 seconds" })
      yield* Effect.gen(function*() {
        expect(yield* notifiedTake(filename, "backoff")).toEqual({ n: 1 })
        // a healthy connection is lost (one lost sooner would continue the curve instead of starting it)
        yield* Effect.sleep(`${healthyAfterMillis + 200} millis`)
        proxy.mode("refuse") // the server is unreachable for the listener: every attempt fails at once
        const since = proxy.accepts.length
        yield* killListeners
        yield* Effect.sleep("2500 millis")
        const attempts = proxy.accepts.slice(since)
        const gaps = attempts.slice(1).map((at, i) => at - attempts[i]!)
        // at once, then 100 ms doubling, jittered: about 5 tries in 2.5 s, waits of about 100, 200, 400, 800 ms
        // (a retry loop without a backoff would have made hundreds)
        expect(attempts.length).toBeGreaterThanOrEqual(4)
        expect(attempts.length).toBeLessThanOrEqual(7)
        expect(gaps.at(-1)!).toBeGreaterThan(3 * gaps[0]!)
        proxy.mode("forward")
        const connected = proxy.connections()
        yield* waitUntil("the listener to reconnect", () => proxy.connections() > connected)
        // and NOTIFY reaches this process again
        expect(yield* notifiedTake(filename, "backoff")).toEqual({ n: 1 })
      }).pipe(Effect.provide(layer))
    }).pipe(Effect.scoped)
  })

  it.live("a healthy LISTEN connection lost after an outage is re-made at once, not after the outage's grown backoff", () => {
    const filename = freshFile("backoff-reset")
    return Effect.gen(function*() {
      const { layer, proxy } = yield* throughProxy(filename, { listenHeartbeat: "10 seconds" })
      yield* Effect.gen(function*() {
        // an outage: the attempts' waits grow to about 1.6 s
        proxy.mode("refuse")
        yield* killListeners
        yield* Effect.sleep("2500 millis")
        proxy.mode("forward")
        const connected = proxy.connections()
        yield* waitUntil("the listener to reconnect", () => proxy.connections() > connected)
        // the new connection is healthy for a while, then lost
        yield* Effect.sleep(`${healthyAfterMillis + 200} millis`)
        const since = proxy.accepts.length
        const lostAt = performance.now()
        yield* killListeners
        yield* waitUntil("the next attempt", () => proxy.accepts.length > since)
        // at once: the backoff started again (the outage's curve would have waited about 3.2 s)
        expect(proxy.accepts[since]! - lostAt).toBeLessThan(1_000)
        expect(yield* notifiedTake(filename, "backoff-reset")).toEqual({ n: 1 })
      }).pipe(Effect.provide(layer))
    }).pipe(Effect.scoped)
  })

  it.live("a LISTEN reconnect the server never answers is abandoned at its deadline and made again", () => {
    const filename = freshFile("hung-connect")
    return Effect.gen(function*() {
      const { layer, proxy } = yield* throughProxy(filename, {
        listenHeartbeat: "10 seconds",
        listenHeartbeatTimeout: "300 millis"
      })
      yield* Effect.gen(function*() {
        proxy.mode("blackhole") // accepted, never answered: an attempt that would hang for as long as TCP lasts
        const since = proxy.accepts.length
        yield* killListeners
        yield* Effect.sleep("1500 millis")
        expect(proxy.accepts.length - since).toBeGreaterThanOrEqual(2)
        proxy.mode("forward")
        const connected = proxy.connections()
        yield* waitUntil("the listener to reconnect", () => proxy.connections() > connected)
        expect(yield* notifiedTake(filename, "hung")).toEqual({ n: 1 })
      }).pipe(Effect.provide(layer))
    }).pipe(Effect.scoped)
  })
})
