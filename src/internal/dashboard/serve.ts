import * as HttpServer from "@effect/platform/HttpServer"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Console, type Duration, Effect, Layer } from "effect"
import { createServer } from "node:http"
import { startHistory } from "./history.js"
import { allowedHosts, makeApp } from "./server.js"

/**
 * Serves the dashboard until interrupted, on the store in context. Loaded
 * only by the `dashboard` command: the HTTP stack is most of a CLI start-up.
 */
export const serveDashboard = (options: {
  readonly port: number
  readonly host: string
  readonly writes: boolean
  readonly sampleEvery: Duration.Duration
  /** `Host` values to answer to beyond the loopback names and `host` (`--allow-host`). */
  readonly allowHosts: ReadonlyArray<string>
}) =>
  Effect.scoped(Effect.gen(function*() {
    const history = yield* startHistory(options.sampleEvery)
    const announce = Layer.effectDiscard(HttpServer.addressFormattedWith((address) =>
      Console.log(`alkstore dashboard on ${address} (${options.writes ? "writes allowed" : "read-only"}); Ctrl-C to stop`)
    ))
    // The port is known once listening (`--port 0` takes any free one): the allowed Hosts carry it.
    const app = Layer.unwrapEffect(HttpServer.addressWith((address) => {
      const port = address._tag === "TcpAddress" ? address.port : options.port
      const hosts = allowedHosts({ port, bindHost: options.host, extra: options.allowHosts })
      return Effect.succeed(HttpServer.serve(makeApp({ history, writes: options.writes, hosts })))
    }))
    const server = app.pipe(
      Layer.merge(announce),
      Layer.provide(NodeHttpServer.layer(createServer, { port: options.port, host: options.host }))
    )
    return yield* Layer.launch(server)
  }))
