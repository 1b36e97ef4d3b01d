import type { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect, Ref, Schedule, type Scope } from "effect"
import type * as Admin from "../../Admin.js"
import type { Reading } from "../cli/plain.js"
import { read } from "../cli/watch.js"

/** How many readings the chart keeps (two hours at the default 5 s). */
export const historyLength = 1440

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
      Effect.flatMap((reading) => Ref.update(readings, (r) => [...r, reading].slice(-historyLength))),
      Effect.catchAll((error) => Effect.logWarning(`dashboard: reading the store failed: ${error.message}`))
    )
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(sample, every), Schedule.spaced(every)))
    return { readings: Ref.get(readings) }
  })

export const defaultSampleEvery = Duration.seconds(5)
