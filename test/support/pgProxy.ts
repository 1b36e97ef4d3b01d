/**
 * A loopback TCP proxy in front of the test server, for the LISTEN
 * connection's faults (test/pg-listen.test.ts, test/pg-edges.test.ts).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Redacted } from "effect"
import * as net from "node:net"
import { PgStore } from "../../src/index.js"
import { pgDatabaseUrl, pgSchemaFor } from "../contract/harness.js"

/**
 * A TCP proxy to the server. `freeze` makes every connection open now stop
 * forwarding (and never close); `mode` decides what a new connection meets:
 * `forward`, `refuse` (closed at once: the connection attempt fails) or
 * `blackhole` (accepted, never answered: the attempt hangs). `accepts` are
 * the (real) times of every connection attempt.
 */
export const startProxy = (target: URL) =>
  Effect.acquireRelease(
    Effect.async<{
      port: number
      connections: () => number
      /** Client connections the proxy holds open now (forwarded or blackholed). */
      open: () => number
      accepts: Array<number>
      freeze: () => void
      mode: (mode: "forward" | "refuse" | "blackhole") => void
      close: () => void
    }>((resume) => {
      const pairs: Array<readonly [net.Socket, net.Socket]> = []
      const held: Array<net.Socket> = []
      const accepts: Array<number> = []
      let forwarded = 0
      let mode: "forward" | "refuse" | "blackhole" = "forward"
      const open = new Set<net.Socket>()
      const server = net.createServer((client) => {
        accepts.push(performance.now())
        client.on("error", () => {})
        if (mode === "refuse") return void client.destroy()
        open.add(client)
        client.on("close", () => open.delete(client))
        // accepted and read, never answered (reading lets it see its peer close)
        if (mode === "blackhole") return void held.push(client.resume())
        const upstream = net.connect(Number(target.port), target.hostname)
        client.pipe(upstream)
        upstream.pipe(client)
        client.on("error", () => upstream.destroy())
        upstream.on("error", () => client.destroy())
        client.on("close", () => upstream.destroy())
        upstream.on("close", () => client.destroy())
        pairs.push([client, upstream])
        forwarded++
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          port: (server.address() as net.AddressInfo).port,
          connections: () => forwarded,
          open: () => open.size,
          accepts,
          freeze: () => {
            for (const [client, upstream] of pairs.splice(0)) {
              client.unpipe(upstream)
              upstream.unpipe(client)
              client.pause()
              upstream.pause()
            }
          },
          mode: (next) => {
            mode = next
          },
          close: () => {
            for (const socket of held) socket.destroy()
            for (const [client, upstream] of pairs) {
              client.destroy()
              upstream.destroy()
            }
            server.close()
          }
        })))
    }),
    (proxy) => Effect.sync(() => proxy.close())
  )

/** Ends this database's LISTEN connections from the server side. */
export const killListeners = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
    WHERE application_name = 'alkstore-listen' AND datname = current_database()`)

/**
 * A store whose LISTEN connection goes through a proxy (the pool does not),
 * and a check that another store's enqueue reaches a take waiting now: by
 * NOTIFY, the fallback poll being an hour away.
 */
export const throughProxy = (filename: string, settings: PgStore.StoreSettings = {}) =>
  Effect.gen(function*() {
    const url = new URL(yield* Effect.promise(pgDatabaseUrl))
    const proxy = yield* startProxy(url)
    const viaProxy = new URL(url)
    viaProxy.port = String(proxy.port)
    const layer = PgStore.layer({
      url: Redacted.make(url.toString()),
      listenUrl: viaProxy.toString(),
      schema: pgSchemaFor(filename),
      clock: "host",
      fallbackPoll: "1 hour",
      ...settings
    })
    return { proxy, layer }
  })
