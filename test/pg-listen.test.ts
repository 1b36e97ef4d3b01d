/**
 * Waking over LISTEN/NOTIFY: another store's commit wakes a waiter at once,
 * a rolled-back one does not, and a LISTEN connection that silently stops
 * delivering (a half-open TCP connection, made here by a loopback proxy that
 * stops forwarding) is detected by its heartbeat and re-established, the
 * waiters re-reading on reconnect, long before the fallback poll.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Option, Redacted } from "effect"
import * as net from "node:net"
import { PgStore } from "../src/index.js"
import { freshFile, pgDatabaseUrl, pgOwned, pgSchemaFor } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"

/** A TCP proxy to the server; `freeze` makes every connection open now stop forwarding (and never close). */
const startProxy = (target: URL) =>
  Effect.acquireRelease(
    Effect.async<{ port: number; connections: () => number; freeze: () => void; server: net.Server }>((resume) => {
      const pairs: Array<readonly [net.Socket, net.Socket]> = []
      let accepted = 0
      const server = net.createServer((client) => {
        accepted++
        const upstream = net.connect(Number(target.port), target.hostname)
        client.pipe(upstream)
        upstream.pipe(client)
        client.on("error", () => upstream.destroy())
        upstream.on("error", () => client.destroy())
        pairs.push([client, upstream])
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          port: (server.address() as net.AddressInfo).port,
          connections: () => accepted,
          freeze: () => {
            for (const [client, upstream] of pairs.splice(0)) {
              client.unpipe(upstream)
              upstream.unpipe(client)
              client.pause()
              upstream.pause()
            }
          },
          server
        })))
    }),
    (proxy) => Effect.sync(() => proxy.server.close())
  )

describe("PostgreSQL waking", () => {
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
})
