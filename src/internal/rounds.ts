import type { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect } from "effect"
import { realClock } from "./realClock.js"

/**
 * Bulk work in bounded rounds (maintenance's sweep and purge, `purgeDead`):
 * `round` is one transaction of at most an engine's `maintenanceRows` rows of
 * each kind, and says whether it was full; rounds run until one is not.
 * Between two, the work rests as long as the last round took, on real time
 * (it paces a contended file, it is not contract time): on SQLite a round's
 * statements hold the event loop while they run and the file's write lock
 * against other processes, so the process's other work gets its turn, and
 * other processes' writers, whose busy retries are at most 50 ms apart
 * (src/internal/sqlite/busy.ts), find the lock free. One statement for the
 * whole backlog held both for as long as it took: 4.6 s for a million dead
 * jobs of 2 KB (docs/performance.md, "Maintenance of a backlog"). Returns how
 * many rounds ran.
 */
export const inRounds = (round: Effect.Effect<boolean, SqlError>): Effect.Effect<number, SqlError> =>
  Effect.gen(function*() {
    let rounds = 0
    let full = true
    while (full) {
      const started = realClock.unsafeCurrentTimeMillis()
      full = yield* round
      rounds++
      if (full) yield* rest(realClock.unsafeCurrentTimeMillis() - started)
    }
    return rounds
  })

const rest = (millis: number) => Effect.sleep(Duration.millis(millis)).pipe(Effect.withClock(realClock))
