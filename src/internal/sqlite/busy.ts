import { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect, Either, FiberRef, Schedule } from "effect"
import { busyWaitsInterruptible, patienceCapMillis } from "../patience.js"
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
 * `busy_timeout` of one attempt is not), and inside a claim's uninterruptible
 * region too (`busyWaitsInterruptible`); `patienceCapMillis` shortens them.
 */
export const retryBusy = (patience: Duration.DurationInput) => {
  const patienceMillis = Duration.toMillis(patience)
  const schedule = busySchedule(patience)
  // The first attempt runs bare: building the retry costs more than most statements.
  return <A, R>(effect: Effect.Effect<A, SqlError, R>): Effect.Effect<A, SqlError, R> =>
    Effect.catchIf(effect, isBusy, (busy) =>
      Effect.gen(function*() {
        const cap = yield* FiberRef.get(patienceCapMillis)
        const anywhere = yield* FiberRef.get(busyWaitsInterruptible)
        const driver = yield* Schedule.driver(cap < patienceMillis ? busySchedule(Duration.millis(cap)) : schedule)
        // Each pause is the schedule's; only the pause is made interruptible (`busyWaitsInterruptible`),
        // so an interruption lands between attempts, never after one that got through.
        const again = (error: SqlError): Effect.Effect<A, SqlError, R> =>
          Effect.flatMap(
            Effect.either(anywhere ? Effect.interruptible(driver.next(error)) : driver.next(error)),
            (turn) => Either.isLeft(turn) ? Effect.fail(error) : Effect.catchIf(effect, isBusy, again)
          )
        return yield* again(busy)
      }).pipe(Effect.withClock(realClock)))
}
