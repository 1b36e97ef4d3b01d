import * as HttpServer from "@effect/platform/HttpServer"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Console, type Duration, Effect, Layer } from "effect"
import { createServer } from "node:http"
import { startHistory } from "./history.js"
import { makeApp } from "./server.js"

/**
 * Serves the dashboard until interrupted, on the store in context. Loaded
 * only by the `dashboard` command: the HTTP stack is most of a CLI start-up.
 */
export const serveDashboard = (options: {
  readonly port: number
  readonly host: string
  readonly writes: boolean
  readonly sampleEvery: Duration.Duration
}) =>
  Effect.scoped(Effect.gen(function*() {
    const history = yield* startHistory(options.sampleEvery)
    const announce = Layer.effectDiscard(HttpServer.addressFormattedWith((address) =>
      Console.log(`alkstore dashboard on ${address} (${options.writes ? "writes allowed" : "read-only"}); Ctrl-C to stop`)
    ))
    const server = HttpServer.serve(makeApp({ history, writes: options.writes })).pipe(
      Layer.merge(announce),
      Layer.provide(NodeHttpServer.layer(createServer, { port: options.port, host: options.host }))
    )
    return yield* Layer.launch(server)
  }))
