/**
 * Review of the PostgreSQL engine's own promises (docs/engines.md, src/PgStore.ts).
 *
 * The LISTEN connection is made from the client's settings by `listenConnection`
 * (src/internal/pg/store.ts), which copied url, host, port, database, user, password and
 * ssl — but not `stream`, the `PgClientConfig` field through which the pool reaches the
 * server (a socket factory: a cloud SQL connector, a tunnel). The pool then worked and the
 * store's start failed on its LISTEN connection, which tried `host` directly (fixed).
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Redacted } from "effect"
import * as net from "node:net"
import type { Duplex } from "node:stream"
import { PgStore } from "../src/index.js"
import { freshFile, pgDatabaseUrl, pgSchemaFor } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"

/**
 * The test server reached only through a `stream` factory (as a connector's is): the pg driver calls
 * `connect(port, host)` on the socket it is given, and this one connects to the real server whatever
 * host it is told. The config names a host that does not resolve, so only the stream reaches the server.
 */
const throughStream = Effect.map(Effect.promise(pgDatabaseUrl), (text) => {
  const url = new URL(text)
  let streams = 0
  const stream = (): Duplex => {
    streams++
    const socket = new net.Socket()
    const connect = socket.connect.bind(socket) as (port: number, host: string) => net.Socket
    Object.assign(socket, { connect: () => connect(Number(url.port || 5432), url.hostname) })
    return socket
  }
  const config = {
    host: "alkstore-unreachable.invalid",
    port: 1,
    database: url.pathname.slice(1),
    username: decodeURIComponent(url.username) || undefined,
    password: url.password === "" ? undefined : Redacted.make(decodeURIComponent(url.password)),
    stream
  }
  return { config, streams: () => streams }
})

/** Enqueue, then read the queue's depth: what any start-up is for. */
const enqueueAndCount = Effect.gen(function*() {
  const queue = yield* queueOf("through-stream")
  yield* queue.enqueue({ n: 1 })
  return (yield* queue.stats).pending
})

const failureText = <A, E>(exit: Exit.Exit<A, E>) => Exit.isFailure(exit) ? Cause.pretty(exit.cause).split("\n")[0] : "ok"

describe("PostgreSQL engine review", () => {
  // docs/engines.md "Which one": "`PgStore.layer` takes every `@effect/sql-pg` `PgClientConfig` field (url, host,
  // pool size, ssl, ...) plus the store settings"; "Each `PgStore.layer` opens a pool ... plus **one** LISTEN
  // connection" — the LISTEN connection goes where the pool goes (`listenUrl` is for when it should not).
  // Observed: the layer fails with SqlError "Failed to LISTEN on alkstore_…: Error: getaddrinfo ENOTFOUND
  // alkstore-unreachable.invalid" although its pool reached the server through `stream` (the first line of
  // the failure is printed by the assertion). Expected: the store starts, the enqueue counts 1.
  it.live("PgStore.layer with a `stream` (how connectors reach the server) starts: the LISTEN connection goes through it too", () =>
    Effect.gen(function*() {
      const { config, streams } = yield* throughStream
      const exit = yield* Effect.exit(enqueueAndCount.pipe(
        Effect.provide(PgStore.layer({ ...config, schema: pgSchemaFor(freshFile("stream")), clock: "host" }))
      ))
      expect(streams()).toBeGreaterThanOrEqual(1) // the pool connected through the stream
      expect(failureText(exit)).toBe("ok")
      expect(Exit.isSuccess(exit) && exit.value).toBe(1)
    }))

  // src/PgStore.ts: "`layerFromClient()` builds over a `PgClient` the application provides"; docs/engines.md
  // shows it over `PgClient.layer(...)`. The application's client reaches the server through its `stream`;
  // the store's LISTEN connection, built from that client's config without it, does not.
  // Observed: SqlError "Failed to LISTEN on alkstore_…: … ENOTFOUND alkstore-unreachable.invalid".
  it.live("PgStore.layerFromClient over a PgClient with a `stream` starts: the LISTEN connection goes through it too", () =>
    Effect.gen(function*() {
      const { config, streams } = yield* throughStream
      const exit = yield* Effect.exit(enqueueAndCount.pipe(
        Effect.provide(
          PgStore.layerFromClient({ schema: pgSchemaFor(freshFile("stream-client")), clock: "host" }).pipe(
            Layer.provideMerge(PgClient.layer(config))
          )
        )
      ))
      expect(streams()).toBeGreaterThanOrEqual(1)
      expect(failureText(exit)).toBe("ok")
      expect(Exit.isSuccess(exit) && exit.value).toBe(1)
    }))
})
