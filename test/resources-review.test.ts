/**
 * A review of resource hygiene: what a store leaves behind after its scope closes, and over a long life, on both
 * engines (docs/decisions.md "A store closing under its own work", docs/waking.md, docs/recipes.md "Graceful
 * shutdown on SIGTERM", docs/engines.md). Every test here failed on the code before its fix, because of a defect.
 */
import { SqlClient } from "@effect/sql"
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import Sqlite from "better-sqlite3"
import { Deferred, Effect, Exit, Fiber, Layer, Option, Redacted, Scope } from "effect"
import * as v8 from "node:v8"
import { runInNewContext } from "node:vm"
import { PgStore, Queues, SqliteStore } from "../src/index.js"
import { freshFile, pgDatabaseUrl, pgSchemaFor } from "./contract/harness.js"
import { pgTestTypes } from "./fixtures/types.js"
import * as net from "node:net"
import Pg from "pg"

v8.setFlagsFromString("--expose-gc")
const gc = runInNewContext("gc") as () => void

/** Real milliseconds (the engines' I/O is real). */
const realSleep = (millis: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, millis)))

/** Closes `scope` in a fiber of its own (a close is uninterruptible) and tells whether it ended within `millis`. */
const closesWithin = (scope: Scope.CloseableScope, millis: number) =>
  Effect.gen(function*() {
    const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
    const started = performance.now()
    while (Option.isNone(yield* Fiber.poll(closing)) && performance.now() - started < millis) yield* realSleep(20)
    return { ended: Option.isSome(yield* Fiber.poll(closing)), closing }
  })

/**
 * A TCP proxy to the test server whose `freeze` makes every connection open now stop answering (and stay open),
 * as a partition or a half-open path does; `close` ends them all.
 */
const freezingProxy = (target: URL) =>
  Effect.acquireRelease(
    Effect.async<{ readonly port: number; readonly freeze: () => void; readonly close: () => void }>((resume) => {
      const pairs: Array<readonly [net.Socket, net.Socket]> = []
      const server = net.createServer((client) => {
        const upstream = net.connect(Number(target.port), target.hostname)
        client.on("error", () => upstream.destroy())
        upstream.on("error", () => client.destroy())
        client.pipe(upstream)
        upstream.pipe(client)
        pairs.push([client, upstream])
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          port: (server.address() as net.AddressInfo).port,
          freeze: () => {
            for (const [client, upstream] of pairs) {
              client.unpipe(upstream)
              upstream.unpipe(client)
              client.pause()
              upstream.pause()
            }
          },
          close: () => {
            for (const [client, upstream] of pairs) {
              client.destroy()
              upstream.destroy()
            }
            server.close()
          }
        })))
    }),
    (proxy) => Effect.sync(proxy.close)
  )

/** This database's sessions with `application_name`. */
const sessionsNamed = (applicationName: string) =>
  Effect.flatMap(Effect.promise(pgDatabaseUrl), (database) =>
    Effect.promise(async () => {
      const client = new Pg.Client({ connectionString: database })
      await client.connect()
      try {
        const result = await client.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1",
          [applicationName]
        )
        return result.rows[0]!.n
      } finally {
        await client.end()
      }
    }))

/** A PostgreSQL schema's connection settings for a store (search_path at the schema). */
const pgConnection = (filename: string) =>
  Effect.map(Effect.promise(pgDatabaseUrl), (database) => {
    const schema = pgSchemaFor(filename)
    const url = new URL(database)
    url.searchParams.set("options", `-c search_path=${schema},public`)
    return { url, schema }
  })

describe("PostgreSQL's database clock outlives the store that set it", () => {
  // docs/engines.md / PgStore TSDoc (`clock`): the aligned clock "becomes the `Clock` of the program the layer is
  // provided to" — of that program, not of its caller after the store's scope closed. The caller keeps the closed
  // store's clock (src/internal/pg/store.ts `withClock`: `Layer.merge(provided, Layer.setClock(clock))`, whose
  // FiberRef change Effect does not undo when the layer's scope closes). That clock holds the closed store's
  // executor and pool (its resync `measure`), so every store opened and closed in one fiber is kept in memory for
  // good (~45 KB each, its whole `pg` pool included), and each new store's clock wraps the previous one's.
  it.live("after Effect.provide(PgStore.layer(...)) returns, the caller's Clock is its own again and the closed store is collectable", () =>
    Effect.gen(function*() {
      const { schema, url } = yield* pgConnection(freshFile("clock-leak"))
      const before = yield* Effect.clock
      let client: WeakRef<object> | undefined
      yield* Effect.flatMap(PgClient.PgClient, (pg) =>
        Effect.sync(() => {
          client = new WeakRef(pg)
        })).pipe(Effect.provide(PgStore.layer({ url: Redacted.make(url.toString()), schema, types: pgTestTypes })))
      const after = yield* Effect.clock
      yield* realSleep(50)
      gc()
      yield* realSleep(10)
      gc()
      expect({
        callersClockRestored: after === before,
        closedStoresClientCollected: client!.deref() === undefined
      }).toEqual({ callersClockRestored: true, closedStoresClientCollected: true })
    }), 20_000)
})

describe("PostgreSQL: the LISTEN connection of a store closed soon after it opened", () => {
  // docs/decisions.md "A store closing under its own work" / the lifecycle tests: a closed store leaves no
  // server session, and a program that ends lets Node exit. src/internal/pg/listener.ts makes the first LISTEN
  // connection (`first`) before it forks the fiber that watches it and destroys it in its `ensuring`; a scope
  // that closes before that fiber ran (a short script, a request that opens a store and ends, here with
  // `clock: "host"`, which measures no offset after the listener starts) interrupts the fiber before its body
  // starts, so nothing ever ends `first`: its socket keeps Node's event loop alive for good (the process never
  // exits by itself) and its server session stays (`alkstore-listen`, idle).
  for (const fromClient of [false, true]) {
    it.live(`a store closed at once leaves no LISTEN session and no socket — ${fromClient ? "PgStore.layerFromClient" : "PgStore.layer"}`, () =>
      Effect.gen(function*() {
        const { schema, url } = yield* pgConnection(freshFile("quick-close"))
        const connection = { url: Redacted.make(url.toString()), types: pgTestTypes }
        // Migrated first, so the store under test opens quickly.
        yield* Effect.provide(Effect.void, PgStore.layer({ ...connection, schema, clock: "host" }))
        const sockets = () => process.getActiveResourcesInfo().filter((kind) => kind === "TCPSocketWrap").length
        const look = Effect.map(sessionsNamed("alkstore-listen"), (listeners) => ({ listeners, sockets: sockets() }))
        // sockets and server sessions end asynchronously after a close: read once steady (three equal reads 50 ms
        // apart, at most 5 s), and poll for the same reading after the store under test (a deadline), not slept for
        let before = yield* look
        for (let same = 0, deadline = Date.now() + 5_000; same < 2 && Date.now() < deadline;) {
          yield* realSleep(50)
          const next = yield* look
          same = next.listeners === before.listeners && next.sockets === before.sockets ? same + 1 : 0
          before = next
        }
        const store = fromClient
          ? PgStore.layerFromClient({ schema, clock: "host" }).pipe(Layer.provide(PgClient.layer(connection)))
          : PgStore.layer({ ...connection, schema, clock: "host" })
        yield* Effect.provide(Effect.void, store)
        let after = yield* look
        for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
          if (after.listeners === before.listeners && after.sockets === before.sockets) break
          yield* realSleep(20)
          after = yield* look
        }
        expect(after).toEqual(before)
      }), 20_000)
  }
})

describe("closing a store promptly whatever the database does", () => {
  // docs/recipes.md "Graceful shutdown on SIGTERM": the stop releases the claims in flight and "closes the store.
  // The process then exits with code 0", with a grace period "a few seconds more than the longest such handler";
  // src/internal/patience.ts: "a release is best effort, a stop is not". On PostgreSQL nothing bounds the release:
  // with the server unreachable on an open connection (a partition, a half-open TCP path), the worker's release of
  // its claim waits on the wire for as long as TCP does (minutes), and the store's close with it. (A `withLock`
  // body's release and a leader's lease release hang the same way; measured > 25 s each.)
  it.live("PostgreSQL: a store whose server stopped answering closes within seconds while a handler runs", () =>
    Effect.gen(function*() {
      const { schema, url } = yield* pgConnection(freshFile("frozen"))
      const proxy = yield* freezingProxy(url)
      const viaProxy = new URL(url)
      viaProxy.port = String(proxy.port)
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(
        PgStore.layer({ url: Redacted.make(viaProxy.toString()), schema, clock: "host", types: pgTestTypes }),
        scope
      )
      const handling = yield* Deferred.make<void>()
      yield* Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("frozen")
        yield* queue.enqueue({ n: 1 })
        yield* Effect.fork(queue.process("w", () => Effect.zipRight(Deferred.succeed(handling, undefined), Effect.never)))
      }).pipe(Effect.provide(context))
      yield* Deferred.await(handling)
      proxy.freeze() // every open connection stops answering, and stays open
      const { closing, ended } = yield* closesWithin(scope, 5_000)
      proxy.close() // lets a hung close end
      yield* Fiber.await(closing)
      expect(ended ? "closed" : "still closing 5 s later", "the store's close").toBe("closed")
    }).pipe(Effect.scoped), 20_000)

  // Same sentences; and docs/recipes.md: "A worker whose claim is waiting out another connection's write lock on
  // the SQLite file stops at once too (that wait has written nothing; it used to sit out the store's
  // busyPatience, 30 s)". A worker in its handler meets the same wall at its release: the close waits out the
  // whole busyPatience (30 s by default) while another process holds the file's write lock (a migration, a long
  // transaction, a backup), where a `withLock` body's and the leader's releases give up after 1 s
  // (`releasePatienceMillis`). Past most platforms' grace periods (Kubernetes: 30 s), the host is killed.
  it.live("SQLite: a store closes within seconds while a handler runs and another connection holds the file's write lock", () =>
    Effect.gen(function*() {
      const filename = freshFile("locked-close")
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(SqliteStore.layer({ filename }), scope)
      const handling = yield* Deferred.make<void>()
      yield* Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("locked")
        yield* queue.enqueue({ n: 1 })
        yield* Effect.fork(queue.process("w", () => Effect.zipRight(Deferred.succeed(handling, undefined), Effect.never)))
      }).pipe(Effect.provide(context))
      yield* Deferred.await(handling)
      const other = new Sqlite(filename)
      other.exec("BEGIN IMMEDIATE")
      const { closing, ended } = yield* closesWithin(scope, 5_000)
      other.exec("ROLLBACK")
      other.close()
      yield* Fiber.await(closing)
      expect(ended ? "closed" : "still closing 5 s later", "the store's close").toBe("closed")
    }), 20_000)
})

describe("the SqlClient SqliteStore.layer provides, over a long life", () => {
  // docs/concepts.md "The store": the layer gives the program "the `SqlClient` they run on" and "your tables live in
  // the same database and share that client". That client (src/internal/sqlite/connection.ts `prepare`) keeps a
  // better-sqlite3 statement for every distinct SQL text it ever ran, in a Map never trimmed nor finalized: an
  // application's statements with literal values, dynamic WHERE clauses or `sql.in` lists of varying length grow
  // the host's memory without bound (≈ 180 bytes of heap plus ≈ 2.7 KB of native memory per distinct text).
  // `@effect/sql-sqlite-node`'s own client bounds its cache (200 statements, LRU); so does the store's own
  // `byLiteral` ("so a caller that names every value does not grow the statement cache").
  it.live("40 000 distinct application statements leave the heap where it was", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE app_rows (id INTEGER PRIMARY KEY, v TEXT)`
      const heap = () => {
        gc()
        gc()
        return process.memoryUsage().heapUsed
      }
      for (let i = 0; i < 2_000; i++) yield* sql.unsafe(`SELECT v FROM app_rows WHERE id = ${i}`)
      const before = heap()
      for (let i = 0; i < 40_000; i++) yield* sql.unsafe(`SELECT v FROM app_rows WHERE id = ${i + 100_000}`)
      const grownMb = (heap() - before) / 1e6
      expect(grownMb, "heap growth (MB) after 40 000 distinct statements").toBeLessThan(2)
    }).pipe(Effect.provide(SqliteStore.layer({ filename: freshFile("statements") }))), 30_000)
})
