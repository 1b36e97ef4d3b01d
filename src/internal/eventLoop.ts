import { Effect } from "effect"

/**
 * How long a consumer (a `process` worker, a `stream`) may hand jobs on back
 * to back without the event loop getting a turn. A drain whose every step
 * runs in place (SQLite's fused ack + claim, a handler that does not wait)
 * never reaches a real asynchronous boundary, and Effect's own yields did not
 * let the loop's timers run: 100 000 jobs held timers and I/O for 3.0-3.6 s
 * (measured), so the host's heartbeats, lock renewals and leader lease missed
 * their beats. Real time: it is the event loop's.
 */
export const turnEveryMillis = 10

/** One macrotask hop: timers and I/O due meanwhile run before the consumer goes on. */
export const eventLoopTurn = Effect.async<void>((resume) => {
  const pending = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(pending))
})
