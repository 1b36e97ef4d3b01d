import type { SqlError } from "@effect/sql/SqlError"
import { Command, Options } from "@effect/cli"
import { Clock, Console, Duration, Effect, Ref, Schedule } from "effect"
import * as Admin from "../../Admin.js"
import { describeTarget, parseTarget } from "./database.js"
import { db, json, onStore, parseAge } from "./common.js"
import { UsageError } from "./exit.js"
import { depthDeltas, plainQueue, type Reading, ratesBetween, shortDuration } from "./plain.js"
import { table } from "./table.js"

/** The readings a trend is drawn from. */
const historyLength = 30

const bars = "▁▂▃▄▅▆▇█"

/** A sparkline of `values`, scaled to their own maximum. */
export const sparkline = (values: ReadonlyArray<number>): string => {
  const max = Math.max(0, ...values)
  return values.map((v) => (max === 0 ? bars[0] : bars[Math.min(bars.length - 1, Math.floor((v / max) * (bars.length - 1)))])).join("")
}

const rate = (perSecond: number) => (Math.abs(perSecond) < 10 ? perSecond.toFixed(1) : Math.round(perSecond).toString())
const signed = (perSecond: number) => (perSecond > 0 ? `+${rate(perSecond)}` : rate(perSecond))

export const read: Effect.Effect<Reading, SqlError, Admin.Admin> = Effect.gen(function*() {
  const admin = yield* Admin.Admin
  return { at: yield* Clock.currentTimeMillis, queues: yield* admin.queues, totals: yield* admin.totals }
})

/** One frame of the terminal view. */
export const frame = (target: string, every: Duration.Duration, history: ReadonlyArray<Reading>): string => {
  const latest = history[history.length - 1]!
  const previous = history.length > 1 ? history[history.length - 2]! : undefined
  const rates = previous === undefined ? undefined : ratesBetween(previous, latest)
  const deltas = previous === undefined ? new Map<string, number>() : depthDeltas(previous, latest)
  const header = `alkstore watch  ${target}  ${new Date(latest.at).toISOString()}  every ${shortDuration(Duration.toMillis(every))} (Ctrl-C to stop)`
  const summary = rates === undefined
    ? `enqueued -/s   completed -/s   jobs in store ${latest.totals.live}`
    : `enqueued ${rate(rates.enqueuedPerSec)}/s   completed ${rate(rates.completedPerSec)}/s   jobs in store ${latest.totals.live}`
  // Each reading's depths by name: a lookup per queue and reading, not a scan of every queue's row.
  const depths = history.map((r) => new Map(r.queues.map((q) => [q.name, q.pending])))
  const body = latest.queues.length === 0
    ? "no queues yet"
    : table(
      ["QUEUE", "PENDING", "Δ/s", "SCHEDULED", "CLAIMED", "DEAD", "OLDEST", "PENDING TREND"],
      latest.queues.map((q) => [
        q.name,
        q.pending,
        previous === undefined ? "-" : signed(deltas.get(q.name) ?? 0),
        q.scheduled,
        q.claimed,
        q.dead,
        q.oldestPendingAge._tag === "Some" ? shortDuration(Duration.toMillis(q.oldestPendingAge.value)) : "-",
        sparkline(depths.map((d) => d.get(q.name) ?? 0))
      ])
    )
  return `${header}\n${summary}\n\n${body}`
}

const clearScreen = "\x1b[H\x1b[2J"

export const watch = Command.make("watch", {
  db,
  json,
  interval: Options.text("interval").pipe(Options.withDefault("2s"), Options.withDescription("time between refreshes (e.g. 1s, 5s)"))
}, ({ db, interval, json }) =>
  Effect.gen(function*() {
    const every = yield* parseAge("--interval", interval)
    if (Duration.lessThan(every, Duration.millis(100))) {
      return yield* new UsageError({ reason: "--interval must be at least 100ms" })
    }
    const target = describeTarget(parseTarget(db))
    yield* onStore(db, Effect.gen(function*() {
      const history = yield* Ref.make<ReadonlyArray<Reading>>([])
      const tty = process.stdout.isTTY === true
      const refresh = Effect.gen(function*() {
        const reading = yield* read
        const readings = yield* Ref.updateAndGet(history, (h) => [...h, reading].slice(-historyLength))
        if (json) {
          const previous = readings.length > 1 ? readings[readings.length - 2] : undefined
          yield* Console.log(JSON.stringify({
            at: new Date(reading.at).toISOString(),
            queues: reading.queues.map(plainQueue),
            totals: reading.totals,
            rates: previous === undefined ? null : ratesBetween(previous, reading) ?? null
          }))
        } else {
          yield* Console.log((tty ? clearScreen : "") + frame(target, every, readings) + (tty ? "" : "\n"))
        }
      })
      return yield* Effect.repeat(refresh, Schedule.spaced(every))
    }))
  })).pipe(Command.withDescription("a refreshing terminal view of every queue's depths, their trend and the store's rates"))
