import * as HttpServer from "@effect/platform/HttpServer"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Console, Data, type Duration, Effect, Layer } from "effect"
import { createServer } from "node:http"
import { startHistory } from "./history.js"
import { allowedHosts, makeApp } from "./server.js"

/** Why the listening socket could not be had, by Node's error code. */
const listenReasons: Record<string, string> = {
  EADDRINUSE: "the port is in use (EADDRINUSE): another dashboard or program listens there; choose another --port",
  EADDRNOTAVAIL: "this machine has no such address (EADDRNOTAVAIL); check --host",
  EACCES: "permission denied (EACCES): ports below 1024 need privileges",
  ENOTFOUND: "no such host name (ENOTFOUND); check --host"
}

/**
 * The dashboard could not listen on its address (exit code 5): not the
 * database's failure, whose exit codes are 3 and 4.
 */
export class ListenFailed extends Data.TaggedError("ListenFailed")<{
  readonly address: string
  readonly reason: string
}> {
  override get message() {
    return `the dashboard cannot listen on ${this.address}: ${this.reason}`
  }
}

const listenFailed = (host: string, port: number, cause: unknown) => {
  const code = (cause as { code?: unknown } | null)?.code
  const text = cause instanceof Error && cause.message !== "" ? cause.message : String(cause)
  return new ListenFailed({
    address: `${host.includes(":") ? `[${host}]` : host}:${port}`,
    reason: (typeof code === "string" ? listenReasons[code] : undefined) ?? text
  })
}

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
    // Only listening fails with a ServeError (the platform's, with an empty message): its cause says why.
    return yield* Layer.launch(server).pipe(
      Effect.catchTag("ServeError", (error) => Effect.fail(listenFailed(options.host, options.port, error.cause)))
    )
  }))
