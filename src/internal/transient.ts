import { Duration, Schedule } from "effect"

/**
 * How the long-running consumers (a queue's `process`, the scheduler's
 * standby) ride out a storage failure that heals by itself — SQLite busy
 * past its patience, a PostgreSQL connection killed or a server restarting:
 * they log it and try again on this schedule, quickly at first (from
 * `firstMillis`, doubling, jittered so that a fleet does not reconnect in
 * step), never less often than every `capMillis`; after a healthy stretch
 * of `resetAfterMillis` a new failure starts again from the quick end.
 */
export const transientRetry = (options: {
  readonly firstMillis: number
  readonly capMillis: number
  readonly resetAfterMillis: number
}) =>
  Schedule.exponential(Duration.millis(options.firstMillis), 2).pipe(
    Schedule.jittered,
    // whole milliseconds: a fractional sleep would leave a TestClock between two instants
    Schedule.modifyDelay((delay) => Duration.millis(Math.round(Duration.toMillis(delay)))),
    Schedule.union(Schedule.spaced(Duration.millis(options.capMillis))),
    Schedule.resetAfter(Duration.millis(options.resetAfterMillis))
  )
