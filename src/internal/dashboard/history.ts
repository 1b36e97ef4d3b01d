import type { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect, Ref, Schedule, type Scope } from "effect"
import type * as Admin from "../../Admin.js"
import type { Reading } from "../cli/plain.js"
import { read } from "../cli/watch.js"
import { chartedQueues } from "./chart.js"

/** How many readings the chart keeps (two hours at the default 5 s). */
export const historyLength = 1440

/**
 * Appends a reading. The last two stay whole (the overview's rates and every
 * queue's Δ/s come from them); older ones keep only the queues the chart
 * draws, not every queue's summary 1440 times over. A queue that enters the
 * chart's first places later (a new name sorting before) has no older points.
 */
export const appendReading = (readings: ReadonlyArray<Reading>, reading: Reading): ReadonlyArray<Reading> => {
  const next = [...readings, reading].slice(-historyLength)
  const older = next.length - 3
  if (older >= 0 && next[older]!.queues.length > chartedQueues) {
    next[older] = { ...next[older]!, queues: next[older]!.queues.slice(0, chartedQueues) }
  }
  return next
}

export interface History {
  readonly readings: Effect.Effect<ReadonlyArray<Reading>>
}

/**
 * Samples the store every `every` in a fiber of the scope: the chart's
 * history and the rates between readings. A failed reading is logged and
 * skipped; the sampler keeps going.
 */
export const startHistory = (
  every: Duration.Duration
): Effect.Effect<History, SqlError, Admin.Admin | Scope.Scope> =>
  Effect.gen(function*() {
    const readings = yield* Ref.make<ReadonlyArray<Reading>>([yield* read])
    const sample = read.pipe(
      Effect.flatMap((reading) => Ref.update(readings, (r) => appendReading(r, reading))),
      Effect.catchAll((error) => Effect.logWarning(`dashboard: reading the store failed: ${error.message}`))
    )
    // The first reading was taken above: the next one `every` later, and so on (`spaced` waits before each repeat).
    yield* Effect.forkScoped(Effect.delay(Effect.repeat(sample, Schedule.spaced(every)), every))
    return { readings: Ref.get(readings) }
  })

export const defaultSampleEvery = Duration.seconds(5)
