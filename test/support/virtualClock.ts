import { Clock, Duration, Effect } from "effect"

/**
 * A virtual-time copy of Effect's default (production) `Clock`: the same
 * rule for sleeps as `globalClockScheduler` (effect/src/internal/clock.ts:
 * a sleep longer than 2^31 - 1 ms, the longest JS timer, is treated as
 * infinite and never fires), with time moved by the test instead of the
 * wall. `TestClock` has no such cap, so it cannot show what production does.
 */
const MAX_TIMER_MILLIS = 2 ** 31 - 1
export const makeVirtualClock = (start: number) => {
  let now = start
  const sleeps: Array<{ at: number; wake: () => void }> = []
  const clock: Clock.Clock = {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: () => now,
    currentTimeMillis: Effect.sync(() => now),
    unsafeCurrentTimeNanos: () => BigInt(now) * 1_000_000n,
    currentTimeNanos: Effect.sync(() => BigInt(now) * 1_000_000n),
    sleep: (duration) =>
      Effect.async<void>((resume) => {
        const millis = Duration.toMillis(duration)
        if (millis > MAX_TIMER_MILLIS) return // as globalClockScheduler: never fires
        const entry = { at: now + millis, wake: () => resume(Effect.void) }
        sleeps.push(entry)
        return Effect.sync(() => {
          const i = sleeps.indexOf(entry)
          if (i >= 0) sleeps.splice(i, 1)
        })
      })
  }
  const realPause = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 5)))
  /** Moves time to `target`, waking each due sleep in order and letting fibers (and I/O) settle in between. */
  const advanceTo = (target: number) =>
    Effect.gen(function*() {
      for (let i = 0; i < 3; i++) yield* realPause
      while (true) {
        sleeps.sort((a, b) => a.at - b.at)
        const next = sleeps[0]
        if (next === undefined || next.at > target) break
        sleeps.shift()
        now = Math.max(now, next.at)
        next.wake()
        for (let i = 0; i < 3; i++) yield* realPause
      }
      now = target
    })
  return { clock, advanceTo, now: () => now }
}
