import { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect, FiberRef, Schedule } from "effect"
import { patienceCapMillis } from "../patience.js"
import { realClock } from "../realClock.js"

/** SQLite's "another connection holds the lock" family: worth waiting out. */
export const isBusy = (error: unknown): boolean => {
  const cause = error instanceof SqlError ? error.cause : error
  const code = (cause as { code?: unknown } | null | undefined)?.code
  return typeof code === "string" && (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"))
}

const busySchedule = (patience: Duration.DurationInput) =>
  Schedule.exponential("1 millis", 1.5).pipe(
    Schedule.union(Schedule.spaced("50 millis")),
    Schedule.jittered,
    Schedule.upTo(patience)
  )

/**
 * Retries `SQLITE_BUSY` on an Effect schedule instead of a long `busy_timeout`,
 * which would block the event loop (and every lease renewal) while it waits.
 * The waits are real time even under `TestClock`: they pace a contended file,
 * they are not contract time. They are Effect sleeps, so they end at once on
 * interruption wherever the caller is interruptible (only the short native
 * `busy_timeout` of one attempt is not); `patienceCapMillis` shortens them.
 */
export const retryBusy = (patience: Duration.DurationInput) => {
  const patienceMillis = Duration.toMillis(patience)
  const schedule = busySchedule(patience)
  // The first attempt runs bare: building the retry costs more than most statements.
  return <A, R>(effect: Effect.Effect<A, SqlError, R>): Effect.Effect<A, SqlError, R> =>
    Effect.catchIf(effect, isBusy, () =>
      Effect.flatMap(FiberRef.get(patienceCapMillis), (cap) =>
        effect.pipe(
          Effect.retry({ schedule: cap < patienceMillis ? busySchedule(Duration.millis(cap)) : schedule, while: isBusy }),
          Effect.withClock(realClock)
        )))
}
