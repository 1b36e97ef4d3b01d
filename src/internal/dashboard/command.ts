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
  allowWrites: Options.boolean("allow-writes").pipe(
    Options.withDescription("allow requeue, cancel and purge from the pages (read-only without it)")
  ),
  sampleEvery: Options.text("sample-every").pipe(
    Options.withDefault("5s"),
    Options.withDescription("how often the chart samples the store (e.g. 1s, 5s)")
  )
}, ({ allowWrites, db, host, port, sampleEvery }) =>
  Effect.gen(function*() {
    if (!Number.isSafeInteger(port) || port < 0 || port > 65535) {
      return yield* new UsageError({ reason: `invalid --port ${port}: must be 0 to 65535` })
    }
    const every = yield* parseAge("--sample-every", sampleEvery)
    if (Duration.lessThan(every, Duration.millis(200))) {
      return yield* new UsageError({ reason: "--sample-every must be at least 200ms" })
    }
    if (!loopback.has(host)) {
      yield* Console.error(`alkstore: warning: the dashboard listens on ${host}, beyond this machine; it has no authentication`)
    }
    const { serveDashboard } = yield* Effect.promise(() => import("./serve.js"))
    yield* onStore(db, serveDashboard({ port, host, writes: allowWrites, sampleEvery: every }))
  })).pipe(Command.withDescription("serves the web dashboard: queues, jobs, dead jobs, schedules, locks"))
