import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Duration, Effect, type Scope } from "effect"
import type { PgExecutor } from "./executor.js"

/**
 * One clock across hosts. Every mechanism reads Effect's `Clock` (so tests
 * drive it with `TestClock`); in production hosts disagree by seconds, and
 * leases, backoff and boundaries written by one host are judged by another.
 * This clock is the host's plus the offset to the database server's clock,
 * measured NTP-style: several `clock_timestamp()` round trips, the one with
 * the smallest round trip wins, offset = database time − the round trip's
 * midpoint (error at most half that round trip). It is re-measured
 * periodically; a correction that would move time backwards is absorbed
 * (the clock holds still until it catches up), so it never goes backwards.
 *
 * The host's side is its monotonic clock (`unsafeCurrentTimeNanos`: in
 * Effect's default Clock the process's start plus a monotonic count; under
 * `TestClock` the same as its millis), not its wall clock: a wall clock
 * stepped by NTP or a resumed VM moved this clock with it until the next
 * re-measure (ten minutes ahead at once, judging other hosts' leases lapsed),
 * then froze it for as long as the step. The monotonic clock's own drift is
 * what the re-measures absorb.
 */
const hostMillis = (host: Clock.Clock) => Number(host.unsafeCurrentTimeNanos()) / 1_000_000

export interface Offset {
  readonly offsetMillis: number
  readonly roundTripMillis: number
}

export const measureOffset = (db: PgExecutor, host: Clock.Clock, samples = 5): Effect.Effect<Offset, SqlError> =>
  Effect.gen(function*() {
    let best: Offset | undefined
    for (let i = 0; i < samples; i++) {
      const sent = hostMillis(host)
      const rows = yield* db.all<{ now: number }>(
        "SELECT (extract(epoch from clock_timestamp()) * 1000)::float8 AS now",
        []
      )
      const received = hostMillis(host)
      const sample = { offsetMillis: Number(rows[0]!.now) - (sent + received) / 2, roundTripMillis: received - sent }
      if (best === undefined || sample.roundTripMillis < best.roundTripMillis) best = sample
    }
    return best!
  })

export interface DatabaseClock {
  readonly clock: Clock.Clock
  readonly offset: () => Offset
}

const warnAboveMillis = 60_000

/**
 * The database-aligned clock over `host`, re-measured every `resyncMillis`
 * (on `host`'s time) in a fiber of the scope; `measure` is `measureOffset`
 * against the store's database (a test gives a database clock of its own).
 */
export const makeDatabaseClock = (
  measure: Effect.Effect<Offset, SqlError>,
  host: Clock.Clock,
  resyncMillis: number
): Effect.Effect<DatabaseClock, SqlError, Scope.Scope> =>
  Effect.gen(function*() {
    let current = yield* measure
    let last = -Infinity
    const warn = (o: Offset) =>
      Math.abs(o.offsetMillis) > warnAboveMillis
        ? Effect.logWarning(
          `alkstore: this host's clock is ${Math.abs(Math.round(o.offsetMillis))} ms ${o.offsetMillis > 0 ? "behind" : "ahead of"} the database server's; ` +
            "alkstore corrects for it, but fix the host's time synchronisation"
        )
        : Effect.void
    yield* warn(current)
    const millis = () => {
      const t = Math.round(hostMillis(host) + current.offsetMillis)
      if (t > last) last = t
      return last
    }
    const clock: Clock.Clock = {
      [Clock.ClockTypeId]: Clock.ClockTypeId,
      unsafeCurrentTimeMillis: millis,
      currentTimeMillis: Effect.sync(millis),
      unsafeCurrentTimeNanos: () => BigInt(millis()) * 1_000_000n,
      currentTimeNanos: Effect.sync(() => BigInt(millis()) * 1_000_000n),
      sleep: (duration) => host.sleep(duration)
    }
    const resync = measure.pipe(
      Effect.tap((o) => {
        current = o
        return warn(o)
      }),
      Effect.catchAll((error) => Effect.logDebug("alkstore: re-measuring the database clock failed", error)),
      Effect.zipRight(host.sleep(Duration.millis(resyncMillis))),
      Effect.forever
    )
    yield* Effect.forkScoped(Effect.withClock(Effect.delay(resync, Duration.millis(resyncMillis)), host))
    return { clock, offset: () => current }
  })
