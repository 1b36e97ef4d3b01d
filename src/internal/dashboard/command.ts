import { Command, Options } from "@effect/cli"
import { Console, Duration, Effect } from "effect"
import { db, onStore, parseAge } from "../cli/common.js"
import { UsageError } from "../cli/exit.js"

const loopback = new Set(["127.0.0.1", "::1", "localhost"])

export const dashboard = Command.make("dashboard", {
  db,
  port: Options.integer("port").pipe(Options.withDefault(4680), Options.withDescription("the TCP port (0: any free port)")),
  host: Options.text("host").pipe(
    Options.withDefault("127.0.0.1"),
    Options.withDescription("the address to listen on (loopback by default; the dashboard has no authentication)")
  ),
  allowHost: Options.text("allow-host").pipe(
    Options.withDescription(
      "another Host header value to answer to, as the browser sends it (e.g. 192.168.1.5:4680, localhost:9000 for a tunnel, dash.example.com behind a proxy); repeatable"
    ),
    Options.repeated
  ),
  allowWrites: Options.boolean("allow-writes").pipe(
    Options.withDescription("allow requeue, cancel and purge from the pages (read-only without it)")
  ),
  sampleEvery: Options.text("sample-every").pipe(
    Options.withDefault("5s"),
    Options.withDescription("how often the chart samples the store (e.g. 1s, 5s)")
  )
}, ({ allowHost, allowWrites, db, host, port, sampleEvery }) =>
  Effect.gen(function*() {
    if (!Number.isSafeInteger(port) || port < 0 || port > 65535) {
      return yield* new UsageError({ reason: `invalid --port ${port}: must be 0 to 65535` })
    }
    const every = yield* parseAge("--sample-every", sampleEvery)
    if (Duration.lessThan(every, Duration.millis(200))) {
      return yield* new UsageError({ reason: "--sample-every must be at least 200ms" })
    }
    for (const value of allowHost) {
      if (!/^(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?$/i.test(value)) {
        return yield* new UsageError({ reason: `invalid --allow-host ${JSON.stringify(value)}: a host name or address, optionally with :port` })
      }
    }
    if (!loopback.has(host)) {
      yield* Console.error(`alkstore: warning: the dashboard listens on ${host}, beyond this machine; it has no authentication`)
    }
    const { serveDashboard } = yield* Effect.promise(() => import("./serve.js"))
    yield* onStore(db, serveDashboard({ port, host, writes: allowWrites, sampleEvery: every, allowHosts: allowHost }))
  })).pipe(Command.withDescription("serves the web dashboard: queues, jobs, dead jobs, schedules, locks"))
